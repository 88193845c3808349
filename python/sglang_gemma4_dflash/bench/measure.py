"""One timed arm against one server, the DFlash authors' server-mode method: `GET /flush_cache`, one warm-up batch
of `concurrency` requests, then every prompt through `/generate` (greedy) with `concurrency` requests in flight.

throughput = sum of completion tokens / wall time of the whole batch; accept length = mean over requests of
`meta_info.spec_accept_length` (SGLang: completion_tokens / spec_verify_ct, bonus token included). Beyond the
authors: per-request latency and tokens/s (p50, p90), the token-weighted accept length, and the acceptance
histogram summed over requests when the server returns one.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from sglang_gemma4_dflash.bench import client
from sglang_gemma4_dflash.bench.errors import need

WARMUP_MAX_NEW_TOKENS = 64  # the authors' warm-up length (or max_new_tokens when smaller)
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")  # 0.5.23 / older spelling


@dataclass
class Request:
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    accept_length: Optional[float]
    verify_ct: Optional[int]
    histogram: Optional[list]  # steps by number of accepted draft tokens (index 0: none accepted)


def send(base_url: str, input_ids: Sequence[int], max_new_tokens: int, timeout: float) -> Request:
    start = time.perf_counter()
    out = client.generate(base_url, input_ids, max_new_tokens, timeout)
    latency = time.perf_counter() - start
    meta = out.get("meta_info") or {}
    histogram = next((meta[k] for k in HISTOGRAM_KEYS if meta.get(k)), None)
    accept = meta.get("spec_accept_length")
    return Request(
        prompt_tokens=int(meta.get("prompt_tokens", len(input_ids))),
        completion_tokens=int(meta.get("completion_tokens", len(out["output_ids"]))),
        latency_s=latency,
        accept_length=None if accept is None else float(accept),
        verify_ct=meta.get("spec_verify_ct"),
        histogram=None if histogram is None else [int(x) for x in histogram],
    )


def run_batch(
    base_url: str, prompts: list, max_new_tokens: int, concurrency: int, timeout: float, progress: Optional[str]
) -> tuple[list[Request], float]:
    """All prompts with `concurrency` in flight; (requests in prompt order, wall seconds). The first failed
    request stops the batch and raises its error."""
    bar = (
        need("tqdm", "progress bars (or pass --no-progress)").tqdm(total=len(prompts), desc=progress)
        if progress
        else None
    )
    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = [pool.submit(send, base_url, p, max_new_tokens, timeout) for p in prompts]
            for f in futures if bar is not None else ():
                f.add_done_callback(lambda _: bar.update(1))
            _, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for f in pending:  # only requests not yet started: they come after every started one
                f.cancel()
        wall = time.perf_counter() - start
        return [f.result() for f in futures], wall  # raises the first failure
    finally:
        if bar is not None:
            bar.close()


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def histogram_summary(requests: Sequence[Request]) -> Optional[dict]:
    """Summed steps-by-accepted-drafts histogram, its fractions, and per draft position p the share of steps that
    accepted position p (steps accepting >= p drafts); None when the server returned no histogram."""
    lists = [r.histogram for r in requests if r.histogram]
    if not lists:
        return None
    counts = [0] * max(len(h) for h in lists)
    for h in lists:
        for k, n in enumerate(h):
            counts[k] += n
    steps = sum(counts)
    return {
        "steps_by_accepted_drafts": counts,
        "fraction": [n / steps for n in counts],
        "position_acceptance": [sum(counts[p:]) / steps for p in range(1, len(counts))],
    }


def summarize(requests: Sequence[Request], wall_s: float) -> dict:
    tokens = sum(r.completion_tokens for r in requests)
    accepts = [r.accept_length for r in requests if r.accept_length is not None]
    verify = [r.verify_ct for r in requests if r.verify_ct]
    latencies = [r.latency_s for r in requests]
    per_request_tps = [r.completion_tokens / r.latency_s for r in requests if r.latency_s > 0]
    weighted = None
    if verify and len(verify) == len(requests):
        weighted = tokens / sum(verify)
    return {
        "num_requests": len(requests),
        "completion_tokens": tokens,
        "wall_s": wall_s,
        "throughput_tok_s": tokens / wall_s if wall_s > 0 else None,
        "accept_length": sum(accepts) / len(accepts) if accepts else None,
        "accept_length_token_weighted": weighted,
        "latency_s": {"p50": percentile(latencies, 50), "p90": percentile(latencies, 90)},
        "request_tok_s": {"p50": percentile(per_request_tps, 50), "p90": percentile(per_request_tps, 90)},
        "acceptance_histogram": histogram_summary(requests),
        "requests": [{k: v for k, v in asdict(r).items() if k != "histogram"} for r in requests],
    }


def measure(
    base_url: str,
    prompts: list,
    warmup: list,
    max_new_tokens: int,
    concurrency: int,
    timeout: float,
    progress: Optional[str] = None,
) -> dict:
    """flush, warm up with `warmup` (one batch, all in flight), then the timed batch of `prompts`."""
    flushed = client.flush_cache(base_url)
    warm_tokens = min(WARMUP_MAX_NEW_TOKENS, max_new_tokens)
    run_batch(base_url, warmup, warm_tokens, len(warmup), timeout, None)
    requests, wall = run_batch(base_url, prompts, max_new_tokens, concurrency, timeout, progress)
    result = {"flush_cache": flushed, "warmup_requests": len(warmup), "warmup_max_new_tokens": warm_tokens}
    result.update(summarize(requests, wall))
    return result
