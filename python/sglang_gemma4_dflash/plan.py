"""The plan: the one list of what this plugin changes in SGLang.

``changes(features)`` returns, for the installed SGLang line, every change as a ``Change``, one small function per
piece (capture, worker, v1 worker, graph sampler, v2 worker, DFlash2 candidates, block attention): the dotted
SGLang target, how it is changed, the function used, why, the piece it belongs to, the arguments
the hook binds, and whether the line needs it (``required``: stock SGLang cannot serve a Gemma 4
DFLASH run without it). ``resolve(features)`` adds which pieces pass the probe and which hooked
modules failed to import. ``plugin.py`` installs the pieces as SGLang imports their modules;
``doctor`` prints the same. Nothing else in the package decides what is hooked.

How:
- ``AROUND``: registered with SGLang's ``HookRegistry``.
- ``ADD``: the target class lacks the method on this line. ``HookRegistry`` can only wrap
  attributes that exist, so the method is set on the class directly (subclasses inherit it).

A piece installs whole or not at all: on v1 the draft-step hook without the head hook would hand
upstream's head ``shard_indices = None`` in the middle of serving.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sglang_gemma4_dflash.attention import backend_hooks
from sglang_gemma4_dflash.compat import probe, symbols
from sglang_gemma4_dflash.compat.probe import SGLangFeatures, TargetClass, WorkerClass
from sglang_gemma4_dflash.dflash import candidates, worker_hooks
from sglang_gemma4_dflash.gemma4 import capture

ADD, AROUND = "add", "around"
BLOCK_ATTENTION = "block attention"
BLOCK_ATTENTION_WHAT = "verify and draft block attention"
DFLASH2_CANDIDATES = "DFlash2 candidates"


@dataclass(frozen=True)
class Change:
    target: str  # dotted path of the SGLang symbol
    how: str  # ADD or AROUND
    impl: Callable
    why: str
    piece: str  # the changes of one piece are installed together or not at all
    binds: tuple[str, ...] = ()  # parameters of the target the hook passes or reads by name
    required: bool = False  # stock SGLang cannot serve Gemma 4 DFLASH on this line without it


@dataclass(frozen=True)
class Upstream:
    """Something this line already does and the plugin deliberately leaves alone."""

    what: str
    why: str


@dataclass(frozen=True)
class Skipped:
    """A piece left out because a target failed the probe (or its module failed to import)."""

    piece: str
    problem: str
    required: bool = False  # a Gemma 4 DFLASH start is refused without it


@dataclass(frozen=True)
class Plan:
    planned: list[Change]  # every change this line wants
    installed: list[Change]  # the changes of the pieces that pass the probe
    skipped: list[Skipped]
    left: list[Upstream]


def changes(features: SGLangFeatures) -> tuple[list[Change], list[Upstream]]:
    """Every change this line wants, piece by piece, and what it leaves to upstream: the one list of what the
    plugin hooks into SGLang."""
    entries: list[Change | Upstream] = []
    for target in features.targets:
        entries.append(_capture(target))
    for worker in features.workers:
        entries += _worker(worker)
        if worker.kind == "v1":
            entries += _v1_worker(worker)
        if worker.graph_sampler:
            entries += _graph_sampler(worker)
        if worker.kind == "v2":
            entries += _v2_worker(worker)
    entries += _dflash2_candidates(features) + _no_worker(features) + _block_attention(features)
    return [e for e in entries if isinstance(e, Change)], [e for e in entries if isinstance(e, Upstream)]


def _capture(target: TargetClass) -> Change:
    """The Gemma 4 target's ``set_dflash_layers_to_capture``: checked around upstream's, or added."""
    method = f"{target.path}.set_dflash_layers_to_capture"
    piece = f"capture {target.path.rsplit('.', 1)[1]}"
    if target.upstream_capture:
        why = (
            "upstream's accepts any ids; the plugin rejects empty, out-of-range, non-int "
            "and unordered ids at start-up, then lets upstream's method run"
        )
        return Change(method, AROUND, capture.check_then_capture, why, piece, ("layer_ids",))
    if target.capture_problem:
        why = f"{target.capture_problem}; this method refuses a DFLASH start with a Gemma 4 target and names the fix"
        return Change(method, ADD, capture.refuse_without_capture, why, piece, required=True)
    why = "this line has no DFLASH capture hook for Gemma 4"
    return Change(method, ADD, capture.set_dflash_layers_to_capture, why, piece, required=True)


def _worker(worker: WorkerClass) -> list[Change]:
    """Every DFlash worker: the start-up checks and the exact head (required on v1, whose draft step refuses
    Gemma 4's head)."""
    piece, v1 = _worker_piece(worker), worker.kind == "v1"
    checks = (
        "check the draft's hidden size, vocabulary, layer ids, mask id and block size against a "
        "Gemma 4 target when the worker is built (the target has loaded, the draft not yet); "
        "compile flashinfer's sampling module meanwhile, so the first sampled request does not; "
        "log which of the plugin's pieces run"
    )
    head = (
        "exact greedy head for Gemma 4's tied head: split over TP ranks and synced, "
        "instead of a full-vocabulary head on every rank"
    )
    return [
        Change(
            f"{worker.path}.__init__",
            AROUND,
            worker_hooks.check_draft_at_init,
            checks,
            piece,
            ("server_args", "target_worker"),
            required=v1,
        ),
        Change(
            f"{worker.path}._greedy_sample_from_vocab_parallel_head",
            AROUND,
            worker_hooks.greedy_sample,
            head,
            piece,
            ("hidden_states", "lm_head"),
            required=v1,
        ),
    ]


def _worker_piece(worker: WorkerClass) -> str:
    return f"worker {worker.path.rsplit('.', 1)[1]}"


def _v1_worker(worker: WorkerClass) -> list[Change]:
    """The v1 worker (0.5.12-0.5.13): its draft step takes the tied head; the acceptance histogram."""
    name = worker.path.rsplit(".", 1)[1]
    histogram = (
        "the v1 worker reports no per-position acceptance; the plugin fills each request's "
        "spec_correct_drafts_histogram (meta_info, read by `bench`)"
    )
    return [
        Change(
            f"{worker.path}._prepare_for_speculative_decoding",
            AROUND,
            worker_hooks.draft_step_with_replicated_head,
            "the v1 draft step refuses heads without shard_indices",
            _worker_piece(worker),
            required=True,
        ),
        Change(
            f"{worker.path}.forward_batch_generation",
            AROUND,
            worker_hooks.record_acceptance,
            histogram,
            f"acceptance histogram {name}",
            ("batch",),
        ),
    ]


def _graph_sampler(worker: WorkerClass) -> list[Change | Upstream]:
    """A v2 worker that builds a draft CUDA-graph sampler: the split head in that graph where upstream keeps
    Gemma 4's tied head eager (TP>1)."""
    name = worker.path.rsplit(".", 1)[1]
    why = (
        "upstream's builder runs first; where it keeps Gemma 4's tied draft head eager (TP>1), "
        "the plugin folds a split, synced head into the draft CUDA graph"
    )
    return [
        Change(
            f"{worker.path}._maybe_build_draft_sampler",
            AROUND,
            worker_hooks.build_split_sampler,
            why,
            _worker_piece(worker),
        ),
        Upstream(
            f"{name} draft head CUDA-graph sampler at TP=1",
            "upstream's sampler already scores the tied head inside the graph",
        ),
    ]


def _v2_worker(worker: WorkerClass) -> list[Change | Upstream]:
    """The v2 worker (0.5.14+): the report once its graphs are set; the rest is upstream's."""
    name = worker.path.rsplit(".", 1)[1]
    why = (
        "v2 sets the target's capture ids and builds the draft's graph sampler after the worker is "
        "built: the line saying which of the plugin's pieces run is logged once they are set"
    )
    return [
        Change(f"{worker.path}.init_cuda_graphs", AROUND, worker_hooks.report_after_graphs, why, f"report {name}"),
        Upstream(f"{name} (draft model, KV, verification)", "works for Gemma 4 as is"),
    ]


def _dflash2_candidates(features: SGLangFeatures) -> list[Change]:
    """DFlash2 drafts' candidate step (0.5.19+); never required: plain DFlash drafts run without it."""
    if not features.candidate_step:
        return []
    why = (
        "upstream's DFlash2 candidate step reads lm_head.org_vocab_size or shard_indices, which Gemma 4's "
        "tied head lacks (it raises); the plugin's exact top-k over that head, split over the TP ranks "
        "with one all-gather, the same candidates on every rank"
    )
    target = f"{symbols.DFLASH2_DRAFT}.compute_candidates"
    return [Change(target, AROUND, candidates.compute_candidates, why, DFLASH2_CANDIDATES, ("hidden",))]


def _no_worker(features: SGLangFeatures) -> list[Upstream]:
    """A line with no DFlash worker at all (its modules looked at, none failed to import)."""
    failed = {module for module, _ in features.import_errors}
    worker_modules = {symbols.module_of(path) for _, path in symbols.WORKERS}
    if features.workers or not features.complete or failed & worker_modules:
        return []
    return [Upstream("DFlash worker", f"SGLang {features.version} has no DFLASH worker: nothing to patch")]


def _block_attention(features: SGLangFeatures) -> list[Change | Upstream]:
    """The triton backend's verify and draft block on the plugin's kernel (speed only: never required)."""
    if not features.triton_backend:
        return []
    if not backend_hooks.enabled():
        return [Upstream(BLOCK_ATTENTION_WHAT, f"{backend_hooks.ENV}=0")]
    why = (
        "a Gemma 4 DFLASH target's verify and its draft's block (TARGET_VERIFY mode) run the plugin's block "
        "attention kernel instead of SGLang's extend kernel"
    )
    return [
        Change(f"{symbols.TRITON_BACKEND}.{method}", AROUND, impl, why, BLOCK_ATTENTION, binds)
        for method, impl, binds in (
            ("__init__", backend_hooks.init_backend, ("model_runner",)),
            ("forward_extend", backend_hooks.route_verify, ("forward_batch",)),
        )
    ]


def installable(planned: list[Change]) -> tuple[list[Change], list[Skipped]]:
    """The changes of every piece whose targets all pass ``probe.target_problem``, and the pieces left out."""
    pieces: dict[str, list[Change]] = {}
    for change in planned:
        pieces.setdefault(change.piece, []).append(change)
    ok, skipped = [], []
    for piece, members in pieces.items():
        problems = [p for c in members if (p := probe.target_problem(c.target, c.binds, exists=c.how != ADD))]
        if problems:
            skipped.append(Skipped(piece, "; ".join(problems), any(c.required for c in members)))
        else:
            ok.extend(members)
    return ok, skipped


def resolve(features: SGLangFeatures) -> Plan:
    """The plan for ``features``, which of its pieces install, and the hooked modules that failed to import
    (a failed DFlash v1 worker module is required: the plugin is needed on that line)."""
    planned, left = changes(features)
    installed, skipped = installable(planned)
    for module, error in features.import_errors:
        required = module == symbols.module_of(symbols.V1_WORKER) and not probe.v2_line()
        skipped.append(Skipped(f"module {module}", f"importing it failed: {error}", required))
    return Plan(planned, installed, skipped, left)


def consequence(skipped: Skipped) -> str:
    """What a left-out piece means for a Gemma 4 DFLASH start."""
    if skipped.required:
        return "a DFLASH start with a Gemma 4 target is refused (this line needs the plugin for it)"
    return "SGLang's own path runs instead, as without the plugin"


def describe(plan: Plan) -> str:
    """What is installed and what is left to upstream (pieces left out are logged as warnings of their own)."""
    installed = ", ".join(f"{c.how} {c.target.replace('sglang.srt.', '')}" for c in plan.installed) or "nothing"
    upstream = ", ".join(u.what for u in plan.left) or "nothing"
    text = f"installed: {installed}; left to upstream: {upstream}"
    if plan.skipped:
        text += f"; NOT installed: {', '.join(s.piece for s in plan.skipped)} (see the warning)"
    if any(c.piece == BLOCK_ATTENTION for c in plan.planned) or any(u.what == BLOCK_ATTENTION_WHAT for u in plan.left):
        text += f"; block attention kernel {'on' if any(c.piece == BLOCK_ATTENTION for c in plan.installed) else 'off'}"
    return text
