"""What the plugin installs on each SGLang line from 0.5.12 to 0.5.23, and what has run where.

A table for people (``doctor``, the start-up line, README), never an input to what the plugin does: that is
decided from the installed line itself (``compat.probe``, ``plan.changes``). ``test/test_sglang_source_lines.py``
computes each row's plan and SGLang-side facts from that line's published wheel and compares them with this
table; README's support table is ``markdown()``.
"""

from __future__ import annotations

from dataclasses import dataclass

# What SGLang itself does with DFLASH and DP attention, per line (read from its argument checks).
DP_REFUSED = "refused by SGLang"
DP_NPU = "NPU only (refused on CUDA); not run with the plugin"
DP_CUDA = (
    "CUDA with --enable-dp-lm-head; SGLang keeps the draft eager (no draft CUDA graph), the plugin's head splits "
    "over each DP group's attention-TP ranks (run as gloo processes on CPU only)"
)
DISAGGREGATION = "speculative.dflash_disaggregation"  # 0.5.18+: the PD decode side's first draft input
DFLASH_DP = "speculative.dflash_dp"  # 0.5.23: DP DFlash's gather of a vocab-parallel draft embedding


@dataclass(frozen=True)
class Installs:
    """One plan: what the plugin installs on a line, as ``plan.changes`` gives it (``installs_of``)."""

    name: str
    summary: str
    changes: tuple[str, ...]  # "<how> <Class>.<method>", with " (required)" where the line needs it


@dataclass(frozen=True)
class Line:
    version: str
    torch: str  # the torch the wheel pins (0.5.18+ need a torch the GPU machine here does not have)
    installs: Installs
    dp_attention: str
    new_paths: tuple[str, ...] = ()  # DFlash modules the plugin leaves to SGLang (run beside it on 0.5.23 only)
    gpu: str = ""  # what ran on a GPU here ("": never)
    cpu: str = ""  # what runs on CPU here, in CI ("": nothing)


_CAPTURE = ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration")
_BLOCK = ("around TritonAttnBackend.__init__", "around TritonAttnBackend.forward_extend")
_V2_CAPTURE = tuple(f"around {c}.set_dflash_layers_to_capture" for c in _CAPTURE)
_V2 = ("around DFlashWorkerV2.__init__", "around DFlashWorkerV2._greedy_sample_from_vocab_parallel_head")
_GRAPH = ("around DFlashWorkerV2._maybe_build_draft_sampler",)
_REPORT = ("around DFlashWorkerV2.init_cuda_graphs",)  # the worker's INFO line, once v2 has set capture and sampler

V1 = Installs(
    "v1",
    "required: adds the capture method to the Gemma 4 targets; hooks the v1 DFlashWorker (start-up checks, the "
    "exact head, lets the draft step take the tied head, acceptance histogram); block-attention kernel",
    tuple(f"add {c}.set_dflash_layers_to_capture (required)" for c in _CAPTURE)
    + (
        "around DFlashWorker.__init__ (required)",
        "around DFlashWorker._greedy_sample_from_vocab_parallel_head (required)",
        "around DFlashWorker._prepare_for_speculative_decoding (required)",
        "around DFlashWorker.forward_batch_generation",
    )
    + _BLOCK,
)
V2_EAGER = Installs(
    "v2",
    "checks the capture ids, then upstream's capture runs; hooks DFlashWorkerV2 (start-up checks, the split exact "
    "head, eager: SGLang has no draft-graph sampler on this line); block-attention kernel",
    _V2_CAPTURE + _V2 + _REPORT + _BLOCK,
)
V2_GRAPH = Installs(
    "v2+graph",
    "checks the capture ids, then upstream's capture runs; hooks DFlashWorkerV2 (start-up checks, the split exact "
    "head, eager and, at TP>1 where SGLang keeps Gemma 4's tied head out of the draft CUDA graph, in that graph); "
    "block-attention kernel",
    _V2_CAPTURE + _V2 + _GRAPH + _REPORT + _BLOCK,
)
V2_DFLASH2 = Installs(
    "v2+dflash2",
    "as v2+graph, and DFlash2 drafts' candidate step on Gemma 4's tied head (exact top-k split over the TP ranks; "
    "SGLang's step raises on that head)",
    _V2_CAPTURE + _V2 + _GRAPH + _REPORT + ("around DFlash2DraftModel.compute_candidates",) + _BLOCK,
)

_GPU_0513 = (
    "TP=1, tiny checkpoints: text and multimodal DFLASH token-identical to plain greedy, block attention on and "
    "off; accept length 8.00 of 8; again with the kernel's defaults of 2026-12-05 (section 17's) on an H100"
)
_GPU_0516 = (
    "TP=1, tiny checkpoints: text and multimodal DFLASH token-identical to plain greedy, with and without the "
    "plugin, block attention on and off; accept length 8.00 of 8"
)
_GPU_0517 = (
    "TP=1, tiny checkpoints, block attention on: text and multimodal DFLASH token-identical to plain greedy "
    "(18/18); accept length 8.00 of 8"
)
_CPU_0513 = "its own cases of the suite: install, capture method, v1 worker hooks, checkpoints, block routing"
_CPU_0523 = "the whole suite (TP>1 and DP attention as gloo processes)"

