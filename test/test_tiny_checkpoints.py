"""The tiny checkpoints (sglang_gemma4_dflash_testkit.tiny): written deterministically, loadable by transformers
and by SGLang's own config parsing, model loader and model classes, with a planted greedy pattern
whose top-1 margin is wide enough to trust a token-identity verdict.

SGLang here is the line installed in the test environment (0.5.23 in the shared venv, 0.5.13 in
.venv-0513). SGLang 0.5.13 is also checked in a subprocess (config, loader, model classes, DFlash
parser) with the interpreter that ``_python_for_0_5_13`` finds.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sglang_gemma4_dflash.gemma4.validate import validate_draft_against_target
from sglang_gemma4_dflash_testkit import sglang_cpu, tiny, tiny_tokenizer
from sglang_gemma4_dflash_testkit.tiny import TINY

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    paths = tiny.write_tiny_checkpoints(root)
    assert set(paths) == {"target", "target_mm", "draft"}
    return paths


def _read(path):
    return json.loads(Path(path).read_text())


# --------------------------------------------------------------------------- writing


def test_same_seed_same_bytes_and_stamp_skips_rewrite(tiny_dir, tmp_path):
    again = tiny.write_tiny_checkpoints(tmp_path / "again")
    first = tiny._digest_tree(tiny_dir["target"].parent)
    second = tiny._digest_tree(again["target"].parent)
    assert first == second
    assert "target/model.safetensors" in first and "draft/model.safetensors" in first

    weights = again["target"] / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    tiny.write_tiny_checkpoints(tmp_path / "again")
    assert weights.stat().st_mtime_ns == mtime, "a matching stamp must skip the rewrite"

    weights.write_bytes(b"corrupt")
    tiny.write_tiny_checkpoints(tmp_path / "again")
    assert tiny._digest_tree(tmp_path / "again") == first, "a file that no longer matches its stamp is rewritten"


def test_other_seed_other_weights(tmp_path, tiny_dir):
    other = tiny.write_tiny_checkpoints(tmp_path / "seed1", seed=1)
    digests = tiny._digest_tree(other["target"].parent)
    base = tiny._digest_tree(tiny_dir["target"].parent)
    assert digests["target/model.safetensors"] != base["target/model.safetensors"]
    assert digests["target/config.json"] == base["target/config.json"]
    assert tiny.successor_map(1) != tiny.successor_map(0)


def test_checkpoints_are_small(tiny_dir):
    total = sum(p.stat().st_size for p in tiny_dir["target"].parent.rglob("*") if p.is_file())
    print(f"tiny checkpoints: {total / 2**20:.1f} MiB")
    assert total < 40 * 2**20  # measured 31.6 MiB (seed 0): two 11 MiB targets, an 8 MiB draft


def test_spec_matches_written_configs(tiny_dir):
    text, mm, draft = (_read(tiny_dir[k] / "config.json") for k in ("target", "target_mm", "draft"))
    assert mm["text_config"]["num_hidden_layers"] == text["num_hidden_layers"] == TINY.num_hidden_layers
    assert text["layer_types"] == list(TINY.layer_types)
    assert {"sliding_attention", "full_attention"} <= set(TINY.layer_types)
    assert TINY.layer_types[-1] == "full_attention"
    assert text["sliding_window"] == TINY.sliding_window
    assert text["vocab_size"] == TINY.vocab_size
    assert text["hidden_size_per_layer_input"] > 0 and text["final_logit_softcapping"] and text["tie_word_embeddings"]
    assert draft["hidden_size"] == text["hidden_size"]
    block = draft["dflash_config"]
    assert block["target_layer_ids"] == list(TINY.target_layer_ids)
    assert block["mask_token_id"] == TINY.mask_token_id
    assert block["block_size"] == TINY.block_size
    from transformers import AutoConfig

    for key in ("target", "target_mm"):
        validate_draft_against_target(
            AutoConfig.from_pretrained(tiny_dir[key]), AutoConfig.from_pretrained(tiny_dir["draft"])
        )


def test_tokenizer_ids_match_the_spec(tiny_dir):
    from transformers import AutoTokenizer

    for key in ("target", "target_mm"):
        tok = AutoTokenizer.from_pretrained(tiny_dir[key])
        assert len(tok) == TINY.vocab_size
        assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (
            TINY.pad_token_id,
            TINY.eos_token_id,
            TINY.bos_token_id,
        )
        assert tok.mask_token == TINY.mask_token and tok.mask_token_id == TINY.mask_token_id
        ids = tok("hello world").input_ids
        assert ids[0] == TINY.bos_token_id and tok.decode(ids[1:]) == "hello world"
    mm = _read(tiny_dir["target_mm"] / "config.json")
    assert mm["image_token_id"] == tiny_tokenizer.TOKEN_ID["<|image|>"]


# --------------------------------------------------------------------------- transformers


def test_greedy_follows_the_planted_map_with_margin(tiny_dir):
    report = tiny.margin_report(tiny_dir["target"], tiny.DEFAULT_PROMPTS[:3], max_new_tokens=32)
    print(json.dumps({k: v for k, v in report.as_dict().items() if k != "prompts"}))
    assert all(report.follows_plant), report.as_dict()
    assert report.min_margin >= TINY.min_margin
    # Longer than the sliding window, and not a repeated token.
    assert len(report.tokens[0]) + 3 > TINY.sliding_window
    assert len(set(report.tokens[0])) == len(report.tokens[0])


def test_default_prompts_keep_the_plants_lookup_decided(tiny_dir):
    """The logits' margin can hide an undecided plant (a lookup gate near 0 with logits 8 apart: the serving
    matrix's seed-8 long prompt): the GPU identity runs' prompts keep every gate of a 48-token continuation >= 1.5."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir["target"])
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(tiny_dir["target"], dtype=dtype).eval()
        gates = [tiny.min_lookup_gate(model, tokenizer(p).input_ids, 48) for p in tiny.DEFAULT_PROMPTS]
        assert min(gates) >= 1.5, (dtype, gates)


