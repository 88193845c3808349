"""Where SGLang keeps what the plugin reaches, and imports of it that never raise.

Importing an SGLang module here never raises: a failure is recorded (``import_errors()``) and the module counts as
absent, so only the pieces that need it are left out.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, version

V1_WORKER = "sglang.srt.speculative.dflash_worker.DFlashWorker"
V2_WORKER = "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2"
WORKERS = (("v2", V2_WORKER), ("v1", V1_WORKER))

# Gemma 4 classes that can be a DFLASH target (they carry the text stack and a tied head).
# Subclasses (e.g. gemma4_unified.Gemma4UnifiedForConditionalGeneration) inherit the method
# from these and are listed separately only for the report.
GEMMA4_TARGETS = (
    "sglang.srt.models.gemma4_causal.Gemma4ForCausalLM",
    "sglang.srt.models.gemma4_mm.Gemma4ForConditionalGeneration",
)
GEMMA4_SUBCLASS_TARGETS = ("sglang.srt.models.gemma4_unified.Gemma4UnifiedForConditionalGeneration",)
# The text stack both targets run; its forward collects the hidden states of ``layers_to_capture``.
GEMMA4_TEXT_MODEL = "sglang.srt.models.gemma4_causal.Gemma4TextModel"
# The first SGLang line whose Gemma 4 models can capture hidden states (0.5.11 cannot), as pyproject.toml says.
FIRST_SUPPORTED = "0.5.12"
TRITON_BACKEND = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend"
DFLASH_DRAFT = "sglang.srt.models.dflash.DFlashDraftModel"
# The DFlash2 draft (0.5.19+): its candidate step reads the target head's vocab metadata, which Gemma 4's tied
# head lacks; and that head's class.
DFLASH2_DRAFT = "sglang.srt.models.dflash.DFlash2DraftModel"
GEMMA4_EMBEDDING = "sglang.srt.models.gemma4_causal.Gemma4TextScaledWordEmbedding"
DFLASH_VERIFY_INPUT = "sglang.srt.speculative.dflash_info.DFlashVerifyInput"


def module_of(path: str) -> str:
    return path.rpartition(".")[0]


def installed_sglang_version() -> str:
    try:
        return version("sglang")
    except PackageNotFoundError:
        return "not installed"


def module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_import_errors: dict[str, str] = {}


def import_module(module: str):
    """``module``, imported if needed; None when it is absent or importing it raised (then recorded)."""
    if sys.modules.get(module) is not None:
        return sys.modules[module]
    if module in _import_errors or not module_exists(module):
        return None
    try:
        return importlib.import_module(module)
    except Exception as exc:  # a broken SGLang module disables only the pieces that need it
        _import_errors[module] = f"{type(exc).__name__}: {exc}"
        return None


def import_errors() -> dict[str, str]:
    """``{module: error}`` of the SGLang modules whose import raised in this process."""
    return dict(_import_errors)


def resolve(path: str):
    """Import ``pkg.module.Attr`` and return the attribute (None if absent or the import failed)."""
    module = import_module(module_of(path))
    return None if module is None else getattr(module, path.rpartition(".")[2], None)


def loaded(path: str):
    """``pkg.module.Attr`` if its module is already imported, else None. Never imports."""
    module = sys.modules.get(module_of(path))
    return None if module is None else getattr(module, path.rpartition(".")[2], None)
