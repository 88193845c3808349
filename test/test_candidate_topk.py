"""The exact candidate top-k (``head.topk``) and DFlash2's candidate hook (``dflash.candidates``), one process.

The oracle is a full-vocabulary ``torch.topk(hidden @ W.T, k)`` for the values; for the ids, equal logits go to the
lower id, which ``torch.topk`` does not promise (it does not on CPU, pinned below), so the ids are compared with
``torch.sort(stable=True)``'s order, whose values equal torch.topk's. Several ranks over real processes:
test_dflash2_tp.py.
"""

from __future__ import annotations

import pytest
import torch
from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead  # conftest selected the CPU engine first
from sglang.srt.models.gemma4_causal import Gemma4TextScaledWordEmbedding
from sglang_gemma4_dflash.dflash import candidates
from sglang_gemma4_dflash.head.greedy import UnsupportedHeadError, VocabLayout, layout_for_head
from sglang_gemma4_dflash.head.topk import decode_keys, local_topk, sort_keys, topk_tokens

NAN = float("nan")


def head_of(weight: torch.Tensor) -> Gemma4TextScaledWordEmbedding:
    head = Gemma4TextScaledWordEmbedding(weight.shape[0], weight.shape[1], 0).to(weight.dtype)
    with torch.no_grad():
        head.weight.copy_(weight)
    return head


