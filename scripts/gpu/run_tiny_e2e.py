"""Plain vs DFLASH on the tiny Gemma 4 checkpoints on one GPU, with and without the plugin; one JSON.

    source scripts/gpu/setup_site.sh 0.5.16   # the line's site + plugin wheel on the path
    python3 scripts/gpu/run_tiny_e2e.py --out $OUT/tiny_e2e.json [--jobs text,mm,nooverlap,stall] [--parallel]

Each job is one server. Job groups (--jobs):
  text       text target (Gemma4ForCausalLM): plain, DFLASH with the plugin, DFLASH with the plugin off
             (SGLANG_PLUGINS names another plugin, so SGLang's load_plugins() skips ours)
  mm         the same on the multimodal target (Gemma4ForConditionalGeneration), each with one image chat request
  nooverlap  DFLASH with and without the plugin on both targets, with --disable-overlap-schedule
  nokernel   DFLASH with the plugin on both targets, its block attention kernel off
             (SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION=0; the other DFLASH jobs with the plugin run it)
  dflash2    (SGLang 0.5.19+) the tiny draft as a DFlash2 draft (testkit tiny_dflash2: a candidate selector added)
             on the text target, with the plugin and without it (upstream's candidate step raises on Gemma 4's head)
  stall      DFLASH with the plugin and SGLang's default sampling backend: one greedy request, then three sampled
             (temperature > 0) requests, each timed, and the JIT cache folders listed before and after; the text
             DFLASH job (--sampling-backend pytorch) times two sampled requests after its greedy suite
Every DFLASH job runs 18 greedy prompts by token ids (some longer than the sliding window, the last 8 in flight
together) and is judged token by token against the plain job of its target; accept lengths come from server_info.

--parallel starts the first two jobs (they pay the JIT compiles), and all other jobs at once when those two servers
are up: a tiny model uses little of the GPU, and each server caps its KV pool with --max-total-tokens, so the servers
fit side by side (JIT builds of flashinfer and tvm-ffi take file locks).
The JSON is rewritten after every job, so a timeout keeps what finished. --cpu is a dry run of this script on a
machine without a GPU (SGLang's CPU engine; SGLang refuses DFLASH there, so those jobs record the start-up error).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from sglang_gemma4_dflash.attention.backend_hooks import ENV as BLOCK_ATTENTION_ENV
from sglang_gemma4_dflash.bench import report as report_
from sglang_gemma4_dflash_testkit import e2e
from sglang_gemma4_dflash_testkit.tiny import TINY, planted_continuation, write_tiny_checkpoints
from sglang_gemma4_dflash_testkit.tiny_dflash2 import write_dflash2_draft

NUM_PROMPTS = 18
CONCURRENT = 8
MAX_NEW_TOKENS = 40
FIRST_WAVE = 2
# SGLang sizes its KV pool as (free memory) - (1 - fraction) * (card memory), so servers side by side need a
# fraction above the share the others hold; --max-total-tokens keeps each pool small.
MEM_FRACTION = 0.6
LAUNCHER = e2e.DEFAULT_LAUNCHER
CACHE_DIRS = ("~/.cache/flashinfer", "~/.cache/tvm-ffi", "~/.cache/sglang", "~/.triton/cache", "/tmp/flashinfer")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def versions() -> dict:
    import importlib.metadata as md

    out = report_.versions()
    out["sglang.srt.plugins entry points"] = [
        f"{ep.name} = {ep.value}" for ep in md.entry_points(group="sglang.srt.plugins")
    ]
    return out


def common_args(mm: bool, sampling_backend: str | None, piecewise: bool) -> list[str]:
    if LAUNCHER == e2e.CPU_LAUNCHER:
        return e2e.cpu_server_args(CONCURRENT)
    args = e2e.gpu_server_args(
        CONCURRENT, mem_fraction=MEM_FRACTION, sampling_backend=sampling_backend, piecewise=piecewise
    )
    args += ["--max-total-tokens", "8192"]
    if mm:  # the slim sites strip FA3 (sgl_kernel/flash_ops), which the vision tower picks when none is named
        args += ["--mm-attention-backend", "triton_attn"]
    return args


def prompts() -> list[list[int]]:
    w = TINY.sliding_window
    base = [3, 7, 16, 31, w - 5, w + 1, w + 37, 2 * w + 11]
    lengths = [base[i % len(base)] + i for i in range(NUM_PROMPTS)]
    return e2e.token_prompts(TINY.vocab_size, lengths, seed=11, low=TINY.num_special_tokens)


def jobs_for(groups: list[str]) -> list[dict]:
    """The servers to run; the first two (text DFLASH with the plugin, then the stall job) start first."""
    jobs = []

    def add(
        label,
        target,
        dflash,
        plugin=True,
        overlap=True,
        sampling="pytorch",
        stall=False,
        probe=False,
        env=None,
        draft="draft",
    ):
        env = dict(env or {}, **({} if plugin else {"SGLANG_PLUGINS": "some_other_name"}))
        jobs.append(
            {
                "label": label,
                "target": target,
                "dflash": dflash,
                "draft": draft,
                "plugin": plugin,
                "overlap": overlap,
                "sampling": sampling,
                "stall": stall,
                "probe_sampled": probe,
                "env": env,
            }
        )

    if "text" in groups:
        add("text-dflash-plugin", "target", True, probe="stall" in groups)
    if "stall" in groups:
        add("text-dflash-plugin-sampled", "target", True, sampling=None, stall=True)
    if "text" in groups:
        add("text-plain", "target", False)
        add("text-dflash-noplugin", "target", True, plugin=False)
    if "mm" in groups:
        add("mm-plain", "target_mm", False)
        add("mm-dflash-plugin", "target_mm", True)
        add("mm-dflash-noplugin", "target_mm", True, plugin=False)
    if "nokernel" in groups:
        for target, name in (("target", "text"), ("target_mm", "mm")):
            add(f"{name}-dflash-plugin-nokernel", target, True, env={BLOCK_ATTENTION_ENV: "0"})
    if "nooverlap" in groups:
        for target, name in (("target", "text"), ("target_mm", "mm")):
            add(f"{name}-dflash-plugin-nooverlap", target, True, overlap=False)
            add(f"{name}-dflash-noplugin-nooverlap", target, True, plugin=False, overlap=False)
    if "dflash2" in groups:
        add("text-dflash2-plugin", "target", True, draft="draft_dflash2")
        add("text-dflash2-noplugin", "target", True, plugin=False, draft="draft_dflash2")
    return jobs


def cache_listing() -> dict:
    out = {}
    for d in CACHE_DIRS:
        path = os.path.expanduser(d)
        files = []
        for root, _, names in os.walk(path):
            files += [os.path.relpath(os.path.join(root, n), path) for n in names if n.endswith((".so", ".cubin"))]
        out[d] = sorted(files)
    return out


def sampled(base_url: str, prompt: list[int]) -> dict:
    payload = {
        "input_ids": prompt,
        "sampling_params": {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 24, "ignore_eos": True},
    }
    started = time.time()
    out = e2e.http_json(base_url + "/generate", payload, timeout=400)
    return {
        "seconds": round(time.time() - started, 2),
        "num_tokens": len(out.get("output_ids") or []),
        "spec_accept_length": (out.get("meta_info") or {}).get("spec_accept_length"),
    }


def info_summary(base_url: str) -> dict:
    """The speculative fields of /server_info, plus the overlap flag SGLang resolved."""
    info = e2e.server_info(base_url)
    summary = e2e.spec_summary(info).as_dict()
    for key in ("disable_overlap_schedule", "sampling_backend", "mm_attention_backend"):
        summary[key] = info.get(key, next((v[key] for v in info.values() if isinstance(v, dict) and key in v), None))
    return summary


def log_facts(path: str) -> dict:
    """Lines of a server log that say which worker and hooks ran."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    pick = re.compile(r"sglang-gemma4-dflash|DFlashWorker|dflash_worker|overlap|Traceback|Error:")
    lines = [line.strip()[:600] for line in text.splitlines() if pick.search(line)]
    return {
        "lines": lines[:40],
        "plugin_loaded": "sglang-gemma4-dflash" in text,
        "block_kernel_on": sorted(
            {r for r in ("target", "draft") if f"block attention kernel on for the Gemma 4 DFLASH {r}" in text}
        ),
        "block_kernel_declines": [line for line in lines if "runs SGLang's extend kernel" in line],
    }


