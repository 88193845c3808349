"""What the plugin has planned and installed in this process, and the DFLASH start-up check of it.

``plugin.py`` fills this in as SGLang imports the modules that hold hook targets; the capture method
(``gemma4/capture.py``), which SGLang calls when a DFLASH run with a Gemma 4 target starts, asks
``require_in_place()``. Kept apart from ``plugin.py`` so the hooks can reach it without an import cycle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sglang_gemma4_dflash.compat import probe, registry, symbols

logger = logging.getLogger("sglang_gemma4_dflash.plugin")


@dataclass
class PluginState:
    loaded: bool = False  # register() ran in this process
    deferred_apply: bool = False  # inside register(): load_plugins()'s HookRegistry pass applies what is found
    source: object = None  # the HookSource load_plugins() gave this plugin (names it in SGLang's log)
    planned: list = None  # plan.Change: every change planned for the modules installed so far
    installed: list = None  # plan.Change: the changes of the pieces that passed the probe
    skipped: list = None  # plan.Skipped: pieces left out, with the reason
    warned: set = None  # targets of optional changes already warned about (at install or a DFLASH start)

    def __post_init__(self):
        self.planned, self.installed, self.skipped, self.warned = [], [], [], set()


STATE = PluginState()


def require_in_place() -> None:
    """At a DFLASH start with a Gemma 4 target: make sure every change this line needs is in place.

    The DFlash worker modules are imported first (the worker is built next anyway), so their pieces
    install now. A missing change the line needs the plugin for (``Change.required``: the v1 worker, a
    capture method upstream lacks) raises one error naming each one and the way out. A missing change on
    a line where SGLang serves the setup itself (v2) is warned about once, and SGLang's own path runs.
    No-op when the plugin was not loaded in this process.
    """
    if not STATE.loaded:
        return
    for module in probe.hooked_modules():
        symbols.import_module(module)
    skipped = {s.piece: s.problem for s in STATE.skipped}
    required, optional = [], []
    for change in STATE.planned:
        if registry.hook_in_place(change.target, change.impl):
            continue
        reason = skipped.get(change.piece, "registered, but SGLang's HookRegistry did not apply it (see its log)")
        (required if change.required else optional).append((change, f"{change.how} {change.target}: {reason}"))
    pieces = {c.piece for c in STATE.planned}  # a skipped piece without changes: a module that failed to import
    required += [(None, f"{s.piece}: {s.problem}") for s in STATE.skipped if s.required and s.piece not in pieces]
    for change, text in optional:
        if change.target not in STATE.warned:
            STATE.warned.add(change.target)
            logger.warning(
                "sglang-gemma4-dflash: %s. SGLang's own path runs for it, as without the plugin (%s).", text, change.why
            )
    if required:
        raise RuntimeError(
            f"sglang-gemma4-dflash: DFLASH with a Gemma 4 target on SGLang {symbols.installed_sglang_version()} "
            "needs these changes, which are not in place:\n  "
            + "\n  ".join(text for _, text in required)
            + f"\nUse an SGLang release this plugin supports (>= {symbols.FIRST_SUPPORTED}, see its README), or "
            "leave the plugin out (SGLANG_PLUGINS=<other plugins>) to run SGLang's own DFLASH path."
        )
