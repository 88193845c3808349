"""How the plugin installs itself in real SGLang processes: whole pieces or nothing, a clear refusal at
DFLASH start-up when a hook the line needs is not in place (v1), a warning and SGLang's own path where
stock SGLang serves the setup (v2), an SGLang module that fails to import costing only its own pieces, a
line whose Gemma 4 model cannot capture refused by name, every DFlash worker class the line can pick,
upstream's capture method kept, and logging left to SGLang.

Each case runs in a fresh interpreter (SGLang's loader and HookRegistry are process-global) on SGLang
0.5.2x (this interpreter) and, where marked, on 0.5.13 (the v1 worker).
"""

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
from sglang_gemma4_dflash import plan
from sglang_gemma4_dflash.compat.probe import SGLangFeatures, TargetClass, WorkerClass

HEADER = textwrap.dedent(
    """
    import json, logging, sys
    from types import SimpleNamespace
    from sglang_gemma4_dflash_testkit.cpu_standins import install
    install()
    from sglang.srt.models.gemma4_causal import Gemma4ForCausalLM
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang_gemma4_dflash.compat import probe, registry, symbols
    from sglang_gemma4_dflash.dflash import worker_hooks
    WORKER = symbols.resolve(probe.features().workers[0].path)

    def start(ids=(0, 2)):
        # What a DFLASH start does first with a Gemma 4 target: set the capture layers.
        model = SimpleNamespace(model=SimpleNamespace(layers_to_capture=[], config=SimpleNamespace(num_hidden_layers=4)))
        try:
            Gemma4ForCausalLM.set_dflash_layers_to_capture(model, ids)
        except (RuntimeError, ValueError) as exc:
            return type(exc).__name__ + ": " + str(exc)
        return {"layers_to_capture": model.model.layers_to_capture, "aux": model.capture_aux_hidden_states}

    def hooked():
        return sorted(t.rsplit(".", 2)[-2] + "." + t.rsplit(".", 1)[1] for t, h in HookRegistry._hooks.items() if h)
    """
)


