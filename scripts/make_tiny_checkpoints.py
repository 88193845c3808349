#!/usr/bin/env python3
"""Write the tiny Gemma 4 target, its multimodal twin and a DFlash draft (offline, seeded).

    python scripts/make_tiny_checkpoints.py OUT_DIR [--seed N] [--overwrite] [--margins]

Prints the three paths as JSON ({"target": ..., "target_mm": ..., "draft": ...}); with --margins
also the greedy top-1 margin report of the target (transformers, bf16) to stderr.
See docs/tiny_checkpoints.md.
"""

import argparse
import json
import sys
from pathlib import Path

try:
    from sglang_gemma4_dflash_testkit import tiny
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    from sglang_gemma4_dflash_testkit import tiny


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true", help="rewrite even when the stamp matches")
    parser.add_argument("--margins", action="store_true", help="also report greedy top-1 margins of the target")
    args = parser.parse_args(argv)
    paths = tiny.write_tiny_checkpoints(args.out_dir, seed=args.seed, overwrite=args.overwrite)
    print(json.dumps({name: str(path) for name, path in paths.items()}))
    if args.margins:
        report = tiny.margin_report(paths["target"], seed=args.seed)
        print(json.dumps(report.as_dict()), file=sys.stderr)
        if report.min_margin < tiny.TINY.min_margin or not all(report.follows_plant):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
