"""Plain vs DFLASH on the tiny Gemma 4 checkpoints, on one GPU, with the plugin; one JSON with everything seen.

    source scripts/gpu/setup_site.sh          # SGLang 0.5.13 site + plugin wheel on the path
    python3 scripts/gpu/run_tiny_e2e.py --out $OUT/tiny_e2e.json [--phases text,mm,noplugin]

Phases (each writes its part of the JSON as soon as it is done, so a timeout keeps what finished):
  text      plain and DFLASH servers on the tiny text target (Gemma4ForCausalLM): 18 greedy prompts by token ids,
            some longer than the sliding window, the last 8 in flight together; per-prompt token verdicts,
            agreement with the planted successor map, /get_server_info fields, accept length.
  mm        the same on the multimodal target (Gemma4ForConditionalGeneration), plus one image chat request under
            DFLASH (recorded, not judged).
  noplugin  DFLASH on the text target with SGLANG_PLUGINS naming another plugin (ours filtered out): records how it
            fails (server log tail, or the request error, or - if it serves - the verdicts).
Servers: triton attention for target and draft, --sampling-backend pytorch, piecewise CUDA graphs off unless
--piecewise (decode CUDA graphs stay on). Progress goes to stdout.

--cpu runs the same flow on a machine without a GPU (SGLang's CPU engine through sglang_gemma4_dflash_testkit.cpu_server):
a dry run of this script only - SGLang refuses DFLASH on CPU, so the DFLASH servers record their startup error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import tempfile
import time
import traceback

from sglang_gemma4_dflash_testkit import e2e
from sglang_gemma4_dflash_testkit.tiny import TINY, planted_continuation, write_tiny_checkpoints

NUM_PROMPTS = 18
CONCURRENT = 8
MAX_NEW_TOKENS = 40


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("torch", "triton", "sglang", "sglang-kernel", "flashinfer-python", "transformers", "tokenizers",
                 "sglang-gemma4-dflash"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    plugins = [f"{ep.name} = {ep.value}" for ep in md.entry_points(group="sglang.srt.plugins")]
    out["sglang.srt.plugins entry points"] = plugins
    return out


def hardware() -> dict:
    query = "name,memory.total,driver_version,compute_cap"
    try:
        gpus = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired) as e:
        gpus = [f"nvidia-smi failed: {e}"]
    return {"gpus": gpus, "cpu_count": os.cpu_count(), "platform": platform.platform()}


LAUNCHER = e2e.DEFAULT_LAUNCHER
CPU_ARGS = ["--attention-backend", "intel_amx", "--sampling-backend", "pytorch", "--dtype", "bfloat16",
            "--max-running-requests", str(CONCURRENT), "--max-total-tokens", "4096", "--disable-cuda-graph"]


def common_args(piecewise: bool) -> list[str]:
    if LAUNCHER == e2e.CPU_LAUNCHER:
        return list(CPU_ARGS)
    args = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--dtype", "bfloat16",
            "--mem-fraction-static", "0.3", "--max-running-requests", str(CONCURRENT),
            "--cuda-graph-max-bs", str(CONCURRENT)]
    return args if piecewise else args + ["--disable-piecewise-cuda-graph"]


def dflash_args(draft: str) -> list[str]:
    return ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
            "--speculative-num-draft-tokens", str(TINY.block_size),
            "--speculative-draft-attention-backend", "triton"]


def prompts() -> list[list[int]]:
    w = TINY.sliding_window
    base = [3, 7, 16, 31, w - 5, w + 1, w + 37, 2 * w + 11]
    lengths = [base[i % len(base)] + i for i in range(NUM_PROMPTS)]
    return e2e.token_prompts(TINY.vocab_size, lengths, seed=11, low=TINY.num_special_tokens)


def serve_suite(target: str, args: list[str], env: dict | None, label: str, log_dir: str,
                image: bool = False) -> dict:
    """Start one server, run the greedy suite (and optionally an image chat), read server info, stop it."""
    started = time.time()
    server = e2e.Server(target, args, launcher=LAUNCHER, env=env, ready_timeout=420,
                        log_path=os.path.join(log_dir, f"{label}.log"))
    with server:
        ready_s = time.time() - started
        log(f"{label}: ready in {ready_s:.0f}s")
        outs = e2e.greedy_suite(server.base_url, prompts(), MAX_NEW_TOKENS, CONCURRENT, ignore_eos=True)
        result = {"ready_s": round(ready_s, 1), "outputs": [g.output_ids for g in outs],
                  "per_request_accept": [g.meta_info.get("spec_accept_length") for g in outs]}
        if image:
            try:
                answer = e2e.chat(server.base_url, "tiny", [e2e.image_message("What is this?", e2e.square_png())],
                                  max_tokens=16)
                result["image_chat"] = {"ok": True, "finish_reason": answer["choices"][0].get("finish_reason"),
                                        "content": answer["choices"][0]["message"].get("content")}
            except Exception as exc:  # recorded, not judged: the tiny processor may not cover every image path
                result["image_chat"] = {"ok": False, "error": str(exc)[:2000]}
        info = e2e.server_info(server.base_url)
        result["server_info"] = e2e.spec_summary(info).as_dict()
    log(f"{label}: done in {time.time() - started:.0f}s")
    return result


def pair(target: str, draft: str, piecewise: bool, log_dir: str, image: bool) -> dict:
    expected = [planted_continuation(p, MAX_NEW_TOKENS) for p in prompts()]
    name = os.path.basename(target)
    plain = serve_suite(target, common_args(piecewise), None, name + "-plain", log_dir)
    result = {"prompt_lengths": [len(p) for p in prompts()],
              "plain_follows_plant": [o == x for o, x in zip(plain["outputs"], expected)], "plain": plain}
    try:
        spec = serve_suite(target, common_args(piecewise) + dflash_args(draft), None, name + "-dflash", log_dir,
                           image=image)
    except (e2e.ServerError, e2e.HTTPRequestError) as exc:
        result["dflash"] = {"error": str(exc)[-8000:]}
        return result
    verdicts = e2e.compare_outputs(plain["outputs"], spec["outputs"])
    result.update({
        "verdicts": [v.as_dict() for v in verdicts],
        "all_identical": all(v.identical for v in verdicts),
        "dflash": spec,
        "avg_spec_accept_length": spec["server_info"]["avg_spec_accept_length"],
    })
    return result


def without_plugin(target: str, draft: str, piecewise: bool, log_dir: str) -> dict:
    env = {"SGLANG_PLUGINS": "some_other_name"}
    server = e2e.Server(target, common_args(piecewise) + dflash_args(draft), launcher=LAUNCHER, env=env,
                        ready_timeout=300,
                        log_path=os.path.join(log_dir, "noplugin.log"))
    try:
        with server:
            try:
                outs = e2e.greedy_suite(server.base_url, prompts()[:4], MAX_NEW_TOKENS, 0, ignore_eos=True)
            except e2e.HTTPRequestError as exc:
                return {"stage": "request", "error": str(exc)[:4000], "log_tail": server.log_tail(8000)}
            expected = [planted_continuation(p, MAX_NEW_TOKENS) for p in prompts()[:4]]
            return {"stage": "served", "matches_plant": [g.output_ids == x for g, x in zip(outs, expected)],
                    "log_tail": server.log_tail(4000)}
    except e2e.ServerError as exc:
        text = str(exc)
        raised = [line.strip() for line in text.splitlines() if re.match(r"^\s*\w+(Error|Exception): ", line)]
        return {"stage": "startup", "exception": raised[-1] if raised else None, "error": text[-8000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--phases", default="text,mm,noplugin")
    parser.add_argument("--piecewise", action="store_true", help="leave piecewise CUDA graphs on (slower start)")
    parser.add_argument("--cpu", action="store_true", help="dry run on CPU (no DFLASH possible there)")
    parser.add_argument("--tiny-dir", default=os.path.join(tempfile.gettempdir(), "tiny-gemma4-dflash"))
    args = parser.parse_args()
    global LAUNCHER
    LAUNCHER = e2e.CPU_LAUNCHER if args.cpu else e2e.DEFAULT_LAUNCHER
    phases = [p for p in args.phases.split(",") if p]
    log_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "server_logs")
    os.makedirs(log_dir, exist_ok=True)

    report = {"versions": versions(), "hardware": hardware(), "phases": phases, "launcher": LAUNCHER,
              "piecewise_cuda_graph": args.piecewise,
              "max_new_tokens": MAX_NEW_TOKENS, "concurrent": CONCURRENT, "tiny": {
                  "vocab_size": TINY.vocab_size, "sliding_window": TINY.sliding_window,
                  "block_size": TINY.block_size}}

    def save() -> None:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)

    log(f"versions {report['versions']}")
    log(f"hardware {report['hardware']['gpus']}")
    paths = {k: str(v) for k, v in write_tiny_checkpoints(args.tiny_dir).items()}
    report["checkpoints"] = paths
    save()
    runs = {"text": lambda: pair(paths["target"], paths["draft"], args.piecewise, log_dir, image=False),
            "mm": lambda: pair(paths["target_mm"], paths["draft"], args.piecewise, log_dir, image=True),
            "noplugin": lambda: without_plugin(paths["target"], paths["draft"], args.piecewise, log_dir)}
    for phase in phases:
        log(f"phase {phase}")
        started = time.time()
        try:
            report[phase] = runs[phase]()
        except Exception:
            report[phase] = {"error": traceback.format_exc()[-8000:]}
        report[phase]["seconds"] = round(time.time() - started, 1)
        save()
        summary = {k: report[phase].get(k) for k in ("all_identical", "avg_spec_accept_length", "stage", "error")}
        summary["plain_follows_plant"] = all(report[phase].get("plain_follows_plant") or [False])
        summary["dflash_error"] = (report[phase].get("dflash") or {}).get("error", "")[-300:] or None
        log(f"phase {phase}: {json.dumps(summary)[:600]}")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
