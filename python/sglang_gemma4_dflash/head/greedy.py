"""Exact greedy token ids over a target LM head, split over tensor-parallel ranks.

``greedy_token_ids(hidden_states, lm_head, tp_group)`` returns, per row of ``hidden_states``, the
token a full-vocabulary ``argmax(hidden @ weight.T)`` would return (ties: the lowest token id),
without materialising all logits at once. Three pieces, each usable on its own:

- ``layout_for_head(lm_head, tp_rank, tp_size)``: which rows of ``lm_head.weight`` this rank
  scores and the global token id of each (a ``VocabLayout``), computed once;
- ``score_blocks(hidden, weight, layout)``: this rank's best ``(value, id)`` per row and vocabulary
  block, blocks in ascending id order (the weight is read once); ``score_local`` keeps the best block;
- ``pick_first(values, ids)``: one ``argmax`` over candidates laid out in id order (blocks of one rank, or
  the blocks of every rank of a split head); ``pick_global(values, ids)`` for candidates in any order: the
  max value, then the lowest id among equal values.

``head.topk`` (DFlash2's candidates) uses the same layout, blocks (``vocab_blocks``, ``block_logits``) and
``all_gather``.

Which rows a rank scores:

- a vocab-parallel head (``shard_indices``: SGLang's ``ParallelLMHead``/``VocabParallelEmbedding``)
  scores its own base rows ``[0, num_org)`` and added rows ``[num_org_padded, +num_added)``;
  padding rows are never scored, so they never win;
- a head that holds the whole vocabulary on every rank (no ``shard_indices``, or
  ``shard_indices = None``, e.g. Gemma 4's tied ``embed_tokens``; or a vocab-parallel head built
  with ``tp_size == 1``) is split: rank r scores the r-th contiguous slice of the vocabulary
  (views of the weight, no copies; larger slices first, so a rank without rows is a last one).
  Rank order is then id order: every rank sends the candidates of each of its blocks, and one
  ``argmax`` over all of them picks the token. Every rank picks from the same gathered candidates,
  so all ranks return the same ids, for 1/tp of the work.

At tp > 1 the candidates travel as one float64 tensor ``[slots, 2, N]`` (values, ids) per rank:
every floating dtype a dense head uses widens to float64 exactly, and token ids are exact below 2**53.
All shapes depend only on N and the layout, never on data, so the pieces can run inside a CUDA
graph (see ``draft_sampler.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

DENSE_HEAD_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
DEFAULT_LOGITS_BUDGET_BYTES = 128 << 20  # one vocabulary block of logits at most this large (upstream: 256 x vocab)
MIN_BLOCK_ROWS = 128
NO_TOKEN = 2**53  # id of an empty candidate (a rank with no rows); never the lowest id


class UnsupportedHeadError(TypeError):
    """The head has no dense floating ``weight`` (a quantized head): check ``is_dense_head`` first."""


@dataclass(frozen=True)
class RowRange:
    first_row: int  # index into lm_head.weight
    num_rows: int
    first_id: int  # global token id of ``first_row``


@dataclass(frozen=True)
class VocabLayout:
    ranges: tuple[RowRange, ...]  # rows this rank scores, ascending token ids (may be empty)
    tp_size: int  # ranks whose candidates are combined; 1: no exchange
    split: bool  # True: a full-vocabulary head sliced over the ranks in id order (rank order is id order)
    max_rows: int = 0  # split: the rows of the largest slice (rank 0), so every rank sends as many blocks
    head_ranges: int = 1  # split: row ranges of the whole head (2 with added vocabulary); a slice may span both
    vocab: int = 0  # tokens of the whole head where this layout covers it (one rank, or split); 0 for a shard

    @property
    def num_rows(self) -> int:
        return sum(r.num_rows for r in self.ranges)


# --------------------------------------------------------------------------- the head


def is_dense_head(lm_head) -> bool:
    """True when ``lm_head.weight`` is a dense floating matrix this module can multiply with."""
    weight = getattr(lm_head, "weight", None)
    return isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.dtype in DENSE_HEAD_DTYPES


def dense_weight(lm_head) -> torch.Tensor:
    if not is_dense_head(lm_head):
        weight = getattr(lm_head, "weight", None)
        described = "no `weight`" if weight is None else f"weight {getattr(weight, 'dtype', type(weight).__name__)}"
        quant = type(getattr(lm_head, "quant_method", None)).__name__
        raise UnsupportedHeadError(
            f"greedy draft head: {type(lm_head).__name__} has {described} (quant_method {quant}); only dense "
            f"{', '.join(str(d).replace('torch.', '') for d in DENSE_HEAD_DTYPES)} heads are supported. "
            "Callers that can defer to SGLang's own path check `is_dense_head(lm_head)` first."
        )
    return lm_head.weight


def _head_vocab(lm_head, weight: torch.Tensor) -> tuple[RowRange, ...]:
    """The rows of this rank's weight that hold real tokens, with their global ids."""
    shard = getattr(lm_head, "shard_indices", None)
    if shard is None:
        return (RowRange(0, int(weight.shape[0]), 0),)
    num_org, num_org_padded = int(shard.num_org_elements), int(shard.num_org_elements_padded)
    num_added = int(shard.num_added_elements)
    if num_org_padded + num_added > weight.shape[0] or num_org > num_org_padded:
        raise ValueError(
            f"greedy draft head: {type(lm_head).__name__}.shard_indices (num_org={num_org}, "
            f"num_org_padded={num_org_padded}, num_added={num_added}) does not fit its weight of "
            f"{weight.shape[0]} rows."
        )
    ranges = (
        RowRange(0, num_org, int(shard.org_vocab_start_index)),
        RowRange(num_org_padded, num_added, int(shard.added_vocab_start_index)),
    )
    return tuple(r for r in ranges if r.num_rows > 0)


