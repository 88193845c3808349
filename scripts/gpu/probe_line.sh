#!/bin/bash
# Does an SGLang line's site run on the machine's torch? One call on the GPU machine, about 8 minutes at most:
#
#   bash scripts/gpu/probe_line.sh 0.5.23            # carry .gpu-site/0.5.23 and the plugin wheel
#   CARRY=torch214 E2E_JOBS=text,mm,nokernel ACCEPT=1 DOCTOR=1 bash scripts/gpu/probe_line.sh 0.5.23
#                                                    # with the line's torch, carried by carry.sh before this call
#
# 1. facts: Python, torch, triton, the card, g++;
# 2. `source scripts/gpu/setup_site.sh LINE`; with CARRY=NAME, the carried torch unpacked before the image's
#    (carry.sh unpack NAME /tmp/NAME) and NCCL 2.30's stubs preloaded (torch_shims/build.sh nccl); then each start-up
#    import in its own interpreter (sglang, sgl_kernel, flashinfer.sampling, the model runner, the Gemma 4 models,
#    the DFLASH worker, the plugin), error tails kept (IMPORTS=0 skips them);
# 3. if sgl_kernel does not import and SHIM=auto (default; SHIM=off skips it): build the torch 2.11 shim for
#    sglang-kernel (scripts/gpu/torch_shims: the missing libtorch symbols, and the kernels routed from torch 2.11's
#    CPU key to CUDA), import again, and compare four sgl_kernel ops with torch on the card (OPS=0 skips the
#    comparison: on 0.5.23 it ends in a segfault after about a minute);
# 4. on a line with SGLang's CUDA JIT (0.5.2x): the tiny pairs' nvcc-built kernels, built side by side into the JIT
#    cache the servers read (compile_sglang_kernels.py --cuda-jit; JIT=0 skips it);
# 5. the tiny text pair (run_tiny_e2e.py --jobs E2E_JOBS --parallel, default text): plain, DFLASH with the plugin,
#    DFLASH without it, token verdicts and accept lengths (E2E=0 skips it); ACCEPT=1: the drafting pair's accept
#    length (run_tiny_accept.py, plain and the right pair); DOCTOR=1: `python3 -m sglang_gemma4_dflash.doctor`.
# Its servers listen from port 46000 up, apart from serving_options.sh's (20000-44000), so both can share a call.
# Writes $OUT/probe_LINE.json (each step: rc, seconds, error tail), probe_LINE.log, tiny_e2e_LINE.json,
# tiny_accept_LINE.json and, on a line with SGLang's CUDA JIT, cuda_jit_LINE.json (the tiny pairs' nvcc builds).
set -uo pipefail
LINE=${1:?usage: probe_line.sh LINE}
DEST=${OUT:-/tmp/probe-$LINE}
SHIM=${SHIM:-auto}
E2E=${E2E:-1}
E2E_TIMEOUT=${E2E_TIMEOUT:-330}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DEST"
STEPS=$DEST/.steps.jsonl
: >"$STEPS"
exec > >(tee "$DEST/probe_$LINE.log") 2>&1

step() {  # step NAME TIMEOUT CMD...: run, time, and record rc + the last lines of its output
  local name=$1 limit=$2 start rc; shift 2
  start=$(date +%s.%N)
  echo "== $name"
  timeout "$limit" "$@" >"$DEST/.out" 2>&1
  rc=$?
  cat "$DEST/.out"
  python3 - "$name" "$rc" "$start" "$DEST/.out" >>"$STEPS" <<'PY'
import json, sys, time
name, rc, start, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
lines = open(out, errors="replace").read().splitlines()
print(json.dumps({"step": name, "rc": rc, "seconds": round(time.time() - start, 1), "tail": lines[-25:]}))
PY
  return $rc
}

imports() {  # imports TAG MODULE...: sgl_kernel, flashinfer and the start-up modules, each group in a fresh interpreter
  local tag=$1 m; shift
  for m in "$@"; do
    step "import $m ($tag)" 180 python3 -c "import importlib, sys
for m in '$m'.split(','):
    importlib.import_module(m)
    print(m, getattr(sys.modules[m], '__version__', ''), 'imported')"
  done
}
STARTUP=sglang.srt.layers.layernorm,sglang.srt.model_executor.model_runner,sglang.srt.models.gemma4_causal,\
sglang.srt.models.gemma4_mm,sglang.srt.speculative.dflash_worker_v2,sglang_gemma4_dflash