def run_job(job: dict, paths: dict, port: int, log_dir: str, piecewise: bool, ready: threading.Event) -> dict:
    mm = job["target"] == "target_mm"
    args = common_args(mm, job["sampling"], piecewise)
    if job["dflash"]:
        args += e2e.dflash_args(paths[job["draft"]], TINY.block_size)
    if not job["overlap"]:
        args.append("--disable-overlap-schedule")
    env = job["env"] or None
    log_path = os.path.join(log_dir, job["label"] + ".log")
    result = {"args": args, "env": env or {}}
    started = time.time()
    server = e2e.Server(
        paths[job["target"]], args, launcher=LAUNCHER, env=env, port=port, ready_timeout=420, log_path=log_path
    )
    try:
        try:
            server.start().wait_ready()
        finally:
            ready.set()
        result["ready_s"] = round(time.time() - started, 1)
        log(f"{job['label']}: ready in {result['ready_s']:.0f}s")
        if job["stall"]:
            before = cache_listing()
            e2e.generate(server.base_url, prompts()[0], 8)
            result["sampled"] = [sampled(server.base_url, prompts()[i]) for i in (1, 2, 3)]
            after = cache_listing()
            result["jit_cache_new_files"] = {d: sorted(set(after[d]) - set(before[d])) for d in after}
        else:
            outs = e2e.greedy_suite(server.base_url, prompts(), MAX_NEW_TOKENS, CONCURRENT, ignore_eos=True)
            result["outputs"] = [g.output_ids for g in outs]
            result["per_request_accept"] = [g.meta_info.get("spec_accept_length") for g in outs]
            result["server_info"] = info_summary(server.base_url)
            if job["probe_sampled"]:  # the same sampled requests under --sampling-backend pytorch
                result["sampled"] = [sampled(server.base_url, prompts()[i]) for i in (1, 2)]
        if mm:
            try:
                msg = e2e.image_message("What is this?", e2e.square_png())
                answer = e2e.chat(server.base_url, "tiny", [msg], max_tokens=16)
                result["image_chat"] = {
                    "ok": True,
                    "finish_reason": answer["choices"][0].get("finish_reason"),
                    "content": answer["choices"][0]["message"].get("content"),
                    "usage": answer.get("usage"),
                }
            except Exception as exc:
                result["image_chat"] = {"ok": False, "error": str(exc)[:2000]}
        if "server_info" not in result:
            result["server_info"] = info_summary(server.base_url)
    except Exception as exc:
        result["error"] = (str(exc) if isinstance(exc, e2e.ServerError) else traceback.format_exc())[-6000:]
    finally:
        server.stop()
    result["seconds"] = round(time.time() - started, 1)
    result["log"] = log_facts(log_path)
    log(f"{job['label']}: done in {result['seconds']:.0f}s" + (" (error)" if "error" in result else ""))
    return result


