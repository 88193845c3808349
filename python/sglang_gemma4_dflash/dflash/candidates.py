"""DFlash2's candidate step on Gemma 4's tied head (SGLang 0.5.19+), as a HookRegistry AROUND hook.

A DFlash2 draft (``DFlash2DraftModel``) drafts its block by walking a lattice over the top-k tokens of each
drafted position under the target's LM head; ``compute_candidates(hidden)`` returns those ids and their
logits (through the draft's own ``_transform_unary_logits``). Upstream reads ``lm_head.org_vocab_size`` (TP=1)
or ``lm_head.shard_indices`` (TP>1) there; Gemma 4's tied ``embed_tokens`` has neither, so the step raises.
For that head this hook returns ``head.topk``'s exact top-k: each rank of ``runtime.batch_group()`` scores its
slice of the vocabulary, one all-gather, the same k candidates on every rank. Any other head, or a call with
arguments the hook does not know, goes to upstream unchanged.
"""

from __future__ import annotations

from sglang_gemma4_dflash.compat import runtime
from sglang_gemma4_dflash.head.cached import CachedHead, cached_head
from sglang_gemma4_dflash.head.topk import is_topk_head, topk_tokens


def serves(lm_head) -> bool:
    """Whether the plugin's top-k serves this head: Gemma 4's tied head, which upstream's step cannot read."""
    return (
        runtime.is_gemma4_tied_head(lm_head)
        and getattr(lm_head, "shard_indices", None) is None
        and getattr(lm_head, "org_vocab_size", None) is None
        and is_topk_head(lm_head)
    )


def _head_for(draft_model, lm_head) -> CachedHead:
    return cached_head(
        draft_model, "_sglang_gemma4_dflash_candidates", lm_head, lambda: serves(lm_head), runtime.batch_group
    )


def compute_candidates(original, self, *args, **kwargs):
    """Around ``DFlash2DraftModel.compute_candidates(hidden)``: ``(ids [N, k], unary logits [N, k])``."""
    if len(args) == 1 and not kwargs:
        hidden = args[0]  # as the worker calls it
    elif not args and set(kwargs) == {"hidden"}:
        hidden = kwargs["hidden"]
    else:
        return original(self, *args, **kwargs)
    lm_head = getattr(self, "lm_head", None)
    head = None if lm_head is None else _head_for(self, lm_head)
    if head is None or head.layout is None:
        return original(self, *args, **kwargs)
    ids, logits = topk_tokens(hidden, lm_head, self.candidate_selector.top_k, head.group, layout=head.layout)
    return ids, self._transform_unary_logits(logits)
