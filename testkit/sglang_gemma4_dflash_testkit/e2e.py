"""Start SGLang servers and talk to them over HTTP, for end-to-end checks.

Used by the registered tiny test, the GPU scripts in scripts/gpu/ and the CI job. Everything is explicit:

- `Server` launches `python -m <launcher> --model-path ... <args>` in its own process group (its own session), waits a
  bounded time for `/get_model_info` and then `/health_generate` to answer 200, and kills the whole group on exit.
  The launcher defaults to `sglang.launch_server`; `sglang_gemma4_dflash_testkit.cpu_server` (CPU stand-ins) also fits.
- `generate` / `generate_many` call the native `/generate` greedily and return the output token ids;
  `complete` calls the OpenAI-compatible `/v1/completions`; `chat` calls `/v1/chat/completions`.
- `server_info` reads `/server_info` (0.5.14+) or `/get_server_info` (0.5.13 and older spelling); `spec_summary`
  picks the speculative-decoding fields out of it.
- `compare_outputs(plain, spec)` gives one token-identity verdict per prompt.

Only the standard library is used, so the harness works in any environment that can run a server.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

DEFAULT_LAUNCHER = "sglang.launch_server"
CPU_LAUNCHER = "sglang_gemma4_dflash_testkit.cpu_server"


class ServerError(RuntimeError):
    """The server did not come up (or died); the message carries the tail of its log."""


class HTTPRequestError(RuntimeError):
    """A request got a non-2xx answer or could not be sent; the message names the URL and the body."""


# ----------------------------------------------------------------------------------------------------- HTTP basics


def http_json(url: str, payload: Optional[dict] = None, timeout: float = 60.0) -> Any:
    """GET (payload None) or POST JSON to `url`; return the decoded JSON answer."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="GET" if payload is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:2000]
        raise HTTPRequestError(f"{url}: HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        raise HTTPRequestError(f"{url}: {e}") from None
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        raise HTTPRequestError(f"{url}: answer is not JSON: {body[:500]!r}") from None


def http_ok(url: str, timeout: float) -> bool:
    """True when a GET on `url` answers 2xx within `timeout` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            response.read()
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


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


# -------------------------------------------------------------------------------------------------------- server


@dataclass
class Server:
    """One SGLang server process group. Use as a context manager:

    with Server("/path/model", ["--attention-backend", "triton"]) as server:
        generate(server.base_url, ...)
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
    log_path: Optional[str] = None  # default: a temporary file, removed by stop() (errors carry its tail)
    process: Optional[subprocess.Popen] = field(default=None, init=False, repr=False)
    _log_file: Any = field(default=None, init=False, repr=False)
    _own_log: bool = field(default=False, init=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [self.python, "-m", self.launcher, "--model-path", str(self.model_path),
                "--host", self.host, "--port", str(self.port), *[str(a) for a in self.args]]

    def start(self) -> "Server":
        if self.process is not None:
            raise ServerError("server already started")
        if not self.port:
            self.port = free_port()
        if self.log_path is None:
            fd, self.log_path = tempfile.mkstemp(prefix="sglang-server-", suffix=".log")
            os.close(fd)
            self._own_log = True
        env = dict(os.environ)
        env.update(self.env or {})
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._log_file = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self.command(), stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,  # own process group: stop() kills the scheduler/detokenizer children too
        )
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
                raise ServerError(f"server not ready after {self.ready_timeout:.0f}s (waiting for {stages[0]})\n"
                                  f"{self.log_tail()}")
            # /health_generate runs one real generation: give it more time than a plain GET
            per_try = min(remaining, 5.0 if stages[0] == "/get_model_info" else 60.0)
            if http_ok(self.base_url + stages[0], timeout=per_try):
                stages.pop(0)
                continue
            time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))
        return self

    def stop(self) -> Optional[int]:
        """SIGTERM the launcher, then (after at most `stop_grace` seconds) SIGKILL its whole process group; return the
        launcher's exit code. Safe to call twice."""
        process, self.process = self.process, None
        code = None
        if process is not None:
            code = _kill_group(process, self.stop_grace)
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


