"""Where the block kernel runs: SGLang's real ``TritonAttnBackend.forward_extend`` with the plugin's routing.

In TARGET_VERIFY mode (the target's verify and the DFlash draft's block) a Gemma 4 DFLASH backend's call of
upstream's extend kernel is served by the block kernel, with upstream's answer; every other mode, and every call
the kernel does not implement, stays upstream's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from sglang_gemma4_dflash.attention import backend_hooks
from sglang_gemma4_dflash_testkit import verify_backend
from sglang_gemma4_dflash_testkit.block_attention_ref import make_case, reference

CASES = {
    "target-sliding": dict(ctx=[7, 12, 12], blocks=[16, 16, 16], num_heads=4, num_kv_heads=2, head_dim=32, window=12),
    "target-global": dict(ctx=[30, 0, 45], blocks=[16, 16, 16], num_heads=8, num_kv_heads=1, head_dim=64),
    "draft-full": dict(ctx=[30, 9], blocks=[16, 16], num_heads=4, num_kv_heads=1, head_dim=32, causal=False),
    "draft-sliding": dict(ctx=[30, 9], blocks=[16, 16], num_heads=4, num_kv_heads=1, head_dim=32, window=20),
}


def case_named(name: str, seed: int = 0):
    spec = dict(CASES[name])
    return make_case(spec.pop("ctx"), spec.pop("blocks"), seed=seed, **spec)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float().view_as(b) - b).norm() / b.norm()).item()


@pytest.fixture(scope="module")
def sglang(sglang_tp1):
    return sglang_tp1


@pytest.mark.parametrize("name", list(CASES))
def test_verify_layers_run_the_block_kernel(sglang, name):
    case = case_named(name)
    role = "draft" if name.startswith("draft") else "target"
    hooked, upstream, dispatch = verify_backend.run(case, role=role)
    assert dispatch.served == 1 and not dispatch.declined
    ref = reference(case)
    assert rel(hooked, ref) < 1e-5 and rel(upstream, ref) < 1e-5


def test_other_modes_stay_upstream(sglang):
    case = case_named("target-global")
    hooked, upstream, dispatch = verify_backend.run(case, mode="EXTEND")
    assert dispatch.served == 0 and not dispatch.declined
    assert torch.equal(hooked, upstream)


def test_sinks_go_to_upstream(sglang):
    case = case_named("target-sliding")
    sinks = torch.randn(case.q.shape[1])
    hooked, upstream, dispatch = verify_backend.run(case, sinks=sinks)
    assert dispatch.served == 0 and dispatch.declined == {"sinks is set"}
    assert torch.equal(hooked, upstream)


def test_a_custom_mask_goes_to_upstream_unless_it_is_dflash_verify(sglang):
    case = case_named("target-global")
    hooked, upstream, dispatch = verify_backend.run(case, dflash_mask=True)  # no DFLASH spec info
    assert dispatch.served == 0 and dispatch.declined == {"a custom attention mask"}
    assert torch.equal(hooked, upstream)
    hooked, upstream, dispatch = verify_backend.run(
        case, dflash_mask=True, spec_info=verify_backend.dflash_verify_input()
    )
    assert dispatch.served == 1 and rel(hooked, reference(case)) < 1e-5


def test_blocks_longer_than_the_kernel_takes_go_to_upstream(sglang):
    case = make_case([10, 3], [33, 20], num_heads=2, num_kv_heads=1, head_dim=16)
    hooked, upstream, dispatch = verify_backend.run(case)
    assert dispatch.served == 0 and dispatch.declined == {"33 block tokens (the kernel takes 1-32)"}
    assert torch.equal(hooked, upstream)


def test_decline_reasons_name_each_unsupported_argument():
    case = make_case([4], [16], num_heads=2, num_kv_heads=1, head_dim=16)
    base = dict(
        q_extend=case.q, k_extend=case.k_ext, v_extend=case.v_ext, o_extend=case.q, k_buffer=case.k_buffer,
        v_buffer=case.v_buffer, qo_indptr=case.qo_indptr, kv_indptr=case.kv_indptr, kv_indices=case.kv_indices,
        custom_mask=None, is_causal=True, mask_indptr=None, max_len_extend=16, k_scale=1.0, v_scale=1.0,
        sm_scale=None, logit_cap=0.0, skip_prefix_custom_mask=True, sliding_window_size=-1, sinks=None,
        window_kv_offsets=None, xai_temperature_len=-1,
    )  # fmt: skip
    assert backend_hooks.decline_reason(base, False) is None
    assert backend_hooks.decline_reason(dict(base, logit_cap=30.0), False) == "a logit cap"
    assert backend_hooks.decline_reason(dict(base, page_size=16), False) is None  # 3-D buffers: slots
    assert "4-D" in backend_hooks.decline_reason(dict(base, k_buffer=case.k_buffer[None]), False)
    fp8 = case.k_buffer.to(torch.float8_e4m3fn)
    assert "float8" in backend_hooks.decline_reason(dict(base, k_buffer=fp8), False)
    assert "not know" in backend_hooks.decline_reason(dict(base, future_flag=1), False)
    assert backend_hooks.decline_reason(dict(base, skip_extend=True), False) == "skip_extend is set"
    no_indices = {k: v for k, v in base.items() if k != "kv_indices"}
    assert (
        backend_hooks.decline_reason(no_indices, False)
        == "arguments the block kernel needs are missing: ['kv_indices']"
    )


def test_role_of_a_model_runner(sglang, pair):
    """Target: a Gemma 4 model on a DFLASH runner; draft: a DFlashDraftModel, once a Gemma 4 target was built."""
    from types import SimpleNamespace

    from sglang.srt.models.dflash import DFlashDraftModel
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    _, _, _, gemma4 = pair
    draft = DFlashDraftModel.__new__(DFlashDraftModel)
    dflash, eagle = SpeculativeAlgorithm.from_string("DFLASH"), SpeculativeAlgorithm.from_string("EAGLE")

    def runner(model, spec, is_draft):
        return SimpleNamespace(model=model, spec_algorithm=spec, is_draft_worker=is_draft)

    backend_hooks._gemma4_target_built = False
    assert backend_hooks.role_of(runner(draft, dflash, True)) is None  # no Gemma 4 target in this process yet
    assert backend_hooks.role_of(runner(gemma4, eagle, False)) is None
    assert backend_hooks.role_of(runner(draft, dflash, False)) is None
    assert backend_hooks.role_of(runner(gemma4, dflash, False)) == "target"
    assert backend_hooks.role_of(runner(draft, dflash, True)) == "draft"
    assert backend_hooks.role_of(runner(gemma4, dflash, True)) is None


def test_sglang_0513_verify_with_its_causal_mask(sglang_0513):
    """0.5.13's forward_extend, with the verify mask its DFLASH builds, runs the block kernel with its answer."""
    python, extra = sglang_0513
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", TRITON_INTERPRET="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root / "python"), str(root / "testkit")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    proc = subprocess.run(
        [python, "-m", "sglang_gemma4_dflash_testkit.verify_backend"], env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["case"] for r in records] == ["sliding-window-lists", "global", "draft-noncausal"]
    for r in records:
        assert r["served"] == 1 and not r["declined"], r
        assert r["err_hooked"] < 1e-5 and r["err_upstream"] < 1e-5, r


