"""Where a DFLASH answer first differs from plain's on the tiny target, ask the target itself (transformers, CPU):
how sure it is of plain's token there, and which input token at the position before would have produced DFLASH's.

    python scripts/explain_difference.py --lengths 1024,2900,1500,2048,2600,1200 --seed 8 --prompt 5 \\
        --plain 134,252,124,98,113,227,99,298,155,308,215,141,201,144,187 --dflash-token 144

The prompt is rebuilt as `serving_options.py` builds it (`serving_matrix.length_prompts`, BOS first); `--plain` is
plain's output up to and including its token at the first difference (the row's `first_difference.plain_ids[: index + 1]`). One
input token alone reproducing DFLASH's answer says the verify saw the wrong token at that position (a stale seed or
stale block rows), not a rounding flip.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import serving_matrix as sm  # noqa: E402
from sglang_gemma4_dflash_testkit.tiny import TINY, write_tiny_checkpoints  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", required=True, help="the case's prompt lengths, as its builder lists them")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--prompt", type=int, required=True, help="which of them")
    ap.add_argument("--plain", required=True, help="plain's output ids up to and including the first difference")
    ap.add_argument("--dflash-token", type=int, required=True)
    ap.add_argument("--tiny-dir", default="/tmp/tiny-gemma4-dflash-explain")
    args = ap.parse_args(argv)
    from transformers import AutoModelForCausalLM

    low, key = TINY.num_special_tokens, TINY.key_token_id
    lengths = [int(x) for x in args.lengths.split(",")]
    prompt = [TINY.bos_token_id] + list(sm.length_prompts(lengths, low, key, key, seed=args.seed)[args.prompt])
    plain = [int(x) for x in args.plain.split(",")]
    before, plain_token = prompt + plain[:-2], plain[-1]  # the input at the position before is plain[-2]
    model = AutoModelForCausalLM.from_pretrained(write_tiny_checkpoints(args.tiny_dir)["target"], dtype=torch.float32)
    model.eval()
    vocab = model.config.get_text_config().vocab_size
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([before + plain[-2:-1]])).logits[0, -1].float(), -1)
        candidates = torch.arange(vocab)[:, None]
        rows = torch.cat([torch.tensor(before).expand(vocab, -1), candidates], dim=1)
        picks = torch.cat([model(rows[i : i + 32]).logits[:, -1].argmax(-1) for i in range(0, vocab, 32)])
    result = {
        "plain_token": plain_token,
        "dflash_token": args.dflash_token,
        "logprob": {
            "plain": round(float(logprobs[plain_token]), 4),
            "dflash": round(float(logprobs[args.dflash_token]), 4),
        },
        "inputs_that_give_dflash_token": [int(i) for i in (picks == args.dflash_token).nonzero().flatten()],
        "input_there": plain[-2],
        "inputs_before": plain[-6:-2],
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
