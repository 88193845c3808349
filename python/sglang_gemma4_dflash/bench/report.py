"""What goes around the numbers: the machine and package versions, the JSON file (rewritten after every step, so
an interrupted run keeps what finished) and the one PNG (speedup and accept length per dataset and concurrency)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Optional

from sglang_gemma4_dflash.bench.errors import BenchError, need

PACKAGES = ("sglang", "sglang-gemma4-dflash", "torch", "transformers", "triton", "flashinfer-python", "sglang-kernel")


def hardware() -> dict:
    """This (client) machine: CPU, platform and the GPUs nvidia-smi lists (none when it is absent)."""
    query = "name,memory.total,driver_version,compute_cap"
    try:
        run = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        gpus = run.stdout.strip().splitlines() if run.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        gpus = []
    return {"gpus": gpus, "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version()}  # fmt: skip


def versions() -> dict:
    """Installed versions on the client machine (the servers report theirs in server_info)."""
    import importlib.metadata as md

    found = {}
    for name in PACKAGES:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    return found


def write_json(path: Optional[str], result: dict) -> None:
    """Write `result` to `path` through a temporary file (a reader never sees half a file)."""
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, target)


def plot(path: str, result: dict) -> None:
    """Two panels over (dataset, concurrency): speedup of the DFLASH arm over the baseline (its throughput when
    there is no baseline) and the accept length."""
    matplotlib = need("matplotlib", "--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.get("summary") or []
    if not rows:
        raise BenchError(f"--plot {path}: no finished measurement to plot")
    datasets = sorted({str(r["dataset"]) for r in rows})
    one = len(datasets) == 1  # one dataset: name it once in the title, label bars by concurrency only
    labels = [f"c={r['concurrency']}" if one else f"{r['dataset']}\nc={r['concurrency']}" for r in rows]
    has_speedup = any(r.get("speedup") is not None for r in rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(8.0, 1.4 * len(rows) + 3), 4.5), constrained_layout=True)
    xs = range(len(rows))
    if has_speedup:
        values = [r.get("speedup") or 0.0 for r in rows]
        left.bar(xs, values, color="tab:blue")
        left.axhline(1.0, color="grey", linewidth=0.8)
        left.set_ylabel("speedup over baseline (throughput ratio)")
    else:
        values = [r.get("throughput_tok_s") or 0.0 for r in rows]
        left.bar(xs, values, color="tab:blue")
        left.set_ylabel("throughput (tokens/s), no baseline")
    _annotate(left, values, "{:.2f}")
    accepts = [r.get("accept_length") for r in rows]
    right.bar(xs, [a or 0.0 for a in accepts], color="tab:orange")
    right.set_ylabel("accept length (tokens per verify step)")
    _annotate(right, accepts, "{:.2f}")
    if not any(a is not None for a in accepts):
        right.set_yticks([])
        right.text(0.5, 0.5, "no accept length returned", ha="center", va="center", transform=right.transAxes)
    for ax in (left, right):
        ax.set_xticks(list(xs), labels)
    servers = result.get("servers", {})
    names = [f"{arm}: {Path(str(s.get('model_path') or s.get('url'))).name}" for arm, s in servers.items() if s]
    title = "sglang-gemma4-dflash bench  " + "  |  ".join(names)
    fig.suptitle(title + (f"\ndataset: {datasets[0]}" if one else ""), fontsize=9)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _annotate(ax, values, fmt: str) -> None:
    for x, v in enumerate(values):
        if v is not None:
            ax.annotate(fmt.format(v), (x, v), ha="center", va="bottom", fontsize=8)
