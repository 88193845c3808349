"""`sglang-gemma4-dflash bench` against real SGLang CPU servers of the tiny Gemma 4 target (plain: SGLang refuses
DFLASH on CPU, so the server under test runs with --expect-algorithm none here; the GPU run is
scripts/gpu/bench_tiny.sh). Two servers per module: the seed-0 target (A) and the seed-1 target (B, another
planted successor map, so its greedy output differs from A's at a known token)."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sglang_gemma4_dflash.bench import data, launcher
from sglang_gemma4_dflash.bench import main as bench
from sglang_gemma4_dflash.bench.parity import first_difference
from sglang_gemma4_dflash_testkit import e2e, sglang_cpu, tiny

cpu_server = pytest.mark.skipif(
    sglang_cpu.sglang_version() < (0, 5, 23),
    reason="SGLang 0.5.13 and 0.5.16 accept only GPU attention backends for Gemma 4",
)

JSONL = str(Path(__file__).parent / "data" / "bench_prompts.jsonl")
SERVER_ARGS = e2e.cpu_server_args(4, max_total_tokens=2048)
ERROR_PREFIX = "sglang-gemma4-dflash bench: error: "


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """{"A": url of the seed-0 target, "B": url of the seed-1 target, "target": seed-0 target dir}; both started
    together."""
    root = tmp_path_factory.mktemp("bench-tiny")
    targets = {"A": tiny.write_tiny_checkpoints(root / "s0")["target"],
               "B": tiny.write_tiny_checkpoints(root / "s1", seed=1)["target"]}  # fmt: skip
    running = {k: launcher.Server(str(t), SERVER_ARGS, launcher=e2e.CPU_LAUNCHER, ready_timeout=400)
               for k, t in targets.items()}  # fmt: skip
    for s in running.values():
        s.start()
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.wait_ready(), running.values()))
        yield {"A": running["A"].base_url, "B": running["B"].base_url, "target": str(targets["A"])}
    finally:
        for s in running.values():
            s.stop()


def chat_ids_by_hand(target: str, prompt: str) -> list[int]:
    """The tiny chat template written out (one user turn, generation prompt), tokenized without added specials."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    return tokenizer.encode(f"<bos><|turn>user\n{prompt}<turn|>\n<|turn>model\n", add_special_tokens=False)


def run_bench(argv, capsys):
    code = bench.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    """The bench's single error line (stderr may also hold its progress log lines)."""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(errors) == 1, err
    return errors[0][len(ERROR_PREFIX) :]


@pytest.mark.slow
@cpu_server
def test_pipeline_against_itself(servers, tmp_path, capsys):
    """Client template, flush, warm-up, both arms at concurrency 1 and 2, no histogram from a plain server,
    JSON + PNG, parity of a server with itself: exit 0."""
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    argv = ["--url", servers["A"], "--baseline-url", servers["A"], "--expect-algorithm", "none",
            "--dataset", JSONL, "--num-prompts", "2", "--concurrency", "1,2", "--max-new-tokens", "3",
            "--parity", "2", "--out", str(out), "--plot", str(png), "--no-progress"]  # fmt: skip
    code, stdout, err = run_bench(argv, capsys)
    assert code == 0, err
    result = json.loads(out.read_text())
    assert result["status"] == "ok"
    assert result["servers"]["dflash"]["spec"]["speculative_algorithm"] is None
    assert result["environment"]["versions"]["sglang"] and result["environment"]["hardware"]["cpu_count"]

    chosen = data.select(data.load_jsonl(JSONL), 2 + 2)[:2]
    by_hand = [chat_ids_by_hand(servers["target"], p) for p in chosen]
    assert [(r["arm"], r["concurrency"]) for r in result["runs"]] == [
        ("baseline", 1), ("baseline", 2), ("dflash", 1), ("dflash", 2)
    ]  # fmt: skip
    for run in result["runs"]:
        assert run["flush_cache"].startswith("Cache flushed")
        assert run["warmup_requests"] == run["concurrency"]
        # the server counted exactly the client-templated ids (one BOS, the turn markers)
        assert [r["prompt_tokens"] for r in run["requests"]] == [len(ids) for ids in by_hand]
        assert run["completion_tokens"] == 2 * 3  # the tiny target never emits EOS
        assert run["throughput_tok_s"] > 0 and run["latency_s"]["p50"] <= run["latency_s"]["p90"]
        assert run["accept_length"] is None and run["acceptance_histogram"] is None  # plain server: none returned
    rows = result["summary"]
    assert [(r["dataset"], r["concurrency"]) for r in rows] == [("bench_prompts", 1), ("bench_prompts", 2)]
    assert all(r["speedup"] > 0 for r in rows)
    assert result["parity"]["all_identical"] and result["parity"]["num_prompts"] == 2
    assert "parity: 2/2 prompts token-identical" in stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


