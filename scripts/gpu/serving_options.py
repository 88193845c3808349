"""The serving options people combine with DFLASH on Gemma 4, each run plain against DFLASH with the same option on
both servers, on the tiny pair (the drafting pair: every block of 8 accepted); and a soak of mixed traffic. One JSON.

    source scripts/gpu/setup_site.sh 0.5.17
    python3 scripts/gpu/serving_options.py --line 0.5.17 --out $OUT/serving_options.json \\
        [--options default,fp8_kv,...|all] [--group-size 4] [--stagger 20] [--soak 420] [--cpu]

Options (`--options`, names in serving_matrix.OPTIONS): default, fp8_kv, fp8_kv_nokernel, chunked_prefill,
long_prompts, chunked_prefill_no_overlap, no_radix, radix_hits, page16, page64, swa_small, long_gen, stops, eos,
logprobs, structured, sampling, queue_aborts. Options with the same server flags share one plain and one DFLASH
server (default, long_prompts, radix_hits, long_gen, stops, logprobs, structured, sampling, queue_aborts share the
base servers); `--group-size` server pairs run side by side, every start `--stagger` seconds after the one before,
ports 1000 apart. A row per option
(serving_matrix.make_row) is written as soon as its option is done; rows never reached say "not run". The server
logs go to `<out>.logs.tgz`.

`--soak SECONDS` starts one more DFLASH server (base flags) and sends it mixed traffic for that long (at most
`--soak-max-requests`), beside the matrix: requests sent / answered / failed / refused / aborted, p50 and p99
latency, GPU memory of the server's processes (nvidia-smi) at start and end, KV tokens in use after the drain
(`/v1/loads`), `/health` polled every 2 s. `--cpu` is a dry run on SGLang's CPU engine (test kit stand-ins):
SGLang refuses DFLASH there, so both servers of a pair are plain.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "testkit"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import serving_matrix as sm  # noqa: E402
from sglang_gemma4_dflash.attention.tuning import TUNING_ENV, default_tuning  # noqa: E402
from sglang_gemma4_dflash.bench.client import HTTPRequestError, http_json, http_ok  # noqa: E402
from sglang_gemma4_dflash.dflash.sampling_prebuild import ENV as PREBUILD_ENV  # noqa: E402
from sglang_gemma4_dflash_testkit import e2e, tiny  # noqa: E402
from sglang_gemma4_dflash_testkit.tiny import TINY, planted_continuation, successor_map  # noqa: E402

LOW, HIGH, KEY = TINY.num_special_tokens, TINY.key_token_id, TINY.key_token_id  # ordinary ids: [LOW, HIGH)
BLOCK = TINY.block_size
MAX_RUNNING = 16
PAIRS = (
    "text",
    "mm",
    "text-stock",
    "mm-stock",
    "text-nokernel",
    "mm-nokernel",
    "text-nopdl",
    "mm-nopdl",
    "text-ci",
    "mm-ci",
)
JSON_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]}},
    "required": ["ok", "color"],
    "additionalProperties": False,
}
REGEX = "(yes|no)-[0-9]{2}"
CAP = {"new_tokens": None}  # --cap-new-tokens: shorter generations for a dry run on a slow CPU
TARGET = {"path": None, "models": {}, "lock": threading.Lock()}  # the tiny target in transformers, for decisions
STOPPING = threading.Event()  # set on SIGTERM: no new server, no new option, no row from dying servers


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------------ requests


def post(url: str, payload: dict, timeout: float) -> dict:
    """POST /generate; an outcome: output ids, text, finish reason, accept length, cached tokens or an error."""
    started = time.time()
    try:
        answer = http_json(url + "/generate", payload, timeout=timeout)
    except HTTPRequestError as exc:
        return {"error": str(exc)[:2000], "seconds": round(time.time() - started, 2)}
    seconds = round(time.time() - started, 2)
    if isinstance(answer, list):
        return [outcome(a, seconds) for a in answer]
    return {**outcome(answer, seconds), "request": payload}


def outcome(answer: dict, seconds: float) -> dict:
    meta = answer.get("meta_info") or {}
    finish = meta.get("finish_reason")
    out = {
        "ids": [int(t) for t in answer.get("output_ids") or []],
        "text": answer.get("text") or "",
        "finish": finish,
        "accept": meta.get("spec_accept_length"),
        "cached": meta.get("cached_tokens"),
        "seconds": seconds,
    }
    if isinstance(finish, dict) and finish.get("type") == "abort" and finish.get("message"):
        out["abort_message"] = str(finish["message"])[:2000]
    for key in ("output_token_logprobs", "output_top_logprobs"):
        if key in meta:
            out[key] = meta[key]
    return out


def cap(max_new_tokens: int) -> int:
    return min(max_new_tokens, CAP["new_tokens"] or max_new_tokens)


def payload(prompt: list[int], max_new_tokens: int, **params) -> dict:
    body = {k: params.pop(k) for k in ("return_logprob", "top_logprobs_num", "rid") if k in params}
    sampling = {"temperature": 0.0, "max_new_tokens": cap(max_new_tokens), **params}
    return {"input_ids": [TINY.bos_token_id] + list(prompt), "sampling_params": sampling, **body}


def on_both(pair: "Pair", payloads: list[dict], concurrent: bool, timeout: float = 300.0, gap_s: float = 0.0):
    """The same requests on the plain and the DFLASH server at once; per server, one at a time or all in flight
    (started `gap_s` apart). Returns (plain outcomes, DFLASH outcomes)."""

    def run(url: str) -> list:
        if not concurrent:
            return [post(url, p, timeout) for p in payloads]
        with ThreadPoolExecutor(max(1, len(payloads))) as pool:
            futures = []
            for p in payloads:
                futures.append(pool.submit(post, url, p, timeout))
                time.sleep(gap_s)
            return [f.result() for f in futures]

    with ThreadPoolExecutor(2) as pool:
        plain, dflash = pool.submit(run, pair.plain), pool.submit(run, pair.dflash)
        return plain.result(), dflash.result()


def kv_used_tokens(url: str) -> int | None:
    """KV tokens held by requests (the radix cache's evictable tokens not counted): /v1/loads' num_used_tokens."""
    try:
        loads = http_json(url + "/v1/loads?include=core", timeout=15).get("loads") or []
        return sum(int(x.get("num_used_tokens", 0)) for x in loads)
    except (HTTPRequestError, ValueError, TypeError, AttributeError):
        return None


def drained_kv(url: str, wait_s: float = 20.0) -> int | None:
    deadline = time.time() + wait_s
    used = kv_used_tokens(url)
    while used and time.time() < deadline:
        time.sleep(1.0)
        used = kv_used_tokens(url)
    return used


# --------------------------------------------------------------------------------------------------------- cases


@dataclass
class Pair:
    plain: str
    dflash: str
    decode: object = None  # token ids -> text (the tiny tokenizer)
    refusal_ok: bool = False


@dataclass
class CaseOut:
    comparisons: list = field(default_factory=list)
    accepts: list = field(default_factory=list)
    refusals: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    details: dict = field(default_factory=dict)


def compare(out: CaseOut, pair: Pair, case: str, index: int, p, d, *, logprobs: bool = False) -> None:
    """Judge one answer pair into `out`: a comparison, a refusal, or an error."""
    if isinstance(p, list) or isinstance(d, list):  # n > 1
        p, d = (p if isinstance(p, list) else [p]), (d if isinstance(d, list) else [d])
        p, d = sorted(p, key=sample_key), sorted(d, key=sample_key)  # the n samples come back in any order
        for j, (a, b) in enumerate(zip(p, d)):
            compare(out, pair, case, index * 100 + j, a, b)
        return
    p_message, d_message = p.get("error") or p.get("abort_message"), d.get("error") or d.get("abort_message")
    if p_message and d_message and pair.refusal_ok and all(map(sm.is_clear_refusal, (p_message, d_message))):
        out.refusals.append(f"{case} (plain too): {sm.last_error_line(sm.refusal_text(d_message))}")
        return
    if "error" in p or "abort_message" in p:
        out.errors.append(f"{case}[{index}] plain: {p.get('error') or p.get('abort_message')}"[:1500])
        return
    if "error" in d or "abort_message" in d:
        message = d.get("error") or d.get("abort_message")
        fast = d["seconds"] <= sm.REFUSE_WITHIN_S
        if pair.refusal_ok and fast and sm.is_clear_refusal(message):
            out.refusals.append(f"{case}: {sm.last_error_line(sm.refusal_text(message))}")
        else:
            out.errors.append(f"{case}[{index}] dflash after {d['seconds']}s: {message}"[:1500])
        return
    diff = sm.first_difference(p["ids"], d["ids"])
    finish_equal = p["finish"] == d["finish"]
    item = {"case": case, "index": index, "identical": diff is None, "finish_equal": finish_equal}
    if diff is not None or not finish_equal:
        item["first_difference"] = {
            "case": case,
            "prompt": index,
            "index": diff,
            "plain": p["ids"][diff : diff + 4] if diff is not None else [],
            "dflash": d["ids"][diff : diff + 4] if diff is not None else [],
            "finish": {"plain": p["finish"], "dflash": d["finish"]},
        }
        if diff is not None:
            # both outputs from the start to 8 past it: what scripts/explain_difference.py takes
            item["first_difference"].update(plain_ids=p["ids"][: diff + 8], dflash_ids=d["ids"][: diff + 8])
            if diff < min(len(p["ids"]), len(d["ids"])) and "request" in p:
                item["first_difference"]["plain_margin"] = replay_margin(pair.plain, p, diff, d["ids"][diff])
                target = target_decision(p["request"]["input_ids"] + p["ids"][:diff], p["ids"][diff], d["ids"][diff])
                item["first_difference"]["target"] = target
                item["tie"] = bool(target.get("float32", {}).get("tie"))
    if logprobs and diff is None:
        worst, close = logprob_gap(p, d)
        item["logprob_max_abs_diff"] = worst
        if not close:
            item["identical"] = False
            item["first_difference"] = {"case": case, "prompt": index, "logprob_max_abs_diff": worst}
    out.comparisons.append(item)
    out.accepts.append(d.get("accept"))


def target_decision(ids: list, plain_token: int, dflash_token: int) -> dict:
    """The tiny target's own decision there (transformers on the CPU, fp32 and bf16, one forward over plain's
    prefix): the logit gap between the two tokens, a tie (fp32 gap under tiny.TIE_LOGIT_GAP: greedy decoding is not
    defined there, whatever the kernels), its argmax and the planted lookup's gate."""
    import torch
    from transformers import AutoModelForCausalLM

    if TARGET["path"] is None:
        return {"skipped": "no tiny target path"}
    try:
        with TARGET["lock"]:
            out = {}
            for name in ("float32", "bfloat16"):
                if name not in TARGET["models"]:
                    dtype = getattr(torch, name)
                    TARGET["models"][name] = AutoModelForCausalLM.from_pretrained(TARGET["path"], dtype=dtype).eval()
                out[name] = tiny.decision(TARGET["models"][name], ids, plain_token, dflash_token)
            return out
    except Exception as e:  # a diagnosis: never the reason a row fails
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def replay_margin(url: str, p: dict, index: int, dflash_token: int) -> dict:
    """Plain's margin where DFLASH first differs: the plain request again, up to that token, with its top logprobs
    (a greedy request only; the plain server serves logprobs)."""
    request = json.loads(json.dumps(p["request"]))
    if request["sampling_params"].get("temperature", 0.0) > 0:
        return {"skipped": "a sampled request"}
    request.pop("rid", None)
    request["sampling_params"]["max_new_tokens"] = index + 1
    request.update(return_logprob=True, top_logprobs_num=5)
    again = post(url, request, 120)
    if "error" in again or len(again.get("output_top_logprobs") or []) <= index:
        return {"error": str(again.get("error", "no top logprobs at that position"))[:300]}
    margin = sm.tie_margin(again["output_top_logprobs"][index], p["ids"][index], dflash_token)
    return {**margin, "replay_equals_plain": again["ids"][: index + 1] == p["ids"][: index + 1]}