def test_the_tuning_file_is_checked_when_a_gemma4_dflash_backend_is_built(sglang, pair, tmp_path, monkeypatch, caplog):
    """SGLANG_GEMMA4_DFLASH_BLOCK_TUNING: a bad file stops a Gemma 4 DFLASH target's backend at start with the
    kernel's message; a good one is named in the start-up line; other backends never read it."""
    import logging
    from types import SimpleNamespace

    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang_gemma4_dflash.attention import block_kernel

    _, _, _, gemma4 = pair
    dflash, eagle = SpeculativeAlgorithm.from_string("DFLASH"), SpeculativeAlgorithm.from_string("EAGLE")

    class Backend:
        extend_attention_fwd = staticmethod(verify_backend.upstream_extend_kernel())

    def original(self, model_runner):
        pass

    def build(spec):
        backend = Backend()
        runner = SimpleNamespace(model=gemma4, spec_algorithm=spec, is_draft_worker=False)
        backend_hooks.init_backend(original, backend, runner)
        return backend

    bad = tmp_path / "bad.json"
    bad.write_text('[{"head_dim": 512, "m_tile": 24}]')
    monkeypatch.setenv(block_kernel.TUNING_ENV, str(bad))
    with pytest.raises(ValueError, match=r"bad\.json: row 0: m_tile=24 is not a power of two"):
        build(dflash)
    assert not hasattr(build(eagle), backend_hooks._DISPATCH)  # not a DFLASH target: the file is not read
    good = tmp_path / "good.json"
    good.write_text('[{"head_dim": 512, "m_tile": 64, "num_stages": 5}]')
    monkeypatch.setenv(block_kernel.TUNING_ENV, str(good))
    with caplog.at_level(logging.INFO, logger=backend_hooks.__name__):
        assert hasattr(build(dflash), backend_hooks._DISPATCH)
    assert f"on for the Gemma 4 DFLASH target (tilings of 1 row(s) from {good})" in caplog.text