def test_context_moves_the_logits_not_the_argmax(tiny_dir):
    """Attention and the other layers are live: two prompts that end in the same token get
    different logits, yet the same planted next token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir["target"], dtype=torch.float32).eval()
    last = 100
    a = torch.tensor([[TINY.bos_token_id, 40, 41, 42, last]])
    b = torch.tensor([[TINY.bos_token_id, 200, 17, 250, 251, 252, 90, last]])
    with torch.no_grad():
        la, lb = model(input_ids=a).logits[0, -1], model(input_ids=b).logits[0, -1]
    assert int(la.argmax()) == int(lb.argmax()) == tiny.successor_map()[last]
    assert (la - lb).abs().max().item() > 0.2  # measured 0.83 (seed 0)


def test_a_key_far_back_switches_the_successor_map(tiny_dir):
    """The key token, further back than the sliding window, selects the second map: only the full-attention
    layers can carry it to the last position."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir["target"], dtype=torch.float32).eval()
    body = list(range(20, 20 + 2 * TINY.sliding_window))
    plain, keyed = [TINY.bos_token_id] + body, [TINY.bos_token_id, TINY.key_token_id] + body
    with torch.no_grad():
        a, b = (int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()) for ids in (plain, keyed))
    assert (tiny.mode_of(plain), tiny.mode_of(keyed)) == (0, 1)
    assert a == tiny.successor_map(mode=0)[body[-1]] != b == tiny.successor_map(mode=1)[body[-1]]


