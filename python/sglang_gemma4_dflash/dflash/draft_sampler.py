"""The draft's greedy head folded into the DFlash v2 draft CUDA graph, split over TP ranks.

SGLang's v2 DFlash worker (0.5.14+) can run the draft's greedy head inside the draft CUDA graph:
``_maybe_build_draft_sampler`` returns a sampler, a capture hook calls it at the end of every
captured draft forward, and after a replay the worker reads ``sampler.out[: bs * (block_size - 1)]``.
Upstream refuses to do this at TP > 1 for a head without ``shard_indices`` (Gemma 4's tied
``embed_tokens``) and keeps that head eager, scoring the whole vocabulary on every rank unsynced.

``SplitHeadDraftSampler`` keeps the same contract (``sampler(hidden_states, input_ids)`` during
capture, ``sampler.out`` after replay) and uses ``head.greedy``'s pieces: each rank scores its
1/tp slice of the vocabulary, the ranks exchange one packed ``(value, id)`` tensor with the best of
each vocabulary block, and all pick the same token with one ``argmax`` (rank order is id order).
Buffers are allocated once for the largest captured batch; nothing syncs with the host and no
shape depends on data. A group of one rank (DP attention with one attention-TP rank per DP
group) scores the whole vocabulary and exchanges nothing.

Greedy only. On 0.5.23 the plain DFlash draft is greedy (only the selector / LiLiCorr variants
stage sampling parameters into their samplers), so this sampler has no ``stage_sampling_params``.
"""

from __future__ import annotations

import torch

from sglang_gemma4_dflash.compat import runtime
from sglang_gemma4_dflash.head.greedy import (
    DEFAULT_LOGITS_BUDGET_BYTES,
    dense_weight,
    exchange_candidates,
    exchange_slots,
    group_size_rank,
    is_dense_head,
    layout_for_head,
    pick_first,
    score_blocks,
)

# Draft variants whose samplers do more than a greedy head (their own candidates, in-graph sampling).
VARIANT_ATTRS = ("selector", "lilicorr", "_is_domino")


class SplitHeadDraftSampler:
    """Greedy draft tokens over the target head, capturable, identical on every TP rank."""

    def __init__(
        self,
        lm_head,
        *,
        block_size: int,
        max_bs: int,
        tp_group=None,
        budget_bytes: int = DEFAULT_LOGITS_BUDGET_BYTES,
    ):
        if int(block_size) < 2:
            raise ValueError(f"SplitHeadDraftSampler: block_size={block_size} drafts no token; needs >= 2.")
        tp_size, tp_rank = group_size_rank(tp_group)
        self.weight = dense_weight(lm_head)
        self.layout = layout_for_head(lm_head, tp_rank, tp_size)
        if self.layout.tp_size > 1 and not self.layout.split:
            raise ValueError("SplitHeadDraftSampler: the head must hold the whole vocabulary on every rank.")
        self.tp_group = tp_group
        self.block_size = int(block_size)
        self.budget_bytes = int(budget_bytes)
        max_tokens = int(max_bs) * (self.block_size - 1)
        device = self.weight.device
        # Written in the graph, read by the worker after replay (fixed address).
        self.out = torch.zeros((max_tokens,), dtype=torch.int64, device=device)
        if self.layout.tp_size > 1:
            # The largest batch has the most vocabulary blocks (the smallest ones).
            size = (
                exchange_slots(self.layout, max_tokens, self.weight.element_size(), self.budget_bytes) * 2 * max_tokens
            )
            self._send = torch.empty((size,), dtype=torch.float64, device=device)
            self._recv = torch.empty((self.layout.tp_size * size,), dtype=torch.float64, device=device)

    @staticmethod
    def supports(worker, lm_head) -> bool:
        """Whether this sampler can stand in for upstream's eager head on this worker."""
        return (
            is_dense_head(lm_head)
            and int(getattr(worker, "block_size", 0)) > 1
            and not runtime.eager_draft_sampler_requested()
            and not any(getattr(worker, name, None) for name in VARIANT_ATTRS)
        )

    @classmethod
    def for_worker(cls, worker, lm_head, tp_group) -> "SplitHeadDraftSampler":
        return cls(lm_head, block_size=worker.block_size, max_bs=runtime.max_draft_graph_bs(worker), tp_group=tp_group)

    @torch.no_grad()
    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor | None = None) -> None:
        # Block position 0 holds the already-known bonus token; positions 1: are drafted.
        bs = hidden_states.shape[0] // self.block_size
        hidden = hidden_states.view(bs, self.block_size, -1)[:, 1:, :].reshape(-1, hidden_states.shape[-1])
        n, t = hidden.shape[0], self.layout.tp_size
        slots = exchange_slots(self.layout, n, self.weight.element_size(), self.budget_bytes) if t > 1 else None
        values, ids = score_blocks(hidden, self.weight, self.layout, budget_bytes=self.budget_bytes, slots=slots)
        if t > 1:
            size = slots * 2 * n
            values, ids = exchange_candidates(
                self.tp_group, values, ids, t, send=self._send[:size], recv=self._recv[: t * size]
            )
        self.out[:n].copy_(pick_first(values, ids))  # float64 ids at t > 1: the copy converts them
