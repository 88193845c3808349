"""Attention of a block of query tokens per request over SGLang's paged KV cache (Triton).

A DFLASH verify (or draft) step attends a block of ``q <= 32`` new tokens per request to the request's context.
This kernel reads the context once per KV head: one program takes ``M_TILE`` rows of (block position, query head
of that KV head) and one split of the context; a second pass merges the splits by log-sum-exp.

Inputs follow SGLang's extend convention:
- ``q [T, Hq, D]``, ``k_ext [T, Hkv, D]``, ``v_ext [T, Hkv, Dv]``: the block tokens of all requests; request ``b``
  owns rows ``qo_indptr[b]:qo_indptr[b + 1]``.
- ``k_buffer [slots, Hkv, D]``, ``v_buffer [slots, Hkv, Dv]``: the paged cache; request ``b``'s context is the
  ``L_b = kv_indptr[b + 1] - kv_indptr[b]`` slots ``kv_indices[kv_indptr[b]:kv_indptr[b + 1]]``, the last ``L_b``
  tokens before the block, in order.
Query ``i`` of the block sees context token ``n`` iff ``L_b + i - n <= window`` (always when ``window < 0``) and
block token ``j`` iff ``j <= i`` (when causal) and ``i - j <= window``.

An fp8 cache (``float8_e4m3fn`` or ``float8_e5m2``, queries in bf16 or fp16) is read as SGLang's triton extend
kernel reads it: the context's scores are ``dot(q in the cache's type, k) * sm_scale * k_scale`` and its values
``dot(p in the cache's type, v) * v_scale``; the block's own keys and values (``k_ext``, ``v_ext``, never
quantized) are dotted in q's type and not scaled.

Shapes passed to the kernels depend only on the batch size and the model, never on lengths, so the launches can
be captured in a CUDA graph.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from sglang_gemma4_dflash.attention.tuning import Tuning, default_tuning

LOG2E = 1.4426950408889634
MAX_BLOCK = 32  # the most block tokens per request the kernel takes
CPU_SMS = 132  # an H200's count, for the split plan when no GPU is there (tests under the interpreter)
FP8_CACHES = (torch.float8_e4m3fn, torch.float8_e5m2)  # the fp8 KV caches served (queries in bf16 or fp16)
FP8_LEAST_TILE = 32  # an fp8 tl.dot's least reduction width: key tiles and score slices of an fp8 cache


@triton.jit
def _split_plan(
    ctx_len,
    num_splits,
    WINDOW: tl.constexpr,
    MIN_SPLIT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SPLIT: tl.constexpr,
):
    """(first visible context token, tokens per split, splits used) of one request; both passes call it. The
    block's own tokens go in the last split used: with ``BLOCK_SPLIT``, one after the context's where one is left."""
    lo = 0
    if WINDOW >= 0:
        lo = tl.maximum(ctx_len - WINDOW, 0)
    span = ctx_len - lo
    used = tl.minimum(tl.maximum((span + MIN_SPLIT - 1) // MIN_SPLIT, 1), num_splits)
    per_split = ((span + used - 1) // used + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    used = tl.maximum((span + per_split - 1) // tl.maximum(per_split, 1), 1)
    if BLOCK_SPLIT:
        used += (used < num_splits).to(tl.int32)
    return lo, per_split, used


@triton.jit
def _fp8_rounded(x, EXACT: tl.constexpr, EPS: tl.constexpr, TINY: tl.constexpr, FMAX: tl.constexpr):
    """``x`` for a cast to an fp8 type (``EPS``, ``TINY``, ``FMAX``: its torch.finfo). ``EXACT`` (Triton's
    interpreter, whose fp8 cast does not carry a rounded-up mantissa into the exponent): rounded to the type's
    nearest value, ties to even, saturated, in fp32 first, so the cast is exact; on a GPU the cast does this itself."""
    if EXACT:
        x = tl.minimum(tl.maximum(x.to(tl.float32), -FMAX), FMAX)
        power = (x.to(tl.int32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)  # 2**floor(log2|x|)
        magic = tl.maximum(power, TINY) * EPS * 12582912.0  # 1.5 * 2**23 steps: fp32's sum rounds to a step
        x = (x + magic) - magic
    return x


@triton.jit
def _scores(
    q,
    q_rows,
    k_cols,
    q_ok,
    k_ok,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DC: tl.constexpr,
    M_TILE: tl.constexpr,
    N: tl.constexpr,
    KV_FP8: tl.constexpr,
    DOT16: tl.constexpr,
    FP8_EXACT: tl.constexpr,
    FP8_EPS: tl.constexpr,
    FP8_TINY: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    """q . k for a [M_TILE, N] tile; ``q_rows`` / ``k_cols`` point at each row's / key's first element. With
    ``BLOCK_DC < BLOCK_D`` the head dim goes in slices, q's slices read again (``q`` is then unused). ``KV_FP8``:
    fp8 keys, each q slice cast to their type (a whole ``q`` comes cast); ``DOT16``: the cast q slice back in q's
    type and the keys raised to it, so the dot runs in 16 bits on the same values."""
    if BLOCK_DC == BLOCK_D:
        offs = tl.arange(0, BLOCK_D)
        k = tl.load(k_cols + offs[:, None], mask=k_ok[None, :] & (offs < D)[:, None], other=0.0)
        return tl.dot(q, k.to(q.dtype))
    scores = tl.zeros([M_TILE, N], tl.float32)
    for c in tl.static_range(BLOCK_D // BLOCK_DC):
        offs = c * BLOCK_DC + tl.arange(0, BLOCK_DC)
        qc = tl.load(q_rows + offs[None, :], mask=q_ok[:, None] & (offs < D)[None, :], other=0.0)
        kc = tl.load(k_cols + offs[:, None], mask=k_ok[None, :] & (offs < D)[:, None], other=0.0)
        if KV_FP8:
            q8 = _fp8_rounded(qc, FP8_EXACT, FP8_EPS, FP8_TINY, FP8_MAX).to(kc.dtype)
            if DOT16:
                q8 = q8.to(qc.dtype)
            qc = q8
        scores += tl.dot(qc, kc.to(qc.dtype))
    return scores


@triton.jit
def _online_softmax_step(
    qk,
    visible,
    m_i,
    l_i,
    acc,
    v,
    v_scale,
    SCALE_V: tl.constexpr,
    P_FP8: tl.constexpr,
    DOT16: tl.constexpr,
    FP8_EXACT: tl.constexpr,
    FP8_EPS: tl.constexpr,
    FP8_TINY: tl.constexpr,
    FP8_MAX: tl.constexpr,
    TYPE16: tl.constexpr,
):
    """Fold one tile of scores (log2 domain, ``visible`` masked out) and its values into (m, l, acc): the weights
    cast to ``v``'s type (``P_FP8``: an fp8 type), their dot with ``v`` times ``v_scale`` where ``SCALE_V``.
    ``DOT16``: the cast weights and ``v`` both raised to ``TYPE16`` for the dot (the same products)."""
    qk = tl.where(visible, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(qk - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if P_FP8:
        p = _fp8_rounded(p, FP8_EXACT, FP8_EPS, FP8_TINY, FP8_MAX)
    p = p.to(v.dtype)
    if DOT16:
        p, v = p.to(TYPE16), v.to(TYPE16)
    pv = tl.dot(p, v)
    if SCALE_V:
        pv = pv * v_scale
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit(do_not_specialize=["num_splits"])  # one compile for every batch size of a CUDA-graph capture
def _block_attn_fwd(
    Q,
    K_ext,
    V_ext,
    K_buf,
    V_buf,
    O,
    Mid_O,
    Mid_LSE,
    qo_indptr,
    kv_indptr,
    kv_indices,
    ctx_qk_scale,  # the context's scores: sm_scale * k_scale * log2(e)
    blk_qk_scale,  # the block's own: sm_scale * log2(e)
    v_scale,  # the context's values (SCALE_V)
    num_splits,  # the launch's static split count (its grid's last dimension)
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_kbt,
    stride_kbh,
    stride_vbt,
    stride_vbh,
    stride_ot,
    stride_oh,
    NUM_KV_HEADS: tl.constexpr,
    G: tl.constexpr,  # query heads per KV head
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DC: tl.constexpr,  # head-dim slice of the scores (== BLOCK_D: no slicing)
    BLOCK_DV: tl.constexpr,  # the value columns of one program: next_pow2(DV) / DV_PARTS
    DV_PARTS: tl.constexpr,
    BLOCK_Q: tl.constexpr,  # >= block tokens per request, >= 16
    M_TILE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_SPLIT: tl.constexpr,
    WINDOW: tl.constexpr,
    CAUSAL: tl.constexpr,
    DIRECT: tl.constexpr,  # one split for every request: no second pass
    PDL: tl.constexpr,  # launched early; the lengths (forward metadata, written long before) are read before waiting
    BLOCK_SPLIT: tl.constexpr,
    KV_FP8: tl.constexpr,  # an fp8 cache: q and the weights cast to its type for the context's dots
    FP8_DOT16: tl.constexpr,  # ... and those dots run in q's type on the cast values (Tuning.fp8_dot16)
    SCALE_V: tl.constexpr,  # v_scale != 1
    FP8_EXACT: tl.constexpr,  # the interpreter: fp8 casts rounded first (_fp8_rounded)
    FP8_EPS: tl.constexpr,
    FP8_TINY: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    chunk = tl.program_id(0) // DV_PARTS
    dv_part = tl.program_id(0) % DV_PARTS
    req = tl.program_id(1) // NUM_KV_HEADS
    kv_head = tl.program_id(1) % NUM_KV_HEADS
    split = tl.program_id(2)
    q_start = tl.load(qo_indptr + req)
    n_q = tl.load(qo_indptr + req + 1) - q_start
    kv_start = tl.load(kv_indptr + req)
    ctx_len = tl.load(kv_indptr + req + 1) - kv_start
    lo, per_split, used = _split_plan(ctx_len, num_splits, WINDOW, MIN_SPLIT, BLOCK_N, BLOCK_SPLIT)
    if PDL:  # every program waits for the kernel before (q, the block's keys), then lets the merge launch
        gdc_wait()
        gdc_launch_dependents()
    if split >= used or chunk * M_TILE >= n_q * G:
        return

    rows = chunk * M_TILE + tl.arange(0, M_TILE)
    pos = rows // G  # block position of each row
    head = kv_head * G + rows % G
    row_ok = pos < n_q
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = dv_part * BLOCK_DV + tl.arange(0, BLOCK_DV)
    d_ok = offs_d < D
    dv_ok = offs_dv < DV

    q_rows = Q + (q_start + pos)[:, None].to(tl.int64) * stride_qt + head[:, None] * stride_qh
    if BLOCK_DC == BLOCK_D:
        q = tl.load(q_rows + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        if KV_FP8:  # in the context's type (the block's own keys read q again: one copy held, not two)
            q = _fp8_rounded(q, FP8_EXACT, FP8_EPS, FP8_TINY, FP8_MAX).to(K_buf.dtype.element_ty)
            if FP8_DOT16:
                q = q.to(Q.dtype.element_ty)
    else:
        q = tl.zeros([M_TILE, 16], Q.dtype.element_ty)  # unused: the slices are read where they are needed
    m_i = tl.full([M_TILE], float("-inf"), tl.float32)
    l_i = tl.zeros([M_TILE], tl.float32)
    acc = tl.zeros([M_TILE, BLOCK_DV], tl.float32)

    # The context: tokens [start, end) of the visible span (none in a split of the block's own).
    start = lo + split * per_split
    end = tl.minimum(start + per_split, ctx_len)
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_ok = offs_n < end
        slot = tl.load(kv_indices + kv_start + offs_n, mask=n_ok, other=0).to(tl.int64)
        k_cols = K_buf + slot[None, :] * stride_kbt + kv_head * stride_kbh
        qk = _scores(q, q_rows, k_cols, row_ok, n_ok, D, BLOCK_D, BLOCK_DC, M_TILE, BLOCK_N, KV_FP8, FP8_DOT16,
                     FP8_EXACT, FP8_EPS, FP8_TINY, FP8_MAX) * ctx_qk_scale  # fmt: skip
        visible = row_ok[:, None] & n_ok[None, :]
        if WINDOW >= 0:
            visible &= (ctx_len + pos)[:, None] - offs_n[None, :] <= WINDOW
        v = tl.load(
            V_buf + slot[:, None] * stride_vbt + kv_head * stride_vbh + offs_dv[None, :],
            mask=n_ok[:, None] & dv_ok[None, :],
            other=0.0,
        )
        if not KV_FP8:
            v = v.to(Q.dtype.element_ty)
        m_i, l_i, acc = _online_softmax_step(
            qk, visible, m_i, l_i, acc, v, v_scale, SCALE_V, KV_FP8, FP8_DOT16, FP8_EXACT, FP8_EPS, FP8_TINY,
            FP8_MAX, Q.dtype.element_ty,
        )  # fmt: skip

    # The block's own tokens, in the last split.
    if split == used - 1:
        offs_j = tl.arange(0, BLOCK_Q)
        j_ok = offs_j < n_q
        q_blk = q
        if KV_FP8 and BLOCK_DC == BLOCK_D:
            q_blk = tl.load(q_rows + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        k_cols = K_ext + (q_start + offs_j)[None, :].to(tl.int64) * stride_kt + kv_head * stride_kh
        qk = _scores(q_blk, q_rows, k_cols, row_ok, j_ok, D, BLOCK_D, BLOCK_DC, M_TILE, BLOCK_Q, False, False, False, 0.0,
                     0.0, 0.0) * blk_qk_scale  # fmt: skip
        visible = row_ok[:, None] & j_ok[None, :]
        if CAUSAL:
            visible &= offs_j[None, :] <= pos[:, None]
        if WINDOW >= 0:
            visible &= pos[:, None] - offs_j[None, :] <= WINDOW
        v = tl.load(
            V_ext + (q_start + offs_j)[:, None].to(tl.int64) * stride_vt + kv_head * stride_vh + offs_dv[None, :],
            mask=j_ok[:, None] & dv_ok[None, :],
            other=0.0,
        )
        m_i, l_i, acc = _online_softmax_step(
            qk, visible, m_i, l_i, acc, v.to(Q.dtype.element_ty), 1.0, False, False, False, False, 0.0, 0.0, 0.0,
            Q.dtype.element_ty,
        )  # fmt: skip

    if DIRECT or used == 1:  # the whole context in this program: the normalised output, no merge
        out = acc * (1.0 / tl.where(l_i == 0.0, 1.0, l_i))[:, None]
        tl.store(
            O + (q_start + pos)[:, None].to(tl.int64) * stride_ot + head[:, None] * stride_oh + offs_dv[None, :],
            out.to(O.dtype.element_ty),
            mask=row_ok[:, None] & dv_ok[None, :],
        )
    else:
        # Mid_O [B, Hkv, num_splits, rows, BLOCK_DV * DV_PARTS], Mid_LSE [B, Hkv, num_splits, rows]; rows = G * BLOCK_Q
        base = (tl.program_id(1) * num_splits + split).to(tl.int64) * (G * BLOCK_Q)
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(tl.where(l_i == 0.0, 1.0, l_i)))
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        width = BLOCK_DV * DV_PARTS
        tl.store(Mid_O + (base + rows)[:, None] * width + offs_dv[None, :], out, mask=row_ok[:, None])
        tl.store(Mid_LSE + base + rows, lse, mask=row_ok & (dv_part == 0))


@triton.jit(do_not_specialize=["num_splits"])
def _block_attn_reduce(
    O,
    Mid_O,
    Mid_LSE,
    qo_indptr,
    kv_indptr,
    num_splits,
    stride_ot,
    stride_oh,
    NUM_KV_HEADS: tl.constexpr,
    G: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_SPLIT: tl.constexpr,
    WINDOW: tl.constexpr,
    PDL: tl.constexpr,
    BLOCK_SPLIT: tl.constexpr,
):
    req = tl.program_id(0)
    q_head = tl.program_id(1)
    pos = tl.program_id(2)
    q_start = tl.load(qo_indptr + req)
    n_q = tl.load(qo_indptr + req + 1) - q_start
    ctx_len = tl.load(kv_indptr + req + 1) - tl.load(kv_indptr + req)
    _, _, used = _split_plan(ctx_len, num_splits, WINDOW, MIN_SPLIT, BLOCK_N, BLOCK_SPLIT)
    if PDL:  # every program waits for the first pass, so this kernel never ends before it
        gdc_wait()
    if pos >= n_q or used == 1:  # no such row, or the first pass wrote this request's output
        return

    kv_head = q_head // G
    row = pos * G + q_head % G
    offs_dv = tl.arange(0, BLOCK_DV)
    base = (req * NUM_KV_HEADS + kv_head).to(tl.int64) * num_splits * (G * BLOCK_Q) + row
    m = float("-inf")
    total = 0.0
    acc = tl.zeros([BLOCK_DV], tl.float32)
    for split in range(0, used):
        lse = tl.load(Mid_LSE + base + split * (G * BLOCK_Q))
        part = tl.load(Mid_O + (base + split * (G * BLOCK_Q)) * BLOCK_DV + offs_dv)
        m_new = tl.maximum(m, lse)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        scale_old = tl.exp2(m - m_safe)
        weight = tl.exp2(lse - m_safe)
        acc = acc * scale_old + weight * part
        total = total * scale_old + weight
        m = m_new
    out = acc * (1.0 / tl.where(total == 0.0, 1.0, total))
    tl.store(
        O + (q_start + pos).to(tl.int64) * stride_ot + q_head * stride_oh + offs_dv,
        out.to(O.dtype.element_ty),
        mask=offs_dv < DV,
    )


@functools.lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=8)
def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch: a Hopper or newer GPU (the interpreter has no griddepcontrol)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def num_splits(batch: int, num_kv_heads: int, row_chunks: int, tuning: Tuning, device: torch.device) -> int:
    """Static split count for a launch (lengths ignored): ``wave_filling_splits`` for this GPU's SMs."""
    sms = CPU_SMS
    if device.type == "cuda":
        sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    per_split = max(1, batch * num_kv_heads * row_chunks)
    return wave_filling_splits(per_split, tuning.programs_per_sm * sms, max(1, tuning.max_splits))


