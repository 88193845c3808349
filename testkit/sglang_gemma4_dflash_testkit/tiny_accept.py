"""Predicted DFLASH accept length of the tiny pair, on CPU, with SGLang's own models and the plugin's pieces.

    models = load_sglang_pair(paths)                        # SGLang Gemma4ForCausalLM + DFlashDraftModel, CPU
    result = predict(models, prompts, max_new_tokens=48)    # result.mean_accept_length

What it runs, per prompt: the target's greedy continuation (the planted one, checked against SGLang's own
prefill logits), one SGLang prefill over prompt + continuation with the plugin's capture hook on (the target is
causal, so the features of every prefix come out of one pass), then DFLASH steps as the worker takes them:
context = captured features of the verified tokens, block = [anchor, mask x (block - 1)] at the positions after
the context, SGLang's draft modules (its projection, norms, QKV, RoPE, the worker's context K/V path, MLP), the
plugin's greedy head over the target's tied head; the step accepts the drafted tokens up to the first miss plus
the target's own token. Only SGLang's ``RadixAttention`` is replaced, by a plain softmax over context + block
(non-causal, as the draft's ENCODER_ONLY attention).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sglang_gemma4_dflash_testkit import sglang_cpu, tiny
from sglang_gemma4_dflash_testkit.tiny import TINY


@dataclass
class SGLangPair:
    target: object  # SGLang Gemma4ForCausalLM
    draft: object  # SGLang DFlashDraftModel


@dataclass
class Prediction:
    steps: list = field(default_factory=list)  # per prompt: accept length of every step
    follows_plant: list = field(default_factory=list)  # per prompt: SGLang's next token == the planted one

    @property
    def mean_accept_length(self) -> float:
        flat = [s for per in self.steps for s in per]
        return sum(flat) / len(flat)

    def as_dict(self) -> dict:
        return {
            "mean_accept_length": round(self.mean_accept_length, 3),
            "steps": sum(map(len, self.steps)),
            "per_prompt": [round(sum(s) / len(s), 3) for s in self.steps],
        }


def load_sglang_pair(paths, draft_dtype: str = "float32") -> SGLangPair:
    """The tiny target (float32) and draft through SGLang's config parser and model loader, on CPU (``init_tp1``
    first)."""
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model

    def load(key, dtype="float32"):
        config = ModelConfig(str(paths[key]), dtype=dtype, is_draft_model=key == "draft")
        return get_model(model_config=config, load_config=LoadConfig(), device_config=DeviceConfig("cpu"))

    return SGLangPair(target=load("target"), draft=load("draft", draft_dtype))


def capture(target, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(captured features [len, K * hidden], next-token logits) of one SGLang prefill with the plugin's capture."""
    from sglang_gemma4_dflash.gemma4 import capture as plugin_capture

    plugin_capture.set_dflash_layers_to_capture(target, list(TINY.target_layer_ids))
    try:
        out = sglang_cpu.prefill(target, [torch.tensor(ids)])
    finally:
        target.capture_aux_hidden_states = False
        plugin_capture.text_model_of(target).layers_to_capture = []
    return out.aux_hidden_states.float(), out.next_token_logits[0].float()


