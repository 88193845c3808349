"""SGLang's own ``TritonAttnBackend.forward_extend`` on one verify layer, with and without the plugin's routing.

The backend is the installed line's real class, its ``forward_extend`` unchanged and its ``extend_attention_fwd``
upstream's kernel; only what ``forward_extend`` reads is set on it (the metadata, a pool holding the case's
buffers, the line's switches, all off), since building a whole ``ModelRunner`` needs a GPU. Triton kernels run
under the interpreter on CPU.

    python -m sglang_gemma4_dflash_testkit.verify_backend     # prints one JSON line per case (used on 0.5.13)
"""

from __future__ import annotations

import importlib
import json
import sys
from types import SimpleNamespace

import torch

from sglang_gemma4_dflash_testkit.block_attention_ref import BlockCase, make_case, reference

EXTEND_MODULES = (
    "sglang.kernels.ops.attention.extend_attention",
    "sglang.srt.layers.attention.triton_ops.extend_attention",
)


def upstream_extend_kernel():
    for name in EXTEND_MODULES:
        try:
            return importlib.import_module(name).extend_attention_fwd
        except ImportError:
            continue
    raise ImportError(f"none of {EXTEND_MODULES} in this SGLang")


class CasePool:
    """The KV pool's reading side over one case's buffers."""

    def __init__(self, case: BlockCase):
        self.case = case

    def get_key_buffer(self, layer_id):
        return self.case.k_buffer

    def get_value_buffer(self, layer_id):
        return self.case.v_buffer

    def get_kv_buffer(self, layer_id):
        return self.case.k_buffer, self.case.v_buffer


def backend_for(case: BlockCase, *, dflash_mask: bool):
    """A real ``TritonAttnBackend`` (not initialised) holding the case as its verify metadata."""
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    backend = TritonAttnBackend.__new__(TritonAttnBackend)
    n = case.max_block
    mask = None
    if dflash_mask:  # what 0.5.11-0.5.13 build for a DFLASH verify: the whole context, the block causally
        lens = (case.kv_indptr[1:] - case.kv_indptr[:-1]).tolist()
        mask = torch.cat([(torch.arange(c + n)[None, :] <= c + torch.arange(n)[:, None]).flatten() for c in lens])
    indptr, indices = case.kv_indptr, case.kv_indices
    backend.forward_metadata = SimpleNamespace(
        qo_indptr=case.qo_indptr,
        kv_indptr=indptr,
        kv_indices=indices,
        window_kv_indptr=indptr,
        window_kv_indices=indices,
        window_kv_offsets=torch.zeros(case.qo_indptr.numel() - 1, dtype=torch.int32),
        custom_mask=mask,
        mask_indptr=torch.cat([torch.zeros(1, dtype=torch.int64), (n * ((indptr[1:] - indptr[:-1]) + n)).cumsum(0)]),
        max_extend_len=n,
        swa_out_cache_loc=None,
    )
    switches = (
        "use_dense_fp8_chunked_prefill use_verify_shared_kv use_verify_splitkv enable_deterministic "
        "allow_bidirectional_attention_in_extend use_sliding_window_kv_pool use_mla"
    )
    for name in switches.split():
        setattr(backend, name, False)
    backend.dcp_size = 1
    backend.page_size = 1
    backend.dllm_attention = None
    backend.token_to_kv_pool = CasePool(case)
    backend.extend_attention_fwd = torch.compiler.disable(upstream_extend_kernel())
    return backend


def layer_for(case: BlockCase, scale_type=float):
    """The case's layer; its cache scales (where not 1, or an fp8 cache) as SGLang's KV-cache quantization method
    leaves them: ``k_scale`` a tensor, ``k_scale_float`` a ``scale_type``."""
    from sglang.srt.layers.radix_attention import AttentionType, RadixAttention

    layer = RadixAttention(
        case.q.shape[1],
        case.q.shape[2],
        case.sm_scale,
        case.k_buffer.shape[1],
        layer_id=0,
        v_head_dim=case.v_buffer.shape[2],
        sliding_window_size=case.window,
        attn_type=AttentionType.DECODER if case.causal else AttentionType.ENCODER_ONLY,
    )
    if case.k_scale != 1.0 or case.v_scale != 1.0 or case.k_buffer.element_size() == 1:
        layer.k_scale, layer.v_scale = torch.tensor(case.k_scale), torch.tensor(case.v_scale)
        layer.k_scale_float, layer.v_scale_float = scale_type(case.k_scale), scale_type(case.v_scale)
    return layer


