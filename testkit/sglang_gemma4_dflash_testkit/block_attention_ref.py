"""Cases and the fp32 torch reference for the block-attention kernel (tests and the GPU benchmark share them).

A case is laid out the way SGLang hands a verify to its attention backend: a paged KV cache whose slots are
shuffled, each request's context as a list of slots (``kv_indptr``/``kv_indices``), and the block's own tokens as
contiguous rows (``qo_indptr``) whose keys and values are also written to the cache.

An fp8 cache is written as SGLang's ``MHATokenToKVPool.set_kv_buffer`` writes it (keys divided by ``k_scale``,
values by ``v_scale``, saturated, cast), while the block's own keys and values stay unquantized; the reference
reads it as SGLang's triton extend kernel does (see ``reference``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BlockCase:
    q: torch.Tensor  # [T, Hq, D]
    k_ext: torch.Tensor  # [T, Hkv, D]
    v_ext: torch.Tensor  # [T, Hkv, Dv]
    k_buffer: torch.Tensor  # [slots, Hkv, D]
    v_buffer: torch.Tensor  # [slots, Hkv, Dv]
    qo_indptr: torch.Tensor  # [B + 1] int32
    kv_indptr: torch.Tensor  # [B + 1] int32
    kv_indices: torch.Tensor  # int64 slots of the contexts
    ext_slots: torch.Tensor  # int64 slots the block tokens were written to
    max_block: int
    causal: bool
    sm_scale: float
    window: int
    k_scale: float = 1.0  # the cache's dequantisation scales (the layer's k_scale_float / v_scale_float)
    v_scale: float = 1.0

    def kernel_args(self) -> tuple:
        return (
            self.q,
            self.k_ext,
            self.v_ext,
            torch.full(
                (self.q.shape[0], self.q.shape[1], self.v_ext.shape[2]),
                float("nan"),
                dtype=self.q.dtype,
                device=self.q.device,
            ),
            self.k_buffer,
            self.v_buffer,
            self.qo_indptr,
            self.kv_indptr,
            self.kv_indices,
        )


def _indptr(lengths: list[int], device) -> torch.Tensor:
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32, device=device)


def make_case(
    ctx_lens: list[int],
    block_lens: list[int],
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    v_dim: int | None = None,
    causal: bool = True,
    window: int = -1,
    k_eq_v: bool = False,
    sm_scale: float | None = None,
    dtype=torch.float32,
    device="cpu",
    seed: int = 0,
    spare_slots: int = 7,
    kv_dtype=None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    amplitude: float = 1.0,
) -> BlockCase:
    """Random case. ``window``: what SGLang passes for a sliding layer (-1: none); contexts are given whole
    (pass ``min(len, window)`` to mimic SGLang's window lists). ``k_eq_v``: one tensor serves as K and V (two
    buffers in fp8 where the scales differ). ``kv_dtype``: the cache's type (an fp8 one: quantized with the scales);
    ``amplitude``: the keys' and values' spread."""
    v_dim = head_dim if k_eq_v else (v_dim or head_dim)
    gen = torch.Generator(device=device).manual_seed(seed)
    total_q, total_ctx = sum(block_lens), sum(ctx_lens)
    slots = total_ctx + total_q + spare_slots

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device=device).to(dtype)

    k_buffer = rand(slots, num_kv_heads, head_dim) * amplitude
    v_buffer = k_buffer if k_eq_v else rand(slots, num_kv_heads, v_dim) * amplitude
    perm = torch.randperm(slots, generator=gen, device=device)
    kv_indices, ext_slots = [], []
    used = 0
    for ctx, blk in zip(ctx_lens, block_lens):
        kv_indices.append(perm[used : used + ctx])
        ext_slots.append(perm[used + ctx : used + ctx + blk])
        used += ctx + blk
    ext = torch.cat(ext_slots).long()
    k_ext = k_buffer[ext].clone()
    v_ext = k_ext if k_eq_v else v_buffer[ext].clone()
    if kv_dtype is not None and kv_dtype != dtype:
        k_cache = quantize(k_buffer, k_scale, kv_dtype)
        v_cache = k_cache if k_eq_v and k_scale == v_scale else quantize(v_buffer, v_scale, kv_dtype)
        k_buffer, v_buffer = k_cache, v_cache
    return BlockCase(
        q=rand(total_q, num_heads, head_dim),
        k_ext=k_ext,
        v_ext=v_ext,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        qo_indptr=_indptr(block_lens, device),
        kv_indptr=_indptr(ctx_lens, device),
        kv_indices=torch.cat(kv_indices).long() if kv_indices else torch.zeros(0, dtype=torch.long, device=device),
        ext_slots=ext,
        max_block=max(block_lens),
        causal=causal,
        sm_scale=head_dim**-0.5 if sm_scale is None else sm_scale,
        window=window,
        k_scale=k_scale,
        v_scale=v_scale,
    )


def quantize(x: torch.Tensor, scale: float, dtype) -> torch.Tensor:
    """``x`` as SGLang's KV pool stores it in an fp8 ``dtype``: divided by the scale, saturated, cast."""
    info = torch.finfo(dtype)
    return (x.float() / scale).clamp(-info.max, info.max).to(dtype)


