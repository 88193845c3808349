"""Run a function right after a module is imported (a post-import hook).

SGLang loads plugins in every process (launcher, tokenizer, detokenizer, DP controller, schedulers),
but only the schedulers import the Gemma 4 models and the DFlash workers. ``when_imported`` lets the
plugin install its hooks there, when SGLang imports those modules, instead of importing them itself
in every process: a finder at the front of ``sys.meta_path`` wraps the loader of each watched module
so the callback runs once the module's code has run (the module is then complete, and in
``sys.modules``). Nothing else about the import changes.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Callable

_callbacks: dict[str, list[Callable[[str], None]]] = {}


def when_imported(module: str, callback: Callable[[str], None]) -> None:
    """Call ``callback(module)`` once ``module`` is imported: now if it already is, else right after its import.
    A failing import leaves the callback waiting; the callback must not raise."""
    if sys.modules.get(module) is not None:
        callback(module)
        return
    _callbacks.setdefault(module, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def waiting() -> tuple[str, ...]:
    """The watched modules not imported yet."""
    return tuple(_callbacks)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:  # the finders after this one find the real module
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the callbacks waiting for it."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for callback in _callbacks.pop(module.__name__, []):
            callback(module.__name__)

    def __getattr__(self, name):  # get_source, get_filename, is_package, ...: the real loader's
        return getattr(self.loader, name)


_FINDER = _Finder()
