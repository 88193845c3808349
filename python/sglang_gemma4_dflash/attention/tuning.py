"""The block-attention kernel's tilings: ``Tuning``, the defaults per head dim and batch, and the tuning file
(``SGLANG_GEMMA4_DFLASH_BLOCK_TUNING``) that replaces them."""

from __future__ import annotations

import dataclasses
import functools
import json
import os

TUNING_ENV = "SGLANG_GEMMA4_DFLASH_BLOCK_TUNING"  # a JSON file of tilings that replace default_tuning's


@dataclasses.dataclass(frozen=True)
class Tuning:
    m_tile: int = 32  # rows (block position x query head) per program
    block_n: int = 32  # context tokens per inner step
    min_split: int = 256  # fewest context tokens worth a split of their own
    programs_per_sm: int = 2  # splits are added until about this many programs per SM run
    max_splits: int = 32
    num_warps: int = 4
    num_stages: int = 2
    dv_parts: int = 1  # programs sharing one row tile, each with a slice of the value dim (smaller accumulators)
    d_chunk: int = 0  # >0: scores summed over head-dim slices this wide (smaller key tiles); 0: the whole head dim
    pdl: int = 0  # 1: programmatic dependent launch (sm_90+): each pass starts while the kernel before it ends
    block_split: int = 0  # 1: the block's own tokens in a split of their own where the context leaves one unused
    fp8_dot16: int = 0  # 1: an fp8 cache's dots in q's 16-bit type, on the values the fp8 dots take (same products)


def default_tuning(head_dim: int, batch: int, elem_bytes: int = 2, kv_fp8: bool = False) -> Tuning:
    """The tiling of a layer's launches: ``SGLANG_GEMMA4_DFLASH_BLOCK_TUNING``'s first row that covers the head dim
    and batch (16-bit queries only, whatever the cache), else the defaults picked from sweeps at Gemma-4-31B shapes
    (the sweeps and their figures: ``benchmarks/block_attention/README.md``); ``kv_fp8`` (an fp8 cache):
    ``_default_tuning_fp8``'s. 4-byte elements (an fp32 model) get half the key tile, row tiles of at most 64 and no
    pipelining, so the tiles still fit in shared memory."""
    tuning = _default_tuning_fp8(head_dim, batch) if kv_fp8 else _default_tuning_16bit(head_dim, batch)
    if elem_bytes > 2:
        return dataclasses.replace(
            tuning, m_tile=min(64, tuning.m_tile), block_n=max(16, tuning.block_n // 2), num_stages=1
        )
    for row in tuning_file_rows(os.environ.get(TUNING_ENV, "")):
        if row["head_dim"] == head_dim and row["min_batch"] <= batch <= row["max_batch"]:
            return row["tuning"]
    return tuning


_POW2_FIELDS = ("m_tile", "block_n", "dv_parts", "num_warps", "d_chunk")
# tl.dot's smallest tile; d_chunk 0: the whole head dim; pdl, block_split and fp8_dot16 are switches
_LEAST = {"m_tile": 16, "block_n": 16, "d_chunk": 0, "pdl": 0, "block_split": 0, "fp8_dot16": 0}


@functools.lru_cache(maxsize=4)
def tuning_file_rows(path: str) -> tuple:
    """The rows of a tuning file: a JSON list of ``{"head_dim", "min_batch", "max_batch", <Tuning fields>}`` (the
    first row that covers a layer's head dim and batch size wins; a missing Tuning field keeps its class default).
    ``bench_block_attention.py --pick-out`` writes one. Any fault raises one ValueError naming the row and field."""
    if not path:
        return ()
    fix = f"fix the file or unset {TUNING_ENV}"
    try:
        with open(path) as f:
            rows = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{TUNING_ENV}={path}: cannot read it as JSON ({e}); {fix}") from None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{TUNING_ENV}={path}: expected a non-empty JSON list of rows; {fix}")
    fields = {f.name for f in dataclasses.fields(Tuning)}
    out = []
    for i, row in enumerate(rows):
        where = f"{TUNING_ENV}={path}: row {i}"
        if not isinstance(row, dict) or "head_dim" not in row:
            raise ValueError(f"{where} is not an object with a head_dim; {fix}")
        unknown = sorted(set(row) - fields - {"head_dim", "min_batch", "max_batch"})
        if unknown:
            known = ", ".join(["head_dim", "min_batch", "max_batch", *sorted(fields)])
            raise ValueError(f"{where}: unknown fields {unknown} (known: {known}); {fix}")
        for name, value in row.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < _LEAST.get(name, 1):
                raise ValueError(f"{where}: {name}={value!r}, must be an integer >= {_LEAST.get(name, 1)}; {fix}")
            if name in _POW2_FIELDS and value & (value - 1):
                raise ValueError(f"{where}: {name}={value} is not a power of two; {fix}")
        lo, hi = row.get("min_batch", 1), row.get("max_batch", 1 << 30)
        if lo > hi:
            raise ValueError(f"{where}: min_batch={lo} > max_batch={hi}; {fix}")
        tuning = Tuning(**{k: v for k, v in row.items() if k in fields})
        out.append({"head_dim": row["head_dim"], "min_batch": lo, "max_batch": hi, "tuning": tuning})
    return tuple(out)


