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
Never worse than stock: where the kernel's module cannot be imported (one warning), no dispatch is kept; where a
launch raises (a compile failure, say), that call and later ones of its layer shape run upstream's kernel (one
warning per cause).
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
        from sglang_gemma4_dflash.attention import tuning

        tunings = os.environ.get(tuning.TUNING_ENV, "")
        rows = tuning.tuning_file_rows(tunings)  # a bad file stops the start here, naming the row
        kernel = load_kernel()
        if kernel is None:
            return result
        setattr(self, _DISPATCH, BlockDispatch(self.extend_attention_fwd, role, kernel))
        source = f" (tilings of {len(rows)} row(s) from {tunings})" if rows else ""
        logger.info("sglang-gemma4-dflash: block attention kernel on for the Gemma 4 DFLASH %s%s.", role, source)
    return result


def load_kernel():
    """The block kernel's module, or None (with one warning naming the cause) where it cannot be imported, e.g. a
    Triton without the names it uses: SGLang's extend kernel then serves every call, as in stock SGLang."""
    try:
        from sglang_gemma4_dflash.attention import block_kernel
    except Exception as e:  # an ImportError, or anything the module's Triton decorators raise
        logger.warning(
            "sglang-gemma4-dflash: the block attention kernel cannot be imported (%s: %s); SGLang's extend kernel "
            "serves the DFLASH verify and draft.",
            type(e).__name__,
            e,
        )
        return None
    return block_kernel


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

    def __init__(self, upstream, role: str, kernel):
        self.upstream = upstream
        self.role = role
        self.kernel = kernel  # the block_kernel module
        params = inspect.signature(inspect.unwrap(upstream)).parameters
        self.names = tuple(params)  # upstream's parameters in order, and their defaults: calls are bound by hand
        self.defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
        self.mask_is_causal = False  # DFLASH's verify mask (0.5.11-0.5.13): the whole context, the block causally
        self.declined: set[str] = set()  # why calls went to upstream's kernel
        self.served = 0  # calls the block kernel took (at capture, under CUDA graphs)
        self.failed: dict = {}  # layer shape -> the error its launch raised; such calls go to upstream's kernel
        self.call = torch.compiler.disable(self._call)
        self._forward_batch_at = None  # forward_batch's position among forward_extend's arguments after self

    def forward_batch_of(self, original, args, kwargs):
        if self._forward_batch_at is None:
            self._forward_batch_at = tuple(inspect.signature(original).parameters).index("forward_batch") - 1
        return args[self._forward_batch_at] if len(args) > self._forward_batch_at else kwargs["forward_batch"]

    def _call(self, *positional, **keywords):
        args = dict(self.defaults)
        args.update(zip(self.names, positional))
        args.update(keywords)
        reason = "more positional arguments than upstream's kernel takes" if len(positional) > len(self.names) else None
        reason = reason or decline_reason(args, self.mask_is_causal)
        if reason is None and self.failed:  # the shape string only once a launch has failed (a hot path otherwise)
            failed_before = self.failed.get(layer_shape(args))
            reason = failed_before and f"the block kernel failed here before ({failed_before})"
        if reason is not None:
            if reason not in self.declined:
                self.declined.add(reason)
                logger.info("sglang-gemma4-dflash: %s block runs SGLang's extend kernel: %s.", self.role, reason)
            return self.upstream(*positional, **keywords)
        try:
            self._run_block_kernel(args)
        except Exception as e:  # a compile or launch failure: this layer shape goes to upstream's kernel from now on
            shape = layer_shape(args)
            self.failed[shape] = f"{type(e).__name__}: {e}"
            logger.warning(
                "sglang-gemma4-dflash: the %s block's attention kernel failed for %s (%s); SGLang's extend kernel "
                "serves these layers.",
                self.role,
                shape,
                self.failed[shape],
            )
            return self.upstream(*positional, **keywords)
        self.served += 1
        return args["o_extend"]

    def _run_block_kernel(self, args: dict) -> None:
        q, o, k_buffer = args["q_extend"], args["o_extend"], args["k_buffer"]
        sm_scale = args["sm_scale"] or q.shape[-1] ** -0.5
        self.kernel.block_attention(
            q,
            args["k_extend"].view(q.shape[0], k_buffer.shape[1], -1),
            args["v_extend"].view(q.shape[0], k_buffer.shape[1], -1),
            o,
            k_buffer,
            args["v_buffer"],
            args["qo_indptr"],
            args["kv_indptr"],
            args["kv_indices"],
            max_block=int(args["max_len_extend"]),
            causal=bool(args["is_causal"]),
            sm_scale=float(sm_scale),
            window=int(args["sliding_window_size"]),
            k_scale=float(args["k_scale"]),
            v_scale=float(args["v_scale"]),
        )


def layer_shape(args: dict) -> str:
    """What tells a layer's launches apart for the failure record: head dims, heads and element types."""
    q, k_buffer, v_buffer = args["q_extend"], args["k_buffer"], args["v_buffer"]
    return (
        f"{q.shape[1]} query heads of {q.shape[-1]} over {k_buffer.shape[1]} KV heads of "
        f"{k_buffer.shape[-1]}/{v_buffer.shape[-1]} ({q.dtype}, cache {k_buffer.dtype}, "
        f"window {int(args['sliding_window_size'])})"
    )


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


def decline_reason(args: dict, mask_is_causal: bool) -> str | None:
    """Why the block kernel cannot serve this call of upstream's kernel (bound arguments), or None."""
    from sglang_gemma4_dflash.attention.block_kernel import MAX_BLOCK, cache_dtype_problem

    unknown = sorted(set(args) - KNOWN)
    if unknown:
        return f"arguments the block kernel does not know: {unknown}"
    missing = sorted(READ - set(args))
    if missing:
        return f"arguments the block kernel needs are missing: {missing}"
    for name, unused in UNUSED.items():
        value = args.get(name, unused)
        if (value is not None) if unused is None else bool(value) != unused:
            return f"{name} is set"
    q, k_buffer = args["q_extend"], args["k_buffer"]
    if args["custom_mask"] is not None and not mask_is_causal:
        return "a custom attention mask"
    if float(args["logit_cap"] or 0.0) > 0.0:
        return "a logit cap"
    if int(args["xai_temperature_len"] or -1) > 0:
        return "xai temperature scaling"
    if not 1 <= int(args["max_len_extend"]) <= MAX_BLOCK:
        return f"{args['max_len_extend']} block tokens (the kernel takes 1-{MAX_BLOCK})"
    if k_buffer.dim() != 3 or args["v_buffer"].dim() != 3:
        return f"a {k_buffer.dim()}-D paged KV buffer"
    why = cache_dtype_problem(q.dtype, args["k_extend"].dtype, args["v_extend"].dtype, k_buffer.dtype,
                              args["v_buffer"].dtype)  # fmt: skip
    if why:
        return why
    if q.shape[1] % k_buffer.shape[1]:
        return f"{q.shape[1]} query heads over {k_buffer.shape[1]} KV heads"
    for name in ("k_scale", "v_scale"):
        if isinstance(args[name], torch.Tensor):
            return f"{name} is a tensor"
    return None
