"""Stand-ins for the ``sgl_kernel`` names that SGLang's CPU engine imports but never calls here.

With ``SGLANG_USE_CPU_ENGINE=1`` some SGLang modules import CPU kernels from ``sgl_kernel`` at
module level (``if _is_cpu: from sgl_kernel import ...``). The ``sgl_kernel`` wheel on PyPI is the
CUDA build: it is not installed on a CPU machine, or it cannot load without a GPU. On the paths this
project runs on CPU (model construction, prefill/decode with the torch-native attention backend,
greedy generation without speculative decoding) none of these functions is ever called, only
imported. The module-level imports in SGLang 0.5.23, by importer:

    sglang/srt/mem_cache/allocation.py             assign_req_to_token_pool_cpu
    sglang/kernels/ops/kvcache/cache_move.py       copy_all_layer_kv_cache_cpu
    sglang/kernels/ops/speculative/spec_tree.py    build_tree_kernel_efficient_cpu, verify_tree_greedy_cpu
    sglang/kernels/ops/speculative/cache_locs.py   assign_draft_cache_locs_contiguous_cpu,
                                                   assign_extend_cache_locs_cpu
    sglang/kernels/ops/speculative/eagle.py        fill_accept_out_cache_loc_cpu, fill_bonus_tokens_cpu
    sglang/kernels/ops/speculative/multi_layer_eagle.py  rotate_input_ids_cpu

``install()`` puts a module named ``sgl_kernel`` holding exactly these names into ``sys.modules``.
Each one raises a RuntimeError naming itself if it is ever called, so a CPU run that reaches a
real kernel fails loudly instead of computing something wrong. Nothing installs it implicitly:
the tests call it, and so does ``python -m sglang_gemma4_dflash_testkit.cpu_server``.
"""

from __future__ import annotations

import importlib.util
import sys
import types

MODULE_NAME = "sgl_kernel"

STANDIN_NAMES = (
    "assign_req_to_token_pool_cpu",
    "copy_all_layer_kv_cache_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "rotate_input_ids_cpu",
)


def _standin(name: str):
    def kernel(*args, **kwargs):
        raise RuntimeError(
            f"sgl_kernel.{name} was called, but this process runs SGLang on CPU with stand-ins from "
            "sglang_gemma4_dflash_testkit.cpu_standins: the real CPU kernel is not installed. This code path "
            "(speculative decoding or KV-cache moves on CPU) is not supported here; run it on a GPU."
        )

    kernel.__name__ = name
    kernel.__qualname__ = name
    return kernel


def is_installed() -> bool:
    module = sys.modules.get(MODULE_NAME)
    return module is not None and getattr(module, "__sglang_gemma4_dflash_standin__", False)


def install() -> types.ModuleType:
    """Make ``from sgl_kernel import <name>`` work for ``STANDIN_NAMES``. Idempotent; returns the module.

    Refuses to shadow an ``sgl_kernel`` that is already imported, and one that is installed and
    loads (on a machine where the real kernels work, use them).
    """
    if is_installed():
        return sys.modules[MODULE_NAME]
    if MODULE_NAME in sys.modules:
        raise RuntimeError(
            "sgl_kernel is already imported (the real one); not replacing it with CPU stand-ins. "
            "Call sglang_gemma4_dflash_testkit.cpu_standins.install() before anything imports sgl_kernel, "
            "or do not call it at all where the real kernels load."
        )
    if importlib.util.find_spec(MODULE_NAME) is not None:
        try:
            importlib.import_module(MODULE_NAME)
        except Exception:  # the CUDA build fails to load without a GPU: fall through to stand-ins
            sys.modules.pop(MODULE_NAME, None)
        else:
            raise RuntimeError(
                "a working sgl_kernel is installed; not replacing it with CPU stand-ins. "
                "Do not call sglang_gemma4_dflash_testkit.cpu_standins.install() on this machine."
            )

    module = types.ModuleType(MODULE_NAME, "CPU stand-ins from sglang_gemma4_dflash_testkit.cpu_standins")
    module.__sglang_gemma4_dflash_standin__ = True
    for name in STANDIN_NAMES:
        setattr(module, name, _standin(name))
    sys.modules[MODULE_NAME] = module
    return module
