"""`sglang-gemma4-dflash {bench,doctor} ...`: the console script of the wheel.

sglang-gemma4-dflash doctor [--json]          what the installed SGLang has and what the plugin adds
sglang-gemma4-dflash bench --url ... [...]    accept length, speedup and parity of live servers
"""

from __future__ import annotations

import sys
from typing import Optional

COMMANDS = {
    "bench": "sglang_gemma4_dflash.bench.main",
    "doctor": "sglang_gemma4_dflash.doctor",
}


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown command {argv[0]!r}: use one of {', '.join(COMMANDS)}", file=sys.stderr)
            return 2
        return 0 if argv else 2
    import importlib

    return int(importlib.import_module(COMMANDS[argv[0]]).main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
