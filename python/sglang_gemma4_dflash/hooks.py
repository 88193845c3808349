"""The one list of what this plugin changes in SGLang.

``plan(features)`` returns, for the installed SGLang line, every change as a ``Change``: the dotted
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

from sglang_gemma4_dflash import compat
from sglang_gemma4_dflash.attention import backend_hooks
from sglang_gemma4_dflash.compat import SGLangFeatures
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


def plan(features: SGLangFeatures) -> tuple[list[Change], list[Upstream]]:
    changes: list[Change] = []
    left: list[Upstream] = []

    for target in features.targets:
        method = f"{target.path}.set_dflash_layers_to_capture"
        piece = f"capture {target.path.rsplit('.', 1)[1]}"
        if target.upstream_capture:
            changes.append(
                Change(
                    method,
                    AROUND,
                    capture.check_then_capture,
                    "upstream's accepts any ids; the plugin rejects empty, out-of-range, non-int "
                    "and unordered ids at start-up, then lets upstream's method run",
                    piece,
                    ("layer_ids",),
                )
            )
        elif target.capture_problem:
            changes.append(
                Change(
                    method,
                    ADD,
                    capture.refuse_without_capture,
                    f"{target.capture_problem}; this method refuses a DFLASH start with a Gemma 4 target "
                    "and names the fix",
                    piece,
                    required=True,
                )
            )
        else:
            changes.append(
                Change(
                    method,
                    ADD,
                    capture.set_dflash_layers_to_capture,
                    "this line has no DFLASH capture hook for Gemma 4",
                    piece,
                    required=True,
                )
            )

    for worker in features.workers:
        name = worker.path.rsplit(".", 1)[1]
        piece = f"worker {name}"
        v1 = worker.kind == "v1"  # the v1 draft step refuses Gemma 4's head: the plugin is required there
        changes.append(
            Change(
                f"{worker.path}.__init__",
                AROUND,
                worker_hooks.check_draft_at_init,
                "check the draft's hidden size, vocabulary, layer ids, mask id and block size against a "
                "Gemma 4 target when the worker is built (the target has loaded, the draft not yet); "
                "compile flashinfer's sampling module meanwhile, so the first sampled request does not; "
                "log which of the plugin's pieces run",
                piece,
                ("server_args", "target_worker"),
                required=v1,
            )
        )
        changes.append(
            Change(
                f"{worker.path}._greedy_sample_from_vocab_parallel_head",
                AROUND,
                worker_hooks.greedy_sample,
                "exact greedy head for Gemma 4's tied head: split over TP ranks and synced, "
                "instead of a full-vocabulary head on every rank",
                piece,
                ("hidden_states", "lm_head"),
                required=v1,
            )
        )
        if v1:
            changes.append(
                Change(
                    f"{worker.path}._prepare_for_speculative_decoding",
                    AROUND,
                    worker_hooks.draft_step_with_replicated_head,
                    "the v1 draft step refuses heads without shard_indices",
                    piece,
                    required=True,
                )
            )
            changes.append(
                Change(
                    f"{worker.path}.forward_batch_generation",
                    AROUND,
                    worker_hooks.record_acceptance,
                    "the v1 worker reports no per-position acceptance; the plugin fills each request's "
                    "spec_correct_drafts_histogram (meta_info, read by `bench`)",
                    f"acceptance histogram {name}",
                    ("batch",),
                )
            )
        if worker.graph_sampler:
            changes.append(
                Change(
                    f"{worker.path}._maybe_build_draft_sampler",
                    AROUND,
                    worker_hooks.build_split_sampler,
                    "upstream's builder runs first; where it keeps Gemma 4's tied draft head eager (TP>1), "
                    "the plugin folds a split, synced head into the draft CUDA graph",
                    piece,
                )
            )
            left.append(
                Upstream(
                    f"{name} draft head CUDA-graph sampler at TP=1",
                    "upstream's sampler already scores the tied head inside the graph",
                )
            )
        if worker.kind == "v2":
            changes.append(
                Change(
                    f"{worker.path}.init_cuda_graphs",
                    AROUND,
                    worker_hooks.report_after_graphs,
                    "v2 sets the target's capture ids and builds the draft's graph sampler after the worker is "
                    "built: the line saying which of the plugin's pieces run is logged once they are set",
                    f"report {name}",
                )
            )
            left.append(Upstream(f"{name} (draft model, KV, verification)", "works for Gemma 4 as is"))
    if features.candidate_step:  # DFlash2 drafts (0.5.19+); never required: plain DFlash drafts run without it
        changes.append(
            Change(
                f"{compat.DFLASH2_DRAFT}.compute_candidates",
                AROUND,
                candidates.compute_candidates,
                "upstream's DFlash2 candidate step reads lm_head.org_vocab_size or shard_indices, which Gemma 4's "
                "tied head lacks (it raises); the plugin's exact top-k over that head, split over the TP ranks "
                "with one all-gather, the same candidates on every rank",
                DFLASH2_CANDIDATES,
                ("hidden",),
            )
        )
    failed = {module for module, _ in features.import_errors}
    if not features.workers and features.complete and not failed & {compat.module_of(p) for _, p in compat.WORKERS}:
        left.append(Upstream("DFlash worker", f"SGLang {features.version} has no DFLASH worker: nothing to patch"))
    if features.triton_backend and not backend_hooks.enabled():
        left.append(Upstream(BLOCK_ATTENTION_WHAT, f"{backend_hooks.ENV}=0"))
    elif features.triton_backend:  # speed only: never required
        why = (
            "a Gemma 4 DFLASH target's verify and its draft's block (TARGET_VERIFY mode) run the plugin's block "
            "attention kernel instead of SGLang's extend kernel"
        )
        for method, impl, binds in (
            ("__init__", backend_hooks.init_backend, ("model_runner",)),
            ("forward_extend", backend_hooks.route_verify, ("forward_batch",)),
        ):
            changes.append(Change(f"{compat.TRITON_BACKEND}.{method}", AROUND, impl, why, BLOCK_ATTENTION, binds))
    return changes, left


def installable(changes: list[Change]) -> tuple[list[Change], list[Skipped]]:
    """The changes of every piece whose targets all pass ``compat.target_problem``, and the pieces left out."""
    pieces: dict[str, list[Change]] = {}
    for change in changes:
        pieces.setdefault(change.piece, []).append(change)
    ok, skipped = [], []
    for piece, members in pieces.items():
        problems = [p for c in members if (p := compat.target_problem(c.target, c.binds, exists=c.how != ADD))]
        if problems:
            skipped.append(Skipped(piece, "; ".join(problems), any(c.required for c in members)))
        else:
            ok.extend(members)
    return ok, skipped


def resolve(features: SGLangFeatures) -> Plan:
    """The plan for ``features``, which of its pieces install, and the hooked modules that failed to import
    (a failed DFlash v1 worker module is required: the plugin is needed on that line)."""
    planned, left = plan(features)
    installed, skipped = installable(planned)
    for module, error in features.import_errors:
        required = module == compat.module_of(compat.V1_WORKER) and not compat.v2_line()
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
