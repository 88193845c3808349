"""The draft-head case both DP-attention tests use: TP 4, DP 2, so two DP groups of two attention-TP ranks.

``dp_inputs(d)``: the tied head's weight (the same on every rank, integers, a tie planted across the attention-TP
slice boundary, so the lower id ``VOCAB // 2 - 1`` must win for row 0) and DP group ``d``'s rows: 3 + 2d of them, so
a collective across the groups would pair unequal calls.
"""

from __future__ import annotations

import torch

H, VOCAB = 8, 1001
DP_ARGS = {"dp_size": 2, "enable_dp_attention": True, "enable_dp_lm_head": True}


def dp_inputs(dp_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.randint(-2, 3, (VOCAB, H), generator=torch.Generator().manual_seed(0)).float()
    weight[VOCAB // 2 - 1, 0] = weight[VOCAB // 2, 0] = 9.0
    hidden = torch.randint(-2, 3, (3 + 2 * dp_rank, H), generator=torch.Generator().manual_seed(1 + dp_rank)).float()
    hidden[0] = 0.0
    hidden[0, 0] = 1.0  # the tie: the lower id wins
    return weight, hidden