def _kill_group(process: subprocess.Popen, grace: float) -> Optional[int]:
    """Stop the server started with start_new_session=True: SIGTERM to the launcher (SGLang's launcher then stops
    its scheduler and detokenizer itself), up to `grace` seconds for it to exit, then SIGKILL to the whole process
    group, whatever is left of it."""
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
    """True while any process of group `pgid` exists (used by tests of stop())."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# ----------------------------------------------------------------------------------------------------- requests


@dataclass
class Generation:
    prompt: Any  # the text or the token id list sent
    output_ids: list[int]
    text: str
    meta_info: dict


def generate(base_url: str, prompt: str | Sequence[int], max_new_tokens: int, timeout: float = 300.0,
             ignore_eos: bool = False) -> Generation:
    """Greedy generation through the native `/generate` (text prompt, or a list of input token ids).
    ignore_eos=True keeps going past end-of-sequence tokens, so every output has max_new_tokens tokens."""
    sampling = {"temperature": 0.0, "max_new_tokens": int(max_new_tokens)}
    if ignore_eos:
        sampling["ignore_eos"] = True
    payload: dict = {"sampling_params": sampling}
    if isinstance(prompt, str):
        payload["text"] = prompt
    else:
        payload["input_ids"] = [int(t) for t in prompt]
    out = http_json(base_url + "/generate", payload, timeout=timeout)
    if not isinstance(out, dict) or "output_ids" not in out:
        raise HTTPRequestError(f"{base_url}/generate: no output_ids in answer: {str(out)[:500]}")
    return Generation(prompt=prompt, output_ids=[int(t) for t in out["output_ids"]], text=out.get("text") or "",
                      meta_info=out.get("meta_info") or {})


def generate_many(base_url: str, prompts: Sequence, max_new_tokens: int, concurrency: int = 1,
                  timeout: float = 300.0, ignore_eos: bool = False) -> list[Generation]:
    """`generate` for each prompt; with concurrency > 1 the requests are in flight together (threads).
    Results keep the order of `prompts`."""
    if concurrency <= 1:
        return [generate(base_url, p, max_new_tokens, timeout, ignore_eos) for p in prompts]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(generate, base_url, p, max_new_tokens, timeout, ignore_eos) for p in prompts]
        return [f.result() for f in futures]


def greedy_suite(base_url: str, prompts: Sequence, max_new_tokens: int, concurrent: int = 0,
                 timeout: float = 300.0, ignore_eos: bool = False) -> list[Generation]:
    """The first len(prompts) - concurrent prompts one at a time, then the last `concurrent` ones all in flight
    together (batched decode). Results keep the order of `prompts`."""
    split = len(prompts) - concurrent
    one_by_one = generate_many(base_url, prompts[:split], max_new_tokens, 1, timeout, ignore_eos)
    together = (generate_many(base_url, prompts[split:], max_new_tokens, concurrent, timeout, ignore_eos)
                if concurrent else [])
    return one_by_one + together


def token_prompts(vocab_size: int, lengths: Sequence[int], seed: int = 0, low: int = 2) -> list[list[int]]:
    """Deterministic prompts of random token ids in [low, vocab_size) with the given lengths."""
    import random

    rng = random.Random(seed)
    return [[rng.randrange(low, vocab_size) for _ in range(n)] for n in lengths]


def complete(base_url: str, model: str, prompt: str, max_tokens: int, timeout: float = 300.0) -> dict:
    """Greedy completion through the OpenAI-compatible `/v1/completions`; returns the JSON answer."""
    return http_json(base_url + "/v1/completions",
                     {"model": model, "prompt": prompt, "max_tokens": int(max_tokens), "temperature": 0.0},
                     timeout=timeout)


def chat(base_url: str, model: str, messages: list, max_tokens: int, timeout: float = 300.0) -> dict:
    """Greedy chat completion through `/v1/chat/completions` (messages may carry image_url parts)."""
    return http_json(base_url + "/v1/chat/completions",
                     {"model": model, "messages": messages, "max_tokens": int(max_tokens), "temperature": 0.0},
                     timeout=timeout)


def square_png(size: int = 64, square: int = 32, color=(220, 20, 20), background=(255, 255, 255)) -> bytes:
    """A PNG (8-bit RGB) of one centred square on a plain background, written with zlib alone (no PIL), so image
    requests need no files and no network."""
    import struct
    import zlib

    lo, hi = (size - square) // 2, (size - square) // 2 + square
    rows = b"".join(
        b"\x00" + b"".join(bytes(color if lo <= x < hi and lo <= y < hi else background) for x in range(size))
        for y in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def image_message(text: str, png: bytes) -> dict:
    """One user chat message with an inline (data URL) PNG and a question."""
    import base64

    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                        {"type": "text", "text": text}]}


# --------------------------------------------------------------------------------------------------- server info


def server_info(base_url: str, timeout: float = 30.0) -> dict:
    """The server's `/server_info`; falls back to `/get_server_info` (the older spelling) on a 404."""
    try:
        return http_json(base_url + "/server_info", timeout=timeout)
    except HTTPRequestError as first:
        try:
            return http_json(base_url + "/get_server_info", timeout=timeout)
        except HTTPRequestError as second:
            raise HTTPRequestError(f"neither /server_info nor /get_server_info answered: {first}; {second}") \
                from None


