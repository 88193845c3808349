"""The table of SGLang lines (``sglang_gemma4_dflash.lines``) where people read it: the start-up line, ``doctor``
and README. Its rows are checked against each line's wheel in ``test_sglang_source_lines.py``; here, on the
installed 0.5.23 and 0.5.13 (fresh interpreters), the plugin says its line's row when it loads, and ``doctor``
compares what it installs with the row and names any difference.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sglang_gemma4_dflash import lines

README = Path(__file__).resolve().parents[1] / "README.md"

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from sglang_gemma4_dflash_testkit.cpu_standins import install
    install()
    from sglang_gemma4_dflash.compat import symbols
    if len(sys.argv) > 1:
        symbols.installed_sglang_version = lambda: sys.argv[1]  # a line the table does not have
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang_gemma4_dflash import doctor
    out = {"version": symbols.installed_sglang_version(), "text": doctor.format_report(doctor.report())}
    os.environ["SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION"] = "0"  # read when the plan is made: one piece left out
    out["kernel_off"] = doctor.report()["against_the_table"]
    print(json.dumps(out))
    """
)


def run(python=sys.executable, *argv, **extra):
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", **extra)
    env.pop("SGLANG_PLUGINS", None)
    env.pop("SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION", None)
    proc = subprocess.run([python, "-c", SCRIPT, *argv], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.parametrize("line", ["0.5.23", "0.5.13"])
def test_the_start_up_line_and_doctor_say_this_lines_row_and_doctor_names_a_difference(request, line):
    python, extra = request.getfixturevalue("sglang_0513") if line == "0.5.13" else (sys.executable, {})
    out, log = run(python, **extra)
    assert out["version"] == line
    row = lines.line(line)
    loaded = [x for x in log.splitlines() if "sglang-gemma4-dflash 0.1.0 loaded on SGLang" in x]
    assert len(loaded) == 1 and loaded[0].endswith(f"it installs: {row.installs.summary}"), log[-3000:]
    assert f"against the table of lines: as the table says for SGLang {line} ({row.installs.name}," in out["text"]
    table = doctor_table(out["text"])
    assert [r[0].strip("* ") for r in table[1:]] == [r.version for r in lines.LINES]  # every line, in order
    assert [r for r in table if r[0].startswith("*")] == [table[1 + lines.LINES.index(row)]]  # this one marked
    for text, other in zip(table[1:], lines.LINES):
        assert text[1:] == [other.torch, other.installs.name, other.dp_attention, lines.SHOWN[other.shown][0]]
    assert f"the evidence: {lines.EVIDENCE}" in out["text"]
    assert out["kernel_off"].startswith(f"DIFFERS from the table for SGLang {line}")
    assert (
        "not installed here: ['around TritonAttnBackend.__init__', 'around TritonAttnBackend.forward_extend']"
        in (out["kernel_off"])
    )


def test_a_line_the_table_does_not_have_is_said_to_be_unchecked():
    out, log = run(sys.executable, "0.5.99")
    assert "SGLang 0.5.99 is not among the lines checked against their published source (0.5.12-0.5.23)" in log
    assert "against the table of lines: SGLang 0.5.99 is not among the lines checked" in out["text"]


def test_readme_support_table_is_the_tables_markdown():
    assert lines.markdown() in README.read_text(), "paste lines.markdown() into README's support section"


def doctor_table(text: str) -> list[list[str]]:
    """The cells of doctor's table of lines, split where every row leaves a gap of two spaces or more at the same
    column (so a misaligned column fails to split)."""
    rows = text.split("what each SGLang line supports", 1)[1].splitlines()[1:]
    rows = rows[: next(i for i, r in enumerate(rows) if r.strip() == "plans:")]
    width = max(map(len, rows))
    rows = [r.ljust(width) for r in rows]
    gaps = [i for i in range(1, width) if all(r[i - 1 : i + 1] == "  " for r in rows)]
    cuts = [0] + [i + 1 for i in gaps if i + 1 not in gaps] + [width]
    return [[r[a:b].strip() for a, b in zip(cuts, cuts[1:]) if r[a:b].strip() or a == 0] for r in rows]


def test_doctors_table_splits_into_its_columns_only_when_aligned():
    table = lines.format_lines("0.5.16").splitlines()
    text = "what each SGLang line supports:\n" + "\n".join(table)
    assert doctor_table(text)[0] == ["SGLang", "torch", "the plugin installs", "DFLASH with DP attention", "shown here"]
    broken = [t.replace("  v2+graph ", " v2+graph  ", 1) for t in table]  # one cell shifted by a column
    assert len(doctor_table("what each SGLang line supports:\n" + "\n".join(broken))[0]) < 5


def test_each_rows_evidence_level_is_what_this_project_showed():
    """GPU runs here: 0.5.13, 0.5.16 and 0.5.17 (torch 2.11 lines); 0.5.23 on the GPU machine's torch 2.11, off its
    2.14.1 pin (it is also the CPU suite's line); every other line's published source only."""
    assert {r.version: r.shown for r in lines.LINES if r.shown != "source"} == {
        "0.5.13": "gpu",
        "0.5.16": "gpu",
        "0.5.17": "gpu",
        "0.5.23": "gpu-offpin",
    }
    assert all(r.torch.startswith("2.11") for r in lines.LINES if r.shown == "gpu")
    assert not any(r.torch.startswith("2.11") for r in lines.LINES if r.shown == "gpu-offpin")


def test_the_legend_explains_exactly_the_levels_the_table_uses():
    """Every level a row shows is explained under the table; a level no row has (CPU only, now) is not listed."""
    legend = lines.markdown().split("Shown here: ")[1]
    for key, (label, meaning) in lines.SHOWN.items():
        used = any(r.shown == key for r in lines.LINES)
        assert (f"**{label}**: {meaning}" in legend) == used, key


def test_an_unknown_evidence_level_is_refused_by_name():
    with pytest.raises(ValueError, match="shown='ran'; use one of"):
        lines.Line("0.5.99", "2.14.1", lines.V1, lines.DP_REFUSED, "ran")


def test_the_table_carries_no_run_history():
    """Data only: no dates, section or issue numbers, no notes about runs."""
    text = lines.markdown() + lines.format_lines()
    for word in ("2026", "section", "issue", "H200", "H100", "re-run", "gpu_runs"):
        assert word not in text
