"""``set_dflash_layers_to_capture`` for the Gemma 4 target classes.

DFlash drafts condition on hidden states of chosen target layers. Their ids follow transformers'
convention: id ``L`` is ``output_hidden_states[L + 1]``, the output of decoder layer ``L``.
SGLang's text models capture the residual stream *entering* layer ``i`` (and the final
pre-norm stream when ``i == num_layers``), so layer ``L`` is captured as ``L + 1``.

One exception, shared with upstream: for the last layer (``L = num_layers - 1``) SGLang captures the
stream *before* the final norm, while transformers' ``output_hidden_states[-1]`` is the normed
``last_hidden_state``. A draft trained on that last entry would see different features, so
choosing the last layer logs a warning (published Gemma 4 drafts do not use it).

The ids are checked once, at model start-up, so a bad draft config fails there with a message
that names the value and the fix, instead of shape errors in the middle of serving.
"""

from __future__ import annotations

import logging
import numbers

logger = logging.getLogger(__name__)


def text_model_of(model):
    """The Gemma 4 text stack inside a target: ``model.model`` (causal) or ``model.language_model`` (multimodal)."""
    for name in ("model", "language_model"):
        text_model = getattr(model, name, None)
        if text_model is not None and hasattr(text_model, "layers_to_capture"):
            return text_model
    raise TypeError(
        f"{type(model).__name__} has no Gemma 4 text model with `layers_to_capture` "
        "(looked at `.model` and `.language_model`)."
    )


def validate_layer_ids(layer_ids, num_layers: int, *, owner: str = "the target") -> list[int]:
    """Return ``layer_ids`` as a list of ints, or raise ValueError naming the bad value and the fix."""
    if layer_ids is None:
        raise ValueError(
            f"DFLASH needs explicit target layer ids to capture hidden states from {owner}, got None. "
            "Set `dflash_config.target_layer_ids` in the draft's config.json (for example [1, 12, 23])."
        )
    if isinstance(layer_ids, (str, bytes)) or not hasattr(layer_ids, "__iter__"):
        raise ValueError(
            f"DFLASH target layer ids must be a list of ints, got {layer_ids!r} "
            f"({type(layer_ids).__name__})."
        )
    ids = list(layer_ids)
    if not ids:
        raise ValueError(
            f"DFLASH target layer ids are empty for {owner}: the draft would get no target hidden states. "
            f"List at least one layer id in [0, {num_layers}) in `dflash_config.target_layer_ids`."
        )
    for pos, layer_id in enumerate(ids):
        if isinstance(layer_id, bool) or not isinstance(layer_id, numbers.Integral):
            raise ValueError(
                f"DFLASH target layer id #{pos} is {layer_id!r} ({type(layer_id).__name__}); "
                f"layer ids must be ints in [0, {num_layers})."
            )
        if not 0 <= int(layer_id) < num_layers:
            raise ValueError(
                f"DFLASH target layer id {int(layer_id)} is out of range: {owner} has {num_layers} "
                f"decoder layers, so ids must be in [0, {num_layers}). Fix `dflash_config.target_layer_ids` "
                "in the draft's config.json (was the draft trained for another target?)."
            )
    ids = [int(i) for i in ids]
    if ids != sorted(set(ids)):
        raise ValueError(
            f"DFLASH target layer ids must be strictly increasing, got {ids}: SGLang captures hidden "
            "states in layer order, once per layer, so repeated or unordered ids would feed the draft's "
            "`fc` the wrong features. List each layer once, in increasing order."
        )
    return ids


def set_dflash_layers_to_capture(self, layer_ids):
    """Capture the outputs of decoder layers ``layer_ids`` (transformers numbering) for the DFlash draft."""
    text_model = text_model_of(self)
    num_layers = int(text_model.config.num_hidden_layers)
    ids = validate_layer_ids(layer_ids, num_layers, owner=type(self).__name__)
    if ids[-1] == num_layers - 1:
        logger.warning(
            "DFLASH target layer id %d is the last layer of %s: SGLang captures it before the final norm, "
            "transformers' output_hidden_states[-1] is after it. Check that the draft was trained on the "
            "pre-norm state.", ids[-1], type(self).__name__,
        )
    self.capture_aux_hidden_states = True
    text_model.layers_to_capture = [i + 1 for i in ids]


# Marks the method as this plugin's, so compat.probe() tells it apart from upstream's.
set_dflash_layers_to_capture.__sglang_gemma4_dflash__ = True