def test_multimodal_target_is_the_text_target(tiny_dir):
    from transformers import AutoModelForCausalLM, Gemma4ForConditionalGeneration

    text = AutoModelForCausalLM.from_pretrained(tiny_dir["target"], dtype=torch.float32).eval()
    mm = Gemma4ForConditionalGeneration.from_pretrained(tiny_dir["target_mm"], dtype=torch.float32).eval()
    ids = torch.tensor([[TINY.bos_token_id, 50, 60, 70, 80, 90]])
    with torch.no_grad():
        torch.testing.assert_close(mm(input_ids=ids).logits, text(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    assert mm.model.vision_tower is not None


def test_multimodal_processor_loads_offline_and_takes_an_image(tiny_dir):
    import numpy as np
    from PIL import Image
    from transformers import AutoProcessor, Gemma4ForConditionalGeneration

    processor = AutoProcessor.from_pretrained(tiny_dir["target_mm"])
    assert type(processor).__name__ == "Gemma4Processor"
    assert processor.image_token_id == tiny_tokenizer.TOKEN_ID["<|image|>"]
    image = Image.fromarray((np.arange(48 * 64 * 3).reshape(48, 64, 3) % 251).astype("uint8"))
    inputs = processor(text=["look <|image|> here"], images=[[image]], return_tensors="pt")
    model = Gemma4ForConditionalGeneration.from_pretrained(tiny_dir["target_mm"], dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(**inputs).logits
    assert torch.isfinite(logits).all()


# --------------------------------------------------------------------------- the draft


def _rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x, positions, theta):
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, half, dtype=torch.float32) * 2 / x.shape[-1]))
    angles = positions[:, None].float() * inv_freq[None]
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def draft_block_reference(draft_dir, embed, target_features, anchor):
    """A plain-torch DFlash draft step (what SGLang's DFlashDraftModel computes): block
    ``[anchor, mask, ...]`` at the positions after the context, non-causal attention over the
    context features (fc + hidden_norm, no input norm) and the block. Returns the drafted token ids
    at block positions 1..block_size-1 (argmax over the target's tied head)."""
    from safetensors.torch import load_file

    w = {k: v.float() for k, v in load_file(str(Path(draft_dir) / "model.safetensors")).items()}
    cfg = _read(Path(draft_dir) / "config.json")
    heads, hd = cfg["num_attention_heads"], cfg["head_dim"]
    theta = cfg["rope_parameters"]["rope_theta"]
    block = cfg["dflash_config"]["block_size"]
    n_ctx = target_features.shape[0]
    ids = torch.full((block,), cfg["dflash_config"]["mask_token_id"])
    ids[0] = anchor
    x = embed[ids] * embed.shape[1] ** 0.5  # the target's scaled embedding
    ctx = _rms_norm(target_features @ w["fc.weight"].T, w["hidden_norm.weight"])
    pos_ctx, pos_blk = torch.arange(n_ctx), torch.arange(n_ctx, n_ctx + block)
    for n in range(cfg["num_hidden_layers"]):
        p = f"layers.{n}."
        h = _rms_norm(x, w[p + "input_layernorm.weight"])

        def heads_of(t):
            return t.view(t.shape[0], -1, hd)

        q = _rope(
            _rms_norm(heads_of(h @ w[p + "self_attn.q_proj.weight"].T), w[p + "self_attn.q_norm.weight"]),
            pos_blk,
            theta,
        )
        k_blk = _rope(
            _rms_norm(heads_of(h @ w[p + "self_attn.k_proj.weight"].T), w[p + "self_attn.k_norm.weight"]),
            pos_blk,
            theta,
        )
        k_ctx = _rope(
            _rms_norm(heads_of(ctx @ w[p + "self_attn.k_proj.weight"].T), w[p + "self_attn.k_norm.weight"]),
            pos_ctx,
            theta,
        )
        v = torch.cat(
            [heads_of(ctx @ w[p + "self_attn.v_proj.weight"].T), heads_of(h @ w[p + "self_attn.v_proj.weight"].T)]
        )
        k = torch.cat([k_ctx, k_blk])
        group = heads // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * hd**-0.5
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(block, heads * hd)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = _rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    out = _rms_norm(x, w["norm.weight"])
    return (out[1:] @ embed.T).argmax(-1).tolist()


def _transformers_features(model, ids):
    """Draft layer id L is transformers' hidden_states[L + 1] (the output of decoder layer L)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return torch.cat([out.hidden_states[i + 1][0] for i in TINY.target_layer_ids], dim=-1), out.logits[0, -1]


@pytest.mark.parametrize("key", [False, True])
def test_draft_drafts_the_whole_block_from_the_captured_features(tiny_dir, key):
    """Target prefill gives the context features and the bonus token; the draft's block is the target's next
    block_size - 1 greedy tokens. The same draft fed the features of the neighbouring layers drafts the anchor
    again (no lookup fires without the mode), so every drafted token is rejected."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir["target"], dtype=torch.float32).eval()
    embed = model.get_input_embeddings().weight.detach().float()
    prompt = [TINY.bos_token_id] + list(range(100, 140))
    if key:
        prompt[3] = TINY.key_token_id
    features, logits = _transformers_features(model, prompt)
    want = tiny.planted_continuation(prompt, TINY.block_size)
    bonus = int(logits.argmax())
    assert bonus == want[0]
    assert draft_block_reference(tiny_dir["draft"], embed, features, bonus) == want[1:]
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([prompt]), output_hidden_states=True).hidden_states
    for shift in (-1, 1):
        off = torch.cat([hidden[i + 1 + shift][0] for i in TINY.target_layer_ids], dim=-1)
        assert draft_block_reference(tiny_dir["draft"], embed, off, bonus) == [bonus] * (TINY.block_size - 1)


