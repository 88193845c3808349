"""The one list of what this plugin changes in SGLang.

``plan(features)`` returns, for the installed SGLang line, every change as a ``Change``:
the dotted SGLang target, how it is changed, the function used, and why. ``plugin.register()``
applies the list; ``doctor`` prints it. Nothing else in the package touches SGLang symbols.

How:
- ``REPLACE`` / ``AROUND``: registered with SGLang's ``HookRegistry`` (applied by ``apply_hooks()``).
- ``ADD``: the target class lacks the method on this line. ``HookRegistry`` can only wrap
  attributes that exist, so the method is set on the class directly (subclasses inherit it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sglang_gemma4_dflash.dflash import worker_hooks
from sglang_gemma4_dflash.gemma4 import capture
from sglang_gemma4_dflash.compat import SGLangFeatures

ADD, REPLACE, AROUND = "add", "replace", "around"


@dataclass(frozen=True)
class Change:
    target: str  # dotted path of the SGLang symbol
    how: str  # ADD, REPLACE or AROUND
    impl: Callable
    why: str


@dataclass(frozen=True)
class Upstream:
    """Something this line already does and the plugin deliberately leaves alone."""

    what: str
    why: str


def plan(features: SGLangFeatures) -> tuple[list[Change], list[Upstream]]:
    changes: list[Change] = []
    left: list[Upstream] = []

    for target in features.targets:
        method = f"{target.path}.set_dflash_layers_to_capture"
        if target.upstream_capture:
            changes.append(Change(method, REPLACE, capture.set_dflash_layers_to_capture,
                                  "upstream's accepts any ids; the plugin's rejects empty, out-of-range, "
                                  "non-int and unordered ids at start-up"))
        else:
            changes.append(Change(method, ADD, capture.set_dflash_layers_to_capture,
                                  "this line has no DFLASH capture hook for Gemma 4"))

    worker = features.worker_path
    if worker is not None:
        changes.append(Change(f"{worker}.__init__", AROUND, worker_hooks.check_draft_at_init,
                              "check the draft's hidden size, vocabulary, layer ids and mask id against a "
                              "Gemma 4 target before anything is built"))
        changes.append(Change(f"{worker}._greedy_sample_from_vocab_parallel_head", AROUND,
                              worker_hooks.greedy_sample,
                              "exact greedy head for Gemma 4's tied head: split over TP ranks and synced, "
                              "instead of a full-vocabulary head on every rank"))
    if features.worker == "v1":
        changes.append(Change(f"{worker}._prepare_for_speculative_decoding", AROUND,
                              worker_hooks.draft_step_with_replicated_head,
                              "the v1 draft step refuses heads without shard_indices"))
    if features.worker == "v2":
        if features.v2_graph_sampler:
            changes.append(Change(f"{worker}._maybe_build_draft_sampler", AROUND,
                                  worker_hooks.build_split_sampler,
                                  "at TP>1 upstream keeps Gemma 4's draft head eager and unsynced; the plugin "
                                  "folds a split, synced head into the draft CUDA graph"))
            left.append(Upstream("draft head CUDA-graph sampler at TP=1",
                                 "upstream's sampler already scores the tied head inside the graph"))
        left.append(Upstream("DFlash worker v2 (draft model, KV, verification)", "works for Gemma 4 as is"))
    if features.worker is None:
        left.append(Upstream("DFlash worker", f"SGLang {features.version} has no DFLASH worker: nothing to patch"))
    return changes, left


def describe(changes: list[Change], left: list[Upstream]) -> str:
    installed = ", ".join(f"{c.how} {c.target.replace('sglang.srt.', '')}" for c in changes) or "nothing"
    upstream = ", ".join(u.what for u in left) or "nothing"
    return f"installed: {installed}; left to upstream: {upstream}"
