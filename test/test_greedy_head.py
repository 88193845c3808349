"""The greedy draft head equals a full-vocabulary argmax (ties: the lowest id), one process.

The oracle is ``argmax(hidden @ W.T)`` over the whole vocabulary, ``W`` indexed by token id.
Exact cases use small integer-valued tensors: every logit is an integer that fp32 and bf16 hold
exactly, so the oracle has one answer and ties are frequent. Multi-rank layouts are checked here
by running each rank's scorer on its own weight and combining with ``pick_global`` in-process;
the real multi-process exchange is in test_greedy_head_tp.py.
"""

from __future__ import annotations

import pytest
import torch
from sglang.srt.layers.vocab_parallel_embedding import (  # conftest selected the CPU engine first
    VocabParallelEmbedding,
    VocabParallelEmbeddingShardIndices,
    pad_vocab_size,
)
from sglang_gemma4_dflash.dflash.draft_sampler import SplitHeadDraftSampler
from sglang_gemma4_dflash.head.greedy import (
    MIN_BLOCK_ROWS,
    NO_TOKEN,
    UnsupportedHeadError,
    exchange_slots,
    greedy_token_ids,
    is_dense_head,
    layout_for_head,
    pick_first,
    pick_global,
    score_blocks,
    score_local,
    vocab_block_rows,
)
from sglang_gemma4_dflash_testkit.kernels import KernelCount

TINY_BUDGET = 1  # forces the smallest vocabulary block (MIN_BLOCK_ROWS rows): many blocks per range
PAD_VALUE = 100.0  # padding rows hold this: they would win every row if they were ever scored


# --------------------------------------------------------------------------- helpers


class Head(torch.nn.Module):
    """A head as the worker sees it: a ``weight`` and, for vocab-parallel heads, ``shard_indices``."""

    def __init__(self, weight: torch.Tensor, shard_indices="absent", tp_size: int | None = None):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        if shard_indices != "absent":
            self.shard_indices = shard_indices
        if tp_size is not None:
            self.tp_size = tp_size


def oracle(hidden: torch.Tensor, full_weight: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary greedy ids: all logits at once, first (lowest) id among equal maxima."""
    return torch.argmax(hidden.to(full_weight.dtype) @ full_weight.T, dim=-1)


def int_tensor(gen: torch.Generator, *shape: int, low: int = -2, high: int = 3, dtype=torch.float32):
    return torch.randint(low, high, shape, generator=gen).to(dtype)


def shard_of(vocab: int, org_vocab: int, tp_rank: int, tp_size: int) -> VocabParallelEmbeddingShardIndices:
    """SGLang's own shard indices for a head of ``vocab`` tokens, ``org_vocab`` of them base."""
    padding = 64
    if pad_vocab_size(org_vocab, padding) % tp_size:
        padding *= tp_size  # as VocabParallelEmbedding.__init__ does
    org_padded = pad_vocab_size(org_vocab, padding)
    vocab_padded = pad_vocab_size(org_padded + vocab - org_vocab, padding)
    return VocabParallelEmbedding._get_indices(vocab_padded, org_padded, vocab, org_vocab, tp_rank, tp_size)


def local_weight(full: torch.Tensor, shard: VocabParallelEmbeddingShardIndices) -> torch.Tensor:
    """One rank's weight: its base rows, padding, its added rows, padding (SGLang's row order)."""
    rows = shard.num_elements_padded
    w = torch.full((rows, full.shape[1]), PAD_VALUE, dtype=full.dtype)
    w[: shard.num_org_elements] = full[shard.org_vocab_start_index : shard.org_vocab_end_index]
    a = shard.num_org_elements_padded
    w[a : a + shard.num_added_elements] = full[shard.added_vocab_start_index : shard.added_vocab_end_index]
    return w


def combine_ranks(hidden: torch.Tensor, heads: list, budget: int = TINY_BUDGET) -> torch.Tensor:
    """Each rank's local scorer, then the global pick, in-process (the exchange is a concatenation), as
    ``greedy_token_ids`` does: a split head sends every block and takes one argmax (rank order is id order),
    a vocab-parallel head sends its best block and picks the max, then the lowest id."""
    layouts = [layout_for_head(head, rank, len(heads)) for rank, head in enumerate(heads)]
    values, ids = [], []
    for head, layout in zip(heads, layouts):
        if layout.split:
            slots = exchange_slots(layout, hidden.shape[0], head.weight.element_size(), budget)
            v, i = score_blocks(hidden, head.weight, layout, budget_bytes=budget, slots=slots)
        else:
            v, i = (t[None] for t in score_local(hidden, head.weight, layout, budget_bytes=budget))
        values.append(v.to(torch.float64))
        ids.append(i.to(torch.float64))
    values, ids = torch.cat(values), torch.cat(ids)
    picked = pick_first(values, ids) if layouts[0].split else pick_global(values, ids)
    return picked.to(torch.int64)


# --------------------------------------------------------------------------- one head, one rank


@pytest.mark.parametrize("shard_indices", ["absent", None], ids=["no-attr", "attr-None"])
def test_empty_rows_give_empty_int64(shard_indices):
    head = Head(torch.ones(10, 4), shard_indices)
    ids = greedy_token_ids(torch.empty(0, 4), head)
    assert ids.shape == (0,) and ids.dtype == torch.int64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 7, 200, 1100])
