"""``set_dflash_layers_to_capture`` on the real SGLang Gemma 4 classes, checked against transformers.

Layer id ``L`` (transformers numbering) must give the DFlash draft the output of decoder layer ``L``,
which is transformers' ``output_hidden_states[L + 1]``. Exception, measured and asserted below: for the
last layer SGLang captures the stream *before* the final norm, whereas transformers' last
``hidden_states`` entry is the normed ``last_hidden_state``; it equals transformers' pre-norm state.
Both sides run in float32 on CPU; measured max abs diff of captured states ~3e-5, tolerance 1e-4.
"""

import numpy as np
import pytest
import torch
from sglang_gemma4_dflash.gemma4.capture import set_dflash_layers_to_capture
from sglang_gemma4_dflash.gemma4.validate import validate_draft_against_target

ATOL = 1e-4
RTOL = 1e-4
PROMPT_LENGTHS = (13, 6, 20)


def _split(aux, lengths, num_ids, hidden):
    """[tokens, num_ids * hidden] -> per prompt, per id: [len, hidden]."""
    assert aux.shape == (sum(lengths), num_ids * hidden)
    rows = torch.split(aux, list(lengths), dim=0)
    return [[r[:, k * hidden : (k + 1) * hidden] for k in range(num_ids)] for r in rows]


@pytest.mark.parametrize("layer_ids", [[0], [1, 3], [0, 2, 3]])
def test_captured_states_are_transformers_hidden_states(pair, layer_ids):
    helpers, config, hf_model, sgl_model = pair
    text = helpers.text_config_of(config)
    assert max(layer_ids) < text.num_hidden_layers - 1  # the last layer has its own test
    prompts = helpers.random_prompts(PROMPT_LENGTHS, text.vocab_size)

    set_dflash_layers_to_capture(sgl_model, layer_ids)
    try:
        assert sgl_model.capture_aux_hidden_states is True
        assert sgl_model.model.layers_to_capture == [i + 1 for i in layer_ids]
        out = helpers.prefill(sgl_model, prompts)
    finally:
        _stop_capture(sgl_model)

    per_prompt = _split(out.aux_hidden_states, PROMPT_LENGTHS, len(layer_ids), text.hidden_size)
    for row, prompt in enumerate(prompts):
        ref_logits, ref_hidden = helpers.reference(hf_model, prompt)
        for k, layer_id in enumerate(layer_ids):
            got, want = per_prompt[row][k].float(), ref_hidden[layer_id + 1]
            diff = (got - want).abs().max().item()
            helpers.record(
                f"{type(sgl_model).__name__} captured layer vs hidden_states[L + 1]",
                f"prompt {row} layer {layer_id}",
                diff,
                ATOL,
            )
            torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
        logit_diff = (out.next_token_logits[row].float() - ref_logits[-1]).abs().max().item()
        helpers.record(f"{type(sgl_model).__name__} logits while capturing", f"prompt {row}", logit_diff, ATOL)
        torch.testing.assert_close(out.next_token_logits[row].float(), ref_logits[-1], atol=ATOL, rtol=RTOL)


def test_captured_states_differ_between_layers(pair):
    """Guards the test above: neighbouring layers' states are far apart, so a wrong offset fails."""
    helpers, config, hf_model, _ = pair
    _, ref_hidden = helpers.reference(
        hf_model, helpers.random_prompts((9,), helpers.text_config_of(config).vocab_size)[0]
    )
    for a, b in zip(ref_hidden[1:-1], ref_hidden[2:-1]):
        assert (a - b).abs().max().item() > 100 * ATOL


def test_last_layer_is_captured_before_the_final_norm(pair):
    helpers, config, hf_model, sgl_model = pair
    text = helpers.text_config_of(config)
    last = text.num_hidden_layers - 1
    prompt = helpers.random_prompts((11,), text.vocab_size, seed=3)[0]

    set_dflash_layers_to_capture(sgl_model, [last])
    try:
        aux = helpers.prefill(sgl_model, [prompt]).aux_hidden_states.float()
    finally:
        _stop_capture(sgl_model)

    _, normed = helpers.reference(hf_model, prompt)
    hf_text = hf_model.model.language_model if hasattr(hf_model.model, "language_model") else hf_model.model
    hf_text.config.tie_last_hidden_states = False
    try:
        _, pre_norm = helpers.reference(hf_model, prompt)
    finally:
        del hf_text.config.tie_last_hidden_states
    diff = (aux - pre_norm[last + 1]).abs().max().item()
    helpers.record(f"{type(sgl_model).__name__} captured last layer vs pre-norm state", f"layer {last}", diff, ATOL)
    print(f"  vs transformers hidden_states[-1] (normed): {(aux - normed[last + 1]).abs().max().item():.3g}")
    torch.testing.assert_close(aux, pre_norm[last + 1], atol=ATOL, rtol=RTOL)
    assert (aux - normed[last + 1]).abs().max().item() > 100 * ATOL