# --------------------------------------------------------------------------- SGLang (this environment's line)


@pytest.fixture(scope="module")
def sglang_models(sglang_tp1, tiny_dir):
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model

    models = {}
    for key in ("target", "target_mm", "draft"):
        config = ModelConfig(str(tiny_dir[key]), dtype="float32", is_draft_model=key == "draft")
        models[key] = (
            config,
            get_model(model_config=config, load_config=LoadConfig(), device_config=DeviceConfig("cpu")),
        )
    return models


def test_sglang_reads_the_configs(sglang_models):
    for key in ("target", "target_mm"):
        config, _ = sglang_models[key]
        assert config.head_dim == config.swa_head_dim == TINY.head_dim
        assert config.get_total_num_kv_heads() == TINY.num_key_value_heads
        assert config.vocab_size == TINY.vocab_size
        assert config.num_hidden_layers == TINY.num_hidden_layers
        assert list(config.full_attention_layer_ids) == list(TINY.full_attention_layers)
        assert config.is_hybrid_swa
    assert sglang_models["draft"][0].hf_config.architectures == ["DFlashDraftModel"]


def test_sglang_dflash_parser_reads_the_draft(sglang_tp1, tiny_dir):
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
    from sglang.srt.utils.hf_transformers_utils import get_config

    parsed = parse_dflash_draft_config(draft_hf_config=get_config(str(tiny_dir["draft"]), trust_remote_code=False))
    assert parsed.block_size == TINY.block_size
    assert parsed.mask_token_id == TINY.mask_token_id
    assert parsed.num_target_layers == TINY.num_hidden_layers
    assert parsed.resolve_target_layer_ids(target_num_layers=TINY.num_hidden_layers) == list(TINY.target_layer_ids)


@pytest.mark.skipif(
    not sglang_cpu.softcap_runs_on_cpu(),
    reason="this SGLang soft-caps logits only with a Triton kernel, which cannot run on CPU (0.5.13 and older)",
)
@pytest.mark.parametrize("key", ["target", "target_mm"])
def test_sglang_model_predicts_the_planted_successor(sglang_tp1, sglang_models, key):
    from transformers import AutoModelForCausalLM

    _, model = sglang_models[key]
    assert type(model).__name__ == {"target": "Gemma4ForCausalLM", "target_mm": "Gemma4ForConditionalGeneration"}[key]
    prompts = [torch.tensor([TINY.bos_token_id] + list(range(20, 20 + n))) for n in (5, 19, 30)]
    logits = sglang_tp1.prefill(model, prompts).next_token_logits.float()
    reference = AutoModelForCausalLM.from_pretrained(sglang_models["target"][0].model_path, dtype=torch.float32).eval()
    successor = tiny.successor_map()
    for row, prompt in enumerate(prompts):
        top = torch.topk(logits[row], 2)
        assert int(top.indices[0]) == successor[int(prompt[-1])]
        assert float(top.values[0] - top.values[1]) >= TINY.min_margin
        with torch.no_grad():
            ref = reference(input_ids=prompt[None]).logits[0, -1]
        torch.testing.assert_close(logits[row], ref, atol=1e-4, rtol=1e-4)


