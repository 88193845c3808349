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
    for other in lines.LINES:  # what the plugin installs on every other line, and what ran where
        assert f"  {other.version:13s} {other.installs.name:9s} torch {other.torch}" in out["text"]
    assert lines.RUNS in out["text"]
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


def test_each_row_claims_a_gpu_run_only_where_one_ran_and_none_for_torch_2_13_lines():
    """What ran on the GPU machine here (docs/gpu_runs.md sections 5, 7 and 9): 0.5.13, 0.5.16 and 0.5.17 at
    TP=1. 0.5.18+ pin torch >= 2.13, which that machine does not have."""
    assert [r.version for r in lines.LINES if r.gpu] == ["0.5.13", "0.5.16", "0.5.17"]
    assert all(r.torch.startswith("2.11") for r in lines.LINES if r.gpu)
    assert [r.version for r in lines.LINES if r.cpu] == ["0.5.13", "0.5.23"]