def sample_key(x: dict) -> tuple:
    return (x.get("ids") or [], str(x.get("error", "")))


def logprob_gap(p: dict, d: dict) -> tuple:
    """(largest |plain - DFLASH| over the output logprobs and the top logprobs, all within tolerance); the top
    logprobs must name the same ids in the same order. (None, False) when they cannot be compared."""
    try:
        pairs = [(a[0], b[0]) for a, b in zip(p["output_token_logprobs"], d["output_token_logprobs"])]
        for ta, tb in zip(p["output_top_logprobs"], d["output_top_logprobs"]):
            if [x[1] for x in ta] != [x[1] for x in tb]:
                return float("inf"), False
            pairs += [(x[0], y[0]) for x, y in zip(ta, tb)]
    except (KeyError, TypeError, IndexError):
        return None, False
    worst = max((abs(a - b) for a, b in pairs), default=0.0)
    return round(worst, 5), all(sm.logprobs_close(a, b) for a, b in pairs)


def follow_up(out: CaseOut, pair: Pair, case: str) -> None:
    """After refusals or grammar requests: the DFLASH server still serves a greedy request like plain."""
    p, d = on_both(pair, [payload([LOW + 5, LOW + 9, LOW + 30], 24)], concurrent=False, timeout=120)
    compare(out, Pair(pair.plain, pair.dflash), case + "_follow_up", 0, p[0], d[0])


