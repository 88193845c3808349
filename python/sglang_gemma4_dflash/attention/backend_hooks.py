"""Where SGLang's triton backend runs the block kernel: a Gemma 4 DFLASH target's verify and its DFlash draft's block.

Both forwards run in ``TARGET_VERIFY`` mode through ``TritonAttnBackend.forward_extend``, which calls the backend's
``self.extend_attention_fwd`` (upstream's extend kernel). Two AROUND hooks:

- ``init_backend`` (``__init__``): decide once per backend whether it serves a Gemma 4 DFLASH target or the DFlash
  draft of one, and keep a ``BlockDispatch`` on it;
- ``route_verify`` (``forward_extend``): in ``TARGET_VERIFY`` mode, such a backend's ``extend_attention_fwd`` is the
  dispatch for the duration of the call. The dispatch takes upstream's arguments and runs the block kernel, or hands
  the call back to upstream's kernel for anything the kernel does not do (logged once per reason).

Under CUDA graphs all of this runs once, at capture. ``SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION=0`` turns it off;
``SGLANG_GEMMA4_DFLASH_BLOCK_TUNING=FILE`` gives the kernel's tilings (read and checked when the backend is built).
"""

from __future__ import annotations

import inspect
import logging
import os

import torch

from sglang_gemma4_dflash.compat import runtime

logger = logging.getLogger(__name__)

ENV = "SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION"
_DISPATCH = "_sglang_gemma4_dflash_block_dispatch"
_gemma4_target_built = False  # a Gemma 4 DFLASH target's backend was built in this process (it precedes the draft's)


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def role_of(model_runner) -> str | None:
    """``"target"``, ``"draft"`` or None: which side of a Gemma 4 DFLASH server a model runner is."""
    global _gemma4_target_built
    if not runtime.runs_dflash(model_runner):
        return None
    if not model_runner.is_draft_worker:
        if runtime.is_gemma4_target(model_runner.model):
            _gemma4_target_built = True
            return "target"
        return None
    return "draft" if _gemma4_target_built and runtime.is_dflash_draft(model_runner.model) else None


def init_backend(original, self, *args, **kwargs):
    """Around ``TritonAttnBackend.__init__``."""
    result = original(self, *args, **kwargs)
    model_runner = inspect.signature(original).bind(self, *args, **kwargs).arguments["model_runner"]
    role = role_of(model_runner) if enabled() else None
    if role is not None:
        from sglang_gemma4_dflash.attention import block_kernel

        tunings = os.environ.get(block_kernel.TUNING_ENV, "")
        rows = block_kernel.tuning_file_rows(tunings)  # a bad file stops the start here, naming the row
        setattr(self, _DISPATCH, BlockDispatch(self.extend_attention_fwd, role))
        source = f" (tilings of {len(rows)} row(s) from {tunings})" if rows else ""
        logger.info("sglang-gemma4-dflash: block attention kernel on for the Gemma 4 DFLASH %s%s.", role, source)
    return result


def route_verify(original, self, *args, **kwargs):
    """Around ``TritonAttnBackend.forward_extend``."""
    dispatch = getattr(self, _DISPATCH, None)
    if dispatch is None:
        return original(self, *args, **kwargs)
    forward_batch = dispatch.forward_batch_of(original, args, kwargs)
    if not forward_batch.forward_mode.is_target_verify():
        return original(self, *args, **kwargs)
    dispatch.mask_is_causal = runtime.is_dflash_verify_input(forward_batch.spec_info)
    upstream = self.extend_attention_fwd
    self.extend_attention_fwd = dispatch.call
    try:
        return original(self, *args, **kwargs)
    finally:
        self.extend_attention_fwd = upstream


