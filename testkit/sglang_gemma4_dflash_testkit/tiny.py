"""Tiny, offline, seeded Gemma 4 checkpoints for tests: a text target, the same target as a multimodal
model, and a DFlash draft for it.

    from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints, TINY
    paths = write_tiny_checkpoints("/tmp/tiny")   # {"target": ..., "target_mm": ..., "draft": ...}

Why the weights are not simply random: a random tiny Gemma 4 either repeats one token or flips its
greedy choice under bf16 noise within a few tokens, so "DFLASH output == plain output" on it proves
little. The target therefore has a *planted successor map*: layer 0's MLP is a lookup table that
turns the last token ``t`` into ``SUCCESSOR[t]``, a single long cycle over the ordinary tokens, so
greedy decoding walks that cycle from the prompt's last token with a wide top-1 margin. Every other
weight is random, scaled so that attention, the per-layer inputs and the other MLPs move the logits
(they depend on the whole context) without changing the argmax. `margin_report` measures the margin.

How the plant works (hidden size d, all token codes unit vectors):
  * ``embed[t] = KAPPA * e0 + code[t]``: dim 0 is a constant "bias" lane, dim 1 flags the mask
    token, dims 2.. hold a random code per token (the mask token's code is e1).
  * layer 0 MLP row ``t``: ``gate = BETA * (code[t] - THETA * e0 / KAPPA)`` fires only for the
    token whose code matches (gelu cuts the rest), ``up = e0`` supplies a constant, and
    ``down = code[SUCCESSOR[t]] - code[t]`` swaps the token's code for its successor's. The post-FFN
    norm scales that swap to cancel the embedding's own code exactly.
  * the final norm zeroes dims 0 and 1, so the LM head (tied to the embedding) scores
    ``code[SUCCESSOR[t]]`` against every code: ~1 for the successor, |cos| <= ~0.3 for the rest.

The draft predicts the same map for the first drafted token: its layer 0 attention lets every mask
position attend to the block's first token (the verified "anchor") through one low-frequency RoPE
lane, copies its embedding, and its MLP applies the same lookup. Every drafted position predicts
``SUCCESSOR[anchor]``, so position 1 is right and 2..block_size-1 are wrong: accept length 2 per
step (one accepted draft token plus the target's bonus token), which exercises both accepting and
rejecting. The draft does not use the context features (its anchor lookup reads the block only), so
acceptance on the tiny setup says nothing about the captured target hidden states: those are
checked against transformers by the capture tests.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglang_gemma4_dflash_testkit import tiny_tokenizer

FORMAT_VERSION = 1
STAMP_FILE = "tiny_stamp.json"
CHECKPOINTS = ("target", "target_mm", "draft")

# Plant constants (see the module docstring).
KAPPA = 0.5  # constant lane of every embedding
THETA = 0.6  # a code must match with cosine > THETA to fire its MLP row
BETA = 2.0  # gate sharpness
NOISE_NORM_WEIGHT = 0.12  # weight of the post-norms whose outputs are random "context noise"
DRAFT_QK_WEIGHT = 3.0  # q_norm / k_norm weight of the draft's anchor lane: logit 8 * 3 * 3 = 72
INIT_STD = 0.02


@dataclass(frozen=True)
class TinySpec:
    """The shapes and ids of the tiny checkpoints (constants; other modules rely on them)."""

    vocab_size: int = 320
    hidden_size: int = 256
    intermediate_size: int = 320
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    sliding_window: int = 16
    layer_types: tuple = (
        "sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
        "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    )  # fmt: skip
    hidden_size_per_layer_input: int = 16
    final_logit_softcapping: float = 30.0
    max_position_embeddings: int = 4096
    pad_token_id: int = tiny_tokenizer.TOKEN_ID["<pad>"]
    eos_token_id: int = tiny_tokenizer.TOKEN_ID["<eos>"]
    bos_token_id: int = tiny_tokenizer.TOKEN_ID["<bos>"]
    mask_token_id: int = tiny_tokenizer.TOKEN_ID["<mask>"]
    mask_token: str = "<mask>"
    num_special_tokens: int = len(tiny_tokenizer.SPECIAL_TOKENS)
    # The draft.
    draft_num_layers: int = 2
    draft_num_attention_heads: int = 4
    draft_head_dim: int = 64
    block_size: int = 8
    # What SGLang's build_target_layer_ids(8, 2) picks too.
    target_layer_ids: tuple = (1, 5)
    # The multimodal target's vision tower.
    vision_hidden_size: int = 32
    vision_patch_size: int = 16
    vision_pooling_kernel_size: int = 3
    vision_max_soft_tokens: int = 70  # Gemma4ImageProcessor accepts 70, 140, 280, 560, 1120
    vision_position_embedding_size: int = 1024
    # Greedy top-1 minus top-2 logit (after soft-capping) that the bf16 target keeps along its
    # greedy continuations; tests assert it and e2e runs check it before trusting "identical".
    min_margin: float = 4.0
    dtype: str = "bfloat16"

    @property
    def full_attention_layers(self) -> tuple:
        return tuple(i for i, kind in enumerate(self.layer_types) if kind == "full_attention")


TINY = TinySpec()


# --------------------------------------------------------------------------- the planted map


def successor_map(seed: int = 0, spec: TinySpec = TINY) -> list[int]:
    """``SUCCESSOR[t]`` for every token id: one cycle through all ordinary tokens (ids >= the
    special tokens); special tokens map into the cycle. Greedy decoding of the tiny target follows it."""
    import torch

    gen = torch.Generator().manual_seed(1000 + seed)
    ordinary = list(range(spec.num_special_tokens, spec.vocab_size))
    order = [ordinary[i] for i in torch.randperm(len(ordinary), generator=gen).tolist()]
    successor = [0] * spec.vocab_size
    for i, token in enumerate(order):
        successor[token] = order[(i + 1) % len(order)]
    for special in range(spec.num_special_tokens):
        successor[special] = order[(7 * special) % len(order)]
    return successor


def planted_continuation(prompt_ids, num_tokens: int, seed: int = 0, spec: TinySpec = TINY) -> list[int]:
    """The tokens greedy decoding of the tiny target produces after ``prompt_ids``."""
    successor = successor_map(seed, spec)
    out, token = [], int(list(prompt_ids)[-1])
    for _ in range(num_tokens):
        token = successor[token]
        out.append(token)
    return out


def _token_codes(seed: int, spec: TinySpec):
    """[vocab, hidden] unit codes: dims 2.. random per token; the mask token's code is e1; dim 0 unused."""
    import torch

    gen = torch.Generator().manual_seed(2000 + seed)
    codes = torch.zeros(spec.vocab_size, spec.hidden_size)
    codes[:, 2:] = torch.randn(spec.vocab_size, spec.hidden_size - 2, generator=gen)
    codes[spec.mask_token_id] = 0.0
    codes = codes / codes.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    codes[spec.mask_token_id, 1] = 1.0
    return codes


