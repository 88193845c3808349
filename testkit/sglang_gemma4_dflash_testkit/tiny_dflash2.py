"""The tiny DFlash draft as a DFlash2 draft (SGLang 0.5.19+ ``DFlash2DraftModel``), and its draft step on CPU.

    path = write_dflash2_draft(out_dir)          # the tiny draft + a candidate selector, as a checkpoint
    draft = load_draft(path)                     # through SGLang's config parser and model loader (any TP)
    ids = selector_draft_tokens(draft, head, hidden)   # SGLang's _SelectorDraftSampler, as the draft graph calls it

The checkpoint is the tiny draft (``tiny.draft_config`` / ``tiny.draft_weights``) with ``architectures =
["DFlash2DraftModel"]``, ``dflash_config.selector_rank`` / ``selector_top_k`` and the selector's weights (seeded,
small), and its MLP padded with zero rows to a multiple of 192 so it splits over 2 and 3 ranks (a zero row adds
nothing). The selector's transition scores are small next to the draft's logit margins, so its walk follows the
top candidate and the DFlash2 draft drafts what the plain one drafts (the whole block, with a right capture).
"""

from __future__ import annotations

from pathlib import Path

import torch

from sglang_gemma4_dflash_testkit import tiny
from sglang_gemma4_dflash_testkit.tiny import TINY

SELECTOR_RANK = 8
SELECTOR_TOP_K = 4
SELECTOR_STD = 0.01
WIDTH_MULTIPLE = 192  # 64 x 3: splits over 1, 2 and 3 ranks


def dflash2_weights(seed: int = 0) -> dict:
    weights = dict(tiny.draft_weights(seed))
    width = weights["layers.0.mlp.gate_proj.weight"].shape[0]
    pad = -(-width // WIDTH_MULTIPLE) * WIDTH_MULTIPLE - width
    for name in ("gate_proj", "up_proj"):
        w = weights[f"layers.0.mlp.{name}.weight"]
        weights[f"layers.0.mlp.{name}.weight"] = torch.cat([w, w.new_zeros(pad, w.shape[1])])
    down = weights["layers.0.mlp.down_proj.weight"]
    weights["layers.0.mlp.down_proj.weight"] = torch.cat([down, down.new_zeros(down.shape[0], pad)], dim=1)
    gen = torch.Generator().manual_seed(seed + 2)
    for name, shape in (
        ("predecessor_codebook", (TINY.vocab_size, SELECTOR_RANK)),
        ("successor_codebook", (TINY.vocab_size, SELECTOR_RANK)),
        ("hidden_projection.weight", (SELECTOR_RANK, TINY.hidden_size)),
    ):
        weights[f"candidate_selector.{name}"] = SELECTOR_STD * torch.randn(shape, generator=gen)
    return weights


def dflash2_config() -> dict:
    config = tiny.draft_config()
    config["architectures"] = ["DFlash2DraftModel"]
    config["intermediate_size"] = dflash2_weights()["layers.0.mlp.gate_proj.weight"].shape[0]
    config["dflash_config"] = dict(config["dflash_config"], selector_rank=SELECTOR_RANK, selector_top_k=SELECTOR_TOP_K)
    return config


def write_dflash2_draft(out_dir, seed: int = 0) -> Path:
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    tiny._write_json(path / "config.json", dflash2_config())
    tiny._save_safetensors(dflash2_weights(seed), path / "model.safetensors", TINY.dtype)
    return path


def load_draft(path, dtype: str = "float32"):
    """The DFlash2 draft through SGLang's ``ModelConfig`` and ``get_model`` on CPU, at the TP of this process."""
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model

    config = ModelConfig(str(path), dtype=dtype, is_draft_model=True)
    return get_model(model_config=config, load_config=LoadConfig(), device_config=DeviceConfig("cpu"))


def target_head(target_dir):
    """Gemma 4's tied head as SGLang builds it (``Gemma4TextScaledWordEmbedding``), filled from the tiny target's
    checkpoint: what the DFlash2 worker attaches to the draft as ``draft_model.lm_head`` (float32)."""
    from safetensors.torch import load_file
    from sglang.srt.models.gemma4_causal import Gemma4TextScaledWordEmbedding

    weights = load_file(str(Path(target_dir) / "model.safetensors"))
    (weight,) = [w for name, w in weights.items() if name.endswith("embed_tokens.weight")]
    head = Gemma4TextScaledWordEmbedding(
        weight.shape[0], weight.shape[1], TINY.pad_token_id, embed_scale=TINY.hidden_size**0.5
    )
    with torch.no_grad():
        head.weight.copy_(weight.float())
    return head


def selector_draft_tokens(draft, head, hidden: torch.Tensor, anchor: int) -> tuple[list[int], torch.Tensor]:
    """One block's drafted ids (positions 1..) and its candidates ``[block - 1, k]``: SGLang's own
    ``_SelectorDraftSampler`` called as the draft CUDA graph calls it, greedy, with ``head`` as the draft's
    ``lm_head`` (as the worker's ``_maybe_build_draft_sampler`` attaches it)."""
    from sglang.srt.speculative.dflash_worker_v2 import _SelectorDraftSampler

    draft.lm_head = head
    block = hidden.shape[0]
    sampler = _SelectorDraftSampler(draft_model=draft, block_size=block, max_bs=1, device="cpu", sampling_enabled=True)
    sampler.stage_sampling_params(bs=1, sampling_info=None)  # greedy
    ids = torch.full((block,), TINY.mask_token_id, dtype=torch.int64)
    ids[0] = anchor
    with torch.no_grad():
        sampler(hidden, ids)
    return sampler.out[: block - 1].tolist(), sampler.candidate_out[0].clone()
