"""Loads the torch 2.11 shim for sglang-kernel (torch211_sgl_kernel.so) just before `sgl_kernel` is imported.

On PYTHONPATH only when SGL_TORCH211_SHIM names the built library (scripts/gpu/torch_shims/build.sh): every Python
process of the server, the scheduler's spawned children included, then loads it with RTLD_GLOBAL after torch, so
sgl_kernel's extension finds the five symbols torch 2.11 lacks. An image's own sitecustomize still runs after it.
"""

import importlib.util
import os
import sys
from importlib.machinery import PathFinder

_SHIM = os.environ.get("SGL_TORCH211_SHIM")


class _LoadShimFirst:
    def find_spec(self, name, path=None, target=None):
        if name == "sgl_kernel":
            sys.meta_path.remove(self)
            import ctypes

            import torch  # noqa: F401  (libc10 and libtorch first: the shim links them)

            ctypes.CDLL(_SHIM, mode=ctypes.RTLD_GLOBAL)
        return None


if _SHIM:
    sys.meta_path.insert(0, _LoadShimFirst())

_here = os.path.dirname(os.path.abspath(__file__))
_next = PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _next is not None and _next.loader is not None:
    _next.loader.exec_module(importlib.util.module_from_spec(_next))