def _lookup_mlp(codes, successor, *, threshold_lane: float, up_lane: float, skip=()):
    """gate/up/down weights of a one-row-per-token lookup MLP (see the module docstring).

    ``threshold_lane`` is the gate weight on the constant lane e0 (``-BETA * THETA * scale``) and
    ``up_lane`` the up weight on it, both in the normalized input's units. Rows in ``skip`` never fire.
    """
    import torch

    vocab, hidden = codes.shape
    gate = BETA * codes.clone()
    gate[:, 0] = threshold_lane
    up = torch.zeros(vocab, hidden)
    up[:, 0] = up_lane
    down = (codes[torch.tensor(successor)] - codes).T.contiguous()  # [hidden, vocab]
    for row in skip:
        gate[row] = 0.0
        gate[row, 0] = -abs(threshold_lane)
        down[:, row] = 0.0
    return gate, up, down


# --------------------------------------------------------------------------- configs


def _rope_parameters():
    # Gemma 4's published layout: plain RoPE on sliding layers, proportional (25% rotated) on full ones.
    return {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
    }


def text_config(spec: TinySpec = TINY) -> dict:
    """config.json body of the text target (model_type gemma4_text).

    ``global_head_dim`` / ``num_global_key_value_heads`` are written equal to the sliding values:
    transformers defaults ``global_head_dim`` to 512 when it is missing, and SGLang (0.5.13 and
    0.5.23 alike) does not flatten a plain ``gemma4_text`` config into its full/``swa_*`` keys (it
    does so only for the multimodal ``gemma4`` types), so one uniform shape is the only layout both
    read the same way. The flattened ``swa_*`` / ``v_head_dim`` keys are then written explicitly so
    every line reads them instead of falling back.
    """
    return {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "global_head_dim": spec.head_dim,
        "num_global_key_value_heads": spec.num_key_value_heads,
        "swa_head_dim": spec.head_dim,
        "swa_v_head_dim": spec.head_dim,
        "swa_num_key_value_heads": spec.num_key_value_heads,
        "v_head_dim": spec.head_dim,
        "attention_k_eq_v": False,
        "attention_bias": False,
        "hidden_activation": "gelu_pytorch_tanh",
        "layer_types": list(spec.layer_types),
        "sliding_window": spec.sliding_window,
        "rope_parameters": _rope_parameters(),
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "final_logit_softcapping": spec.final_logit_softcapping,
        "hidden_size_per_layer_input": spec.hidden_size_per_layer_input,
        "vocab_size_per_layer_input": spec.vocab_size,
        "num_kv_shared_layers": 0,
        "enable_moe_block": False,
        "use_double_wide_mlp": False,
        "tie_word_embeddings": True,
        "pad_token_id": spec.pad_token_id,
        "eos_token_id": spec.eos_token_id,
        "bos_token_id": spec.bos_token_id,
        "initializer_range": INIT_STD,
        "dtype": spec.dtype,
    }


