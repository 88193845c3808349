"""The plugin's draft head under DP attention (SGLang 0.5.2x: DFLASH with ``--enable-dp-attention
--enable-dp-lm-head``), on 4 real processes (gloo): TP 4, DP 2, so two DP groups of two attention-TP ranks.

Each DP group drafts its own batch, so the two groups call the head with different row counts. A
collective over the whole TP group would pair those calls (a hang on GPU, an error or wrong rows with
gloo); the head must split over the ranks that share the rows (``runtime.batch_group()``) and give every
rank of a group the full-vocabulary argmax of its own rows.
"""

from __future__ import annotations

import pytest
import torch
from sglang_gemma4_dflash_testkit import multiproc
from sglang_gemma4_dflash_testkit import sglang_cpu as _sglang_cpu
from sglang_gemma4_dflash_testkit.dp_head_case import DP_ARGS, VOCAB, H, dp_inputs

pytestmark = pytest.mark.skipif(
    _sglang_cpu.cuda_engine_active(), reason="gloo CPU process tests; this machine drives SGLang's CUDA engine"
)


def _rank(rank: int, world: int) -> dict:
    from sglang.srt.models.gemma4_causal import Gemma4ForCausalLM, Gemma4TextScaledWordEmbedding
    from sglang.srt.runtime_context import get_parallel
    from sglang_gemma4_dflash.compat import runtime
    from sglang_gemma4_dflash.dflash import worker_hooks

    dp_rank = int(get_parallel().attn_dp_rank)
    weight, hidden = dp_inputs(dp_rank)
    head = Gemma4TextScaledWordEmbedding(VOCAB, H, padding_idx=0)
    with torch.no_grad():
        head.weight.copy_(weight)
    # A Gemma 4 target is all the hook reads of the worker (its class); the model is not built.
    target = Gemma4ForCausalLM.__new__(Gemma4ForCausalLM)
    worker = type("Worker", (), {})()
    worker._target_worker = type("TargetWorker", (), {})()
    worker._target_worker.model_runner = type("Runner", (), {"model": target})()

    def upstream(*args, **kwargs):
        raise AssertionError("upstream's head must not run for a Gemma 4 target")

    ids = worker_hooks.greedy_sample(upstream, worker, hidden_states=hidden, lm_head=head, chunk_size=256)
    group = runtime.batch_group()
    return {"dp_rank": dp_rank, "ids": ids.tolist(), "group": int(group.world_size)}


def test_head_under_dp_attention_splits_within_each_dp_group():
    results = multiproc.run_ranks(4, _rank, server_args=DP_ARGS, timeout=180)
    assert sorted(r["dp_rank"] for r in results) == [0, 0, 1, 1]
    for r in results:
        weight, hidden = dp_inputs(r["dp_rank"])
        assert r["group"] == 2  # the attention-TP group of its DP group, not the TP group of 4
        assert r["ids"] == torch.argmax(hidden @ weight.T, dim=-1).tolist()
        assert r["ids"][0] == VOCAB // 2 - 1
