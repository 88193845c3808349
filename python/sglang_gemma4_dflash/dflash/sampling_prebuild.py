"""Build flashinfer's sampling module while a DFLASH worker starts, not inside the first sampled request.

Under DFLASH a sampled (temperature > 0) request verifies through sgl_kernel's top-k / top-p renorm, which calls
``flashinfer.sampling`` whatever ``--sampling-backend`` says. flashinfer compiles that module with nvcc on first use
(86-112 s on an H200: benchmarks/first_sampled_request/README.md) and caches it under ``~/.cache/flashinfer``.
``start()`` runs that compile in a thread while the worker loads the draft and captures its CUDA graphs; ``finish()`` waits for it
before the server reports ready. Only nvcc runs in the thread: nothing is loaded or launched on the GPU there.
The ranks of one machine share the cache and flashinfer's file lock, so one compiles and the others find it.

Off with ``SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING=0``. Any failure is logged and ignored: serving never depends
on it (the first sampled request then compiles, as without the plugin).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Optional

logger = logging.getLogger(__name__)

ENV = "SGLANG_GEMMA4_DFLASH_PREBUILD_SAMPLING"
WAIT_S = 600.0


def _pending_spec():
    """flashinfer's sampling JitSpec when it still has to be compiled here, else None."""
    import torch

    if os.environ.get(ENV, "1") == "0" or os.environ.get("FLASHINFER_DISABLE_JIT") or not torch.cuda.is_available():
        return None
    try:
        from flashinfer.jit.sampling import gen_sampling_module
    except ImportError:
        return None
    spec = gen_sampling_module()  # reads the target archs here, on the caller's thread
    return None if spec.is_aot or spec.is_compiled else spec


def start() -> Optional[threading.Thread]:
    """Start compiling flashinfer's sampling module in a daemon thread; None when there is nothing to do."""
    try:
        spec = _pending_spec()
    except Exception as exc:  # a flashinfer that changed its JIT API: leave it to the first request
        logger.warning("sglang-gemma4-dflash: cannot prebuild flashinfer sampling (%s); skipped", exc)
        return None
    if spec is None:
        return None

    def build() -> None:
        started = time.monotonic()
        try:
            spec.build(verbose=False)
            logger.info("sglang-gemma4-dflash: flashinfer sampling module built in %.0fs", time.monotonic() - started)
        except Exception as exc:
            logger.warning("sglang-gemma4-dflash: prebuilding flashinfer sampling failed (%s); skipped", exc)

    logger.info("sglang-gemma4-dflash: building flashinfer's sampling module while the DFLASH worker starts")
    thread = threading.Thread(target=build, name="gemma4-dflash-sampling-prebuild", daemon=True)
    thread.start()
    return thread


def finish(thread: Optional[threading.Thread], timeout: float = WAIT_S) -> None:
    """Wait for ``start()``'s compile, at most ``timeout`` seconds."""
    if thread is None:
        return
    thread.join(timeout)
    if thread.is_alive():
        logger.warning("sglang-gemma4-dflash: flashinfer sampling still compiling after %.0fs; not waiting", timeout)