finish() {  # the summary: probe_LINE.json
  python3 - "$LINE" "$STEPS" "$DEST" <<'PY'
import json, os, sys
line, steps, dest = sys.argv[1:]
rows = [json.loads(x) for x in open(steps)]
e2e = os.path.join(dest, f"tiny_e2e_{line}.json")
accept = os.path.join(dest, f"tiny_accept_{line}.json")
keys = ("accept_batch1", "accept_concurrent", "identical_to_plain", "follows_plant", "block_kernel_on", "error")
summary = {
    "line": line,
    "torch": os.environ.get("TORCH_HERE"), "torch_pin": os.environ.get("TORCH_PIN"),
    "shim": os.environ.get("SGL_TORCH211_SHIM"),
    "carried": os.environ.get("CARRY"), "ld_preload": os.environ.get("LD_PRELOAD"),
    "tree_core": os.environ.get("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "rust"),
    "steps": rows,
    "failed": [r["step"] for r in rows if r["rc"] != 0],
    "tiny_e2e_verdicts": json.load(open(e2e)).get("verdicts") if os.path.exists(e2e) else None,
    "tiny_accept": {v: {k: r.get(k) for k in keys} for v, r in json.load(open(accept))["variants"].items()}
    if os.path.exists(accept) else None,
}
json.dump(summary, open(os.path.join(dest, f"probe_{line}.json"), "w"), indent=1)
print("failed steps:", summary["failed"])
print("verdicts:", json.dumps(summary["tiny_e2e_verdicts"])[:3000])
print("accept:", json.dumps(summary["tiny_accept"])[:1000])
PY
  rm -f "$DEST/.out" "$STEPS"
}

step facts 60 bash -c 'python3 -V; python3 -c "import torch, triton; print(\"torch\", torch.__version__, \"triton\", \
triton.__version__, torch.cuda.get_device_name(0))"; g++ --version | head -1; nvidia-smi -L'
step "setup_site.sh $LINE" 240 bash -c "source '$HERE/setup_site.sh' '$LINE'"
[ -f "${SITE:-/tmp/sglang-$LINE-site}/.unpacked" ] || { finish; exit 1; }  # no site: nothing more to learn
source "$HERE/setup_site.sh" "$LINE" >/dev/null 2>&1
if [ -n "${CARRY:-}" ]; then  # the line's own torch, carried over in earlier calls
  step "unpack carried $CARRY" 300 bash "$HERE/carry.sh" unpack "$CARRY" "/tmp/$CARRY" || { finish; exit 1; }
  eval "$(bash "$HERE/carry.sh" unpack "$CARRY" "/tmp/$CARRY" 2>/dev/null)"
  eval "$(bash "$HERE/torch_shims/build.sh" nccl)"
  step "facts ($CARRY)" 120 python3 -c "import torch, triton; print('torch', torch.__version__, torch.__file__, \
'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version(), \
'triton', triton.__version__, torch.cuda.get_device_name(0), torch.ones(2, device='cuda').sum().item())"
fi
export PYTHONPATH=$PWD/testkit${PYTHONPATH:+:$PYTHONPATH}
# SGLang's bundled Rust radix tree (rust_tree_core/mem_cache*.so, tch-rs over libtorch) is built for the line's torch
# pin; on SGLang 0.5.23 with torch 2.11 it panics at the first insert (UnknownKind(27), seen on CPU): off the pin, the
# probe takes SGLang's Python tree core unless SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND is set
export TORCH_PIN=$(python3 -c "import importlib.metadata as m
print(next((r.split('==')[1].split(';')[0].strip() for r in m.requires('sglang') or [] if r.startswith('torch==')), ''))")
export TORCH_HERE=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
if [ "$TORCH_PIN" != "$TORCH_HERE" ]; then
  export SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=${SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND:-python}
fi
echo "torch $TORCH_HERE here, SGLang $LINE pins $TORCH_PIN; tree core: ${SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND:-rust}"
[ "${IMPORTS:-1}" = 0 ] || imports plain sglang sgl_kernel flashinfer.sampling $STARTUP

ops_check() {  # four sgl_kernel ops against torch on the card
  step "sgl_kernel ops against torch ($1)" 120 python3 - <<'PY'
import torch, torch.nn.functional as F, sgl_kernel
torch.manual_seed(0)
x = torch.randn(37, 1536, device="cuda", dtype=torch.bfloat16)
w = torch.randn(1536, device="cuda", dtype=torch.bfloat16)
r = torch.randn_like(x)
def ref_norm(v, scale):
    v32 = v.float()
    return (v32 * torch.rsqrt(v32.pow(2).mean(-1, keepdim=True) + 1e-6) * scale).to(v.dtype).float()
def err(a, b):
    return (a.float() - b.float()).abs().max().item()
errs = {"rmsnorm": err(sgl_kernel.rmsnorm(x, w, 1e-6), ref_norm(x, w.float())),
        "gemma_rmsnorm": err(sgl_kernel.gemma_rmsnorm(x, w, 1e-6), ref_norm(x, 1 + w.float()))}
xs, rs, s = x.clone(), r.clone(), (x.float() + r.float()).to(x.dtype)
sgl_kernel.gemma_fused_add_rmsnorm(xs, rs, w, 1e-6)
errs["gemma_fused_add_rmsnorm"] = max(err(xs, ref_norm(s, 1 + w.float())), err(rs, s))
g = torch.randn(37, 2 * 2048, device="cuda", dtype=torch.bfloat16)
errs["gelu_tanh_and_mul"] = err(sgl_kernel.gelu_tanh_and_mul(g), F.gelu(g[:, :2048].float(), approximate="tanh") * g[:, 2048:].float())
print(errs)
bad = {k: v for k, v in errs.items() if not v < 0.125}
assert not bad, f"sgl_kernel ops disagree with torch: {bad}"
PY
}
if ! python3 -c "import sgl_kernel" >/dev/null 2>&1 && [ "$SHIM" != off ]; then
  step "build torch211 shim" 60 bash "$HERE/torch_shims/build.sh" sgl_kernel && \
    eval "$(bash "$HERE/torch_shims/build.sh" sgl_kernel 2>/dev/null)"
  imports shim sgl_kernel $STARTUP
  [ "${OPS:-1}" = 0 ] || ops_check shim
elif [ -n "${CARRY:-}" ] && [ "${OPS:-1}" != 0 ]; then
  ops_check "$CARRY"
fi

# SGLang 0.5.2x builds some CUDA kernels with nvcc at first use (sglang.kernels.jit, loaded through tvm-ffi): RoPE,
# act-and-mul, the K/V store, decode positions. Build the tiny pairs' ones first, side by side, into the cache the
# servers read (JIT=0 skips it): a missing or failing nvcc shows here by module, not as a server dying in its warm-up.
if [ "${JIT:-1}" = 1 ] && python3 -c "import sglang.kernels.jit" >/dev/null 2>&1; then
  step "CUDA JIT builds for the tiny pairs" 240 python3 - "$HERE/../compile_sglang_kernels.py" \
    "${SGLANG_JIT_CACHE_DIR:-$HOME/.cache/sglang/jit}" "$DEST/cuda_jit_$LINE.json" <<'PY'
import json, subprocess, sys, tempfile
script, cache, out = sys.argv[1:]
scenarios = ["jit rope tiny", "jit act-and-mul", "jit kv store tiny bf16", "jit kv store tiny-draft bf16",
             "jit clamp position"]
with tempfile.TemporaryDirectory() as parts:
    runs = [subprocess.Popen([sys.executable, script, "--cuda-jit", "--jit-cache", cache, "--only", s,
                              "--out", f"{parts}/{i}.json"]) for i, s in enumerate(scenarios)]
    codes = [run.wait() for run in runs]
    reports = [json.load(open(f"{parts}/{i}.json")) for i in range(len(scenarios)) if codes[i] in (0, 1)]
rows = [row for report in reports for row in report["rows"]]
json.dump({"nvcc": reports[0]["nvcc"] if reports else None, "exit_codes": codes, "rows": rows}, open(out, "w"), indent=1)
for row in rows:
    print("ok  " if row["compiled"] else "FAIL", row["scenario"], row["kernel"], row.get("build_seconds", ""),
          (row.get("error") or "")[-400:])
sys.exit(0 if codes == [0] * len(codes) else 1)
PY
fi

if [ "$E2E" = 1 ]; then
  step "tiny pairs (${E2E_JOBS:-text}): plain, DFLASH with and without the plugin" "$E2E_TIMEOUT" \
    python3 "$HERE/run_tiny_e2e.py" --jobs "${E2E_JOBS:-text}" --parallel --port-base 46000 \
    --out "$DEST/tiny_e2e_$LINE.json"
fi
if [ "${ACCEPT:-0}" = 1 ]; then
  step "drafting pair: accept length" "${ACCEPT_TIMEOUT:-240}" \
    python3 "$HERE/run_tiny_accept.py" --variants plain,correct --port-base 60000 \
    --out "$DEST/tiny_accept_$LINE.json"
fi
[ "${DOCTOR:-0}" = 1 ] && step doctor 120 python3 -m sglang_gemma4_dflash.doctor
finish
