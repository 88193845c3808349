"""The SGLang lines from 0.5.12 to 0.5.23: each one's torch pin, what the plugin installs there (its plan), what
SGLang does with DFLASH and DP attention, and what this project has shown on it.

A table for people (``doctor``, the start-up line, README), never an input to what the plugin does: that is
decided from the installed line itself (``compat.probe``, ``plan.changes``). ``test/test_sglang_source_lines.py``
computes each row's plan and SGLang-side facts from that line's published wheel and compares them with this
table; README's support table is ``markdown()``. The evidence behind each level is in docs/results.md.
"""

from __future__ import annotations

from dataclasses import dataclass

# What SGLang itself does with DFLASH and DP attention, per line (read from its argument checks).
DP_REFUSED = "refused by SGLang"
DP_NPU = "NPU only (refused on CUDA)"
DP_CUDA = "CUDA with --enable-dp-lm-head (SGLang keeps the draft eager)"
DISAGGREGATION = "speculative.dflash_disaggregation"  # 0.5.18+: the PD decode side's first draft input
DFLASH_DP = "speculative.dflash_dp"  # 0.5.23: DP DFlash's gather of a vocab-parallel draft embedding

# What this project has shown on a line, one word each (``Line.shown``): how the tables say it, and what that means.
SHOWN = {
    "gpu": ("GPU run", "DFLASH served with the plugin on a GPU"),
    "gpu-offpin": (
        "GPU run off its torch pin",
        "the same on another torch than the line pins (the GPU machine's, with a shim for the line's kernel "
        "package), not the stack a user installs",
    ),
    "cpu": ("CPU only", "the CPU test suite runs on this line"),
    "source": ("source only", "the line's published source was read"),
}


@dataclass(frozen=True)
class Installs:
    """One plan: what the plugin installs on a line, as ``plan.changes`` gives it (``installs_of``)."""

    name: str
    summary: str
    changes: tuple[str, ...]  # "<how> <Class>.<method>", with " (required)" where the line needs it


@dataclass(frozen=True)
class Line:
    version: str
    torch: str  # the torch the wheel pins
    installs: Installs
    dp_attention: str  # what SGLang does with DFLASH and DP attention (DP_*)
    shown: str  # a key of SHOWN
    new_paths: tuple[str, ...] = ()  # DFlash modules this line adds, which the plugin leaves to SGLang

    def __post_init__(self):
        if self.shown not in SHOWN:
            raise ValueError(f"Line {self.version}: shown={self.shown!r}; use one of {sorted(SHOWN)}")


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

LINES = (
    Line("0.5.12", "2.11.0", V1, DP_REFUSED, "source"),
    Line("0.5.12.post1", "2.11.0", V1, DP_REFUSED, "source"),
    Line("0.5.13", "2.11.0", V1, DP_REFUSED, "gpu"),
    Line("0.5.14", "2.11.0", V2_EAGER, DP_REFUSED, "source"),
    Line("0.5.15", "2.11.0", V2_GRAPH, DP_REFUSED, "source"),
    Line("0.5.16", "2.11.0", V2_GRAPH, DP_REFUSED, "gpu"),
    Line("0.5.17", "2.11.0", V2_GRAPH, DP_REFUSED, "gpu"),
    Line("0.5.18", "2.13.0", V2_GRAPH, DP_REFUSED, "source", (DISAGGREGATION,)),
    Line("0.5.19", "2.13.0", V2_DFLASH2, DP_REFUSED, "source", (DISAGGREGATION,)),
    Line("0.5.20", "2.13.0", V2_DFLASH2, DP_NPU, "source", (DISAGGREGATION,)),
    Line("0.5.21", "2.13.0", V2_DFLASH2, DP_NPU, "source", (DISAGGREGATION,)),
    Line("0.5.22", "2.14.1", V2_DFLASH2, DP_NPU, "source", (DISAGGREGATION,)),
    Line("0.5.23", "2.14.1", V2_DFLASH2, DP_CUDA, "gpu-offpin", (DISAGGREGATION, DFLASH_DP)),
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


EVIDENCE = "docs/results.md"  # in the project's repository: the runs behind each line's level


def columns(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    """Rows of cells as text lines, each column as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


_HEADER = ("SGLang", "torch", "the plugin installs", "DFLASH with DP attention", "shown here")


def _cells(row: Line) -> tuple[str, ...]:
    return (row.version, row.torch, row.installs.name, row.dp_attention, SHOWN[row.shown][0])


def format_lines(installed: str | None = None) -> str:
    """The table as aligned text (``doctor``); ``installed``'s row is marked with ``*``."""
    marks = ["  "] + ["* " if r.version == installed else "  " for r in LINES]
    table = [m + text for m, text in zip(marks, columns([_HEADER, *map(_cells, LINES)], indent=""))]
    plans = columns([(f"{p.name}:", p.summary) for p in PLANS], indent="  ")
    return "\n".join([*table, "  plans:", *("  " + p for p in plans)])


def markdown() -> str:
    """The table as README's support table, with the legend of its plan names and evidence levels."""
    rows = ["| " + " | ".join(cells) + " |" for cells in (_HEADER, ("---",) * len(_HEADER), *map(_cells, LINES))]
    legend = [f"- **{p.name}**: {p.summary}." for p in PLANS]
    used = [SHOWN[k] for k in SHOWN if any(r.shown == k for r in LINES)]  # the levels some row has
    shown = (
        "Shown here: " + "; ".join(f"**{label}**: {meaning}" for label, meaning in used) + ". Every row's plan is "
        f"checked against its line's published source. The runs: [{EVIDENCE}]({EVIDENCE})."
    )
    return "\n".join([*rows, "", *legend, "", shown])
