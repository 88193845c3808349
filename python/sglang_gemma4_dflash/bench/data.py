"""Prompts for the bench: the DFlash authors' five datasets (through `datasets`, when the hub is reachable) or a
local JSONL file, and the authors' selection (order shuffled with seed 42, repeated when more are asked for).

A JSONL line is an object with "prompt" (a string) or "turns" (a list of strings; the first is used, as for
mt-bench). Named datasets are formatted as the authors do: gsm8k and math500 get REASON_SUFFIX.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sglang_gemma4_dflash.bench.errors import BenchError, need

REASON_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class HubDataset:
    path: str
    config: str | None
    split: str
    prompt: Callable[[dict], str]


HUB = {
    "gsm8k": HubDataset("openai/gsm8k", "main", "test", lambda row: row["question"] + REASON_SUFFIX),
    "math500": HubDataset("HuggingFaceH4/MATH-500", None, "test", lambda row: row["problem"] + REASON_SUFFIX),
    "humaneval": HubDataset(
        "openai/openai_humaneval",
        None,
        "test",
        lambda row: (
            "Write a solution to the following problem and make sure that it passes the tests:\n"
            f"```python\n{row['prompt']}\n```"
        ),
    ),
    "mbpp": HubDataset("google-research-datasets/mbpp", "sanitized", "test", lambda row: row["prompt"]),
    "mt-bench": HubDataset("HuggingFaceH4/mt_bench_prompts", None, "train", lambda row: row["prompt"][0]),
}


def dataset_label(name: str) -> str:
    """How a dataset is named in the results: the hub name, or the JSONL file's stem."""
    return name if name in HUB else Path(name).stem


def load_prompts(name: str) -> list[str]:
    """The prompts of a named dataset or a JSONL file; BenchError naming the dataset and the fix otherwise."""
    if name in HUB:
        return _load_hub(name)
    if name.endswith(".jsonl") or Path(name).exists():
        return load_jsonl(name)
    raise BenchError(f"--dataset {name!r}: not one of {', '.join(HUB)} and not a JSONL file")


def _load_hub(name: str) -> list[str]:
    spec = HUB[name]
    fix = 'or pass a local JSONL file (one {"prompt": ...} per line) as --dataset'
    try:
        datasets = need("datasets", f"--dataset {name}")
    except BenchError as e:
        raise BenchError(f"cannot load dataset {name!r}: {e}; {fix}") from None
    try:
        rows = datasets.load_dataset(spec.path, spec.config, split=spec.split)
        return [spec.prompt(row) for row in rows]
    except Exception as e:  # no hub, no cache, changed columns: one message, not the library's traceback
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise BenchError(f"cannot load dataset {name!r} ({spec.path}) through `datasets`: {reason}; {fix}") from None


def load_jsonl(path: str) -> list[str]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise BenchError(f"cannot load dataset {path!r}: {e.strerror or e}") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchError(f"{where}: not JSON ({e.msg})") from None
        prompt = row.get("prompt") if isinstance(row, dict) else None
        turns = row.get("turns") if isinstance(row, dict) else None
        if prompt is None and isinstance(turns, list) and turns:
            prompt = turns[0]
        if not isinstance(prompt, str) or not prompt:
            raise BenchError(f'{where}: no prompt (each line needs "prompt": "<text>" or "turns": ["<text>", ...])')
        prompts.append(prompt)
    if not prompts:
        raise BenchError(f"cannot load dataset {path!r}: no prompts in it")
    return prompts


def select(prompts: list[str], count: int, seed: int = 42) -> list[str]:
    """`count` prompts in a seeded shuffled order, cycling through the dataset when it is shorter."""
    order = list(range(len(prompts)))
    random.Random(seed).shuffle(order)
    return [prompts[order[i % len(order)]] for i in range(count)]
