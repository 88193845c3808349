"""DFlash2's candidate step on Gemma 4's tied head (SGLang 0.5.19+) and the draft's sync across TP ranks, on 1, 2
and 3 real processes (gloo) with SGLang 0.5.23's own classes.

Every rank loads the plugin through SGLang's ``load_plugins()``; its hook goes on
``DFlash2DraftModel.compute_candidates`` when SGLang imports the draft model, as in a scheduler. Each world size is
spawned once; the parent checks what the ranks return:

- ``head.topk`` over Gemma 4's tied head class (V = 320, 1001, 1000: not divisible by 3; V = 3: one token per
  rank at TP 3), fp32 and bf16, one vocabulary block per rank or many, ties planted across slice boundaries, NaN
  logits: the same candidates on every rank, equal to a full-vocabulary ``torch.topk`` (its values) with equal
  logits (NaN included) by the lower id (``torch.sort(stable=True)``'s order);
- the tiny DFlash2 draft (``tiny_dflash2``) on the tiny Gemma 4 target (features captured by SGLang's target with
  the plugin's capture, in the parent): SGLang's ``_SelectorDraftSampler`` calls the hooked step as the draft CUDA
  graph does; on every rank the candidates equal torch.topk over the tied head, every rank drafts the same blocks,
  and the pair accepts the whole block; stock SGLang's step (the hook's original) raises on this head;
- the sync: one rank's draft hidden state one ulp off (``torch.nextafter``) on a planted tie; every rank still
  drafts the same block and the same candidates, while each rank alone (no exchange) follows its own hidden
  state; with upstream's accept step and ``SGLANG_SPEC_TP_SYNC=all`` the unsynced ranks commit different tokens;
- collectives per draft step (``testkit.kernels``): one all-gather for the plugin's candidates (upstream's step on
  a vocab-parallel head: two), one for its greedy head, and upstream's accept step one broadcast: no sync twice.
"""

from __future__ import annotations

import pytest
import torch
from sglang_gemma4_dflash_testkit import multiproc, tiny, tiny_accept, tiny_dflash2
from sglang_gemma4_dflash_testkit import sglang_cpu as _sglang_cpu
from sglang_gemma4_dflash_testkit.tiny import TINY

H = 8
TINY_BUDGET = 1  # the smallest vocabulary blocks (128 rows): many per rank
TOPK_VOCABS = (320, 1001, 1000, 3)
KS = (1, 4, 16)
DTYPES = (torch.float32, torch.bfloat16)
WORLD_SIZES = (1, 2, 3)
SYNC_VOCAB, SYNC_LOW, SYNC_HIGH, SYNC_K = 1001, 5, 996, 4  # the planted tie: ids 5 (rank 0) and 996 (last rank)
SYNC_BLOCK = 4

pytestmark = [
    pytest.mark.skipif(
        _sglang_cpu.cuda_engine_active(), reason="gloo CPU process tests; this machine drives SGLang's CUDA engine"
    ),
]


# --------------------------------------------------------------------------- inputs, built alike everywhere


