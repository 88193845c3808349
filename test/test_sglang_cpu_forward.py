"""Real SGLang Gemma 4 models on CPU compute what transformers computes.

The SGLang model is built from the transformers config and filled through its own ``load_weights``
from the transformers state dict; a batch of prompts of different lengths (longer than the sliding
window of 8) runs as one prefill. Both run in float32 on CPU. Measured max abs diff of the
last-token logits: ~1e-6 (text) and ~5e-6 (multimodal class); the tolerance is 1e-4.
"""

import pytest
import torch
from sglang_gemma4_dflash_testkit import sglang_cpu

ATOL = 1e-4
RTOL = 1e-4
PROMPT_LENGTHS = (13, 6, 20)


needs_cpu_softcap = pytest.mark.skipif(
    not sglang_cpu.softcap_runs_on_cpu(),
    reason="this SGLang soft-caps logits only with a Triton kernel, which cannot run on CPU (0.5.13 and older)",
)


@needs_cpu_softcap
def test_tiny_config_exercises_gemma4_features(sglang_tp1):
    config = sglang_tp1.tiny_text_config()
    assert {"sliding_attention", "full_attention"} <= set(config.layer_types)
    assert config.hidden_size_per_layer_input > 0
    assert config.final_logit_softcapping is not None
    assert config.tie_word_embeddings
    assert max(PROMPT_LENGTHS) > config.sliding_window


def test_prefill_logits_match_transformers(pair):
    helpers, config, hf_model, sgl_model = pair
    vocab = helpers.text_config_of(config).vocab_size
    prompts = helpers.random_prompts(PROMPT_LENGTHS, vocab)

    out = helpers.prefill(sgl_model, prompts)

    assert out.next_token_logits.shape == (len(prompts), vocab)
    for row, prompt in enumerate(prompts):
        ref_logits, _ = helpers.reference(hf_model, prompt)
        got = out.next_token_logits[row].float()
        diff = (got - ref_logits[-1]).abs().max().item()
        helpers.record(
            f"{type(sgl_model).__name__} last-token logits", f"prompt {row} (len {prompt.numel()})", diff, ATOL
        )
        torch.testing.assert_close(got, ref_logits[-1], atol=ATOL, rtol=RTOL)
        assert int(got.argmax()) == int(ref_logits[-1].argmax())


@needs_cpu_softcap
def test_softcapping_is_applied(pair):
    """The logits are soft-capped: the parity test sees small logits where the cap barely acts, so
    blow the embedding (= tied head) up and check the cap holds."""
    helpers, config, hf_model, sgl_model = pair
    cap = helpers.text_config_of(config).final_logit_softcapping
    embed = sgl_model.get_input_embeddings().weight
    saved = embed.detach().clone()
    try:
        with torch.no_grad():
            embed.mul_(200.0)
        prompts = helpers.random_prompts((7,), helpers.text_config_of(config).vocab_size, seed=5)
        logits = helpers.prefill(sgl_model, prompts).next_token_logits
    finally:
        with torch.no_grad():
            embed.copy_(saved)
    # Raw logits are now in the thousands; capped ones saturate at the cap (tanh rounds to 1 in fp32).
    assert logits.abs().max().item() <= cap
    assert logits.abs().max().item() > 0.9 * cap


# --- the whole server: python -m sglang_gemma4_dflash_testkit.cpu_server ------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(
    sglang_cpu.sglang_version() < (0, 5, 23),
    reason="SGLang 0.5.13 and 0.5.16 accept only GPU attention backends for Gemma 4 (trtllm_mha, triton, intel_xpu)",
)
def test_cpu_server_generates_the_tiny_targets_planted_continuation(tmp_path_factory):
    """SGLang's launcher, scheduler and detokenizer processes (spawned) all run with the stand-ins:
    the server comes up on CPU and greedy /generate follows the tiny target's planted successor map
    (prompts longer than its sliding window of 16, batched concurrently)."""
    from sglang_gemma4_dflash_testkit import e2e, tiny

    paths = tiny.write_tiny_checkpoints(tmp_path_factory.mktemp("tiny"))
    prompts = e2e.token_prompts(tiny.TINY.vocab_size, [5, 23, 40], seed=3, low=tiny.TINY.num_special_tokens)
    args = e2e.cpu_server_args(4, max_total_tokens=2048)
    with e2e.Server(paths["target"], args, launcher=e2e.CPU_LAUNCHER, ready_timeout=300) as server:
        outputs = e2e.generate_many(server.base_url, prompts, max_new_tokens=12, concurrency=3)
        log = server.log_tail(200_000)
    assert "fallback to torch_native backend" in log
    for prompt, out in zip(prompts, outputs):
        assert out.output_ids == tiny.planted_continuation(prompt, 12), f"prompt {prompt}"


# --- the sgl_kernel stand-ins -------------------------------------------------------------------------


def _cpu_guarded_sgl_kernel_imports():
    """Names imported at module level from ``sgl_kernel`` under an ``if _is_cpu:`` (or ``elif _is_cpu:``)
    guard anywhere in the installed SGLang, by file: what importing SGLang on CPU needs."""
    import ast
    import warnings
    from pathlib import Path

    import sglang

    found = {}
    for path in Path(sglang.__file__).parent.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        if "sgl_kernel" not in source or "_is_cpu" not in source:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(source)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "_is_cpu"):
                continue
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module == "sgl_kernel":
                    found.setdefault(str(path), []).extend(alias.name for alias in stmt.names)
    return found


def test_standins_cover_every_cpu_guarded_sgl_kernel_import(sglang_tp1):
    from sglang_gemma4_dflash_testkit import cpu_standins

    found = _cpu_guarded_sgl_kernel_imports()
    wanted = {name for names in found.values() for name in names}
    if sglang_tp1.sglang_version() >= (0, 5, 23):
        assert "assign_req_to_token_pool_cpu" in wanted  # the scan sees the known importer
    assert wanted <= set(cpu_standins.STANDIN_NAMES), {
        f: n for f, n in found.items() if set(n) - set(cpu_standins.STANDIN_NAMES)
    }


def test_standins_raise_when_called(sglang_tp1):
    import sgl_kernel
    from sglang_gemma4_dflash_testkit import cpu_standins

    assert cpu_standins.is_installed()
    for name in cpu_standins.STANDIN_NAMES:
        with pytest.raises(RuntimeError, match=f"sgl_kernel.{name} was called.*stand-ins"):
            getattr(sgl_kernel, name)(torch.zeros(1))


def test_a_moe_target_is_refused_by_the_cpu_pair_builder(sglang_tp1):
    # SGLang 0.5.23's CPU MoE router ignores the router norm's scale (issue 9): no CPU test may compare a
    # MoE target with transformers without accounting for it, so the shared builder refuses one.
    with pytest.raises(ValueError, match="enable_moe_block=True.*router norm's scale"):
        sglang_tp1.build_pair(sglang_tp1.tiny_text_config(enable_moe_block=True))
