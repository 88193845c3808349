"""The one list of what this plugin changes in SGLang.

``plan(features)`` returns, for the installed SGLang line, every change as a ``Change``: the dotted
SGLang target, how it is changed, the function used, why, the piece it belongs to and the arguments
the hook binds. ``plugin.register()`` installs the pieces whose every target passes the probe
(``installable``); ``doctor`` prints the same. Nothing else in the package touches SGLang symbols.

How:
- ``AROUND``: registered with SGLang's ``HookRegistry`` (applied by ``apply_hooks()``).
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
from sglang_gemma4_dflash.dflash import worker_hooks
from sglang_gemma4_dflash.gemma4 import capture

ADD, AROUND = "add", "around"
BLOCK_ATTENTION = "block attention"


@dataclass(frozen=True)
class Change:
    target: str  # dotted path of the SGLang symbol
    how: str  # ADD or AROUND
    impl: Callable
    why: str
    piece: str  # the changes of one piece are installed together or not at all
    binds: tuple[str, ...] = ()  # parameters of the target the hook passes or reads by name
    required: bool = True  # a DFLASH start with a Gemma 4 target is refused without it (False: speed only)


@dataclass(frozen=True)
class Upstream:
    """Something this line already does and the plugin deliberately leaves alone."""

    what: str
    why: str


@dataclass(frozen=True)
class Skipped:
    """A piece left out because a target failed the probe."""

    piece: str
    problem: str


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
        else:
            changes.append(
                Change(
                    method,
                    ADD,
                    capture.set_dflash_layers_to_capture,
                    "this line has no DFLASH capture hook for Gemma 4",
                    piece,
                )
            )

    for worker in features.workers:
        name = worker.path.rsplit(".", 1)[1]
        piece = f"worker {name}"
        changes.append(
            Change(
                f"{worker.path}.__init__",
                AROUND,
                worker_hooks.check_draft_at_init,
                "check the draft's hidden size, vocabulary, layer ids and mask id against a "
                "Gemma 4 target before anything is built; compile flashinfer's sampling module meanwhile, "
                "so the first sampled request does not",
                piece,
                ("server_args", "target_worker"),
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
            )
        )
        if worker.kind == "v1":
            changes.append(
                Change(
                    f"{worker.path}._prepare_for_speculative_decoding",
                    AROUND,
                    worker_hooks.draft_step_with_replicated_head,
                    "the v1 draft step refuses heads without shard_indices",
                    piece,
                )
            )
        if worker.graph_sampler:
            changes.append(
                Change(
                    f"{worker.path}._maybe_build_draft_sampler",
                    AROUND,
                    worker_hooks.build_split_sampler,
                    "at TP>1 upstream keeps Gemma 4's draft head eager and unsynced; the plugin "
                    "folds a split, synced head into the draft CUDA graph",
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
            left.append(Upstream(f"{name} (draft model, KV, verification)", "works for Gemma 4 as is"))
    if not features.workers:
        left.append(Upstream("DFlash worker", f"SGLang {features.version} has no DFLASH worker: nothing to patch"))
    elif features.triton_backend and not backend_hooks.enabled():
        left.append(Upstream("verify and draft block attention", f"{backend_hooks.ENV}=0"))
    elif features.triton_backend:
        piece = BLOCK_ATTENTION
        why = (
            "a Gemma 4 DFLASH target's verify and its draft's block (TARGET_VERIFY mode) run the plugin's block "
            "attention kernel instead of SGLang's extend kernel"
        )
        changes.append(
            Change(
                f"{compat.TRITON_BACKEND}.__init__",
                AROUND,
                backend_hooks.init_backend,
                why,
                piece,
                ("model_runner",),
                required=False,
            )
        )
        changes.append(
            Change(
                f"{compat.TRITON_BACKEND}.forward_extend",
                AROUND,
                backend_hooks.route_verify,
                why,
                piece,
                ("forward_batch",),
                required=False,
            )
        )
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
            skipped.append(Skipped(piece, "; ".join(problems)))
        else:
            ok.extend(members)
    return ok, skipped


def describe(changes: list[Change], left: list[Upstream], skipped: list[Skipped] = ()) -> str:
    installed = ", ".join(f"{c.how} {c.target.replace('sglang.srt.', '')}" for c in changes) or "nothing"
    upstream = ", ".join(u.what for u in left) or "nothing"
    text = f"installed: {installed}; left to upstream: {upstream}"
    if skipped:
        text += "; NOT installed: " + ", ".join(f"{s.piece} ({s.problem})" for s in skipped)
    on = any(c.piece == BLOCK_ATTENTION for c in changes)
    text += f"; block attention kernel {'on' if on else 'off'}"
    return text