def run(body: str, python: str = sys.executable, **env_overrides) -> tuple[dict, str]:
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
    env.pop("SGLANG_PLUGINS", None)
    env.update(env_overrides)
    proc = subprocess.run(
        [python, "-c", HEADER + textwrap.dedent(body) + "\nprint(json.dumps(out))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _python(request, line):
    if line == "0.5.13":
        python, extra = request.getfixturevalue("sglang_0513")
        return python, extra
    return sys.executable, {}


# --------------------------------------------------------------------------- item 2: whole pieces


def worker_piece_hooks(hooked: list[str]) -> list[str]:
    """The v2 worker piece's hooks among ``hooked``. The report hook (``init_cuda_graphs``) is a piece of its own:
    without the worker piece's init hook it only calls upstream's method."""
    return [t for t in hooked if t.startswith("DFlashWorkerV2.") and not t.endswith(".init_cuda_graphs")]


def test_on_v1_a_worker_without_the_head_method_gets_no_hook_and_dflash_start_is_refused(sglang_0513):
    python, extra = sglang_0513
    out, log = run(
        """
        del WORKER._greedy_sample_from_vocab_parallel_head  # as a line that renamed it would be
        load_plugins()
        out = {"hooked": hooked(), "start": start()}
        """,
        python,
        **extra,
    )
    piece = ("DFlashWorker.__init__", "DFlashWorker._prepare_for_speculative_decoding")
    assert not [t for t in out["hooked"] if t in piece], out["hooked"]  # no lone draft-step hook
    assert out["start"].startswith("RuntimeError: sglang-gemma4-dflash: DFLASH with a Gemma 4 target")
    assert "_greedy_sample_from_vocab_parallel_head is not in SGLang" in out["start"]
    assert "SGLANG_PLUGINS" in out["start"]
    assert "NOT installed" in log and "is refused" in log


def test_on_v2_a_worker_hook_that_cannot_install_leaves_sglangs_own_path_with_one_warning():
    """Stock 0.5.2x serves Gemma 4 DFLASH at TP=1; an upstream rename must not make the plugin refuse it."""
    out, log = run(
        """
        del WORKER._greedy_sample_from_vocab_parallel_head  # as a line that renamed it would be
        load_plugins()
        from sglang_gemma4_dflash import doctor
        info = doctor.report()
        out = {"hooked": hooked(), "start": start(), "again": start(), "doctor": doctor.format_report(info)}
        """
    )
    assert not worker_piece_hooks(out["hooked"]), out["hooked"]
    assert out["start"] == out["again"] == {"layers_to_capture": [1, 3], "aux": True}  # not refused
    warnings = [line for line in log.splitlines() if "_greedy_sample_from_vocab_parallel_head" in line]
    assert len(warnings) == 1, log[-3000:]  # once, at install; the start adds nothing for a skipped piece
    assert "NOT installed" in warnings[0] and "SGLang's own path runs instead" in warnings[0]
    assert "NOT installable: worker DFlashWorkerV2" in out["doctor"]
    assert "then: SGLang's own path runs instead, as without the plugin" in out["doctor"]


def test_a_head_method_with_other_arguments_gets_no_hook():
    out, _ = run(
        """
        def head(self, hs, head, chunk_size=256):  # positional names the hook cannot pass
            raise AssertionError
        WORKER._greedy_sample_from_vocab_parallel_head = head
        load_plugins()
        out = {"hooked": hooked(), "start": start()}
        """
    )
    assert not worker_piece_hooks(out["hooked"]), out["hooked"]
    assert out["start"] == {"layers_to_capture": [1, 3], "aux": True}  # v2: SGLang's own head runs


def test_on_v1_a_hook_sglang_failed_to_apply_refuses_the_dflash_start(sglang_0513):
    python, extra = sglang_0513
    out, log = run(
        """
        from sglang_gemma4_dflash import plugin
        plugin.register()  # what load_plugins() does first ...
        del WORKER._prepare_for_speculative_decoding
        HookRegistry.apply_hooks()  # ... then this, which only logs a target it cannot patch
        out = {"start": start()}
        """,
        python,
        **extra,
    )
    assert "Failed to apply hooks" in log
    assert "_prepare_for_speculative_decoding" in out["start"] and "did not apply it" in out["start"]


def test_on_v2_a_hook_sglang_failed_to_apply_is_warned_about_once_at_the_dflash_start():
    out, log = run(
        """
        from sglang_gemma4_dflash import plugin
        plugin.register()
        del WORKER._maybe_build_draft_sampler
        HookRegistry.apply_hooks()
        out = {"start": start(), "again": start()}
        """
    )
    assert "Failed to apply hooks" in log
    assert out["start"] == out["again"] == {"layers_to_capture": [1, 3], "aux": True}
    warned = [line for line in log.splitlines() if "_maybe_build_draft_sampler: registered, but" in line]
    assert len(warned) == 1 and "SGLang's own path runs for it" in warned[0], log[-3000:]


# --------------------------------------------------------------------------- issue 19: import errors, 0.5.11

BREAK_MM_IMPORT = """
import importlib.abc, importlib.util
class _Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # gemma4_mm is found, and raises when it runs (as a module with a missing dependency would)
    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "sglang.srt.models.gemma4_mm" else None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        raise ImportError("planted: gemma4_mm needs a package that is missing")
sys.modules.pop("sglang.srt.models.gemma4_mm", None)
sys.meta_path.insert(0, _Broken())
"""


@pytest.mark.parametrize("line", ["0.5.2x", "0.5.13"])
def test_an_sglang_module_that_fails_to_import_costs_only_its_own_piece(request, line):
    python, extra = _python(request, line)
    out, log = run(
        BREAK_MM_IMPORT
        + textwrap.dedent(
            """
        probe.features.cache_clear()
        load_plugins()
        from sglang_gemma4_dflash import doctor
        info = doctor.report()
        out = {"start": start(), "hooked": hooked(), "doctor": doctor.format_report(info), "errors": info["import_errors"]}
        """
        ),
        python,
        **extra,
    )
    assert out["start"] == {"layers_to_capture": [1, 3], "aux": True}  # the causal target still starts
    worker = "DFlashWorker." if line == "0.5.13" else "DFlashWorkerV2."
    assert any(t.startswith(worker) for t in out["hooked"]), out["hooked"]  # the worker piece is in
    assert "planted: gemma4_mm needs a package" in out["errors"]["sglang.srt.models.gemma4_mm"]
    assert (
        "NOT installable: module sglang.srt.models.gemma4_mm: importing it failed: ImportError: planted"
        in out["doctor"]
    )


def _write_forward_without_capture(directory) -> str:
    """A module with a Gemma4TextModel.forward that, as in SGLang 0.5.11, never reads layers_to_capture."""
    (directory / "forward_0511.py").write_text(
        "def forward(self, input_ids, positions, forward_batch, input_embeds=None, **kwargs):\n"
        "    return self.norm(input_embeds)  # the normed hidden state only, nothing captured\n"
    )
    return str(directory)


@pytest.mark.parametrize("line", ["0.5.2x", "0.5.13"])
def test_a_gemma4_model_that_cannot_capture_is_named_and_refused_where_the_plugin_is_required(request, line, tmp_path):
    """SGLang 0.5.11's Gemma4TextModel.forward collects no hidden states. On a line without upstream capture
    (0.5.13 here, standing for 0.5.11's worker) the DFLASH start is refused with the line and the fix named."""
    python, extra = _python(request, line)
    out, _ = run(
        f"""
        sys.path.insert(0, {_write_forward_without_capture(tmp_path)!r})
        import forward_0511
        from sglang.srt.models.gemma4_causal import Gemma4TextModel
        Gemma4TextModel.forward = forward_0511.forward
        probe.features.cache_clear()
        load_plugins()
        from sglang_gemma4_dflash import doctor
        out = {{"start": start(), "doctor": doctor.format_report(doctor.report()),
               "problem": [t.capture_problem for t in probe.features().targets]}}
        """,
        python,
        **extra,
    )
    assert all("Gemma4TextModel.forward never reads layers_to_capture" in p for p in out["problem"]), out
    assert "CANNOT capture" in out["doctor"]
    if line == "0.5.13":
        assert out["start"].startswith("RuntimeError: sglang-gemma4-dflash: DFLASH with a Gemma 4 target")
        assert "cannot capture Gemma 4 hidden states for DFLASH; use SGLang >= 0.5.12" in out["start"]
        assert "refuse_without_capture" in out["doctor"] or "refuses a DFLASH start" in out["doctor"]
    else:  # upstream's capture method is upstream's business: the plugin only checks the ids
        assert out["start"] == {"layers_to_capture": [1, 3], "aux": True}


def test_the_installed_lines_can_capture(sglang_0513):
    out, _ = run("out = {'problems': [t.capture_problem for t in probe.features().targets]}")
    old, _ = run("out = {'problems': [t.capture_problem for t in probe.features().targets]}", *sglang_0513[:1])
    assert out == old == {"problems": [None, None]}


@pytest.mark.parametrize("line", ["0.5.2x", "0.5.13"])
def test_a_complete_install_lets_the_dflash_start_through(request, line):
    python, extra = _python(request, line)
    out, _ = run("load_plugins()\nout = {'start': start()}", python, **extra)
    assert out["start"] == {"layers_to_capture": [1, 3], "aux": True}


# --------------------------------------------------------------------------- item 6: upstream's method runs


def test_upstream_capture_method_runs_after_the_plugin_checks():
    out, _ = run(
        """
        import torch
        calls = []
        upstream = Gemma4ForCausalLM.set_dflash_layers_to_capture
        def recording(self, layer_ids):  # stands for whatever upstream adds to its method later
            calls.append([int(i) for i in layer_ids])
            return upstream(self, layer_ids)
        Gemma4ForCausalLM.set_dflash_layers_to_capture = recording
        load_plugins()
        out = {"ok": start(torch.tensor([0, 2])), "bad": start([2, 0]), "calls": calls}
        """
    )
    assert out["ok"] == {"layers_to_capture": [1, 3], "aux": True}  # torch ids accepted (item 8)
    assert out["bad"].startswith("ValueError: DFLASH target layer ids must be strictly increasing")
    assert out["calls"] == [[0, 2]]  # upstream ran once, with the checked ids, and not for the bad ones


# --------------------------------------------------------------------------- item 3: every worker class


@pytest.mark.parametrize("line", ["0.5.2x", "0.5.13"])
def test_the_worker_class_each_line_instantiates_is_hooked(request, line):
    python, extra = _python(request, line)
    out, _ = run(
        """
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        load_plugins()
        out = {}
        for disable_overlap in (True, False):
            args = ServerArgs(model_path="dummy", device="cpu", disable_overlap_schedule=disable_overlap)
            try:
                cls = SpeculativeAlgorithm.from_string("DFLASH").create_worker(args)
            except ValueError as exc:  # this line refuses DFLASH under the overlap scheduler
                out[str(disable_overlap)] = str(exc)
                continue
            path = cls.__module__ + "." + cls.__qualname__
            out[str(disable_overlap)] = [path, all(
                registry.hook_in_place(path + "." + name, impl)
                for name, impl in (("__init__", worker_hooks.check_draft_at_init),
                                   ("_greedy_sample_from_vocab_parallel_head", worker_hooks.greedy_sample))
            )]
        """,
        python,
        **extra,
    )
    if line == "0.5.13":
        assert out["True"] == ["sglang.srt.speculative.dflash_worker.DFlashWorker", True]
        assert "does not support overlap" in out["False"]
    else:
        for flag in ("True", "False"):  # one v2 class drives both schedulers
            assert out[flag] == ["sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2", True]


def test_a_line_with_both_worker_classes_gets_both_hooked():
    targets = (TargetClass("sglang.srt.models.gemma4_causal.Gemma4ForCausalLM", True),)
    workers = (
        WorkerClass("v2", "x.dflash_worker_v2.DFlashWorkerV2", graph_sampler=True),
        WorkerClass("v1", "x.dflash_worker.DFlashWorker", graph_sampler=False),
    )
    changes, _ = plan.changes(SGLangFeatures("test", workers, targets, ()))
    hooked = {c.target.split(".", 1)[1] for c in changes}
    for worker in ("dflash_worker_v2.DFlashWorkerV2", "dflash_worker.DFlashWorker"):
        assert f"{worker}._greedy_sample_from_vocab_parallel_head" in hooked
        assert f"{worker}.__init__" in hooked
    assert "dflash_worker.DFlashWorker._prepare_for_speculative_decoding" in hooked
    assert "dflash_worker_v2.DFlashWorkerV2._prepare_for_speculative_decoding" not in hooked
    v1 = [c for c in changes if "DFlashWorker." in c.target and c.required]  # v1: the plugin is required
    assert len({c.piece for c in v1}) == 1 and len(v1) == 3  # one piece, whole: init, head, draft step
    assert not any(c.required for c in changes if "DFlashWorkerV2." in c.target)  # v2: stock serves


# --------------------------------------------------------------------------- item 7: logging


def test_the_start_up_line_shows_before_sglang_configures_logging_and_then_sglang_governs():
    out, log = run(
        """
        load_plugins()  # no logging configured yet, as in a fresh SGLang process
        package = logging.getLogger("sglang_gemma4_dflash")
        out = {"handlers": len(package.handlers), "propagate": package.propagate, "level": package.level}
        logging.basicConfig(level=logging.WARNING, force=True)  # SGLang's configure_logger, --log-level warning
        logging.getLogger("sglang_gemma4_dflash.plugin").info("MUST-NOT-SHOW")
        logging.getLogger("sglang_gemma4_dflash.plugin").warning("MUST-SHOW")
        """
    )
    assert out == {"handlers": 0, "propagate": True, "level": logging.NOTSET}
    assert len([line for line in log.splitlines() if "sglang-gemma4-dflash 0.1.0 loaded on" in line]) == 1
    installed = [line for line in log.splitlines() if "sglang-gemma4-dflash on " in line and "installed:" in line]
    assert len(installed) == 5  # one per module with targets (imported before load_plugins here): the Gemma 4
    # models, the DFlash worker, the triton attention backend, the DFlash draft models (DFlash2's candidate step)
    assert "MUST-SHOW" in log and "MUST-NOT-SHOW" not in log


# --------------------------------------------------------------------------- item 8: doctor


def test_doctor_lists_nothing_as_installed_when_sglang_plugins_leaves_the_plugin_out():
    body = """
        from sglang_gemma4_dflash import doctor
        info = doctor.report()
        out = {"installs": len(info["plugin_installs"]), "would": len(info["plugin_would_install"]),
               "text": doctor.format_report(info)}
        """
    out, _ = run(body, SGLANG_PLUGINS="some_other_plugin")
    assert out["installs"] == 0 and out["would"] > 0
    assert "disabled by SGLANG_PLUGINS=some_other_plugin" in out["text"]
    assert "the plugin would install (it is not loaded here" in out["text"]
    assert "Gemma4UnifiedForConditionalGeneration (inherits)" in out["text"]
    enabled, _ = run(body)
    assert enabled["installs"] == enabled["would"] > 0 and "the plugin installs:" in enabled["text"]
