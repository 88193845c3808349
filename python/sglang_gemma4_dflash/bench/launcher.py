"""Start one SGLang server, wait until it serves, stop it: the one server harness of this repository (the bench's
`--launch` and the test kit's e2e checks both use it).

`Server` runs `python -m <launcher> --model-path ... --host ... --port ... <args>` in its own process group (its own
session), polls `/get_model_info` and then `/health_generate` for a bounded time, and at stop sends SIGTERM to the
launcher and then SIGKILL to the whole group. The log goes to `log_path` (kept) or to a temporary file (removed at
stop; errors carry its tail).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from sglang_gemma4_dflash.bench.client import http_ok
from sglang_gemma4_dflash.bench.errors import BenchError

DEFAULT_LAUNCHER = "sglang.launch_server"
_LIVE: dict = {}  # id -> Server started and not yet stopped, for stop_servers_on_sigterm


class ServerError(BenchError):
    """The server did not come up (or died); the message carries the tail of its log."""


def free_port() -> int:
    """A free TCP port below 45000: SGLang derives further ports from the server port by adding an offset
    (0.5.13 refused SGLANG_GRPC_PORT=69435 for a server on 49435)."""
    for _ in range(200):
        port = random.randint(20000, 44999)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ServerError("no free port found in 20000-44999")


def listening_pids(port: int) -> set:
    """Ids of the processes listening on TCP `port` (None for a process this user may not inspect); empty where
    psutil is missing or the table cannot be read."""
    try:
        import psutil

        connections = psutil.net_connections(kind="tcp")
    except Exception:  # no psutil, or no access to the connection table
        return set()
    return {c.pid for c in connections if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port}


def _group_of(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@dataclass
class Server:
    """One SGLang server process group. Use as a context manager:

    with Server("/path/model", ["--attention-backend", "triton"]) as server:
        client.generate(server.base_url, ...)
    """

    model_path: str
    args: Sequence[str] = ()
    launcher: str = DEFAULT_LAUNCHER
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    env: Optional[dict] = None  # extra environment on top of os.environ
    python: str = sys.executable
    ready_timeout: float = 600.0
    poll_interval: float = 1.0
    stop_grace: float = 15.0
    log_path: Optional[str] = None  # None: a temporary file, removed by stop()
    process: Optional[subprocess.Popen] = field(default=None, init=False, repr=False)
    _log_file: Any = field(default=None, init=False, repr=False)
    _own_log: bool = field(default=False, init=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            self.python, "-m", self.launcher, "--model-path", str(self.model_path),
            "--host", self.host, "--port", str(self.port), *[str(a) for a in self.args],
        ]  # fmt: skip

    def start(self) -> "Server":
        if self.process is not None:
            raise ServerError("server already started")
        if not self.port:
            self.port = free_port()
        if self.log_path is None:
            fd, self.log_path = tempfile.mkstemp(prefix="sglang-server-", suffix=".log")
            os.close(fd)
            self._own_log = True
        env = {**os.environ, **(self.env or {})}
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._log_file = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self.command(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # own process group: stop() kills the scheduler/detokenizer children too
        )
        _LIVE[id(self)] = self
        return self

    def wait_ready(self) -> "Server":
        """Poll until the server answers `/get_model_info` and `/health_generate`; raise ServerError otherwise."""
        deadline = time.monotonic() + self.ready_timeout
        stages = ["/get_model_info", "/health_generate"]
        while stages:
            if self.process is None:
                raise ServerError("server not started")
            code = self.process.poll()
            if code is not None:
                raise ServerError(f"server exited with code {code} before it was ready\n{self.log_tail()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServerError(
                    f"server not ready after {self.ready_timeout:.0f}s (waiting for {stages[0]})\n{self.log_tail()}"
                )
            # /health_generate runs one real generation: give it more time than a plain GET
            per_try = min(remaining, 5.0 if stages[0] == "/get_model_info" else 60.0)
            if http_ok(self.base_url + stages[0], timeout=per_try):
                self._check_port_is_ours()
                stages.pop(0)
                continue
            time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))
        return self

    def _check_port_is_ours(self) -> None:
        """An answer on the port counts only if this server's process group listens there: a server started earlier
        on the same port would otherwise pass for this one (which then fails to bind and exits)."""
        process = self.process
        if process is None:  # stopped meanwhile: a SIGTERM handler (stop_servers_on_sigterm) or another thread
            raise ServerError(f"server on port {self.port} was stopped while waiting for it to be ready")
        listeners = listening_pids(self.port)
        if not listeners or any(pid is not None and _group_of(pid) == process.pid for pid in listeners):
            return  # ours, or the listener cannot be read here (no psutil): nothing to judge
        raise ServerError(
            f"port {self.port} answers, but from process(es) {sorted(p for p in listeners if p) or 'of another user'}, "
            f"not from this server (process group {process.pid}): another server holds the port; "
            f"start this one on a free port\n{self.log_tail()}"
        )

    def stop(self) -> Optional[int]:
        """SIGTERM the launcher, then (after at most `stop_grace` seconds) SIGKILL its whole process group; return
        the launcher's exit code. Safe to call twice."""
        process, self.process = self.process, None
        _LIVE.pop(id(self), None)
        code = kill_group(process, self.stop_grace) if process is not None else None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._own_log and self.log_path and os.path.exists(self.log_path):
            os.remove(self.log_path)
            self.log_path, self._own_log = None, False
        return code

    def log_tail(self, max_chars: int = 6000) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return "(no server log)"
        if self._log_file is not None:
            self._log_file.flush()
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_chars))
            return f.read().decode(errors="replace")

    def __enter__(self) -> "Server":
        self.start()
        try:
            return self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_servers_on_sigterm() -> Any:
    """From a script's main thread: on SIGTERM (`timeout`, a job scheduler) stop every Server this process started,
    then exit 143. Without it they outlive the script, in their own sessions, holding the GPU. Returns the handler
    it replaced."""

    def stop_all(signum, frame):
        for server in list(_LIVE.values()):
            server.stop()
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop_all)


def kill_group(process: subprocess.Popen, grace: float) -> Optional[int]:
    """Stop a process started with start_new_session=True: SIGTERM to it (SGLang's launcher then stops its scheduler
    and detokenizer itself), up to `grace` seconds, then SIGKILL to whatever is left of its process group."""
    try:
        process.terminate()
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # a session leader's pid is its process group id
    except ProcessLookupError:
        pass
    try:
        return process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def group_alive(pgid: int) -> bool:
    """True while any process of group `pgid` exists."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