def _default_tuning_16bit(head_dim: int, batch: int) -> Tuning:
    if head_dim >= 512:  # the target's global layers
        if batch == 1:  # the whole query tile held once (no score slices), 8 warps; one program per SM (16 splits)
            return Tuning(64, 32, min_split=32, programs_per_sm=1, num_warps=8, num_stages=3, pdl=1, block_split=1)
        if batch < 8:  # row tile 64 + value halves + 64-wide score slices: wgmma, no spills; one program per SM
            return Tuning(64, 32, num_warps=4, num_stages=5, dv_parts=2, d_chunk=64, programs_per_sm=1, pdl=1,
                          block_split=1)  # fmt: skip
        # all 8 heads x 16 positions of a KV head in one tile (8 warps): each key tile read once per value half
        return Tuning(128, 32, num_warps=8, num_stages=3, dv_parts=2, d_chunk=64, programs_per_sm=1, pdl=1)
    if head_dim >= 256:  # the target's sliding layers; 128-wide score slices
        if batch == 1:  # few programs: smaller row tiles give more of them
            return Tuning(m_tile=16, block_n=64, num_warps=8, num_stages=5, d_chunk=128, programs_per_sm=1, pdl=1)
        return Tuning(32, 64, num_warps=4, num_stages=3, d_chunk=128, programs_per_sm=2, pdl=1, block_split=1)
    # the draft (head dim 128, 8 query heads per KV head: row tile 64 gives wgmma)
    return Tuning(m_tile=64, block_n=32 if 1 < batch < 8 else 64, num_warps=4, num_stages=3, pdl=1)


def _default_tuning_fp8(head_dim: int, batch: int) -> Tuning:
    """An fp8 cache's tilings where the 16-bit ones spill under fp8 (the values' dot in fp8 takes more registers):
    chosen from sm_90a compile resources (``scripts/kernel_resources.py --dtype fp8``: no spill, MMA kept, the KV loop
    pipelined, the planned programs per SM fitting), NOT timed on a GPU (``benchmarks/block_attention/README.md``)."""
    if head_dim >= 512:  # value halves (quarters at row tile 128) and 128-wide score slices: no spill, lookahead 1
        if batch == 1:
            return Tuning(64, 32, min_split=32, programs_per_sm=1, num_warps=8, num_stages=5, dv_parts=2, d_chunk=128,
                          pdl=1, block_split=1)  # fmt: skip
        if batch < 8:
            return Tuning(64, 32, num_warps=8, num_stages=5, dv_parts=2, d_chunk=128, programs_per_sm=1, pdl=1,
                          block_split=1)  # fmt: skip
        return Tuning(128, 32, num_warps=8, num_stages=5, dv_parts=4, d_chunk=128, programs_per_sm=1, pdl=1)
    if head_dim >= 256 and batch > 1:  # key tile 32: the 16-bit tiling's 64 spills
        return Tuning(32, 32, num_warps=4, num_stages=3, d_chunk=128, programs_per_sm=2, pdl=1, block_split=1)
    return _default_tuning_16bit(head_dim, batch)  # sliding at batch 1, the draft: no spill under fp8 either
