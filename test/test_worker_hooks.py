"""The hooks placed on SGLang's DFlash worker, run against a real SGLang Gemma 4 model on CPU.

The DFlash worker itself needs a GPU; these tests hand each hook the parts of a worker it reads
(`target_worker.model_runner.model`, the real model) and an `original` that records what it saw.
"""

import json
import logging
from types import SimpleNamespace

import pytest
import torch
from sglang_gemma4_dflash.dflash import worker_hooks
from sglang_gemma4_dflash_testkit.tiny import TINY, write_tiny_checkpoints


@pytest.fixture(scope="module")
def gemma4(sglang_tp1):
    _, model = sglang_tp1.build_pair(sglang_tp1.tiny_text_config())
    return model


def _worker(model, **extra):
    return SimpleNamespace(target_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model)), **extra)


def test_gemma4_head_has_no_shard_indices(gemma4):
    # The premise of the v1 hook: SGLang's Gemma 4 ties its head to a replicated embedding.
    assert gemma4.lm_head is gemma4.model.embed_tokens
    assert not hasattr(gemma4.lm_head, "shard_indices")


def test_v1_draft_step_sees_a_replicated_head_only_during_the_step(gemma4):
    seen = {}

    def original(worker, batch, draft_input):
        head = worker.target_worker.model_runner.model.lm_head
        seen["has"], seen["value"] = hasattr(head, "shard_indices"), getattr(head, "shard_indices", "absent")
        return "drafted"

    assert worker_hooks.draft_step_with_replicated_head(original, _worker(gemma4), "batch", "input") == "drafted"
    assert seen == {"has": True, "value": None}
    assert not hasattr(gemma4.lm_head, "shard_indices")


def test_v1_draft_step_cleans_up_when_the_step_raises(gemma4):
    def original(worker, batch, draft_input):
        raise RuntimeError("draft OOM")

    with pytest.raises(RuntimeError, match="draft OOM"):
        worker_hooks.draft_step_with_replicated_head(original, _worker(gemma4), "batch", "input")
    assert not hasattr(gemma4.lm_head, "shard_indices")


def test_v1_draft_step_leaves_other_targets_alone():
    head = torch.nn.Embedding(10, 4)
    other = SimpleNamespace(lm_head=head)  # not a Gemma 4 model

    def original(worker, batch, draft_input):
        return hasattr(worker.target_worker.model_runner.model.lm_head, "shard_indices")

    assert worker_hooks.draft_step_with_replicated_head(original, _worker(other), "b", "i") is False


def test_eager_head_hook_gives_the_full_vocab_argmax_for_gemma4(gemma4):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(37, gemma4.config.hidden_size, generator=gen)

    def original(worker, **kwargs):
        raise AssertionError("upstream's head must not run for a Gemma 4 target")

    got = worker_hooks.greedy_sample(original, _worker(gemma4), hidden_states=hidden, lm_head=gemma4.lm_head)
    want = torch.argmax(hidden @ gemma4.lm_head.weight.T, dim=-1)
    assert torch.equal(got, want)


def test_eager_head_hook_defers_to_upstream_for_other_targets():
    other = SimpleNamespace(lm_head=torch.nn.Embedding(10, 4))

    def original(worker, *, hidden_states, lm_head, chunk_size=256):
        return "upstream"

    got = worker_hooks.greedy_sample(original, _worker(other), hidden_states=torch.zeros(2, 4), lm_head=other.lm_head)
    assert got == "upstream"


def test_graph_sampler_hook_defers_to_upstream_at_tp1(gemma4):
    called = []

    def original(worker):
        called.append(True)
        return "upstream sampler"

    worker = SimpleNamespace(_target_worker=SimpleNamespace(model_runner=SimpleNamespace(model=gemma4)), block_size=8)
    assert worker_hooks.build_split_sampler(original, worker) == "upstream sampler"
    assert called


class _InitSignature:
    """The keyword names the hook binds, as both SGLang lines spell them."""

    def __init__(
        self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank, moe_dp_rank, nccl_port, target_worker
    ):
        self.initialised = True


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    return write_tiny_checkpoints(tmp_path_factory.mktemp("tiny"))


def _init_with_draft(gemma4, draft_dir, init=_InitSignature, **server_args):
    target_worker = SimpleNamespace(
        model_runner=SimpleNamespace(model=gemma4, model_config=SimpleNamespace(hf_config=gemma4.config))
    )
    server_args = SimpleNamespace(
        speculative_draft_model_path=str(draft_dir),
        trust_remote_code=False,
        speculative_draft_model_revision=None,
        **server_args,
    )
    worker = init.__new__(init)
    worker_hooks.check_draft_at_init(
        init.__init__, worker, server_args, 0, 0, None, 0, 0, 0, 0, target_worker=target_worker
    )
    return worker