@functools.lru_cache(maxsize=256)
def wave_filling_splits(per_split: int, slots: int, max_splits: int) -> int:
    """A wave is ``slots`` programs; for each wave count, the most splits that fit it; of those, the fewest waves
    within 5% of the least ``waves / splits``."""
    splits_for_waves = {}  # waves -> the most splits that take that many
    for s in range(1, max_splits + 1):
        splits_for_waves[triton.cdiv(per_split * s, slots)] = s
    cost = {w: w / s for w, s in splits_for_waves.items()}
    least = min(cost.values())
    return splits_for_waves[min(w for w, c in cost.items() if c <= 1.05 * least)]


def cache_dtype_problem(q, k_ext, v_ext, k_buffer, v_buffer) -> str | None:
    """Why the kernel cannot take these element types (torch dtypes), or None: the block's keys and values in q's
    type; the cache in q's type too, or in one of ``FP8_CACHES`` for both keys and values with q in bf16 or fp16."""
    if q not in (torch.bfloat16, torch.float16, torch.float32):
        return f"queries in {q}"
    if k_ext != q or v_ext != q:
        return f"the block's keys and values in {k_ext} / {v_ext} with queries in {q}"
    if k_buffer == v_buffer == q:
        return None
    if k_buffer == v_buffer and k_buffer in FP8_CACHES and q in (torch.bfloat16, torch.float16):
        return None
    return f"KV cache in {k_buffer} / {v_buffer} with queries in {q}"


