"""Entry point of the SGLang general plugin (group ``sglang.srt.plugins``, name ``gemma4_dflash``).

SGLang calls ``load_plugins()`` in every process (launcher, tokenizer, detokenizer, DP controller,
schedulers); that calls ``register()`` and then ``HookRegistry.apply_hooks()``. ``register()`` imports
none of SGLang's model or worker modules: each module that holds hook targets (``probe.hooked_modules()``)
gets its pieces when SGLang imports it (``lazy.when_imported``), which only the schedulers do. A module
already imported when ``register()`` runs gets its hooks registered at once and applied by
``load_plugins()``'s own ``apply_hooks()``. ``SGLANG_PLUGINS=<other names>`` leaves this plugin out.
"""

from __future__ import annotations

import logging
import sys

from sglang_gemma4_dflash import __version__, lazy, lines, plan
from sglang_gemma4_dflash.compat import probe, registry, symbols
from sglang_gemma4_dflash.state import STATE

logger = logging.getLogger(__name__)


def _announce(message: str) -> None:
    """Log a line from ``register()``. SGLang runs ``load_plugins()`` before it configures logging, when INFO is
    still off; then the line is written to stderr once, in SGLang's format, through a handler used for
    this line only. No logger is changed, so SGLang's ``--log-level`` governs the plugin afterwards."""
    if logger.isEnabledFor(logging.INFO):
        logger.info(message)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    handler.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, None, None))


def _add_method(change: plan.Change) -> None:
    cls_path, _, name = change.target.rpartition(".")
    cls = symbols.loaded(cls_path)
    if getattr(cls, name, None) is not change.impl:
        setattr(cls, name, change.impl)


def install(module: str) -> None:
    """Install the pieces whose targets live in ``module`` (imported). Never raises: SGLang is importing
    ``module`` when this runs, and a failure here must not fail that import."""
    try:
        resolved = plan.resolve(probe.loaded_features((module,)))
        for change in resolved.installed:
            if change.how == plan.ADD:
                _add_method(change)
            else:
                registry.register_around(change.target, change.impl, STATE.source)
        if not STATE.deferred_apply:  # imported after load_plugins() applied SGLang's hooks
            ours = {c.impl for c in resolved.installed}
            registry.apply_hooks_now([c.target for c in resolved.installed if c.how == plan.AROUND], ours)
    except Exception as exc:
        logger.exception("sglang-gemma4-dflash: installing its hooks on %s failed", module)
        STATE.skipped.append(plan.Skipped(f"module {module}", f"installing failed: {exc!r}", not probe.v2_line()))
        return
    STATE.planned += resolved.planned
    STATE.installed += resolved.installed
    STATE.skipped += resolved.skipped
    for piece in resolved.skipped:
        STATE.warned.update(c.target for c in resolved.planned if c.piece == piece.piece)  # said once, here
        logger.warning(
            "sglang-gemma4-dflash: %s NOT installed on SGLang %s: %s. Then %s.",
            piece.piece,
            symbols.installed_sglang_version(),
            piece.problem,
            plan.consequence(piece),
        )
    line = f"sglang-gemma4-dflash on {module.replace('sglang.srt.', '')}: {plan.describe(resolved)}"
    if STATE.deferred_apply:  # still inside load_plugins(): logging may not be configured yet
        _announce(line)
    else:
        logger.info(line)


def register() -> None:
    """Arrange for the plugin's changes to go on where SGLang imports their classes. Idempotent."""
    if STATE.loaded:
        return
    STATE.loaded, STATE.source = True, registry.current_hook_source()
    STATE.deferred_apply = True
    try:
        for module in probe.hooked_modules():
            lazy.when_imported(module, install)
    finally:
        STATE.deferred_apply = False
    done = len(probe.hooked_modules()) - len(lazy.waiting())
    version = symbols.installed_sglang_version()
    _announce(
        f"sglang-gemma4-dflash {__version__} loaded on SGLang {version}; its hooks go on where SGLang imports the "
        f"Gemma 4 models, a DFlash worker or the triton attention backend ({done} of those modules imported so far); "
        + lines.announce(version)
    )