def verdicts(servers: dict) -> dict:
    expected = [planted_continuation(p, MAX_NEW_TOKENS) for p in prompts()]
    out = {}
    for label, res in servers.items():
        plain_label = label.split("-")[0] + "-plain"
        plain = servers.get(plain_label, {})
        if label == plain_label and "outputs" in res:
            out[label] = {"follows_plant": all(o == x for o, x in zip(res["outputs"], expected))}
        elif "outputs" in res and "outputs" in plain:
            v = e2e.compare_outputs(plain["outputs"], res["outputs"])
            out[label] = {
                "vs": plain_label,
                "all_identical": all(x.identical for x in v),
                "mismatches": [x.as_dict() for x in v if not x.identical],
                "avg_spec_accept_length": res["server_info"]["avg_spec_accept_length"],
                "block_kernel_on": res.get("log", {}).get("block_kernel_on"),
                "block_kernel_declines": res.get("log", {}).get("block_kernel_declines"),
            }
        elif "outputs" in res:
            out[label] = {"vs": plain_label, "all_identical": None, "note": "no plain outputs to compare"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--jobs", default="text,mm,nooverlap,stall")
    parser.add_argument("--parallel", action="store_true", help="two jobs first, then all others at once")
    parser.add_argument("--piecewise", action="store_true", help="leave piecewise CUDA graphs on (slower start)")
    parser.add_argument("--cpu", action="store_true", help="dry run on CPU (SGLang refuses DFLASH there)")
    parser.add_argument("--port-base", type=int, default=21000, help="server i listens on port-base + 1500 i")
    parser.add_argument("--tiny-dir", default=os.path.join(tempfile.gettempdir(), "tiny-gemma4-dflash"))
    args = parser.parse_args()
    e2e.stop_servers_on_sigterm()  # `timeout` must not leave a server holding the GPU
    global LAUNCHER
    LAUNCHER = e2e.CPU_LAUNCHER if args.cpu else e2e.DEFAULT_LAUNCHER
    log_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "server_logs")
    os.makedirs(log_dir, exist_ok=True)
    jobs = jobs_for([g for g in args.jobs.split(",") if g])

    report = {
        "versions": versions(),
        "hardware": report_.hardware(),
        "jobs": [j["label"] for j in jobs],
        "parallel": args.parallel,
        "piecewise_cuda_graph": args.piecewise,
        "max_new_tokens": MAX_NEW_TOKENS,
        "concurrent": CONCURRENT,
        "prompt_lengths": [len(p) for p in prompts()],
        "tiny": {"vocab_size": TINY.vocab_size, "sliding_window": TINY.sliding_window, "block_size": TINY.block_size},
        "servers": {},
    }
    lock = threading.Lock()

    def save() -> None:
        with lock:
            report["verdicts"] = verdicts(report["servers"])
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)

    log(f"versions {report['versions']}")
    log(f"hardware {report['hardware']['gpus']}")
    paths = {k: str(v) for k, v in write_tiny_checkpoints(args.tiny_dir).items()}
    if any(j["draft"] == "draft_dflash2" for j in jobs):
        paths["draft_dflash2"] = str(write_dflash2_draft(args.tiny_dir.rstrip("/") + "-dflash2"))
    report["checkpoints"] = paths
    save()

    ready = [threading.Event() for _ in jobs]

    def one(i: int) -> None:
        if args.parallel and i >= FIRST_WAVE:  # the rest start once the first servers are up (JIT done)
            for event in ready[:FIRST_WAVE]:
                event.wait()
        res = run_job(jobs[i], paths, e2e.spaced_port(i, base=args.port_base), log_dir, args.piecewise, ready[i])
        with lock:
            report["servers"][jobs[i]["label"]] = res
        save()

    if args.parallel:
        with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            list(pool.map(one, range(len(jobs))))
    else:
        for i in range(len(jobs)):
            one(i)
    save()
    for label, v in report["verdicts"].items():
        log(f"{label}: {json.dumps(v)[:300]}")
    for label, res in report["servers"].items():
        if "sampled" in res:
            log(f"{label}: sampled request seconds {[s['seconds'] for s in res['sampled']]}")
        if "error" in res:
            log(f"{label}: ERROR {res['error'][-400:]}")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