def greedy_prompts() -> list[list[int]]:
    lengths = [3, 7, 16, 31, 11, 17, 53, 75, 23, 40, 90, 120, 8, 33, 64, 150]
    return sm.length_prompts(lengths, LOW, HIGH, KEY, seed=21)


def case_greedy(pair: Pair, out: CaseOut) -> None:
    prompts = [payload(p, 64) for p in greedy_prompts()]
    p1, d1 = on_both(pair, prompts[:8], concurrent=False)
    p2, d2 = on_both(pair, prompts[8:], concurrent=True)
    for i, (p, d) in enumerate(zip(p1 + p2, d1 + d2)):
        compare(out, pair, "greedy", i, p, d)


def case_shared_prefix(pair: Pair, out: CaseOut) -> None:
    prompts = sm.shared_prefix_prompts(1200, [4 + 3 * i for i in range(16)], LOW, HIGH, KEY, seed=5)
    p, d = on_both(pair, [payload(x, 96) for x in prompts], concurrent=True, gap_s=0.15)
    for i, (a, b) in enumerate(zip(p, d)):
        compare(out, pair, "shared_prefix", i, a, b)
    cached = {k: sum((x.get("cached") or 0) for x in v if "error" not in x) for k, v in (("plain", p), ("dflash", d))}
    out.details["cached_tokens"] = cached


def case_long_prompts(pair: Pair, out: CaseOut) -> None:
    prompts = [payload(x, 48) for x in sm.length_prompts(sm.LONG_PROMPTS, LOW, HIGH, KEY, seed=sm.LONG_PROMPTS_SEED)]
    p1, d1 = on_both(pair, prompts[:2], concurrent=False)
    p2, d2 = on_both(pair, prompts[2:], concurrent=True)
    for i, (p, d) in enumerate(zip(p1 + p2, d1 + d2)):
        compare(out, pair, "long_prompts", i, p, d)


def case_swa_prompts(pair: Pair, out: CaseOut) -> None:
    lengths = [200 + 60 * i for i in range(12)]
    p, d = on_both(pair, [payload(x, 96) for x in sm.length_prompts(lengths, LOW, HIGH, KEY, seed=9)], True)
    for i, (a, b) in enumerate(zip(p, d)):
        compare(out, pair, "swa_prompts", i, a, b)


def case_long_gen(pair: Pair, out: CaseOut) -> None:
    prompts = [payload(x, 4096) for x in sm.length_prompts([20, 45, 300], LOW, HIGH, KEY, seed=10)]
    p, d = on_both(pair, prompts, concurrent=True, timeout=500)
    for i, (a, b) in enumerate(zip(p, d)):
        compare(out, pair, "long_gen", i, a, b)
    out.details["output_lengths"] = [len(x.get("ids", [])) for x in d]


def reference(pair: Pair, prompts: list[list[int]], n: int) -> list[list[int]]:
    """The plain server's greedy outputs (ignoring EOS), where the stops are picked."""
    return [post(pair.plain, payload(p, n, ignore_eos=True), 120).get("ids", []) for p in prompts]


def case_stop_ids(pair: Pair, out: CaseOut) -> None:
    prompts = sm.length_prompts([12, 20, 33, 47, 60, 80], LOW, HIGH, KEY, seed=12)
    starts = [1, 3, 10, 18, 27, 36]
    picks = [sm.pick_stop_token(ref, BLOCK, s) for ref, s in zip(reference(pair, prompts, 56), starts)]
    runs = [(p, pick) for p, pick in zip(prompts, picks) if pick]
    p, d = on_both(pair, [payload(x, 56, stop_token_ids=[pick[1]]) for x, pick in runs], concurrent=True)
    for i, (a, b) in enumerate(zip(p, d)):
        compare(out, pair, "stop_ids", i, a, b)
    out.details["stop_ids"] = [{"position": pk[0], "token": pk[1], "plain_len": len(a.get("ids", []))}
                               for (_, pk), a in zip(runs, p)]  # fmt: skip
    missed = [d["position"] for d in out.details["stop_ids"] if d["plain_len"] != d["position"] + 1]
    if missed:
        out.errors.append(f"stop_ids: plain did not stop at positions {missed}; nothing tested there")


def case_stop_strings(pair: Pair, out: CaseOut) -> None:
    prompts = sm.length_prompts([14, 22, 35, 49, 62, 82], LOW, HIGH, KEY, seed=13)
    starts = [1, 4, 11, 19, 26, 34]
    picks = [sm.pick_stop_string(r, pair.decode, BLOCK, s) for r, s in zip(reference(pair, prompts, 56), starts)]
    runs = [(p, pick) for p, pick in zip(prompts, picks) if pick]
    if not runs:
        out.errors.append("stop_strings: no printable stop string inside a block in the plain outputs")
        return
    p, d = on_both(pair, [payload(x, 56, stop=[pick[1]]) for x, pick in runs], concurrent=True)
    for i, (a, b) in enumerate(zip(p, d)):
        compare(out, pair, "stop_strings", i, a, b)
        if "text" in a and "text" in b and a["text"] != b["text"]:
            out.comparisons[-1].update(identical=False, first_difference={"case": "stop_strings", "prompt": i,
                                       "text": {"plain": a["text"], "dflash": b["text"]}})  # fmt: skip
    out.details["stop_strings"] = [{"position": pk[0], "stop": pk[1], "plain_len": len(a.get("ids", []))}
                                   for (_, pk), a in zip(runs, p)]  # fmt: skip
    missed = [d["position"] for d in out.details["stop_strings"] if d["plain_len"] != d["position"] + 2]
    if missed:
        out.errors.append(f"stop_strings: plain did not stop after the string at {missed}; nothing tested there")


