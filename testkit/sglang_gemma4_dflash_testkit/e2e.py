"""Start SGLang servers and talk to them over HTTP, for end-to-end checks.

Used by the registered tiny test, the GPU scripts in scripts/gpu/ and the CI job. Everything is explicit:

- `Server` launches `python -m <launcher> --model-path ... <args>` in its own process group (its own session), waits a
  bounded time for `/get_model_info` and then `/health_generate` to answer 200, and kills the whole group on exit.
  The launcher defaults to `sglang.launch_server`; `sglang_gemma4_dflash_testkit.cpu_server` (CPU stand-ins) also fits.
- `generate` / `generate_many` call the native `/generate` greedily and return the output token ids;
  `complete` calls the OpenAI-compatible `/v1/completions`; `chat` calls `/v1/chat/completions`.
- `server_info` reads `/server_info`, or `/get_server_info` (the older spelling) where it is missing; `spec_summary`
  picks the speculative-decoding fields out of it.
- `compare_outputs(plain, spec)` gives one token-identity verdict per prompt.

The server launcher, the HTTP helpers, `server_info`/`spec_summary` and the first-difference rule are the wheel's
(`sglang_gemma4_dflash.bench`: one harness for the bench command and the tests); they are re-exported here under
their old names. Only the standard library is used besides, so the harness works wherever a server runs.
"""

from __future__ import annotations

import functools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from sglang_gemma4_dflash.bench.client import (  # noqa: F401  (re-exported for the test kit's callers)
    HTTPRequestError,
    SpecSummary,
    http_json,
    http_ok,
    server_info,
    spec_summary,
)
from sglang_gemma4_dflash.bench.client import generate as _generate
from sglang_gemma4_dflash.bench.launcher import (  # noqa: F401
    DEFAULT_LAUNCHER,
    Server,
    ServerError,
    free_port,
    group_alive,
    stop_servers_on_sigterm,
)
from sglang_gemma4_dflash.bench.parity import first_difference

CPU_LAUNCHER = "sglang_gemma4_dflash_testkit.cpu_server"


# ----------------------------------------------------------------------------------------------------- requests


@dataclass
class Generation:
    prompt: Any  # the text or the token id list sent
    output_ids: list[int]
    text: str
    meta_info: dict


def generate(
    base_url: str, prompt: str | Sequence[int], max_new_tokens: int, timeout: float = 300.0, ignore_eos: bool = False
) -> Generation:
    """Greedy generation through the native `/generate` (text prompt, or a list of input token ids).
    ignore_eos=True keeps going past end-of-sequence tokens, so every output has max_new_tokens tokens."""
    sampling = {"temperature": 0.0, "ignore_eos": True} if ignore_eos else {"temperature": 0.0}
    out = _generate(base_url, prompt, max_new_tokens, timeout, sampling=sampling)
    return Generation(
        prompt=prompt,
        output_ids=[int(t) for t in out["output_ids"]],
        text=out.get("text") or "",
        meta_info=out.get("meta_info") or {},
    )


def generate_many(
    base_url: str,
    prompts: Sequence,
    max_new_tokens: int,
    concurrency: int = 1,
    timeout: float = 300.0,
    ignore_eos: bool = False,
) -> list[Generation]:
    """`generate` for each prompt; with concurrency > 1 the requests are in flight together (threads).
    Results keep the order of `prompts`."""
    if concurrency <= 1:
        return [generate(base_url, p, max_new_tokens, timeout, ignore_eos) for p in prompts]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(generate, base_url, p, max_new_tokens, timeout, ignore_eos) for p in prompts]
        return [f.result() for f in futures]


def greedy_suite(
    base_url: str,
    prompts: Sequence,
    max_new_tokens: int,
    concurrent: int = 0,
    timeout: float = 300.0,
    ignore_eos: bool = False,
) -> list[Generation]:
    """The first len(prompts) - concurrent prompts one at a time, then the last `concurrent` ones all in flight
    together (batched decode). Results keep the order of `prompts`."""
    split = len(prompts) - concurrent
    one_by_one = generate_many(base_url, prompts[:split], max_new_tokens, 1, timeout, ignore_eos)
    together = (
        generate_many(base_url, prompts[split:], max_new_tokens, concurrent, timeout, ignore_eos) if concurrent else []
    )
    return one_by_one + together


def token_prompts(vocab_size: int, lengths: Sequence[int], seed: int = 0, low: int = 2) -> list[list[int]]:
    """Deterministic prompts of random token ids in [low, vocab_size) with the given lengths."""
    import random

    rng = random.Random(seed)
    return [[rng.randrange(low, vocab_size) for _ in range(n)] for n in lengths]


def complete(base_url: str, model: str, prompt: str, max_tokens: int, timeout: float = 300.0) -> dict:
    """Greedy completion through the OpenAI-compatible `/v1/completions`; returns the JSON answer."""
    return http_json(
        base_url + "/v1/completions",
        {"model": model, "prompt": prompt, "max_tokens": int(max_tokens), "temperature": 0.0},
        timeout=timeout,
    )


def chat(base_url: str, model: str, messages: list, max_tokens: int, timeout: float = 300.0) -> dict:
    """Greedy chat completion through `/v1/chat/completions` (messages may carry image_url parts)."""
    return http_json(
        base_url + "/v1/chat/completions",
        {"model": model, "messages": messages, "max_tokens": int(max_tokens), "temperature": 0.0},
        timeout=timeout,
    )


