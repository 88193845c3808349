"""Cases and the fp32 torch reference for the block-attention kernel (tests and the GPU benchmark share them).

A case is laid out the way SGLang hands a verify to its attention backend: a paged KV cache whose slots are
shuffled, each request's context as a list of slots (``kv_indptr``/``kv_indices``), and the block's own tokens as
contiguous rows (``qo_indptr``) whose keys and values are also written to the cache.
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
) -> BlockCase:
    """Random case. ``window``: what SGLang passes for a sliding layer (-1: none); contexts are given whole
    (pass ``min(len, window)`` to mimic SGLang's window lists). ``k_eq_v``: one tensor serves as K and V."""
    v_dim = head_dim if k_eq_v else (v_dim or head_dim)
    gen = torch.Generator(device=device).manual_seed(seed)
    total_q, total_ctx = sum(block_lens), sum(ctx_lens)
    slots = total_ctx + total_q + spare_slots

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device=device).to(dtype)

    k_buffer = rand(slots, num_kv_heads, head_dim)
    v_buffer = k_buffer if k_eq_v else rand(slots, num_kv_heads, v_dim)
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
    )


def reference(case: BlockCase, k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """``[T, Hq, Dv]`` in fp32: softmax attention of each block token over its context and its block."""
    num_heads, num_kv_heads = case.q.shape[1], case.k_buffer.shape[1]
    group = num_heads // num_kv_heads
    out = torch.empty(case.q.shape[0], num_heads, case.v_buffer.shape[2], dtype=torch.float32, device=case.q.device)
    for b in range(case.qo_indptr.numel() - 1):
        q0, q1 = int(case.qo_indptr[b]), int(case.qo_indptr[b + 1])
        c0, c1 = int(case.kv_indptr[b]), int(case.kv_indptr[b + 1])
        if q1 == q0:
            continue
        slots = case.kv_indices[c0:c1]
        keys = torch.cat([case.k_buffer[slots], case.k_ext[q0:q1]]).float().repeat_interleave(group, dim=1)
        values = torch.cat([case.v_buffer[slots], case.v_ext[q0:q1]]).float().repeat_interleave(group, dim=1)
        ctx, n = c1 - c0, q1 - q0
        i = torch.arange(n, device=case.q.device)[:, None]
        key_pos = torch.arange(ctx + n, device=case.q.device)[None, :]  # context tokens, then the block
        visible = torch.ones(n, ctx + n, dtype=torch.bool, device=case.q.device)
        if case.causal:
            visible &= key_pos <= ctx + i
        if case.window >= 0:
            visible &= ctx + i - key_pos <= case.window
        scores = torch.einsum("qhd,khd->hqk", case.q[q0:q1].float(), keys) * (case.sm_scale * k_scale)
        scores = scores.masked_fill(~visible, float("-inf"))
        out[q0:q1] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values) * v_scale
    return out
