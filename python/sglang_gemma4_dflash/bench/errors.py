"""The one error type of the bench: its message is printed as is, without a traceback."""

from __future__ import annotations


class BenchError(RuntimeError):
    """Bad input or a server that cannot serve the run; the message names the value and the fix."""


def need(module: str, purpose: str):
    """Import an optional dependency of the `bench` extra, or raise a BenchError that says how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise BenchError(
            f"{purpose} needs the Python package '{module}': pip install 'sglang-gemma4-dflash[bench]'"
        ) from None
