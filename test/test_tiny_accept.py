"""Predicted DFLASH accept length of the tiny pair on CPU (sglang_gemma4_dflash_testkit.tiny_accept): SGLang's own
Gemma 4 target with the plugin's capture hook, SGLang's own DFlash draft modules, the plugin's greedy head.

The pair is built so that the draft needs the captured target features (the key-token mode is carried only by the
output of one target layer), so the prediction tells a right capture and a right head from wrong ones:

    right capture and head   the whole block is accepted            (>= 0.75 x block size asserted)
    capture one layer late   no mode for the draft: accept length 1 (<= 0.25 x block size asserted)
    head returning id + 1    no drafted token matches: about 1      (<= 1.25 asserted)

The broken variants are the test kit's ``breakage`` patches, the same ones the GPU script applies in SGLang servers.
"""

import pytest
from sglang_gemma4_dflash_testkit import breakage, sglang_cpu, tiny, tiny_accept
from sglang_gemma4_dflash_testkit.tiny import TINY

pytestmark = pytest.mark.skipif(
    not sglang_cpu.softcap_runs_on_cpu(),
    reason="this SGLang soft-caps logits only with a Triton kernel, which cannot run on CPU (0.5.13 and older)",
)

VARIANTS = (None, "capture_shift", "wrong_ids")


@pytest.fixture(scope="module")
def tiny_paths(tmp_path_factory):
    return tiny.write_tiny_checkpoints(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def predictions(sglang_tp1, tiny_paths):
    pair = tiny_accept.load_sglang_pair(tiny_paths)
    prompts = tiny_accept.prompts()
    assert all(len(p) > TINY.sliding_window for p in prompts)
    assert {tiny.mode_of(p) for p in prompts} == {0, 1}
    out = {}
    for kind in VARIANTS:
        with breakage.broken(kind):
            out[kind] = tiny_accept.predict(pair, prompts)
    print(
        "\n[tiny accept, CPU prediction] "
        + ", ".join(f"{kind or 'correct'}: {p.mean_accept_length:.2f}" for kind, p in out.items())
        + f" (block {TINY.block_size})"
    )
    return out


def test_the_target_follows_its_plant_in_sglang(predictions):
    assert all(predictions[None].follows_plant)


def test_right_capture_and_head_accept_most_of_the_block(predictions):
    assert predictions[None].mean_accept_length >= 0.75 * TINY.block_size, predictions[None].as_dict()


def test_capture_one_layer_off_loses_the_drafts(predictions):
    shifted = predictions["capture_shift"].mean_accept_length
    assert shifted <= 0.25 * TINY.block_size, predictions["capture_shift"].as_dict()
    assert predictions[None].mean_accept_length - shifted >= 0.5 * TINY.block_size


def test_wrong_head_ids_accept_about_one(predictions):
    assert predictions["wrong_ids"].mean_accept_length <= 1.25, predictions["wrong_ids"].as_dict()


def test_a_bf16_draft_accepts_the_whole_block_too(sglang_tp1, tiny_paths):
    """The GPU runs the draft in bf16: its q/k norms, RoPE, projections and MLP in bf16 (scores in float32)."""
    pair = tiny_accept.load_sglang_pair(tiny_paths, draft_dtype="bfloat16")
    prediction = tiny_accept.predict(pair, tiny_accept.prompts())
    print(f"\n[tiny accept, CPU prediction, bf16 draft] {prediction.mean_accept_length:.2f}")
    assert prediction.mean_accept_length >= 0.75 * TINY.block_size, prediction.as_dict()


def test_breakage_patches_are_undone(sglang_tp1):
    from sglang_gemma4_dflash.dflash import worker_hooks
    from sglang_gemma4_dflash.gemma4 import capture

    before = (capture.validate_layer_ids, worker_hooks.greedy_token_ids)
    for kind in breakage.KINDS:
        with breakage.broken(kind):
            assert (capture.validate_layer_ids, worker_hooks.greedy_token_ids) != before
        assert (capture.validate_layer_ids, worker_hooks.greedy_token_ids) == before


_LOAD_PLUGINS = r"""
import json, os
from sglang_gemma4_dflash_testkit import sglang_cpu
sglang_cpu.use_cpu_engine()
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_gemma4_dflash.dflash import worker_hooks
from sglang_gemma4_dflash.gemma4 import capture
from sglang_gemma4_dflash.head import greedy
print("RESULT " + json.dumps({"shift": capture.validate_layer_ids([1, 5], 8),
                               "head_patched": worker_hooks.greedy_token_ids is not greedy.greedy_token_ids}))
"""


@pytest.mark.parametrize("kind", breakage.KINDS)
def test_break_plugin_loads_through_sglang_entry_points(tmp_path, kind):
    """The GPU script's route: a .dist-info on PYTHONPATH declares the break plugin; SGLang's own load_plugins
    (which also loads the real plugin) runs it, and the env var picks the breakage."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    path = [str(breakage.write_plugin_dist(tmp_path)), str(repo / "testkit"), str(repo / "python")]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(path + [os.environ.get("PYTHONPATH", "")]), **{breakage.ENV: kind}
    )
    proc = subprocess.run([sys.executable, "-c", _LOAD_PLUGINS], env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["shift"] == ([2, 6] if kind == "capture_shift" else [1, 5])
    assert result["head_patched"] == (kind == "wrong_ids")
    assert "BROKEN on purpose" in proc.stderr
