"""Greedy parity: the same prompts, one at a time at temperature 0, to two servers; per prompt, whether the output
tokens are identical and the first index where they differ (a length difference counts at the shorter length)."""

from __future__ import annotations

from typing import Optional, Sequence

from sglang_gemma4_dflash.bench import client


def outputs(base_url: str, prompts: Sequence[Sequence[int]], max_new_tokens: int, timeout: float) -> list[list[int]]:
    return [[int(t) for t in client.generate(base_url, p, max_new_tokens, timeout)["output_ids"]] for p in prompts]


def first_difference(a: Sequence[int], b: Sequence[int]) -> Optional[int]:
    """The first token index where `a` and `b` differ (the shorter length when one is a prefix); None if equal."""
    index = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if index is None and len(a) != len(b):
        index = min(len(a), len(b))
    return index


def compare(baseline: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]]) -> dict:
    """The parity section of the result: counts and one entry per prompt."""
    if len(baseline) != len(candidate):
        raise ValueError(f"parity: {len(baseline)} baseline outputs but {len(candidate)} candidate ones")
    prompts = []
    for i, (a, b) in enumerate(zip(baseline, candidate)):
        diff = first_difference(a, b)
        prompts.append({"index": i, "identical": diff is None, "first_difference": diff,
                        "baseline_tokens": len(a), "candidate_tokens": len(b)})  # fmt: skip
    identical = sum(p["identical"] for p in prompts)
    return {"num_prompts": len(prompts), "identical": identical, "all_identical": identical == len(prompts),
            "prompts": prompts}  # fmt: skip
