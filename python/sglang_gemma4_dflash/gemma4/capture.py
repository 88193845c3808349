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
that names the value and the fix, instead of shape errors in the middle of serving. The same call
is where a DFLASH run with a Gemma 4 target starts, so it also asks ``state.require_in_place()``
that every worker hook the run needs is in place.

Lines without the method (0.5.12-0.5.13) get ``set_dflash_layers_to_capture``; lines with it
(0.5.14+) keep upstream's, wrapped by ``check_then_capture``: check, then upstream's method runs
(upstream's sets the same ``layer + 1`` ids and ``capture_aux_hidden_states`` as the plugin's).
A line whose Gemma 4 model cannot capture at all (0.5.11) gets ``refuse_without_capture``.
"""

from __future__ import annotations

import logging
import operator

import torch

from sglang_gemma4_dflash import state
from sglang_gemma4_dflash.compat import probe

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


def as_int(value) -> int | None:
    """``value`` as an int when it is an integer (Python, numpy, or a one-element integer torch tensor),
    else None. Booleans are not integers here."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def validate_layer_ids(
    layer_ids, num_layers: int, *, owner: str = "the target", field: str = "dflash_config.target_layer_ids"
) -> list[int]:
    """Return ``layer_ids`` as a list of ints, or raise ValueError naming the bad value and the fix."""
    if layer_ids is None:
        raise ValueError(
            f"DFLASH needs explicit target layer ids to capture hidden states from {owner}, got None. "
            f"Set `{field}` in the draft's config.json (for example [1, 12, 23])."
        )
    if isinstance(layer_ids, (str, bytes)) or not hasattr(layer_ids, "__iter__"):
        raise ValueError(
            f"DFLASH target layer ids must be a list of ints, got {layer_ids!r} ({type(layer_ids).__name__})."
        )
    ids = list(layer_ids)
    if not ids:
        raise ValueError(
            f"DFLASH target layer ids are empty for {owner}: the draft would get no target hidden states. "
            f"List at least one layer id in [0, {num_layers}) in `{field}`."
        )
    for pos, layer_id in enumerate(ids):
        ids[pos] = as_int(layer_id)
        if ids[pos] is None:
            raise ValueError(
                f"DFLASH target layer id #{pos} is {layer_id!r} ({type(layer_id).__name__}); "
                f"layer ids must be ints in [0, {num_layers})."
            )
        if not 0 <= ids[pos] < num_layers:
            raise ValueError(
                f"DFLASH target layer id {ids[pos]} is out of range: {owner} has {num_layers} "
                f"decoder layers, so ids must be in [0, {num_layers}). Fix `{field}` "
                "in the draft's config.json (was the draft trained for another target?)."
            )
    if ids != sorted(set(ids)):
        raise ValueError(
            f"DFLASH target layer ids must be strictly increasing, got {ids}: SGLang captures hidden "
            "states in layer order, once per layer, so repeated or unordered ids would feed the draft's "
            "`fc` the wrong features. List each layer once, in increasing order."
        )
    return ids


def checked_layer_ids(model, layer_ids) -> list[int]:
    """The start-up checks of a DFLASH run on a Gemma 4 target: hooks in place, then the ids."""
    state.require_in_place()
    text_model = text_model_of(model)
    num_layers = int(text_model.config.num_hidden_layers)
    ids = validate_layer_ids(layer_ids, num_layers, owner=type(model).__name__)
    if ids[-1] == num_layers - 1:
        logger.warning(
            "DFLASH target layer id %d is the last layer of %s: SGLang captures it before the final norm, "
            "transformers' output_hidden_states[-1] is after it. Check that the draft was trained on the "
            "pre-norm state.",
            ids[-1],
            type(model).__name__,
        )
    return ids


def set_dflash_layers_to_capture(self, layer_ids):
    """Capture the outputs of decoder layers ``layer_ids`` (transformers numbering) for the DFlash draft."""
    ids = checked_layer_ids(self, layer_ids)
    self.capture_aux_hidden_states = True
    text_model_of(self).layers_to_capture = [i + 1 for i in ids]


def check_then_capture(original, self, layer_ids):
    """Around upstream's ``set_dflash_layers_to_capture`` (0.5.14+): check, then upstream's method runs."""
    return original(self, layer_ids=checked_layer_ids(self, layer_ids))


def refuse_without_capture(self, layer_ids):
    """``set_dflash_layers_to_capture`` on a line whose Gemma 4 model cannot capture hidden states (0.5.11):
    refuse the DFLASH start, naming the line and the fix."""
    raise RuntimeError(
        f"sglang-gemma4-dflash: DFLASH with a Gemma 4 target ({type(self).__name__}) cannot run on this SGLang: "
        f"{probe.capture_problem(type(self))}. Upgrade SGLang, or serve without --speculative-algorithm DFLASH."
    )


# Marks the methods as this plugin's, so probe.features() tells them apart from upstream's.
set_dflash_layers_to_capture.__sglang_gemma4_dflash__ = True
refuse_without_capture.__sglang_gemma4_dflash__ = True