def fwd_constants(
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    v_dim: int,
    max_block: int,
    tuning: Tuning,
    window: int,
    causal: bool,
    kv_fp8: bool = False,
    scale_v: bool = False,
) -> dict:
    """The first pass's compile-time constants for a layer's shapes and a tuning (all but ``DIRECT``). ``kv_fp8``:
    an fp8 cache (key tiles and score slices at least ``FP8_LEAST_TILE`` wide); ``scale_v``: ``v_scale != 1``."""
    group = num_heads // num_kv_heads
    block_d, block_dv = triton.next_power_of_2(head_dim), triton.next_power_of_2(v_dim)
    dv_parts = min(triton.next_power_of_2(max(1, tuning.dv_parts)), max(1, block_dv // 16))
    least = FP8_LEAST_TILE if kv_fp8 else 16
    d_chunk = max(least, triton.next_power_of_2(tuning.d_chunk)) if 0 < tuning.d_chunk else block_d
    return dict(
        NUM_KV_HEADS=num_kv_heads,
        G=group,
        D=head_dim,
        DV=v_dim,
        BLOCK_D=block_d,
        BLOCK_DC=min(block_d, d_chunk),
        BLOCK_DV=block_dv // dv_parts,
        DV_PARTS=dv_parts,
        BLOCK_Q=max(16, triton.next_power_of_2(max_block)),
        M_TILE=max(16, min(tuning.m_tile, triton.next_power_of_2(group * max_block))),
        BLOCK_N=max(least, tuning.block_n),
        MIN_SPLIT=tuning.min_split,
        WINDOW=int(window),
        CAUSAL=bool(causal),
        PDL=bool(tuning.pdl),
        BLOCK_SPLIT=bool(tuning.block_split),
        KV_FP8=bool(kv_fp8),
        FP8_DOT16=bool(kv_fp8 and tuning.fp8_dot16),
        SCALE_V=bool(scale_v),
        FP8_EXACT=False,
        FP8_EPS=0.0,
        FP8_TINY=0.0,
        FP8_MAX=0.0,
    )


def block_attention(
    q: torch.Tensor,
    k_ext: torch.Tensor,
    v_ext: torch.Tensor,
    o: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    *,
    max_block: int,
    causal: bool,
    sm_scale: float,
    window: int = -1,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    tuning: Tuning | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """Write into ``o`` the attention of each request's block (at most ``max_block`` tokens) over its context.

    ``window``: the layer's sliding window as SGLang gives it (a query sees keys at most ``window`` positions
    back), or -1. ``k_scale`` / ``v_scale``: the cache's (context's) dequantisation scales, as SGLang's extend
    kernel takes them. ``splits`` overrides the static split count (tests)."""
    batch = qo_indptr.numel() - 1
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads, v_dim = k_buffer.shape[1], v_buffer.shape[2]
    if not 1 <= max_block <= MAX_BLOCK:
        raise ValueError(f"block_attention: max_block={max_block}, must be in [1, {MAX_BLOCK}]")
    if num_heads % num_kv_heads:
        raise ValueError(f"block_attention: {num_heads} query heads do not group over {num_kv_heads} KV heads")
    why = cache_dtype_problem(q.dtype, k_ext.dtype, v_ext.dtype, k_buffer.dtype, v_buffer.dtype)
    if why:
        raise ValueError(f"block_attention: {why}")
    kv_fp8 = k_buffer.dtype in FP8_CACHES
    tuning = tuning or default_tuning(head_dim, batch, q.element_size(), kv_fp8)
    c = fwd_constants(
        num_heads, num_kv_heads, head_dim, v_dim, max_block, tuning, window, causal, kv_fp8, float(v_scale) != 1.0
    )
    c["PDL"] = pdl = c["PDL"] and pdl_supported(q.device)
    if kv_fp8 and q.device.type != "cuda":  # Triton's interpreter: fp8 casts rounded first (_fp8_rounded)
        info = torch.finfo(k_buffer.dtype)
        c.update(FP8_EXACT=True, FP8_EPS=info.eps, FP8_TINY=info.tiny, FP8_MAX=info.max)
    group, dv_parts, block_dv = c["G"], c["DV_PARTS"], c["BLOCK_DV"] * c["DV_PARTS"]
    row_chunks = triton.cdiv(group * max_block, c["M_TILE"])
    n_splits = splits or num_splits(batch, num_kv_heads, row_chunks * dv_parts, tuning, q.device)
    direct = n_splits == 1
    if direct:
        mid_o = mid_lse = o  # unused
    else:
        rows = group * c["BLOCK_Q"]
        mid_o = torch.empty((batch, num_kv_heads, n_splits, rows, block_dv), dtype=torch.float32, device=q.device)
        mid_lse = torch.empty((batch, num_kv_heads, n_splits, rows), dtype=torch.float32, device=q.device)
    _block_attn_fwd[(row_chunks * dv_parts, batch * num_kv_heads, n_splits)](
        q,
        k_ext,
        v_ext,
        k_buffer,
        v_buffer,
        o,
        mid_o,
        mid_lse,
        qo_indptr,
        kv_indptr,
        kv_indices,
        float(sm_scale) * float(k_scale) * LOG2E,
        float(sm_scale) * LOG2E,
        float(v_scale),
        n_splits,
        q.stride(0),
        q.stride(1),
        k_ext.stride(0),
        k_ext.stride(1),
        v_ext.stride(0),
        v_ext.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        o.stride(0),
        o.stride(1),
        DIRECT=direct,
        num_warps=tuning.num_warps,
        num_stages=tuning.num_stages,
        launch_pdl=pdl,
        **c,
    )
    if not direct:
        _block_attn_reduce[(batch, num_heads, max_block)](
            o,
            mid_o,
            mid_lse,
            qo_indptr,
            kv_indptr,
            n_splits,
            o.stride(0),
            o.stride(1),
            NUM_KV_HEADS=num_kv_heads,
            G=group,
            DV=v_dim,
            BLOCK_DV=block_dv,
            BLOCK_Q=c["BLOCK_Q"],
            BLOCK_N=c["BLOCK_N"],
            MIN_SPLIT=c["MIN_SPLIT"],
            WINDOW=c["WINDOW"],
            PDL=pdl,
            BLOCK_SPLIT=c["BLOCK_SPLIT"],
            num_warps=4 if block_dv >= 256 else 2,
            launch_pdl=pdl,
        )
    return o