@dataclass
class SpecSummary:
    speculative_algorithm: Optional[str]
    speculative_num_draft_tokens: Optional[int]
    speculative_draft_attention_backend: Optional[str]
    attention_backend: Optional[str]
    disable_cuda_graph: Optional[bool]
    disable_piecewise_cuda_graph: Optional[bool]
    avg_spec_accept_length: Optional[float]
    version: Optional[str]

    @property
    def cuda_graph_on(self) -> bool:
        return self.disable_cuda_graph is False

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["cuda_graph_on"] = self.cuda_graph_on
        return d


_SPEC_KEYS = ("speculative_algorithm", "speculative_num_draft_tokens", "speculative_draft_attention_backend",
              "attention_backend", "disable_cuda_graph", "disable_piecewise_cuda_graph", "version")


def _lookup(info: dict, key: str) -> Any:
    """`info[key]`, or the value under `key` in a nested dict one level down (server_info layouts differ
    between SGLang lines: flat server args in 0.5.13, resolved groups in later lines)."""
    if key in info:
        return info[key]
    for value in info.values():
        if isinstance(value, dict) and key in value:
            return value[key]
    return None


def spec_summary(info: dict) -> SpecSummary:
    """The speculative-decoding fields of a server_info answer. avg_spec_accept_length comes from
    `internal_states[0]` and is None until the server has run at least one speculative step."""
    values = {k: _lookup(info, k) for k in _SPEC_KEYS}
    states = info.get("internal_states") or [{}]
    accept = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    num = values["speculative_num_draft_tokens"]
    return SpecSummary(
        speculative_algorithm=values["speculative_algorithm"],
        speculative_num_draft_tokens=None if num is None else int(num),
        speculative_draft_attention_backend=values["speculative_draft_attention_backend"],
        attention_backend=values["attention_backend"],
        disable_cuda_graph=None if values["disable_cuda_graph"] is None else bool(values["disable_cuda_graph"]),
        disable_piecewise_cuda_graph=(None if values["disable_piecewise_cuda_graph"] is None
                                      else bool(values["disable_piecewise_cuda_graph"])),
        avg_spec_accept_length=None if accept is None else float(accept),
        version=values["version"],
    )


# ------------------------------------------------------------------------------------- can this machine run it?


def cuda_device_count() -> int:
    """Visible CUDA devices (0 without torch or without CUDA). Does not create a CUDA context."""
    try:
        import torch
    except ImportError:
        return 0
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # a broken driver install reads as "no GPU"
        return 0


def local_weights(path_or_id: str) -> Optional[str]:
    """The local directory holding a complete safetensors checkpoint for `path_or_id`, or None.

    A directory path is checked in place; a hub id is looked up in the local Hugging Face cache only
    (`try_to_load_from_cache`: no network). Complete means config.json plus either model.safetensors or every
    shard named by model.safetensors.index.json."""
    if os.path.isdir(path_or_id):
        root = path_or_id

        def find(name: str) -> Optional[str]:
            candidate = os.path.join(root, name)
            return candidate if os.path.isfile(candidate) else None
    else:
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return None

        def find(name: str) -> Optional[str]:
            try:
                hit = try_to_load_from_cache(path_or_id, name)
            except Exception:  # a malformed id is "not available", not a crash at collection time
                return None
            return hit if isinstance(hit, str) else None

    config = find("config.json")
    if config is None:
        return None
    if find("model.safetensors") is not None:
        return os.path.dirname(config)
    index = find("model.safetensors.index.json")
    if index is None:
        return None
    with open(index) as f:
        shards = sorted(set(json.load(f).get("weight_map", {}).values()))
    if not shards or any(find(shard) is None for shard in shards):
        return None
    return os.path.dirname(config)


