"""Plot c (DFLASH step / plain step) against prompt length per batch size, from profile_31b_step.py JSONs.

    S=benchmarks/step_31b; python scripts/gpu/plot_31b_sweep.py $S/c_by_context.png \
        $S/h200_sglang0517{,_8192x16,_repeat,_repeat_2048,_32768x4}.json $S/h200_sglang0513.json

One panel per SGLang line: c per mode and batch, every measured row a marker, the line through the mean of a cell's
rows (a cell measured in several calls has several markers); the issue's goals dotted. A last panel, where some cell
was profiled in plain and DFLASH: the verify's attention over a plain step's decode attention.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"dflash": "-", "dflash-nokernel": "--", "dflash-noplugin": ":"}
COLOR = {1: "tab:blue", 4: "tab:orange", 16: "tab:green"}
GOAL = {1: 1.15, 4: 1.3, 16: 1.6}


def c_panel(ax, line: str, rows: list[dict], cards: str) -> None:
    cells = defaultdict(list)  # (mode, batch, prompt_len) -> c of every row measured there
    for r in rows:
        if r.get("c") is not None and r["mode"] in STYLE and r["batch"] in COLOR:
            cells[(r["mode"], r["batch"], r["prompt_len"])].append(r["c"])
    for mode in STYLE:
        for b in COLOR:
            lens = sorted(p for (m, bb, p) in cells if (m, bb) == (mode, b))
            if not lens:
                continue
            means = [sum(cells[(mode, b, p)]) / len(cells[(mode, b, p)]) for p in lens]
            ax.plot(lens, means, STYLE[mode], color=COLOR[b], label=f"{mode}, batch {b}")
            for p in lens:
                ax.plot([p] * len(cells[(mode, b, p)]), cells[(mode, b, p)], "o", color=COLOR[b], markersize=4)
    for b, goal in GOAL.items():
        ax.axhline(goal, color=COLOR[b], linestyle=":", linewidth=0.8)
    ax.set_xscale("log", base=2)
    lens = sorted({p for (_, _, p) in cells})
    ax.set_xticks(lens, [str(p) for p in lens])
    ax.minorticks_off()
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("c = DFLASH step / plain step")
    ax.set_title(f"SGLang {line}, {cards} (dotted: the goal per batch)", fontsize=10)
    ax.legend(fontsize=8)


def attention_bars(rows: list[dict]) -> list[tuple[str, float]]:
    attention = {}  # (mode, prompt, batch) -> attention_ms of a profiled row; unprofiled rows of the cell do not erase it
    for r in rows:
        att = (r.get("breakdown") or {}).get("attention_ms")
        if att:
            attention[(r["mode"], r["prompt_len"], r["batch"])] = att
    bars = []
    for (mode, p, b), att in sorted(attention.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        plain = attention.get(("plain", p, b))
        if mode != "plain" and att and plain and plain.get("target"):
            bars.append((f"{p}x{b}\n{mode}", att["target"] / plain["target"]))
    return bars


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("png")
    ap.add_argument("jsons", nargs="+")
    args = ap.parse_args()
    by_line: dict[str, list[dict]] = defaultdict(list)
    cards: dict[str, set] = defaultdict(set)  # line -> the GPUs its runs used (compare c only within a card)
    runs = []
    for path in args.jsons:
        with open(path) as f:
            run = json.load(f)
        by_line[run["versions"]["sglang"]] += run["rows"]
        cards[run["versions"]["sglang"]].add(run["hardware"]["gpus"][0].split(",")[0].replace("NVIDIA ", ""))
        runs.append(run)
    lines = sorted(by_line, key=lambda v: [int(x) for x in v.split(".")], reverse=True)
    bars = attention_bars([r for line in lines for r in by_line[line]])
    panels = len(lines) + bool(bars)
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 5), constrained_layout=True, squeeze=False)
    for ax, line in zip(axes[0], lines):
        c_panel(ax, line, by_line[line], " / ".join(sorted(cards[line])))
    if bars:
        right = axes[0][-1]
        labels, ratios = zip(*bars)
        right.bar(range(len(bars)), ratios, color="tab:blue")
        right.set_xticks(range(len(bars)), labels, fontsize=7)
        for i, v in enumerate(ratios):
            right.annotate(f"{v:.2f}", (i, v), ha="center", va="bottom", fontsize=8)
        right.axhline(1.5, color="grey", linestyle=":", linewidth=0.8)
        right.set_ylabel("verify attention / plain decode attention")
        right.set_title("prompt x batch (dotted: the goal, 1.5)")
    v = runs[0]["versions"]
    fig.suptitle(f"Gemma-4-31B shapes, dummy weights, one GPU; torch {v['torch']}, triton {v['triton']}")
    fig.savefig(args.png, dpi=110)
    print("wrote", args.png)


if __name__ == "__main__":
    main()
