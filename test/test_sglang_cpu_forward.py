"""Real SGLang Gemma 4 models on CPU compute what transformers computes.

The SGLang model is built from the transformers config and filled through its own ``load_weights``
from the transformers state dict; a batch of prompts of different lengths (longer than the sliding
window of 8) runs as one prefill. Both run in float32 on CPU. Measured max abs diff of the
last-token logits: ~1e-6 (text) and ~5e-6 (multimodal class); the tolerance is 1e-4.
"""

import pytest
import torch

ATOL = 1e-4
RTOL = 1e-4
PROMPT_LENGTHS = (13, 6, 20)


@pytest.fixture(scope="module", params=["Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"])
def pair(request, sglang_tp1):
    config = sglang_tp1.tiny_text_config() if request.param == "Gemma4ForCausalLM" else sglang_tp1.tiny_mm_config()
    hf_model, sgl_model = sglang_tp1.build_pair(config)
    assert type(sgl_model).__name__ == request.param
    return sglang_tp1, config, hf_model, sgl_model


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
        print(f"{type(sgl_model).__name__} prompt {row} (len {prompt.numel()}): logits max abs diff {diff:.3g}")
        torch.testing.assert_close(got, ref_logits[-1], atol=ATOL, rtol=RTOL)
        assert int(got.argmax()) == int(ref_logits[-1].argmax())


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
