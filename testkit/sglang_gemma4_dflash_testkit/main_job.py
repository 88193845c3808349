"""The main job: everything the plugin does, shown on the tiny offline checkpoints.

    python -m sglang_gemma4_dflash_testkit [--workdir .tiny] [--out main_job.json] [--skip-server]

The summary (WORKDIR/main_job.json) holds each step's figures, an overall ``ok``, the total seconds and
``not_run``: what this machine could not run, with the reason.

Without a GPU:
  1. what the plugin installs into the installed SGLang (the doctor report),
  2. the tiny offline checkpoints (Gemma 4 target, multimodal target, DFlash draft),
  3. the capture check: SGLang's Gemma4ForCausalLM on CPU, capture set from the draft's
     target_layer_ids, aux hidden states and logits against transformers,
  4. the draft-head check: the plugin's greedy head against a full-vocabulary argmax, on the tiny
     target's tied head, at TP=1 and split over 2 real processes,
  5. the block-attention kernel at the tiny pair's shapes against an fp32 reference and SGLang's extend kernel
     (under Triton's interpreter),
  6. the tiny Gemma 4 served by SGLang on CPU, greedy outputs against transformers' greedy.
With a GPU, step 6 serves the tiny target plainly and with DFLASH and compares the tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

PROMPTS = [
    "The quick brown fox",
    "Speculative decoding drafts a block of tokens and",
    "0 1 2 3 4 5 6 7 8 9",
    "Gemma 4 on SGLang",
]


def stage(name: str):
    def wrap(fn):
        def run(*args, **kwargs):
            print(f"\n== {name}", flush=True)
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            result["seconds"] = round(time.perf_counter() - start, 2)
            verdict = "ok" if result.get("ok", True) else "FAILED"
            print(f"-- {name}: {verdict} ({result['seconds']} s)", flush=True)
            return result

        run.__name__ = fn.__name__
        return run

    return wrap


@stage("plugin: what it installs into this SGLang")
def show_plugin() -> dict:
    from sglang_gemma4_dflash import doctor

    info = doctor.report()
    print(doctor.format_report(info))
    return {"ok": info["entry_point_visible"], "report": info}


@stage("tiny offline checkpoints")
def make_checkpoints(workdir: Path) -> dict:
    from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints

    paths = write_tiny_checkpoints(workdir)
    for name, path in paths.items():
        size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
        print(f"{name:10s} {path}  ({size / 1e6:.1f} MB)")
    return {"ok": True, "paths": {k: str(v) for k, v in paths.items()}}


@stage("capture: SGLang Gemma 4 on CPU vs transformers hidden_states[L + 1]")
def check_capture(paths: dict) -> dict:
    from sglang_gemma4_dflash_testkit import checks

    result = checks.capture_check(paths["target"], paths["draft"])
    for layer_id, diff in result["aux_max_abs_diff"].items():
        print(f"layer {layer_id}: max |sglang aux - transformers hidden_states[{int(layer_id) + 1}]| = {diff:.2e}")
    print(f"logits max abs diff {result['logits_max_abs_diff']:.2e} (tolerance {result['tolerance']:.0e})")
    return result


@stage("draft head: plugin head vs full-vocabulary argmax on the tiny tied head")
def check_head(paths: dict) -> dict:
    from sglang_gemma4_dflash_testkit import checks

    result = checks.head_check(paths["target"])
    for row in result["cases"]:
        print(f"{row['case']:34s} N={row['tokens']:5d}  mismatches={row['mismatches']}")
    return result


@stage("block attention: the plugin's kernel vs an fp32 reference and SGLang's extend kernel")
def check_block_attention() -> dict:
    from sglang_gemma4_dflash_testkit import checks

    result = checks.block_attention_check()
    for row in result["cases"]:
        print(f"{row['case']:22s} relative error: plugin {row['plugin_error']:.1e}, "
              f"SGLang extend {row['sglang_extend_error']:.1e} (tolerance {result['tolerance']:.0e})")  # fmt: skip
    return result


@stage("serve: tiny Gemma 4 through SGLang, greedy, against transformers")
def serve(paths: dict, use_gpu: bool) -> dict:
    from sglang_gemma4_dflash_testkit import checks

    if use_gpu:
        result = checks.serve_dflash_vs_plain(paths["target"], paths["draft"], PROMPTS)
    else:
        result = checks.serve_cpu_vs_transformers(paths["target"], PROMPTS)
    for row in result["prompts"]:
        print(f"{'same' if row['identical'] else 'DIFFERENT':9s} {row['prompt'][:40]!r} -> {row['tokens']} tokens")
    if "accept_length" in result:
        print(f"DFLASH accept length {result['accept_length']} (floor {result['accept_floor']})")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_gemma4_dflash_testkit", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(".tiny"), help="where the tiny checkpoints go")
    parser.add_argument("--out", type=Path, default=None, help="JSON summary (default: WORKDIR/main_job.json)")
    parser.add_argument("--skip-server", action="store_true", help="skip step 6 (starting an SGLang server)")
    args = parser.parse_args(argv)
    start = time.perf_counter()

    use_gpu = _has_gpu()
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "0" if use_gpu else "1")
    if not use_gpu:  # read when Triton decorates its kernels: before anything imports Triton
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if not use_gpu:
        from sglang_gemma4_dflash_testkit import cpu_standins

        cpu_standins.install()
        _quiet_cpu_import_warnings()
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Loading weights" bars: the tiny checkpoints load in milliseconds

    steps = {"plugin": show_plugin(), "checkpoints": make_checkpoints(args.workdir)}
    paths = steps["checkpoints"]["paths"]
    steps["capture"] = check_capture(paths)
    steps["head"] = check_head(paths)
    steps["block_attention"] = check_block_attention()
    not_run = {}
    if not use_gpu:
        not_run["serve with DFLASH"] = (
            "needs a CUDA GPU: SGLang refuses --speculative-algorithm DFLASH on CPU; step 6 served the tiny target "
            "plainly and compared it with transformers instead"
        )
    if args.skip_server:
        not_run["serve"] = "--skip-server"
    else:
        steps["serve"] = serve(paths, use_gpu)

    ok = all(step.get("ok", True) for step in steps.values())
    seconds = round(time.perf_counter() - start, 1)
    summary = {"ok": ok, "seconds": seconds, "gpu": use_gpu, "not_run": not_run, **steps}
    out = args.out or args.workdir / "main_job.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1, default=str))
    print(f"\n== main job: {'ok' if ok else 'FAILED'} in {seconds} s")
    for name, step in steps.items():
        print(f"  {'ok' if step.get('ok', True) else 'FAILED':6s} {name} ({step['seconds']} s)")
    for name, why in not_run.items():
        print(f"  {'not run':6s} {name}: {why}")
    print(f"summary: {out}")
    return 0 if ok else 1


# What SGLang warns on import without a GPU, once per process: AWQ and GGUF quantization need one (nothing here is
# quantized) and its Triton kernels fall back to torch on CPU (expected: no Triton kernel runs here).
CPU_IMPORT_WARNINGS = ("Only CUDA", "Triton is not supported on current platform")


def _quiet_cpu_import_warnings() -> None:
    """Ignore ``CPU_IMPORT_WARNINGS`` here and, through PYTHONWARNINGS, in the processes this job starts."""
    rules = [f"ignore:{message}:UserWarning" for message in CPU_IMPORT_WARNINGS]
    for message in CPU_IMPORT_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), *rules]))


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()
