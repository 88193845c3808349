"""Exact top-k token ids over a target LM head, split over tensor-parallel ranks (DFlash2's candidate step).

``topk_tokens(hidden_states, lm_head, k, tp_group)`` returns, per row of ``hidden_states``, the ``k`` ids and
logits of a full-vocabulary ``torch.topk(hidden @ weight.T, k)``: largest logit first, NaN above every number
(``torch.topk``'s rule), equal logits (NaN included) by the lower id first. It reuses ``head.greedy``'s layout
(which rows each rank scores) and vocabulary blocks. Per block one ``torch.topk`` over sort keys keeps k; a
rank keeps the best k of its blocks; at tp > 1 one all-gather of those keys, and every rank keeps the best k
of all of them, so every rank returns the same candidates.

A sort key packs a logit and its id into one int64: the high 32 bits hold the float32 logit's bits in an
order-preserving form (negative numbers reversed, -0 as +0, every NaN above +inf), the low 32 bits
``2**32 - 1 - id``. Keys are unique and order like (logit, -id), so a top-k over keys is exact whatever order
a top-k kernel gives equal values, and a key gives back its id and logit exactly. Heads in fp16, bf16 or fp32
(every logit fits float32 exactly), ids below 2**32. All shapes depend on N, k and the layout only.
"""

from __future__ import annotations

import torch

from sglang_gemma4_dflash.head.greedy import (
    DEFAULT_LOGITS_BUDGET_BYTES,
    VocabLayout,
    all_gather,
    block_logits,
    dense_weight,
    group_size_rank,
    layout_for_head,
    vocab_blocks,
)

TOPK_HEAD_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
KEY_BYTES_PER_LOGIT = 32  # what a block holds per logit while its keys are built (logit, float32, int64s)
_ID_SPAN = 1 << 32
_LOW = _ID_SPAN - 1  # low bits of the key of id 0
_SIGNLESS = 0x7FFFFFFF
_NAN_KEY = _SIGNLESS  # above +inf's 0x7F800000
EMPTY_KEY = -(1 << 63)  # below every real key: a slot without a token


def is_topk_head(lm_head) -> bool:
    """Whether ``topk_tokens`` can score this head (dense fp16, bf16 or fp32 weight)."""
    weight = getattr(lm_head, "weight", None)
    return isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.dtype in TOPK_HEAD_DTYPES


def sort_keys(logits: torch.Tensor, first_id: int) -> torch.Tensor:
    """``[N, R]`` logits of ids ``first_id ..`` -> ``[N, R]`` int64 keys (see the module docstring)."""
    value = logits.float() + 0.0  # -0.0 + 0.0 is +0.0: equal logits, equal keys
    bits = value.view(torch.int32).to(torch.int64)
    key = bits ^ ((bits >> 31) & _SIGNLESS)  # negative floats: the lower 31 bits reversed
    key.masked_fill_(value.isnan(), _NAN_KEY)
    low = _LOW - first_id - torch.arange(logits.shape[-1], dtype=torch.int64, device=logits.device)
    return key.mul_(_ID_SPAN).add_(low)


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 keys -> (ids int64, logits float32), exactly."""
    high = keys >> 32
    bits = high ^ ((high >> 31) & _SIGNLESS)  # the same map undoes itself
    return _LOW - (keys & _LOW), bits.to(torch.int32).view(torch.float32)


def _best(keys: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` largest keys of each row ``[N, M]`` (M >= k), largest first; unique keys: one answer."""
    return torch.topk(keys, k, dim=-1).values


def local_topk(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    layout: VocabLayout,
    k: int,
    *,
    budget_bytes: int = DEFAULT_LOGITS_BUDGET_BYTES,
) -> torch.Tensor:
    """This rank's best ``k`` keys ``[N, k]`` over its rows, largest first; ``EMPTY_KEY`` where it has fewer."""
    hidden = hidden_states if hidden_states.dtype == weight.dtype else hidden_states.to(weight.dtype)
    n = hidden.shape[0]
    kept = [
        _best(sort_keys(block_logits(hidden, weight, r), r.first_id), min(k, r.num_rows))
        for r in vocab_blocks(layout, n, KEY_BYTES_PER_LOGIT, budget_bytes)
    ]
    if len(kept) == 1 and kept[0].shape[-1] == k:
        return kept[0]  # one block: already the best k, largest first
    short = k - sum(c.shape[-1] for c in kept)
    if short > 0:
        kept.append(torch.full((n, short), EMPTY_KEY, dtype=torch.int64, device=hidden.device))
    return _best(torch.cat(kept, dim=-1), k)


@torch.no_grad()
def topk_tokens(
    hidden_states: torch.Tensor,
    lm_head,
    k: int,
    tp_group=None,
    *,
    layout: VocabLayout | None = None,
    budget_bytes: int = DEFAULT_LOGITS_BUDGET_BYTES,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``hidden_states [N, H]``: the full-vocabulary top-``k`` of ``lm_head`` as (ids int64 [N, k],
    logits float32 [N, k]), largest first, equal logits by the lower id, identical on every rank.

    ``tp_group``: SGLang's GroupCoordinator (or a torch ProcessGroup, or None for one rank); every rank of it
    calls with the same N and k. ``layout`` may be passed when computed once beforehand.
    """
    weight = dense_weight(lm_head)
    if weight.dtype not in TOPK_HEAD_DTYPES:
        raise TypeError(f"candidate top-k: a {weight.dtype} head; only fp16, bf16 and fp32 heads are supported.")
    if layout is None:
        tp_size, tp_rank = group_size_rank(tp_group)
        layout = layout_for_head(lm_head, tp_rank, tp_size)
    if not layout.vocab:
        raise ValueError("candidate top-k: the head must hold the whole vocabulary on every rank (not a shard).")
    if not 0 < int(k) <= layout.vocab:
        raise ValueError(f"candidate top-k: k={k} must be in [1, the vocabulary size {layout.vocab}].")
    keys = local_topk(hidden_states, weight, layout, int(k), budget_bytes=budget_bytes)
    if layout.tp_size > 1:
        n = keys.shape[0]
        gathered = torch.empty((layout.tp_size * n, k), dtype=torch.int64, device=keys.device)
        all_gather(tp_group, gathered, keys)
        keys = _best(gathered.view(layout.tp_size, n, k).permute(1, 0, 2).reshape(n, -1), k)
    return decode_keys(keys)
