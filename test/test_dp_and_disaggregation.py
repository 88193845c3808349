"""The plugin beside SGLang 0.5.23's DP DFlash (``speculative/dflash_dp.py``) and PD-disaggregation DFlash
(``speculative/dflash_disaggregation.py``, 0.5.18+).

Both run SGLang's one v2 worker, ``DFlashWorkerV2`` (``create_worker`` returns it for every DFLASH server); the
two modules hold a function each, which the plugin leaves alone: ``gather_draft_embedding`` rebuilds a
vocab-parallel draft embedding (Gemma 4's tied embedding is a plain replicated ``nn.Embedding``: it returns None),
``build_dflash_disagg_draft_input`` builds a PD decode server's first draft input. Under DP attention 0.5.23 keeps
the draft out of CUDA graphs, so the draft-sampler builder never runs and the draft step calls the eager head,
``_greedy_sample_from_vocab_parallel_head(hidden_states=, lm_head=)``, inside SGLang's draft TP scope (each DP
group's attention-TP ranks). Checked here:

- in a fresh interpreter, after SGLang's ``load_plugins()`` and the import of both modules, every hook is
  registered and applied once, the class ``create_worker`` picks for a DP DFLASH server runs the plugin's hooks,
  and nothing in the two modules is hooked; planted faults (the install run twice, a hook applied twice, a worker
  subclass overriding a hooked method, a hook in ``dflash_dp``) are each named by the same check;
- on 4 real processes (gloo; TP 4, DP 2), SGLang's own ``init_cuda_graphs`` skips the builder under DP attention,
  and the hooked head, called through the real class inside SGLang's draft TP scope, is the plugin's, split over
  the DP group's 2 ranks, with each group's full-vocabulary argmax.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from sglang_gemma4_dflash_testkit import multiproc
from sglang_gemma4_dflash_testkit import sglang_cpu as _sglang_cpu
from sglang_gemma4_dflash_testkit.dp_head_case import DP_ARGS, VOCAB, H, dp_inputs

pytestmark = pytest.mark.skipif(
    _sglang_cpu.cuda_engine_active(),
    reason="CPU-engine and gloo process tests; this machine drives SGLang's CUDA engine",
)

CHECK = textwrap.dedent(
    """
    import json, sys
    from sglang_gemma4_dflash_testkit.cpu_standins import install
    install()
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry
    load_plugins()
    import sglang.srt.speculative.dflash_dp as dflash_dp
    import sglang.srt.speculative.dflash_disaggregation as disaggregation
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative import spec_info
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
    from sglang_gemma4_dflash import plugin
    from sglang_gemma4_dflash.compat import registry
    from sglang_gemma4_dflash.state import STATE
    PLANT = sys.argv[1]
    WORKER = "sglang.srt.speculative.dflash_worker_v2"
    if PLANT == "install twice":  # the plugin's install for the worker module run again
        plugin.install(WORKER)
    elif PLANT == "apply twice":  # a hook applied a second time (a second wrapper on the method)
        target = WORKER + ".DFlashWorkerV2._greedy_sample_from_vocab_parallel_head"
        HookRegistry._apply_target(target, HookRegistry._hooks[target])
    elif PLANT == "hook dflash_dp":  # a hook on DP DFlash's own function (the plugin puts none there)
        from sglang.srt.plugins.hook_registry import HookType
        HookRegistry.register(dflash_dp.__name__ + ".gather_draft_embedding", lambda original, *a, **k: original(*a, **k),
                              HookType.AROUND)
        HookRegistry.apply_hooks()
    elif PLANT == "subclass":  # a DP worker class that overrides the head (SGLang 0.5.23 has none)
        class DPWorker(DFlashWorkerV2):
            def _greedy_sample_from_vocab_parallel_head(self, *, hidden_states, lm_head, chunk_size=256):
                return super()._greedy_sample_from_vocab_parallel_head.__wrapped__(
                    self, hidden_states=hidden_states, lm_head=lm_head, chunk_size=chunk_size)
        spec_info.SpeculativeAlgorithm.create_worker = lambda self, server_args: DPWorker

    args = ServerArgs(model_path="dummy", device="cpu", tp_size=2, dp_size=2, enable_dp_attention=True,
                      enable_dp_lm_head=True)
    cls = spec_info.SpeculativeAlgorithm.from_string("DFLASH").create_worker(args)
    def wrappers(fn):  # the files of the functions wrapped around fn (torch.no_grad's, HookRegistry's, ...)
        while hasattr(fn, "__wrapped__"):
            yield getattr(getattr(fn, "__code__", None), "co_filename", "")
            fn = fn.__wrapped__

    problems = []
    for target, hooks in HookRegistry._hooks.items():
        if hooks and len(hooks) != 1 or target not in HookRegistry._patched:
            problems.append(f"{target}: {len(hooks)} hooks registered, applied: {target in HookRegistry._patched}")
    for change in STATE.installed:
        cls_path, _, name = change.target.rpartition(".")
        if change.how != "around" or not cls_path.endswith(".DFlashWorkerV2"):
            continue
        fn, layers = getattr(cls, name), 0  # what the picked class runs, through its MRO
        while hasattr(fn, "__wrapped__"):
            fn, layers = fn.__wrapped__, layers + 1
        if layers != 1 or not registry.hook_in_place(change.target, change.impl):
            problems.append(f"{cls.__qualname__}.{name}: {layers} wrapper(s), the plugin's hook in place on "
                            f"DFlashWorkerV2: {registry.hook_in_place(change.target, change.impl)}")
    for module in (dflash_dp, disaggregation):
        hooked = [t for t in HookRegistry._hooks if t.startswith(module.__name__ + ".")]
        changed = [n for n, f in vars(module).items() if getattr(f, "__module__", "") == module.__name__
                   and any(w in "".join(wrappers(f)) for w in ("hook_registry", "sglang_gemma4_dflash"))]
        if hooked or changed or any(c.target.startswith(module.__name__) for c in STATE.planned):
            problems.append(f"{module.__name__} touched: {hooked + changed}")
    print(json.dumps({
        "problems": problems,
        "worker": cls.__module__ + "." + cls.__qualname__,
        "checked": sorted(c.target.rsplit(".", 1)[1] for c in STATE.installed if ".DFlashWorkerV2." in c.target),
        "functions": [dflash_dp.gather_draft_embedding.__qualname__,
                      disaggregation.build_dflash_disagg_draft_input.__qualname__],
    }))
    """
)


def check(plant: str) -> tuple[dict, str]:
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
    env.pop("SGLANG_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-c", CHECK, plant], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_the_plugin_installs_cleanly_beside_dp_dflash_and_pd_disaggregation():
    out, log = check("none")
    assert out["problems"] == []
    assert out["worker"] == "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2"
    assert out["checked"] == [
        "__init__",
        "_greedy_sample_from_vocab_parallel_head",
        "_maybe_build_draft_sampler",
        "init_cuda_graphs",
    ]
    assert out["functions"] == ["gather_draft_embedding", "build_dflash_disagg_draft_input"]
    assert not [x for x in log.splitlines() if "sglang-gemma4-dflash on speculative.dflash_d" in x]


@pytest.mark.parametrize(
    "plant, named",
    [
        ("install twice", "2 hooks registered"),
        ("apply twice", "DFlashWorkerV2._greedy_sample_from_vocab_parallel_head: 2 wrapper(s)"),
        ("subclass", "DPWorker._greedy_sample_from_vocab_parallel_head: 0 wrapper(s)"),
        (
            "hook dflash_dp",
            "sglang.srt.speculative.dflash_dp touched: ['sglang.srt.speculative.dflash_dp.gather_draft_",
        ),
    ],
)
def test_the_install_check_names_each_planted_fault(plant, named):
    """The check above can fail: each fault it exists to catch is named."""
    out, _ = check(plant)
    assert [p for p in out["problems"] if named in p], out["problems"]


# --------------------------------------------------------------------------- 4 real processes, TP 4 / DP 2


def _rank(rank: int, world: int) -> dict:
    from types import SimpleNamespace

    from sglang.srt.plugins import load_plugins

    load_plugins()  # as every SGLang scheduler does; the worker module is imported after it
    from sglang.srt.model_executor.cuda_graph_config import Backend, CudaGraphConfig, PhaseConfig
    from sglang.srt.models.gemma4_causal import Gemma4ForCausalLM, Gemma4TextScaledWordEmbedding
    from sglang.srt.runtime_context import get_context, get_parallel
    from sglang.srt.speculative.dflash_dp import gather_draft_embedding
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
    from sglang.srt.speculative.draft_parallel import model_draft_parallel_spec, resolve_draft_parallel_layout
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_utils import draft_tp_context

    dflash = SpeculativeAlgorithm.from_string("DFLASH")
    layout = resolve_draft_parallel_layout(model_draft_parallel_spec(None, spec_algorithm=dflash))  # as __init__
    dp_rank = int(get_parallel().attn_dp_rank)
    weight, hidden = dp_inputs(dp_rank)
    head = Gemma4TextScaledWordEmbedding(VOCAB, H, padding_idx=0)  # Gemma 4's tied head (and embedding)
    with torch.no_grad():
        head.weight.copy_(weight)
    target = Gemma4ForCausalLM.__new__(Gemma4ForCausalLM)
    worker = DFlashWorkerV2.__new__(DFlashWorkerV2)  # what the hooks read of a worker (the real one needs a GPU)
    worker._target_worker = SimpleNamespace(model_runner=SimpleNamespace(model=target))
    with draft_tp_context(layout):  # as the DP draft step calls the head
        ids = DFlashWorkerV2._greedy_sample_from_vocab_parallel_head(worker, hidden_states=hidden, lm_head=head)
    ours = worker.__dict__.get("_sglang_gemma4_dflash_head")  # the plugin's head keeps its group here

    # SGLang's own init_cuda_graphs, with draft graphs configured: does it build a draft sampler?
    get_context().override("test", cuda_graph_config=CudaGraphConfig(decode=PhaseConfig(backend=Backend.FULL)))

    def graphs():
        calls = {}
        stub = DFlashWorkerV2.__new__(DFlashWorkerV2)
        stub.__dict__.update(
            draft_parallel_layout=layout,
            _target_tp_rank=rank,
            selector=None,
            _maybe_build_draft_sampler=lambda: calls.setdefault("builder", True) and None,
            _draft_worker=SimpleNamespace(init_cuda_graphs=lambda capture_decode_cuda_graph: calls.setdefault(
                "captured", capture_decode_cuda_graph)),
        )  # fmt: skip
        stub.init_cuda_graphs()
        return calls

    under_dp = graphs()
    with get_parallel().override(attn_dp_enabled=False):
        without_dp = graphs()
    return {
        "dp_rank": dp_rank,
        "ids": ids.tolist(),
        "plugin_head_group": None if ours is None else int(ours.group.world_size),
        "layout_group": int(layout.tp_group.world_size),
        "gather": gather_draft_embedding(head),
        "under_dp": under_dp,
        "without_dp": without_dp,
    }


def test_dp_dflash_draft_step_runs_the_plugins_head_over_each_dp_group_and_builds_no_draft_sampler():
    results = multiproc.run_ranks(4, _rank, server_args=DP_ARGS, timeout=300)
    assert sorted(r["dp_rank"] for r in results) == [0, 0, 1, 1]
    for r in results:
        weight, hidden = dp_inputs(r["dp_rank"])
        assert r["layout_group"] == 2  # SGLang's draft scope: the DP group's attention-TP ranks
        assert r["plugin_head_group"] == 2  # the plugin's head ran, split over those 2 ranks
        assert r["ids"] == torch.argmax(hidden @ weight.T, dim=-1).tolist()
        assert r["ids"][0] == VOCAB // 2 - 1
        assert r["gather"] is None  # SGLang's DP embedding gather leaves Gemma 4's replicated table alone
        assert r["under_dp"] == {"captured": False}  # no draft graph, no builder: the eager head is the path
        assert r["without_dp"] == {"builder": True, "captured": True}
