"""The hooks placed on SGLang's DFlash worker, run against a real SGLang Gemma 4 model on CPU.

The DFlash worker itself needs a GPU; these tests hand each hook the parts of a worker it reads
(`target_worker.model_runner.model`, the real model) and an `original` that records what it saw.
"""

import json
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


def _init_with_draft(gemma4, draft_dir):
    target_worker = SimpleNamespace(
        model_runner=SimpleNamespace(model=gemma4, model_config=SimpleNamespace(hf_config=gemma4.config))
    )
    server_args = SimpleNamespace(
        speculative_draft_model_path=str(draft_dir), trust_remote_code=False, speculative_draft_model_revision=None
    )
    worker = _InitSignature.__new__(_InitSignature)
    worker_hooks.check_draft_at_init(
        _InitSignature.__init__, worker, server_args, 0, 0, None, 0, 0, 0, 0, target_worker=target_worker
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


def _draft_copy(src, dst, *, hidden_size, vocab_size, target_layer_ids, mask_token_id=TINY.mask_token_id):
    config = json.loads((src / "config.json").read_text())
    config.update(hidden_size=hidden_size, vocab_size=vocab_size)
    config["dflash_config"].update(target_layer_ids=target_layer_ids, mask_token_id=mask_token_id)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


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