def draft_hidden(draft, embed, features: torch.Tensor, anchor: int) -> torch.Tensor:
    """Final draft hidden states [block, hidden] of one block through SGLang's DFlashDraftModel modules, in the
    draft's dtype (attention scores and softmax in float32, as the GPU kernels do)."""
    dtype = draft.fc.weight.dtype
    block = TINY.block_size
    ids = torch.full((block,), TINY.mask_token_id)
    ids[0] = anchor
    x = embed(ids).to(dtype)  # the target's scaled embedding, as the worker embeds the block
    n = features.shape[0]
    pos_ctx, pos_blk = torch.arange(n), torch.arange(n, n + block)
    ctx = draft.project_target_hidden(features.to(dtype))
    residual = None
    for layer in draft.layers:
        if residual is None:
            residual, h = x, layer.input_layernorm(x)
        else:
            h, residual = layer.input_layernorm(x, residual)
        a = layer.self_attn
        q, k, v = a.qkv_proj(h)[0].split([a.q_size, a.kv_size, a.kv_size], dim=-1)
        q = a.q_norm(q.reshape(-1, a.head_dim)).view_as(q)
        k = a.k_norm(k.reshape(-1, a.head_dim)).view_as(k)
        q, k = a.rotary_emb(pos_blk, q, k)
        k_ctx, v_ctx = a.kv_proj_only(ctx)
        k_ctx = a.apply_k_rope(pos_ctx, a.apply_k_norm(k_ctx))
        group = a.num_heads // a.num_kv_heads
        keys = torch.cat([k_ctx, k]).view(-1, a.num_kv_heads, a.head_dim).repeat_interleave(group, 1)
        values = torch.cat([v_ctx, v]).view(-1, a.num_kv_heads, a.head_dim).repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q.view(-1, a.num_heads, a.head_dim).float(), keys.float()) * a.scaling
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values.float()).reshape(block, -1).to(dtype)
        h, residual = layer.post_attention_layernorm(a.o_proj(attn)[0], residual)
        x = layer.mlp(h)
    out, _ = draft.norm(x, residual)
    return out


def draft_tokens(pair: SGLangPair, features: torch.Tensor, anchor: int) -> list[int]:
    """Drafted ids at block positions 1..block-1: the plugin's greedy head (the symbol its worker hook calls)."""
    from sglang_gemma4_dflash.dflash import worker_hooks

    hidden = draft_hidden(pair.draft, pair.target.get_input_embeddings(), features, anchor)
    return worker_hooks.greedy_token_ids(hidden[1:].float(), pair.target.lm_head, None).tolist()


def accept_steps(pair: SGLangPair, prompt: list[int], continuation: list[int]) -> tuple[list[int], int]:
    """Accept length of every DFLASH step along ``continuation``, and SGLang's greedy token after ``prompt``."""
    seq = list(prompt) + list(continuation)
    features, _ = capture(pair.target, seq)
    _, logits = capture(pair.target, list(prompt))
    steps = walk(lambda context, anchor: draft_tokens(pair, context, anchor), features, seq, len(prompt))
    return steps, int(logits.argmax())


def walk(drafter, features: torch.Tensor, seq: list[int], start: int, stride: int | None = None) -> list[int]:
    """Accept length of every DFLASH step along ``seq`` from ``start``: ``drafter(features of the verified tokens,
    anchor)`` drafts block positions 1..; a step accepts them up to the first miss, plus the target's own token,
    and the next step starts after them. ``stride``: steps start every ``stride`` tokens instead, whatever was
    accepted (the same steps on every rank of a multi-rank run, even where the ranks' drafts differ)."""
    block, pos, steps = TINY.block_size, start, []
    while pos + block <= len(seq):
        drafted = drafter(features[:pos], seq[pos])
        accepted = 0
        while accepted < block - 1 and drafted[accepted] == seq[pos + 1 + accepted]:
            accepted += 1
        steps.append(accepted + 1)
        pos += stride or accepted + 1
    return steps


def predict(pair: SGLangPair, prompts, max_new_tokens: int = 48) -> Prediction:
    result = Prediction()
    with torch.no_grad():
        for prompt in prompts:
            continuation = tiny.planted_continuation(prompt, max_new_tokens)
            steps, first = accept_steps(pair, prompt, continuation)
            result.steps.append(steps)
            result.follows_plant.append(first == continuation[0])
    return result


def prompts(count: int = 6, seed: int = 5) -> list[list[int]]:
    """Prompts past the sliding window, half with the key token (at varying depth), half without."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        n = 2 * TINY.sliding_window + 7 * i
        ids = torch.randint(TINY.num_special_tokens, TINY.key_token_id, (n,), generator=gen).tolist()
        if i % 2:
            ids[(3 * i) % (n - TINY.sliding_window)] = TINY.key_token_id  # outside the last sliding window
        out.append([TINY.bos_token_id] + ids)
    return out