def vision_config(spec: TinySpec = TINY) -> dict:
    return {
        "model_type": "gemma4_vision",
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": 2 * spec.vision_hidden_size,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": spec.vision_hidden_size // 2,
        "hidden_activation": "gelu_pytorch_tanh",
        "patch_size": spec.vision_patch_size,
        "pooling_kernel_size": spec.vision_pooling_kernel_size,
        "position_embedding_size": spec.vision_position_embedding_size,
        "rms_norm_eps": 1e-6,
        "standardize": False,
        "use_clipped_linears": False,
        "dtype": spec.dtype,
    }


def mm_config(spec: TinySpec = TINY) -> dict:
    """config.json of the multimodal target (model_type gemma4): the text config plus a vision tower."""
    tok = tiny_tokenizer.TOKEN_ID
    text = {k: v for k, v in text_config(spec).items() if k != "architectures"}
    return {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "text_config": text,
        "vision_config": vision_config(spec),
        "audio_config": None,
        "boi_token_id": tok["<|image>"],
        "eoi_token_id": tok["<image|>"],
        "image_token_id": tok["<|image|>"],
        "video_token_id": tok["<|video|>"],
        "boa_token_id": tok["<|audio>"],
        "eoa_token_index": tok["<audio|>"],
        "eoa_token_id": tok["<audio|>"],
        "audio_token_id": tok["<|audio|>"],
        "tie_word_embeddings": True,
        "initializer_range": INIT_STD,
        "pad_token_id": spec.pad_token_id,
        "eos_token_id": spec.eos_token_id,
        "bos_token_id": spec.bos_token_id,
        "dtype": spec.dtype,
    }


def processor_config(spec: TinySpec = TINY) -> dict:
    """processor_config.json for transformers' Gemma4Processor (what SGLang's Gemma 4 processor wraps)."""
    shared = {
        "do_convert_rgb": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.0, 0.0, 0.0],
        "image_std": [1.0, 1.0, 1.0],
        "patch_size": spec.vision_patch_size,
        "pooling_kernel_size": spec.vision_pooling_kernel_size,
        "resample": 3,
        "rescale_factor": 1.0 / 255.0,
    }
    return {
        "processor_class": "Gemma4Processor",
        "image_seq_length": spec.vision_max_soft_tokens,
        "audio_seq_length": 750,
        "audio_ms_per_token": 40,
        "image_processor": {
            **shared,
            "image_processor_type": "Gemma4ImageProcessor",
            "do_normalize": False,
            "max_soft_tokens": spec.vision_max_soft_tokens,
        },
        "video_processor": {
            **shared,
            "video_processor_type": "Gemma4VideoProcessor",
            "do_normalize": True,
            "do_sample_frames": True,
            "max_soft_tokens": spec.vision_max_soft_tokens,
            "num_frames": 4,
            "return_metadata": False,
        },
        "feature_extractor": {
            "feature_extractor_type": "Gemma4AudioFeatureExtractor",
            "feature_size": 128,
            "fft_length": 512,
            "frame_length": 320,
            "hop_length": 160,
            "sampling_rate": 16000,
            "padding_side": "right",
            "padding_value": 0.0,
            "return_attention_mask": True,
        },
    }


