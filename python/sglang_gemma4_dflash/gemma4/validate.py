"""Start-up checks that a DFlash draft fits its Gemma 4 target.

A draft trained for another target still loads (it has no embedding and no LM head of its own),
then fails with shape errors at the first decode step, or worse, decodes garbage drafts.
These checks run when the DFlash worker is built (the target has loaded, the draft not yet) and
name the value and the fix.
"""

from __future__ import annotations

import logging

from sglang_gemma4_dflash.gemma4.capture import as_int, validate_layer_ids

logger = logging.getLogger(__name__)


def _text_config(config):
    if isinstance(config, dict):
        return config.get("text_config") or config
    get_text_config = getattr(config, "get_text_config", None)
    if callable(get_text_config):
        return get_text_config()
    return getattr(config, "text_config", None) or config


def _get(config, key, default=None):
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def dflash_fields(draft_config) -> dict:
    """The draft's DFlash fields as ``{key: (value, where)}``: from its `dflash_config` block, else from
    the top level as SGLang does; ``where`` names the field for messages."""
    block = _get(draft_config, "dflash_config", None) or {}
    if not isinstance(block, dict):
        block = dict(vars(block))
    fields = {}
    for key in ("target_layer_ids", "mask_token_id", "block_size"):
        if block.get(key) is not None:
            fields[key] = (block[key], f"dflash_config.{key}")
        elif _get(draft_config, key, None) is not None:
            fields[key] = (_get(draft_config, key), key)
    return fields


def validate_draft_against_target(
    target_config, draft_config, *, draft_path: str = "<draft>", num_draft_tokens: int | None = None
) -> None:
    """Raise ValueError if ``draft_config`` cannot serve ``target_config`` (both HF configs or dicts).
    ``num_draft_tokens``: ``--speculative-num-draft-tokens`` (the block SGLang drafts), checked against the
    draft's ``block_size``."""
    target_text = _text_config(target_config)
    draft_text = _text_config(draft_config)
    target_hidden = int(_get(target_text, "hidden_size"))
    target_vocab = int(_get(target_text, "vocab_size"))
    target_layers = int(_get(target_text, "num_hidden_layers"))

    draft_hidden = _get(draft_text, "hidden_size")
    if draft_hidden is not None and int(draft_hidden) != target_hidden:
        raise ValueError(
            f"DFLASH draft {draft_path} has hidden_size={int(draft_hidden)}, but the target's hidden_size is "
            f"{target_hidden}. A DFlash draft reads the target's embeddings and hidden states, so the sizes must "
            "match: pass the draft trained for this target with --speculative-draft-model-path."
        )
    draft_vocab = _get(draft_text, "vocab_size")
    if draft_vocab is not None and int(draft_vocab) != target_vocab:
        raise ValueError(
            f"DFLASH draft {draft_path} has vocab_size={int(draft_vocab)}, but the target's vocab_size is "
            f"{target_vocab}. The draft predicts through the target's LM head, so it must be trained on the "
            "target's tokenizer: pass the draft made for this target with --speculative-draft-model-path."
        )

    fields = dflash_fields(draft_config)
    if "target_layer_ids" in fields:
        layer_ids, where = fields["target_layer_ids"]
        validate_layer_ids(layer_ids, target_layers, owner=f"the target (draft {draft_path})", field=where)
    if "mask_token_id" in fields:
        mask_id, where = fields["mask_token_id"]
        if as_int(mask_id) is None or not 0 <= as_int(mask_id) < target_vocab:
            raise ValueError(
                f"DFLASH draft {draft_path} has {where}={mask_id!r}, "
                + ("not an int" if as_int(mask_id) is None else "outside the target's vocabulary")
                + f"; it must be a token id in [0, {target_vocab}). Set it to the target tokenizer's mask token id."
            )
    if "block_size" in fields:
        check_block_size(*fields["block_size"], num_draft_tokens, draft_path=draft_path)


def check_block_size(block_size, where: str, num_draft_tokens: int | None, *, draft_path: str) -> None:
    """The draft's block size is a positive int (else ValueError); a different ``--speculative-num-draft-tokens``
    only changes how many positions are drafted, so it is warned about, naming both values and the fix."""
    size = as_int(block_size)
    if size is None or size < 1:
        raise ValueError(
            f"DFLASH draft {draft_path} has {where}={block_size!r}; it must be a positive int (the block the draft "
            "was trained to fill, 16 for the z-lab Gemma 4 drafts). Fix the draft's config.json."
        )
    if num_draft_tokens is None or int(num_draft_tokens) == size:
        return
    effect = (
        f"it drafts {int(num_draft_tokens) - 1} positions per step, {int(num_draft_tokens) - size} of them past the "
        "block it learned (rarely accepted)"
        if int(num_draft_tokens) > size
        else f"it drafts {int(num_draft_tokens) - 1} of the {size - 1} positions it can per step (fewer accepted tokens)"
    )
    logger.warning(
        "DFLASH draft %s was trained with %s=%d, but --speculative-num-draft-tokens is %d: %s. Output stays exact; "
        "pass --speculative-num-draft-tokens %d to use the block as trained.",
        draft_path,
        where,
        size,
        int(num_draft_tokens),
        effect,
        size,
    )