EOS_POSITIONS = (2, 5, 11, 20, 29, 35)


def eos_token() -> int:
    return planted_continuation([LOW + 1], 40)[17]


def case_eos(pair: Pair, out: CaseOut) -> None:
    prompts = sm.eos_prompts(successor_map(0, TINY, 0), eos_token(), EOS_POSITIONS, LOW, HIGH, seed=14)
    p, d = on_both(pair, [payload(x, 48) for x in prompts], concurrent=True)
    for i, (a, b) in enumerate(zip(p, d)):
        compare(out, pair, "eos", i, a, b)
    lengths = [len(a.get("ids", [])) for a in p]
    out.details["eos"] = {"token": eos_token(), "positions": list(EOS_POSITIONS), "plain_lengths": lengths}
    missed = [(q, n) for q, n, a in zip(EOS_POSITIONS, lengths, p) if "error" not in a and n != min(q + 1, cap(48))]
    if missed:
        out.errors.append(f"eos: plain did not stop at the planted EOS (position, length): {missed}; nothing tested")


def case_logprobs(pair: Pair, out: CaseOut) -> None:
    prompts = sm.length_prompts([9, 30, 70, 120], LOW, HIGH, KEY, seed=15)
    p, d = on_both(pair, [payload(x, 16, return_logprob=True, top_logprobs_num=5) for x in prompts], True)
    for i, (a, b) in enumerate(zip(p, d)):
        compare(out, pair, "logprobs", i, a, b, logprobs=True)
    follow_up(out, pair, "logprobs")


def grammar_ok(kind: str, text: str) -> bool:
    if kind == "regex":
        return re.fullmatch(REGEX, text) is not None
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return (isinstance(value, dict) and set(value) == {"ok", "color"} and isinstance(value["ok"], bool)
            and value["color"] in ("red", "green", "blue"))  # fmt: skip


def case_grammar(kind: str, pair: Pair, out: CaseOut) -> None:
    key = {"regex": REGEX, "json_schema": json.dumps(JSON_SCHEMA)}[kind]
    prompts = sm.length_prompts([6, 25, 50, 90], LOW, HIGH, KEY, seed=16)
    p, d = on_both(pair, [payload(x, 128, **{kind: key}) for x in prompts], concurrent=True, timeout=120)
    broken = {"plain": [], "dflash": []}
    for i, (a, b) in enumerate(zip(p, d)):
        compare(out, pair, kind, i, a, b)
        for side, x in (("plain", a), ("dflash", b)):
            if "error" not in x and (x.get("finish") or {}).get("type") == "stop" and not grammar_ok(kind, x["text"]):
                broken[side].append(x["text"][:200])
    if broken["dflash"]:
        out.errors.append(f"{kind}: DFLASH output breaks the grammar: {broken['dflash']}")
    out.details[kind] = {
        "breaks_grammar": broken,
        "finish": [(x.get("finish") or {}).get("type") for x in d],
        "dflash_texts": [x.get("text", "")[:120] for x in d],
    }
    follow_up(out, pair, kind)


def case_sampling(pair: Pair, out: CaseOut) -> None:
    """Served (n answers for n > 1), and seeded sampling repeats: the DFLASH server's second answer equals its
    first, each request sent alone. The plain server's repeats and plain against DFLASH are recorded, not judged."""
    prompts = sm.length_prompts([10, 40, 90], LOW, HIGH, KEY, seed=17)
    params = [dict(temperature=0.8, top_p=0.95, sampling_seed=7, n=2), dict(temperature=1.0, top_k=20,
              sampling_seed=11), dict(temperature=0.7, sampling_seed=3, n=3)]  # fmt: skip
    requests = [payload(x, 32, **pr) for x, pr in zip(prompts, params)]

    def alone(url: str) -> list:  # a seed repeats a sample only in a batch of the same makeup (the logits' last
        return [post(url, r, 300.0) for r in requests]  # bits depend on it), so each request goes alone

    p1, d1, p2, d2 = alone(pair.plain), alone(pair.dflash), alone(pair.plain), alone(pair.dflash)
    plain = CaseOut()
    for i in range(len(requests)):
        compare(out, Pair(pair.dflash, pair.dflash), "sampling_repeat", i, d1[i], d2[i])
        compare(plain, Pair(pair.plain, pair.plain), "sampling_repeat_plain", i, p1[i], p2[i])
    served = [len(x) if isinstance(x, list) else (0 if "error" in x else 1) for x in d1]
    expected = [pr.get("n", 1) for pr in params]
    if served != expected:
        out.errors.append(f"sampling: DFLASH answered {served} samples per request, asked for {expected}")

    def ids(x):
        return [y.get("ids") for y in x] if isinstance(x, list) else x.get("ids")

    out.details["sampling"] = {
        "samples": served,
        "plain_repeats": [c["identical"] for c in plain.comparisons],
        "plain_errors": plain.errors,
        "dflash_equals_plain": [ids(x) == ids(y) for x, y in zip(p1, d1)],
    }


def case_queue_aborts(pair: Pair, out: CaseOut) -> None:
    work = sm.queue_workload(64, 8, LOW, HIGH, KEY, seed=18)

    def run(url: str) -> list:
        def one(w):
            return post(url, payload(w["prompt"], w["max_new_tokens"], rid=w["rid"]), 300)

        def abort(w):
            time.sleep(w["abort_after_s"])
            try:
                http_json(url + "/abort_request", {"rid": w["rid"]}, timeout=30)
            except (HTTPRequestError, ValueError):
                pass  # the answer body of a successful abort is empty

        with ThreadPoolExecutor(len(work) + 8) as pool:
            futures = [pool.submit(one, w) for w in work]
            for w in work:
                if w["abort_after_s"] is not None:
                    pool.submit(abort, w)
            return [f.result() for f in futures]

    with ThreadPoolExecutor(2) as pool:
        fp, fd = pool.submit(run, pair.plain), pool.submit(run, pair.dflash)
        p, d = fp.result(), fd.result()
    aborted = {"plain": 0, "dflash": 0}
    for i, (w, a, b) in enumerate(zip(work, p, d)):
        if w["abort_after_s"] is None:
            compare(out, pair, "queue", i, a, b)
            continue
        for side, x in (("plain", a), ("dflash", b)):
            kind = (x.get("finish") or {}).get("type") if "error" not in x else "error"
            aborted[side] += kind == "abort" or "abort" in str(x.get("error", "")).lower()
    kv = {"plain": drained_kv(pair.plain), "dflash": drained_kv(pair.dflash)}
    health = {"plain": http_ok(pair.plain + "/health", 60), "dflash": http_ok(pair.dflash + "/health", 60)}
    out.details["queue"] = {"aborted": aborted, "kv_used_tokens_after_drain": kv, "health_after": health}
    if kv["dflash"] != 0:
        out.errors.append(f"queue_aborts: DFLASH server holds {kv['dflash']} KV tokens after the drain")
    if not health["dflash"]:
        out.errors.append("queue_aborts: DFLASH server's /health is not 200 after the drain")


