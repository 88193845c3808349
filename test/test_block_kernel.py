"""The block-attention kernel against an fp32 torch reference and against SGLang's own extend kernel.

On CPU the kernels run under Triton's interpreter (conftest sets ``TRITON_INTERPRET=1``); on a GPU they compile.
Shapes are small but keep Gemma 4's structure: GQA groups of 2 (sliding) and 8 (global), head dims 128/256/512,
K = V global layers, sliding windows given as SGLang gives them (the last ``min(len, window)`` context tokens) and as
whole contexts, blocks at the start of a context, ragged batches.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sglang_gemma4_dflash.attention import block_kernel
from sglang_gemma4_dflash.attention import tuning as tilings
from sglang_gemma4_dflash_testkit.block_attention_ref import exact_interpreter_fp8_casts, make_case, reference

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def run_kernel(case, **kwargs) -> torch.Tensor:
    args = case.kernel_args()  # output poisoned with NaN
    block_kernel.block_attention(
        *args,
        max_block=case.max_block,
        causal=case.causal,
        sm_scale=case.sm_scale,
        window=case.window,
        k_scale=case.k_scale,
        v_scale=case.v_scale,
        **kwargs,
    )
    return args[3]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not torch.isnan(out).any(), "an output element was not written"
    return ((out.float() - ref).norm() / ref.norm()).item()


def window_lists(lengths: list[int], window: int) -> list[int]:
    """What SGLang's triton backend passes for a sliding layer: at most ``window`` context tokens."""
    return [min(n, window) for n in lengths]


CASES = {
    # name: (context lengths, block lengths, kwargs of make_case)
    "global-k=v-512": ([70, 0, 33], [16, 16, 16], dict(num_heads=8, num_kv_heads=1, head_dim=512, k_eq_v=True)),
    "sliding-256-window-lists": (
        window_lists([5, 24, 25, 90], 24),
        [16, 16, 16, 16],
        dict(num_heads=4, num_kv_heads=2, head_dim=256, window=24),
    ),
    "sliding-whole-contexts": (
        [23, 24, 25, 61],
        [16, 16, 16, 16],
        dict(num_heads=4, num_kv_heads=2, head_dim=32, window=24),
    ),
    "draft-128-noncausal": ([40, 130], [16, 16], dict(num_heads=8, num_kv_heads=1, head_dim=128, causal=False)),
    "draft-128-window-noncausal": (
        [40, 130],
        [16, 16],
        dict(num_heads=8, num_kv_heads=1, head_dim=128, causal=False, window=30),
    ),
    "ragged-blocks": ([0, 1, 37, 300, 5], [1, 5, 16, 0, 32], dict(num_heads=6, num_kv_heads=2, head_dim=64)),
    "gemma-scaling-1": ([50], [16], dict(num_heads=4, num_kv_heads=2, head_dim=64, sm_scale=1.0 / 16)),
    "small-window": ([9, 40], [8, 8], dict(num_heads=2, num_kv_heads=1, head_dim=16, window=3)),
    "no-group": ([19, 20], [3, 16], dict(num_heads=2, num_kv_heads=2, head_dim=48, v_dim=80)),
}


@pytest.mark.parametrize("splits", [1, 3, None], ids=["one-split", "three-splits", "auto-splits"])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference_fp32(name, splits):
    ctx, blocks, kwargs = CASES[name]
    case = make_case(ctx, blocks, device=DEVICE, seed=len(name), **kwargs)
    tuning = tilings.Tuning(min_split=16, block_n=16)  # several splits even for these short contexts
    err = rel_err(run_kernel(case, splits=splits, tuning=tuning), reference(case))
    assert err < (1e-5 if DEVICE == "cpu" else 5e-3), f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("window", [-1, 16], ids=["global", "sliding-16"])
@pytest.mark.parametrize("contexts", [[1213], [1213, 1500], [2617, 1213, 2048, 1529]], ids=["b1", "b2", "b4"])
def test_tiny_target_shapes_at_long_contexts_with_the_defaults(contexts, window):
    """The tiny target's layers (4 heads of 64 over 2, window 16, scale 1) over the contexts the serving matrix's
    chunked-prefill prompts reach, 8-token blocks, the kernel's own split plan and default tiling: the case where one
    GPU answer differed from plain (docs/serving_options.md)."""
    lists = window_lists(contexts, window) if window > 0 else contexts
    case = make_case(lists, [8] * len(contexts), num_heads=4, num_kv_heads=2, head_dim=64, window=window,
                     sm_scale=1.0, device=DEVICE, seed=sum(contexts))  # fmt: skip
    err = rel_err(run_kernel(case), reference(case))
    assert err < (1e-5 if DEVICE == "cpu" else 5e-3), f"{contexts} window {window}: relative error {err:.2e}"


