"""The main job: everything the plugin does, shown on the tiny offline checkpoints.

    python -m sglang_gemma4_dflash_testkit [--workdir .tiny] [--out main_job.json] [--skip-server]

Without a GPU:
  1. what the plugin installs into the installed SGLang (the doctor report),
  2. the tiny offline checkpoints (Gemma 4 target, multimodal target, DFlash draft),
  3. the capture check: SGLang's Gemma4ForCausalLM on CPU, capture set from the draft's
     target_layer_ids, aux hidden states and logits against transformers,
  4. the draft-head check: the plugin's greedy head against a full-vocabulary argmax, on the tiny
     target's tied head, at TP=1 and split over 2 real processes,
  5. the tiny Gemma 4 served by SGLang on CPU, greedy outputs against transformers' greedy.
With a GPU, step 5 serves the tiny target plainly and with DFLASH and compares the tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
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


@stage("serve: tiny Gemma 4 through SGLang, greedy, against transformers")
def serve(paths: dict, use_gpu: bool) -> dict:
    from sglang_gemma4_dflash_testkit import checks

    if use_gpu:
        result = checks.serve_dflash_vs_plain(paths["target"], paths["draft"], PROMPTS)
    else:
        result = checks.serve_cpu_vs_transformers(paths["target"], PROMPTS)
    for row in result["prompts"]:
        print(f"{'same' if row['identical'] else 'DIFFERENT':9s} {row['prompt'][:40]!r} -> {row['tokens']} tokens")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_gemma4_dflash_testkit", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(".tiny"), help="where the tiny checkpoints go")
    parser.add_argument("--out", type=Path, default=None, help="JSON summary (default: WORKDIR/main_job.json)")
    parser.add_argument("--skip-server", action="store_true", help="skip step 5 (starting an SGLang server)")
    args = parser.parse_args(argv)

    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "0" if _has_gpu() else "1")
    use_gpu = _has_gpu()
    if not use_gpu:
        from sglang_gemma4_dflash_testkit import cpu_standins

        cpu_standins.install()

    summary = {"gpu": use_gpu}
    summary["plugin"] = show_plugin()
    summary["checkpoints"] = make_checkpoints(args.workdir)
    paths = summary["checkpoints"]["paths"]
    summary["capture"] = check_capture(paths)
    summary["head"] = check_head(paths)
    if not args.skip_server:
        summary["serve"] = serve(paths, use_gpu)

    ok = all(part.get("ok", True) for part in summary.values() if isinstance(part, dict))
    out = args.out or args.workdir / "main_job.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1, default=str))
    print(f"\n{'all checks passed' if ok else 'SOME CHECKS FAILED'}; summary in {out}")
    return 0 if ok else 1


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()