LINES = (
    Line("0.5.12", "2.11.0", V1, DP_REFUSED),
    Line("0.5.12.post1", "2.11.0", V1, DP_REFUSED),
    Line("0.5.13", "2.11.0", V1, DP_REFUSED, gpu=_GPU_0513, cpu=_CPU_0513),
    Line("0.5.14", "2.11.0", V2_EAGER, DP_REFUSED),
    Line("0.5.15", "2.11.0", V2_GRAPH, DP_REFUSED),
    Line("0.5.16", "2.11.0", V2_GRAPH, DP_REFUSED, gpu=_GPU_0516),
    Line("0.5.17", "2.11.0", V2_GRAPH, DP_REFUSED, gpu=_GPU_0517),
    Line("0.5.18", "2.13.0", V2_GRAPH, DP_REFUSED, (DISAGGREGATION,)),
    Line("0.5.19", "2.13.0", V2_DFLASH2, DP_REFUSED, (DISAGGREGATION,)),
    Line("0.5.20", "2.13.0", V2_DFLASH2, DP_NPU, (DISAGGREGATION,)),
    Line("0.5.21", "2.13.0", V2_DFLASH2, DP_NPU, (DISAGGREGATION,)),
    Line("0.5.22", "2.14.1", V2_DFLASH2, DP_NPU, (DISAGGREGATION,)),
    Line("0.5.23", "2.14.1", V2_DFLASH2, DP_CUDA, (DISAGGREGATION, DFLASH_DP), cpu=_CPU_0523),
)


PLANS = (V1, V2_EAGER, V2_GRAPH, V2_DFLASH2)


def line(version: str) -> Line | None:
    """The table's row for an SGLang version (exact match), or None."""
    return next((row for row in LINES if row.version == version), None)


def announce(version: str) -> str:
    """What the start-up line says about this line's row."""
    row = line(version)
    if row is None:
        return (
            f"SGLang {version} is not among the lines checked against their published source ({LINES[0].version}"
            f"-{LINES[-1].version}): each module's line below says what installs"
        )
    return f"on this line, by default (checked against its published source), it installs: {row.installs.summary}"


def compare(version: str, changes) -> str:
    """This line's installed changes against its row (``doctor``)."""
    row = line(version)
    if row is None:
        return announce(version)
    got, want = installs_of(changes), row.installs.changes
    if got == want:
        return f"as the table says for SGLang {version} ({row.installs.name}, from its published source)"
    missing = [c for c in want if c not in got]
    extra = [c for c in got if c not in want]
    return (
        f"DIFFERS from the table for SGLang {version} ({row.installs.name}, from its published source): "
        f"not installed here: {missing or 'nothing'}; installed here only: {extra or 'nothing'}"
    )


def change_text(change) -> str:
    """A ``plan.Change`` as the table writes it."""
    cls, method = change.target.rsplit(".", 2)[-2:]
    return f"{change.how} {cls}.{method}" + (" (required)" if change.required else "")


def installs_of(changes) -> tuple[str, ...]:
    return tuple(change_text(c) for c in changes)


RUNS = (
    "GPU runs: one H200, TP=1, the tiny offline checkpoints; 0.5.13 and 0.5.16 re-run with the plugin after issue 19 "
    "(2026-12-03), 0.5.17 with the plugin before it; 0.5.13 again on one H100 with the block kernel's section-17 defaults "
    "(2026-12-05, docs/gpu_runs.md section 19). 0.5.18+ pin torch >= 2.13, which the GPU machine here does not "
    "have: never run on a GPU here. Every row's plan is checked against that line's published source "
    "(test_sglang_source_lines.py)."
)


def format_lines() -> str:
    """The table as text (``doctor``)."""
    out = []
    for r in LINES:
        out.append(f"  {r.version:13s} {r.installs.name:9s} torch {r.torch:7s} GPU: {r.gpu or 'never'}")
        out.append(f"  {'':33s} CPU: {r.cpu or 'nothing'}; DFLASH with DP attention: {r.dp_attention}")
        if r.new_paths:
            out.append(f"  {'':33s} DFlash modules left to SGLang: {', '.join(r.new_paths)}")
    out += [f"  {p.name}: {p.summary}" for p in PLANS]
    return "\n".join(out + [f"  {RUNS}"])


def markdown() -> str:
    """The table as README's support table."""
    head = (
        "| SGLang | torch | the plugin installs | its plan against the wheel's source | DFLASH with DP attention "
        "| on a GPU here (one H200; 0.5.13 also one H100) | on CPU here |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    rows = [
        f"| {r.version} | {r.torch} | {r.installs.name} | checked | {r.dp_attention} | {r.gpu or 'never'} "
        f"| {r.cpu or '—'} |"
        for r in LINES
    ]
    legend = [f"- **{p.name}**: {p.summary}." for p in PLANS]
    return "\n".join([head, *rows, "", *legend, "", RUNS])
