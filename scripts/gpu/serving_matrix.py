"""The serving-options matrix of `serving_options.py` as data and pure functions: the options, the prompts, where a
block of accepted tokens ends, the verdict, the JSON row, the served path read from a server log. No SGLang, no
network: the CPU tests import this module directly.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

VERDICTS = ("exact", "refused-clearly", "fails")
NOT_RUN = "not run"
ROW_KEYS = (
    "option", "sglang", "pair", "prompts", "identical", "first_difference", "accept_length",
    "finish_reasons_equal", "errors", "verdict", "path",
)  # fmt: skip
BLOCK_ATTENTION_ENV = "SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION"
REFUSE_WITHIN_S = 30.0  # a refusal answered later than this is not "at once"
# A server that exits with one of these has crashed; it has not refused anything.
CRASH_SIGNS = (
    "CUDA error", "illegal memory access", "device-side assert", "Segmentation fault", "core dumped",
    "out of memory", "OutOfMemoryError", "Capture cuda graph failed", "not ready after", "Killed", "NCCL error",
    "Traceback (most recent call last)", "Internal Server Error", "cannot reach the server", "timed out",
)  # fmt: skip


@dataclass(frozen=True)
class Option:
    """One knob: the flags and environment both servers get, the checkpoint they serve, the workloads run."""

    name: str
    flags: tuple = ()
    env: tuple = ()  # (name, value) pairs
    target: str = "target"  # "target", or "target_eos": the tiny target with one ordinary token made an EOS
    cases: tuple = ("greedy",)
    refusal_ok: bool = False  # a clear per-request refusal by the DFLASH server is an acceptable answer
    note: str = ""

    def server_key(self) -> tuple:
        """Options with the same key share one plain and one DFLASH server."""
        return (self.flags, self.env, self.target)


OPTIONS = {
    o.name: o
    for o in (
        Option("default", note="no extra flag: the control row"),
        Option("fp8_kv", flags=("--kv-cache-dtype", "fp8_e4m3"), note="fp8 KV cache, the plugin's block kernel on"),
        Option(
            "fp8_kv_nokernel",
            flags=("--kv-cache-dtype", "fp8_e4m3"),
            env=((BLOCK_ATTENTION_ENV, "0"),),
            note="fp8 KV cache, the plugin's block kernel off",
        ),
        Option("chunked_prefill", flags=("--chunked-prefill-size", "256"), cases=("long_prompts",)),
        Option("long_prompts", cases=("long_prompts",), note="chunked_prefill's prompts in one chunk: its control"),
        Option(
            "chunked_prefill_no_overlap",
            flags=("--chunked-prefill-size", "256", "--disable-overlap-schedule"),
            cases=("long_prompts",),
            note="chunked_prefill without the overlap scheduler",
        ),
        Option("no_radix", flags=("--disable-radix-cache",), cases=("greedy", "shared_prefix")),
        Option("radix_hits", cases=("shared_prefix",), note="later requests hit the cache while earlier ones decode"),
        Option("page16", flags=("--page-size", "16"), cases=("greedy", "shared_prefix")),
        Option("page64", flags=("--page-size", "64"), cases=("greedy", "shared_prefix")),
        Option("swa_small", flags=("--swa-full-tokens-ratio", "0.1"), cases=("swa_prompts",)),
        Option("long_gen", cases=("long_gen",), note="4096 new tokens"),
        Option("stops", cases=("stop_ids", "stop_strings"), note="stop token ids and stop strings inside a block"),
        Option("eos", target="target_eos", cases=("eos",), note="an EOS token inside an accepted block"),
        Option("logprobs", cases=("logprobs",), refusal_ok=True),
        Option("structured", cases=("json_schema", "regex"), refusal_ok=True),
        Option("sampling", cases=("sampling",), note="n > 1, temperature > 0, seeded"),
        Option("queue_aborts", cases=("queue_aborts",), note="64 requests on 16 running slots, 8 aborted"),
    )
}


def select_options(names: str) -> list[Option]:
    """`--options a,b,c` (or "all") to Option objects; an unknown name is one clear error."""
    wanted = list(OPTIONS) if names.strip() in ("", "all") else [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in OPTIONS]
    if unknown:
        raise SystemExit(f"--options: unknown {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
    return [OPTIONS[n] for n in wanted]


def server_groups(options: Sequence[Option]) -> list[list[Option]]:
    """Options grouped by the servers they need, in first-seen order."""
    groups: dict = {}
    for option in options:
        groups.setdefault(option.server_key(), []).append(option)
    return list(groups.values())


# ------------------------------------------------------------------------------------------------- blocks, stops


def inside_block(position: int, block_size: int) -> bool:
    """Output token `position` lies inside an accepted block, not at its end. Token 0 comes from the prefill; each
    verify step that accepts the whole block commits tokens 1..block, block+1..2 block, ..."""
    return position >= 1 and position % block_size != 0


def pick_stop_token(output_ids: Sequence[int], block_size: int, start: int = 1) -> Optional[tuple[int, int]]:
    """(position, token) of the first token at or after `start` inside a block that did not occur earlier in the
    output, so a stop on it ends the output exactly there; None if there is none."""
    for p in range(start, len(output_ids)):
        if inside_block(p, block_size) and output_ids[p] not in output_ids[:p]:
            return p, int(output_ids[p])
    return None


def pick_stop_string(
    output_ids: Sequence[int], decode: Callable[[Sequence[int]], str], block_size: int, start: int = 1
) -> Optional[tuple[int, str]]:
    """(position, string): the text of tokens p and p + 1 (printable, whole characters; both inside one block, so the
    match completes inside it) for the first p at or after `start` whose text first occurs in the decoded output where
    token p's text starts; else None."""
    for p in range(start, len(output_ids) - 1):
        if not (inside_block(p, block_size) and inside_block(p + 1, block_size)):
            continue
        text = decode(output_ids[p : p + 2])
        if not text.strip() or not text.isprintable() or "\ufffd" in text:
            continue
        if decode(output_ids[: p + 2]).find(text) == len(decode(output_ids[:p])):
            return p, text
    return None