def test_init_hook_lets_a_fitting_draft_through(gemma4, tiny_dirs, tmp_path):
    # The CPU test model is smaller than the tiny checkpoint: give the draft its sizes.
    draft = _draft_copy(
        tiny_dirs["draft"],
        tmp_path,
        hidden_size=gemma4.config.hidden_size,
        vocab_size=gemma4.config.vocab_size,
        target_layer_ids=[1, 3],
    )
    assert _init_with_draft(gemma4, draft).initialised


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_size": 128}, "hidden_size=128"),
        ({"vocab_size": 1000}, "vocab_size=1000"),
        ({"target_layer_ids": [1, 99]}, "layer id 99 is out of range"),
        ({"mask_token_id": 10_000}, "mask_token_id=10000"),
    ],
)
def test_init_hook_refuses_a_draft_that_does_not_fit_before_init_runs(gemma4, tiny_dirs, tmp_path, change, message):
    fields = {
        "hidden_size": gemma4.config.hidden_size,
        "vocab_size": gemma4.config.vocab_size,
        "target_layer_ids": [1, 3],
        **change,
    }
    draft = _draft_copy(tiny_dirs["draft"], tmp_path, **fields)
    with pytest.raises(ValueError, match=message):
        _init_with_draft(gemma4, draft)


def _draft_copy(src, dst, *, hidden_size, vocab_size, target_layer_ids, mask_token_id=TINY.mask_token_id, **dflash):
    config = json.loads((src / "config.json").read_text())
    config.update(hidden_size=hidden_size, vocab_size=vocab_size)
    config["dflash_config"].update(target_layer_ids=target_layer_ids, mask_token_id=mask_token_id, **dflash)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def _fitting_draft(gemma4, tiny_dirs, tmp_path, **dflash):
    return _draft_copy(
        tiny_dirs["draft"],
        tmp_path,
        hidden_size=gemma4.config.hidden_size,
        vocab_size=gemma4.config.vocab_size,
        target_layer_ids=[1, 3],
        **dflash,
    )


def test_init_hook_warns_when_the_draft_tokens_differ_from_the_drafts_block(gemma4, tiny_dirs, tmp_path, caplog):
    draft = _fitting_draft(gemma4, tiny_dirs, tmp_path, block_size=16)
    with caplog.at_level(logging.WARNING, logger="sglang_gemma4_dflash"):
        _init_with_draft(gemma4, draft, speculative_num_draft_tokens=16)
        assert not [r for r in caplog.records if "block_size" in r.getMessage()]
        _init_with_draft(gemma4, draft, speculative_num_draft_tokens=32)
    (record,) = [r for r in caplog.records if "block_size" in r.getMessage()]
    message = record.getMessage()
    assert "dflash_config.block_size=16" in message and "--speculative-num-draft-tokens is 32" in message
    assert "pass --speculative-num-draft-tokens 16" in message


@pytest.mark.parametrize("block_size", [0, "16", 2.5])
def test_init_hook_refuses_a_block_size_that_is_not_a_positive_int(gemma4, tiny_dirs, tmp_path, block_size):
    draft = _fitting_draft(gemma4, tiny_dirs, tmp_path, block_size=block_size)
    with pytest.raises(ValueError, match=f"dflash_config.block_size={block_size!r}; it must be a positive int"):
        _init_with_draft(gemma4, draft, speculative_num_draft_tokens=16)


class _InitWithSampler(_InitSignature):
    """A v2 worker that built the plugin's graph sampler."""

    def __init__(
        self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank, moe_dp_rank, nccl_port, target_worker
    ):
        from sglang_gemma4_dflash.dflash.draft_sampler import SplitHeadDraftSampler

        head = torch.nn.Embedding(64, 4)
        self._draft_sampler = SplitHeadDraftSampler(head, block_size=4, max_bs=1)


class _InitWithSelector(_InitSignature):
    """A v2 worker whose draft is a DFlash2 draft (it has a candidate selector)."""

    def __init__(
        self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank, moe_dp_rank, nccl_port, target_worker
    ):
        from types import SimpleNamespace

        self.draft_model = SimpleNamespace(candidate_selector=SimpleNamespace(top_k=4))