def square_png(size: int = 64, square: int = 32, color=(220, 20, 20), background=(255, 255, 255)) -> bytes:
    """A PNG (8-bit RGB) of one centred square on a plain background, written with zlib alone (no PIL), so image
    requests need no files and no network."""
    import struct
    import zlib

    lo, hi = (size - square) // 2, (size - square) // 2 + square
    rows = b"".join(
        b"\x00" + b"".join(bytes(color if lo <= x < hi and lo <= y < hi else background) for x in range(size))
        for y in range(size)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def image_message(text: str, png: bytes) -> dict:
    """One user chat message with an inline (data URL) PNG and a question."""
    import base64

    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}],
    }


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
        return (
            "weights not found locally (hub cache or directory; nothing is downloaded to check): "
            + ", ".join(missing)
            + " -- set these env vars to local checkpoint directories or pre-download"
        )
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
        mismatch = first_difference(a, b)
        verdicts.append(Verdict(i, mismatch is None, mismatch, len(a), len(b)))
    return verdicts


# ------------------------------------------------------------------------------------------- registered tests


def gpu_server_args(
    max_running_requests: int,
    *,
    mem_fraction: float = 0.3,
    sampling_backend: Optional[str] = "pytorch",
    piecewise: bool = True,
) -> list[str]:
    """The flags every GPU server of the project's checks starts with: triton attention (Gemma 4's 512-wide global
    heads), bf16, a small KV pool, CUDA graphs up to `max_running_requests`."""
    max_bs, no_piecewise = cuda_graph_flags()
    args = ["--attention-backend", "triton", "--dtype", "bfloat16", "--mem-fraction-static", str(mem_fraction)]
    args += ["--max-running-requests", str(max_running_requests), max_bs, str(max_running_requests)]
    if sampling_backend:
        args += ["--sampling-backend", sampling_backend]
    return args if piecewise else args + [no_piecewise]


@functools.lru_cache(maxsize=1)
def cuda_graph_flags() -> tuple[str, str]:
    """The installed SGLang's names for "decode CUDA graphs up to this batch" and "no piecewise (prefill) CUDA graphs":
    ``--cuda-graph-max-bs`` / ``--disable-piecewise-cuda-graph`` up to 0.5.17; 0.5.23 has only
    ``--cuda-graph-max-bs-decode`` / ``--disable-prefill-cuda-graph`` (and rejects the old prefix as ambiguous)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    known = {flag for action in parser._actions for flag in action.option_strings}
    max_bs = "--cuda-graph-max-bs" if "--cuda-graph-max-bs" in known else "--cuda-graph-max-bs-decode"
    no_piecewise = next(f for f in ("--disable-piecewise-cuda-graph", "--disable-prefill-cuda-graph") if f in known)
    return max_bs, no_piecewise


def cpu_server_args(max_running_requests: int, max_total_tokens: int = 4096) -> list[str]:
    """The flags of the project's CPU servers (CPU_LAUNCHER adds ``--device cpu`` and the attention backend):
    bf16, torch sampling, no CUDA graphs, a small KV pool so several servers share the machine."""
    args = ["--sampling-backend", "pytorch", "--dtype", "bfloat16", "--disable-cuda-graph"]
    return args + ["--max-total-tokens", str(max_total_tokens), "--max-running-requests", str(max_running_requests)]


def dflash_args(draft: str, num_draft_tokens: int, draft_attention_backend: str = "triton") -> list[str]:
    """The flags that turn a server into a DFLASH server with `draft`."""
    return [
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        draft,
        "--speculative-num-draft-tokens",
        str(num_draft_tokens),
        "--speculative-draft-attention-backend",
        draft_attention_backend,
    ]


def dflash_server_args(
    draft_path: str, *, num_draft_tokens: int, draft_attention_backend: str, tp_size: int, max_running_requests: int
) -> list[str]:
    """The server flags the registered large-model tests launch with."""
    args = gpu_server_args(max_running_requests, mem_fraction=0.6, sampling_backend=None)
    args += ["--tp-size", str(tp_size), "--context-length", "4096"]
    return args + dflash_args(draft_path, num_draft_tokens, draft_attention_backend)


def spaced_port(i: int, base: int = 21000, step: int = 1500) -> int:
    """Server i's port when several run side by side: far from the others' (SGLang derives further ports from
    it), or any free one if that one is taken."""
    import socket

    port = base + step * i
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return free_port()
    return port


def gsm8k_under_dflash(target: str, server_args: list[str], questions: int):
    """Launch `target` with SGLang's `popen_launch_server`, run SGLang's GSM8K eval (5-shot, completion API,
    512 new tokens), always kill the server tree. Returns (spec summary at start, eval metrics, spec summary
    after the eval)."""
    from types import SimpleNamespace

    from sglang.srt.utils import kill_process_tree
    from sglang.test.run_eval import run_eval
    from sglang.test.test_utils import DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH, DEFAULT_URL_FOR_TEST, popen_launch_server

    base_url = DEFAULT_URL_FOR_TEST
    process = popen_launch_server(
        target,
        base_url,
        timeout=3 * DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
        other_args=server_args,
        env={"HF_HUB_OFFLINE": "1"},
    )
    try:
        started = spec_summary(server_info(base_url))
        metrics = run_eval(
            SimpleNamespace(
                base_url=base_url,
                model=target,
                eval_name="gsm8k",
                api="completion",
                max_tokens=512,
                num_examples=questions,
                num_threads=64,
                num_shots=5,
                gsm8k_data_path=os.environ.get("GSM8K_DATA_PATH"),
            )
        )
        finished = spec_summary(server_info(base_url))
    finally:
        kill_process_tree(process.pid)
    return started, metrics, finished