def eos_prompts(
    successor: Sequence[int], eos_token: int, positions: Sequence[int], vocab_low: int, vocab_high: int, seed: int
) -> list[list[int]]:
    """Prompts after which greedy decoding along `successor` (the tiny target's map for prompts without the key)
    first emits `eos_token` at each given output position: random tokens, then the token `position + 1` steps
    before `eos_token` on the map. The caller keeps the key token out of [vocab_low, vocab_high)."""
    predecessor = {t: s for s, t in enumerate(successor)}
    rng = random.Random(seed)
    prompts = []
    for p in positions:
        last = eos_token
        for _ in range(p + 1):
            last = predecessor[last]
        body = [rng.randrange(vocab_low, vocab_high) for _ in range(5 + 7 * len(prompts))]
        prompts.append(body + [last])
    return prompts


# ------------------------------------------------------------------------------------------------------ prompts


def random_ids(rng: random.Random, n: int, low: int, high: int, avoid: int) -> list[int]:
    return [t if t != avoid else low for t in (rng.randrange(low, high) for _ in range(n))]


# The long prompts (chunked_prefill and its controls) and their seed. Seed 8's 1200-token prompt put the planted
# lookup of the tiny target at its threshold (gate 0.02 in fp32, 0.001 in bf16; tiny.lookup_gates) 13 tokens in:
# there plain decoding itself is undecided (a bf16 forward on the CPU gives DFLASH's tokens), so no kernel can be
# held to it. Seed 12 keeps every gate of the 48-token continuations at 1.8 or more (test_serving_options).
LONG_PROMPTS = (1024, 2900, 1500, 2048, 2600, 1200)
LONG_PROMPTS_SEED = 12


def length_prompts(lengths: Sequence[int], low: int, high: int, key: int, seed: int, keyed_every: int = 2):
    """Random prompts of the given lengths (bos excluded); every `keyed_every`-th carries the key token early."""
    rng = random.Random(seed)
    out = []
    for i, n in enumerate(lengths):
        ids = random_ids(rng, n, low, high, key)
        if keyed_every and i % keyed_every == 1:
            ids[min(3, n - 1)] = key
        out.append(ids)
    return out


def shared_prefix_prompts(prefix_len: int, suffix_lens: Sequence[int], low: int, high: int, key: int, seed: int):
    rng = random.Random(seed)
    prefix = random_ids(rng, prefix_len, low, high, key)
    return [prefix + random_ids(rng, n, low, high, key) for n in suffix_lens]


def queue_workload(count: int, aborts: int, low: int, high: int, key: int, seed: int) -> list[dict]:
    """`count` requests of random prompt lengths (4-800) and lengths (8-200 new tokens); `aborts` of them aborted
    after a random delay (0.3-3 s)."""
    rng = random.Random(seed)
    aborted = set(rng.sample(range(count), aborts))
    return [
        {
            "rid": f"queue-{seed}-{i}",
            "prompt": random_ids(rng, rng.randint(4, 800), low, high, key),
            "max_new_tokens": rng.randint(8, 200),
            "abort_after_s": round(rng.uniform(0.3, 3.0), 2) if i in aborted else None,
        }
        for i in range(count)
    ]


