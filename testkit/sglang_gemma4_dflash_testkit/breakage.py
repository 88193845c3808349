"""Deliberately broken variants of the plugin's two DFLASH pieces, for acceptance checks (never for serving).

    capture_shift   the capture hook records every target layer one layer later than asked (L+1 for L)
    wrong_ids       the draft head returns token id + 1 for every drafted position

Both patch module attributes the plugin looks up at call time, so they take effect whatever order the
plugins register in, and the plugin's files stay untouched:

    with breakage.broken("capture_shift"):       # in this process (CPU checks)
        ...
    SGLANG_GEMMA4_DFLASH_BREAK=wrong_ids         # in every SGLang process, through the entry point that
    PYTHONPATH=<write_plugin_dist(dir)>:...      # write_plugin_dist puts on the path (GPU runs)

The wrong-ids head replaces the plugin's head where the plugin serves the draft head (SGLang's v1 worker,
0.5.12-0.5.13, and v2 at TP > 1); at TP = 1 on v2 lines SGLang's own in-graph sampler scores the draft.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from pathlib import Path

ENV = "SGLANG_GEMMA4_DFLASH_BREAK"
KINDS = ("capture_shift", "wrong_ids")
PLUGIN_NAME = "gemma4_dflash_break"

logger = logging.getLogger(__name__)


def _shift_ids(validate):
    @functools.wraps(validate)
    def shifted(*args, **kwargs):
        return [i + 1 for i in validate(*args, **kwargs)]

    return shifted


def _wrong_ids(head):
    @functools.wraps(head)
    def wrong(hidden_states, lm_head, *args, **kwargs):
        ids = head(hidden_states, lm_head, *args, **kwargs)
        return (ids + 1) % int(lm_head.weight.shape[0])

    return wrong


def _targets(kind: str):
    """(module, attribute, wrapper) of a kind."""
    if kind == "capture_shift":
        from sglang_gemma4_dflash.gemma4 import capture

        return capture, "validate_layer_ids", _shift_ids
    if kind == "wrong_ids":
        from sglang_gemma4_dflash.dflash import worker_hooks

        return worker_hooks, "greedy_token_ids", _wrong_ids
    raise ValueError(f"unknown breakage {kind!r}; choose one of {', '.join(KINDS)}")


def apply(kind: str):
    """Patch in ``kind``; returns a function that undoes it."""
    module, name, wrap = _targets(kind)
    original = getattr(module, name)
    setattr(module, name, wrap(original))
    return lambda: setattr(module, name, original)


@contextlib.contextmanager
def broken(kind: str | None):
    """``kind`` patched in for the block (None: nothing)."""
    undo = apply(kind) if kind else None
    try:
        yield
    finally:
        if undo is not None:
            undo()


def register() -> None:
    """SGLang general-plugin entry point: apply ``$SGLANG_GEMMA4_DFLASH_BREAK`` in this process."""
    kind = os.environ.get(ENV, "")
    if kind:
        apply(kind)
        logger.warning("sglang-gemma4-dflash test kit: %s is BROKEN on purpose (%s=%s)", kind, ENV, kind)


def write_plugin_dist(directory) -> Path:
    """Make ``directory`` an import path entry that declares this module's ``register`` as an SGLang general
    plugin (a bare .dist-info, as pip would leave). Put it on PYTHONPATH, with the test kit."""
    dist = Path(directory) / "sglang_gemma4_dflash_break-0.0.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-gemma4-dflash-break\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text(f"[sglang.srt.plugins]\n{PLUGIN_NAME} = {__name__}:register\n")
    return Path(directory)