def skip_reason(min_gpus: int, models: dict[str, str]) -> Optional[str]:
    """Why a GPU end-to-end test cannot run here (None: it can). `models` maps an env var name to the model
    path or hub id it currently holds, so the reason says how to point the test at local weights."""
    gpus = cuda_device_count()
    if gpus < min_gpus:
        return f"needs {min_gpus} CUDA GPU(s), found {gpus}"
    missing = [f"{name}={path}" for name, path in models.items() if local_weights(path) is None]
    if missing:
        return ("weights not found locally (hub cache or directory; nothing is downloaded to check): "
                + ", ".join(missing) + " -- set these env vars to local checkpoint directories or pre-download")
    return None


# ----------------------------------------------------------------------------------------------------- comparing


@dataclass
class Verdict:
    index: int
    identical: bool
    first_mismatch: Optional[int]  # token index of the first difference (or the shorter length); None if identical
    plain_len: int
    spec_len: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _ids(x: Any) -> list[int]:
    return list(x.output_ids) if isinstance(x, Generation) else [int(t) for t in x]


def compare_outputs(plain: Sequence, spec: Sequence) -> list[Verdict]:
    """Per-prompt token identity between a plain run and a speculative run (Generations or id lists)."""
    if len(plain) != len(spec):
        raise ValueError(f"compare_outputs: {len(plain)} plain outputs but {len(spec)} speculative ones")
    verdicts = []
    for i, (p, s) in enumerate(zip(plain, spec)):
        a, b = _ids(p), _ids(s)
        mismatch = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if mismatch is None and len(a) != len(b):
            mismatch = min(len(a), len(b))
        verdicts.append(Verdict(i, mismatch is None, mismatch, len(a), len(b)))
    return verdicts


# ------------------------------------------------------------------------------------------- registered tests


def dflash_server_args(draft_path: str, *, num_draft_tokens: int, draft_attention_backend: str, tp_size: int,
                       max_running_requests: int) -> list[str]:
    """The server flags the registered large-model tests launch with (target attention: triton, for Gemma 4's
    512-wide global heads)."""
    return [
        "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", draft_path,
        "--speculative-num-draft-tokens", str(num_draft_tokens),
        "--speculative-draft-attention-backend", draft_attention_backend,
        "--tp-size", str(tp_size),
        "--attention-backend", "triton",
        "--dtype", "bfloat16",
        "--mem-fraction-static", "0.6",
        "--context-length", "4096",
        "--max-running-requests", str(max_running_requests),
        "--cuda-graph-max-bs", str(max_running_requests),
    ]


def gsm8k_under_dflash(target: str, server_args: list[str], questions: int):
    """Launch `target` with SGLang's `popen_launch_server`, run SGLang's GSM8K eval (5-shot, completion API,
    512 new tokens), always kill the server tree. Returns (spec summary at start, eval metrics, spec summary
    after the eval)."""
    from types import SimpleNamespace

    from sglang.srt.utils import kill_process_tree
    from sglang.test.run_eval import run_eval
    from sglang.test.test_utils import DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH, DEFAULT_URL_FOR_TEST, popen_launch_server

    base_url = DEFAULT_URL_FOR_TEST
    process = popen_launch_server(target, base_url, timeout=3 * DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
                                  other_args=server_args, env={"HF_HUB_OFFLINE": "1"})
    try:
        started = spec_summary(server_info(base_url))
        metrics = run_eval(SimpleNamespace(
            base_url=base_url, model=target, eval_name="gsm8k", api="completion", max_tokens=512,
            num_examples=questions, num_threads=64, num_shots=5,
            gsm8k_data_path=os.environ.get("GSM8K_DATA_PATH"),
        ))
        finished = spec_summary(server_info(base_url))
    finally:
        kill_process_tree(process.pid)
    return started, metrics, finished