CASES = {
    "greedy": case_greedy,
    "shared_prefix": case_shared_prefix,
    "long_prompts": case_long_prompts,
    "swa_prompts": case_swa_prompts,
    "long_gen": case_long_gen,
    "stop_ids": case_stop_ids,
    "stop_strings": case_stop_strings,
    "eos": case_eos,
    "logprobs": case_logprobs,
    "json_schema": lambda pair, out: case_grammar("json_schema", pair, out),
    "regex": lambda pair, out: case_grammar("regex", pair, out),
    "sampling": case_sampling,
    "queue_aborts": case_queue_aborts,
}


def run_option(option: sm.Option, pair: Pair) -> CaseOut:
    out = CaseOut()
    pair = Pair(pair.plain, pair.dflash, pair.decode, option.refusal_ok)
    for case in option.cases:
        try:
            CASES[case](pair, out)
        except Exception:
            out.errors.append(f"{case}: {traceback.format_exc()[-1500:]}")
    if option.name == "radix_hits" and not (out.details.get("cached_tokens") or {}).get("plain"):
        out.errors.append("radix_hits: no request hit the radix cache on the plain server (the case tested nothing)")
    return out


# ------------------------------------------------------------------------------------------------------ servers


class StartGate:
    """Server starts at least `gap` seconds apart (CUDA graph captures and JIT builds do not all contend at once)."""

    def __init__(self, gap: float):
        self.gap, self.lock, self.last = gap, threading.Lock(), 0.0

    def wait(self) -> None:
        with self.lock:
            time.sleep(max(0.0, self.last + self.gap - time.time()))
            self.last = time.time()


@dataclass
class Setup:
    args: argparse.Namespace
    paths: dict
    log_dir: str
    gate: StartGate
    ports: object  # iterator of port indices
    lock: threading.Lock = field(default_factory=threading.Lock)


def base_flags(cpu: bool, mem_fraction: float, mm: bool) -> list[str]:
    if cpu:
        args = e2e.cpu_server_args(MAX_RUNNING, max_total_tokens=32768)
    else:
        args = e2e.gpu_server_args(MAX_RUNNING, mem_fraction=mem_fraction, piecewise=False)
        args += ["--max-total-tokens", "32768"]
    args += ["--context-length", "8192"]  # 4096 new tokens after a prompt (env below allows it past the config's)
    return args + (["--mm-attention-backend", "triton_attn"] if mm and not cpu else [])


def start_server(setup: Setup, label: str, model: str, flags: list, env: dict) -> tuple:
    """(Server or None, start error or None, seconds to ready)."""
    with setup.lock:
        port = e2e.spaced_port(next(setup.ports) % 24, base=setup.args.port_base, step=1000)
    setup.gate.wait()
    if STOPPING.is_set():
        return None, "stopped (SIGTERM) before this server started", 0.0
    log(f"{label}: starting on port {port}")
    started = time.time()
    launcher = e2e.CPU_LAUNCHER if setup.args.cpu else e2e.DEFAULT_LAUNCHER
    env = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "HF_HUB_OFFLINE": "1", **env}
    server = e2e.Server(model, flags, launcher=launcher, env=env, port=port, ready_timeout=setup.args.ready_timeout,
                        log_path=os.path.join(setup.log_dir, label + ".log"))  # fmt: skip
    try:
        server.start().wait_ready()
    except e2e.ServerError as exc:
        server.stop()
        log(f"{label}: did not start: {sm.last_error_line(str(exc))[:300]}")
        return None, str(exc)[-6000:], round(time.time() - started, 1)
    log(f"{label}: ready in {time.time() - started:.0f}s")
    return server, None, round(time.time() - started, 1)


def server_facts(url: str) -> dict:
    try:
        info = e2e.server_info(url)
    except HTTPRequestError as exc:
        return {"error": str(exc)[:500]}
    keys = ("attention_backend", "kv_cache_dtype", "page_size", "chunked_prefill_size", "disable_radix_cache",
            "swa_full_tokens_ratio", "max_total_num_tokens", "speculative_algorithm", "avg_spec_accept_length",
            "disable_overlap_schedule", "context_length")  # fmt: skip
    flat = dict(info)
    for value in info.values():
        if isinstance(value, dict):
            flat.update({k: v for k, v in value.items() if k not in flat})
        if isinstance(value, list) and value and isinstance(value[0], dict):
            flat.update({k: v for k, v in value[0].items() if k not in flat})
    return {k: flat.get(k) for k in keys}


