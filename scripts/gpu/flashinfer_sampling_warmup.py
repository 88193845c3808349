"""Build flashinfer's sampling module once and time it: the stall of the first sampled DFLASH request.

    source scripts/gpu/setup_site.sh 0.5.16
    python3 scripts/gpu/flashinfer_sampling_warmup.py --out $OUT/warmup.json            # first process: builds
    python3 scripts/gpu/flashinfer_sampling_warmup.py --out $OUT/warmup2.json --second  # a later process: loads

Under DFLASH a sampled (temperature > 0) request verifies through sgl_kernel's top_k / top_p renorm functions, which
call flashinfer.sampling when flashinfer is importable, whatever --sampling-backend says. flashinfer compiles that
module with nvcc on its first use and keeps it under ~/.cache/flashinfer/<version>/<arch>/cached_ops/sampling/, so the
first sampled request of a machine waits for the build and every later process loads it. Running this once per
machine (or image) before serving moves the build out of the first request. Each call below is timed with the GPU
synchronised; the JSON lists the cache files before and after.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time

import torch


def timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return round(time.perf_counter() - start, 3)


def cache_files() -> list[str]:
    root = os.path.expanduser("~/.cache/flashinfer")
    return sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "**", "*.so"), recursive=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--second", action="store_true", help="label: a process after the one that built it")
    args = parser.parse_args()
    report = {"process": "second" if args.second else "first", "cache_before": cache_files()}
    start = time.perf_counter()
    import flashinfer.sampling as fs
    import sgl_kernel

    report["import_s"] = round(time.perf_counter() - start, 3)
    torch.manual_seed(0)
    probs = torch.rand(4, 4096, device="cuda").softmax(-1)
    top_p = torch.full((4,), 0.9, device="cuda")
    top_k = torch.full((4,), 20, device="cuda", dtype=torch.int32)
    calls = {
        "flashinfer.sampling.top_p_renorm_probs (first)": lambda: fs.top_p_renorm_probs(probs, top_p),
        "flashinfer.sampling.top_p_renorm_probs (again)": lambda: fs.top_p_renorm_probs(probs, top_p),
        "sgl_kernel.top_p_renorm_prob": lambda: sgl_kernel.top_p_renorm_prob(probs, top_p),
        "sgl_kernel.top_k_renorm_prob": lambda: sgl_kernel.top_k_renorm_prob(probs, top_k),
        "flashinfer.sampling.top_k_top_p_sampling_from_probs": lambda: fs.top_k_top_p_sampling_from_probs(
            probs, top_k, top_p
        ),
    }
    report["seconds"] = {}
    for name, fn in calls.items():
        try:
            report["seconds"][name] = timed(fn)
        except Exception as exc:  # recorded: the next call may still tell
            report["seconds"][name] = f"error: {exc}"[:500]
        print(f"{name}: {report['seconds'][name]}", flush=True)
    report["cache_after"] = cache_files()
    report["versions"] = {"torch": torch.__version__, "flashinfer": getattr(fs, "__version__", None)}
    try:
        import flashinfer

        report["versions"]["flashinfer"] = flashinfer.__version__
    except Exception:
        pass
    report["gpu"] = torch.cuda.get_device_name()
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
