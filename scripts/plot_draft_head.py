"""Plot the draft-head benchmark (scripts/bench_draft_head.py): time per draft step vs draft tokens, and the roofline.

python scripts/plot_draft_head.py benchmarks/draft_head/h200_torch_head.json /tmp/draft_head.png
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="?", default="benchmarks/draft_head/h200_torch_head.json")
    ap.add_argument("png", nargs="?", default="draft_head.png")
    args = ap.parse_args()
    res = json.load(open(args.json))
    rows = sorted(res["rows"], key=lambda r: r["tokens"])
    n = [r["tokens"] for r in rows]

    fig, (ax, rx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw=dict(width_ratios=[3, 2]))
    series = [
        ("upstream algorithm (TP=1)", "upstream_ms", dict(color="tab:gray", marker="s")),
        ("ours, TP=1", "ours_ms", dict(color="tab:blue", marker="o")),
        ("ours, one rank at TP=2", "share_t2_ms", dict(color="tab:orange", marker="o")),
        ("ours, one rank at TP=4", "share_t4_ms", dict(color="tab:green", marker="o")),
    ]
    for label, key, style in series:
        ax.plot(n, [r[key] for r in rows], label=label, **style)
    for key, color, label in (
        ("roofline_ms", "tab:blue", "roofline TP=1"),
        ("roofline_t2_ms", "tab:orange", "roofline per rank, TP=2"),
        ("roofline_t4_ms", "tab:green", "roofline per rank, TP=4"),
    ):
        ax.plot(n, [r[key] for r in rows], linestyle="--", color=color, alpha=0.7, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.minorticks_off()
    ax.set_xticks(n)
    ax.set_xticklabels([str(x) for x in n])
    ax.set_xlabel("draft tokens per step (N)")
    ax.set_ylabel("time per step (ms)")
    hw = res["hardware"]
    ax.set_title(
        f"Draft greedy head, V={res['shapes']['vocab']}, H={res['shapes']['hidden']}, bf16 — {hw['gpu']}\n"
        f"roofline: read {res['read_bw']['TBps']:.2f} TB/s, bf16 GEMM {res['peak_bf16']['TFLOPs']:.0f} TFLOP/s"
        " (both measured)",
        fontsize=9,
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)

    # right: the same figures over their roofline
    for label, key, roof, style in (
        ("upstream algorithm (TP=1)", "upstream_ms", "roofline_ms", dict(color="tab:gray", marker="s")),
        ("ours, TP=1", "ours_ms", "roofline_ms", dict(color="tab:blue", marker="o")),
        ("ours, one rank at TP=2", "share_t2_ms", "roofline_t2_ms", dict(color="tab:orange", marker="o")),
        ("ours, one rank at TP=4", "share_t4_ms", "roofline_t4_ms", dict(color="tab:green", marker="o")),
    ):
        rx.plot(n, [r[key] / r[roof] for r in rows], label=label, **style)
    rx.axhline(1.0, color="black", linewidth=0.8)
    rx.set_xscale("log")
    rx.minorticks_off()
    rx.set_xticks(n)
    rx.set_xticklabels([str(x) for x in n])
    rx.set_xlabel("draft tokens per step (N)")
    rx.set_ylabel("time / roofline")
    rx.grid(True, which="major", alpha=0.3)
    rx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=130)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