@pytest.mark.parametrize("budget", [TINY_BUDGET, 16 << 20], ids=["many-blocks", "one-block"])
def test_replicated_head_matches_oracle_exactly(dtype, n, budget):
    gen = torch.Generator().manual_seed(n)
    weight = int_tensor(gen, 1000, 16, dtype=dtype)
    hidden = int_tensor(gen, n, 16, dtype=dtype)
    ids = greedy_token_ids(hidden, Head(weight), budget_bytes=budget)
    assert ids.dtype == torch.int64
    assert torch.equal(ids, oracle(hidden, weight))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_random_float_inputs_pick_the_largest_logit(dtype):
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(3000, 64, generator=gen).to(dtype)
    hidden = torch.randn(300, 64, generator=gen)  # fp32: cast to the weight dtype inside
    ids = greedy_token_ids(hidden, Head(weight), budget_bytes=TINY_BUDGET)
    logits = (hidden.to(dtype) @ weight.T).double()
    top2 = logits.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 1e-2 * top2[:, 0].abs().clamp(min=1)
    assert clear.sum() > 250  # the comparison below is not vacuous
    assert torch.equal(ids[clear], logits.argmax(-1)[clear])
    picked = logits.gather(1, ids[:, None]).squeeze(1)
    assert torch.allclose(picked, top2[:, 0], rtol=1e-2, atol=1e-2)


def test_ties_across_block_boundaries_go_to_the_lowest_id():
    gen = torch.Generator().manual_seed(2)
    weight = int_tensor(gen, 4 * MIN_BLOCK_ROWS + 5, 8)  # entries in [-2, 2]
    hidden = torch.eye(3, 8)  # token row k reads weight column k
    pairs = [
        (MIN_BLOCK_ROWS - 1, MIN_BLOCK_ROWS),  # the max on both sides of the first block boundary
        (MIN_BLOCK_ROWS + 7, 2 * MIN_BLOCK_ROWS + 3),  # in two blocks further apart
        (3 * MIN_BLOCK_ROWS + 1, 4 * MIN_BLOCK_ROWS + 4),  # the second one in the last, short block
    ]
    for k, (low, high) in enumerate(pairs):
        weight[low, k] = weight[high, k] = 9.0
    ids = greedy_token_ids(hidden, Head(weight), budget_bytes=TINY_BUDGET)
    assert ids.tolist() == [low for low, _ in pairs]
    assert torch.equal(ids, oracle(hidden, weight))


def test_hidden_states_are_cast_to_the_weight_dtype():
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(500, 32, generator=gen).to(torch.bfloat16)
    hidden = torch.randn(40, 32, generator=gen, dtype=torch.float64)
    ids = greedy_token_ids(hidden, Head(weight))
    assert torch.equal(ids, oracle(hidden.to(torch.bfloat16), weight))


