"""How decided is greedy decoding on SGLang's dummy weights at Gemma-4-31B width? CPU, the last step only.

    python scripts/dummy_head_ties.py --out benchmarks/identity/cpu_dummy_31b_head_ties.json

``--load-format dummy`` draws every parameter from U(-1e-3, 1e-3). Here: random unit-RMS hiddens times a dummy
final-norm weight, times a dummy tied 262144 x 5376 head (bf16, as served). Reported: the logits' spread, the gap
between the two largest (fp32), exact top-2 ties in bf16, and how often 2^-9 relative noise on the hidden (about
the verify-vs-decode numeric difference) changes the argmax.
"""

from __future__ import annotations

import argparse
import json

import torch

VOCAB, HIDDEN = 262144, 5376


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--noise-draws", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    head = torch.empty(VOCAB, HIDDEN, dtype=torch.bfloat16).uniform_(-1e-3, 1e-3)
    norm_weight = torch.empty(HIDDEN, dtype=torch.bfloat16).uniform_(-1e-3, 1e-3).float()
    x = torch.randn(args.rows, HIDDEN)
    x = x / x.pow(2).mean(-1, keepdim=True).sqrt()
    hidden = (x * norm_weight).to(torch.bfloat16)
    exact, served = hidden.float() @ head.float().T, (hidden @ head.T).float()
    top2 = exact.topk(2, dim=-1).values
    gap = top2[:, 0] - top2[:, 1]
    served_top2 = served.topk(2, dim=-1).values
    flips = 0
    for _ in range(args.noise_draws):
        noisy = (x * (1 + torch.randn_like(x) * 2**-9) * norm_weight).to(torch.bfloat16)
        flips += int(((noisy @ head.T).float().argmax(-1) != served.argmax(-1)).sum())
    result = {
        "what": __doc__.split("\n")[0],
        "torch": torch.__version__,
        "rows": args.rows,
        "logit_std": exact.std().item(),
        "logit_max": exact.max().item(),
        "top2_gap_median": gap.median().item(),
        "top2_gap_min": gap.min().item(),
        "bf16_argmax_equals_fp32": int((served.argmax(-1) == exact.argmax(-1)).sum()),
        "bf16_exact_top2_ties": int((served_top2[:, 0] == served_top2[:, 1]).sum()),
        "argmax_flips_under_noise": flips,
        "noisy_rows": args.rows * args.noise_draws,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
