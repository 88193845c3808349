"""Plot c (DFLASH step / plain step) against prompt length per batch size, from profile_31b_step.py JSONs.

    python scripts/gpu/plot_31b_sweep.py docs/31b_sweep_0517.png benchmarks/h200_sglang0517_31b_sweep_a.json \
        benchmarks/h200_sglang0517_31b_sweep_b.json

Left: c per mode and batch (the issue's goals dotted). Right: the verify's attention over a plain step's decode
attention, where a cell was profiled in both modes.
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"dflash": "-", "dflash-nokernel": "--", "dflash-noplugin": ":"}
COLOR = {1: "tab:blue", 4: "tab:orange", 16: "tab:green"}
GOAL = {1: 1.15, 4: 1.3, 16: 1.6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("png")
    ap.add_argument("jsons", nargs="+")
    args = ap.parse_args()
    rows, runs = [], []
    for path in args.jsons:
        with open(path) as f:
            run = json.load(f)
        rows += run["rows"]
        runs.append(run)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), constrained_layout=True)
    for mode in STYLE:
        for b in COLOR:
            cells = sorted(
                (r["prompt_len"], r["c"]) for r in rows if r["mode"] == mode and r["batch"] == b and "c" in r
            )
            if cells:
                xs, cs = zip(*cells)
                left.plot(xs, cs, STYLE[mode], marker="o", color=COLOR[b], label=f"{mode}, batch {b}")
    for b, goal in GOAL.items():
        left.axhline(goal, color=COLOR[b], linestyle=":", linewidth=0.8)
    left.set_xscale("log", base=2)
    lens = sorted({r["prompt_len"] for r in rows})
    left.set_xticks(lens, [str(p) for p in lens])
    left.minorticks_off()
    left.set_xlabel("prompt tokens")
    left.set_ylabel("c = DFLASH step / plain step")
    left.set_title("DFLASH step cost (dotted: the goal per batch)")
    left.legend(fontsize=8)

    attention = {(r["mode"], r["prompt_len"], r["batch"]): (r.get("breakdown") or {}).get("attention_ms") for r in rows}
    bars = []
    for (mode, p, b), att in sorted(attention.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        plain = attention.get(("plain", p, b))
        if mode != "plain" and att and plain and plain.get("target"):
            bars.append((f"{p}x{b}\n{mode}", att["target"] / plain["target"]))
    if bars:
        labels, ratios = zip(*bars)
        right.bar(range(len(bars)), ratios, color="tab:blue")
        right.set_xticks(range(len(bars)), labels, fontsize=7)
        for i, v in enumerate(ratios):
            right.annotate(f"{v:.2f}", (i, v), ha="center", va="bottom", fontsize=8)
    right.axhline(1.5, color="grey", linestyle=":", linewidth=0.8)
    right.set_ylabel("verify attention / plain decode attention")
    right.set_title("prompt x batch (dotted: the goal, 1.5)")
    v = runs[0]["versions"]
    fig.suptitle(
        f"Gemma-4-31B shapes, dummy weights, {runs[0]['hardware']['gpus'][0].split(',')[0]}; "
        f"SGLang {v['sglang']}, torch {v['torch']}, triton {v['triton']}"
    )
    fig.savefig(args.png, dpi=110)
    print("wrote", args.png)


if __name__ == "__main__":
    main()
