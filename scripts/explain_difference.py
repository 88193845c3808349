"""Where a DFLASH answer first differs from plain's on the tiny target, ask the target itself (transformers, CPU)
whether plain greedy decoding is decided there at all.

    python scripts/explain_difference.py --lengths 1024,2900,1500,2048,2600,1200 --seed 8 --prompt 5 \\
        --plain 134,252,124,98,113,227,99,298,155,308,215,141,201,144,187 --dflash 144,144,187,67

The prompt is rebuilt as `serving_options.py` builds it (`serving_matrix.length_prompts`, BOS first); `--plain` is
plain's output up to and including its token at the first difference (the row's `first_difference.plain_ids[: index
+ 1]`), `--dflash` DFLASH's tokens from there on. It prints the target's decision at that position in fp32 and bf16
(`tiny.decision`: the logit gap, a tie, the argmax, the planted lookup's gate) and the target's own bf16 greedy
tokens from plain's prefix, each from one forward over the whole sequence, as a verify computes a block. A logit tie,
or a lookup gate near 0 with bf16 answering DFLASH's tokens, says plain decoding itself is undecided there: the
difference is the tiny pair's, not a fault of the kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import serving_matrix as sm  # noqa: E402
from sglang_gemma4_dflash_testkit.tiny import TINY, decision, write_tiny_checkpoints  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", required=True, help="the case's prompt lengths, as its builder lists them")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--prompt", type=int, required=True, help="which of them")
    ap.add_argument("--plain", required=True, help="plain's output ids up to and including the first difference")
    ap.add_argument("--dflash", required=True, help="DFLASH's output ids from the first difference on")
    ap.add_argument("--tiny-dir", default="/tmp/tiny-gemma4-dflash-explain")
    args = ap.parse_args(argv)
    from transformers import AutoModelForCausalLM

    low, key = TINY.num_special_tokens, TINY.key_token_id
    lengths = [int(x) for x in args.lengths.split(",")]
    prompt = [TINY.bos_token_id] + list(sm.length_prompts(lengths, low, key, key, seed=args.seed)[args.prompt])
    plain = [int(x) for x in args.plain.split(",")]
    dflash = [int(x) for x in args.dflash.split(",")]
    before = prompt + plain[:-1]
    path = write_tiny_checkpoints(args.tiny_dir)["target"]
    result = {"plain_token": plain[-1], "dflash_tokens": dflash}
    for name in ("float32", "bfloat16"):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, name)).eval()
        result[name] = decision(model, before, plain[-1], dflash[0])
        ids = list(before)
        with torch.no_grad():
            for _ in dflash:
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        result[name]["greedy_from_there"] = ids[len(before) :]
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
