"""A head's group and vocabulary layout, worked out once per owner (a worker or a draft model) and head.

The hooks run every draft step; ``layout_for_head`` and the group lookup cost 40-60 us each per call. The answer is
kept in the owner's ``__dict__`` under ``key`` and worked out anew when the owner is handed another head, or the
same head with another weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sglang_gemma4_dflash.head.greedy import VocabLayout, layout_for_head


@dataclass(frozen=True)
class CachedHead:
    lm_head: object
    weight: object
    group: object = None  # the ranks the head is split over
    layout: VocabLayout | None = None  # None: the plugin does not serve this head (upstream's runs)


def cached_head(owner, key: str, lm_head, serves: Callable[[], bool], group: Callable[[], object]) -> CachedHead:
    """``owner``'s ``CachedHead`` for ``lm_head``: split over ``group()`` where ``serves()``, else without a layout."""
    cached = owner.__dict__.get(key)
    weight = getattr(lm_head, "weight", None)
    if cached is not None and cached.lm_head is lm_head and cached.weight is weight:
        return cached
    head = CachedHead(lm_head, weight)
    if serves():
        ranks = group()
        head = CachedHead(lm_head, weight, ranks, layout_for_head(lm_head, ranks.rank_in_group, ranks.world_size))
    owner.__dict__[key] = head
    return head