def _holds_full_vocab(lm_head, tp_size: int) -> bool:
    """Whether every rank of the group holds the whole vocabulary."""
    if getattr(lm_head, "shard_indices", None) is None:
        return True
    head_tp = getattr(lm_head, "tp_size", None)  # VocabParallelEmbedding records its own split
    if head_tp is None or int(head_tp) == tp_size:
        return tp_size == 1
    if int(head_tp) == 1:
        return True  # built with enable_tp=False: replicated, with shard_indices
    raise ValueError(
        f"greedy draft head: {type(lm_head).__name__} is split over {int(head_tp)} ranks but the group "
        f"passed has {tp_size}; pass the group the head was built with (e.g. the attention-TP group "
        "under DP attention)."
    )


def _slice(ranges: tuple[RowRange, ...], start: int, stop: int) -> tuple[RowRange, ...]:
    """Positions ``[start, stop)`` of the concatenated ranges, as ranges."""
    out, offset = [], 0
    for r in ranges:
        lo, hi = max(start, offset), min(stop, offset + r.num_rows)
        if lo < hi:
            out.append(RowRange(r.first_row + lo - offset, hi - lo, r.first_id + lo - offset))
        offset += r.num_rows
    return tuple(out)


def layout_for_head(lm_head, tp_rank: int = 0, tp_size: int = 1) -> VocabLayout:
    """Which rows of ``lm_head.weight`` rank ``tp_rank`` of ``tp_size`` scores, and their token ids."""
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"greedy draft head: tp_rank={tp_rank} is not in [0, tp_size={tp_size}).")
    weight = dense_weight(lm_head)
    ranges = _head_vocab(lm_head, weight)
    if not _holds_full_vocab(lm_head, tp_size):
        return VocabLayout(ranges=ranges, tp_size=tp_size, split=False)
    vocab = sum(r.num_rows for r in ranges)
    if tp_size == 1:
        return VocabLayout(ranges=ranges, tp_size=1, split=False, vocab=vocab)
    start, stop = -(-tp_rank * vocab // tp_size), -(-(tp_rank + 1) * vocab // tp_size)  # ceil: rank 0 is largest
    return VocabLayout(
        ranges=_slice(ranges, start, stop),
        tp_size=tp_size,
        split=True,
        max_rows=-(-vocab // tp_size),
        head_ranges=len(ranges),
        vocab=vocab,
    )


# --------------------------------------------------------------------------- local scoring


def vocab_block_rows(num_tokens: int, itemsize: int, budget_bytes: int = DEFAULT_LOGITS_BUDGET_BYTES) -> int:
    """Rows of the weight per block so that one block of logits ``[num_tokens, rows]`` fits the budget."""
    rows = budget_bytes // max(1, num_tokens * itemsize)
    return max(MIN_BLOCK_ROWS, rows // MIN_BLOCK_ROWS * MIN_BLOCK_ROWS)


@functools.lru_cache(maxsize=256)
def _blocks(ranges: tuple[RowRange, ...], step: int) -> tuple[RowRange, ...]:
    """``ranges`` cut into blocks of at most ``step`` rows, in ascending id order."""
    return tuple(
        RowRange(r.first_row + offset, min(step, r.num_rows - offset), r.first_id + offset)
        for r in ranges
        for offset in range(0, r.num_rows, step)
    )


def vocab_blocks(layout: VocabLayout, num_tokens: int, bytes_per_logit: int, budget_bytes: int) -> tuple[RowRange, ...]:
    """``layout``'s rows cut into blocks whose ``[num_tokens, rows]`` logits (and what is built from them, at
    ``bytes_per_logit`` per logit) hold at most ``budget_bytes``; ascending ids."""
    return _blocks(layout.ranges, vocab_block_rows(num_tokens, bytes_per_logit, budget_bytes))


def block_logits(hidden: torch.Tensor, weight: torch.Tensor, block: RowRange) -> torch.Tensor:
    """``[N, block.num_rows]`` logits of one vocabulary block (``hidden`` already in the weight dtype)."""
    return hidden @ weight.narrow(0, block.first_row, block.num_rows).T


def exchange_slots(layout: VocabLayout, num_tokens: int, itemsize: int, budget_bytes: int) -> int:
    """Blocks every rank of a split layout sends for ``num_tokens`` rows: those of the largest slice, plus one
    for each range boundary a slice may cross."""
    step = vocab_block_rows(num_tokens, itemsize, budget_bytes)
    return max(1, -(-layout.max_rows // step)) + layout.head_ranges - 1


def score_blocks(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    layout: VocabLayout,
    *,
    budget_bytes: int = DEFAULT_LOGITS_BUDGET_BYTES,
    slots: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's best ``(value [S, N], global id [S, N] int64)`` per vocabulary block, blocks in ascending id order.

    Each block holds at most ``budget_bytes`` of logits (``torch.matmul``); its maximum is the first
    (lowest) id among equal values, a NaN logit counting as the largest (``torch.argmax``'s rule). ``S``
    is ``slots`` when given (trailing slots without a block hold ``(-inf, NO_TOKEN)``), else the number of
    blocks. Values are in the weight dtype. A rank with no rows returns one slot ``(-inf, NO_TOKEN)``.
    """
    hidden = hidden_states if hidden_states.dtype == weight.dtype else hidden_states.to(weight.dtype)
    n = hidden.shape[0]
    blocks = vocab_blocks(layout, n, weight.element_size(), budget_bytes)
    count = max(1, len(blocks)) if slots is None else int(slots)
    if len(blocks) > count:
        raise ValueError(f"greedy draft head: {len(blocks)} vocabulary blocks do not fit {count} slots.")
    values = torch.empty((count, n), dtype=weight.dtype, device=hidden.device)
    ids = torch.empty((count, n), dtype=torch.int64, device=hidden.device)
    for b, r in enumerate(blocks):
        torch.max(block_logits(hidden, weight, r), dim=-1, out=(values[b], ids[b]))
        if r.first_id:
            ids[b].add_(r.first_id)
    if len(blocks) < count:
        values[len(blocks) :].fill_(float("-inf"))
        ids[len(blocks) :].fill_(NO_TOKEN)
    return values, ids


def pick_first(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``[S, N]`` candidates whose slots are in ascending id order -> the id ``[N]`` of the first slot holding
    each column's maximum: ``torch.argmax``'s rule (NaN the largest, the lowest id on ties)."""
    if values.shape[0] == 1:
        return ids[0]
    return ids.gather(0, values.argmax(dim=0, keepdim=True))[0]


def score_local(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    layout: VocabLayout,
    *,
    budget_bytes: int = DEFAULT_LOGITS_BUDGET_BYTES,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's best ``(value [N], global id [N] int64)``: the first block holding the maximum, as in
    ``pick_first``. A rank with no rows returns ``(-inf, NO_TOKEN)``."""
    values, ids = score_blocks(hidden_states, weight, layout, budget_bytes=budget_bytes)
    if values.shape[0] == 1:
        return values[0], ids[0]
    first = values.argmax(dim=0, keepdim=True)
    return values.gather(0, first)[0], ids.gather(0, first)[0]


# --------------------------------------------------------------------------- across ranks


def group_size_rank(tp_group) -> tuple[int, int]:
    """``(world size, rank)`` of SGLang's GroupCoordinator, a torch ProcessGroup, or None (1, 0)."""
    if tp_group is None:
        return 1, 0
    if hasattr(tp_group, "rank_in_group"):
        return int(tp_group.world_size), int(tp_group.rank_in_group)
    import torch.distributed as dist

    return dist.get_world_size(tp_group), dist.get_rank(tp_group)


def all_gather(tp_group, out: torch.Tensor, inp: torch.Tensor) -> None:
    """``out`` = every rank's ``inp``, rank by rank (SGLang's GroupCoordinator, or a torch ProcessGroup)."""
    if hasattr(tp_group, "all_gather_into_tensor"):  # GroupCoordinator: pynccl / graph-safe path
        tp_group.all_gather_into_tensor(out, inp)
    else:
        import torch.distributed as dist

        dist.all_gather_into_tensor(out, inp, group=tp_group)


def exchange_candidates(
    tp_group,
    values: torch.Tensor,
    ids: torch.Tensor,
    tp_size: int,
    *,
    send: torch.Tensor | None = None,
    recv: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All-gather every rank's candidates ``values, ids`` (``[N]`` or ``[S, N]``) as one packed float64 tensor;
    returns ``[tp * S, N]`` each, rank by rank (rank r's slots at ``r * S``).

    ``send`` (``[S*2*N]``) and ``recv`` (``[tp*S*2*N]``) float64 buffers may be given (static buffers for
    CUDA graphs); otherwise they are allocated.
    """
    if values.dim() == 1:
        values, ids = values[None], ids[None]
    s, n = values.shape
    if send is None:
        send = torch.empty((s * 2 * n,), dtype=torch.float64, device=values.device)
    if recv is None:
        recv = torch.empty((tp_size * s * 2 * n,), dtype=torch.float64, device=values.device)
    packed = send.view(s, 2, n)
    packed[:, 0].copy_(values)
    packed[:, 1].copy_(ids)
    all_gather(tp_group, recv, send)
    gathered = recv.view(tp_size * s, 2, n)
    return gathered[:, 0], gathered[:, 1]


def pick_global(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``[tp, N]`` candidates -> ``[N]`` int64: the max value, then the lowest id among equal values.
    NaN is the max (``amax`` propagates it), as in ``torch.argmax``: the lowest id among NaN candidates wins."""
    best = values.amax(dim=0, keepdim=True)
    is_best = (values == best) | values.isnan()  # a NaN row (NaN is the max, as in torch.argmax)
    tied = torch.where(is_best, ids, torch.full_like(ids, NO_TOKEN))
    return tied.amin(dim=0).to(torch.int64)


# --------------------------------------------------------------------------- the one entry point


@torch.no_grad()
def greedy_token_ids(
    hidden_states: torch.Tensor,
    lm_head,
    tp_group=None,
    *,
    layout: VocabLayout | None = None,
    budget_bytes: int = DEFAULT_LOGITS_BUDGET_BYTES,
) -> torch.Tensor:
    """Per row of ``hidden_states [N, H]``, the full-vocabulary greedy token of ``lm_head`` (int64 [N]).

    ``tp_group``: SGLang's GroupCoordinator (or a torch ProcessGroup, or None for one rank); every
    rank of it must call with the same N. ``layout`` may be passed when computed once beforehand.
    Runs without autograd (a tied head's weight may require grad).
    Raises ``UnsupportedHeadError`` for a head without a dense floating weight.
    """
    if hidden_states.shape[0] == 0:
        return torch.empty((0,), dtype=torch.int64, device=hidden_states.device)
    weight = dense_weight(lm_head)
    if layout is None:
        tp_size, tp_rank = group_size_rank(tp_group)
        layout = layout_for_head(lm_head, tp_rank, tp_size)
    if layout.tp_size == 1:
        return pick_first(*score_blocks(hidden_states, weight, layout, budget_bytes=budget_bytes))
    if layout.split:  # rank order is id order: one argmax over every rank's blocks
        slots = exchange_slots(layout, hidden_states.shape[0], weight.element_size(), budget_bytes)
        values, ids = score_blocks(hidden_states, weight, layout, budget_bytes=budget_bytes, slots=slots)
        return pick_first(*exchange_candidates(tp_group, values, ids, layout.tp_size)).to(torch.int64)
    values, ids = score_local(hidden_states, weight, layout, budget_bytes=budget_bytes)
    return pick_global(*exchange_candidates(tp_group, values, ids, layout.tp_size))
