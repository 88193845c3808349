"""The checks the main job runs on the tiny checkpoints (``python -m sglang_gemma4_dflash_testkit``).

Each returns a dict with ``ok`` and the figures it measured, so the main job can print and save them.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

CAPTURE_TOLERANCE = 1e-4  # float32 on CPU; measured differences are ~1e-5


def _draft_layer_ids(draft_dir) -> list[int]:
    config = json.loads((Path(draft_dir) / "config.json").read_text())
    return list(config["dflash_config"]["target_layer_ids"])


def _prompt_ids(target_dir, lengths=(11, 40, 23)) -> list[torch.Tensor]:
    """Deterministic prompts in the tiny target's ordinary-token range, some longer than its sliding window."""
    from sglang_gemma4_dflash_testkit.tiny import TINY

    gen = torch.Generator().manual_seed(7)
    return [torch.randint(TINY.num_special_tokens, TINY.vocab_size, (n,), generator=gen) for n in lengths]


def capture_check(target_dir, draft_dir) -> dict:
    """SGLang's Gemma4ForCausalLM on CPU with the draft's capture ids, against transformers."""
    from sglang_gemma4_dflash.gemma4.capture import set_dflash_layers_to_capture

    from sglang_gemma4_dflash_testkit import sglang_cpu

    hf_model, sgl_model = sglang_cpu.load_pair(target_dir)
    layer_ids = _draft_layer_ids(draft_dir)
    set_dflash_layers_to_capture(sgl_model, layer_ids)
    prompts = _prompt_ids(target_dir)
    out = sglang_cpu.prefill(sgl_model, prompts)

    hidden = sglang_cpu.text_config_of(sgl_model.config).hidden_size
    aux_rows = torch.split(out.aux_hidden_states, [p.numel() for p in prompts], dim=0)
    aux_diff = {layer_id: 0.0 for layer_id in layer_ids}
    logits_diff = 0.0
    for row, prompt in enumerate(prompts):
        ref_logits, ref_hidden = sglang_cpu.reference(hf_model, prompt)
        for k, layer_id in enumerate(layer_ids):
            got = aux_rows[row][:, k * hidden : (k + 1) * hidden].float()
            aux_diff[layer_id] = max(aux_diff[layer_id], (got - ref_hidden[layer_id + 1]).abs().max().item())
        logits_diff = max(logits_diff, (out.next_token_logits[row].float() - ref_logits[-1]).abs().max().item())
    ok = max(aux_diff.values()) <= CAPTURE_TOLERANCE and logits_diff <= CAPTURE_TOLERANCE
    return {
        "ok": ok,
        "layer_ids": layer_ids,
        "aux_max_abs_diff": aux_diff,
        "logits_max_abs_diff": logits_diff,
        "tolerance": CAPTURE_TOLERANCE,
        "prompt_lengths": [int(p.numel()) for p in prompts],
    }


def head_check(target_dir, world_sizes=(1, 2)) -> dict:
    """The plugin's greedy head on the tiny target's tied head (bf16) against a full-vocabulary argmax.

    Hidden states are the target's real final hidden states on a few prompts plus random ones;
    at world size t > 1 the head is split over t real gloo processes, as at TP = t.
    """
    from sglang_gemma4_dflash.head.greedy import greedy_token_ids
    from transformers import AutoModelForCausalLM

    from sglang_gemma4_dflash_testkit import multiproc

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.bfloat16).eval()
    weight = model.get_input_embeddings().weight.detach()
    with torch.no_grad():
        states = [
            model(input_ids=p[None], output_hidden_states=True).hidden_states[-1][0] for p in _prompt_ids(target_dir)
        ]
    gen = torch.Generator().manual_seed(3)
    cases = {
        "target final hidden states": torch.cat(states),
        "random hidden states": torch.randn(1500, weight.shape[1], generator=gen).to(weight.dtype),
    }
    rows = []
    for case, hs in cases.items():
        want = torch.argmax(hs @ weight.T, dim=-1)
        for t in world_sizes:
            if t == 1:
                got = [greedy_token_ids(hs, torch.nn.Embedding.from_pretrained(weight), None)]
            else:
                got = [torch.tensor(ids) for ids in multiproc.run_ranks(t, _rank_head, hs, weight)]
            mismatches = max(int((g != want).sum()) for g in got)
            agree = all(torch.equal(g, got[0]) for g in got)
            rows.append(
                {"case": f"{case}, tp={t}", "tokens": int(hs.shape[0]), "mismatches": mismatches, "ranks_agree": agree}
            )
    ok = all(r["mismatches"] == 0 and r["ranks_agree"] for r in rows)
    return {"ok": ok, "vocab": int(weight.shape[0]), "hidden": int(weight.shape[1]), "cases": rows}


def _rank_head(rank, world_size, hs, weight):
    """One TP rank: the replicated tied head, split over SGLang's real tensor-parallel group."""
    from sglang_gemma4_dflash.compat.runtime import tp_group
    from sglang_gemma4_dflash.head.greedy import greedy_token_ids

    ids = greedy_token_ids(hs, torch.nn.Embedding.from_pretrained(weight), tp_group())
    return ids.tolist()  # plain data back to the parent: the child's tensor storage ends with it


