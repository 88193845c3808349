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
from sglang_gemma4_dflash_testkit.block_attention_ref import exact_interpreter_fp8_casts, make_case, reference

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
    assert "float8" in backend_hooks.decline_reason(dict(base, k_buffer=fp8), False)  # fp32 queries, v in fp32
    half = dict(base, q_extend=case.q.half(), k_extend=case.k_ext.half(), v_extend=case.v_ext.half())
    for kind in (torch.float8_e4m3fn, torch.float8_e5m2):  # served: both formats, queries in fp16 (or bf16)
        assert backend_hooks.decline_reason(dict(half, k_buffer=fp8.to(kind), v_buffer=fp8.to(kind)), False) is None
    fnuz = case.k_buffer.to(torch.float8_e4m3fnuz)
    assert backend_hooks.decline_reason(dict(half, k_buffer=fnuz, v_buffer=fnuz), False) == (
        "KV cache in torch.float8_e4m3fnuz / torch.float8_e4m3fnuz with queries in torch.float16"
    )
    fp8_q = dict(half, q_extend=case.q.to(torch.float8_e4m3fn), k_buffer=fp8, v_buffer=fp8)
    assert backend_hooks.decline_reason(fp8_q, False) == "queries in torch.float8_e4m3fn"
    mixed = dict(half, k_buffer=fp8, v_buffer=fp8.to(torch.float8_e5m2))
    assert "float8_e4m3fn / torch.float8_e5m2" in backend_hooks.decline_reason(mixed, False)
    assert backend_hooks.decline_reason(dict(base, v_scale=torch.tensor(0.5)), False) == "v_scale is a tensor"
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
    from sglang_gemma4_dflash.attention import tuning as tilings

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
    monkeypatch.setenv(tilings.TUNING_ENV, str(bad))
    with pytest.raises(ValueError, match=r"bad\.json: row 0: m_tile=24 is not a power of two"):
        build(dflash)
    assert not hasattr(build(eagle), backend_hooks._DISPATCH)  # not a DFLASH target: the file is not read
    good = tmp_path / "good.json"
    good.write_text('[{"head_dim": 512, "m_tile": 64, "num_stages": 5}]')
    monkeypatch.setenv(tilings.TUNING_ENV, str(good))
    with caplog.at_level(logging.INFO, logger=backend_hooks.__name__):
        assert hasattr(build(dflash), backend_hooks._DISPATCH)
    assert f"on for the Gemma 4 DFLASH target (tilings of 1 row(s) from {good})" in caplog.text


FP8_CASES = {  # an fp8 cache with its layer's scales (k_scale != v_scale), queries in fp16 (the interpreter's)
    "target-sliding-e4m3": dict(CASES["target-sliding"], kv_dtype=torch.float8_e4m3fn, k_scale=2.0, v_scale=0.5,
                                amplitude=2.0),
    "draft-full-e5m2": dict(CASES["draft-full"], kv_dtype=torch.float8_e5m2, k_scale=0.5, v_scale=3.0),
}  # fmt: skip


def fp8_case_named(name: str, seed: int = 0):
    spec = dict(FP8_CASES[name])
    return make_case(spec.pop("ctx"), spec.pop("blocks"), seed=seed, dtype=torch.float16, **spec)


@pytest.mark.parametrize("name", list(FP8_CASES))
def test_fp8_cache_verify_runs_the_block_kernel(sglang, name, monkeypatch):
    """With an fp8 cache and the layer's float scales, forward_extend's TARGET_VERIFY call is the block kernel's, with
    the reference's answer and upstream's (its fp8 casts made a GPU's under the interpreter)."""
    exact_interpreter_fp8_casts(monkeypatch)
    case = fp8_case_named(name)
    hooked, upstream, dispatch = verify_backend.run(case, role="draft" if name.startswith("draft") else "target")
    assert dispatch.served == 1 and not dispatch.declined and not dispatch.failed
    ref, limit = reference(case), 4e-2 if case.k_buffer.dtype == torch.float8_e5m2 else 2.5e-2
    assert rel(hooked, ref) < limit and rel(upstream, ref) < limit, (rel(hooked, ref), rel(upstream, ref))


