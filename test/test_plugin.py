"""The plugin is found and applied by SGLang's own loader, once, and only when allowed; it imports no
SGLang model or worker module itself, and its hooks go on when SGLang imports them.

Each case runs in a fresh interpreter: SGLang's loader and HookRegistry are process-global, exactly
as in a real launcher or scheduler process.
"""

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest
from sglang_gemma4_dflash import plan
from sglang_gemma4_dflash.compat.probe import SGLangFeatures, TargetClass, WorkerClass

PROBE = textwrap.dedent(
    """
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from sglang_gemma4_dflash_testkit.cpu_standins import install
    install()
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry
    load_plugins()
    load_plugins()  # a second call (engine + scheduler paths) must change nothing
    from sglang_gemma4_dflash import plugin
    from sglang_gemma4_dflash.compat import probe, registry, symbols
    from sglang_gemma4_dflash.state import STATE
    imported_by_load_plugins = sorted(m for m in probe.hooked_modules() if m in sys.modules)
    if STATE.loaded:
        plugin.register()  # nor must a direct second registration
    # What a scheduler does later: SGLang imports the Gemma 4 models (its model registry) and the worker.
    from sglang.srt.models.gemma4_causal import Gemma4ForCausalLM
    from sglang.srt.models.gemma4_mm import Gemma4ForConditionalGeneration

    def ours(cls, text_attr):
        # Behaviour, not identity: upstream accepts an empty id list, the plugin's method refuses it.
        from types import SimpleNamespace
        if not hasattr(cls, "set_dflash_layers_to_capture"):
            return False
        text = SimpleNamespace(layers_to_capture=[], config=SimpleNamespace(num_hidden_layers=4))
        try:
            cls.set_dflash_layers_to_capture(SimpleNamespace(**{text_attr: text}), [])
        except ValueError as exc:
            return "empty" in str(exc)
        return False

    worker = symbols.resolve(probe.features().workers[0].path)
    from sglang_gemma4_dflash.attention import backend_hooks
    block_hooks = [
        registry.hook_in_place(symbols.TRITON_BACKEND + ".__init__", backend_hooks.init_backend),
        registry.hook_in_place(symbols.TRITON_BACKEND + ".forward_extend", backend_hooks.route_verify),
    ]
    print(json.dumps({
        "block_hooks": block_hooks,
        "causal_ours": ours(Gemma4ForCausalLM, "model"),
        "mm_ours": ours(Gemma4ForConditionalGeneration, "language_model"),
        "hook_counts": {t: len(h) for t, h in HookRegistry._hooks.items()},
        "patched": sorted(HookRegistry._patched),
        "worker": probe.features().worker,
        "worker_wrapped": hasattr(worker._greedy_sample_from_vocab_parallel_head, "__wrapped__"),
        "v1_step_wrapped": hasattr(getattr(worker, "_prepare_for_speculative_decoding", None), "__wrapped__"),
        "sglang": probe.features().version,
        "imported_by_load_plugins": imported_by_load_plugins,
    }))
    """
)


def run_probe(python=sys.executable, **env_overrides):
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", **env_overrides)
    if env_overrides.get("SGLANG_PLUGINS") is None:
        env.pop("SGLANG_PLUGINS", None)
    proc = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_entry_point_is_registered():
    names = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert names.get("gemma4_dflash") == "sglang_gemma4_dflash.plugin:register"


def test_load_plugins_installs_every_change_once():
    result, log = run_probe()
    assert result["imported_by_load_plugins"] == []  # the hooks went on when SGLang imported the modules
    assert result["causal_ours"] and result["mm_ours"]
    assert result["worker_wrapped"]
    hooked = {t: n for t, n in result["hook_counts"].items() if n}
    assert hooked, "no hook registered"
    assert all(n == 1 for n in hooked.values()), hooked  # idempotent across repeated loads
    assert set(hooked) <= set(result["patched"]), "registered but not applied"
    loaded = [line for line in log.splitlines() if "sglang-gemma4-dflash 0.1.0 loaded on SGLang" in line]
    assert len(loaded) == 1, log[-3000:]
    for module in ("models.gemma4_causal", "models.gemma4_mm", "speculative.dflash_worker_v2"):
        lines = [line for line in log.splitlines() if f"sglang-gemma4-dflash on {module}: installed:" in line]
        assert len(lines) == 1, (module, log[-3000:])  # one line per module, when SGLang imported it
        assert "left to upstream:" in lines[0]
    assert result["block_hooks"] == [True, True]
    line = [x for x in log.splitlines() if "sglang-gemma4-dflash on layers.attention.triton_backend:" in x]
    assert len(line) == 1 and line[0].endswith("block attention kernel on"), log[-3000:]