def oracle(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    values = torch.topk(logits, k, dim=-1).values
    ordered = torch.sort(logits, dim=-1, descending=True, stable=True)
    torch.testing.assert_close(ordered.values[:, :k], values, rtol=0, atol=0, equal_nan=True)
    return ordered.indices[:, :k], values.float()


def test_torch_topk_on_cpu_ranks_nan_above_inf_and_does_not_order_ties_by_id():
    """What the oracle rests on, pinned for this torch: NaN is larger than +inf (as in torch.sort and torch.argmax);
    among equal values (NaN included) torch.topk's ids are not in id order, so the ids are checked against
    torch.sort(stable=True), the rule the plugin follows (the lower id first)."""
    x = torch.tensor([[1.0, NAN, 3.0, NAN, float("inf"), 2.0, NAN]])
    values, ids = torch.topk(x, 5)
    assert values[0, :3].isnan().all() and values[0, 3:].tolist() == [float("inf"), 3.0]
    assert sorted(ids[0, :3].tolist()) == [1, 3, 6] and ids[0, 3:].tolist() == [4, 2]
    assert torch.sort(x, descending=True, stable=True).indices[0, :5].tolist() == [1, 3, 6, 4, 2]
    _, tied = torch.topk(torch.zeros(1, 1000), 8)
    assert tied[0].tolist() != list(range(8))  # measured: [7, 4, 1, 3, 5, 0, 2, 6]


def test_sort_keys_of_every_bf16_value_order_like_a_stable_sort_and_decode_exactly():
    """All 65536 bf16 bit patterns (both zeros, subnormals, infinities, NaNs with any payload) as one row of
    logits: the keys sort like ``torch.sort(stable=True, descending=True)`` of the values, and decode to the id
    and the float32 value (every NaN a NaN, -0 as +0)."""
    values = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)[None]
    keys = sort_keys(values, first_id=7)
    assert keys.unique().numel() == keys.numel()
    expected = torch.sort(values.float() + 0.0, dim=-1, descending=True, stable=True).indices
    assert torch.equal(torch.sort(keys, dim=-1, descending=True).indices, expected)
    ids, decoded = decode_keys(keys)
    assert torch.equal(ids[0], torch.arange(values.numel()) + 7)
    torch.testing.assert_close(decoded, values.float() + 0.0, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
@pytest.mark.parametrize("budget", (1, None), ids=("many_blocks", "one_block"))
def test_topk_equals_the_full_vocabulary_topk_on_integer_logits(dtype, budget):
    gen = torch.Generator().manual_seed(0)
    weight = torch.randint(-2, 3, (1001, 8), generator=gen).to(dtype)
    hidden = torch.randint(-2, 3, (40, 8), generator=gen).to(dtype)
    head = head_of(weight)
    for k in (1, 2, 16, 200, 1001):
        ids, values = topk_tokens(hidden, head, k, **({} if budget is None else {"budget_bytes": budget}))
        expected_ids, expected_values = oracle(hidden @ weight.T, k)
        assert torch.equal(ids, expected_ids), k
        torch.testing.assert_close(values, expected_values, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_topk_equals_the_full_vocabulary_topk_on_random_logits(dtype):
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(5000, 32, generator=gen).to(dtype)
    hidden = torch.randn(33, 32, generator=gen).to(dtype)
    ids, values = topk_tokens(hidden, head_of(weight), 8, budget_bytes=1)
    expected_ids, expected_values = oracle(hidden @ weight.T, 8)
    assert torch.equal(ids, expected_ids)
    torch.testing.assert_close(values, expected_values, rtol=0, atol=0)


def test_ties_at_the_kth_place_across_vocabulary_blocks_go_to_the_lower_ids():
    weight = torch.zeros(1000, 4)
    weight[[50, 300, 600, 900], 0] = 1.0  # four equal maxima in four blocks of 128+ rows
    ids, values = topk_tokens(torch.tensor([[1.0, 0, 0, 0]]), head_of(weight), 6, budget_bytes=1)
    assert ids.tolist() == [[50, 300, 600, 900, 0, 1]] and values.tolist() == [[1.0] * 4 + [0.0] * 2]


def test_nan_logits_come_first_lower_id_first():
    weight = torch.zeros(1003, 4)
    weight[510, 0] = 1.0
    weight[700, 1] = weight[900, 1] = NAN
    hidden = torch.zeros(3, 4)
    hidden[:, 0] = 1.0
    hidden[2] = NAN
    ids, values = topk_tokens(hidden, head_of(weight), 4, budget_bytes=1)
    assert ids.tolist() == [[700, 900, 510, 0]] * 2 + [[0, 1, 2, 3]]
    torch.testing.assert_close(values, oracle(hidden @ weight.T, 4)[1], rtol=0, atol=0, equal_nan=True)


def test_a_rank_with_fewer_tokens_than_k_pads_with_keys_below_every_token():
    """Vocabulary 3 over 2 ranks (slices of 2 and 1), k 3: the second rank's slice holds one token."""
    weight = torch.tensor([[1.0], [3.0], [2.0]])
    head = head_of(weight)
    kept = [local_topk(torch.ones(1, 1), weight, layout_for_head(head, r, 2), 3) for r in range(2)]
    merged = torch.topk(torch.cat(kept, dim=-1), 3).values
    assert decode_keys(merged)[0].tolist() == [[1, 2, 0]]


def test_bad_arguments_are_named():
    head = head_of(torch.zeros(10, 4))
    with pytest.raises(ValueError, match="k=11"):
        topk_tokens(torch.zeros(1, 4), head, 11)
    with pytest.raises(ValueError, match="k=0"):
        topk_tokens(torch.zeros(1, 4), head, 0)
    with pytest.raises(ValueError, match="whole vocabulary"):
        topk_tokens(torch.zeros(1, 4), head, 2, layout=VocabLayout(ranges=(), tp_size=2, split=False))
    with pytest.raises(TypeError, match="float64"):
        topk_tokens(torch.zeros(1, 4), head_of(torch.zeros(10, 4, dtype=torch.float64)), 2)
    quantized = torch.nn.Module()
    quantized.weight = torch.nn.Parameter(torch.zeros(10, 4, dtype=torch.int8), requires_grad=False)
    with pytest.raises(UnsupportedHeadError):
        topk_tokens(torch.zeros(1, 4), quantized, 2)


# --------------------------------------------------------------------------- the hook


def test_the_hook_serves_only_gemma4s_tied_head(sglang_tp1):
    gemma4 = head_of(torch.zeros(10, 4))
    assert candidates.serves(gemma4)
    assert not candidates.serves(ParallelLMHead(10, 4))  # upstream reads its org_vocab_size / shard_indices
    assert not candidates.serves(head_of(torch.zeros(10, 4, dtype=torch.float64)))
    gemma4.shard_indices = object()
    assert not candidates.serves(gemma4)


class _Draft(torch.nn.Module):
    """What the hook reads of a DFlash2DraftModel: ``lm_head``, ``candidate_selector.top_k``, and the draft's
    ``_transform_unary_logits`` (here: x 2, to see that it is applied)."""

    def __init__(self, lm_head, top_k=3):
        super().__init__()
        self.lm_head = lm_head
        self.candidate_selector = torch.nn.Module()
        self.candidate_selector.top_k = top_k

    def _transform_unary_logits(self, logits):
        return logits.float() * 2


def _upstream(draft, *args, **kwargs):
    return "upstream"


def test_the_hook_returns_the_topk_through_the_drafts_transform(sglang_tp1):
    weight = torch.randn(50, 4, generator=torch.Generator().manual_seed(2))
    hidden = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
    for call in ((hidden,), {"hidden": hidden}):
        args, kwargs = (call, {}) if isinstance(call, tuple) else ((), call)
        ids, unary = candidates.compute_candidates(_upstream, _Draft(head_of(weight)), *args, **kwargs)
        expected_ids, expected_values = oracle(hidden @ weight.T, 3)
        assert torch.equal(ids, expected_ids)
        torch.testing.assert_close(unary, expected_values * 2, rtol=0, atol=0)


def test_the_hook_leaves_other_heads_and_unknown_calls_to_upstream(sglang_tp1):
    hidden = torch.zeros(2, 4)
    assert candidates.compute_candidates(_upstream, _Draft(ParallelLMHead(10, 4)), hidden) == "upstream"
    assert candidates.compute_candidates(_upstream, _Draft(None), hidden) == "upstream"
    draft = _Draft(head_of(torch.zeros(10, 4)))
    assert candidates.compute_candidates(_upstream, draft, hidden, 5) == "upstream"
    assert candidates.compute_candidates(_upstream, draft, hidden=hidden, with_partition=True) == "upstream"
