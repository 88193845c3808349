"""The test kit's reading of a step's profile (``sglang_gemma4_dflash_testkit.trace``, which
scripts/gpu/profile_31b_step.py uses on a GPU), on hand-built chrome traces shaped like the H200 ones (Python
frames, CUDA runtime launches, kernels tied to them by correlation id) and on server log lines."""

import gzip
import json
from pathlib import Path

import pytest
from sglang_gemma4_dflash_testkit import trace
from sglang_gemma4_dflash_testkit.trace import StepModel

# Round numbers: what the summary derives from them is easy to check by hand.
MODEL = StepModel(
    target_params=30_000_000_000,
    draft_bytes=3_000_000_000,
    head_bytes=1_000_000_000,
    block_size=16,
    accept_lengths=(5.4, 6.46),
    peak_tflops=1000.0,
)

V2_STEP = "sglang/srt/speculative/dflash_worker_v2.py(1366): forward_batch_generation"
PLAIN_STEP = "sglang/srt/managers/tp_worker.py(622): forward_batch_generation"
RUNNER = "sglang/srt/model_executor/model_runner.py(2890): forward"


class Trace:
    def __init__(self):
        self.events, self.corr, self.gpu_free = [], 0, 0

    def frame(self, name, ts, dur, tid=1):
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "ts": ts, "dur": dur, "tid": tid})

    def launch(self, ts, kernel_us, name="k", tid=1, early_us=0):
        """A kernel that runs after the ones before it, later than its launch (only the correlation ties the two);
        ``early_us``: it starts that much before the previous kernel ends (programmatic dependent launch)."""
        self.replay(ts, [(-early_us, kernel_us + early_us, name)], tid=tid)

    def replay(self, ts, kernels, tid=1, api="cudaGraphLaunch"):
        """One launch whose kernels (``(start offset us, duration us, name)``, after the GPU frees) share its
        correlation id, as a CUDA-graph replay's do."""
        self.corr += 1
        args = {"correlation": self.corr}
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "ts": ts, "dur": 2, "tid": tid,
                            "args": args})  # fmt: skip
        base = max(ts + 5000, self.gpu_free)
        for offset, dur, name in kernels:
            self.events.append({"ph": "X", "cat": "kernel", "name": name, "ts": base + offset, "dur": dur, "tid": 7,
                                "args": args})  # fmt: skip
            self.gpu_free = max(self.gpu_free, base + offset + dur)

    def step(self, name, ts, dur, runner_us):
        """A worker step's frame and, 100 us into it, the model runner's forward."""
        self.frame(name, ts, dur)
        self.frame(RUNNER, ts + 100, runner_us)

    def plain_steps(self, count=4, period=40_000, dur=30_000, runner_us=20_000):
        """``count`` plain steps ``period`` us apart; yields each one's start, for its launches."""
        for n in range(count):
            self.step(PLAIN_STEP, n * period, dur, runner_us)
            yield n * period

    def write(self, path: Path) -> str:
        with gzip.open(path, "wt") as f:
            json.dump({"traceEvents": self.events}, f)
        return str(path)


def dflash_trace(steps: int = 5) -> Trace:
    """A v2-like DFLASH step every 10 ms: draft graph, eager head, target verify, draft KV append, accept."""
    t = Trace()
    for n in range(steps):
        s = n * 10_000
        t.step(V2_STEP, s, 9_000, 500)
        t.launch(s + 200, 700, "draft_graph")
        t.frame("sglang_gemma4_dflash/dflash/worker_hooks.py(60): greedy_sample", s + 700, 300)
        t.frame("sglang_gemma4_dflash/head/greedy.py(270): greedy_token_ids", s + 710, 280)
        t.launch(s + 800, 650, "head_gemm")
        t.step(PLAIN_STEP, s + 1_100, 6_000, 5_000)  # the verify: the target worker inside the DFLASH step
        t.launch(s + 1_300, 16_000 + n, "target_graph")  # n: the median must pick a middle step
        t.frame("sglang/srt/speculative/dflash_worker_v2.py(1008): _append_target_hidden_to_draft_kv_by_loc",
                s + 7_200, 500)  # fmt: skip
        t.launch(s + 7_300, 90, "kv_write")
        t.launch(s + 8_000, 30, "accept")  # directly under the step
    return t