def test_block_attention_switch_leaves_the_triton_backend_alone():
    result, log = run_probe(SGLANG_GEMMA4_DFLASH_BLOCK_ATTENTION="0")
    assert result["worker_wrapped"]  # the rest of the plugin is there
    assert result["block_hooks"] == [False, False]
    line = [x for x in log.splitlines() if "sglang-gemma4-dflash on layers.attention.triton_backend:" in x][0]
    assert "verify and draft block attention" in line and line.endswith("block attention kernel off")


DETOKENIZER = textwrap.dedent(
    """
    import json, sys, time
    from sglang_gemma4_dflash_testkit.cpu_standins import install
    install()
    import sglang.srt.managers.detokenizer_manager  # what SGLang's detokenizer process has imported
    from sglang.srt.plugins import load_plugins
    before = set(sys.modules)
    start = time.perf_counter()
    load_plugins()
    print(json.dumps({"s": time.perf_counter() - start, "new": sorted(set(sys.modules) - before)}))
    """
)


@pytest.mark.parametrize("line", ["0.5.2x", "0.5.13"])
def test_load_plugins_in_a_process_that_runs_no_model_imports_only_the_plugin(request, line):
    """Issue 19: the detokenizer, DP controller and launcher load plugins too. The first version imported the
    Gemma 4 models and DFlash workers there: +0.85-0.93 s and +523 modules on 0.5.23 (+0.5 s, +222 on 0.5.13)."""
    python, extra = request.getfixturevalue("sglang_0513") if line == "0.5.13" else (sys.executable, {})
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", SGLANG_PLUGINS="gemma4_dflash", **extra)
    proc = subprocess.run([python, "-c", DETOKENIZER], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [m for m in out["new"] if not m.startswith("sglang_gemma4_dflash")] == [], out["new"][:40]
    assert len(out["new"]) <= 30 and out["s"] < 0.5, out  # the plugin's own modules (25 on 0.5.23), nothing else
    assert "sglang-gemma4-dflash" in proc.stderr  # the plugin did run


def test_sglang_plugins_whitelist_switches_it_off():
    result, log = run_probe(SGLANG_PLUGINS="some_other_plugin")
    assert not result["worker_wrapped"]
    assert not result["causal_ours"] and not result["mm_ours"]
    assert not any(result["hook_counts"].values())
    assert "installed:" not in log


def _features(worker, upstream_capture, graph_sampler=False):
    targets = (
        TargetClass("sglang.srt.models.gemma4_causal.Gemma4ForCausalLM", upstream_capture),
        TargetClass("sglang.srt.models.gemma4_mm.Gemma4ForConditionalGeneration", upstream_capture),
    )
    path = {"v1": "x.dflash_worker.DFlashWorker", "v2": "x.dflash_worker_v2.DFlashWorkerV2"}.get(worker)
    workers = (WorkerClass(worker, path, graph_sampler),) if worker else ()
    return SGLangFeatures("test", workers, targets, ())


def test_plan_for_a_v1_line_adds_capture_and_unblocks_the_draft_step():
    changes, _ = plan.changes(_features("v1", upstream_capture=False))
    how = {c.target.rsplit(".", 2)[-2] + "." + c.target.rsplit(".", 1)[1]: c.how for c in changes}
    assert how["Gemma4ForCausalLM.set_dflash_layers_to_capture"] == plan.ADD
    assert how["Gemma4ForConditionalGeneration.set_dflash_layers_to_capture"] == plan.ADD
    assert how["DFlashWorker._prepare_for_speculative_decoding"] == plan.AROUND
    assert how["DFlashWorker._greedy_sample_from_vocab_parallel_head"] == plan.AROUND
    assert how["DFlashWorker.__init__"] == plan.AROUND


def test_plan_for_a_v2_line_wraps_capture_and_splits_the_graph_head():
    changes, left = plan.changes(_features("v2", upstream_capture=True, graph_sampler=True))
    how = {c.target.rsplit(".", 2)[-2] + "." + c.target.rsplit(".", 1)[1]: c.how for c in changes}
    assert how["Gemma4ForCausalLM.set_dflash_layers_to_capture"] == plan.AROUND  # upstream's still runs
    assert how["DFlashWorkerV2._maybe_build_draft_sampler"] == plan.AROUND
    assert "DFlashWorkerV2._prepare_for_speculative_decoding" not in how
    assert left, "the plan must say what it leaves to upstream"


def test_plan_without_dflash_touches_no_worker():
    changes, left = plan.changes(_features(None, upstream_capture=False))
    assert all("set_dflash_layers_to_capture" in c.target for c in changes)
    assert any("no DFLASH worker" in u.why for u in left)


def test_on_sglang_0_5_13_the_v1_worker_gets_the_capture_method_and_its_draft_step_hooked(sglang_0513):
    python, extra = sglang_0513
    result, log = run_probe(python, **extra)
    assert result["sglang"].startswith("0.5.13")
    assert result["worker"] == "v1"
    assert result["causal_ours"] and result["mm_ours"]  # added: 0.5.13 has no capture method of its own
    assert result["worker_wrapped"] and result["v1_step_wrapped"]
    assert result["block_hooks"] == [True, True]
    assert any(
        "add models.gemma4_causal.Gemma4ForCausalLM.set_dflash_layers_to_capture" in line for line in log.splitlines()
    ), log[-3000:]


def test_on_sglang_0_5_13_without_the_plugin_gemma4_has_no_capture_method(sglang_0513):
    python, extra = sglang_0513
    result, _ = run_probe(python, SGLANG_PLUGINS="some_other_plugin", **extra)
    assert result["worker"] == "v1"
    assert not result["causal_ours"] and not result["worker_wrapped"] and not result["v1_step_wrapped"]


OTHER_PLUGIN = textwrap.dedent(
    """
    import json, sys
    from sglang_gemma4_dflash_testkit.cpu_standins import install
    install()
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    TARGET = "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2._greedy_sample_from_vocab_parallel_head"
    def other(original, *args, **kwargs):  # another plugin's hook on a method this plugin hooks too
        return original(*args, **kwargs)
    HookRegistry.register(TARGET, other, HookType.AROUND)
    assert "sglang.srt.speculative.dflash_worker_v2" not in sys.modules
    load_plugins()  # its apply_hooks() imports the worker for the other hook: the plugin installs inside that pass
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
    from sglang_gemma4_dflash.compat import registry
    from sglang_gemma4_dflash.dflash import worker_hooks
    wrappers, fn = 0, DFlashWorkerV2._greedy_sample_from_vocab_parallel_head
    while hasattr(fn, "__wrapped__"):
        wrappers, fn = wrappers + 1, fn.__wrapped__
    print(json.dumps({
        "wrappers": wrappers,
        "hooks": len(HookRegistry._hooks[TARGET]),
        "ours": registry.hook_in_place(TARGET, worker_hooks.greedy_sample),
        "init": registry.hook_in_place(TARGET.rsplit(".", 1)[0] + ".__init__", worker_hooks.check_draft_at_init),
    }))
    """
)


def test_a_worker_imported_inside_sglangs_hook_pass_is_hooked_once_with_the_other_plugins_hook():
    """Another plugin hooking the same method makes load_plugins()'s apply_hooks() import the worker module,
    and the plugin installs on it inside that pass: every hook must be applied exactly once."""
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", SGLANG_PLUGINS="gemma4_dflash")
    proc = subprocess.run([sys.executable, "-c", OTHER_PLUGIN], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"wrappers": 2, "hooks": 2, "ours": True, "init": True}