def test_a_tensor_valued_scale_is_declined_by_name(sglang):
    """A layer whose k_scale_float / v_scale_float are tensors: declined by name and handed to upstream's kernel,
    which meets it as stock SGLang does (its Triton kernel rejects a tensor where it takes a float)."""
    case = fp8_case_named("target-sliding-e4m3")
    with pytest.raises(Exception) as stock:
        verify_backend.forward(case, None, scale_type=torch.tensor)
    dispatch = verify_backend.dispatch_for()
    with pytest.raises(type(stock.value)) as routed:
        verify_backend.forward(case, dispatch, scale_type=torch.tensor)
    assert str(routed.value) == str(stock.value)
    assert dispatch.served == 0 and dispatch.declined == {"k_scale is a tensor"}


def plant_import_failure(monkeypatch):
    """Importing ``sglang_gemma4_dflash.attention.block_kernel`` anew raises ImportError, as under a Triton without
    the ``gdc_*`` names: an empty module stands in for ``triton.language.extra.cuda``, and the kernel's module is
    taken out of ``sys.modules``."""
    import sys
    import types

    from sglang_gemma4_dflash import attention

    monkeypatch.setitem(sys.modules, "triton.language.extra.cuda", types.ModuleType("triton.language.extra.cuda"))
    monkeypatch.delitem(sys.modules, "sglang_gemma4_dflash.attention.block_kernel", raising=False)
    monkeypatch.delattr(attention, "block_kernel", raising=False)


def test_a_kernel_that_cannot_be_imported_leaves_stock_sglang(sglang, pair, monkeypatch, caplog):
    """The kernel's module failing to import: the Gemma 4 DFLASH target's real TritonAttnBackend keeps no dispatch
    (one warning naming the cause), its verify is upstream's, exactly."""
    import logging
    from types import SimpleNamespace

    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    plant_import_failure(monkeypatch)
    _, _, _, gemma4 = pair
    case = case_named("target-global")
    backend = verify_backend.backend_for(case, dflash_mask=False)
    runner = SimpleNamespace(model=gemma4, spec_algorithm=SpeculativeAlgorithm.from_string("DFLASH"),
                             is_draft_worker=False)  # fmt: skip
    with caplog.at_level(logging.INFO, logger=backend_hooks.__name__):
        backend_hooks.init_backend(lambda self, model_runner: None, backend, runner)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        len(warnings) == 1 and "cannot be imported (ImportError: cannot import name 'gdc_" in warnings[0].getMessage()
    )
    assert not hasattr(backend, backend_hooks._DISPATCH)
    layer, batch = verify_backend.layer_for(case), verify_backend.forward_batch("TARGET_VERIFY")
    hooked = backend_hooks.route_verify(
        TritonAttnBackend.forward_extend, backend, case.q, case.k_ext, case.v_ext, layer, batch, save_kv_cache=False
    )
    plain = verify_backend.backend_for(case, dflash_mask=False)
    upstream = plain.forward_extend(case.q, case.k_ext, case.v_ext, layer, batch, save_kv_cache=False)
    assert torch.equal(hooked, upstream)


def test_a_launch_that_fails_goes_to_upstream(sglang, monkeypatch, caplog):
    """A launch that raises (a compile failure, say): that call and later ones of the layer's shape run upstream's
    kernel, exactly, with one warning naming the error."""
    import logging

    case = case_named("target-sliding")
    dispatch = verify_backend.dispatch_for(case)

    def fail(*args, **kwargs):
        raise RuntimeError("planted: out of shared memory")

    monkeypatch.setattr(dispatch.kernel, "block_attention", fail)
    with caplog.at_level(logging.INFO, logger=backend_hooks.__name__):
        for _ in range(2):
            hooked, upstream, dispatch = verify_backend.run(case, dispatch=dispatch)
            assert torch.equal(hooked, upstream)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "RuntimeError: planted: out of shared memory" in warnings[0], warnings
    assert dispatch.served == 0 and len(dispatch.failed) == 1