def read_log(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def no_pdl_tuning(folder: str) -> str:
    """A tuning file (its path) with the kernel's default tilings for the tiny pair's head dims, PDL off."""
    rows = [
        {"head_dim": d, "min_batch": b, "max_batch": b, **dataclasses.asdict(default_tuning(d, b)), "pdl": 0}
        for d in sorted({TINY.head_dim, TINY.draft_head_dim})
        for b in range(1, 65)
    ]
    path = os.path.join(folder, "tuning_no_pdl.json")
    with open(path, "w") as f:
        json.dump(rows, f)
    return path


def run_group(setup: Setup, pair_name: str, options: list, save) -> None:
    """One plain and one DFLASH server with the options' shared flags; the options' cases in turn; rows saved."""
    args, first = setup.args, options[0]
    name = f"{pair_name}-{first.name}"
    # "text", "mm"; "-stock": the plugin off (SGLang's own DFLASH); "-nokernel": the plugin on, its block kernel off;
    # "-nopdl": the block kernel with its default tilings but no programmatic dependent launch; "-ci": SGLang's CI-only
    # checks on (among them the overlap scheduler's: a relay row read twice without a new write fails an assert)
    target, _, variant = pair_name.partition("-")
    model = setup.paths[first.target if target == "text" else first.target.replace("target", "target_mm")]
    flags = base_flags(args.cpu, args.mem_fraction, target == "mm") + list(first.flags)
    dflash_flags = flags + ([] if args.cpu else e2e.dflash_args(setup.paths["draft"], BLOCK))
    env = dict(first.env, **{"stock": {"SGLANG_PLUGINS": "some_other_name"}, "nokernel": {sm.BLOCK_ATTENTION_ENV: "0"},
                             "nopdl": {TUNING_ENV: no_pdl_tuning(setup.log_dir) if variant == "nopdl" else ""},
                             "ci": {"SGLANG_IS_IN_CI": "1"}}.get(variant, {}))  # fmt: skip
    if time.time() > args.deadline_at or STOPPING.is_set():
        for o in options:
            save(o, sm.not_run_row(o, args.sglang, pair_name, "deadline reached before its servers started"))
        return
    with ThreadPoolExecutor(2) as pool:
        fp = pool.submit(start_server, setup, name + "-plain", model, flags, env)
        fd = pool.submit(start_server, setup, name + "-dflash", model, dflash_flags, env)
        (plain, plain_err, plain_s), (dflash, dflash_err, dflash_s) = fp.result(), fd.result()
    try:
        facts = {"plain": server_facts(plain.base_url) if plain else None,
                 "dflash": server_facts(dflash.base_url) if dflash else None,
                 "ready_s": {"plain": plain_s, "dflash": dflash_s}}  # fmt: skip
        decode = tokenizer_decode(model)
        for option in options:
            started = time.time()
            if time.time() > args.deadline_at or STOPPING.is_set():
                save(option, sm.not_run_row(option, args.sglang, pair_name, "deadline reached or stopped"))
                continue
            out = CaseOut()
            if plain and dflash:
                out = run_option(option, Pair(plain.base_url, dflash.base_url, decode))
            path = sm.served_path(read_log(os.path.join(setup.log_dir, name + "-dflash.log")))
            path["server"] = facts["dflash"]
            if dflash:
                path["avg_spec_accept_length"] = server_facts(dflash.base_url).get("avg_spec_accept_length")
            row = sm.make_row(option, sglang=args.sglang, pair=pair_name, comparisons=out.comparisons,
                              accept_lengths=out.accepts, refusals=out.refusals, errors=out.errors,
                              plain_start_error=plain_err, dflash_start_error=dflash_err, path=path,
                              details={**out.details, "servers": facts, "seconds": round(time.time() - started, 1),
                                       "dflash_is_plain_standin": bool(args.cpu), "server_env": env})  # fmt: skip
            save(option, row)
            log(f"{option.name}: {row['verdict']} identical {row['identical']} accept {row['accept_length']}"
                + (f" errors {[e[:160] for e in row['errors']]}" if row["errors"] else ""))  # fmt: skip
    finally:
        for server in (plain, dflash):
            if server:
                server.stop()


def tokenizer_decode(model: str):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    return lambda ids: tok.decode([int(t) for t in ids], skip_special_tokens=True)


def eos_variant(target: str, token: int) -> str:
    """A copy of a tiny target (weights linked) whose EOS list also holds `token`, an ordinary token."""
    out = target.rstrip("/") + f"-eos{token}"
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(target):
        if name not in ("config.json", "generation_config.json") and not os.path.exists(os.path.join(out, name)):
            os.symlink(os.path.join(target, name), os.path.join(out, name))
    for name in ("config.json", "generation_config.json"):
        with open(os.path.join(target, name)) as f:
            config = json.load(f)
        config["eos_token_id"] = [TINY.eos_token_id, token]
        if "text_config" in config:
            config["text_config"]["eos_token_id"] = [TINY.eos_token_id, token]
        with open(os.path.join(out, name), "w") as f:
            json.dump(config, f, indent=1)
    return out


# --------------------------------------------------------------------------------------------------------- soak


def group_pids(pgid: int) -> set:
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid:
                    pids.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return pids


def gpu_memory_mib(pgid: int | None) -> dict:
    """GPU memory (MiB): the card's, and the server's processes' (nvidia-smi's per-process list), where readable."""
    out = {}
    try:
        used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30).stdout.split()  # fmt: skip
        out["card"] = int(used[0]) if used else None
        if pgid:
            apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=30).stdout  # fmt: skip
            pids = group_pids(pgid)
            rows = [line.split(",") for line in apps.splitlines() if "," in line]
            mine = [int(m) for p, m in rows if int(p) in pids]
            out["server"] = sum(mine) if mine else None
    except (OSError, ValueError, subprocess.SubprocessError, IndexError):
        pass
    return out


SOAK_KINDS = (("greedy", 30), ("long_prompt", 8), ("shared_prefix", 15), ("stop_id", 10), ("long_gen", 2),
              ("sampled", 12), ("regex", 5), ("json_schema", 5), ("logprob", 3), ("abort", 10))  # fmt: skip


def soak_request(kind: str, rng: random.Random, prefix: list) -> tuple:
    """(payload, refusal allowed, abort after s) for one soak request of `kind`."""
    short = sm.random_ids(rng, rng.randint(4, 300), LOW, HIGH, KEY)
    if kind == "long_prompt":
        return payload(sm.random_ids(rng, rng.randint(1000, 3000), LOW, HIGH, KEY), 48), False, None
    if kind == "shared_prefix":
        return payload(prefix + short[:40], 96), False, None
    if kind == "stop_id":
        pick = sm.pick_stop_token(planted_continuation(short, 64), BLOCK, rng.randint(1, 40))
        return payload(short, 64, stop_token_ids=[pick[1]] if pick else []), False, None
    if kind == "long_gen":
        return payload(short, rng.randint(1024, 4096)), False, None
    if kind == "sampled":
        return payload(short, 48, temperature=0.8, sampling_seed=rng.randint(0, 99), n=2), False, None
    if kind in ("regex", "json_schema"):
        return payload(short, 64, **{kind: REGEX if kind == "regex" else json.dumps(JSON_SCHEMA)}), True, None
    if kind == "logprob":
        return payload(short, 16, return_logprob=True, top_logprobs_num=3), True, None
    if kind == "abort":
        return payload(short, 400), False, rng.uniform(0.2, 2.0)
    return payload(short, rng.randint(16, 200)), False, None


