"""Entry point of the SGLang general plugin (group ``sglang.srt.plugins``, name ``gemma4_dflash``).

SGLang calls ``load_plugins()`` in the launcher, the engine and every scheduler process (where the
TP workers live); that calls ``register()`` and then ``HookRegistry.apply_hooks()``.
``SGLANG_PLUGINS=<other names>`` leaves this plugin out, as for any SGLang plugin.
"""

from __future__ import annotations

import logging
import sys

from sglang_gemma4_dflash import __version__, compat, hooks

logger = logging.getLogger(__name__)

_planned: list[hooks.Change] | None = None  # every change the plan wants on this line
_registered: list[hooks.Change] | None = None  # the changes of the pieces that passed the probe
_skipped: list[hooks.Skipped] = []


def _add_method(change: hooks.Change) -> None:
    cls_path, _, name = change.target.rpartition(".")
    cls = compat.resolve(cls_path)
    if getattr(cls, name, None) is not change.impl:
        setattr(cls, name, change.impl)


def _announce(message: str) -> None:
    """Log the start-up line. SGLang runs ``load_plugins()`` before it configures logging, when INFO is
    still off; then the line is written to stderr once, in SGLang's format, through a handler used for
    this line only. No logger is changed, so SGLang's ``--log-level`` governs the plugin afterwards."""
    if logger.isEnabledFor(logging.INFO):
        logger.info(message)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    handler.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, None, None))


def register() -> list[hooks.Change]:
    """Register this plugin's changes for the installed SGLang. Idempotent; returns the changes."""
    global _planned, _registered, _skipped
    if _registered is not None:
        return _registered

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    features = compat.probe()
    planned, left = hooks.plan(features)
    changes, skipped = hooks.installable(planned)
    for change in changes:
        if change.how == hooks.ADD:
            _add_method(change)
        elif change.how == hooks.AROUND:
            HookRegistry.register(change.target, change.impl, HookType.AROUND)
        else:
            raise ValueError(f"unknown change kind {change.how!r} for {change.target}")
    required = {c.piece for c in planned if c.required}
    for piece in skipped:
        logger.warning(
            "sglang-gemma4-dflash: %s NOT installed on SGLang %s: %s. %s",
            piece.piece,
            features.version,
            piece.problem,
            "A DFLASH start with a Gemma 4 target will be refused."
            if piece.piece in required
            else "SGLang's own path runs instead.",
        )

    _announce(
        f"sglang-gemma4-dflash {__version__} on SGLang {features.version} "
        f"(DFlash worker {features.worker or 'none'}): {hooks.describe(changes, left, skipped)}"
    )
    _planned, _registered, _skipped = planned, changes, skipped
    return changes


def require_in_place() -> None:
    """Raise at start-up, naming each missing hook, if a change this line needs for a DFLASH run with a
    Gemma 4 target is not in place: its piece failed the probe, or ``HookRegistry.apply_hooks()``
    did not apply it (SGLang only logs that). No-op when the plugin was not registered."""
    if _planned is None:
        return
    skipped = {s.piece: s.problem for s in _skipped}
    missing = []
    for change in _planned:
        if not change.required or compat.hook_in_place(change.target, change.impl):
            continue
        reason = skipped.get(change.piece, "registered, but SGLang's HookRegistry did not apply it (see its log)")
        missing.append(f"{change.how} {change.target} ({change.why}): {reason}")
    if missing:
        raise RuntimeError(
            f"sglang-gemma4-dflash: DFLASH with a Gemma 4 target on SGLang {compat.installed_sglang_version()} "
            "needs these changes, which are not in place:\n  " + "\n  ".join(missing) + "\nUse an SGLang "
            "release this plugin supports (see its README), or leave the plugin out "
            "(SGLANG_PLUGINS=<other plugins>) to run SGLang's own DFLASH path."
        )