def draft_config(spec: TinySpec = TINY) -> dict:
    """config.json of the DFlash draft: a Qwen3-style block, no embedding and no LM head.

    SGLang reads ``architectures == ["DFlashDraftModel"]`` and ``dflash_config``; ``num_target_layers``
    is needed by 0.5.13, whose draft sizes ``fc`` from it (falling back to the draft's own layer count).
    """
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.vocab_size,
        "num_hidden_layers": spec.draft_num_layers,
        "num_attention_heads": spec.draft_num_attention_heads,
        "num_key_value_heads": spec.draft_num_attention_heads,
        "head_dim": spec.draft_head_dim,
        "hidden_act": "silu",
        "attention_bias": False,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "max_position_embeddings": spec.max_position_embeddings,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": False,
        "block_size": spec.block_size,
        "num_target_layers": spec.num_hidden_layers,
        "dflash_config": {
            "block_size": spec.block_size,
            "target_layer_ids": list(spec.target_layer_ids),
            "num_target_layers": spec.num_hidden_layers,
            "mask_token": spec.mask_token,
            "mask_token_id": spec.mask_token_id,
        },
        "dtype": spec.dtype,
    }


# --------------------------------------------------------------------------- weights


def _random_like(shapes: dict, seed: int):
    """Deterministic starting weights, drawn in sorted-name order: matrices N(0, INIT_STD), 1-D
    norm weights and `layer_scalar` ones (the vision position table is a matrix)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if len(shape) == 1:
            out[name] = torch.ones(shape)
        else:
            out[name] = torch.randn(shape, generator=gen) * INIT_STD
    return out


def _text_shapes(spec: TinySpec) -> dict:
    h, v, i = spec.hidden_size, spec.vocab_size, spec.intermediate_size
    q, kv, hd = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim, spec.head_dim
    ple = spec.hidden_size_per_layer_input
    shapes = {
        "model.embed_tokens.weight": (v, h),
        "model.norm.weight": (h,),
        "model.embed_tokens_per_layer.weight": (v, spec.num_hidden_layers * ple),
        "model.per_layer_model_projection.weight": (spec.num_hidden_layers * ple, h),
        "model.per_layer_projection_norm.weight": (ple,),
    }
    for n in range(spec.num_hidden_layers):
        p = f"model.layers.{n}."
        shapes.update({
            p + "layer_scalar": (1,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "pre_feedforward_layernorm.weight": (h,),
            p + "post_feedforward_layernorm.weight": (h,),
            p + "per_layer_input_gate.weight": (ple, h),
            p + "per_layer_projection.weight": (h, ple),
            p + "post_per_layer_input_norm.weight": (h,),
        })  # fmt: skip
    return shapes


def text_weights(seed: int = 0, spec: TinySpec = TINY) -> dict:
    """float32 state dict of the text target (HF names, tied head not stored)."""
    import torch

    if spec.intermediate_size < spec.vocab_size:
        raise ValueError("the planted lookup needs intermediate_size >= vocab_size")
    w = _random_like(_text_shapes(spec), seed)
    codes = _token_codes(seed, spec)
    successor = successor_map(seed, spec)
    hidden = spec.hidden_size

    embed = codes.clone()
    embed[:, 0] = KAPPA
    w["model.embed_tokens.weight"] = embed

    # Every post-norm writes rms-NOISE_NORM_WEIGHT random context-dependent noise ...
    for n in range(spec.num_hidden_layers):
        p = f"model.layers.{n}."
        for norm in ("post_attention_layernorm", "post_feedforward_layernorm", "post_per_layer_input_norm"):
            w[p + norm + ".weight"] = torch.full((hidden,), NOISE_NORM_WEIGHT)

    # ... except layer 0's MLP, the lookup. Its input is normalized to rms 1, i.e. the embedding
    # scaled by sqrt(hidden) / sqrt(1 + KAPPA^2): the constant lane reads KAPPA times that.
    scale = math.sqrt(hidden) / math.sqrt(1.0 + KAPPA**2)
    gate, up, down = _lookup_mlp(
        codes, successor, threshold_lane=-BETA * THETA / KAPPA, up_lane=1.0 / (KAPPA * scale)
    )
    inter = spec.intermediate_size
    w["model.layers.0.mlp.gate_proj.weight"] = torch.zeros(inter, hidden).index_copy_(0, torch.arange(spec.vocab_size), gate)
    w["model.layers.0.mlp.up_proj.weight"] = torch.zeros(inter, hidden).index_copy_(0, torch.arange(spec.vocab_size), up)
    w["model.layers.0.mlp.down_proj.weight"] = torch.zeros(hidden, inter).index_copy_(1, torch.arange(spec.vocab_size), down)
    # down = code[next] - code[t] has norm sqrt(2); the post-FFN norm rescales it to norm
    # sqrt(hidden) * weight, which must equal sqrt(hidden) * sqrt(2) for the swap to cancel code[t]
    # of the embedding (itself scaled by sqrt(hidden)).
    w["model.layers.0.post_feedforward_layernorm.weight"] = torch.full((hidden,), math.sqrt(2.0))

    final_norm = torch.ones(hidden)
    final_norm[:2] = 0.0
    w["model.norm.weight"] = final_norm
    return w


def vision_weights(seed: int, spec: TinySpec = TINY) -> dict:
    vh = spec.vision_hidden_size
    patch = 3 * spec.vision_patch_size**2
    p = "model.vision_tower.encoder.layers.0."
    shapes = {
        "model.vision_tower.patch_embedder.position_embedding_table": (2, spec.vision_position_embedding_size, vh),
        "model.vision_tower.patch_embedder.input_proj.weight": (vh, patch),
        p + "self_attn.q_proj.linear.weight": (vh, vh),
        p + "self_attn.k_proj.linear.weight": (vh, vh),
        p + "self_attn.v_proj.linear.weight": (vh, vh),
        p + "self_attn.o_proj.linear.weight": (vh, vh),
        p + "self_attn.q_norm.weight": (vh // 2,),
        p + "self_attn.k_norm.weight": (vh // 2,),
        p + "mlp.gate_proj.linear.weight": (2 * vh, vh),
        p + "mlp.up_proj.linear.weight": (2 * vh, vh),
        p + "mlp.down_proj.linear.weight": (vh, 2 * vh),
        p + "input_layernorm.weight": (vh,),
        p + "post_attention_layernorm.weight": (vh,),
        p + "pre_feedforward_layernorm.weight": (vh,),
        p + "post_feedforward_layernorm.weight": (vh,),
        "model.embed_vision.embedding_projection.weight": (spec.hidden_size, vh),
    }
    return _random_like(shapes, 3000 + seed)


def mm_weights(seed: int = 0, spec: TinySpec = TINY) -> dict:
    """The text target under ``model.language_model.`` plus a random vision tower."""
    weights = {name.replace("model.", "model.language_model.", 1): t for name, t in text_weights(seed, spec).items()}
    weights.update(vision_weights(seed, spec))
    return weights


def _draft_shapes(spec: TinySpec) -> dict:
    h, i = spec.hidden_size, spec.vocab_size
    q = spec.draft_num_attention_heads * spec.draft_head_dim
    shapes = {
        "fc.weight": (h, len(spec.target_layer_ids) * h),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
    }
    for n in range(spec.draft_num_layers):
        p = f"layers.{n}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (q, h),
            p + "self_attn.v_proj.weight": (q, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (spec.draft_head_dim,),
            p + "self_attn.k_norm.weight": (spec.draft_head_dim,),
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        })  # fmt: skip
    return shapes


def draft_weights(seed: int = 0, spec: TinySpec = TINY) -> dict:
    """float32 state dict of the DFlash draft (names as SGLang's DFlashDraftModel loads them)."""
    import torch

    w = _random_like(_draft_shapes(spec), 4000 + seed)
    codes = _token_codes(seed, spec)
    successor = successor_map(seed, spec)
    hidden, heads, hd = spec.hidden_size, spec.draft_num_attention_heads, spec.draft_head_dim
    if heads * hd != hidden:
        raise ValueError("the draft's anchor copy needs num_heads * head_dim == hidden_size")
    lane = hd // 2 - 1  # lowest-frequency RoPE pair (neox halves): ~1e-6 rad per position at theta 1e6
    scale = math.sqrt(hidden) / math.sqrt(1.0 + KAPPA**2)  # |normalized input lane| per unit of embedding

    # Context features never steer the anchor lookup: their dims 0 and 1 are zeroed.
    hidden_norm = torch.ones(hidden)
    hidden_norm[:2] = 0.0
    w["hidden_norm.weight"] = hidden_norm

    # Layer 0 attention: mask positions (flag lane e1) query; the anchor (constant lane, no flag)
    # answers with +, mask positions with -, context features (zeroed lanes) with 0.
    p = "layers.0.self_attn."
    q_proj, k_proj = torch.zeros(heads * hd, hidden), torch.zeros(heads * hd, hidden)
    v_proj = torch.eye(heads * hd, hidden)  # each head carries a quarter of the input
    for head in range(heads):
        q_proj[head * hd + lane, 1] = 1.0
        k_proj[head * hd + lane, 0] = 1.0
        k_proj[head * hd + lane, 1] = -2.0 / KAPPA
    w[p + "q_proj.weight"], w[p + "k_proj.weight"], w[p + "v_proj.weight"] = q_proj, k_proj, v_proj
    qk_norm = torch.ones(hd)
    qk_norm[lane] = DRAFT_QK_WEIGHT
    w[p + "q_norm.weight"], w[p + "k_norm.weight"] = qk_norm, qk_norm.clone()
    w[p + "o_proj.weight"] = torch.eye(hidden, heads * hd)

    # At a mask position the residual is now sqrt(hidden) * (KAPPA e0 + e1) + anchor_normalized,
    # i.e. lanes: e0 (sqrt(h) + scale) * KAPPA, e1 sqrt(h), code scale. Its MLP input is that, normalized.
    root = math.sqrt(hidden)
    residual = torch.zeros(hidden)
    residual[0], residual[1], residual[2] = (root + scale) * KAPPA, root, scale
    norm = residual.norm() / root  # rms
    code_lane, const_lane = scale / norm, (root + scale) * KAPPA / norm
    gate, up, down = _lookup_mlp(
        codes,
        successor,
        threshold_lane=-BETA * THETA * code_lane / const_lane,
        up_lane=1.0 / const_lane,
        skip=(spec.mask_token_id,),
    )
    # SiLU, not GELU, here: silu(x) ~ x for the firing row, ~0 for the rest. Scale the swap so
    # that it cancels the anchor's code (code_lane at the gate's BETA*(1-THETA) firing strength).
    fire = BETA * code_lane * (1.0 - THETA)
    silu = fire / (1.0 + math.exp(-fire))
    swap = scale / silu
    w["layers.0.mlp.gate_proj.weight"] = gate
    w["layers.0.mlp.up_proj.weight"] = up
    w["layers.0.mlp.down_proj.weight"] = down * swap * 2.0  # 2x: the successor's code dominates
    final = torch.ones(hidden)
    final[:2] = 0.0
    w["norm.weight"] = final
    return w


# --------------------------------------------------------------------------- writing


def _save_safetensors(weights: dict, path: Path, dtype: str) -> None:
    import torch
    from safetensors.torch import save_file

    torch_dtype = getattr(torch, dtype)
    tensors = {name: weights[name].to(torch_dtype).contiguous() for name in sorted(weights)}
    save_file(tensors, str(path), metadata={"format": "pt"})
    path.chmod(0o644)  # safetensors writes 0600; other users (servers, CI) read these


def _write_json(path: Path, body: dict) -> None:
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def _generation_config(spec: TinySpec) -> dict:
    return {"bos_token_id": spec.bos_token_id, "eos_token_id": spec.eos_token_id, "pad_token_id": spec.pad_token_id}


def _write_all(root: Path, seed: int, spec: TinySpec) -> None:
    target, target_mm, draft = root / "target", root / "target_mm", root / "draft"
    for d in (target, target_mm, draft):
        d.mkdir(parents=True, exist_ok=True)

    _write_json(target / "config.json", text_config(spec))
    _write_json(target / "generation_config.json", _generation_config(spec))
    tiny_tokenizer.write_tokenizer(target, spec.vocab_size, multimodal=False)
    _save_safetensors(text_weights(seed, spec), target / "model.safetensors", spec.dtype)

    _write_json(target_mm / "config.json", mm_config(spec))
    _write_json(target_mm / "generation_config.json", _generation_config(spec))
    _write_json(target_mm / "processor_config.json", processor_config(spec))
    tiny_tokenizer.write_tokenizer(target_mm, spec.vocab_size, multimodal=True)
    _save_safetensors(mm_weights(seed, spec), target_mm / "model.safetensors", spec.dtype)

    _write_json(draft / "config.json", draft_config(spec))
    _save_safetensors(draft_weights(seed, spec), draft / "model.safetensors", spec.dtype)


def _digest_tree(root: Path) -> dict:
    """sha256 of every file of the three checkpoints under ``root`` (other files there are ignored)."""
    files = {}
    for name in CHECKPOINTS:
        for path in sorted(p for p in (root / name).rglob("*") if p.is_file()):
            files[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def _stamp_body(seed: int, files: dict) -> dict:
    plant = {"KAPPA": KAPPA, "THETA": THETA, "BETA": BETA, "NOISE_NORM_WEIGHT": NOISE_NORM_WEIGHT,
             "DRAFT_QK_WEIGHT": DRAFT_QK_WEIGHT, "INIT_STD": INIT_STD}  # fmt: skip
    body = {"format_version": FORMAT_VERSION, "seed": seed, "spec": asdict(TINY), "plant": plant, "files": files}
    return json.loads(json.dumps(body))  # as read back from the stamp (tuples become lists)


def write_tiny_checkpoints(out_dir, *, seed: int = 0, overwrite: bool = False) -> dict:
    """Write ``target/``, ``target_mm/`` and ``draft/`` under ``out_dir``; return their paths.

    Same seed, same bytes. When ``out_dir`` already holds this seed's checkpoints (the stamp file
    matches the files on disk) nothing is rewritten unless ``overwrite`` is set.
    """
    root = Path(out_dir)
    paths = {name: root / name for name in CHECKPOINTS}
    stamp = root / STAMP_FILE
    if not overwrite and stamp.is_file():
        try:
            recorded = json.loads(stamp.read_text())
        except ValueError:
            recorded = None
        if recorded is not None and recorded == _stamp_body(seed, _digest_tree(root)):
            return paths
    root.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    # Write next to the destination, then move each checkpoint into place: a reader never sees a
    # half-written checkpoint, and two writers of the same seed leave the same bytes.
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=root))
    try:
        _write_all(staging, seed, TINY)
        for name, path in paths.items():
            if path.exists():
                shutil.rmtree(path)
            os.replace(staging / name, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _write_json(stamp, _stamp_body(seed, _digest_tree(root)))
    return paths


# --------------------------------------------------------------------------- margins


@dataclass
class MarginReport:
    """Greedy continuations of the target, with the top-1 minus top-2 logit at every step."""

    prompts: list
    tokens: list = field(default_factory=list)  # per prompt: greedy token ids
    margins: list = field(default_factory=list)  # per prompt: top-1 minus top-2 logit per step
    follows_plant: list = field(default_factory=list)  # per prompt: tokens == planted_continuation

    @property
    def min_margin(self) -> float:
        return min(min(m) for m in self.margins)

    def as_dict(self) -> dict:
        return {
            "min_margin": self.min_margin,
            "follows_plant": all(self.follows_plant),
            "prompts": [
                {"prompt": p, "tokens": t, "min_margin": min(m), "follows_plant": f}
                for p, t, m, f in zip(self.prompts, self.tokens, self.margins, self.follows_plant)
            ],
        }


DEFAULT_PROMPTS = ("hello world", "The quick brown fox", "def main():", "0 1 2 3")


def margin_report(model_dir, prompts=DEFAULT_PROMPTS, *, max_new_tokens: int = 48, dtype: str = "bfloat16", seed: int = 0):
    """Greedy-decode ``prompts`` with transformers and record the top-1/top-2 logit margin per step.

    Works for ``target/`` and ``target_mm/``. Decodes incrementally with transformers' KV cache,
    so the margins are those of a plain greedy run in ``dtype``.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    model_dir = Path(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    if config.model_type == "gemma4":
        from transformers import Gemma4ForConditionalGeneration as model_cls
    else:
        model_cls = AutoModelForCausalLM
    model = model_cls.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    report = MarginReport(prompts=list(prompts))
    with torch.no_grad():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            prompt_ids = ids[0].tolist()
            tokens, margins, past = [], [], None
            for _ in range(max_new_tokens):
                out = model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                top = torch.topk(out.logits[0, -1].float(), 2)
                margins.append(float(top.values[0] - top.values[1]))
                tokens.append(int(top.indices[0]))
                ids = top.indices[:1].view(1, 1)
            report.tokens.append(tokens)
            report.margins.append(margins)
            report.follows_plant.append(tokens == planted_continuation(prompt_ids, max_new_tokens, seed))
    return report