def test_sglang_draft_holds_the_checkpoint_weights(sglang_models, tiny_dir):
    from safetensors.torch import load_file

    _, model = sglang_models["draft"]
    assert type(model).__name__ == "DFlashDraftModel"
    saved = {k: v.float() for k, v in load_file(str(tiny_dir["draft"] / "model.safetensors")).items()}
    params = dict(model.named_parameters())
    assert params["fc.weight"].shape == (TINY.hidden_size, len(TINY.target_layer_ids) * TINY.hidden_size)
    torch.testing.assert_close(params["fc.weight"], saved["fc.weight"])
    torch.testing.assert_close(params["hidden_norm.weight"], saved["hidden_norm.weight"])
    for n in range(TINY.draft_num_layers):
        p = f"layers.{n}."
        qkv = torch.cat([saved[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        torch.testing.assert_close(params[p + "self_attn.qkv_proj.weight"], qkv)
        gate_up = torch.cat([saved[p + "mlp.gate_proj.weight"], saved[p + "mlp.up_proj.weight"]])
        torch.testing.assert_close(params[p + "mlp.gate_up_proj.weight"], gate_up)
    assert not any("embed" in name or "lm_head" in name for name in params)


def test_sglang_draft_modules_draft_the_whole_block(sglang_models, tiny_dir):
    from sglang_gemma4_dflash_testkit import tiny_accept
    from transformers import AutoModelForCausalLM

    _, draft = sglang_models["draft"]
    target = AutoModelForCausalLM.from_pretrained(tiny_dir["target"], dtype=torch.float32).eval()
    embed = target.get_input_embeddings()
    prompt = [TINY.bos_token_id, TINY.key_token_id] + list(range(60, 90))
    features, logits = _transformers_features(target, prompt)
    bonus = int(logits.argmax())
    with torch.no_grad():
        hidden = tiny_accept.draft_hidden(draft, embed, features, bonus)
    drafted = (hidden[1:] @ embed.weight.float().T).argmax(-1).tolist()
    assert drafted == tiny.planted_continuation(prompt, TINY.block_size)[1:]
    assert drafted == draft_block_reference(tiny_dir["draft"], embed.weight.detach().float(), features, bonus)


def test_sglang_gemma4_processor_serves_text_prompts(sglang_tp1, tiny_dir):
    import asyncio

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.managers.multimodal_processor import get_mm_processor, import_processors
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.hf_transformers_utils import get_config, get_processor
    from transformers import AutoTokenizer

    path = str(tiny_dir["target_mm"])
    # The published test args with the multimodal defaults a server start fills in.
    server_args = ServerArgs(
        model_path="dummy", device="cpu", tp_size=1, attention_backend="torch_native", mm_process_config={}
    )
    sglang_tp1._publish_server_args(server_args)
    import_processors("sglang.srt.multimodal.processors")
    processor = get_mm_processor(
        get_config(path, trust_remote_code=False),
        server_args,
        get_processor(path),
        "default",
        model_config=ModelConfig(path),
    )
    assert type(processor).__name__ == "Gemma4SGLangProcessor"
    out = asyncio.run(
        processor.process_mm_data_async(image_data=None, audio_data=None, input_text="hello world", request_obj=None)
    )
    assert out.input_ids == AutoTokenizer.from_pretrained(path)("hello world").input_ids
    assert out.mm_items == []


# --------------------------------------------------------------------------- bad drafts


def _bad_draft(tiny_dir, **changes):
    draft = _read(tiny_dir["draft"] / "config.json")
    for key, value in changes.items():
        if key in ("target_layer_ids", "mask_token_id"):
            draft["dflash_config"][key] = value
        else:
            draft[key] = value
    return draft


def test_bad_target_layer_id_is_named_by_the_plugin_and_sglang(sglang_tp1, tiny_dir):
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    target = _read(tiny_dir["target"] / "config.json")
    bad = _bad_draft(tiny_dir, target_layer_ids=[1, TINY.num_hidden_layers])
    with pytest.raises(ValueError, match=rf"layer id {TINY.num_hidden_layers} is out of range.*target_layer_ids"):
        validate_draft_against_target(target, bad)
    parsed = parse_dflash_draft_config(draft_hf_config=bad)
    with pytest.raises(ValueError, match=r"out-of-range layer id.*target_layer_ids\[1\]=8"):
        parsed.resolve_target_layer_ids(target_num_layers=TINY.num_hidden_layers)


def test_draft_hidden_size_mismatch_is_named_by_the_plugin(tiny_dir):
    target = _read(tiny_dir["target"] / "config.json")
    bad = _bad_draft(tiny_dir, hidden_size=TINY.hidden_size // 2)
    with pytest.raises(
        ValueError, match=rf"hidden_size={TINY.hidden_size // 2}.*target's hidden_size is {TINY.hidden_size}"
    ):
        validate_draft_against_target(target, bad)


def test_mask_token_id_outside_the_vocab_is_named_by_the_plugin(sglang_tp1, tiny_dir):
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
    from transformers import AutoConfig

    target = AutoConfig.from_pretrained(tiny_dir["target_mm"])
    bad = _bad_draft(tiny_dir, mask_token_id=TINY.vocab_size)
    with pytest.raises(ValueError, match=rf"mask_token_id={TINY.vocab_size}.*\[0, {TINY.vocab_size}\)"):
        validate_draft_against_target(target, bad)
    # SGLang's parser accepts it: its vocab check lives in the DFLASH worker (GPU start-up only).
    assert parse_dflash_draft_config(draft_hf_config=bad).mask_token_id == TINY.vocab_size


# --------------------------------------------------------------------------- other SGLang lines

_LINE_CHECK = r"""
import json, os, socket, sys
os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
from sglang_gemma4_dflash_testkit import cpu_standins
cpu_standins.install()
import sglang
from sglang.srt.server_args import ServerArgs
from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
args = ServerArgs(model_path="dummy", device="cpu", tp_size=1, attention_backend="torch_native")
try:
    from sglang.srt.server_args import set_global_server_args_for_scheduler
    set_global_server_args_for_scheduler(args)
except ImportError:
    from sglang.srt.runtime_context import SpawnRanks, publish
    publish(args, role="test", ranks=SpawnRanks(world_rank=0))
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo", distributed_init_method=f"tcp://127.0.0.1:{port}")
initialize_model_parallel(backend="gloo")
from sglang.srt.configs.device_config import DeviceConfig
from sglang.srt.configs.load_config import LoadConfig
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_loader import get_model
from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
from sglang.srt.utils.hf_transformers_utils import get_config
root = sys.argv[1]
out = {"version": sglang.__version__}
for key in ("target", "target_mm", "draft"):
    config = ModelConfig(os.path.join(root, key), dtype="float32", is_draft_model=key == "draft")
    model = get_model(model_config=config, load_config=LoadConfig(), device_config=DeviceConfig("cpu"))
    out[key] = {"class": type(model).__name__, "head_dim": config.head_dim, "swa_head_dim": config.swa_head_dim}
parsed = parse_dflash_draft_config(draft_hf_config=get_config(os.path.join(root, "draft"), trust_remote_code=False))
out["draft"]["target_layer_ids"] = parsed.resolve_target_layer_ids(target_num_layers=8)
out["draft"]["block_size"] = parsed.block_size
print("RESULT " + json.dumps(out))
"""


def test_checkpoints_load_in_sglang_0_5_13(tiny_dir, sglang_0513):
    python, extra = sglang_0513
    pythonpath = os.pathsep.join(
        [p for p in (extra.get("PYTHONPATH"), str(REPO / "python"), str(REPO / "testkit")) if p]
    )
    env = dict(os.environ, PYTHONPATH=pythonpath)
    proc = subprocess.run(
        [python, "-c", _LINE_CHECK, str(tiny_dir["target"].parent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["version"].startswith("0.5.13")
    assert result["target"]["class"] == "Gemma4ForCausalLM"
    assert result["target_mm"]["class"] == "Gemma4ForConditionalGeneration"
    assert result["draft"]["class"] == "DFlashDraftModel"
    assert result["target"]["head_dim"] == result["target"]["swa_head_dim"] == TINY.head_dim
    assert result["draft"]["target_layer_ids"] == list(TINY.target_layer_ids)
    assert result["draft"]["block_size"] == TINY.block_size


def test_script_writes_the_same_checkpoints(tmp_path, tiny_dir):
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_tiny_checkpoints.py"), str(tmp_path / "cli")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "python"), str(REPO / "testkit")])),
    )
    assert proc.returncode == 0, proc.stderr
    assert tiny._digest_tree(tmp_path / "cli") == tiny._digest_tree(tiny_dir["target"].parent)
    assert json.loads(proc.stdout)["target"] == str(tmp_path / "cli" / "target")
    shutil.rmtree(tmp_path / "cli")