# ------------------------------------------------------------------------------------------------------ judging


def first_difference(a: Sequence[int], b: Sequence[int]) -> Optional[int]:
    """The first index where two token lists differ (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def last_error_line(text: str) -> str:
    """The last `SomethingError: message` (or `Exception: ...`) line of a log or traceback, else its last line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^([\w.]+(Error|Exception)|AssertionError)\b.*:", line):
            return line[:600]
    return lines[-1][:600] if lines else ""


def refusal_text(message: str) -> str:
    """The server's own words in an HTTP error (`<url>: HTTP 400: {"error": {"message": ...}}`), else the message."""
    match = re.match(r"^\S+: HTTP (\d+): (.*)$", message or "", re.S)
    if not match:
        return message or ""
    body = match.group(2)
    try:
        data = json.loads(body)
    except ValueError:
        return body
    for path in (("error", "message"), ("detail",), ("message",), ("error",)):
        value = data
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str):
            return value
    return body


def is_clear_refusal(message: Optional[str]) -> bool:
    """A refusal names what it refuses: a message of some length, without the signs of a crash or a hang."""
    line = last_error_line(refusal_text(message or ""))
    if len(line) < 20:
        return False
    return not any(sign in line for sign in CRASH_SIGNS)


def verdict(
    *,
    plain_start_error: Optional[str],
    dflash_start_error: Optional[str],
    identical: Sequence[bool],
    finish_equal: Sequence[bool],
    refusals: Sequence[str],
    errors: Sequence[str],
    ties: Sequence[bool] = (),
) -> str:
    """exact: every DFLASH answer equals plain's (tokens and finish reason) and nothing went wrong. refused-clearly:
    the DFLASH server refused the option at start-up (alone or with plain), or refused requests at once with a clear
    message where that is allowed (`refusals`), and everything it did serve equals plain. fails: anything else.
    `ties`: per answer, True where the first difference is a tie of the target's own fp32 logits (there greedy
    decoding is not defined, so the answer is not held to plain's; the row lists them)."""
    ties = list(ties) or [False] * len(identical)
    identical = [same or tie for same, tie in zip(identical, ties)]
    finish_equal = [same or tie for same, tie in zip(finish_equal, ties)]
    if dflash_start_error:
        clear = is_clear_refusal(dflash_start_error) and (not plain_start_error or is_clear_refusal(plain_start_error))
        return "refused-clearly" if clear and not errors else "fails"
    if plain_start_error or errors or not (identical or refusals):
        return "fails"
    if not all(identical) or not all(finish_equal) or len(identical) != len(finish_equal):
        return "fails"
    if refusals:
        return "refused-clearly" if all(is_clear_refusal(r) for r in refusals) else "fails"
    return "exact"


def make_row(
    option: Option,
    *,
    sglang: str,
    pair: str,
    comparisons: Sequence[dict],
    accept_lengths: Sequence[Optional[float]],
    refusals: Sequence[str],
    errors: Sequence[str],
    plain_start_error: Optional[str],
    dflash_start_error: Optional[str],
    path: dict,
    details: Optional[dict] = None,
) -> dict:
    """One JSON row. `comparisons`: one dict per compared answer with `identical`, `finish_equal` and, where they
    differ, `first_difference` ({index, plain, dflash} and the case and prompt)."""
    identical = [bool(c["identical"]) for c in comparisons]
    finish_equal = [bool(c["finish_equal"]) for c in comparisons]
    ties = [bool(c.get("tie")) and not c["identical"] for c in comparisons]
    accepts = [a for a in accept_lengths if a is not None]
    row = {
        "option": option.name,
        "sglang": sglang,
        "pair": pair,
        "prompts": len(comparisons),
        "identical": {"count": sum(identical), "total": len(identical)},
        "first_difference": next(
            (c["first_difference"] for c, tie in zip(comparisons, ties) if not c["identical"] and not tie), None
        ),
        "ties": [c["first_difference"] for c, tie in zip(comparisons, ties) if tie],
        "accept_length": round(sum(accepts) / len(accepts), 3) if accepts else None,
        "finish_reasons_equal": all(finish_equal) if finish_equal else None,
        "errors": list(errors),
        "verdict": verdict(
            plain_start_error=plain_start_error,
            dflash_start_error=dflash_start_error,
            identical=identical,
            finish_equal=finish_equal,
            refusals=refusals,
            errors=errors,
            ties=ties,
        ),
        "path": path,
        "flags": list(option.flags),
        "env": dict(option.env),
        "refusals": list(refusals),
        "start_errors": {"plain": plain_start_error, "dflash": dflash_start_error},
    }
    if details:
        row["details"] = details
    return row