def warm_up(url: str) -> None:
    """One request of every soak kind, 16 in flight, before the soak's start is measured; not counted."""
    rng = random.Random(1)
    prefix = sm.random_ids(random.Random(99), 1200, LOW, HIGH, KEY)
    bodies = [soak_request(kind, rng, prefix)[0] for kind, _ in SOAK_KINDS for _ in range(2)][:16]
    with ThreadPoolExecutor(len(bodies)) as pool:
        list(pool.map(lambda body: post(url, body, 300), bodies))


def run_soak(setup: Setup, seconds: float, max_requests: int, shared: bool) -> dict:
    """One DFLASH server under the mixed traffic of SOAK_KINDS, 16 in flight: `--soak-warmup` seconds of it (not
    counted; PyTorch's allocator grows to the shapes it meets), then `seconds` of it, bounded by `max_requests`.
    GPU memory at the start (after the warm-up), every 30 s and at the end; /health every 2 s; KV after the drain."""
    args = setup.args
    flags = base_flags(args.cpu, args.mem_fraction, False)
    flags += [] if args.cpu else e2e.dflash_args(setup.paths["draft"], BLOCK)
    # As a user's server: the plugin builds flashinfer's sampling module at start-up (serving_options.sh turns that off
    # for the matrix). Without it the first sampled request stalled this scheduler 88 s on a fresh machine: 4 x 503.
    server, error, ready_s = start_server(setup, "soak-dflash", setup.paths["target"], flags, {PREBUILD_ENV: "1"})
    if server is None:
        return {"error": error}
    lock, stop = threading.Lock(), threading.Event()
    phase = ["warm-up"]  # then "traffic", "drain": where each /health failure fell
    health = {"ok": 0, "failed": 0, "failed_by_phase": {}, "first_failures": []}
    url, memory, kv_start, kv_after, pgid = server.base_url, {"samples": []}, None, None, server.process.pid
    started = time.time()

    def poll_health():
        next_sample = time.time() + 30
        while not stop.is_set():
            ok = http_ok(url + "/health", 30)
            with lock:
                health["ok" if ok else "failed"] += 1
                if not ok:
                    by_phase = health["failed_by_phase"]
                    by_phase[phase[0]] = by_phase.get(phase[0], 0) + 1
                    if len(health["first_failures"]) < 10:
                        health["first_failures"].append(f"{time.strftime('%H:%M:%S')} ({phase[0]})")
            if time.time() >= next_sample:
                memory["samples"].append([round(time.time() - started), gpu_memory_mib(pgid).get("server")])
                next_sample += 30
            stop.wait(2.0)

    def traffic(seconds: float, stats: dict, latencies: list, failures: list) -> float:
        """The mixed traffic for `seconds` (or until `max_requests` are sent); returns how long it ran."""
        deadline = min(time.time() + seconds, args.deadline_at - 60)
        begun = time.time()

        def worker(seed: int):
            rng = random.Random(seed)
            prefix = sm.random_ids(random.Random(99), 1200, LOW, HIGH, KEY)
            kinds, weights = zip(*SOAK_KINDS)
            while time.time() < deadline and not STOPPING.is_set():
                with lock:
                    if stats["sent"] >= max_requests:
                        return
                    stats["sent"] += 1
                    n = stats["sent"]
                kind = rng.choices(kinds, weights)[0]
                body, refusal_ok, abort_after = soak_request(kind, rng, prefix)
                if abort_after is not None:
                    body["rid"] = f"soak-{seed}-{n}-{begun:.0f}"
                    threading.Timer(abort_after, lambda r=body["rid"]: _abort(url, r)).start()
                res = post(url, body, 600)
                res = res[0] if isinstance(res, list) else res
                message = res.get("error") or res.get("abort_message")
                with lock:
                    by = stats["by_kind"].setdefault(kind, {"sent": 0, "answered": 0, "failed": 0})
                    by["sent"] += 1
                    finish = (res.get("finish") or {}).get("type")
                    if abort_after is not None and (finish == "abort" or message):
                        stats["aborted"] += 1
                    elif message and refusal_ok and sm.is_clear_refusal(message) and res["seconds"] < 30:
                        stats["refused"] += 1
                    elif message:
                        stats["failed"] += 1
                        by["failed"] += 1
                        if len(failures) < 20:
                            failures.append(f"{kind}: {message[:400]}")
                    else:
                        stats["answered"] += 1
                        by["answered"] += 1
                        latencies.append(res["seconds"])

        with ThreadPoolExecutor(MAX_RUNNING) as pool:
            list(pool.map(worker, range(MAX_RUNNING)))
        return round(time.time() - begun, 1)

    def new_stats() -> dict:
        return {"sent": 0, "answered": 0, "failed": 0, "refused": 0, "aborted": 0, "by_kind": {}}

    stats, latencies, failures, warm = new_stats(), [], [], new_stats()
    traffic_s = warmup_s = 0.0
    try:
        memory["at_ready"] = gpu_memory_mib(pgid)
        health_thread = threading.Thread(target=poll_health, daemon=True)
        health_thread.start()
        warm_up(url)
        warmup_s = traffic(args.soak_warmup, warm, [], []) if args.soak_warmup > 0 else 0.0
        drained_kv(url, 30)
        memory["start"] = gpu_memory_mib(pgid)
        kv_start = kv_used_tokens(url)
        phase[0] = "traffic"
        traffic_s = traffic(seconds, stats, latencies, failures)
        phase[0] = "drain"
        stop.set()
        health_thread.join(timeout=40)
        kv_after = drained_kv(url, 30)
        memory["end"] = gpu_memory_mib(pgid)
    finally:
        stop.set()
        server.stop()
    key = "server" if memory.get("start", {}).get("server") else "card"
    measured = key + (" (shared with the matrix's servers: not judged)" if key == "card" and shared else "")
    summary = {
        **stats,
        "ready_s": ready_s,
        "seconds": seconds,
        "traffic_s": traffic_s,
        "ended_by": "count" if stats["sent"] >= max_requests else "time",
        "warmup": {"seconds": warmup_s, "sent": warm["sent"], "failed": warm["failed"]},
        "failures": failures,
        "latency_s": {"p50": sm.percentile(latencies, 50), "p99": sm.percentile(latencies, 99)},
        "gpu_memory_mib": {
            "start": memory.get("start", {}).get(key),
            "end": memory.get("end", {}).get(key),
            "measured": measured,
            "raw": memory,
        },
        "kv_used_tokens_at_start": kv_start,
        "kv_used_tokens_after_drain": kv_after,
        "health": health,
    }
    summary["goals"] = sm.soak_goals(summary)
    return summary


