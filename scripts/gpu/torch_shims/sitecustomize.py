"""The torch 2.11 shim for sglang-kernel, in every Python process of the server, spawned children included.

On PYTHONPATH only when SGL_TORCH211_SHIM names the built library (scripts/gpu/torch_shims/build.sh). Just before
`sgl_kernel` is imported, it loads the shim with RTLD_GLOBAL after torch, so sgl_kernel's extension finds the five
symbols torch 2.11 lacks; after it and each of its submodules, it routes sgl_kernel's CUDA kernels from the key they
landed on (dispatch_keys.py) and says how many on stderr. An image's own sitecustomize still runs after it.
"""

import functools
import importlib.util
import os
import sys
from importlib.machinery import PathFinder

_SHIM = os.environ.get("SGL_TORCH211_SHIM")
_here = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def _dispatch_keys():
    spec = importlib.util.spec_from_file_location("dispatch_keys", os.path.join(_here, "dispatch_keys.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _route_after(exec_module):
    def exec_then_route(module):
        exec_module(module)
        routed = _dispatch_keys().route("sgl_kernel")
        if routed:
            print(f"torch211 shim: {len(routed)} sgl_kernel ops routed from the CPU key to CUDA", file=sys.stderr)

    return exec_then_route


class _LoadShimFirst:
    """Loads the shim before `sgl_kernel`; routes after it and after each of its submodules (some load more ops)."""

    shim_loaded = False

    def find_spec(self, name, path=None, target=None):
        if name != "sgl_kernel" and not name.startswith("sgl_kernel."):
            return None
        if not self.shim_loaded:
            import ctypes

            import torch  # noqa: F401  (libc10 and libtorch first: the shim links them)

            ctypes.CDLL(_SHIM, mode=ctypes.RTLD_GLOBAL)
            self.shim_loaded = True
        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader.exec_module = _route_after(spec.loader.exec_module)
        return spec


if _SHIM:
    sys.meta_path.insert(0, _LoadShimFirst())

_next = PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _next is not None and _next.loader is not None:
    _next.loader.exec_module(importlib.util.module_from_spec(_next))