@pytest.mark.parametrize("splits", [2, 3, None], ids=["two-splits", "three-splits", "auto-splits"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_block_in_a_split_of_its_own(name, splits):
    """``Tuning.block_split``: where a request's context leaves a split unused, its block's tokens take that split
    and the merge one more part (contexts of 0 tokens, of fewer splits than the launch has, and of all of them)."""
    ctx, blocks, kwargs = CASES[name]
    case = make_case(ctx, blocks, device=DEVICE, seed=len(name) + 1, **kwargs)
    tuning = tilings.Tuning(min_split=16, block_n=16, block_split=1, dv_parts=2)
    err = rel_err(run_kernel(case, splits=splits, tuning=tuning), reference(case))
    assert err < (1e-5 if DEVICE == "cpu" else 5e-3), f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("dv_parts", [2, 4])
@pytest.mark.parametrize("splits", [1, 3])
def test_value_dim_split_across_programs(dv_parts, splits):
    """Programs that share a row tile and each take a slice of the value dim give the same output."""
    case = make_case([40, 0, 70], [16, 5, 16], num_heads=8, num_kv_heads=2, head_dim=64, window=30, device=DEVICE,
                     seed=dv_parts)  # fmt: skip
    tuning = tilings.Tuning(min_split=16, block_n=16, dv_parts=dv_parts)
    err = rel_err(run_kernel(case, splits=splits, tuning=tuning), reference(case))
    assert err < (1e-5 if DEVICE == "cpu" else 5e-3)


@pytest.mark.parametrize("name", ["global-k=v-512", "sliding-256-window-lists", "ragged-blocks", "no-group"])
@pytest.mark.parametrize("d_chunk", [16, 64])
def test_scores_over_head_dim_slices(name, d_chunk):
    """Scores summed over head-dim slices (``Tuning.d_chunk``; head dims 48-512, one slice or many, a partial
    last slice at 48) give the reference output, in the context loop and the block's own tokens."""
    ctx, blocks, kwargs = CASES[name]
    case = make_case(ctx, blocks, device=DEVICE, seed=d_chunk, **kwargs)
    tuning = tilings.Tuning(min_split=16, block_n=16, d_chunk=d_chunk, dv_parts=2)
    err = rel_err(run_kernel(case, splits=2, tuning=tuning), reference(case))
    assert err < (1e-5 if DEVICE == "cpu" else 5e-3), f"{name}, slices of {d_chunk}: relative error {err:.2e}"


DEFAULT_TUNING_CASES = {
    # name: (head dim, batch the tuning is picked for, make_case kwargs); each default of `default_tuning`
    "global-b1": (512, 1, dict(num_heads=8, num_kv_heads=1, k_eq_v=True)),
    "global-b4": (512, 4, dict(num_heads=8, num_kv_heads=1, k_eq_v=True)),
    "global-b16": (512, 16, dict(num_heads=8, num_kv_heads=1, k_eq_v=True)),
    "sliding-b1": (256, 1, dict(num_heads=4, num_kv_heads=2, window=24)),
    "sliding-b4": (256, 4, dict(num_heads=4, num_kv_heads=2, window=24)),
    "draft-b4": (128, 4, dict(num_heads=8, num_kv_heads=1, causal=False)),
    "draft-b16": (128, 16, dict(num_heads=8, num_kv_heads=1, causal=False)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(DEFAULT_TUNING_CASES))
def test_default_tunings_match_reference(name, dtype):
    """Every tiling `default_tuning` hands out (row tiles, key tiles, value parts, score slices) at its head dim, for
    the element size it is picked for (on a GPU, fp32 tiles that do not fit in shared memory fail to launch)."""
    if dtype == torch.bfloat16 and DEVICE == "cpu":
        pytest.skip("bf16 tiles: GPU only (the interpreter runs the fp32 case)")
    head_dim, batch, kwargs = DEFAULT_TUNING_CASES[name]
    case = make_case(
        [90, 0, 41], [16, 16, 9], head_dim=head_dim, dtype=dtype, device=DEVICE, seed=head_dim + batch, **kwargs
    )
    tuning = tilings.default_tuning(head_dim, batch, case.q.element_size())
    err = rel_err(run_kernel(case, splits=2, tuning=tuning), reference(case))
    limit = 1e-5 if DEVICE == "cpu" else (5e-3 if dtype == torch.float32 else 1e-2)
    assert err < limit, f"{name} {dtype} {tuning}: relative error {err:.2e}"


@pytest.mark.parametrize("name", list(DEFAULT_TUNING_CASES))
def test_fp8_default_tunings_match_reference(name):
    """Every tiling `default_tuning` hands out for an fp8 cache (e4m3, scales != 1) at its head dim gives the
    reference output (queries in fp16 under the interpreter, bf16 on a GPU)."""
    head_dim, batch, kwargs = DEFAULT_TUNING_CASES[name]
    case = make_case([90, 0, 41], [16, 16, 9], head_dim=head_dim, dtype=FP8_QUERIES, device=DEVICE,
                     seed=head_dim + batch, kv_dtype=torch.float8_e4m3fn, k_scale=1.5, v_scale=1.5, amplitude=1.5,
                     **kwargs)  # fmt: skip
    tuning = tilings.default_tuning(head_dim, batch, case.q.element_size(), kv_fp8=True)
    assert tuning == tilings._default_tuning_fp8(head_dim, batch)
    err = rel_err(run_kernel(case, splits=2, tuning=tuning), reference(case))
    assert err < FP8_LIMIT[torch.float8_e4m3fn], f"{name} fp8 {tuning}: relative error {err:.2e}"


def test_the_defaults_are_the_timed_tuning_file():
    """The 16-bit defaults are the tuning file timed on the H200 (benchmarks/block_attention/README.md), field for
    field."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/block_attention/h200_defaults_tuning.json"
    for row in tilings.tuning_file_rows(str(path)):
        for batch in (row["min_batch"], min(row["max_batch"], 16)):
            assert tilings._default_tuning_16bit(row["head_dim"], batch) == row["tuning"], (row, batch)


@pytest.mark.parametrize("splits", [1, 3], ids=["direct", "merged"])
def test_programmatic_dependent_launch(splits):
    """Both passes launched early (``Tuning.pdl``, a GPU's) still read what the copy just before them wrote: every
    program waits for the kernel before it. Under the interpreter the flag is inert and the answer the same."""
    ctx, blocks, kwargs = CASES["ragged-blocks"]
    case = make_case(ctx, blocks, device=DEVICE, seed=splits, **kwargs)
    tuning = tilings.Tuning(min_split=16, block_n=16, pdl=1)
    for _ in range(3):
        case.q.copy_(torch.randn_like(case.q))
        err = rel_err(run_kernel(case, splits=splits, tuning=tuning), reference(case))
        assert err < (1e-5 if DEVICE == "cpu" else 5e-3), f"relative error {err:.2e}"


@pytest.mark.parametrize("splits", [1, None], ids=["direct", "auto-splits"])
def test_scales_and_default_tuning(splits):
    """Scales other than 1 on a cache in q's type: ``k_scale`` scales the context's scores and ``v_scale`` its values,
    never the block's own (as in SGLang's extend kernel), through both passes."""
    case = make_case([100, 3], [16, 16], num_heads=4, num_kv_heads=2, head_dim=64, device=DEVICE, seed=7, k_scale=0.5,
                     v_scale=2.0)  # fmt: skip
    out = torch.empty_like(case.q)
    block_kernel.block_attention(
        *case.kernel_args()[:3],
        out,
        *case.kernel_args()[4:],
        max_block=16,
        causal=True,
        sm_scale=case.sm_scale,
        k_scale=0.5,
        v_scale=2.0,
        splits=splits,
    )
    assert rel_err(out, reference(case)) < (1e-5 if DEVICE == "cpu" else 5e-3)


def test_blocks_shorter_than_max_block_leave_other_rows_alone():
    """A request with fewer block tokens than ``max_block`` writes only its own rows."""
    case = make_case([10, 10], [4, 16], num_heads=2, num_kv_heads=1, head_dim=16, device=DEVICE, seed=3)
    out = run_kernel(case, splits=2, tuning=tilings.Tuning(min_split=16, block_n=16))
    assert out.shape[0] == 20 and rel_err(out, reference(case)) < (1e-5 if DEVICE == "cpu" else 5e-3)


@pytest.mark.parametrize("window", [-1, 20])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_sglang_extend_kernel(causal, window):
    """Same arguments, same answer as SGLang's own extend kernel (the one the kernel stands in for)."""
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    case = make_case(
        [100, 7, 0, 21],
        [16, 3, 5, 16],
        num_heads=8,
        num_kv_heads=2,
        head_dim=32,
        causal=causal,
        window=window,
        device=DEVICE,
        seed=11,
    )
    ours = run_kernel(case, splits=3, tuning=tilings.Tuning(min_split=16, block_n=16))
    args = case.kernel_args()
    extend_attention_fwd(
        *args, None, causal, None, case.max_block, 1.0, 1.0, sm_scale=case.sm_scale, sliding_window_size=window
    )
    upstream = args[3]
    assert rel_err(ours, upstream.float()) < (1e-5 if DEVICE == "cpu" else 5e-3)


HALF = [torch.float16, torch.bfloat16] if DEVICE == "cuda" else [torch.float16]  # the interpreter garbles bf16


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_close_to_reference(dtype):
    """(Triton 3.8's interpreter returns garbage for bf16 loads, SGLang's own extend kernel's too: bf16 runs on
    GPUs only.)"""
    case = make_case([64, 17], [16, 16], num_heads=8, num_kv_heads=1, head_dim=128, dtype=dtype, device=DEVICE, seed=5)
    err = rel_err(run_kernel(case, splits=2, tuning=tilings.Tuning(min_split=16, block_n=16)), reference(case))
    assert err < 1e-2, f"relative error {err:.2e} in {dtype}"


def test_bad_arguments_are_named():
    case = make_case([4], [16], num_heads=3, num_kv_heads=2, head_dim=16, device=DEVICE)
    with pytest.raises(ValueError, match="3 query heads"):
        run_kernel(case)
    case = make_case([4], [16], num_heads=2, num_kv_heads=1, head_dim=16, device=DEVICE)
    for bad in (0, 33):
        with pytest.raises(ValueError, match=f"max_block={bad}"):
            block_kernel.block_attention(*case.kernel_args(), max_block=bad, causal=True, sm_scale=1.0)


def test_split_count_depends_on_shapes_only():
    """The static split count (a CUDA graph's grid) comes from the batch and the heads, never from lengths: the
    fewest splits whose programs fill whole waves best."""
    tuning = tilings.Tuning(programs_per_sm=2, max_splits=32)  # 264 programs a wave
    cpu = torch.device("cpu")
    assert block_kernel.num_splits(1, 4, 4, tuning, cpu) == 16  # 256 programs: one wave (17 would need two)
    assert block_kernel.num_splits(16, 4, 4, tuning, cpu) == 1  # 256 programs a split: more splits, more waves
    assert block_kernel.num_splits(64, 16, 1, tuning, cpu) == 1
    assert block_kernel.num_splits(1, 1, 1, tuning, cpu) == 32
    one_per_sm = tilings.Tuning(programs_per_sm=1)  # 132 a wave: two splits of 64 programs fill one
    assert block_kernel.num_splits(4, 4, 4, one_per_sm, cpu) == 2  # not 3 (192 programs: two waves)


def write_rows(tmp_path, rows, name="tunings.json") -> str:
    path = tmp_path / name
    path.write_text(rows if isinstance(rows, str) else json.dumps(rows))
    return str(path)


def test_tuning_file_replaces_the_default_tiling(tmp_path, monkeypatch):
    """SGLANG_GEMMA4_DFLASH_BLOCK_TUNING's rows: the first that covers the head dim and batch wins, for 16-bit
    elements; other layers, and fp32 ones, keep `default_tuning`'s own; the kernel given the file's tiling (through
    `block_attention`'s default) still gives the reference output."""
    rows = [
        dict(head_dim=64, min_batch=2, max_batch=7, m_tile=16, block_n=16, num_stages=5, min_split=16),
        dict(head_dim=64, m_tile=32, block_n=32),  # batch 1 and 8+
        dict(head_dim=64, min_batch=3, max_batch=3, m_tile=64),  # shadowed by the first row
    ]
    monkeypatch.setenv(tilings.TUNING_ENV, write_rows(tmp_path, rows))
    first = tilings.Tuning(m_tile=16, block_n=16, num_stages=5, min_split=16)
    assert tilings.default_tuning(64, 2) == first and tilings.default_tuning(64, 3) == first
    assert tilings.default_tuning(64, 1) == tilings.Tuning(m_tile=32, block_n=32)
    assert tilings.default_tuning(64, 9) == tilings.Tuning(m_tile=32, block_n=32)
    assert tilings.default_tuning(512, 4) == tilings._default_tuning_16bit(512, 4)
    assert tilings.default_tuning(64, 2, kv_fp8=True) == first  # the file serves fp8 caches too
    assert tilings.default_tuning(64, 4, elem_bytes=4) != first
    case = make_case([40, 5, 0], [16, 16, 3], num_heads=4, num_kv_heads=2, head_dim=64, device=DEVICE, seed=9)
    assert rel_err(run_kernel(case), reference(case)) < (1e-5 if DEVICE == "cpu" else 5e-3)
    monkeypatch.delenv(tilings.TUNING_ENV)
    assert tilings.default_tuning(64, 2) == tilings._default_tuning_16bit(64, 2)


BAD_TUNING_FILES = {  # file content -> what the one error names
    "[{": "cannot read it as JSON",
    "{}": "non-empty JSON list",
    "[]": "non-empty JSON list",
    '[{"m_tile": 32}]': "row 0 is not an object with a head_dim",
    '[{"head_dim": 64}, {"head_dim": 64, "m_tiles": 32}]': "row 1: unknown fields ['m_tiles']",
    '[{"head_dim": 64, "m_tile": 48}]': "m_tile=48 is not a power of two",
    '[{"head_dim": 64, "block_n": 8}]': "block_n=8, must be an integer >= 16",
    '[{"head_dim": 64, "num_warps": 6}]': "num_warps=6 is not a power of two",
    '[{"head_dim": 64, "num_stages": true}]': "num_stages=True, must be an integer",
    '[{"head_dim": 64, "d_chunk": -64}]': "d_chunk=-64, must be an integer >= 0",
    '[{"head_dim": "512"}]': "head_dim='512', must be an integer",
    '[{"head_dim": 64, "min_batch": 8, "max_batch": 2}]': "min_batch=8 > max_batch=2",
}


@pytest.mark.parametrize("content", list(BAD_TUNING_FILES))
def test_bad_tuning_files_are_named(tmp_path, content):
    path = write_rows(tmp_path, content)
    with pytest.raises(ValueError) as e:
        tilings.tuning_file_rows(path)
    message = str(e.value)
    assert BAD_TUNING_FILES[content] in message and path in message and "unset" in message, message
    with pytest.raises(ValueError, match="cannot read"):
        tilings.tuning_file_rows(str(tmp_path / "missing.json"))


# fp8 KV caches. Queries in fp16 under the interpreter (it garbles bf16), bf16 on a GPU. The reference reads the
# cache as SGLang's extend kernel does; the kernel's fp8 cast of the softmax weights (SGLang's too) is what the
# tolerance covers: ~1e-2 (e4m3, 3 mantissa bits) and ~2e-2 (e5m2, 2) measured.
FP8_QUERIES = torch.bfloat16 if DEVICE == "cuda" else torch.float16
FP8_LIMIT = {torch.float8_e4m3fn: 2.5e-2, torch.float8_e5m2: 4e-2}
FP8_CASES = {
    # name: (context lengths, block lengths, make_case kwargs (kv_dtype, scales, shapes), Tuning kwargs, splits);
    # parameters combined, not crossed: both formats, k_scale != v_scale, windows, head dims 128/256/512, contexts
    # that are no multiple of any tile, score slices and value parts, the block in a split of its own
    "global-512-e4m3-k=v": (
        [70, 0, 33],
        [16, 16, 9],
        dict(num_heads=8, num_kv_heads=1, head_dim=512, k_eq_v=True, kv_dtype=torch.float8_e4m3fn, k_scale=1.7,
             v_scale=1.7, amplitude=1.7),
        dict(block_n=32, d_chunk=128, dv_parts=2, block_split=1),
        2,
    ),
    "sliding-256-e5m2-window-lists": (
        window_lists([5, 24, 25, 90], 24),
        [16, 16, 16, 16],
        dict(num_heads=4, num_kv_heads=2, head_dim=256, window=24, kv_dtype=torch.float8_e5m2, k_scale=2.5,
             v_scale=0.4, amplitude=2.0),
        dict(block_n=32),
        None,
    ),
    "draft-128-e4m3-window-noncausal": (
        [40, 130],
        [16, 16],
        dict(num_heads=8, num_kv_heads=1, head_dim=128, causal=False, window=30, kv_dtype=torch.float8_e4m3fn,
             k_scale=0.6, v_scale=3.0),
        dict(block_n=32),
        3,
    ),
    "draft-128-e5m2-whole-context": (
        [37, 101],
        [16, 11],
        dict(num_heads=8, num_kv_heads=1, head_dim=128, causal=False, kv_dtype=torch.float8_e5m2, k_scale=3.0,
             v_scale=0.25, amplitude=3.0),
        dict(block_n=64, d_chunk=32),
        1,
    ),
}  # fmt: skip


def fp8_case(name: str, seed: int = 0):
    ctx, blocks, kwargs, tuning_kwargs, splits = FP8_CASES[name]
    case = make_case(ctx, blocks, dtype=FP8_QUERIES, device=DEVICE, seed=seed, **kwargs)
    return case, tilings.Tuning(min_split=32, **tuning_kwargs), splits


@pytest.mark.parametrize("name", list(FP8_CASES))
def test_fp8_cache_matches_reference(name):
    """An fp8 cache read as SGLang's extend kernel reads it: q cast to the cache's type for the context's dot, the
    context's scores times ``k_scale`` and values times ``v_scale``, the block's own unquantized and unscaled."""
    case, tuning, splits = fp8_case(name)
    err = rel_err(run_kernel(case, splits=splits, tuning=tuning), reference(case))
    assert err < FP8_LIMIT[case.k_buffer.dtype], f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("name", list(FP8_CASES))
def test_fp8_scale_faults_fail_the_reference(name):
    """The fp8 tolerance is tight enough to catch a scale applied twice (k_scale squared) or not applied (v_scale
    1): the same faults planted in the kernel's code failed every case above (errors 0.22-2.6)."""
    case, tuning, splits = fp8_case(name)
    ref, limit = reference(case), FP8_LIMIT[case.k_buffer.dtype]
    run = dict(splits=splits, tuning=tuning)
    twice = run_kernel(dataclasses.replace(case, k_scale=case.k_scale**2), **run)
    missing = run_kernel(dataclasses.replace(case, v_scale=1.0), **run)
    assert rel_err(twice, ref) > 5 * limit and rel_err(missing, ref) > 5 * limit


@pytest.mark.parametrize("name", list(FP8_CASES))
def test_fp8_dots_in_16_bits_take_the_same_products(name):
    """``fp8_dot16``: q and the weights rounded to the cache's type, then dotted in q's type with the cache raised to
    it: the fp8 dots' products exactly, so both answers agree to the accumulation's rounding (1e-3, far inside the
    fp8 tolerance; dropping either rounding to fp8 moves the answer by about 1e-2)."""
    case, tuning, splits = fp8_case(name)
    fp8 = run_kernel(case, splits=splits, tuning=tuning)
    dot16 = run_kernel(case, splits=splits, tuning=dataclasses.replace(tuning, fp8_dot16=1))
    err = rel_err(dot16, fp8.float())
    assert err < 1e-3 and rel_err(dot16, reference(case)) < FP8_LIMIT[case.k_buffer.dtype], (name, err)


def test_an_fp8_cache_gets_the_fp8_defaults(monkeypatch):
    """Without a tuning, the kernel asks `default_tuning` for an fp8 cache's tiling (not the 16-bit one)."""
    picked = []

    def spy(*args, **kwargs):
        picked.append(tilings.default_tuning(*args, **kwargs))
        return picked[-1]

    monkeypatch.setattr(block_kernel, "default_tuning", spy)
    case, _, _ = fp8_case("global-512-e4m3-k=v")
    err = rel_err(run_kernel(case), reference(case))
    assert picked == [tilings._default_tuning_fp8(512, 3)] and err < FP8_LIMIT[torch.float8_e4m3fn], (picked, err)


@pytest.fixture
def exact_fp8_casts(monkeypatch):
    exact_interpreter_fp8_casts(monkeypatch)


@pytest.mark.parametrize("name", ["sliding-256-e5m2-window-lists", "draft-128-e4m3-window-noncausal"])
def test_fp8_cache_matches_sglang_extend_kernel(name, exact_fp8_casts):
    """SGLang's own extend kernel on the same fp8 arguments (its scales as floats, its k/v the unquantized block)
    gives the same answer within the weights' fp8 rounding, and is itself as close to the reference."""
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    case, tuning, splits = fp8_case(name, seed=3)
    ours = run_kernel(case, splits=splits, tuning=tuning)
    args = case.kernel_args()
    extend_attention_fwd(*args, None, case.causal, None, case.max_block, case.k_scale, case.v_scale,
                         sm_scale=case.sm_scale, sliding_window_size=case.window)  # fmt: skip
    upstream, ref, limit = args[3], reference(case), FP8_LIMIT[case.k_buffer.dtype]
    assert rel_err(upstream, ref) < limit and rel_err(ours, upstream.float()) < limit, (
        rel_err(upstream, ref),
        rel_err(ours, upstream.float()),
    )


def test_interpreter_fp8_rounding_is_a_gpus():
    """The kernel's fp8 casts under the interpreter (``_fp8_rounded``, then the cast) give torch's (a GPU's) value
    for every fp8 value, every midpoint between two (ties to even) and random values over 12 decades."""
    if DEVICE == "cuda":
        pytest.skip("the rounding is the interpreter's only")
    import triton
    import triton.language as tl

    @triton.jit
    def cast(X, O, N, EPS: tl.constexpr, TINY: tl.constexpr, FMAX: tl.constexpr):
        offs = tl.program_id(0) * 1024 + tl.arange(0, 1024)
        x = tl.load(X + offs, mask=offs < N)
        tl.store(O + offs, block_kernel._fp8_rounded(x, True, EPS, TINY, FMAX).to(O.dtype.element_ty), mask=offs < N)

    gen = torch.Generator().manual_seed(0)
    for dtype in FP8_LIMIT:
        info = torch.finfo(dtype)
        every = torch.arange(256, dtype=torch.uint8).view(dtype).float()
        every = every[every.isfinite()].unique()
        x = torch.cat([every, (every[1:] + every[:-1]) / 2, torch.randn(4096, generator=gen) * 10.0 ** torch.arange(
            -8, 4).repeat_interleave(342)[:4096], torch.tensor([1e6, -1e6])])  # fmt: skip
        out = torch.empty(x.numel(), dtype=dtype)
        cast[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), info.eps, info.tiny, info.max)
        expected = x.clamp(-info.max, info.max).to(dtype)
        assert torch.equal(out.float(), expected.float()), dtype


def slot_offsets_error() -> float:
    """An fp8 K = V buffer of 2**22 + 64 slots of one 512-wide head (2.1 GB): the contexts' and the block's slots all
    above 2**22, so slot x row stride passes 2**31 elements; kv_indices in int32 (the kernel widens them; SGLang's
    are int64). The kernel's relative error against the reference."""
    slots, high = (1 << 22) + 64, 1 << 22
    case = make_case([20, 9], [16, 5], num_heads=8, num_kv_heads=1, head_dim=512, k_eq_v=True, dtype=FP8_QUERIES,
                     device=DEVICE, seed=5, kv_dtype=torch.float8_e4m3fn, spare_slots=64 - 50)  # fmt: skip
    big = torch.zeros(slots, 1, 512, dtype=torch.uint8, device=DEVICE).view(torch.float8_e4m3fn)
    big[high:] = case.k_buffer
    case.k_buffer = case.v_buffer = big
    case.kv_indices = (case.kv_indices + high).to(torch.int32)
    assert int(case.kv_indices.min()) * big.stride(0) >= 1 << 31
    return rel_err(run_kernel(case, splits=2, tuning=tilings.Tuning(min_split=16, block_n=32)), reference(case))


def test_fp8_cache_slot_offsets_past_two_to_the_31():
    """Slot index x row stride past 2**31 elements (a long context's pool at 512-wide heads): every offset taken from
    a slot is 64-bit. In a process of its own: a 32-bit offset reads outside the buffer and may crash it."""
    root = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path.insert(0, {str(root)!r}); import test_block_kernel as t; print(t.slot_offsets_error())"
    )
    env = dict(os.environ, **({} if DEVICE == "cuda" else {"TRITON_INTERPRET": "1"}))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    err = float(proc.stdout.strip().splitlines()[-1])
    assert err < FP8_LIMIT[torch.float8_e4m3fn], f"relative error {err:.2e}"
