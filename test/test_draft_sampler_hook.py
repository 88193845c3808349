"""The plugin's hook on the v2 worker's draft-sampler builder (SGLang 0.5.2x), on real processes (gloo).

The builder is SGLang's own ``DFlashWorkerV2._maybe_build_draft_sampler``, run on a worker object that
carries what it reads (the worker itself needs a GPU). Upstream's builder runs first: its sampler, and
what it sets up, are kept whenever it returns one. Where it keeps Gemma 4's tied head eager (TP>1, no
``shard_indices``) the plugin's split sampler takes over; under DP attention with one attention-TP rank
per DP group that sampler scores the whole vocabulary on its rank, with no collective.
"""

from __future__ import annotations

import pytest
import torch
from sglang_gemma4_dflash_testkit import multiproc
from sglang_gemma4_dflash_testkit import sglang_cpu as _sglang_cpu

H, VOCAB, BLOCK = 8, 1001, 4

pytestmark = pytest.mark.skipif(
    _sglang_cpu.cuda_engine_active(), reason="gloo CPU process tests; this machine drives SGLang's CUDA engine"
)


def inputs():
    gen = torch.Generator().manual_seed(3)
    weight = torch.randint(-2, 3, (VOCAB, H), generator=gen).float()
    hidden = torch.randint(-2, 3, (2 * BLOCK, H), generator=gen).float()
    return weight, hidden


def _worker(variant: bool = False):
    """A DFlashWorkerV2 object with what ``_maybe_build_draft_sampler`` reads; ``variant``: a future draft
    variant that upstream folds into the graph with a sampler of its own (and sets the draft's head)."""
    from types import SimpleNamespace

    from sglang.srt.models.gemma4_causal import Gemma4ForCausalLM, Gemma4TextScaledWordEmbedding
    from sglang.srt.runtime_context import get_parallel
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    class FutureVariantWorker(DFlashWorkerV2):
        def _maybe_build_draft_sampler(self):
            if self.future_variant:
                self.draft_model.lm_head = self._target_worker.model_runner.model.lm_head
                return "the variant's own sampler"
            return super()._maybe_build_draft_sampler()

    weight, _ = inputs()
    head = Gemma4TextScaledWordEmbedding(VOCAB, H, padding_idx=0)
    with torch.no_grad():
        head.weight.copy_(weight)
    target = Gemma4ForCausalLM.__new__(Gemma4ForCausalLM)
    torch.nn.Module.__init__(target)
    target.lm_head = head
    worker = FutureVariantWorker.__new__(FutureVariantWorker)
    worker.__dict__.update(
        future_variant=variant,
        block_size=BLOCK,
        selector=None,
        lilicorr=None,
        _is_domino=False,
        _target_tp_rank=int(get_parallel().tp_rank),
        _target_worker=SimpleNamespace(model_runner=SimpleNamespace(model=target)),
        draft_model=SimpleNamespace(),
    )
    return worker


def _build(worker):
    from sglang_gemma4_dflash.compat import runtime
    from sglang_gemma4_dflash.dflash import worker_hooks

    # A CPU server captures no CUDA graphs, so SGLang publishes no graph batch sizes (upstream builds a
    # sampler only when it captures); the sampler's buffers are sized here for 2 draft blocks.
    runtime.max_draft_graph_bs = lambda worker: 2
    return worker_hooks.build_split_sampler(type(worker)._maybe_build_draft_sampler, worker)


def _rank(rank: int, world: int) -> dict:
    from sglang_gemma4_dflash.compat import runtime
    from sglang_gemma4_dflash.dflash.draft_sampler import SplitHeadDraftSampler

    _, hidden = inputs()
    out = {"tp": int(runtime.tp_group().world_size), "group": int(runtime.batch_group().world_size)}
    plain = _worker()
    sampler = _build(plain)
    out["plain"] = type(sampler).__name__
    if isinstance(sampler, SplitHeadDraftSampler):
        sampler(hidden)
        out["ranks"] = sampler.layout.tp_size
        out["ids"] = sampler.out[: 2 * (BLOCK - 1)].tolist()
    variant = _worker(variant=True)
    out["variant"] = _build(variant)
    out["variant_head_set"] = getattr(variant.draft_model, "lm_head", None) is not None
    return out


def _expected():
    weight, hidden = inputs()
    drafted = hidden.view(2, BLOCK, H)[:, 1:].reshape(-1, H)
    return torch.argmax(drafted @ weight.T, dim=-1).tolist()


def test_at_tp2_upstream_runs_first_and_the_split_sampler_replaces_only_its_eager_head():
    for r in multiproc.run_ranks(2, _rank, timeout=240):
        assert (r["tp"], r["group"]) == (2, 2)
        assert r["plain"] == "SplitHeadDraftSampler" and r["ranks"] == 2  # upstream: eager ("tp>1 without ...")
        assert r["ids"] == _expected()
        assert r["variant"] == "the variant's own sampler" and r["variant_head_set"]  # upstream's, side effect kept


def test_under_dp_attention_with_one_rank_per_dp_group_the_head_is_folded_into_the_graph():
    """TP 2, DP 2 (``--enable-dp-lm-head``): one attention-TP rank per DP group. Upstream keeps the tied head
    eager (TP>1); the first version then kept it eager too, every step. The plugin's sampler runs on one rank."""
    args = {"dp_size": 2, "enable_dp_attention": True, "enable_dp_lm_head": True}
    for r in multiproc.run_ranks(2, _rank, server_args=args, timeout=240):
        assert (r["tp"], r["group"]) == (2, 1)
        assert r["plain"] == "SplitHeadDraftSampler" and r["ranks"] == 1
        assert r["ids"] == _expected()