@pytest.mark.slow
@cpu_server
def test_parity_reports_first_difference(servers, tmp_path, capsys):
    """A (seed 0) against B (seed 1): exit 1, and per prompt the index where the planted continuations differ."""
    out = tmp_path / "r.json"
    argv = ["--url", servers["A"], "--baseline-url", servers["B"], "--expect-algorithm", "none",
            "--dataset", JSONL, "--num-prompts", "0", "--parity", "2", "--max-new-tokens", "6",
            "--out", str(out), "--no-progress"]  # fmt: skip
    code, stdout, err = run_bench(argv, capsys)
    assert code == 1, err
    result = json.loads(out.read_text())
    assert result["status"] == "parity_difference" and result["runs"] == []
    chosen = data.select(data.load_jsonl(JSONL), 2)
    expected = []
    for prompt in chosen:
        ids = chat_ids_by_hand(servers["target"], prompt)
        b, a = tiny.planted_continuation(ids, 6, seed=1), tiny.planted_continuation(ids, 6, seed=0)
        expected.append(first_difference(b, a))
    assert None not in expected
    assert [p["first_difference"] for p in result["parity"]["prompts"]] == expected
    assert result["parity"]["identical"] == 0
    assert f"prompt 0 at token {expected[0]}" in stdout


@pytest.mark.slow
@cpu_server
def test_bad_inputs_one_message_and_partial_results(servers, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    no_prompt = tmp_path / "bad.jsonl"
    no_prompt.write_text('{"prompt": "fine"}\n{"text": "no prompt key"}\n')
    dead = f"http://127.0.0.1:{launcher.free_port()}"
    plain = ["--url", servers["A"], "--num-prompts", "2", "--max-new-tokens", "2", "--no-progress"]
    cases = {
        "unreachable": (["--url", dead, "--dataset", JSONL], f"--url {dead}: "),
        "not DFLASH": ([*plain, "--dataset", JSONL], "runs speculative_algorithm=None, not DFLASH"),
        "missing file": ([*plain, "--expect-algorithm", "none", "--dataset", str(tmp_path / "nope.jsonl")],
                         "cannot load dataset"),
        "offline hub": ([*plain, "--expect-algorithm", "none", "--dataset", "gsm8k"], "cannot load dataset 'gsm8k'"),
        "no prompt": ([*plain, "--expect-algorithm", "none", "--dataset", str(no_prompt)],
                      f"{no_prompt}:2: no prompt"),
    }  # fmt: skip
    for name, (argv, wanted) in cases.items():
        out = tmp_path / f"{name.replace(' ', '_')}.json"
        code, _, err = run_bench([*argv, "--out", str(out)], capsys)
        assert code == 2, name
        assert wanted in one_error_line(err), (name, err)
        result = json.loads(out.read_text())
        assert result["status"] == "error" and wanted in result["error"], name
        if name != "unreachable":  # what was learnt before the error is kept
            assert result["servers"]["dflash"]["url"] == servers["A"], name
    # the console entry point: same single line, no traceback, from a fresh process
    run = subprocess.run(
        [sys.executable, "-m", "sglang_gemma4_dflash.cli", "bench", "--url", dead, "--out", str(tmp_path / "c.json")],
        capture_output=True, text=True, timeout=120, env={**os.environ},
    )  # fmt: skip
    assert run.returncode == 2
    assert "cannot reach the server" in one_error_line(run.stderr)


@pytest.mark.slow
@cpu_server
def test_launch_keeps_the_plain_arm_when_dflash_cannot_start(servers, tmp_path, capsys):
    """--launch: the plain server is started, measured and stopped; the DFLASH server (a draft path that does not
    exist) fails: one message naming its kept log, and the plain arm's numbers stay in the JSON."""
    out, logs = tmp_path / "r.json", tmp_path / "logs"
    argv = ["--launch", servers["target"], "--draft", str(tmp_path / "no-such-draft"), "--launcher", e2e.CPU_LAUNCHER,
            "--ready-timeout", "400", "--log-dir", str(logs),
            "--dataset", JSONL, "--num-prompts", "1", "--max-new-tokens", "2", "--out", str(out), "--no-progress",
            "--", *SERVER_ARGS]  # fmt: skip
    code, _, err = run_bench(argv, capsys)
    assert code == 2
    message = one_error_line(err)
    assert "the dflash server did not start" in message and "no-such-draft" in message and str(logs) in message
    result = json.loads(out.read_text())
    assert [(r["arm"], r["completion_tokens"]) for r in result["runs"]] == [("baseline", 1 * 2)]
    assert result["servers"]["baseline"]["spec"]["speculative_algorithm"] is None
    assert "--speculative-draft-model-path" in result["servers"]["dflash"]["launch"]
    assert (logs / "baseline.log").stat().st_size > 0 and (logs / "dflash.log").stat().st_size > 0


def test_acceptance_histogram_summary():
    """Per-request histograms (verify steps by accepted drafts) are summed; position p's share is steps >= p."""
    from sglang_gemma4_dflash.bench.measure import Request, histogram_summary

    def req(h):
        return Request(prompt_tokens=1, completion_tokens=1, latency_s=1.0, accept_length=None, verify_ct=None,
                       histogram=h)  # fmt: skip

    assert histogram_summary([req(None), req(None)]) is None
    summary = histogram_summary([req([1, 3]), req([0, 2, 4]), req(None)])
    assert summary["steps_by_accepted_drafts"] == [1, 5, 4]
    assert summary["position_acceptance"] == [9 / 10, 4 / 10]
    assert abs(sum(summary["fraction"]) - 1.0) < 1e-12


def test_cli_dispatches_bench_and_doctor(capsys):
    from sglang_gemma4_dflash import cli

    assert cli.main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        cli.main(["bench", "--help"])
    assert done.value.code == 0 and "--baseline-url" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        cli.main(["doctor", "--help"])
    assert done.value.code == 0 and "--json" in capsys.readouterr().out