def test_init_hook_logs_one_line_saying_which_pieces_run(gemma4, tiny_dirs, tmp_path, caplog, monkeypatch):
    from sglang_gemma4_dflash.compat import registry

    draft = _fitting_draft(gemma4, tiny_dirs, tmp_path)
    gemma4.model.layers_to_capture = [2, 4]  # what the capture method set when the target loaded (ids 1 and 3)
    with caplog.at_level(logging.INFO, logger="sglang_gemma4_dflash"):
        _init_with_draft(gemma4, draft)
        _init_with_draft(gemma4, draft, init=_InitWithSampler)
        _init_with_draft(gemma4, draft, init=_InitWithSelector)  # the candidate hook is not on in this process
        monkeypatch.setattr(registry, "hook_in_place", lambda target, impl: target.endswith(".compute_candidates"))
        _init_with_draft(gemma4, draft, init=_InitWithSelector)
    lines = [r.getMessage() for r in caplog.records if "start-up checks passed" in r.getMessage()]
    assert len(lines) == 4, lines  # one per worker
    assert lines[2].endswith("; DFlash2 candidates: upstream's step")
    assert lines[3].endswith("; DFlash2 candidates: the plugin's exact top-4 over 1 rank(s)")
    for line in lines:
        assert f"draft {draft}" in line and "capture of layers [1, 3]" in line and "for Gemma4ForCausalLM" in line
    assert "draft head: upstream's eager head" in lines[0]  # this stand-in worker has no head method to hook
    assert "draft head: the plugin's split head in the draft CUDA graph over 1 rank(s)" in lines[1]


class _UpstreamSampler:
    """Stands for upstream's in-graph draft sampler (what 0.5.16 builds at TP=1)."""


class _V2Worker(_InitSignature):
    """The v2 order (0.5.14+): the worker is built first; the target's capture ids are set later (the target's
    ``init_attention_backends``) and the draft's graph sampler later still (the worker's ``init_cuda_graphs``)."""

    def __init__(
        self, server_args, gpu_id, tp_rank, dp_rank, moe_ep_rank, attn_cp_rank, moe_dp_rank, nccl_port, target_worker
    ):
        self._target_worker = target_worker

    def init_cuda_graphs(self):
        self._draft_sampler = _UpstreamSampler()


def test_v2_worker_logs_its_line_once_capture_and_sampler_are_set(gemma4, tiny_dirs, tmp_path, caplog, monkeypatch):
    """On 0.5.16 the line, logged when the worker was built, said "capture of layers []" and "the plugin's exact
    head, eager" while upstream's in-graph sampler ran (H200 run of 2026-12-03): it is logged after the graphs."""
    from sglang_gemma4_dflash.compat import registry

    draft = _fitting_draft(gemma4, tiny_dirs, tmp_path)
    monkeypatch.setattr(registry, "hook_in_place", lambda target, impl: target.endswith("_V2Worker.init_cuda_graphs"))
    monkeypatch.setattr(gemma4.model, "layers_to_capture", [])  # not yet set when the v2 worker is built

    def messages():
        return [r.getMessage() for r in caplog.records if "start-up checks passed" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="sglang_gemma4_dflash"):
        worker = _init_with_draft(gemma4, draft, init=_V2Worker)
        assert messages() == []
        gemma4.model.layers_to_capture = [2, 4]  # the target's init_attention_backends (ids 1 and 3)
        worker_hooks.report_after_graphs(_V2Worker.init_cuda_graphs, worker)
    (line,) = messages()
    assert "capture of layers [1, 3]" in line and f"draft {draft}" in line
    assert line.endswith("draft head: upstream's _UpstreamSampler in the draft CUDA graph")


def test_v2_report_hook_leaves_other_targets_alone(caplog):
    worker = _V2Worker.__new__(_V2Worker)  # built for a target that is not Gemma 4: the init hook stored nothing
    with caplog.at_level(logging.INFO, logger="sglang_gemma4_dflash"):
        worker_hooks.report_after_graphs(_V2Worker.init_cuda_graphs, worker)
    assert isinstance(worker._draft_sampler, _UpstreamSampler) and not caplog.records


def test_eager_head_hook_works_out_the_group_and_layout_once_per_worker_and_head(gemma4, monkeypatch):
    from sglang_gemma4_dflash.compat import runtime
    from sglang_gemma4_dflash.head import cached

    calls = {"layout": 0, "group": 0}
    layout_for_head, batch_group = cached.layout_for_head, runtime.batch_group

    def counting_layout(*args):
        calls["layout"] += 1
        return layout_for_head(*args)

    def counting_group():
        calls["group"] += 1
        return batch_group()

    monkeypatch.setattr(cached, "layout_for_head", counting_layout)
    monkeypatch.setattr(runtime, "batch_group", counting_group)
    hidden = torch.randn(5, gemma4.config.hidden_size, generator=torch.Generator().manual_seed(2))
    want = torch.argmax(hidden @ gemma4.lm_head.weight.T, dim=-1)
    worker = _worker(gemma4)
    for _ in range(3):
        got = worker_hooks.greedy_sample(None, worker, hidden_states=hidden, lm_head=gemma4.lm_head)
        assert torch.equal(got, want)
    assert calls == {"layout": 1, "group": 1}
    other = torch.nn.Embedding(gemma4.config.vocab_size, gemma4.config.hidden_size)  # another head: worked out anew
    worker_hooks.greedy_sample(None, worker, hidden_states=hidden, lm_head=other)
    assert calls == {"layout": 2, "group": 2}