class BlockDispatch:
    """Upstream's ``extend_attention_fwd`` arguments in; the block kernel, or upstream's kernel, out."""

    def __init__(self, upstream, role: str):
        self.upstream = upstream
        self.role = role
        params = inspect.signature(inspect.unwrap(upstream)).parameters
        self.names = tuple(params)  # upstream's parameters in order, and their defaults: calls are bound by hand
        self.defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
        self.mask_is_causal = False  # DFLASH's verify mask (0.5.11-0.5.13): the whole context, the block causally
        self.declined: set[str] = set()  # why calls went to upstream's kernel
        self.served = 0  # calls the block kernel took (at capture, under CUDA graphs)
        self.call = torch.compiler.disable(self._call)
        self._forward_batch_at = None  # forward_batch's position among forward_extend's arguments after self

    def forward_batch_of(self, original, args, kwargs):
        if self._forward_batch_at is None:
            self._forward_batch_at = tuple(inspect.signature(original).parameters).index("forward_batch") - 1
        return args[self._forward_batch_at] if len(args) > self._forward_batch_at else kwargs["forward_batch"]

    def _call(self, *args, **kwargs):
        a = dict(self.defaults)
        a.update(zip(self.names, args))
        a.update(kwargs)
        reason = "more positional arguments than upstream's kernel takes" if len(args) > len(self.names) else None
        reason = reason or decline_reason(a, self.mask_is_causal)
        if reason is not None:
            if reason not in self.declined:
                self.declined.add(reason)
                logger.info("sglang-gemma4-dflash: %s block runs SGLang's extend kernel: %s.", self.role, reason)
            return self.upstream(*args, **kwargs)
        from sglang_gemma4_dflash.attention.block_kernel import block_attention

        self.served += 1
        q, o, k_buffer = a["q_extend"], a["o_extend"], a["k_buffer"]
        sm_scale = a["sm_scale"] or q.shape[-1] ** -0.5
        block_attention(
            q,
            a["k_extend"].view(q.shape[0], k_buffer.shape[1], -1),
            a["v_extend"].view(q.shape[0], k_buffer.shape[1], -1),
            o,
            k_buffer,
            a["v_buffer"],
            a["qo_indptr"],
            a["kv_indptr"],
            a["kv_indices"],
            max_block=int(a["max_len_extend"]),
            causal=bool(a["is_causal"]),
            sm_scale=float(sm_scale),
            window=int(a["sliding_window_size"]),
            k_scale=float(a["k_scale"]),
            v_scale=float(a["v_scale"]),
        )
        return o


# Arguments of upstream's kernel the block kernel does not implement, and the value that means "not used".
UNUSED = {
    "sinks": None,
    "lse_extend": None,
    "skip_prefix": False,
    "skip_extend": False,
    "score_mod": None,
    "aux_tensors": None,
    "identity_kv_indices": False,
}
READ = {
    "q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr", "kv_indices",
    "custom_mask", "is_causal", "max_len_extend", "k_scale", "v_scale", "sm_scale", "logit_cap",
    "sliding_window_size", "xai_temperature_len",
}  # fmt: skip
KNOWN = {
    "q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr", "kv_indices",
    "custom_mask", "is_causal", "mask_indptr", "max_len_extend", "k_scale", "v_scale", "sm_scale", "logit_cap",
    "skip_prefix_custom_mask", "sliding_window_size", "window_kv_offsets", "xai_temperature_len", "page_size",
    "extend_seq_lens_cpu", *UNUSED,
}  # fmt: skip


def decline_reason(a: dict, mask_is_causal: bool) -> str | None:
    """Why the block kernel cannot serve this call of upstream's kernel (bound arguments), or None."""
    from sglang_gemma4_dflash.attention.block_kernel import MAX_BLOCK

    unknown = sorted(set(a) - KNOWN)
    if unknown:
        return f"arguments the block kernel does not know: {unknown}"
    missing = sorted(READ - set(a))
    if missing:
        return f"arguments the block kernel needs are missing: {missing}"
    for name, unused in UNUSED.items():
        value = a.get(name, unused)
        if (value is not None) if unused is None else bool(value) != unused:
            return f"{name} is set"
    q, k_buffer = a["q_extend"], a["k_buffer"]
    if a["custom_mask"] is not None and not mask_is_causal:
        return "a custom attention mask"
    if float(a["logit_cap"] or 0.0) > 0.0:
        return "a logit cap"
    if int(a["xai_temperature_len"] or -1) > 0:
        return "xai temperature scaling"
    if not 1 <= int(a["max_len_extend"]) <= MAX_BLOCK:
        return f"{a['max_len_extend']} block tokens (the kernel takes 1-{MAX_BLOCK})"
    if k_buffer.dim() != 3 or a["v_buffer"].dim() != 3:
        return f"a {k_buffer.dim()}-D paged KV buffer"
    if k_buffer.dtype != q.dtype or a["v_buffer"].dtype != q.dtype:
        return f"KV cache in {k_buffer.dtype} with queries in {q.dtype}"
    if q.shape[1] % k_buffer.shape[1]:
        return f"{q.shape[1]} query heads over {k_buffer.shape[1]} KV heads"
    for name in ("k_scale", "v_scale"):
        if isinstance(a[name], torch.Tensor):
            return f"{name} is a tensor"
    return None
