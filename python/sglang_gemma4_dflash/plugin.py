"""Entry point of the SGLang general plugin (group ``sglang.srt.plugins``, name ``gemma4_dflash``).

SGLang calls ``load_plugins()`` in the launcher, the engine and every scheduler process (where the
TP workers live); that calls ``register()`` and then ``HookRegistry.apply_hooks()``.
``SGLANG_PLUGINS=<other names>`` leaves this plugin out, as for any SGLang plugin.
"""

from __future__ import annotations

import logging

from sglang_gemma4_dflash import __version__, compat, hooks

logger = logging.getLogger(__name__)
package_logger = logging.getLogger("sglang_gemma4_dflash")

_registered: list[hooks.Change] | None = None


def _add_method(change: hooks.Change) -> None:
    cls_path, _, name = change.target.rpartition(".")
    cls = compat.resolve(cls_path)
    if getattr(cls, name, None) is not change.impl:
        setattr(cls, name, change.impl)


def _ensure_visible_logging() -> None:
    """SGLang runs ``load_plugins()`` before it configures logging, so INFO lines would be dropped.
    If they would be dropped, the package logs to stderr itself (once, in SGLang's format)."""
    if package_logger.handlers or (logging.getLogger().handlers and package_logger.isEnabledFor(logging.INFO)):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)
    package_logger.propagate = False


def register() -> list[hooks.Change]:
    """Register this plugin's changes for the installed SGLang. Idempotent; returns the changes."""
    global _registered
    if _registered is not None:
        return _registered

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    features = compat.probe()
    changes, left = hooks.plan(features)
    for change in changes:
        if change.how == hooks.ADD:
            _add_method(change)
        elif change.how == hooks.REPLACE:
            HookRegistry.register(change.target, change.impl, HookType.REPLACE)
        elif change.how == hooks.AROUND:
            HookRegistry.register(change.target, change.impl, HookType.AROUND)
        else:
            raise ValueError(f"unknown change kind {change.how!r} for {change.target}")

    _ensure_visible_logging()
    logger.info(
        "sglang-gemma4-dflash %s on SGLang %s (DFlash worker %s): %s",
        __version__, features.version, features.worker or "none", hooks.describe(changes, left),
    )
    _registered = changes
    return changes