def _abort(url: str, rid: str) -> None:
    try:
        http_json(url + "/abort_request", {"rid": rid}, timeout=30)
    except (HTTPRequestError, ValueError):
        pass


# --------------------------------------------------------------------------------------------------------- main


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--line", default="", help="the SGLang line, for the rows (default: the imported version)")
    parser.add_argument("--options", default="all", help=f"comma list of {', '.join(sm.OPTIONS)}, or all")
    parser.add_argument(
        "--pairs",
        default="text",
        help="text (the tiny text target), mm (its multimodal twin); text-stock / mm-stock: the plugin off (SGLANG_PLUGINS "
        "names another plugin), to show where stock SGLang does the same; text-nokernel / mm-nokernel: the plugin with its "
        "block kernel off; text-nopdl / mm-nopdl: its kernel without programmatic dependent launch; text-ci / mm-ci: "
        "SGLANG_IS_IN_CI=1 (SGLang's CI-only asserts, the overlap relay's among them)",
    )
    parser.add_argument("--group-size", type=int, default=4, help="server pairs side by side")
    parser.add_argument("--stagger", type=float, default=20.0, help="seconds between server starts")
    parser.add_argument(
        "--mem-fraction",
        type=float,
        default=0.6,
        help="--mem-fraction-static: SGLang keeps (1 - f) of the memory free at the server's start for others; "
        "--max-total-tokens 32768 caps each KV pool",
    )
    parser.add_argument("--ready-timeout", type=float, default=300.0)
    parser.add_argument(
        "--port-base",
        type=int,
        default=20000,
        help="the first server's port (the next ones 1000 apart): a second run on the same machine needs its own",
    )
    parser.add_argument("--deadline", type=float, default=560.0, help="no new server or option after this (s)")
    parser.add_argument("--soak", type=float, default=0.0, help="seconds of mixed traffic on one more DFLASH server")
    parser.add_argument("--soak-max-requests", type=int, default=60000)
    parser.add_argument(
        "--soak-warmup", type=float, default=60.0, help="seconds of the soak's traffic before its start is measured"
    )
    parser.add_argument(
        "--soak-shared",
        action="store_true",
        help="other servers share the GPU (a detached soak beside later calls): a whole-card memory reading is not judged",
    )
    parser.add_argument("--cpu", action="store_true", help="dry run on SGLang's CPU engine (both servers plain)")
    parser.add_argument("--cap-new-tokens", type=int, default=None, help="at most this many new tokens a request")
    parser.add_argument("--tiny-dir", default=os.path.join(tempfile.gettempdir(), "tiny-gemma4-dflash-serving"))
    args = parser.parse_args(argv)
    e2e.stop_servers_on_sigterm()  # `timeout` must not leave servers holding the GPU
    stop_servers = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda signum, frame: (STOPPING.set(), stop_servers(signum, frame)))
    CAP["new_tokens"] = args.cap_new_tokens
    options = sm.select_options(args.options) if args.options != "none" else []
    bad = [p for p in args.pairs.split(",") if p not in PAIRS]
    if bad:
        raise SystemExit(f"--pairs: unknown {', '.join(bad)}; known: {', '.join(PAIRS)}")
    import sglang

    args.sglang = args.line or sglang.__version__
    args.deadline_at = time.time() + args.deadline
    from sglang_gemma4_dflash.bench import report as report_
    from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints

    paths = {k: str(v) for k, v in write_tiny_checkpoints(args.tiny_dir).items()}
    paths["target_eos"] = eos_variant(paths["target"], eos_token())
    TARGET["path"] = paths["target"]
    paths["target_mm_eos"] = eos_variant(paths["target_mm"], eos_token())
    log_dir = os.path.abspath(args.out) + ".logs"
    shutil.rmtree(log_dir, ignore_errors=True)  # logs are appended to: a run's folder holds its own only
    os.makedirs(log_dir)
    report = {"sglang": args.sglang, "sglang_imported": sglang.__version__, "versions": report_.versions(),
              "hardware": report_.hardware(), "cpu_dry_run": args.cpu, "options": [o.name for o in options],
              "pairs": args.pairs.split(","), "rows": [], "soak": None,
              "argv": sys.argv[1:] if argv is None else list(argv)}  # fmt: skip
    lock = threading.Lock()

    def write() -> None:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)

    def save(option, row) -> None:
        if STOPPING.is_set() and row["verdict"] != sm.NOT_RUN:  # its servers were stopped under it
            row = sm.not_run_row(option, args.sglang, row["pair"], "stopped (SIGTERM) while it ran")
        with lock:
            report["rows"] = [r for r in report["rows"] if (r["option"], r["pair"]) != (option.name, row["pair"])]
            report["rows"].append(row)
            write()

    write()
    setup = Setup(args, paths, log_dir, StartGate(args.stagger), iter(range(10_000)))
    # option-major: an option's pairs (plugin, stock, kernel off, ...) run side by side, the first option first
    jobs = [(pair, group) for group in sm.server_groups(options) for pair in args.pairs.split(",")]
    for pair, group in jobs:
        for o in group:
            save(o, sm.not_run_row(o, args.sglang, pair, "not reached"))
    try:
        with ThreadPoolExecutor(max(1, args.group_size) + 1) as pool:
            soak = (
                pool.submit(run_soak, setup, args.soak, args.soak_max_requests, bool(jobs) or args.soak_shared)
                if args.soak > 0
                else None
            )
            with ThreadPoolExecutor(max(1, args.group_size)) as groups:
                list(groups.map(lambda job: run_group(setup, job[0], job[1], save), jobs))
            if soak is not None:
                report["soak"] = soak.result()
                keys = ("sent", "answered", "failed", "refused", "aborted", "latency_s", "kv_used_tokens_after_drain")
                log(f"soak: {json.dumps({k: report['soak'].get(k) for k in keys + ('goals',)})}")
    finally:
        with lock:
            write()
        with tarfile.open(os.path.abspath(args.out) + ".logs.tgz", "w:gz") as tar:
            tar.add(log_dir, arcname=os.path.basename(log_dir))
        shutil.rmtree(log_dir, ignore_errors=True)
    verdicts = [f"{r['option']}={r['verdict']}" for r in report["rows"]]
    log(f"verdicts: {' '.join(verdicts)}")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