def topk_case(vocab: int, dtype, world: int):
    """Integer-valued weight and rows (exact logits, many ties); row j < 8 ties two ids across a slice boundary."""
    gen = torch.Generator().manual_seed(vocab)
    weight = torch.randint(-2, 3, (vocab, H), generator=gen).to(dtype)
    hidden = torch.randint(-2, 3, (24, H), generator=gen).to(dtype)
    cuts = [r * vocab // world for r in range(1, world)] if vocab >= 2 * world else []
    for j, cut in enumerate(cuts):
        hidden[j] = 0
        hidden[j, j] = 1
        weight[cut - 1, j] = weight[cut, j] = 9
    return weight, hidden


def nan_case():
    """A finite maximum at id 510, NaN logits at ids 700 and 900 (every row sees them), an all-NaN row 3."""
    weight = torch.zeros(1003, H)
    weight[510, 0] = 1.0
    weight[700, 1] = weight[900, 1] = float("nan")
    hidden = torch.zeros(4, H)
    hidden[:, 0] = 1.0
    hidden[3] = float("nan")
    return weight, hidden


def sync_case(rank: int, world: int):
    """Logits 2 at ids 5 and 996 (a tie: the lower id), 0 elsewhere. The last rank (which scores id 996 in a split)
    holds a hidden state one ulp larger in the lane that id 996 reads: alone it sees 2 + 2**-22 there, picks 996."""
    weight = torch.zeros(SYNC_VOCAB, H)
    weight[SYNC_LOW, 0] = weight[SYNC_HIGH, 1] = 2.0
    hidden = torch.zeros(SYNC_BLOCK, H)
    hidden[:, :2] = 1.0
    if rank == world - 1:
        hidden[:, 1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    return weight, hidden


def oracle(logits: torch.Tensor, k: int) -> tuple[list, torch.Tensor]:
    """Full-vocabulary top-k: torch.topk's values; ids in torch.sort(stable=True)'s order (equal logits, NaN
    included, by the lower id). Both orders give the same values (checked)."""
    values = torch.topk(logits, k, dim=-1).values
    ordered = torch.sort(logits, dim=-1, descending=True, stable=True)
    torch.testing.assert_close(ordered.values[:, :k], values, rtol=0, atol=0, equal_nan=True)
    return ordered.indices[:, :k].tolist(), values.float()


def head_of(weight):
    from sglang.srt.models.gemma4_causal import Gemma4TextScaledWordEmbedding

    head = Gemma4TextScaledWordEmbedding(weight.shape[0], weight.shape[1], 0).to(weight.dtype)
    with torch.no_grad():
        head.weight.copy_(weight)
    return head


# --------------------------------------------------------------------------- on every rank


def _topk_cases(group, world: int) -> dict:
    from sglang_gemma4_dflash.head.topk import topk_tokens

    out = {}
    for vocab in TOPK_VOCABS:
        for dtype in DTYPES:
            weight, hidden = topk_case(vocab, dtype, world)
            head = head_of(weight)
            for k in KS:
                for budget in (TINY_BUDGET, None):
                    if k <= vocab:
                        kwargs = {} if budget is None else {"budget_bytes": budget}
                        ids, values = topk_tokens(hidden, head, k, group, **kwargs)
                        out[(vocab, str(dtype), k, budget)] = (ids.tolist(), values.tolist())
    weight, hidden = nan_case()
    out["nan"] = tuple(x.tolist() for x in topk_tokens(hidden, head_of(weight), 4, group))
    return out


def _tiny_walks(draft, head, walks: list, perturb_rank: int | None) -> dict:
    """The tiny DFlash2 draft along each planted continuation, through SGLang's _SelectorDraftSampler."""
    from sglang.srt.distributed import get_tp_group

    rank = get_tp_group().rank_in_group
    out = {"steps": [], "blocks": [], "candidates": [], "oracle_ok": True}

    def drafter(context, anchor):
        hidden = tiny_accept.draft_hidden(draft, head, context, anchor).float()
        if rank == perturb_rank:
            hidden[3, 7] = torch.nextafter(hidden[3, 7], torch.tensor(float("inf")))
        ids, candidates = tiny_dflash2.selector_draft_tokens(draft, head, hidden, anchor)
        expected, _ = oracle(hidden[1:] @ head.weight.T, tiny_dflash2.SELECTOR_TOP_K)
        out["oracle_ok"] &= candidates.tolist() == expected
        out["blocks"].append(ids)
        out["candidates"].append(candidates.tolist())
        return ids

    with torch.no_grad():  # steps every block (the same steps on every rank, whatever they draft)
        for features, seq, start in walks:
            out["steps"].append(tiny_accept.walk(drafter, features, seq, start, stride=TINY.block_size))
    return out


def _sync_cases(group, rank: int, world: int) -> dict:
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync
    from sglang_gemma4_dflash.dflash.draft_sampler import SplitHeadDraftSampler
    from sglang_gemma4_dflash.head.greedy import greedy_token_ids
    from sglang_gemma4_dflash.head.topk import topk_tokens
    from sglang_gemma4_dflash_testkit.kernels import KernelCount

    weight, hidden = sync_case(rank, world)
    head = head_of(weight)
    out = {
        "topk": topk_tokens(hidden, head, SYNC_K, group)[0].tolist(),
        "topk_alone": topk_tokens(hidden, head, SYNC_K, None)[0].tolist(),
        "greedy_alone": greedy_token_ids(hidden[1:], head, None).tolist(),
    }
    # A whole greedy DFLASH step: the plugin's split sampler drafts positions 1..3, upstream's accept step
    # (SpecTpSync at its default, "all") compares them with the target's tokens (the same on every rank: id 5).
    worker = DFlashWorkerV2.__new__(DFlashWorkerV2)
    worker.__dict__.update(
        _selector_sample=None, block_size=SYNC_BLOCK, _use_triton_accept_bonus=False, _tp_sync=SpecTpSync(group)
    )
    target_logits = torch.zeros(SYNC_BLOCK, SYNC_VOCAB)
    target_logits[:, SYNC_LOW] = 1.0
    sampler = SplitHeadDraftSampler(head, block_size=SYNC_BLOCK, max_bs=1, tp_group=group)
    for name, drafted in (("step", None), ("step_alone", greedy_token_ids(hidden[1:], head, None))):
        with KernelCount() as count:
            if drafted is None:
                sampler(hidden)
                drafted = sampler.out[: SYNC_BLOCK - 1]
            block = torch.cat([torch.tensor([7]), drafted])[None]
            _, commit_lens, _, out_tokens, _ = worker._accept_block(
                candidates=block,
                next_token_logits=target_logits,
                sampling_info=None,
                draft_input=None,
                prefix_lens=torch.tensor([10]),
                bs=1,
            )
        out[name] = {
            "drafted": drafted.tolist(),
            "committed": out_tokens[0, : int(commit_lens[0])].tolist(),
            "collectives": [n for n in count.names if n.startswith("c10d.")],
        }
    return out


def _counts(group, draft, head, world: int) -> dict:
    """Collectives of one draft step: the DFlash2 sampler with the plugin's candidates, and upstream's candidate
    step on a vocab-parallel head (SGLang's ParallelLMHead) for comparison."""
    from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead
    from sglang.srt.models.dflash import candidate_topk
    from sglang_gemma4_dflash_testkit.kernels import KernelCount

    hidden = torch.randn(TINY.block_size, TINY.hidden_size, generator=torch.Generator().manual_seed(0))
    with KernelCount() as ours:
        tiny_dflash2.selector_draft_tokens(draft, head, hidden, 20)
    parallel = ParallelLMHead(TINY.vocab_size, TINY.hidden_size)
    with torch.no_grad():
        parallel.weight.copy_(torch.randn(parallel.weight.shape, generator=torch.Generator().manual_seed(1)))
    with KernelCount() as upstream:
        candidate_topk(hidden, parallel, tiny_dflash2.SELECTOR_TOP_K)
    return {name: [n for n in c.names if n.startswith("c10d.")] for name, c in (("ours", ours), ("upstream", upstream))}


def _part(fn, *args):
    """One part's result, or the error it raised (on every rank alike: the other parts still run and report)."""
    try:
        return fn(*args)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _rank(rank: int, world: int, case: dict) -> dict:
    from sglang.srt.plugins import load_plugins

    load_plugins()  # as every SGLang process does; the hook goes on when the draft model's module is imported
    from sglang.srt.models.dflash import DFlash2DraftModel
    from sglang_gemma4_dflash.compat import registry, runtime, symbols
    from sglang_gemma4_dflash.dflash import candidates

    group = runtime.batch_group()
    assert (group.world_size, group.rank_in_group) == (world, rank)
    draft = tiny_dflash2.load_draft(case["draft2"])
    assert type(draft) is DFlash2DraftModel
    head = tiny_dflash2.target_head(case["target"])
    out = {
        "hooked": registry.hook_in_place(f"{symbols.DFLASH2_DRAFT}.compute_candidates", candidates.compute_candidates),
        "topk": _part(_topk_cases, group, world),
        "tiny": _part(_tiny_walks, draft, head, case["walks"], None),
        "tiny_perturbed": _part(_tiny_walks, draft, head, case["walks"][:1], world - 1),
        "sync": _part(_sync_cases, group, rank, world),
        "counts": _part(_counts, group, draft, head, world),
    }
    try:  # stock SGLang's step on this head: the hook's original
        DFlash2DraftModel.compute_candidates.__wrapped__(draft, torch.zeros(2, TINY.hidden_size))
        out["upstream"] = "ran"
    except AttributeError as exc:
        out["upstream"] = str(exc)
    return out


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tiny_case(sglang_tp1, tmp_path_factory) -> dict:
    """The tiny checkpoints, the DFlash2 draft, and along 4 prompts (both key modes) the planted continuation
    with the target features SGLang's Gemma4ForCausalLM captures through the plugin's hook."""
    if not hasattr(__import__("sglang.srt.models.dflash", fromlist=["x"]), "DFlash2DraftModel"):
        pytest.skip("this SGLang has no DFlash2 draft (0.5.19+)")
    root = tmp_path_factory.mktemp("tiny")
    paths = tiny.write_tiny_checkpoints(root)
    draft2 = tiny_dflash2.write_dflash2_draft(root / "draft2")
    target = tiny_accept.load_sglang_pair(paths).target
    walks = []
    for prompt in tiny_accept.prompts(count=4):
        seq = prompt + tiny.planted_continuation(prompt, 24)
        features, _ = tiny_accept.capture(target, seq)
        walks.append((features, seq, len(prompt)))
    return {"target": str(paths["target"]), "draft2": str(draft2), "walks": walks}


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda w: f"tp{w}")
def ranks(request, tiny_case):
    world = request.param
    return world, multiproc.run_ranks(world, _rank, tiny_case, timeout=600)


def _no_errors(results, *parts):
    for rank, result in enumerate(results):
        for part in parts:
            assert "error" not in result[part], f"rank {rank}, {part}: {result[part]['error']}"


def _same_on_every_rank(results, *path):
    _no_errors(results, path[0])

    def get(result):
        for key in path:
            result = result[key]
        return result

    first = get(results[0])
    for rank, result in enumerate(results[1:], start=1):  # repr: NaN == NaN
        assert repr(get(result)) == repr(first), f"rank {rank} disagrees with rank 0 on {path}"
    return first


# --------------------------------------------------------------------------- checks


def test_the_hook_is_in_place_where_sglang_imports_the_draft_model(ranks):
    _, results = ranks
    assert all(r["hooked"] for r in results)


def test_candidate_topk_over_the_tied_head_equals_the_full_vocabulary_topk_on_every_rank(ranks):
    world, results = ranks
    got = _same_on_every_rank(results, "topk")
    for vocab in TOPK_VOCABS:
        for dtype in DTYPES:
            weight, hidden = topk_case(vocab, dtype, world)
            logits = hidden @ weight.T
            for k in KS:
                for budget in (TINY_BUDGET, None):
                    if k <= vocab:
                        ids, values = got[(vocab, str(dtype), k, budget)]
                        expected_ids, expected_values = oracle(logits, k)
                        assert ids == expected_ids, (vocab, dtype, k, budget)
                        torch.testing.assert_close(torch.tensor(values), expected_values, rtol=0, atol=0)
            if 2 * world <= vocab:  # the ties across slice boundaries: both ids, the lower one first
                for j, cut in enumerate(r * vocab // world for r in range(1, world)):
                    assert got[(vocab, str(dtype), 4, None)][0][j][:2] == [cut - 1, cut]


def test_nan_logits_come_first_lower_id_first_as_torch_topk_ranks_them(ranks):
    _, results = ranks
    ids, values = _same_on_every_rank(results, "topk", "nan")
    weight, hidden = nan_case()
    expected_ids, expected_values = oracle(hidden @ weight.T, 4)
    assert ids == expected_ids == [[700, 900, 510, 0]] * 3 + [[0, 1, 2, 3]]
    torch.testing.assert_close(torch.tensor(values), expected_values, rtol=0, atol=0, equal_nan=True)


def test_stock_sglang_cannot_read_gemma4s_tied_head_in_the_candidate_step(ranks):
    world, results = ranks
    for r in results:
        assert ("org_vocab_size" if world == 1 else "shard_indices") in r["upstream"]


def test_the_tiny_dflash2_draft_drafts_the_same_blocks_on_every_rank_and_accepts_them(ranks):
    """SGLang's _SelectorDraftSampler with the hooked candidate step, on the tiny Gemma 4 target's features."""
    _, results = ranks
    _no_errors(results, "tiny")
    assert all(r["tiny"]["oracle_ok"] for r in results)  # candidates == torch.topk over the tied head, per rank
    _same_on_every_rank(results, "tiny", "candidates")
    _same_on_every_rank(results, "tiny", "blocks")
    steps = [s for per_prompt in _same_on_every_rank(results, "tiny", "steps") for s in per_prompt]
    assert sum(steps) / len(steps) == TINY.block_size  # the whole block, every step


def test_a_rank_whose_draft_hidden_state_is_one_ulp_off_still_drafts_the_same_block(ranks):
    """Item 2 of issue 20. Planted tie: alone, each rank follows its own hidden state (the last rank sees id 996 one
    ulp ahead); through the plugin's exchange every rank gets the same candidates and drafts the same block. On the
    tiny DFlash2 draft the last rank's hidden state is one ulp off in one element: the ranks still agree."""
    world, results = ranks
    _no_errors(results, "sync", "tiny_perturbed")
    alone = [r["sync"]["topk_alone"] for r in results]
    greedy_alone = [r["sync"]["greedy_alone"] for r in results]
    for rank in range(world):  # the inputs do flip the answer on the perturbed ranks
        first = [SYNC_HIGH, SYNC_LOW] if rank == world - 1 else [SYNC_LOW, SYNC_HIGH]
        assert [row[:2] for row in alone[rank]] == [first] * SYNC_BLOCK
        assert greedy_alone[rank] == [first[0]] * (SYNC_BLOCK - 1)
    synced = _same_on_every_rank(results, "sync", "topk")
    drafted = _same_on_every_rank(results, "sync", "step", "drafted")
    if world > 1:
        assert len({str(a) for a in alone}) == 2 and len({str(g) for g in greedy_alone}) == 2
    assert [row[:2] for row in synced] == [[SYNC_HIGH, SYNC_LOW]] * SYNC_BLOCK  # the last rank scores 996
    assert drafted == [SYNC_HIGH] * (SYNC_BLOCK - 1)
    _same_on_every_rank(results, "sync", "step", "committed")
    _same_on_every_rank(results, "tiny_perturbed", "candidates")
    _same_on_every_rank(results, "tiny_perturbed", "blocks")


def test_upstreams_accept_sync_does_not_keep_an_unsynced_draft_in_step(ranks):
    """SGLANG_SPEC_TP_SYNC=all broadcasts the target's tokens (ACCEPT_GREEDY), not the draft: ranks that draft
    alone commit different tokens (rank 0 accepts its drafted 5s, the last rank none of its 996s)."""
    world, results = ranks
    _no_errors(results, "sync")
    committed = [r["sync"]["step_alone"]["committed"] for r in results]
    assert committed[-1] == [SYNC_LOW]
    if world > 1:
        assert committed[0] == [SYNC_LOW] * SYNC_BLOCK


def test_each_thing_is_synced_once_per_step(ranks):
    """Per rank and step: the plugin's greedy head one all-gather, upstream's greedy accept one broadcast
    (SpecTpSync's ACCEPT_GREEDY; no SpecTpSync site covers the draft); the DFlash2 sampler with the plugin's
    candidates one all-gather (upstream's candidate step on a vocab-parallel head: two). None at TP 1."""
    world, results = ranks
    _no_errors(results, "sync", "counts")
    for r in results:
        many = world > 1
        assert r["sync"]["step"]["collectives"] == (["c10d._allgather_base_", "c10d.broadcast_"] if many else []), r[
            "sync"
        ]["step"]["collectives"]
        assert r["counts"]["ours"] == (["c10d._allgather_base_"] if many else []), r["counts"]
        assert len(r["counts"]["upstream"]) == (2 if many else 0), r["counts"]