def forward_batch(mode: str, spec_info=None):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return SimpleNamespace(
        forward_mode=getattr(ForwardMode, mode),
        spec_info=spec_info,
        extend_seq_lens_cpu=None,
        mha_one_shot=False,
        attn_attend_prefix_cache=None,
        out_cache_loc=None,
    )


def dflash_verify_input():
    """An instance of the line's DFLASH verify spec-info class (only its type is read)."""
    from sglang.srt.speculative.dflash_info import DFlashVerifyInput

    return DFlashVerifyInput.__new__(DFlashVerifyInput)


def run(
    case: BlockCase,
    *,
    mode: str = "TARGET_VERIFY",
    role: str = "target",
    dflash_mask: bool = False,
    spec_info=None,
    scale_type=float,
    dispatch=None,
    **forward_kwargs,
):
    """(output with the plugin's routing, output of upstream alone, the dispatch) for one layer's forward_extend.
    ``dispatch``: one from an earlier call (its records go on), else a new one."""
    kwargs = dict(mode=mode, dflash_mask=dflash_mask, spec_info=spec_info, scale_type=scale_type, **forward_kwargs)
    upstream = forward(case, None, **kwargs)
    dispatch = dispatch or dispatch_for(role)
    return forward(case, dispatch, **kwargs), upstream, dispatch


def forward(
    case: BlockCase,
    dispatch,
    *,
    mode: str = "TARGET_VERIFY",
    dflash_mask: bool = False,
    spec_info=None,
    scale_type=float,
    **forward_kwargs,
) -> torch.Tensor:
    """One layer's forward_extend on a fresh backend: routed through ``dispatch`` (the plugin's hook), or upstream's
    alone (None)."""
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang_gemma4_dflash.attention.backend_hooks import _DISPATCH, route_verify

    layer, batch = layer_for(case, scale_type), forward_batch(mode, spec_info)
    backend = backend_for(case, dflash_mask=dflash_mask)
    args = (case.q, case.k_ext, case.v_ext, layer, batch)
    if dispatch is None:
        return backend.forward_extend(*args, save_kv_cache=False, **forward_kwargs)
    dispatch.upstream = backend.extend_attention_fwd
    setattr(backend, _DISPATCH, dispatch)
    try:
        return route_verify(TritonAttnBackend.forward_extend, backend, *args, save_kv_cache=False, **forward_kwargs)
    finally:
        assert backend.extend_attention_fwd is not dispatch.call, "the routing outlived its call"


def dispatch_for(role: str = "target"):
    """A block dispatch over upstream's extend kernel, as the plugin keeps one on a Gemma 4 DFLASH backend."""
    from sglang_gemma4_dflash.attention.backend_hooks import BlockDispatch, load_kernel

    return BlockDispatch(torch.compiler.disable(upstream_extend_kernel()), role, load_kernel())


def main() -> None:
    """The cases the 0.5.13 test reads: each line a JSON record."""
    from sglang_gemma4_dflash_testkit import sglang_cpu

    sglang_cpu.use_cpu_engine()
    sglang_cpu.init_tp1()
    cases = {
        "sliding-window-lists": make_case([7, 12, 12], [8, 8, 8], num_heads=4, num_kv_heads=2, head_dim=32, window=12),
        "global": make_case([30, 0, 45], [8, 8, 8], num_heads=8, num_kv_heads=1, head_dim=64),
        "draft-noncausal": make_case([30, 9], [8, 8], num_heads=4, num_kv_heads=1, head_dim=32, causal=False),
    }
    for name, case in cases.items():
        mask = case.causal  # 0.5.13's DFLASH verify carries its causal mask; its draft block carries none
        hooked, upstream, dispatch = run(case, dflash_mask=mask, spec_info=dflash_verify_input() if mask else None)
        ref = reference(case)
        record = {
            "case": name,
            "served": dispatch.served,
            "declined": sorted(dispatch.declined),
            "err_hooked": ((hooked.view_as(ref) - ref).norm() / ref.norm()).item(),
            "err_upstream": ((upstream.view_as(ref) - ref).norm() / ref.norm()).item(),
        }
        print(json.dumps(record), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
