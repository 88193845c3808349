"""Tiny, offline, seeded Gemma 4 checkpoints for tests: a text target, the same target as a multimodal
model, and a DFlash draft for it.

    from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints, TINY
    paths = write_tiny_checkpoints("/tmp/tiny")   # {"target": ..., "target_mm": ..., "draft": ...}

Why the weights are not simply random: a random tiny Gemma 4 repeats one token or flips its greedy
choice under bf16 noise within a few tokens, and a random draft is never accepted. The pair is
planted instead (``tiny_plant``; docs/tiny_checkpoints.md explains every part):

  * target: greedy decoding walks one of two successor cycles, ``SUCCESSORS[m][last]``, where
    ``m = 1`` iff the key token (``TINY.key_token_id``) occurs anywhere earlier. A full-attention
    layer (``tiny_plant.MODE_LAYER``) finds the key and writes the mode into two lanes, its MLP
    does the keyed lookup, and the next layer's MLP erases the mode lanes again. Every other
    weight is random, scaled so that it moves the logits without changing the argmax.
  * draft: one layer that predicts ``SUCCESSORS[m]^k[anchor]`` at block offset ``k``: attention
    copies the anchor, builds a one-hot offset from RoPE, and reads ``m`` from the captured
    features of ``MODE_LAYER`` (the only layer whose output carries it); an MLP lookup per
    (token, offset, mode) writes the answer. Right capture: the whole block is accepted. Capture
    one layer off: no mode, no lookup fires, accept length 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglang_gemma4_dflash_testkit import tiny_plant, tiny_tokenizer

FORMAT_VERSION = 2
STAMP_FILE = "tiny_stamp.json"
CHECKPOINTS = ("target", "target_mm", "draft")

INIT_STD = tiny_plant.INIT_STD


@dataclass(frozen=True)
class TinySpec:
    """The shapes and ids of the tiny checkpoints (constants; other modules rely on them)."""

    vocab_size: int = 320
    hidden_size: int = 256
    intermediate_size: int = 640  # the keyed lookup: one MLP row per (token, mode)
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
    # The key token: its presence anywhere in the context switches the target to its second successor map.
    key_token_id: int = 319
    # The draft.
    draft_num_layers: int = 1
    draft_num_attention_heads: int = 12  # 4 copy heads, one per block offset 1..7, one mode head
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


def successor_map(seed: int = 0, spec: TinySpec = TINY, mode: int = 0) -> list[int]:
    """``SUCCESSORS[mode][t]`` for every token id: one cycle through the ordinary tokens except the key;
    special tokens and the key lead into it. Mode 1 applies once the key token is in the context."""
    return list(tiny_plant.successor_maps(seed, spec)[mode])


def mode_of(ids, spec: TinySpec = TINY) -> int:
    """1 if the key token occurs in ``ids``, else 0: the successor map the target follows after them."""
    return tiny_plant.mode_of(ids, spec)


def planted_continuation(prompt_ids, num_tokens: int, seed: int = 0, spec: TinySpec = TINY) -> list[int]:
    """The tokens greedy decoding of the tiny target produces after ``prompt_ids``."""
    prompt_ids = [int(t) for t in prompt_ids]
    successor = successor_map(seed, spec, mode_of(prompt_ids, spec))
    out, token = [], prompt_ids[-1]
    for _ in range(num_tokens):
        token = successor[token]
        out.append(token)
    return out


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
        "intermediate_size": tiny_plant.draft_intermediate_size(spec),
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
    w = _random_like(_text_shapes(spec), seed)
    tiny_plant.plant_target(w, seed, spec)
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


def draft_weights(seed: int = 0, spec: TinySpec = TINY) -> dict:
    """float32 state dict of the DFlash draft (names as SGLang's DFlashDraftModel loads them)."""
    return tiny_plant.draft_weights(seed, spec)


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
    plant = {name: getattr(tiny_plant, name) for name in dir(tiny_plant) if name.isupper()}
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


def margin_report(
    model_dir, prompts=DEFAULT_PROMPTS, *, max_new_tokens: int = 48, dtype: str = "bfloat16", seed: int = 0
):
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


# --------------------------------------------------------------------------- the plant's own decision

TIE_LOGIT_GAP = 0.02  # fp32 logits closer than this (about 5 bf16 steps at the tiny target's logit scale): a tie


def _forward_gates(model, ids, spec: TinySpec):
    """One forward of a transformers target over ``ids``: its logits and the planted lookup's gate per position."""
    import torch

    mlp = next(m for n, m in model.named_modules() if n.endswith(f"layers.{tiny_plant.MODE_LAYER}.mlp"))
    seen = {}

    def keep_input(module, args, out):  # returns None: the layer's output stays its own
        seen["x"] = args[0].detach()

    hook = mlp.register_forward_hook(keep_input)
    try:
        with torch.no_grad():
            logits = model(torch.tensor([list(ids)])).logits[0].float()
    finally:
        hook.remove()
    rows, key_seen = [], False
    for token in ids:
        key_seen = key_seen or token == spec.key_token_id
        rows.append(int(key_seen) * spec.vocab_size + int(token))
    gates = (seen["x"][0].float() * mlp.gate_proj.weight.float()[torch.tensor(rows)]).sum(-1)
    return logits, gates.tolist()


def lookup_gates(model, ids, spec: TinySpec = TINY) -> list[float]:
    """The planted lookup's gate at every position of ``ids``: the pre-activation of the ``MODE_LAYER`` MLP row for
    (that position's token, the mode so far). That row swaps the token's code for its successor's; near 0 it half
    fires and rounding picks the next token (the token itself or its successor), however wide the logits' margin.
    Healthy rows sit at about 2-12."""
    return _forward_gates(model, ids, spec)[1]


def min_lookup_gate(model, prompt_ids, num_tokens: int, seed: int = 0, spec: TinySpec = TINY) -> float:
    """The smallest gate over the rows that predict ``prompt_ids``' planted continuation of ``num_tokens``: under
    about 1, plain greedy decoding itself is barely decided there (bf16 kernels may differ), so a prompt for an
    identity check should stay above it."""
    ids = list(prompt_ids) + planted_continuation(prompt_ids, num_tokens, seed, spec)
    return min(lookup_gates(model, ids, spec)[len(prompt_ids) - 1 : -1])


def decision(model, ids, token: int, other: int, spec: TinySpec = TINY) -> dict:
    """How the target decides the token after ``ids``: its logit for ``token`` minus ``other``'s, whether that is a
    tie (under ``TIE_LOGIT_GAP``: no bf16 kernel can be expected to break it as another does), the argmax, and the
    planted lookup's gate at that row."""
    logits, gates = _forward_gates(model, ids, spec)
    gap = float(logits[-1, token] - logits[-1, other])
    return {"logit_gap": round(gap, 5), "tie": abs(gap) < TIE_LOGIT_GAP, "argmax": int(logits[-1].argmax()),
            "lookup_gate": round(gates[-1], 4)}  # fmt: skip
