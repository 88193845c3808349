"""Compile the block-attention kernel for an H200 (sm_90a) here, without a GPU, and report what each tuning costs:
shared memory, registers, spill stack, wgmma or mma.sync, how many blocks fit on one SM, and how far the KV loop's
copies run ahead of its arithmetic.

    python scripts/kernel_resources.py --out benchmarks/sm90_block_kernel_resources.json            # the defaults
    python scripts/kernel_resources.py --dtype fp8      # an fp8 cache's defaults (bf16 q, e4m3 cache)
    python scripts/kernel_resources.py --variants target-global:32,64,8,3,1,64     # m,n,warps,stages,dv_parts,d_chunk
    python scripts/kernel_resources.py --dtype fp8 --variants target-global:64,32,4,5,2,64,1   # ...,fp8_dot16

The kernel is compiled as Triton's JIT specialises it at run time: every pointer 16-byte aligned and every stride a
multiple of 16 (true of SGLang's caches and of q, k and v at Gemma 4's head dims). Without that (before 2026-12-04)
the compiler could not use asynchronous copies, did not pipeline the KV loop and spilled: those figures were not the
GPU's. ``lookahead``: how many iterations of the KV loop have their copies in flight while one tile is computed (the
first ``cp.async`` wait in the loop over the copy groups each iteration issues); 0 means every iteration waits for
its own loads. Triton's own ptxas compiles and `cuobjdump` reads the cubin, so the figures are those of the Triton
that runs it: use the GPU machine's Triton (3.6 for SGLang 0.5.11-0.5.17: `pip install triton==3.6.0` into a bare
venv). Torch is not needed to compile; where it is missing a placeholder module stands in while the kernel module
loads. Layer kinds and shapes are bench_block_attention.py's (Gemma-4-31B target and z-lab's 31B draft).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import types

PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
KERNEL = os.path.join(PYTHON, "sglang_gemma4_dflash", "attention", "block_kernel.py")
GRIDS = {  # --grid: the tunings compiled per kind (m_tile, block_n, num_warps, num_stages, dv_parts, d_chunk)
    "target-global": ((32, 64), (16, 32, 64), (4, 8), (3, 5, 7), (1, 2), (0, 64)),
    "target-sliding": ((16, 32, 64), (32, 64), (4, 8), (3, 5, 7), (1,), (0, 128)),
    "draft": ((64,), (32, 64), (4, 8), (3, 5, 7), (1,), (0,)),
}
KINDS = {  # num_heads, num_kv_heads, head_dim, window, causal; the batch classes default_tuning tells apart
    "target-sliding": (32, 16, 256, 1023, True, (1, 4)),
    "target-global": (32, 4, 512, -1, True, (1, 4, 16)),
    "draft": (64, 8, 128, 2047, False, (1, 4, 16)),
}


def load_kernel_module(path: str = KERNEL):
    """block_kernel.py by path (an experiment's copy, say); its tilings come from the package's tuning.py (this
    checkout's where the package is not installed)."""
    if "torch" not in sys.modules:
        try:
            import torch  # noqa: F401
        except ImportError:
            torch = sys.modules["torch"] = types.ModuleType("torch")  # the kernels need Triton only
            torch.float8_e4m3fn = torch.float8_e5m2 = None  # what block_kernel reads of torch at import
    tilings()
    spec = importlib.util.spec_from_file_location("block_kernel_for_resources", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def tilings():
    """The package's tuning module (Tuning, default_tuning)."""
    try:
        return importlib.import_module("sglang_gemma4_dflash.attention.tuning")
    except ImportError:
        sys.path.insert(0, PYTHON)
        return importlib.import_module("sglang_gemma4_dflash.attention.tuning")


SM_SHARED_BYTES = 228 * 1024  # an H200 SM's shared memory; each resident block also takes 1 KB for the system
SM_REGISTERS = 65536
BLOCK_SHARED_LIMIT = 227 * 1024


def compile_fwd(bk, kind: str, tuning, dtype: str = "bf16") -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    heads, kv_heads, d, window, causal, _ = KINDS[kind]
    fn = bk._block_attn_fwd
    sig = {p.name: "i32" for p in fn.params if not p.is_constexpr}
    kv_fp8 = dtype == "fp8"  # bf16 queries over a float8_e4m3fn cache
    sig.update({n: "*bf16" if kv_fp8 else f"*{dtype}" for n in ("Q", "K_ext", "V_ext", "O")})
    sig.update({n: "*fp8e4nv" if kv_fp8 else f"*{dtype}" for n in ("K_buf", "V_buf")})
    sig.update({"Mid_O": "*fp32", "Mid_LSE": "*fp32", "qo_indptr": "*i32", "kv_indptr": "*i32", "kv_indices": "*i32"})
    sig.update({"ctx_qk_scale": "fp32", "blk_qk_scale": "fp32", "v_scale": "fp32"})
    constants = dict(bk.fwd_constants(heads, kv_heads, d, d, 16, tuning, window, causal, kv_fp8, kv_fp8), DIRECT=False)
    sig.update({name: "constexpr" for name in constants})
    # the run-time specialisation: aligned pointers, strides that are multiples of 16
    aligned = [i for i, p in enumerate(fn.params) if sig[p.name].startswith("*") or p.name.startswith("stride")]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    options = dict(num_warps=tuning.num_warps, num_stages=tuning.num_stages)
    compiled = triton.compile(ASTSource(fn, sig, constants, attrs), target=GPUTarget("cuda", 90, 32), options=options)
    usage = _resource_usage(compiled.asm["cubin"], os.path.dirname(triton.__file__))
    ptx = compiled.asm["ptx"]
    shared, registers = compiled.metadata.shared, usage.get("REG")
    return {
        "kind": kind,
        "dtype": dtype,
        **{k: getattr(tuning, k) for k in ("m_tile", "block_n", "num_warps", "num_stages", "dv_parts", "d_chunk")},
        "fp8_dot16": tuning.fp8_dot16,
        "programs_per_sm": tuning.programs_per_sm,  # what the split count is planned for; blocks_per_sm: what fits
        "rows_per_program": constants["M_TILE"],
        "shared_bytes": shared,
        "registers": registers,
        "stack_bytes": usage.get("STACK"),
        "mma": "wgmma" if "wgmma" in ptx else ("mma.sync" if "mma.sync" in ptx else "none"),
        "lookahead": kv_loop_lookahead(compiled.asm["ttgir"]),
        "blocks_per_sm": blocks_per_sm(shared, registers, tuning.num_warps),
    }


def kv_loop_lookahead(ttgir: str) -> int | None:
    """Iterations of the KV loop (the first loop with an MMA) whose copies may still be in flight at its first
    ``cp.async`` wait: that wait's allowance over the copy groups one iteration commits. None: the loop has no
    asynchronous copies (not pipelined)."""
    lines = ttgir.splitlines()
    first = next(
        (i for i, line in enumerate(lines) if "scf.for" in line and "dot" in " ".join(lines[i : i + 400])), None
    )
    if first is None:
        return None
    depth, body = 0, []
    for line in lines[first:]:
        depth += line.count("{") - line.count("}")
        body.append(line)
        if depth <= 0:
            break
    groups = sum("async_commit_group" in line for line in body)
    wait = next((line for line in body if "ttg.async_wait" in line), None)
    if not groups or wait is None:
        return None
    return int(wait.split("num = ")[1].split(" ")[0]) // groups


def blocks_per_sm(shared: int, registers: int | None, num_warps: int) -> int:
    """Blocks of this kernel one SM holds at once, by shared memory and registers (8-register steps per thread)."""
    if shared > BLOCK_SHARED_LIMIT:
        return 0
    by_shared = SM_SHARED_BYTES // (shared + 1024)
    by_registers = SM_REGISTERS // (-(-(registers or 255) // 8) * 8 * 32 * num_warps)
    return min(by_shared, by_registers, 32)


def _resource_usage(cubin: bytes, triton_dir: str) -> dict:
    tool = os.path.join(triton_dir, "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        text = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, check=True).stdout
    line = next(line for line in text.splitlines() if "REG:" in line)
    return {k: int(v) for k, v in (item.split(":") for item in line.split() if ":" in item and item[0].isupper())}


_WORKER_MODULE = None


def _worker_init(path: str) -> None:
    global _WORKER_MODULE
    _WORKER_MODULE = load_kernel_module(path)


def _compile_job(job: tuple) -> dict:
    kind, label, fields, dtype = job
    return {"what": label, **compile_fwd(_WORKER_MODULE, kind, tilings().Tuning(**fields), dtype)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--kernel", default=KERNEL, help="another copy of block_kernel.py (an experiment)")
    ap.add_argument("--kind", choices=sorted(KINDS), help="the layer kind of variants given without one")
    ap.add_argument(
        "--variants",
        nargs="*",
        default=[],
        help="[KIND:]m_tile,block_n,num_warps,num_stages,dv_parts[,d_chunk[,fp8_dot16]]",
    )
    ap.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp32", "fp8"),
        default="bf16",
        help="q and the KV cache's type (fp8: bf16 q, e4m3 cache)",
    )
    ap.add_argument("--with-defaults", action="store_true", help="the default tunings too, when variants are given")
    ap.add_argument(
        "--grid", nargs="*", default=[], choices=sorted(GRIDS), help="every tuning of GRIDS for these kinds"
    )
    ap.add_argument("--jobs", type=int, default=1, help="compiling processes")
    args = ap.parse_args()
    import triton

    load_kernel_module(args.kernel)  # fails here, not in the workers, where it cannot load
    tiling = tilings()
    jobs = []
    for kind in args.grid:
        for m, n, w, s, p, c in itertools.product(*GRIDS[kind]):
            tuning = tiling.Tuning(m_tile=m, block_n=n, num_warps=w, num_stages=s, dv_parts=p, d_chunk=c)
            jobs.append((kind, "grid", tuning))
    if not (args.variants or args.grid) or args.with_defaults:
        elem_bytes, kv_fp8 = 4 if args.dtype == "fp32" else 2, args.dtype == "fp8"
        for kind, (*_, d, _w, _c, batches) in KINDS.items():
            jobs += [(kind, f"default at batch {b}", tiling.default_tuning(d, b, elem_bytes, kv_fp8)) for b in batches]
    for v in args.variants:
        kind, _, fields = v.rpartition(":")
        kind = kind or args.kind
        if kind not in KINDS:
            ap.error(f"variant {v!r}: name its kind (--kind, or KIND:fields) from {sorted(KINDS)}")
        m, n, w, s, p, c, dot16 = (list(map(int, fields.split(","))) + [0, 0])[:7]
        tuning = tiling.Tuning(m_tile=m, block_n=n, num_warps=w, num_stages=s, dv_parts=p, d_chunk=c, fp8_dot16=dot16)
        jobs.append((kind, "variant", tuning))
    rows = []
    with multiprocessing.get_context("spawn").Pool(args.jobs, _worker_init, (args.kernel,)) as pool:
        for row in pool.imap(_compile_job, [(kind, label, vars(t), args.dtype) for kind, label, t in jobs]):
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {"target": "sm_90a (H200), compiled here", "triton": triton.__version__, "rows": rows}, f, indent=1
            )


if __name__ == "__main__":
    main()