def test_dflash_step_is_split_by_the_frames_that_launched_each_kernel(tmp_path):
    result = trace.analyse(dflash_trace().write(tmp_path / "t.json.gz"), dflash=True)
    assert result["steps_used"] == 3  # the first and last step may be cut by the profiler window
    median = result["median_ms"]
    assert median["draft"] == pytest.approx(0.7)
    assert median["draft_head"] == pytest.approx(0.65)
    assert median["target"] == pytest.approx(16.002)  # steps 1..3: 16.001, 16.002, 16.003
    assert median["draft_kv"] == pytest.approx(0.09)
    assert median["other"] == pytest.approx(0.03)
    assert median["gpu_busy"] == pytest.approx(0.7 + 0.65 + 16.002 + 0.09 + 0.03)
    assert median["profiled_wall"] == pytest.approx(10.0)
    assert result["top_kernels"]["draft_head"][0]["kernel"] == "head_gemm"
    assert "worker_hooks.py:greedy_sample > greedy.py:greedy_token_ids" in result["mean_ms_by_frames"]


def test_plain_step_charges_the_forward_to_the_target_and_sampling_to_other(tmp_path):
    t = Trace()
    for s in t.plain_steps(period=20_000, dur=19_000, runner_us=17_000):
        t.launch(s + 200, 16_500, "decode_graph")
        t.frame("sglang/srt/layers/sampler.py(80): forward", s + 17_500, 100)
        t.launch(s + 17_550, 9, "argmax")
    median = trace.analyse(t.write(tmp_path / "p.json.gz"), dflash=False)["median_ms"]
    assert median["target"] == pytest.approx(16.5)
    assert median["other"] == pytest.approx(0.009)
    assert median["draft"] == median["draft_head"] == median["draft_kv"] == 0.0


def test_kernels_launched_outside_a_step_or_on_another_thread_are_not_charged(tmp_path):
    t = dflash_trace()
    t.launch(49_500, 5_000, "between_steps")  # after the last step frame ended
    t.frame(V2_STEP, 10_000, 9_000, tid=2)  # another thread's frames do not wrap thread 1's launches
    result = trace.analyse(t.write(tmp_path / "t.json.gz"), dflash=True)
    assert result["median_ms"]["gpu_busy"] == pytest.approx(0.7 + 0.65 + 16.002 + 0.09 + 0.03)


def test_too_few_steps_is_reported_not_raised(tmp_path):
    result = trace.analyse(dflash_trace(steps=2).write(tmp_path / "t.json.gz"), dflash=True)
    assert "only 2 worker steps" in result["error"]


def test_summary_gives_c_the_ideal_and_the_projection_against_plain():
    report = {
        "rows": [
            {"mode": "plain", "prompt_len": 2048, "batch": 1, "t_step_ms": 20.0,
             "breakdown": {"median_ms": {"gpu_busy": 19.0}}},
            {"mode": "dflash", "prompt_len": 2048, "batch": 1, "t_step_ms": 25.0,
             "breakdown": {"median_ms": {"gpu_busy": 23.5}}},
            {"mode": "dflash", "prompt_len": 8192, "batch": 1, "t_step_ms": 30.0},  # no plain row at 8192
        ]
    }  # fmt: skip
    trace.summarise(report, bandwidth_tbs=4.0, model=MODEL)
    plain, row, alone = report["rows"]
    assert row["c"] == 1.25 and row["host_ms"] == 1.5
    assert row["projected_speedup_at_6.46"] == pytest.approx(6.46 / 1.25, abs=1e-3)
    assert row["ideal_step_ms"] == pytest.approx(20.0 + 1.0)  # 4 GB at 4 TB/s
    assert row["verify_compute_floor_ms"] == pytest.approx(0.96)  # 2 x 30e9 x 16 tokens at 1000 TFLOP/s
    assert plain["host_ms"] == 1.0 and "c" not in plain
    assert "c" not in alone  # c only against plain at the same prompt length and batch
    report["plain_reference_ms"] = {(8192, 1): 24.0}
    trace.summarise(report, bandwidth_tbs=4.0, model=MODEL)
    assert alone["c"] == 1.25


def test_attention_kernels_are_summed_per_category(tmp_path):
    t = Trace()
    for n in range(4):
        s = n * 10_000
        t.step(V2_STEP, s, 9_000, 500)
        t.launch(s + 200, 40, "_block_attn_fwd")  # the draft's block attention
        t.launch(s + 250, 300, "draft_gemm")
        t.step(PLAIN_STEP, s + 1_100, 6_000, 5_000)
        t.launch(s + 1_300, 200, "_block_attn_fwd")
        t.launch(s + 1_400, 20, "_block_attn_reduce")
        t.launch(s + 1_500, 15_000, "gemm")
    result = trace.analyse(t.write(tmp_path / "a.json.gz"), dflash=True)
    assert result["attention_ms"] == {"target": pytest.approx(0.22), "draft": pytest.approx(0.04)}