def is_fp8(dtype) -> bool:
    return dtype in (torch.float8_e4m3fn, torch.float8_e5m2)


def reference(case: BlockCase) -> torch.Tensor:
    """``[T, Hq, Dv]`` in fp32: softmax attention of each block token over its context and its block. The
    context's scores are scaled by ``k_scale`` and its values by ``v_scale`` (the block's own by neither), and
    against an fp8 cache q is first cast to the cache's type (saturated), as SGLang's extend kernel casts it for
    that dot. (Its fp8 cast of the softmax weights is not modelled: the tests' tolerance covers it.)"""
    num_heads, num_kv_heads = case.q.shape[1], case.k_buffer.shape[1]
    group = num_heads // num_kv_heads
    q_ctx = case.q.float()
    if is_fp8(case.k_buffer.dtype):
        q_ctx = quantize(case.q, 1.0, case.k_buffer.dtype).float()
    out = torch.empty(case.q.shape[0], num_heads, case.v_buffer.shape[2], dtype=torch.float32, device=case.q.device)
    for b in range(case.qo_indptr.numel() - 1):
        q0, q1 = int(case.qo_indptr[b]), int(case.qo_indptr[b + 1])
        c0, c1 = int(case.kv_indptr[b]), int(case.kv_indptr[b + 1])
        if q1 == q0:
            continue
        slots = case.kv_indices[c0:c1]
        ctx_keys = case.k_buffer[slots].float().repeat_interleave(group, dim=1)
        blk_keys = case.k_ext[q0:q1].float().repeat_interleave(group, dim=1)
        values = torch.cat([case.v_buffer[slots].float() * case.v_scale, case.v_ext[q0:q1].float()])
        values = values.repeat_interleave(group, dim=1)
        ctx, n = c1 - c0, q1 - q0
        i = torch.arange(n, device=case.q.device)[:, None]
        key_pos = torch.arange(ctx + n, device=case.q.device)[None, :]  # context tokens, then the block
        visible = torch.ones(n, ctx + n, dtype=torch.bool, device=case.q.device)
        if case.causal:
            visible &= key_pos <= ctx + i
        if case.window >= 0:
            visible &= ctx + i - key_pos <= case.window
        ctx_scores = torch.einsum("qhd,khd->hqk", q_ctx[q0:q1], ctx_keys) * (case.sm_scale * case.k_scale)
        blk_scores = torch.einsum("qhd,khd->hqk", case.q[q0:q1].float(), blk_keys) * case.sm_scale
        scores = torch.cat([ctx_scores, blk_scores], dim=-1).masked_fill(~visible, float("-inf"))
        out[q0:q1] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values)
    return out


def exact_interpreter_fp8_casts(monkeypatch) -> None:
    """Under Triton's interpreter, make fp8 casts round as a GPU's do (ties to even, saturated): the interpreter's
    own does not carry a rounded-up mantissa into the exponent (1.94 becomes 1.0 in e4m3), which SGLang's extend
    kernel's casts of q and of the softmax weights meet. (The block kernel rounds first under the interpreter.)"""
    import numpy as np
    from triton.runtime import interpreter

    original = interpreter._convert_float
    fp8 = {"fp8e4nv": torch.float8_e4m3fn, "fp8e5": torch.float8_e5m2}

    def convert(input, input_dtype, output_dtype, rounding_mode):
        if output_dtype.name not in fp8 or input_dtype.name not in ("fp32", "fp16"):
            return original(input, input_dtype, output_dtype, rounding_mode)
        dtype = fp8[output_dtype.name]
        info = torch.finfo(dtype)
        values = torch.from_numpy(np.ascontiguousarray(input).astype(np.float32)).clamp(-info.max, info.max)
        return values.to(dtype).view(torch.uint8).numpy().reshape(input.shape)

    monkeypatch.setattr(interpreter, "_convert_float", convert)