ACCEPTANCE = """
import json
import logging
from types import SimpleNamespace
from sglang_gemma4_dflash_testkit.cpu_standins import install
install()
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.models.gemma4_causal import Gemma4ForCausalLM
from sglang_gemma4_dflash.dflash import worker_hooks

def request():
    req = Req.__new__(Req)  # SGLang's request; only the counters the verify step keeps
    req.spec_verify_ct, req.spec_correct_drafts_histogram = 0, []
    return req

reqs = [request(), request()]
steps = [[3, 0], [7, 3], [3, 1]]  # drafts accepted per request in three verify steps

def verify(worker, batch):  # what the v1 verify does to the requests, and what it returns
    for req in batch.reqs:
        req.spec_verify_ct += 1
    return SimpleNamespace(num_correct_drafts_per_req_cpu=steps[len(seen)])

seen = []
target = SimpleNamespace(model_runner=SimpleNamespace(model=Gemma4ForCausalLM.__new__(Gemma4ForCausalLM)))
worker = SimpleNamespace(target_worker=target)
for _ in steps:
    worker_hooks.record_acceptance(verify, worker, SimpleNamespace(reqs=reqs))
    seen.append(1)
other = SimpleNamespace(target_worker=SimpleNamespace(model_runner=SimpleNamespace(model=object())))
lone = request()
seen.clear()
worker_hooks.record_acceptance(verify, other, SimpleNamespace(reqs=[lone, request()]))
print(json.dumps({"hist": [r.spec_correct_drafts_histogram for r in reqs], "other": lone.spec_correct_drafts_histogram}))
"""


def test_v1_verify_steps_fill_each_requests_acceptance_histogram(sglang_0513):
    """SGLang 0.5.13's v1 verify counts steps but fills no per-step histogram, so meta_info had no per-position
    acceptance; the hook fills it through SGLang's own Req method (bench reads it as on 0.5.16)."""
    import os
    import subprocess

    python, extra = sglang_0513
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", **extra)
    proc = subprocess.run([python, "-c", ACCEPTANCE], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["hist"] == [[0, 0, 0, 2, 0, 0, 0, 1], [1, 1, 0, 1]]  # steps by drafts accepted
    assert out["other"] == []  # not a Gemma 4 target: untouched


def test_eager_head_hook_passes_unknown_arguments_to_upstream_unchanged(gemma4):
    hidden = torch.zeros(3, gemma4.config.hidden_size)
    seen = {}

    def original(worker, *args, **kwargs):  # a fork's head with an extra argument
        seen.update(args=args, kwargs=kwargs)
        return "upstream"

    got = worker_hooks.greedy_sample(
        original, _worker(gemma4), hidden_states=hidden, lm_head=gemma4.lm_head, return_confidence=True
    )
    assert got == "upstream"
    assert seen["kwargs"] == {"hidden_states": hidden, "lm_head": gemma4.lm_head, "return_confidence": True}
    assert worker_hooks.greedy_sample(original, _worker(gemma4), hidden, gemma4.lm_head) == "upstream"
    assert seen["args"] == (hidden, gemma4.lm_head)  # positional: not the plugin's to reinterpret


def test_eager_head_hook_keeps_its_own_head_with_upstream_chunk_size(gemma4):
    hidden = torch.randn(5, gemma4.config.hidden_size, generator=torch.Generator().manual_seed(1))

    def original(worker, **kwargs):
        raise AssertionError("upstream's head must not run for a Gemma 4 target")

    got = worker_hooks.greedy_sample(
        original, _worker(gemma4), hidden_states=hidden, lm_head=gemma4.lm_head, chunk_size=2
    )
    assert torch.equal(got, torch.argmax(hidden @ gemma4.lm_head.weight.T, dim=-1))


def test_sampling_prebuild_stays_out_of_the_way_without_a_gpu(monkeypatch):
    # Its effect (no compile inside the first sampled request) is measured on a GPU by
    # scripts/gpu/run_tiny_e2e.py's stall job; here: no CUDA or switched off means no thread and no error.
    from sglang_gemma4_dflash.dflash import sampling_prebuild

    assert sampling_prebuild.start() is None
    monkeypatch.setenv(sampling_prebuild.ENV, "0")
    assert sampling_prebuild.start() is None
    sampling_prebuild.finish(None)