def test_a_kernel_launched_early_is_charged_only_its_time_after_the_kernel_before_it(tmp_path):
    t = Trace()
    for s in t.plain_steps():
        t.launch(s + 200, 15_000, "gemm")
        t.launch(s + 300, 200, "_block_attn_fwd", early_us=50)  # waits 50 us under the gemm
        t.launch(s + 400, 20, "_block_attn_reduce", early_us=190)  # resident since 10 us into the first pass
    result = trace.analyse(t.write(tmp_path / "pdl.json.gz"), dflash=False)
    assert result["attention_ms"] == {"target": pytest.approx(0.22)}
    assert result["median_ms"]["gpu_busy"] == pytest.approx(15.22)
    assert {k["kernel"]: k["ms_per_step"] for k in result["top_kernels"]["target"]}["_block_attn_reduce"] == 0.02


def test_gaps_between_a_replays_kernels_are_counted_apart_from_the_host(tmp_path):
    """Inside a CUDA-graph replay, the time between its first kernel's start and its last kernel's end in which no
    kernel runs is ``graph_gaps``: not a kernel launched early (PDL), not another stream's kernel, not the time between
    separate launches."""
    t = Trace()
    for s in t.plain_steps():
        # 100 us kernels: a 5 us gap, a kernel starting 10 us early (PDL), a 7 us gap of which 3 us another
        # stream's kernel covers
        t.replay(s + 200, [(0, 100, "a"), (105, 100, "b"), (195, 100, "c"), (302, 100, "d")])
        t.events.append({"ph": "X", "cat": "kernel", "name": "other_stream", "ts": t.gpu_free - 105, "dur": 3,
                         "tid": 8, "args": {"correlation": 10_000 + s}})  # fmt: skip
        t.launch(s + 300, 50, "eager")  # its own launch, 5 ms after the replay: not a replay's gap
    result = trace.analyse(t.write(tmp_path / "gaps.json.gz"), dflash=False)
    assert result["median_ms"]["graph_gaps"] == pytest.approx(0.005 + 0.004)
    report = {"rows": [{"mode": "plain", "prompt_len": 64, "batch": 1, "t_step_ms": 1.0, "breakdown": result}]}
    trace.summarise(report, 4.3, MODEL)
    assert report["rows"][0]["graph_gaps_ms"] == pytest.approx(0.009)
    assert report["rows"][0]["host_ms"] == pytest.approx(1.0 - result["median_ms"]["gpu_busy"])


def test_kernels_of_launches_that_are_not_replays_have_no_graph_gaps(tmp_path):
    t = Trace()
    for s in t.plain_steps():
        t.replay(s + 200, [(0, 100, "a"), (150, 100, "b")], api="cudaLaunchKernelExC")  # one launch, two kernels
    result = trace.analyse(t.write(tmp_path / "eager.json.gz"), dflash=False)
    assert result["median_ms"]["graph_gaps"] == 0.0
    assert result["median_ms"]["gpu_busy"] == pytest.approx(0.2)


# two decode lines of the 0.5.17 DFLASH server at 8192 x 16 (H200, without --min-free-slots-delay 1): two requests waited the whole cell
QUEUED_LOG = """\
[2026-12-05 16:57:12] Decode batch, #running-req: 14, #full token: 115220, full token usage: 0.32, #swa token: 14854, \
swa token usage: 0.41, accept len: 1.00, accept rate: 0.00, cuda graph: True, gen throughput (token/s): 7.72, #queue-req: 2
[2026-12-05 16:57:21] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, full token usage: 0.05, \
swa token usage: 0.25, #running-req: 0, #queue-req: 0, #pending-token: 8192, cuda graph: False
[2026-12-05 16:57:22] Decode batch, #running-req: 2, #full token: 16540, full token usage: 0.05, #swa token: 2202, \
swa token usage: 0.06, accept len: 1.00, accept rate: 0.00, cuda graph: True, gen throughput (token/s): 86.59, #queue-req: 0
"""


def test_a_cell_whose_requests_never_all_decoded_at_once_has_no_step_time():
    row = {"batch": 16, "t_step_ms": 63.0}
    trace.check_concurrency(row, QUEUED_LOG)
    assert (row["decode_running_max"], row["decode_queued_max"]) == (14, 2)
    assert row["t_step_ms"] is None and "14 of 16" in row["error"]


def test_a_cell_at_full_batch_keeps_its_step_time_and_a_log_without_decode_lines_says_nothing():
    row = {"batch": 14, "t_step_ms": 63.0}
    trace.check_concurrency(row, QUEUED_LOG)
    assert row["t_step_ms"] == 63.0 and "error" not in row
    quiet = {"batch": 4, "t_step_ms": 20.0}
    trace.check_concurrency(quiet, QUEUED_LOG.splitlines()[1])
    assert quiet == {"batch": 4, "t_step_ms": 20.0}