def test_shard_indices_none_is_the_replicated_head():
    gen = torch.Generator().manual_seed(4)
    weight = int_tensor(gen, 301, 8)
    hidden = int_tensor(gen, 50, 8)
    plain, marked = Head(weight), Head(weight, shard_indices=None)
    for t in (1, 2, 3, 4):
        for r in range(t):
            assert layout_for_head(plain, r, t) == layout_for_head(marked, r, t)
    assert torch.equal(greedy_token_ids(hidden, marked), greedy_token_ids(hidden, plain))
    assert torch.equal(combine_ranks(hidden, [marked] * 3), oracle(hidden, weight))


# --------------------------------------------------------------------------- rejected heads


class QuantizedHead(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        if weight is not None:
            self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.quant_method = object()


@pytest.mark.parametrize(
    "weight",
    [torch.zeros(10, 4, dtype=torch.int8), torch.zeros(10, 4).to(torch.float8_e4m3fn), None],
    ids=["int8", "fp8", "no-weight"],
)
def test_quantized_head_is_rejected_by_name(weight):
    head = QuantizedHead(weight)
    assert not is_dense_head(head)
    with pytest.raises(UnsupportedHeadError, match="QuantizedHead") as err:
        greedy_token_ids(torch.ones(2, 4), head)
    assert "is_dense_head" in str(err.value)


def test_shard_indices_that_do_not_fit_the_weight_are_rejected():
    shard = shard_of(1000, 1000, 0, 2)
    with pytest.raises(ValueError, match="does not fit"):
        layout_for_head(Head(torch.ones(100, 4), shard), 0, 2)


def test_head_split_over_another_group_size_is_rejected():
    shard = shard_of(1000, 1000, 0, 2)
    head = Head(torch.ones(shard.num_elements_padded, 4), shard, tp_size=2)
    with pytest.raises(ValueError, match="split over 2 ranks but the group passed has 4"):
        layout_for_head(head, 0, 4)


# --------------------------------------------------------------------------- NaN logits (torch.argmax's rule)


NAN_VOCAB = 1000


def nan_case(dtype, nan_ids: tuple[int, ...]):
    """Every row's finite maximum is at id 7; the ids in ``nan_ids`` give NaN logits for every row; the last
    row is NaN throughout (all its logits NaN). torch.argmax counts NaN as the largest, lowest id first."""
    gen = torch.Generator().manual_seed(11)
    weight = int_tensor(gen, NAN_VOCAB, 8, dtype=dtype)
    weight[7] = 3.0  # logits of id 7: 3 * 8 = 24 for an all-ones row; every other id is at most 16
    for i in nan_ids:
        weight[i, 5] = float("nan")
    hidden = torch.ones(6, 8, dtype=dtype)
    hidden[-1] = float("nan")
    return weight, hidden


NAN_CASES = [(), (200,), (900,), (200, 900), (130, 129)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nan_ids", NAN_CASES, ids=lambda c: "nan-" + "-".join(map(str, c)) if c else "no-nan")
def test_nan_logits_follow_torch_argmax_at_tp1_and_over_ranks(dtype, nan_ids):
    weight, hidden = nan_case(dtype, nan_ids)
    expected = oracle(hidden, weight)
    assert expected.tolist() == [min(nan_ids, default=7)] * 5 + [0]  # the oracle's rule, spelled out
    assert torch.equal(greedy_token_ids(hidden, Head(weight), budget_bytes=TINY_BUDGET), expected)
    assert torch.equal(greedy_token_ids(hidden, Head(weight)), expected)  # one block
    for tp in (2, 3, 4):  # the split replicated head: NaN ids land on different ranks and blocks
        assert torch.equal(combine_ranks(hidden, [Head(weight)] * tp), expected), tp
    shards = [shard_of(NAN_VOCAB, 900, r, 4) for r in range(4)]  # vocab-parallel, added ids past padding
    heads = [Head(local_weight(weight, s), s, tp_size=4) for s in shards]
    assert torch.equal(combine_ranks(hidden, heads), expected)


@pytest.mark.parametrize("nan_ids", NAN_CASES[1:3], ids=["nan-200", "nan-900"])
def test_nan_logits_in_the_draft_sampler_follow_torch_argmax(nan_ids):
    weight, _ = nan_case(torch.float32, nan_ids)
    hidden = torch.ones(2 * 4, 8)
    hidden[5] = float("nan")  # block 1, position 1: an all-NaN row
    sampler = SplitHeadDraftSampler(Head(weight), block_size=4, max_bs=2, budget_bytes=TINY_BUDGET)
    sampler(hidden)
    drafted = hidden.view(2, 4, 8)[:, 1:].reshape(-1, 8)
    assert sampler.out.tolist() == oracle(drafted, weight).tolist() == [nan_ids[0]] * 3 + [0] + [nan_ids[0]] * 2


def test_all_nan_and_all_inf_rows_give_ids_inside_the_vocabulary():
    weight = torch.zeros(NAN_VOCAB, 8)
    weight[:, 0] = 1.0
    hidden = torch.zeros(3, 8)
    hidden[0] = float("nan")
    hidden[1, 0] = float("-inf")  # every logit -inf
    hidden[2, 0] = float("inf")  # every logit +inf
    expected = oracle(hidden, weight)
    for tp in (1, 3, 4):
        got = combine_ranks(hidden, [Head(weight)] * tp) if tp > 1 else greedy_token_ids(hidden, Head(weight))
        assert torch.equal(got, expected), tp
        assert bool(((got >= 0) & (got < NAN_VOCAB)).all())


def test_pick_global_counts_nan_as_the_largest_lowest_id_first():
    nan = float("nan")
    values = torch.tensor([[1.0, nan, nan, 2.0], [nan, nan, 5.0, float("-inf")], [3.0, 4.0, nan, nan]])
    ids = torch.tensor([[5.0, 30.0, 40.0, 1.0], [50.0, 20.0, 2.0, NO_TOKEN], [60.0, 10.0, 41.0, 0.0]])
    assert pick_global(values, ids).tolist() == [50, 20, 40, 0]


# --------------------------------------------------------------------------- layouts over ranks


@pytest.mark.parametrize("vocab", [1, 3, 1000, 1001])
@pytest.mark.parametrize("tp", [1, 2, 3, 4, 5])
def test_split_replicated_slices_partition_the_vocabulary(vocab, tp):
    head = Head(torch.zeros(vocab, 2))
    layouts = [layout_for_head(head, r, tp) for r in range(tp)]
    ids = [i for lay in layouts for rng in lay.ranges for i in range(rng.first_id, rng.first_id + rng.num_rows)]
    assert ids == list(range(vocab))  # contiguous, ascending by rank, disjoint, complete
    assert all(rng.first_row == rng.first_id for lay in layouts for rng in lay.ranges)
    assert max(lay.num_rows for lay in layouts) - min(lay.num_rows for lay in layouts) <= 1
    assert all(lay.tp_size == tp and lay.split == (tp > 1) for lay in layouts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab,tp", [(1000, 2), (1001, 2), (1001, 4), (1003, 3), (3, 4)])
def test_split_replicated_head_matches_oracle_with_ties_on_slice_boundaries(dtype, vocab, tp):
    gen = torch.Generator().manual_seed(vocab + tp)
    weight = int_tensor(gen, vocab, 8, dtype=dtype)
    hidden = int_tensor(gen, 64, 8, dtype=dtype)
    head = Head(weight)
    boundaries = [layout_for_head(head, r, tp).ranges[0].first_id for r in range(1, tp) if vocab >= tp]
    # Token row k reads weight column k only; entries elsewhere are in [-2, 2], the planted ones 9.
    cases = [(b - 1, b) for b in boundaries]  # the max on both sides of each slice boundary
    cases += [(boundaries[0] - 1, b) for b in boundaries[1:]]  # ... and across several slices
    for k, (low, high) in enumerate(cases):
        hidden[k] = 0
        hidden[k, k] = 1
        weight[low, k] = weight[high, k] = 9
    expected = oracle(hidden, weight)
    assert expected[: len(cases)].tolist() == [low for low, _ in cases]
    assert torch.equal(combine_ranks(hidden, [head] * tp), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "vocab,org_vocab,tp",
    [(1000, 1000, 1), (1000, 1000, 2), (1000, 990, 2), (1001, 1001, 4), (1000, 900, 4), (700, 640, 3)],
)
def test_vocab_parallel_head_matches_oracle(dtype, vocab, org_vocab, tp):
    gen = torch.Generator().manual_seed(vocab + org_vocab + tp)
    full = int_tensor(gen, vocab, 8, dtype=dtype)
    hidden = int_tensor(gen, 300, 8, dtype=dtype)
    shards = [shard_of(vocab, org_vocab, r, tp) for r in range(tp)]
    heads = [Head(local_weight(full, s), s, tp_size=tp) for s in shards]
    assert sum(s.num_elements_padded for s in shards) > vocab or vocab % 64 == 0  # padding present
    expected = oracle(hidden, full)
    assert torch.equal(combine_ranks(hidden, heads), expected)
    if tp == 1:
        assert torch.equal(greedy_token_ids(hidden, heads[0], budget_bytes=TINY_BUDGET), expected)


def test_added_vocab_on_a_lower_rank_loses_ties_to_lower_base_ids():
    """With added vocab, rank order is not id order: rank 0 holds ids 990-999, rank 1 ids 512-989."""
    full = torch.zeros(1000, 4)
    shards = [shard_of(1000, 990, r, 2) for r in range(2)]
    assert shards[0].added_vocab_start_index == 990 and shards[1].org_vocab_start_index == 512
    full[995] = full[600] = 1.0  # the tied max: 995 (rank 0, added) and 600 (rank 1, base)
    hidden = torch.ones(1, 4)
    heads = [Head(local_weight(full, s), s, tp_size=2) for s in shards]
    assert combine_ranks(hidden, heads).tolist() == [600]
    full[3] = 1.0  # now also rank 0's base row 3
    heads = [Head(local_weight(full, s), s, tp_size=2) for s in shards]
    assert combine_ranks(hidden, heads).tolist() == [3]


def test_vocab_parallel_head_built_unsplit_is_split_like_a_replicated_one():
    """``enable_tp=False`` heads keep shard_indices for one rank while the group is larger."""
    gen = torch.Generator().manual_seed(5)
    full = int_tensor(gen, 1000, 8)
    shard = shard_of(1000, 990, 0, 1)
    head = Head(local_weight(full, shard), shard, tp_size=1)
    layouts = [layout_for_head(head, r, 4) for r in range(4)]
    assert all(lay.split for lay in layouts) and sum(lay.num_rows for lay in layouts) == 1000
    hidden = int_tensor(gen, 100, 8)
    assert torch.equal(combine_ranks(hidden, [head] * 4), oracle(hidden, full))


# --------------------------------------------------------------------------- pieces


def test_pick_global_takes_the_max_then_the_lowest_id_not_the_first_rank():
    values = torch.tensor([[5.0, 1.0, 2.0, float("-inf")], [5.0, 3.0, 2.0, 1.0], [4.0, 3.0, 2.0, float("nan")]])
    ids = torch.tensor([[90.0, 1.0, 7.0, NO_TOKEN], [10.0, 20.0, 8.0, 4.0], [0.0, 15.0, 6.0, 9.0]])
    assert pick_global(values, ids).tolist() == [10, 15, 6, 9]


def test_a_rank_without_rows_never_wins():
    head = Head(torch.ones(3, 2))
    layout = layout_for_head(head, 3, 4)  # 3 tokens over 4 ranks: the last rank has none
    assert layout.ranges == ()
    values, ids = score_local(torch.ones(2, 2), head.weight, layout)
    assert values.tolist() == [float("-inf")] * 2 and ids.tolist() == [NO_TOKEN] * 2
    hidden = torch.tensor([[float("-inf"), 0.0]])  # every logit -inf: the answer is id 0, not the empty rank's
    assert combine_ranks(hidden, [head] * 4).tolist() == [0] == oracle(hidden, head.weight).tolist()


@pytest.mark.parametrize("vocab,tp", [(3, 4), (5, 4), (1001, 4), (1003, 3)])
def test_split_slices_are_largest_first_so_ranks_without_rows_come_last(vocab, tp):
    # pick_first takes the first maximal slot: a rank without rows (all -inf) must never come before rows
    rows = [layout_for_head(Head(torch.zeros(vocab, 2)), r, tp).num_rows for r in range(tp)]
    assert rows == sorted(rows, reverse=True) and rows[0] == -(-vocab // tp)


def test_pick_first_takes_the_first_slot_holding_the_max_nan_first():
    nan = float("nan")
    values = torch.tensor([[1.0, nan, 2.0, float("-inf")], [3.0, nan, 2.0, float("-inf")], [3.0, 1.0, nan, 0.0]])
    ids = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23]])
    assert pick_first(values, ids).tolist() == [10, 1, 22, 23]


def test_block_rows_depend_only_on_token_count_and_budget():
    assert vocab_block_rows(1, 2, 1 << 20) == (1 << 19) // MIN_BLOCK_ROWS * MIN_BLOCK_ROWS
    assert vocab_block_rows(100, 2, 16 << 20) == 83840  # 16 MiB / (100 * 2 B), rounded down to 128s
    assert vocab_block_rows(10**6, 4, 1) == MIN_BLOCK_ROWS


# --------------------------------------------------------------------------- kernels per call (issue 19)


@pytest.mark.parametrize(
    "rows,blocks,most",
    # one block: matmul, max (no "+ 0" for ids that start at 0); two blocks: matmul and max each, the second
    # block's id offset, one argmax over the blocks and a gather (was 20 with the elementwise merge).
    [(15, 1, 2), (960, 2, 7)],
)
def test_the_eager_head_launches_few_kernels_at_tp1(rows, blocks, most):
    head = Head(torch.randn(4096, 64).to(torch.bfloat16))
    hidden = torch.randn(rows, 64, dtype=torch.bfloat16)
    budget = rows * 2 * (4096 // blocks)  # exactly ``blocks`` vocabulary blocks
    with KernelCount() as count:
        ids = greedy_token_ids(hidden, head, budget_bytes=budget)
    assert count.names.count("mm") == blocks
    assert count.kernels <= most, count.names
    assert torch.equal(ids, oracle(hidden, head.weight))


# --------------------------------------------------------------------------- draft sampler, one rank


def test_draft_sampler_writes_block_positions_1_on_into_a_fixed_buffer():
    gen = torch.Generator().manual_seed(6)
    weight = int_tensor(gen, 777, 8, dtype=torch.bfloat16)
    block_size, max_bs = 4, 8
    sampler = SplitHeadDraftSampler(Head(weight), block_size=block_size, max_bs=max_bs, budget_bytes=TINY_BUDGET)
    assert sampler.out.shape == (max_bs * (block_size - 1),)
    address = sampler.out.data_ptr()
    for bs in (max_bs, 3, 1):
        hidden = int_tensor(gen, bs * block_size, 8)
        with torch.inference_mode():  # as the worker runs the draft forward
            sampler(hidden, torch.zeros(bs * block_size, dtype=torch.int64))
        drafted = hidden.view(bs, block_size, 8)[:, 1:].reshape(-1, 8)
        assert torch.equal(sampler.out[: bs * (block_size - 1)], oracle(drafted, weight))
        assert sampler.out.data_ptr() == address


class _Worker:
    def __init__(self, block_size=8, **variants):
        self.block_size = block_size
        self.selector = self.lilicorr = None
        self._is_domino = False
        self.__dict__.update(variants)


def test_draft_sampler_supports(monkeypatch):
    monkeypatch.delenv("SGLANG_DFLASH_EAGER_DRAFT_SAMPLER", raising=False)
    dense = Head(torch.ones(10, 4))
    assert SplitHeadDraftSampler.supports(_Worker(), dense)
    assert not SplitHeadDraftSampler.supports(_Worker(block_size=1), dense)
    assert not SplitHeadDraftSampler.supports(_Worker(), QuantizedHead(torch.zeros(10, 4, dtype=torch.int8)))
    for variant in ({"selector": object()}, {"lilicorr": object()}, {"_is_domino": True}):
        assert not SplitHeadDraftSampler.supports(_Worker(**variant), dense)
    monkeypatch.setenv("SGLANG_DFLASH_EAGER_DRAFT_SAMPLER", "1")
    assert not SplitHeadDraftSampler.supports(_Worker(), dense)
