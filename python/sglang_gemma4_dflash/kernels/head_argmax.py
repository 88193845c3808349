"""Argmax over a block of LM-head rows: for each token, the largest logit and its row.

Contract (shared by the Triton kernel and the torch reference):

    rows_argmax(hidden_states [N, H], weight [V, H], row_start, row_end, out_max [N] f32, out_idx [N] i64)

scores every token against ``weight[row_start:row_end]``, rounds each logit to ``weight.dtype``
(the value ``hidden_states @ weight.T`` would hold in that dtype), and writes the largest one and
the *absolute* row index (within ``weight``) of its first occurrence, so equal values go to the
lowest id. Shapes are static and nothing reads back to the host, so a call can be captured in a
CUDA graph.

The Triton path reads the weight rows once per call however many tokens there are:

1. ``_partials_kernel``: each program owns ``BLOCK_V`` rows and ``BLOCK_T`` tokens, accumulates the
   ``[BLOCK_V, BLOCK_T]`` logits tile in fp32 over the hidden dimension (``tl.dot``), rounds it to
   the weight dtype and keeps, per token, the tile's (max, first row). Programs that share a row
   block run next to each other, so the weight tile is fetched from HBM once and the other token
   blocks find it in L2.
2. ``_merge_kernel``: per token, the largest partial max, then the lowest row among equal maxima.

Between 129 and 512 tokens ``rows_argmax`` takes ``rows_argmax_reference`` instead (one cuBLAS
GEMM per row block, logits block capped at 256 MB): measured faster there than the fused kernel.

``rows_argmax_reference`` is the same contract in plain torch, looping over row blocks with a
running merge (CPU or GPU); it is also the fallback where Triton is unavailable.
Figures and tuning: docs/draft_head_perf.md.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

try:  # Triton is optional: the package must import on machines without it (and without CUDA).
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - depends on the environment
    triton = None
    tl = None
try:  # host-side TMA descriptors (Triton >= 3.4); the pointer kernel is used without them
    from triton.tools.tensor_descriptor import TensorDescriptor
except Exception:  # pragma: no cover - depends on the environment
    TensorDescriptor = None

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_INT32_MAX = 2**31 - 1


class Config(NamedTuple):
    """Tile shape of the partials kernel (``block_t`` is a power of two >= 16)."""

    block_v: int  # weight rows per program
    block_t: int  # tokens per program
    block_k: int  # hidden columns per pipeline stage
    num_warps: int
    num_stages: int
    tma: bool = False  # load tiles with the tensor-memory accelerator (16-bit dtypes only)


# Tile shapes by token count, tuned on an H200 at Gemma-4-31B shapes (H=5376, V=262144, bf16);
# see docs/draft_head_perf.md. Few tokens: the weight read dominates, one token block per program.
# Many tokens: a GEMM with the argmax in its epilogue, tiles loaded by the copy engine (TMA).
_TABLE = (
    (16, Config(256, 16, 128, 8, 3)),
    (32, Config(128, 32, 128, 4, 4)),
    (64, Config(128, 64, 128, 4, 4)),
    (128, Config(128, 128, 64, 8, 4, True)),
    (256, Config(128, 256, 64, 8, 4, True)),
)
_MANY = Config(256, 128, 64, 8, 3, True)
# Between these token counts one cuBLAS GEMM per row block plus torch's max is faster than the
# fused kernel (its logits block is capped at _CUBLAS_WORKSPACE_BYTES).
_CUBLAS_TOKENS = (129, 512)
_CUBLAS_WORKSPACE_BYTES = 256 << 20


def config_for(num_tokens: int, dtype: torch.dtype) -> Config:
    """Tile shape of the fused kernel for ``num_tokens`` tokens."""
    cfg = next((c for limit, c in _TABLE if num_tokens <= limit), _MANY)
    if dtype == torch.float32:  # 4-byte tiles: halve the stage so shared memory still fits
        cfg = cfg._replace(block_k=cfg.block_k // 2, num_stages=min(cfg.num_stages, 3), tma=False)
    return cfg


def uses_cublas(num_tokens: int) -> bool:
    """True where ``rows_argmax`` takes the cuBLAS path instead of the fused kernel."""
    return _CUBLAS_TOKENS[0] <= num_tokens <= _CUBLAS_TOKENS[1]


def supports(hidden_states: torch.Tensor, weight: torch.Tensor) -> bool:
    """True when ``rows_argmax`` can run the Triton kernel on these tensors."""
    return (
        triton is not None
        and isinstance(hidden_states, torch.Tensor)
        and isinstance(weight, torch.Tensor)
        and hidden_states.is_cuda
        and weight.is_cuda
        and hidden_states.device == weight.device
        and hidden_states.layout == torch.strided
        and weight.layout == torch.strided
        and weight.dtype in _FLOAT_DTYPES
        and hidden_states.dtype == weight.dtype
        and hidden_states.dim() == 2
        and weight.dim() == 2
        and hidden_states.shape[1] == weight.shape[1]
        and hidden_states.stride(1) == 1
        and weight.stride(1) == 1
    )


def _check(hidden_states, weight, row_start, row_end, out_max, out_idx) -> None:
    if hidden_states.dim() != 2 or weight.dim() != 2 or hidden_states.shape[1] != weight.shape[1]:
        raise ValueError(
            f"rows_argmax: hidden_states {tuple(hidden_states.shape)} and weight {tuple(weight.shape)} "
            "must be [N, H] and [V, H] with the same H"
        )
    if not 0 <= row_start < row_end <= weight.shape[0]:
        raise ValueError(
            f"rows_argmax: row range [{row_start}, {row_end}) must be non-empty and inside "
            f"[0, {weight.shape[0]})"
        )
    n = hidden_states.shape[0]
    if out_max.shape != (n,) or out_max.dtype != torch.float32:
        raise ValueError(f"rows_argmax: out_max must be float32 of shape ({n},), got {out_max.dtype} {tuple(out_max.shape)}")
    if out_idx.shape != (n,) or out_idx.dtype != torch.int64:
        raise ValueError(f"rows_argmax: out_idx must be int64 of shape ({n},), got {out_idx.dtype} {tuple(out_idx.shape)}")


def rows_argmax_reference(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    row_start: int,
    row_end: int,
    out_max: torch.Tensor,
    out_idx: torch.Tensor,
    block_rows: int = 16384,
) -> None:
    """The ``rows_argmax`` contract in plain torch (any device): row blocks, running merge."""
    _check(hidden_states, weight, row_start, row_end, out_max, out_idx)
    starts = list(range(row_start, row_end, block_rows))
    n = hidden_states.shape[0]
    block_max = torch.empty((len(starts), n), dtype=weight.dtype, device=hidden_states.device)
    block_idx = torch.empty((len(starts), n), dtype=torch.int64, device=hidden_states.device)
    for b, r0 in enumerate(starts):
        r1 = min(r0 + block_rows, row_end)
        logits = hidden_states @ weight[r0:r1].T  # rounded to the weight dtype, like the oracle
        torch.max(logits, dim=-1, out=(block_max[b], block_idx[b]))
        block_idx[b] += r0
    best, which = torch.max(block_max, dim=0)  # first (lowest) block among equal maxima
    out_max.copy_(best)
    out_idx.copy_(block_idx.gather(0, which[None]).squeeze(0))


if triton is not None:
    _NO_ROW = tl.constexpr(_INT32_MAX)  # a global seen inside @triton.jit must be a constexpr

    @triton.jit
    def _partials_kernel(
        X, W, PMAX, PIDX,
        n_tokens, row_start, row_end, hidden, stride_x, stride_w, num_tblocks,
        BLOCK_V: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr,
        EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
    ):
        pid = tl.program_id(0)
        pid_t = pid % num_tblocks  # token blocks of one row block are neighbours: W tile hits L2
        pid_v = pid // num_tblocks
        rows = row_start + pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
        toks = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
        ks = tl.arange(0, BLOCK_K)
        # Clamp instead of masking: every load is in bounds and unmasked; the extra rows/tokens are
        # dropped below.
        rows_ld = tl.minimum(rows, row_end - 1).to(tl.int64)
        toks_ld = tl.minimum(toks, n_tokens - 1).to(tl.int64)
        w_ptrs = W + rows_ld[:, None] * stride_w + ks[None, :]
        x_ptrs = X + toks_ld[:, None] * stride_x + ks[None, :]
        acc = tl.zeros((BLOCK_V, BLOCK_T), dtype=tl.float32)
        for k in range(0, hidden, BLOCK_K):
            if EVEN_K:
                w = tl.load(w_ptrs)
                x = tl.load(x_ptrs)
            else:
                kmask = (k + ks) < hidden
                w = tl.load(w_ptrs, mask=kmask[None, :], other=0.0)
                x = tl.load(x_ptrs, mask=kmask[None, :], other=0.0)
            acc = tl.dot(w, tl.trans(x), acc, input_precision=PRECISION)
            w_ptrs += BLOCK_K
            x_ptrs += BLOCK_K
        vals = acc.to(W.dtype.element_ty).to(tl.float32)  # the logit as the weight dtype holds it
        vals = tl.where((rows < row_end)[:, None], vals, float("-inf"))
        best = tl.max(vals, axis=0)
        first = tl.min(tl.where(vals == best[None, :], rows[:, None], _NO_ROW), axis=0)
        offs = pid_v * n_tokens + toks
        tmask = toks < n_tokens
        tl.store(PMAX + offs, best, mask=tmask)
        tl.store(PIDX + offs, first, mask=tmask)

    @triton.jit
    def _partials_tma_kernel(
        w_desc, x_desc, PMAX, PIDX,
        n_tokens, row_start, n_rows, hidden, num_tblocks,
        BLOCK_V: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        # Same as _partials_kernel; the descriptors cover weight[row_start:row_end] and the tokens,
        # and the copy engine zero-fills whatever lies past their edges.
        pid = tl.program_id(0)
        pid_t = pid % num_tblocks
        pid_v = pid // num_tblocks
        v0 = pid_v * BLOCK_V
        t0 = pid_t * BLOCK_T
        acc = tl.zeros((BLOCK_V, BLOCK_T), dtype=tl.float32)
        for k in range(0, hidden, BLOCK_K):
            w = w_desc.load([v0, k])
            x = x_desc.load([t0, k])
            acc = tl.dot(w, tl.trans(x), acc)
        rel = v0 + tl.arange(0, BLOCK_V)
        rows = row_start + rel
        vals = acc.to(w_desc.dtype).to(tl.float32)
        vals = tl.where((rel < n_rows)[:, None], vals, float("-inf"))
        best = tl.max(vals, axis=0)
        first = tl.min(tl.where(vals == best[None, :], rows[:, None], _NO_ROW), axis=0)
        toks = t0 + tl.arange(0, BLOCK_T)
        offs = pid_v * n_tokens + toks
        tmask = toks < n_tokens
        tl.store(PMAX + offs, best, mask=tmask)
        tl.store(PIDX + offs, first, mask=tmask)

    @triton.jit
    def _merge_kernel(
        PMAX, PIDX, OUT_MAX, OUT_IDX, n_tokens, num_vblocks,
        BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr,
    ):
        toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        tmask = toks < n_tokens
        best = tl.full((BLOCK_T,), float("-inf"), tl.float32)
        first = tl.full((BLOCK_T,), _NO_ROW, tl.int32)
        for b0 in range(0, num_vblocks, BLOCK_B):
            bs = b0 + tl.arange(0, BLOCK_B)
            mask = (bs < num_vblocks)[:, None] & tmask[None, :]
            offs = bs[:, None] * n_tokens + toks[None, :]
            m = tl.load(PMAX + offs, mask=mask, other=float("-inf"))
            i = tl.load(PIDX + offs, mask=mask, other=_NO_ROW)
            tile_best = tl.max(m, axis=0)
            tile_first = tl.min(tl.where(m == tile_best[None, :], i, _NO_ROW), axis=0)
            first = tl.where(
                tile_best > best, tile_first,
                tl.where(tile_best == best, tl.minimum(first, tile_first), first),
            )
            best = tl.maximum(best, tile_best)
        tl.store(OUT_MAX + toks, best, mask=tmask)
        tl.store(OUT_IDX + toks, first.to(tl.int64), mask=tmask)


def _tma_ok(hidden_states, weight) -> bool:
    """The copy engine needs 16-byte aligned bases and row strides; used for 16-bit dtypes only."""
    size = weight.element_size()
    return (
        TensorDescriptor is not None
        and size == 2
        and weight.data_ptr() % 16 == 0
        and hidden_states.data_ptr() % 16 == 0
        and (weight.stride(0) * size) % 16 == 0
        and (hidden_states.stride(0) * size) % 16 == 0
    )


def launch(hidden_states, weight, row_start, row_end, out_max, out_idx, config: Config) -> None:
    """``rows_argmax`` with an explicit tile shape (benchmarks and tuning use this)."""
    n, hidden = hidden_states.shape
    if n == 0:
        return
    num_vblocks = triton.cdiv(row_end - row_start, config.block_v)
    num_tblocks = triton.cdiv(n, config.block_t)
    pmax = torch.empty((num_vblocks, n), dtype=torch.float32, device=hidden_states.device)
    pidx = torch.empty((num_vblocks, n), dtype=torch.int32, device=hidden_states.device)
    grid = (num_vblocks * num_tblocks,)
    if config.tma and _tma_ok(hidden_states, weight):
        w_desc = TensorDescriptor.from_tensor(weight[row_start:row_end], [config.block_v, config.block_k])
        x_desc = TensorDescriptor.from_tensor(hidden_states, [config.block_t, config.block_k])
        _partials_tma_kernel[grid](
            w_desc, x_desc, pmax, pidx, n, row_start, row_end - row_start, hidden, num_tblocks,
            BLOCK_V=config.block_v, BLOCK_T=config.block_t, BLOCK_K=config.block_k,
            num_warps=config.num_warps, num_stages=config.num_stages,
        )
    else:
        _partials_kernel[grid](
            hidden_states, weight, pmax, pidx,
            n, row_start, row_end, hidden, hidden_states.stride(0), weight.stride(0), num_tblocks,
            BLOCK_V=config.block_v, BLOCK_T=config.block_t, BLOCK_K=config.block_k,
            EVEN_K=hidden % config.block_k == 0,
            PRECISION="ieee" if weight.dtype == torch.float32 else "tf32",
            num_warps=config.num_warps, num_stages=config.num_stages,
        )
    merge_t = 16
    _merge_kernel[(triton.cdiv(n, merge_t),)](
        pmax, pidx, out_max, out_idx, n, num_vblocks, BLOCK_T=merge_t, BLOCK_B=128, num_warps=4,
    )


def rows_argmax(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    row_start: int,
    row_end: int,
    out_max: torch.Tensor,
    out_idx: torch.Tensor,
) -> None:
    """``rows_argmax`` on the GPU (see the module docstring); needs ``supports(...)``.

    The fused Triton kernel, except for token counts where ``uses_cublas`` says one cuBLAS GEMM
    per row block is faster (same contract, same ids).
    """
    if not supports(hidden_states, weight):
        raise ValueError(
            "rows_argmax: needs CUDA tensors of one dtype (bf16/fp16/fp32), last dim contiguous, and "
            "Triton installed; use rows_argmax_reference otherwise"
        )
    _check(hidden_states, weight, row_start, row_end, out_max, out_idx)
    n = hidden_states.shape[0]
    if uses_cublas(n):
        rows = max(1, _CUBLAS_WORKSPACE_BYTES // (n * weight.element_size()))
        rows_argmax_reference(hidden_states, weight, row_start, row_end, out_max, out_idx, block_rows=rows)
    else:
        launch(hidden_states, weight, row_start, row_end, out_max, out_idx, config_for(n, weight.dtype))
