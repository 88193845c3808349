"""Run one function on several real processes joined by SGLang's tensor-parallel group (gloo, CPU).

``run_ranks(world_size, fn, *args)`` spawns ``world_size`` fresh interpreters, builds SGLang's
distributed state in each (``sglang_cpu.init_sglang_groups``: gloo, so ``get_tp_group()`` is SGLang's
real GroupCoordinator) and returns ``[fn(rank, world_size, *args) for rank in ranks]``. ``fn`` must be a module-level function and its
result picklable. ``server_args`` (0.5.2x) are published with the TP size, e.g. DP attention.
A failure on any rank is raised in the caller with that rank's traceback.

Spawning costs an SGLang import per process: callers run all their cases inside one ``fn``.
"""

from __future__ import annotations

import logging
import os
import queue
import traceback

import torch.multiprocessing as mp

from sglang_gemma4_dflash_testkit import cpu_standins, sglang_cpu

TIMEOUT_S = 240.0
# This machine's torch ships libnccl. SGLang would open a NCCL communicator on the CPU device and
# fail; pointing its loader at nothing makes the groups gloo-only, as on a machine without NCCL. SGLang
# then logs "Failed to load NCCL library ... expected if you are not running on NVIDIA GPUs" once per
# group: that one logger is quieted in the children (NCCL is never used here).
CHILD_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "SGLANG_NCCL_SO_PATH": "/nonexistent/libnccl.so.2",
    "HF_HUB_OFFLINE": "1",
}


def _child(rank: int, world_size: int, port: int, server_args: dict, fn, args, results) -> None:
    try:
        os.environ.update(CHILD_ENV)
        logging.getLogger("sglang.srt.distributed.device_communicators.pynccl_wrapper").setLevel(logging.CRITICAL)
        cpu_standins.install()
        sglang_cpu.init_sglang_groups(rank, world_size, port, server_args)
        try:
            results.put((rank, True, fn(rank, world_size, *args)))
        finally:
            sglang_cpu.destroy_sglang_groups()
    except BaseException:  # report everything, including assertion errors, to the parent
        results.put((rank, False, traceback.format_exc()))


def run_ranks(world_size: int, fn, *args, timeout: float = TIMEOUT_S, server_args: dict | None = None) -> list:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = sglang_cpu.free_port()
    procs = [
        ctx.Process(target=_child, args=(r, world_size, port, dict(server_args or {}), fn, args, results))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    out, failures = {}, []
    try:
        for _ in range(world_size):
            rank, ok, value = results.get(timeout=timeout)
            if ok:
                out[rank] = value
            else:
                failures.append(f"rank {rank} of {world_size}:\n{value}")
                break  # the other ranks may now wait forever in a collective
    except queue.Empty:
        failures.append(f"no answer from {world_size - len(out)} of {world_size} ranks within {timeout}s")
    finally:
        for p in procs:
            if failures and p.is_alive():
                p.terminate()
            p.join(timeout=30)
    if failures:
        raise AssertionError("\n".join(failures))
    return [out[r] for r in range(world_size)]