def _stop_capture(model):
    model.capture_aux_hidden_states = False
    model.model.layers_to_capture = []


# --- bad input: one clear ValueError, naming the value ---------------------------------------------


@pytest.fixture(scope="module")
def causal(sglang_tp1):
    return sglang_tp1.build_pair(sglang_tp1.tiny_text_config())[1]


def _refuses(model, layer_ids):
    before = (model.capture_aux_hidden_states, list(model.model.layers_to_capture))
    with pytest.raises(ValueError) as info:
        set_dflash_layers_to_capture(model, layer_ids)
    assert (model.capture_aux_hidden_states, list(model.model.layers_to_capture)) == before
    return str(info.value)


def test_none_is_refused(causal):
    message = _refuses(causal, None)
    assert "DFLASH" in message and "explicit" in message and "None" in message


def test_empty_list_is_refused(causal):
    message = _refuses(causal, [])
    assert "empty" in message and "[0, 5)" in message


def test_non_int_id_is_refused(causal):
    message = _refuses(causal, [1, "2"])
    assert "'2'" in message and "str" in message and "[0, 5)" in message


def test_float_id_is_refused(causal):
    message = _refuses(causal, [1.0])
    assert "1.0" in message and "float" in message


def test_bool_id_is_refused(causal):
    message = _refuses(causal, [True])
    assert "True" in message and "bool" in message


def test_id_equal_to_layer_count_is_refused(causal):
    message = _refuses(causal, [0, 5])
    assert "5" in message and "5 decoder layers" in message and "[0, 5)" in message


def test_negative_id_is_refused(causal):
    message = _refuses(causal, [-1])
    assert "-1" in message and "5 decoder layers" in message


def test_multimodal_class_refuses_out_of_range_too(sglang_tp1):
    model = sglang_tp1.build_pair(sglang_tp1.tiny_mm_config())[1]
    with pytest.raises(ValueError, match=r"id 7 is out of range.*5 decoder layers"):
        set_dflash_layers_to_capture(model, [7])
    assert model.capture_aux_hidden_states is False


# --- integer types other than int (issue 9, item 8) --------------------------------------------------


@pytest.mark.parametrize(
    "layer_ids",
    [torch.tensor([0, 2]), [torch.tensor(0), torch.tensor(2, dtype=torch.int32)], np.array([0, 2]), [np.int64(0), 2]],
    ids=["torch-1d", "torch-0d", "numpy-1d", "numpy-scalar"],
)
def test_integer_tensors_and_numpy_ints_are_accepted(causal, layer_ids):
    set_dflash_layers_to_capture(causal, layer_ids)
    assert causal.model.layers_to_capture == [1, 3]
    assert all(type(i) is int for i in causal.model.layers_to_capture)


@pytest.mark.parametrize("bad", [torch.tensor(1.0), torch.tensor(True), np.float32(1)])
def test_float_and_bool_tensors_are_refused(causal, bad):
    message = _refuses(causal, [0, bad])
    assert "layer id #1" in message and "ints in [0, 5)" in message


def _draft(**fields):
    return {"hidden_size": 64, "vocab_size": 512, **fields}


def test_mask_token_id_as_a_numpy_int_is_accepted():
    target = {"hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 5}
    validate_draft_against_target(target, _draft(dflash_config={"mask_token_id": np.int64(7), "target_layer_ids": [1]}))


@pytest.mark.parametrize(
    "draft, field",
    [
        (_draft(dflash_config={"mask_token_id": 600}), "dflash_config.mask_token_id=600"),
        (_draft(mask_token_id=600), "has mask_token_id=600"),  # top level, as SGLang also reads it
        (_draft(mask_token_id="7"), "has mask_token_id='7', not an int"),
    ],
)
def test_a_bad_mask_token_id_is_named_by_the_field_it_came_from(draft, field):
    target = {"hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 5}
    with pytest.raises(ValueError) as info:
        validate_draft_against_target(target, draft, draft_path="d")
    assert field in str(info.value) and "[0, 512)" in str(info.value)


def test_bad_top_level_layer_ids_are_named_by_their_field():
    target = {"hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 5}
    with pytest.raises(ValueError, match=r"Fix `target_layer_ids`"):
        validate_draft_against_target(target, _draft(target_layer_ids=[9]), draft_path="d")
