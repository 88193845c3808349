"""``sglang-gemma4-dflash-doctor``: what the installed SGLang has, what the plugin adds, and a head self-check.

$ sglang-gemma4-dflash-doctor            # report + greedy-head self-check on cuda if present, else cpu
$ sglang-gemma4-dflash-doctor --json     # the same as one JSON object
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from importlib.metadata import entry_points

from sglang_gemma4_dflash import __version__, lines, plan
from sglang_gemma4_dflash.compat import probe, symbols

ENTRY_POINT = "gemma4_dflash"


def entry_point_status() -> dict:
    found = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == ENTRY_POINT]
    allowed = os.environ.get("SGLANG_PLUGINS", "")
    names = {n.strip() for n in allowed.split(",") if n.strip()}
    return {
        "entry_point_visible": bool(found),
        "entry_point": found[0].value if found else None,
        "enabled": bool(found) and (not names or ENTRY_POINT in names),
        "SGLANG_PLUGINS": allowed or None,
    }


def head_self_check(device: str, *, vocab: int = 50_000, hidden: int = 512, tokens: int = 37, seed: int = 0) -> dict:
    """The plugin's greedy head against a full-vocabulary argmax on ``device`` (exact ids expected)."""
    import torch

    from sglang_gemma4_dflash.head.greedy import greedy_token_ids

    gen = torch.Generator(device="cpu").manual_seed(seed)
    # Integer-valued inputs: every logit is exact in fp32, so the oracle has one right answer.
    weight = torch.randint(-3, 4, (vocab, hidden), generator=gen).float()
    hidden_states = torch.randint(-3, 4, (tokens, hidden), generator=gen).float()
    weight[vocab - 1] = weight[7]  # a tie across the whole vocabulary: the lowest id must win
    hidden_states[0] = weight[7]
    weight, hidden_states = weight.to(device), hidden_states.to(device)
    head = torch.nn.Embedding(vocab, hidden, _weight=weight)  # replicated head, like Gemma 4's tied one
    got = greedy_token_ids(hidden_states, head, None)
    want = torch.argmax(hidden_states @ weight.T, dim=-1)
    mismatches = int((got != want).sum())
    return {
        "device": device,
        "vocab": vocab,
        "hidden": hidden,
        "tokens": tokens,
        "mismatches": mismatches,
        "ok": mismatches == 0,
    }


def report() -> dict:
    """What SGLang's loader would install here, from the same plan the plugin uses (``plan.resolve``); it
    imports SGLang's Gemma 4 models and DFlash workers, which the plugin itself leaves to the schedulers."""
    features = probe.features()
    resolved = plan.resolve(features)
    status = entry_point_status()
    changes = [{"target": c.target, "how": c.how, "why": c.why, "required": c.required} for c in resolved.installed]
    return {
        "plugin_version": __version__,
        "sglang_version": features.version,
        "supported_sglang": f">= {symbols.FIRST_SUPPORTED}",
        "dflash_worker": features.worker,
        "gemma4_targets": [
            {"class": t.path, "upstream_capture": t.upstream_capture, "capture_problem": t.capture_problem}
            for t in features.targets
        ],
        "gemma4_subclasses": list(features.subclass_targets),
        "import_errors": dict(features.import_errors),
        **status,
        # What SGLang's loader would install in this environment: nothing when the plugin is left out.
        "plugin_installs": changes if status["enabled"] else [],
        "plugin_would_install": changes,
        "not_installable": [
            {"piece": s.piece, "problem": s.problem, "required": s.required, "then": plan.consequence(s)}
            for s in resolved.skipped
        ],
        "left_to_upstream": [{"what": u.what, "why": u.why} for u in resolved.left],
        "against_the_table": lines.compare(features.version, resolved.installed),
        "lines": [dataclasses.asdict(row) for row in lines.LINES],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sglang-gemma4-dflash-doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--device", default=None, help="device for the head self-check (default: cuda if present)")
    args = parser.parse_args(argv)

    import torch

    info = report()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    info["head_self_check"] = head_self_check(device)
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        print(format_report(info))
    return 0 if info["head_self_check"]["ok"] else 1


def format_report(info: dict) -> str:
    """The report as text: what is installed, what the plugin installs here, what each SGLang line supports."""
    targets = [
        f"{target['class'].rsplit('.', 1)[1]} (capture: "
        + ("upstream" if target["upstream_capture"] else "missing upstream")
        + (f"; CANNOT capture: {target['capture_problem']}" if target["capture_problem"] else "")
        + ")"
        for target in info["gemma4_targets"]
    ] + [f"{path.rsplit('.', 1)[1]} (inherits)" for path in info["gemma4_subclasses"]]
    enabled = info["enabled"]
    entry_point = f"sglang.srt.plugins:{ENTRY_POINT} " + (
        "visible" if info["entry_point_visible"] else "NOT visible (is the package installed?)"
    )
    if not enabled:
        entry_point += f", disabled by SGLANG_PLUGINS={info['SGLANG_PLUGINS']}"
    installed = [
        ("plugin", info["plugin_version"]),
        ("SGLang", f"{info['sglang_version']} (the plugin supports {info['supported_sglang']})"),
        ("DFlash worker", info["dflash_worker"] or "none"),
        ("entry point", entry_point),
        ("Gemma 4 targets", ", ".join(targets) or "none"),
    ]
    indent = " " * 11  # under the target, after "  <how:8> "
    out = [
        "installed:",
        *lines.columns(installed),
        "the plugin installs:"
        if enabled
        else "the plugin would install (it is not loaded here, so SGLang runs as is):",
        *[
            f"  {change['how']:8s} {change['target']}{' (required on this line)' if change['required'] else ''}"
            f"\n{indent}{change['why']}"
            for change in info["plugin_would_install"]
        ],
        *[
            f"  NOT installable: {piece['piece']}: {piece['problem']}\n{indent}then: {piece['then']}"
            for piece in info["not_installable"]
        ],
        "left to upstream:",
        *[f"  {left['what']}: {left['why']}" for left in info["left_to_upstream"]],
        f"against the table of lines: {info['against_the_table']}",
        f"what each SGLang line supports (* this one; the evidence: {lines.EVIDENCE} in the project's repository):",
        lines.format_lines(info["sglang_version"]),
    ]
    check = info.get("head_self_check")
    if check:
        out.append(
            f"greedy head self-check on {check['device']} (V={check['vocab']}, H={check['hidden']}, "
            f"N={check['tokens']}): {'ok' if check['ok'] else 'FAILED'}, {check['mismatches']} mismatches"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