BLOCK_ATTENTION_TOLERANCE = {"cpu": 1e-5, "cuda": 5e-3}  # fp32 (interpreter) / tf32 and bf16 on a GPU


def block_attention_check() -> dict:
    """The plugin's block-attention kernel at the tiny pair's attention shapes (target sliding and full layers,
    the draft's non-causal block), contexts shorter and longer than the window, against the fp32 reference and
    SGLang's own extend kernel. On CPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``)."""
    from sglang_gemma4_dflash.attention.block_kernel import block_attention

    from sglang_gemma4_dflash_testkit.block_attention_ref import make_case, reference
    from sglang_gemma4_dflash_testkit.tiny import TINY
    from sglang_gemma4_dflash_testkit.verify_backend import upstream_extend_kernel

    extend_attention_fwd = upstream_extend_kernel()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    window = TINY.sliding_window - 1  # what SGLang 0.5.14+ passes for a Gemma 4 sliding layer
    heads = dict(num_heads=TINY.num_attention_heads, num_kv_heads=TINY.num_key_value_heads, head_dim=TINY.head_dim)
    draft = dict(num_heads=TINY.draft_num_attention_heads, num_kv_heads=TINY.draft_num_attention_heads,
                 head_dim=TINY.draft_head_dim, causal=False)  # fmt: skip
    ctx, blocks = [0, 9, 40, 100], [TINY.block_size] * 4
    cases = {
        "target sliding layer": make_case([min(n, window) for n in ctx], blocks, window=window, device=device, **heads),
        "target full layer": make_case(ctx, blocks, device=device, **heads),
        "draft block": make_case(ctx, blocks, device=device, **draft),
    }
    rows = []
    for name, case in cases.items():
        ref = reference(case)
        args = case.kernel_args()
        block_attention(*args, max_block=case.max_block, causal=case.causal, sm_scale=case.sm_scale, window=case.window)
        theirs = case.kernel_args()
        extend_attention_fwd(*theirs, None, case.causal, None, case.max_block, 1.0, 1.0, sm_scale=case.sm_scale,
                             sliding_window_size=case.window)  # fmt: skip

        def err(out):
            return float(((out.float() - ref).norm() / ref.norm()).item())

        rows.append({"case": name, "plugin_error": err(args[3]), "sglang_extend_error": err(theirs[3])})
    ok = all(r["plugin_error"] < BLOCK_ATTENTION_TOLERANCE[device] for r in rows)
    return {"ok": ok, "device": device, "tolerance": BLOCK_ATTENTION_TOLERANCE[device], "cases": rows}


def serve_cpu_vs_transformers(target_dir, prompts: list[str], max_new_tokens: int = 24) -> dict:
    """The tiny target served by SGLang on CPU; every greedy output against transformers' greedy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sglang_gemma4_dflash_testkit import e2e

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.bfloat16).eval()
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    expected = []
    for prompt_ids in ids:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False)
        expected.append(out[0, len(prompt_ids) :].tolist())

    args = e2e.cpu_server_args(4)
    with e2e.Server(str(target_dir), args, launcher=e2e.CPU_LAUNCHER) as server:
        got = e2e.generate_many(server.base_url, ids, max_new_tokens, concurrency=2)
    verdicts = e2e.compare_outputs(expected, got)
    rows = [{"prompt": p, "tokens": v.spec_len, "identical": v.identical} for p, v in zip(prompts, verdicts)]
    return {"ok": all(v.identical for v in verdicts), "prompts": rows}


ACCEPT_FLOOR = 0.75  # x block size: the tiny pair's DFLASH accept length floor


def serve_dflash_vs_plain(target_dir, draft_dir, prompts: list[str], max_new_tokens: int = 40) -> dict:
    """On a GPU: the tiny target served plainly and with DFLASH (the plugin active); same tokens expected, and an
    accept length of at least ACCEPT_FLOOR x the block size."""
    from transformers import AutoTokenizer

    from sglang_gemma4_dflash_testkit import e2e
    from sglang_gemma4_dflash_testkit.tiny import TINY

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    common = e2e.gpu_server_args(4)
    dflash = e2e.dflash_args(str(draft_dir), TINY.block_size)
    with e2e.Server(str(target_dir), common) as server:
        plain = e2e.generate_many(server.base_url, ids, max_new_tokens, concurrency=2)
    with e2e.Server(str(target_dir), common + dflash) as server:
        spec = e2e.generate_many(server.base_url, ids, max_new_tokens, concurrency=2)
        summary = e2e.spec_summary(e2e.server_info(server.base_url))
    verdicts = e2e.compare_outputs(plain, spec)
    rows = [{"prompt": p, "tokens": v.spec_len, "identical": v.identical} for p, v in zip(prompts, verdicts)]
    # the tiny draft accepts the whole block only with the plugin's capture and head right (docs/tiny_checkpoints.md)
    floor = ACCEPT_FLOOR * TINY.block_size
    accept = summary.avg_spec_accept_length
    ok = all(v.identical for v in verdicts) and summary.speculative_algorithm == "DFLASH"
    ok = ok and accept is not None and accept >= floor
    return {"ok": ok, "prompts": rows, "server": summary.as_dict(), "accept_length": accept, "accept_floor": floor}
