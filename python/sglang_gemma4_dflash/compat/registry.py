"""SGLang's private ``HookRegistry`` API (``sglang.srt.plugins.hook_registry``), alone: the one place that knows its
names (``register``, ``_apply_target``, ``_hooks``, ``_patched``, the plugin-source context variable) and the shape
of the wrapper it puts around a hooked method."""

from __future__ import annotations

import logging

from sglang_gemma4_dflash.compat.symbols import loaded


def hook_registry():
    """SGLang's ``HookRegistry`` (``sglang.srt.plugins.hook_registry``)."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    return HookRegistry


def current_hook_source():
    """The plugin source ``load_plugins()`` sets while it runs a plugin (None outside it)."""
    from sglang.srt.plugins import hook_registry as module

    var = getattr(module, "_current_plugin_source", None)
    return None if var is None else var.get()


def register_around(target: str, impl, source=None) -> None:
    """Register ``impl`` as an AROUND hook on ``target``; ``source`` names the plugin in SGLang's log."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(target, impl, HookType.AROUND, source=source)


def apply_hooks_now(targets, ours) -> None:
    """Apply the hooks registered on ``targets`` now: SGLang imported their module after ``load_plugins()``
    applied the hooks. A target another plugin also hooks is left to HookRegistry's own pass (the pass whose
    import brought the module in), so no hook is applied twice. ``ours``: this plugin's hook functions."""
    registry = hook_registry()
    apply_target = getattr(registry, "_apply_target", None)
    if apply_target is None:  # a HookRegistry without it: its public pass (which also retries failed targets)
        registry.apply_hooks()
        return
    for target in targets:
        hooks = registry._hooks.get(target, [])
        if target in registry._patched or any(hook not in ours for _, hook, *_ in hooks):
            continue
        try:
            apply_target(target, hooks)
            registry._patched.add(target)
        except Exception:  # logged as HookRegistry.apply_hooks logs it; the start-up check names it
            logging.getLogger(__name__).exception("Failed to apply hooks to %s", target)


def hook_in_place(target: str, impl) -> bool:
    """Whether ``impl`` is what ``target`` runs: the method itself (added), or a HookRegistry wrapper
    around it (SGLang's ``_wrap_fn`` keeps the hook in its closure and the original in ``__wrapped__``).
    Looks only at imported modules."""
    cls_path, _, name = target.rpartition(".")
    fn = getattr(loaded(cls_path), name, None)
    while fn is not None:
        if fn is impl or any(_cell_holds(cell, impl) for cell in getattr(fn, "__closure__", None) or ()):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _cell_holds(cell, value) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False
