"""Run one function on several real processes joined by SGLang's tensor-parallel group (gloo, CPU).

``run_ranks(world_size, fn, *args)`` spawns ``world_size`` fresh interpreters, builds SGLang's
distributed state in each (``init_distributed_environment`` over gloo, then
``initialize_model_parallel``, so ``get_tp_group()`` is SGLang's real GroupCoordinator) and returns
``[fn(rank, world_size, *args) for rank in ranks]``. ``fn`` must be a module-level function and its
result picklable. ``server_args`` (0.5.2x) are published with the TP size, e.g. DP attention.
A failure on any rank is raised in the caller with that rank's traceback.

Spawning costs an SGLang import per process: callers run all their cases inside one ``fn``.
"""

from __future__ import annotations

import inspect
import os
import queue
import socket
import traceback

import torch.multiprocessing as mp

TIMEOUT_S = 240.0
# This machine's torch ships libnccl. SGLang would open a NCCL communicator on the CPU device and
# fail; pointing its loader at nothing makes the groups gloo-only, as on a machine without NCCL.
CHILD_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "SGLANG_NCCL_SO_PATH": "/nonexistent/libnccl.so.2",
    "HF_HUB_OFFLINE": "1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init_sglang_groups(rank: int, world_size: int, port: int, server_args: dict) -> None:
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel

    init_distributed_environment(
        world_size=world_size,
        rank=rank,
        local_rank=rank,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
    )
    if "tensor_model_parallel_size" in inspect.signature(initialize_model_parallel).parameters:
        if server_args:
            raise ValueError(f"server args {sorted(server_args)} need SGLang's runtime context (0.5.2x)")
        initialize_model_parallel(tensor_model_parallel_size=world_size, backend="gloo")  # up to 0.5.1x
        return
    # 0.5.2x reads the widths from the published runtime context.
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    reset_context()
    publish(
        ServerArgs(model_path="dummy", tp_size=world_size, device="cpu", **server_args),
        role="test",
        ranks=SpawnRanks(world_rank=rank),
    )
    get_parallel().override_permanently(world_group=parallel_state._WORLD)
    initialize_model_parallel(backend="gloo")


def _child(rank: int, world_size: int, port: int, server_args: dict, fn, args, results) -> None:
    try:
        os.environ.update(CHILD_ENV)
        from sglang_gemma4_dflash_testkit.cpu_standins import install

        install()
        _init_sglang_groups(rank, world_size, port, server_args)
        results.put((rank, True, fn(rank, world_size, *args)))
    except BaseException:  # report everything, including assertion errors, to the parent
        results.put((rank, False, traceback.format_exc()))


def run_ranks(world_size: int, fn, *args, timeout: float = TIMEOUT_S, server_args: dict | None = None) -> list:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
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
