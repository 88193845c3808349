"""Compile SGLang's triton kernels on the Gemma 4 DFLASH path for an H100/H200 (sm_90) here, without a GPU, with
the Triton of this environment: does a line's kernel source compile with the GPU machine's Triton (3.6)?

    python scripts/compile_sglang_kernels.py --out benchmarks/line_0523/triton36_compile_0.5.23.json
    CUDA_HOME=... python scripts/compile_sglang_kernels.py --cuda-jit --only jit --out FILE

With --cuda-jit, the CUDA kernels SGLang 0.5.2x builds at first use (``sglang.kernels.jit``: nvcc, then tvm-ffi)
are built too, for sm_90a with the nvcc under CUDA_HOME, and loaded; a line without that JIT has them `n/a`.

Run it with the GPU machine's Python, torch and Triton (3.12, 2.11, 3.6.0) and the line's SGLang on the path, e.g. a
site unpacked from .gpu-site/LINE (scripts/gpu/setup_site.sh). Each wrapper is called as the triton backend, the
Gemma 4 layers and the DFLASH worker call it, on CPU tensors at the shapes below; every kernel it launches is
compiled for sm_90 (as the JIT specialises it: the wrapper's own constexprs, dtypes and alignment) and then not
launched. A compile says nothing of the kernel's answers or speed; a failure is a kernel that cannot run on that
Triton at all. Wrappers that choose tilings by the device are told it is a CUDA 9.0 device.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

SM90 = GPUTarget("cuda", 90, 32)
# Gemma-4-31B's attention layers and z-lab's 31B draft (heads, kv heads, head dim, window), the tiny target's
LAYERS = {
    "31b-sliding": (32, 16, 256, 1024),
    "31b-global": (32, 4, 512, -1),
    "31b-draft": (64, 8, 128, -1),
    "31b-draft-sliding": (64, 8, 128, 2048),
    "tiny": (4, 2, 64, 16),
    "tiny-draft": (12, 12, 64, -1),
}
BLOCK = 16  # DFLASH block tokens


def clipped(error: Exception) -> str:
    """An error for a row: its head (what failed to build, the command) and its tail (the compiler's message)."""
    text = f"{type(error).__name__}: {str(error).strip()}"
    return text if len(text) <= 1500 else f"{text[:500]} [...] {text[-1000:]}"


class CompileOnlyDriver:
    """What Triton's JIT asks of the driver before a launch, answered for one sm_90 device."""

    def get_current_target(self):
        return SM90

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


class Compiles:
    """Every kernel a wrapper launches, compiled and not launched: (scenario, kernel) -> error or None."""

    def __init__(self):
        self.rows, self.scenario = [], None

    def record(self, fn, kernel, error):
        name = f"{fn.module}.{fn.fn.__qualname__}"
        row = {"scenario": self.scenario, "kernel": name, "compiled": error is None}
        if error is None:
            row |= {"shared_bytes": kernel.metadata.shared, "num_warps": kernel.metadata.num_warps}
        else:
            row["error"] = error
        if row not in self.rows:
            self.rows.append(row)

    @contextlib.contextmanager
    def installed(self):
        jit_run, active = JITFunction.run, driver._active

        def run(fn, *args, grid, warmup, **kwargs):
            try:
                kernel = jit_run(fn, *args, grid=grid, warmup=True, **kwargs)
            except Exception as e:  # a compile error, as the launch would raise it
                self.record(fn, None, clipped(e))
                return None
            self.record(fn, kernel, None)
            return None

        driver.set_active(CompileOnlyDriver())
        JITFunction.run = run
        try:
            yield self
        finally:
            JITFunction.run = jit_run
            driver._active = active  # None: Triton finds the machine's driver on next use


class NoLaunch:
    """A built JIT module as a wrapper sees it: each of its functions records the call and launches nothing."""

    def __init__(self, builds, name):
        self._builds, self._name = builds, name

    def __getattr__(self, function):
        return lambda *args, **kwargs: self._builds.used(self._name, function)


class JitBuilds:
    """SGLang's CUDA JIT (0.5.2x's ``sglang.kernels.jit``) for each module a wrapper asks for: built for sm_90a with
    the nvcc under CUDA_HOME, into a fresh cache so that every build is real, and loaded through tvm-ffi; the wrapper
    then gets a NoLaunch. A row per (scenario, module function) the wrapper calls; a failed build is a failed row."""

    def __init__(self):
        self.active, self.compiles, self.built = False, None, {}

    def load(self, *args, **kwargs):
        name = "_".join(map(str, args))  # as SGLang names the module: sgl_kernel_jit_<name>
        start = time.perf_counter()
        try:
            self.real_load(*args, **kwargs)
        except Exception as e:
            self.compiles.rows.append({"scenario": self.compiles.scenario, "kernel": f"jit {name}", "compiled": False,
                                       "error": clipped(e)})  # fmt: skip
            raise
        gencode = set()
        for ninja in Path(self.cache).glob(f"*/sgl_kernel_jit_{name}/build-*/*/build.ninja"):
            gencode.update(f for f in ninja.read_text().split() if f.startswith("-gencode="))
        self.built[name] = {"build_seconds": round(time.perf_counter() - start, 1), "gencode": sorted(gencode)}
        return NoLaunch(self, name)

    def used(self, name, function):
        row = {"scenario": self.compiles.scenario, "kernel": f"jit {name}.{function}", "compiled": True}
        row |= self.built[name]
        if row not in self.compiles.rows:
            self.compiles.rows.append(row)

    @contextlib.contextmanager
    def installed(self, compiles, cache_dir: str | None = None):
        """cache_dir: keep the builds there (SGLang's JIT cache, for servers to find); default a fresh temporary one."""
        arch = importlib.import_module("sglang.kernels.jit.utils.arch")
        self.real_load = importlib.import_module("sglang.kernels.jit.utils").load_jit
        self.compiles, self.active, is_cuda = compiles, True, getattr(arch, "is_cuda", None)
        if is_cuda:  # 0.5.2x: the activation build's fast-math flags, as on the GPU
            arch.is_cuda = lambda: True
        temporary = contextlib.nullcontext(cache_dir) if cache_dir else tempfile.TemporaryDirectory()
        before = os.environ.get("SGLANG_JIT_CACHE_DIR")
        with temporary as cache, arch.override_jit_cuda_arch(9, 0):
            os.environ["SGLANG_JIT_CACHE_DIR"] = self.cache = cache
            try:
                yield self
            finally:
                if is_cuda:
                    arch.is_cuda = is_cuda
                self.active = False
                os.environ.pop("SGLANG_JIT_CACHE_DIR")
                if before is not None:
                    os.environ["SGLANG_JIT_CACHE_DIR"] = before


JIT = JitBuilds()


class Absent(Exception):
    """The line has no such kernel module or wrapper: the scenario is not applicable, not failed."""


def kernels(module_name: str, *names: str):
    """Wrappers of a kernel module of this line (under sglang.kernels.ops), the module told it runs on a CUDA 9.0
    device where it reads that at import."""
    path = f"sglang.kernels.ops.{module_name}"
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as e:
        if not path.startswith(e.name or "?"):  # the module exists; something it imports does not
            raise
        raise Absent(f"no {path}") from e
    if hasattr(module, "_is_cuda"):
        module._is_cuda = True
        module.CUDA_CAPABILITY = (9, 0)
    if JIT.active and hasattr(module, "load_jit"):
        module.load_jit = JIT.load
    return [getattr(module, n) for n in having(module, path, names)]


def having(module, path: str, names) -> tuple:
    """names, if the module has them all; else Absent: this line has no such wrapper."""
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise Absent(f"{path} has no {', '.join(missing)}")
    return names


def server_module(path: str, *names: str):
    """A module of SGLang's server (sglang.srt.PATH), told it runs on CUDA where it read the device at import."""
    module = importlib.import_module(f"sglang.srt.{path}")
    having(module, f"sglang.srt.{path}", names)
    if hasattr(module, "_is_cuda"):
        module._is_cuda = True
    if hasattr(module, "_is_cpu"):
        module._is_cpu = False
    return module


@contextlib.contextmanager
def tensors_say_cuda():
    """For wrappers that assert ``x.is_cuda`` before launching."""
    torch.Tensor.is_cuda = property(lambda self: True)
    try:
        yield
    finally:
        del torch.Tensor.is_cuda


def kv_case(layer: str, prefix: int, extend: int, batch: int, cache: torch.dtype):
    heads, kv_heads, d, window = LAYERS[layer]
    slots = batch * (prefix + extend) + 64
    kv_lens = [prefix + extend] * batch
    return {
        "q": torch.zeros(batch * extend, heads, d, dtype=torch.bfloat16),
        "k": torch.zeros(batch * extend, kv_heads, d, dtype=torch.bfloat16),
        "v": torch.zeros(batch * extend, kv_heads, d, dtype=torch.bfloat16),
        "o": torch.zeros(batch * extend, heads, d, dtype=torch.bfloat16),
        "k_buffer": torch.zeros(slots, kv_heads, d, dtype=cache),
        "v_buffer": torch.zeros(slots, kv_heads, d, dtype=cache),
        "qo_indptr": torch.arange(batch + 1, dtype=torch.int32) * extend,
        "kv_indptr": torch.tensor([0, *torch.tensor(kv_lens).cumsum(0).tolist()], dtype=torch.int32),
        "kv_indices": torch.arange(sum(kv_lens), dtype=torch.int64),
        "window": window,
        "d": d,
        "heads": heads,
    }


def extend(layer: str, cache: torch.dtype, mode: str):
    """mode: prefill (causal, no prefix), verify (a prefix and a causal block), mask (0.5.11-0.5.13's custom verify
    mask), draft (the draft's non-causal block over its context)."""
    (extend_attention_fwd,) = kernels("attention.extend_attention", "extend_attention_fwd")
    prefix, n, batch = (0, 256, 1) if mode == "prefill" else (1000, BLOCK, 2)
    case = kv_case(layer, prefix, n, batch, cache)
    mask = torch.ones(batch * n * (prefix + n), dtype=torch.bool) if mode == "mask" else None
    offsets = torch.zeros(batch, dtype=torch.int32) if mask is not None and case["window"] > 0 else None
    extend_attention_fwd(
        case["q"], case["k"], case["v"], case["o"], case["k_buffer"], case["v_buffer"],
        case["qo_indptr"], case["kv_indptr"], case["kv_indices"], mask, mode != "draft",
        torch.arange(batch + 1, dtype=torch.int64) * n * (prefix + n) if mask is not None else None,
        n, 1.0, 1.0, case["d"] ** -0.5, sliding_window_size=case["window"], window_kv_offsets=offsets,
    )  # fmt: skip


def decode(layer: str, cache: torch.dtype):
    (decode_attention_fwd,) = kernels("attention.decode_attention", "decode_attention_fwd")
    batch, splits = 4, 8
    case = kv_case(layer, 1000, 1, batch, cache)
    logits = torch.zeros(batch, case["heads"], splits, case["d"], dtype=torch.float32)
    lse = torch.zeros(batch, case["heads"], splits, dtype=torch.float32)
    num_splits = torch.full((batch,), splits, dtype=torch.int32)
    decode_attention_fwd(
        case["q"], case["k_buffer"], case["v_buffer"], case["o"], case["kv_indptr"], case["kv_indices"],
        logits, lse, num_splits, splits, case["d"] ** -0.5, 1.0, 1.0,
    )  # fmt: skip


def gemma4_norms(layer: str, tokens: int):
    """The fused q/k/v RMSNorm on strided slices of one qkv row (per head at <= 256 tokens, per token above), and
    the fused residual norms of a decoder layer."""
    qkv_norm, norm, dual_norm = kernels(
        "layernorm.gemma4_fused_ops",
        "gemma_qkv_rmsnorm",
        "gemma_rmsnorm_residual_scalar",
        "gemma_dual_rmsnorm_residual_scalar",
    )
    heads, kv_heads, d, _ = LAYERS[layer]
    qkv = torch.zeros(tokens, (heads + 2 * kv_heads) * d, dtype=torch.bfloat16)
    q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    weight = torch.ones(d, dtype=torch.bfloat16)
    with tensors_say_cuda():
        qkv_norm(q, k, v, weight, weight, num_q_heads=heads, num_kv_heads=kv_heads, head_dim=d)
        qkv_norm(q, None, None, weight, None, num_q_heads=heads, num_kv_heads=kv_heads, head_dim=d)
    hidden = 5376 if layer.startswith("31b") else 256
    x, w = torch.zeros(tokens, hidden, dtype=torch.bfloat16), torch.ones(hidden, dtype=torch.bfloat16)
    scalar = torch.ones(1, dtype=torch.bfloat16)
    norm(x, w, x.clone(), scalar)
    dual_norm(x, w, x.clone(), w, w, x.clone(), scalar)


def gemma4_routing(tokens: int):
    """Gemma-4-26B-A4B's router: 128 experts, top 8."""
    fused, post_topk = kernels("moe.gemma4_routing", "gemma4_fused_routing", "gemma_routing_post_topk")
    logits, scale = torch.zeros(tokens, 128, dtype=torch.bfloat16), torch.ones(128, dtype=torch.bfloat16)
    fused(logits, scale, 8)
    post_topk(torch.zeros(tokens, 8), torch.zeros(tokens, 8, dtype=torch.int64), scale)


def dflash_steps(batch: int):
    """The DFLASH v2 worker's own kernels: the draft block's ids, positions and cache slots; accept and bonus; the
    verify's cache slots; the compact draft's req_to_token."""
    prepare, accept, correct = kernels(
        "speculative.dflash",
        "_prepare_dflash_draft_block_unchecked",
        "_compute_dflash_accept_bonus_triton_unchecked",
        "compute_dflash_correct_drafts_and_bonus",
    )
    assign, rebuild = kernels(
        "speculative.cache_locs", "assign_extend_cache_locs_func", "rebuild_compact_draft_req_to_token_func"
    )
    req_to_token = torch.zeros(64, 4096, dtype=torch.int32)
    pool = torch.arange(batch, dtype=torch.int64)
    prefix_lens = torch.full((batch,), 100, dtype=torch.int64)
    blocks = [torch.zeros(batch, BLOCK, dtype=torch.int64) for _ in range(3)]
    prepare(torch.zeros(batch, dtype=torch.int64), prefix_lens, pool, req_to_token, *blocks, mask_token_id=4)
    lens = [torch.zeros(batch, dtype=torch.int32) for _ in range(2)]
    accept(
        blocks[0], blocks[1], lens[0], lens[1], torch.zeros(batch, dtype=torch.int64), blocks[2], prefix_lens,
        torch.zeros(batch, dtype=torch.int64),
    )  # fmt: skip
    with tensors_say_cuda():
        correct(candidates=blocks[0], target_predict=blocks[1])
    assign(
        req_pool_indices=pool, req_to_token=req_to_token, start_offset=prefix_lens, end_offset=prefix_lens + BLOCK,
        batch_size=batch, draft_token_num=BLOCK, device="cpu",
    )  # fmt: skip
    rebuild(
        draft_req_to_token=req_to_token.clone(), target_req_to_token=req_to_token, req_pool_indices=pool,
        suffix_start=prefix_lens, draft_prefix_lens=prefix_lens, verify_out_cache_loc_2d=blocks[2],
        batch_size=batch, block_size=BLOCK,
    )  # fmt: skip


def draft_qk_norm_rope(layer: str, tokens: int):
    """The DFlash draft's q/k RMSNorm and RoPE in place on its fused qkv (DFlashAttention on CUDA: bf16, RoPE over
    the whole head, NeoX style)."""
    (qk_norm_rope,) = kernels("attention.table_qk_norm_rope", "table_qk_norm_rope_")
    heads, kv_heads, d, _ = LAYERS[layer]
    qkv = torch.zeros(tokens, (heads + 2 * kv_heads) * d, dtype=torch.bfloat16)
    weight, cos_sin = torch.ones(d, dtype=torch.bfloat16), torch.zeros(4096, d, dtype=torch.float32)
    qk_norm_rope(qkv, torch.zeros(tokens, dtype=torch.int64), weight, weight, cos_sin, heads, kv_heads, d, 1e-6)


def logits_softcap(vocab: int):
    """Gemma 4's final logit softcap (30) on bf16 logits, cast to fp32 in the same pass (LogitsProcessor on CUDA)."""
    (softcap_to_fp32,) = kernels("activation.softcap", "softcap_to_float32_logits")
    logits = torch.zeros(16, vocab, dtype=torch.bfloat16)
    softcap_to_fp32(logits, 30.0, torch.empty(16, vocab, dtype=torch.float32))


def extend_positions(batch: int):
    """A prefill's or a draft extend's positions and start offsets (ForwardBatch under the triton backend)."""
    (compute_position,) = kernels("attention.position", "compute_position_triton")
    lens = torch.full((batch,), 100, dtype=torch.int32)
    compute_position(lens, lens, int(lens.sum()))


def decode_kv_splits(layer: str, batch: int):
    """The triton backend's split count per request for a decode (its metadata, one program)."""
    (kv_splits,) = kernels("attention.metadata", "get_num_kv_splits_triton")
    heads, kv_heads, _, _ = LAYERS[layer]
    splits, seq_lens = torch.zeros(batch, dtype=torch.int32), torch.full((batch,), 1000, dtype=torch.int64)
    kv_splits[(1,)](splits, seq_lens, batch, heads // kv_heads, heads, kv_heads, 8, 132, MAX_NUM_SEQ=256)


def draft_kv_materialize(layer: str, layers: int, tokens: int):
    """The DFLASH v2 worker's draft K/V from the target's hidden states: every draft layer's k norm and RoPE in one
    kernel over the stacked projection (FusedKVMaterializeHelper on CUDA)."""
    (norm_rope,) = kernels("speculative.fused_kv_materialize", "_fused_norm_rope_stacked")
    _, kv_heads, d, _ = LAYERS[layer]
    kv = torch.zeros(tokens, layers, 2 * kv_heads * d, dtype=torch.bfloat16)
    weights, eps = torch.ones(layers, d, dtype=torch.bfloat16), torch.full((layers,), 1e-6)
    norm_rope(kv, weights, eps, torch.zeros(4096, d), torch.zeros(tokens, dtype=torch.int64), kv_heads, d, d)


def req_to_token_slots(batch: int):
    """A request's new cache slots into req_to_token (every prefill and extend: the allocator on a GPU)."""
    allocation = server_module("mem_cache.allocation", "assign_req_to_token_pool_func")
    start, end = torch.full((batch,), 100, dtype=torch.int64), torch.full((batch,), 100 + BLOCK, dtype=torch.int64)
    allocation.assign_req_to_token_pool_func(
        torch.arange(batch), torch.zeros(64, 4096, dtype=torch.int32), start, end,
        torch.arange(batch * BLOCK, dtype=torch.int64), batch,
    )  # fmt: skip


def jit_rope(layer: str):
    """Gemma 4's RoPE as its attention builds it (get_rope: plain on sliding layers, proportional on full ones)
    and runs it on CUDA (RotaryEmbedding.forward_cuda)."""
    (apply_rope,) = kernels("attention.rope", "apply_rope_with_cos_sin_cache_inplace")
    base = server_module("layers.rotary_embedding.base")
    base.apply_rope_with_cos_sin_cache_inplace = apply_rope  # as it imports it on a CUDA machine
    get_rope = server_module("layers.rotary_embedding", "get_rope").get_rope
    heads, kv_heads, d, window = LAYERS[layer]
    kind, theta, partial = ("default", 1e4, 1.0) if window > 0 else ("proportional", 1e6, 0.25)
    rope = get_rope(d, rotary_dim=d, max_position=4096, base=theta, rope_scaling={"rope_type": kind},
                    partial_rotary_factor=partial, is_neox_style=True)  # fmt: skip
    q, k = torch.zeros(16, heads * d, dtype=torch.bfloat16), torch.zeros(16, kv_heads * d, dtype=torch.bfloat16)
    with tensors_say_cuda(), torch.no_grad():
        rope.forward_cuda(torch.zeros(16, dtype=torch.int64), q, k)


def jit_act_and_mul(gelu_width: int, silu_width: int):
    """Gemma 4's MLP (GeluAndMul, tanh) and the DFlash draft's (SiluAndMul) on CUDA: the JIT kernel, which SGLang
    takes for widths that are a multiple of 8 bf16 (all of these)."""
    silu, gelu_tanh = kernels("activation.activation", "silu_and_mul", "gelu_tanh_and_mul")
    with tensors_say_cuda(), torch.no_grad():
        for act, width in ((gelu_tanh, gelu_width), (silu, silu_width)):
            act(torch.zeros(16, 2 * width, dtype=torch.bfloat16), torch.zeros(16, width, dtype=torch.bfloat16))


def jit_kv_store(layer: str, cache: torch.dtype):
    """A layer's K and V into SGLang's MHA token pool on CUDA (the target's sliding and full pools, the draft's):
    the pool's _set_kv_buffer_impl, which takes the JIT store_cache where it builds for the row width."""
    kernels("kvcache.kvcache", "store_cache", "can_use_store_cache")
    pool = server_module("mem_cache.memory_pool", "_set_kv_buffer_impl")
    _, kv_heads, d, _ = LAYERS[layer]
    store = torch.uint8 if cache.itemsize == 1 else cache  # SGLang stores an fp8 cache as bytes
    k, v = (torch.zeros(16, kv_heads, d, dtype=store) for _ in range(2))
    k_cache, v_cache = (torch.zeros(64, kv_heads, d, dtype=store) for _ in range(2))
    with tensors_say_cuda(), torch.no_grad():
        pool._set_kv_buffer_impl(k, v, k_cache, v_cache, torch.arange(16), row_dim=kv_heads * d, store_dtype=store,
                                 device_module=None, size_limit=64)  # fmt: skip


def jit_clamp_position():
    """Decode and verify positions on CUDA (ForwardBatch: clamp(seq_lens - 1, min=0), int64 seq_lens)."""
    (clamp_position,) = kernels("attention.clamp_position", "clamp_position_cuda")
    with tensors_say_cuda():
        clamp_position(torch.full((4,), 100, dtype=torch.int64))


def scenarios(cuda_jit: bool = False):
    fp8 = torch.float8_e4m3fn
    for layer in LAYERS:
        caches = {"bf16": torch.bfloat16} if "draft" in layer else {"bf16": torch.bfloat16, "fp8": fp8}
        for cache_name, cache in caches.items():
            modes = ("draft",) if "draft" in layer else ("prefill", "verify", "mask")
            for mode in modes:
                yield f"extend {mode} {layer} {cache_name} cache", lambda la=layer, c=cache, m=mode: extend(la, c, m)
            if "draft" not in layer:
                yield f"decode {layer} {cache_name} cache", lambda la=layer, c=cache: decode(la, c)
    for layer in ("31b-sliding", "31b-global", "tiny"):
        for tokens in (16, 1024):
            yield f"gemma4 norms {layer} {tokens} tokens", lambda la=layer, t=tokens: gemma4_norms(la, t)
    yield "gemma4 routing (26B-A4B)", lambda: gemma4_routing(64)
    yield "dflash worker v2 steps", lambda: dflash_steps(4)
    for layer, layers in (("31b-draft", 5), ("tiny-draft", 1)):
        yield f"dflash draft qk norm rope {layer}", lambda la=layer: draft_qk_norm_rope(la, 64)
        yield f"dflash draft kv materialize {layer}", lambda la=layer, n=layers: draft_kv_materialize(la, n, 256)
    for name, vocab in (("31b", 262144), ("tiny", 320)):
        yield f"logits softcap {name}", lambda v=vocab: logits_softcap(v)
    yield "extend positions", lambda: extend_positions(4)
    yield "req_to_token slots", lambda: req_to_token_slots(4)
    for layer in ("31b-sliding", "31b-global", "tiny"):
        yield f"decode kv splits {layer}", lambda la=layer: decode_kv_splits(la, 4)
    if not cuda_jit:
        return
    for layer in ("31b-sliding", "31b-global", "tiny"):
        yield f"jit rope {layer}", lambda la=layer: jit_rope(la)
    yield "jit act-and-mul 31b (gelu_tanh 21504, draft silu 10752)", lambda: jit_act_and_mul(21504, 10752)
    for layer, caches in (("31b-sliding", "bf16 fp8"), ("31b-global", "bf16 fp8"), ("31b-draft", "bf16"),
                          ("tiny", "bf16 fp8"), ("tiny-draft", "bf16")):  # fmt: skip
        for cache_name in caches.split():
            cache = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}[cache_name]
            yield f"jit kv store {layer} {cache_name} cache", lambda la=layer, c=cache: jit_kv_store(la, c)
    yield "jit clamp position", jit_clamp_position


def nvcc_version() -> str:
    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except OSError as e:
        return f"none: {e}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="JSON file for the rows (default: stdout only)")
    parser.add_argument("--only", default="", help="scenarios whose name contains this")
    parser.add_argument("--cuda-jit", action="store_true", help="also build the CUDA JIT kernels (nvcc on CUDA_HOME)")
    parser.add_argument(
        "--jit-cache", help="keep the CUDA JIT builds in this SGLang JIT cache (default: a temporary one)"
    )
    args = parser.parse_args()
    import sglang

    compiles = Compiles()
    has_jit = importlib.util.find_spec("sglang.kernels.jit") is not None
    with contextlib.ExitStack() as stack:
        stack.enter_context(compiles.installed())
        if args.cuda_jit and has_jit:  # a line without it has the JIT scenarios n/a
            stack.enter_context(JIT.installed(compiles, args.jit_cache))
        for name, call in scenarios(args.cuda_jit):
            if args.only not in name:
                continue
            compiles.scenario = name
            try:
                call()
            except Absent as e:  # not on this line
                compiles.rows.append({"scenario": name, "kernel": None, "compiled": None, "absent": str(e)})
            except Exception:  # the wrapper itself failed before or after its launches
                compiles.rows.append({"scenario": name, "kernel": None, "compiled": False,
                                      "error": traceback.format_exc(limit=3)[-1500:]})  # fmt: skip
    failed = [r for r in compiles.rows if r["compiled"] is False]
    jit = [r for r in compiles.rows if (r["kernel"] or "").startswith("jit ")]
    report = {
        "what": "SGLang's triton kernels on the Gemma 4 DFLASH path, compiled for sm_90 without a GPU"
        + (", and its CUDA JIT kernels built for sm_90a" if args.cuda_jit else ""),
        "sglang": sglang.__version__,
        "triton": triton.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "target": f"{SM90.backend} sm_{SM90.arch}",
        **({"nvcc": nvcc_version()} if args.cuda_jit else {}),
        "kernels": sorted({r["kernel"] for r in compiles.rows if r["kernel"]}),
        "compiled": sum(r["compiled"] is True for r in compiles.rows),
        "jit_built": sum(r["compiled"] is True for r in jit),
        "jit_modules": len(JIT.built),
        "failed": len(failed),
        "rows": compiles.rows,
    }
    for row in compiles.rows:
        status = {True: "ok  ", False: "FAIL", None: "n/a "}[row["compiled"]]
        print(
            f"{status} {row['scenario']}: {row['kernel']}",
            (row.get("error") or row.get("absent") or "").splitlines()[-1:] or "",
        )
    print(f"sglang {report['sglang']}, triton {report['triton']}: {report['compiled']} compiles of "
          f"{len(report['kernels'])} kernels ({report['jit_built']} of them calls into {report['jit_modules']} "
          f"CUDA JIT modules), {len(failed)} failures")  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