def not_run_row(option: Option, sglang: str, pair: str, why: str) -> dict:
    row = {k: None for k in ROW_KEYS}
    row.update(option=option.name, sglang=sglang, pair=pair, errors=[why], verdict=NOT_RUN, path={})
    return row


# ---------------------------------------------------------------------------------------------------- the path


def served_path(log_text: str) -> dict:
    """Which attention kernel and draft head served a DFLASH server, from the plugin's INFO lines in its log."""
    worker = re.search(r"DFLASH worker (\S+) \(rank 0 of \d+\) for (\S+):.*?draft head: ([^\n]*)", log_text)
    kernel_on = sorted(set(re.findall(r"block attention kernel on for the Gemma 4 DFLASH (target|draft)", log_text)))
    declines: dict = {}
    for role, reason in re.findall(r"(target|draft) block runs SGLang's extend kernel: ([^\n]*?)\.?\s*$", log_text,
                                   re.M):  # fmt: skip
        declines.setdefault(role, []).append(reason)
    attention = {}
    for role in ("target", "draft"):
        if role in kernel_on:
            extra = f" (SGLang's extend kernel for: {'; '.join(declines[role])})" if role in declines else ""
            attention[role] = "the plugin's block kernel" + extra
        else:
            attention[role] = "SGLang's extend kernel"
    return {
        "plugin_loaded": "sglang-gemma4-dflash" in log_text,
        "worker": worker.group(1) if worker else None,
        "target_class": worker.group(2) if worker else None,
        "draft_head": worker.group(3).strip() if worker else None,
        "verify_attention": attention,
        "kernel_declines": declines,
        "sampled_verify_falls_back_to_greedy": "DFLASH non-greedy verification is unavailable" in log_text,
    }


LOGPROB_ATOL, LOGPROB_RTOL = 0.1, 0.02


def logprobs_close(a: float, b: float) -> bool:
    """Plain's and DFLASH's logprob of one token agree within bf16 tolerance: the target's logits are bf16 (about 3
    significant digits), and the verify and decode forwards round differently."""
    return abs(a - b) <= LOGPROB_ATOL + LOGPROB_RTOL * max(abs(a), abs(b))


def tie_margin(top: Sequence, plain_token: int, dflash_token: int) -> dict:
    """Where plain and DFLASH first differ: plain's own top logprobs at that position (`top`: SGLang's
    `output_top_logprobs` entry, `[logprob, id, ...]` items), the gap between plain's token and DFLASH's, and whether
    that gap is within the bf16 tolerance `logprobs_close` allows (a near-tie that rounding can flip)."""
    ranked = [(float(x[0]), int(x[1])) for x in top or []]
    by_id = {i: lp for lp, i in ranked}
    if plain_token not in by_id:
        return {"top": ranked, "gap": None, "near_tie": None}
    if dflash_token not in by_id:  # below the top k: the gap is at least plain's minus the last one listed
        gap, close = by_id[plain_token] - ranked[-1][0], logprobs_close(by_id[plain_token], ranked[-1][0])
        return {"top": ranked, "gap": round(gap, 5), "gap_is_lower_bound": True, "near_tie": None if close else False}
    gap = by_id[plain_token] - by_id[dflash_token]
    return {"top": ranked, "gap": round(gap, 5), "near_tie": logprobs_close(by_id[plain_token], by_id[dflash_token])}


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The q-th percentile (0-100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return ordered[int(rank) - 1]


def soak_goals(summary: dict) -> dict:
    """The soak's four goals from its summary: no failures apart from aborts, KV back to 0, GPU memory within 1 %
    of its start (None where only the whole card was measured while other servers came and went), /health 200
    throughout."""
    mem = summary.get("gpu_memory_mib") or {}
    start, end = mem.get("start"), mem.get("end")
    return {
        "no_failures": summary.get("failed") == 0,
        "kv_back_to_zero": summary.get("kv_used_tokens_after_drain") == 0,
        "memory_within_1pct": None
        if "not judged" in str(mem.get("measured"))
        else (start is not None and end is not None and abs(end - start) <= 0.01 * start),
        "health_always_200": summary.get("health", {}).get("failed") == 0
        and summary.get("health", {}).get("ok", 0) > 0,
    }
