"""The serving-options script (scripts/gpu/serving_options.py and its pure half, serving_matrix.py): the verdict, the
JSON row, the prompt builders (stops and EOS inside an accepted block), the served path read from a server log, and
the script's cases run against a real SGLang CPU server of the tiny target (plain on both sides)."""

import logging
import lzma
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

import serving_matrix as sm  # noqa: E402
from sglang_gemma4_dflash_testkit.tiny import TINY, planted_continuation, successor_map  # noqa: E402

LOW, KEY, BLOCK = TINY.num_special_tokens, TINY.key_token_id, TINY.block_size


def judge(**kw):
    args = dict(plain_start_error=None, dflash_start_error=None, identical=[True] * 3, finish_equal=[True] * 3,
                refusals=[], errors=[])  # fmt: skip
    args.update(kw)
    return sm.verdict(**args)


REFUSAL = "ValueError: DFLASH speculative decoding does not support return_logprob yet."


@pytest.mark.parametrize(
    "change, expected",
    [
        ({}, "exact"),
        ({"identical": [True, False, True]}, "fails"),
        ({"finish_equal": [True, True, False]}, "fails"),
        ({"errors": ["queue_aborts: DFLASH server holds 12 KV tokens after the drain"]}, "fails"),
        ({"identical": [], "finish_equal": []}, "fails"),  # nothing ran
        ({"refusals": [REFUSAL]}, "refused-clearly"),
        ({"refusals": [REFUSAL], "identical": [False, True, True]}, "fails"),
        (
            {"identical": [True, False, True], "finish_equal": [True, False, True], "ties": [False, True, False]},
            "exact",
        ),
        ({"identical": [False, False, True], "ties": [False, True, False]}, "fails"),  # one difference is no tie
        ({"refusals": ["HTTP 500"]}, "fails"),  # says nothing
        ({"refusals": ["http://127.0.0.1:20000/generate: HTTP 500: Internal Server Error"]}, "fails"),
        ({"refusals": ['http://h:1/generate: HTTP 400: {"error": {"message": "no"}}']}, "fails"),
        ({"refusals": ['http://h:1/generate: HTTP 400: {"error": {"message": "' + REFUSAL + '"}}']}, "refused-clearly"),
        ({"refusals": ["http://h:1/generate: cannot reach the server (timed out)"]}, "fails"),
        ({"refusals": ["RuntimeError: CUDA error: an illegal memory access was encountered"]}, "fails"),
        (
            {"dflash_start_error": "...\nValueError: --page-size 64 is not supported with DFLASH; use 1."},
            "refused-clearly",
        ),
        (
            {"dflash_start_error": "x", "plain_start_error": "AssertionError: page_size must be 1 for this backend"},
            "fails",
        ),  # fmt: skip
        (
            {
                "dflash_start_error": "ValueError: the SWA pool cannot hold one request; raise the ratio",
                "plain_start_error": "ValueError: the SWA pool cannot hold one request; raise the ratio",
            },
            "refused-clearly",
        ),  # fmt: skip
        (
            {"dflash_start_error": "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory"},
            "fails",
        ),
        ({"dflash_start_error": "server not ready after 300s (waiting for /health_generate)"}, "fails"),
        ({"plain_start_error": "ValueError: plain did not start although DFLASH did"}, "fails"),
    ],
)
def test_verdict(change, expected):
    assert judge(**change) == expected


def comparison(identical=True, finish_equal=True, index=0):
    c = {"case": "greedy", "index": index, "identical": identical, "finish_equal": finish_equal}
    if not identical:
        c["first_difference"] = {"case": "greedy", "prompt": index, "index": 5, "plain": [1], "dflash": [2]}
    return c


def test_row_has_the_issue_fields_and_counts():
    option = sm.OPTIONS["page16"]
    comps = [comparison(), comparison(False, index=1), comparison(False, index=2), comparison(index=3)]
    row = sm.make_row(option, sglang="0.5.17", pair="text", comparisons=comps, accept_lengths=[8.0, 7.0, None, 8.0],
                      refusals=[], errors=[], plain_start_error=None, dflash_start_error=None,
                      path={"worker": "DFlashWorkerV2"})  # fmt: skip
    assert set(sm.ROW_KEYS) <= set(row)
    assert row["identical"] == {"count": 2, "total": 4}
    assert row["first_difference"]["prompt"] == 1
    assert row["accept_length"] == pytest.approx(23 / 3, abs=1e-3)
    assert row["finish_reasons_equal"] is True
    assert row["verdict"] == "fails"
    assert row["flags"] == ["--page-size", "16"] and row["pair"] == "text" and row["sglang"] == "0.5.17"
    exact = sm.make_row(option, sglang="0.5.17", pair="text", comparisons=[comparison()], accept_lengths=[8.0],
                        refusals=[], errors=[], plain_start_error=None, dflash_start_error=None, path={})  # fmt: skip
    assert exact["verdict"] == "exact" and exact["first_difference"] is None
    tie = {**comparison(False, False, index=1), "tie": True}  # a tie of the target's fp32 logits
    tied = sm.make_row(option, sglang="0.5.17", pair="text", comparisons=[comparison(), tie], accept_lengths=[8.0],
                       refusals=[], errors=[], plain_start_error=None, dflash_start_error=None, path={})  # fmt: skip
    assert tied["verdict"] == "exact" and tied["identical"] == {"count": 1, "total": 2}
    assert tied["first_difference"] is None and [t["prompt"] for t in tied["ties"]] == [1]
    mixed = sm.make_row(option, sglang="0.5.17", pair="text", comparisons=[comparison(False), tie], accept_lengths=[],
                        refusals=[], errors=[], plain_start_error=None, dflash_start_error=None, path={})  # fmt: skip
    assert mixed["verdict"] == "fails" and mixed["first_difference"]["prompt"] == 0
    assert set(sm.ROW_KEYS) <= set(sm.not_run_row(option, "0.5.17", "text", "deadline"))


def test_options_select_by_name_and_share_servers():
    assert [o.name for o in sm.select_options("stops,fp8_kv")] == ["stops", "fp8_kv"]
    with pytest.raises(SystemExit, match="unknown page32.*known: default"):
        sm.select_options("stops,page32")
    groups = sm.server_groups(sm.select_options("all"))
    base = next(g for g in groups if g[0].name == "default")
    assert {o.name for o in base} == {"default", "long_prompts", "radix_hits", "long_gen", "stops", "logprobs", "structured",
                                      "sampling", "queue_aborts"}  # fmt: skip
    assert all(len({o.server_key() for o in g}) == 1 for g in groups)
    assert len(groups) == 10


def test_inside_block():
    assert [p for p in range(18) if sm.inside_block(p, 8)] == [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 17]


def test_stop_token_is_inside_a_block_and_first_of_its_kind():
    out = [50, 60, 70, 80, 90, 100, 110, 120, 130, 60, 140, 150]
    assert sm.pick_stop_token(out, 8, start=8) == (10, 140)  # 8 ends a block; 9 repeats 60
    assert sm.pick_stop_token(out, 8, start=1) == (1, 60)
    assert sm.pick_stop_token([5, 5, 5], 8, start=1) is None


def test_stop_string_from_the_tiny_tokenizer(tmp_path):
    from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints
    from tokenizers import Tokenizer

    paths = write_tiny_checkpoints(tmp_path / "tiny")
    tok = Tokenizer.from_file(str(paths["target"] / "tokenizer.json"))

    def decode(ids):
        return tok.decode([int(t) for t in ids], skip_special_tokens=True)

    found = 0
    for i, start in enumerate((1, 4, 11, 19, 26, 34)):
        out = planted_continuation([LOW + 3 * i, LOW + 7 * i + 1], 56)
        pick = sm.pick_stop_string(out, decode, BLOCK, start)
        if pick is None:
            continue
        found += 1
        p, stop = pick
        assert p >= start and sm.inside_block(p, BLOCK) and sm.inside_block(p + 1, BLOCK)
        assert decode(out).find(stop) == len(decode(out[:p])), "the stop string occurs before token p"
        assert stop.isprintable() and stop.strip()
    assert found >= 4


def test_eos_prompts_hit_the_eos_token_first_at_each_position():
    eos = planted_continuation([LOW + 1], 40)[17]
    positions = (2, 5, 11, 20, 29, 35)
    prompts = sm.eos_prompts(successor_map(0, TINY, 0), eos, positions, LOW, KEY, seed=14)
    for p, prompt in zip(positions, prompts):
        assert KEY not in prompt
        out = planted_continuation([TINY.bos_token_id] + prompt, 48)
        assert out.index(eos) == p and sm.inside_block(p, BLOCK)


def test_prompt_builders_are_deterministic_and_keyed():
    a = sm.length_prompts([5, 30, 12, 40], LOW, KEY, KEY, seed=1)
    assert a == sm.length_prompts([5, 30, 12, 40], LOW, KEY, KEY, seed=1)
    assert [len(x) for x in a] == [5, 30, 12, 40] and [KEY in x for x in a] == [False, True, False, True]
    shared = sm.shared_prefix_prompts(100, [4, 9], LOW, KEY, KEY, seed=2)
    assert shared[0][:100] == shared[1][:100] and [len(x) for x in shared] == [104, 109]
    work = sm.queue_workload(64, 8, LOW, KEY, KEY, seed=3)
    assert len(work) == 64 and sum(w["abort_after_s"] is not None for w in work) == 8
    assert len({w["rid"] for w in work}) == 64 and all(4 <= len(w["prompt"]) <= 800 for w in work)


def test_served_path_from_real_plugin_log_lines(caplog):
    """The 'kernel on' and worker lines as a GPU server printed them; the decline line as the plugin logs it."""
    from sglang_gemma4_dflash.attention.backend_hooks import BlockDispatch, load_kernel

    log_file = ROOT / "benchmarks/step_31b/h200_sglang0517_dflash_server.log.xz"  # a 31B DFLASH server's log (H200)
    server_log = lzma.decompress(log_file.read_bytes()).decode(errors="replace")

    def upstream(q_extend=None, **kwargs):
        return "upstream"

    with caplog.at_level(logging.INFO):
        assert BlockDispatch(upstream, "target", load_kernel())._call(q_extend=None, a_new_argument=1) == "upstream"
    declined = "\n".join(r.getMessage() for r in caplog.records if "extend kernel" in r.getMessage())
    path = sm.served_path(server_log + "\n[2026-12-06 02:50:00] " + declined + "\n")
    assert path["plugin_loaded"] and path["worker"] in ("DFlashWorkerV2", "DFlashWorker")
    assert path["target_class"] == "Gemma4ForConditionalGeneration"
    assert path["draft_head"] == "upstream's _DflashDraftSampler in the draft CUDA graph"
    assert path["verify_attention"]["draft"] == "the plugin's block kernel"
    assert path["verify_attention"]["target"].startswith("the plugin's block kernel (SGLang's extend kernel for: ")
    assert "a_new_argument" in path["kernel_declines"]["target"][0]
    off = sm.served_path("INFO sglang-gemma4-dflash: block attention kernel off\n")
    assert off["verify_attention"] == {"target": "SGLang's extend kernel", "draft": "SGLang's extend kernel"}


def test_logprob_tolerance():
    assert sm.logprobs_close(-0.01, -0.03) and sm.logprobs_close(-5.0, -5.15) and sm.logprobs_close(-20.0, -20.45)
    assert not sm.logprobs_close(-0.01, -0.5) and not sm.logprobs_close(-5.0, -5.3)


def test_tie_margin_reads_plains_gap_between_the_two_tokens():
    top = [[-0.50, 187, None], [-0.52, 144, None], [-3.0, 9, None], [-4.0, 10, None], [-6.0, 11, None]]
    tie = sm.tie_margin(top, 187, 144)
    assert tie["gap"] == 0.02 and tie["near_tie"] is True
    clear = sm.tie_margin([[-0.1, 187, None], [-2.5, 144, None]], 187, 144)
    assert clear["gap"] == 2.4 and clear["near_tie"] is False
    below = sm.tie_margin(top, 187, 55)  # DFLASH's token is not among plain's top 5
    assert below["gap"] == 5.5 and below["gap_is_lower_bound"] and below["near_tie"] is False
    assert sm.tie_margin(top, 55, 187)["near_tie"] is None  # plain's own token missing: nothing to say


def test_percentile_and_soak_goals():
    assert sm.percentile([], 50) is None
    values = list(range(1, 101))
    assert sm.percentile(values, 50) == 50 and sm.percentile(values, 99) == 99 and sm.percentile([3.0], 99) == 3.0
    good = {"failed": 0, "kv_used_tokens_after_drain": 0, "gpu_memory_mib": {"start": 10000, "end": 10090},
            "health": {"ok": 200, "failed": 0}}  # fmt: skip
    assert all(sm.soak_goals(good).values())
    assert not sm.soak_goals({**good, "gpu_memory_mib": {"start": 10000, "end": 10101}})["memory_within_1pct"]
    assert not sm.soak_goals({**good, "kv_used_tokens_after_drain": 8})["kv_back_to_zero"]
    assert not sm.soak_goals({**good, "health": {"ok": 200, "failed": 1}})["health_always_200"]
    assert not sm.soak_goals({**good, "failed": 1})["no_failures"]
    shared = {**good, "gpu_memory_mib": {"start": 1, "end": 9, "measured": "card (shared ...: not judged)"}}
    assert sm.soak_goals(shared)["memory_within_1pct"] is None


def test_soak_server_builds_flashinfer_sampling_at_start(monkeypatch):
    """The soak's server keeps the plugin's default build of flashinfer's sampling module at start-up, as a user's
    server does; serving_options.sh turns it off for the matrix. With it off, the soak's first sampled request
    stalled the scheduler 88 s on a fresh H100 and /health answered 503 four times."""
    import types

    import serving_options as so
    from sglang_gemma4_dflash.dflash.sampling_prebuild import ENV

    monkeypatch.setenv(ENV, "0")  # as serving_options.sh exports it
    started = []

    def start_server(setup, label, model, flags, env):
        started.append(env)
        return None, "not started in this test", 0.0

    monkeypatch.setattr(so, "start_server", start_server)
    setup = types.SimpleNamespace(args=types.SimpleNamespace(cpu=True, mem_fraction=0.6), paths={"target": "t"})
    assert so.run_soak(setup, 1.0, 1, shared=False) == {"error": "not started in this test"}
    assert [env.get(ENV) for env in started] == ["1"]


def answer(ids, finish="length", **extra):
    return {"ids": ids, "text": "", "finish": {"type": finish}, "accept": 8.0, "seconds": 0.5, **extra}


def test_compare_sorts_answers_into_comparisons_refusals_and_errors():
    import serving_options as so

    out = so.CaseOut()
    strict, lenient = so.Pair("p", "d"), so.Pair("p", "d", refusal_ok=True)
    so.compare(out, strict, "greedy", 0, answer([1, 2, 3]), answer([1, 2, 3]))
    so.compare(out, strict, "greedy", 1, answer([1, 2, 3]), answer([1, 9, 3]))
    so.compare(out, strict, "stops", 2, answer([1, 2], "stop"), answer([1, 2, 3]))
    so.compare(out, strict, "sampling", 3, [answer([5]), answer([4])], [answer([4]), answer([5])])  # any order
    refused = {"error": 'http://d/generate: HTTP 400: {"error": {"message": "' + REFUSAL + '"}}', "seconds": 0.1}
    so.compare(out, lenient, "logprobs", 4, answer([1]), refused)
    so.compare(out, strict, "greedy", 5, answer([1]), refused)  # a refusal where none is allowed
    so.compare(out, lenient, "regex", 6, answer([1]), {**refused, "seconds": 45.0})  # not at once
    top = [[[-0.01, 7, None], [-5.0, 8, None]]]
    so.compare(out, strict, "logprobs", 7, answer([7], output_token_logprobs=[[-0.01, 7, None]], output_top_logprobs=top),
               answer([7], output_token_logprobs=[[-0.03, 7, None]], output_top_logprobs=[[[-0.03, 7, None],
               [-5.15, 8, None]]]), logprobs=True)  # fmt: skip
    so.compare(out, strict, "logprobs", 8, answer([7], output_token_logprobs=[[-0.01, 7, None]], output_top_logprobs=top),
               answer([7], output_token_logprobs=[[-0.5, 7, None]], output_top_logprobs=top), logprobs=True)  # fmt: skip
    got = [(c["case"], c["index"], c["identical"], c["finish_equal"]) for c in out.comparisons]
    assert got == [("greedy", 0, True, True), ("greedy", 1, False, True), ("stops", 2, False, False),
                   ("sampling", 300, True, True), ("sampling", 301, True, True), ("logprobs", 7, True, True),
                   ("logprobs", 8, False, True)]  # fmt: skip
    assert out.comparisons[1]["first_difference"]["index"] == 1
    assert out.comparisons[1]["first_difference"]["plain_ids"] == [1, 2, 3]
    assert out.comparisons[1]["first_difference"]["dflash_ids"] == [1, 9, 3]
    assert out.refusals == [f"logprobs: {REFUSAL}"]
    assert [e.split("[")[0] for e in out.errors] == ["greedy", "regex"]


def test_no_pdl_tuning_keeps_the_default_tilings_but_pdl(tmp_path, monkeypatch):
    """The `-nopdl` pairs' tuning file passes the plugin's own file check and changes nothing but `pdl`."""
    import dataclasses

    import serving_options as so
    from sglang_gemma4_dflash.attention import tuning

    path = so.no_pdl_tuning(str(tmp_path))
    defaults = {b: tuning.default_tuning(TINY.head_dim, b) for b in (1, 2, 7, 16)}
    assert any(t.pdl for t in defaults.values())  # else the pair would show nothing
    monkeypatch.setenv(tuning.TUNING_ENV, path)
    assert tuning.tuning_file_rows(path)
    for batch, default in defaults.items():
        assert tuning.default_tuning(TINY.head_dim, batch) == dataclasses.replace(default, pdl=0)


def test_long_prompts_keep_the_plants_lookup_decided(tiny_targets):
    """chunked_prefill's prompts: every row of their 48-token continuations has the planted lookup's gate well off
    its threshold in fp32 and bf16. The seed they replaced (8) puts it at 0.02 on the 1200-token prompt, where the
    GPU's DFLASH answer first differed from plain's with SGLang's kernel, the plugin's and stock alike: the screen
    sees that one."""
    from sglang_gemma4_dflash_testkit.tiny import min_lookup_gate

    bos = TINY.bos_token_id
    for model in tiny_targets.values():
        prompts = sm.length_prompts(sm.LONG_PROMPTS, LOW, KEY, KEY, seed=sm.LONG_PROMPTS_SEED)
        assert min(min_lookup_gate(model, [bos] + p, 48) for p in prompts) > 1.5
        old = sm.length_prompts(sm.LONG_PROMPTS, LOW, KEY, KEY, seed=8)[5]
        assert abs(min_lookup_gate(model, [bos] + old, 48)) < 0.05


def test_target_decision_tells_a_logit_tie_from_a_clear_choice(tiny_targets):
    """The json_schema answer that differed on the GPU: at its first difference the target's fp32 logits for
    plain's token (288) and DFLASH's (212) are 0.0002 apart (a tie; bf16 picks 212). The long prompt's difference
    (187 vs 144) is no logit tie (8.5 apart in fp32), but its lookup gate sits at 0.02 and bf16 answers 144."""
    from sglang_gemma4_dflash_testkit.tiny import decision

    bos, fp32, bf16 = TINY.bos_token_id, tiny_targets["float32"], tiny_targets["bfloat16"]
    json_prompt = [bos] + sm.length_prompts([6, 25, 50, 90], LOW, KEY, KEY, seed=16)[2]
    json_plain = [104, 234, 288, 234, 288, 234, 288, 234, 212, 15, 92, 88, 15, 234] + [288, 234] * 5
    tie = decision(fp32, json_prompt + json_plain, 288, 212)
    assert tie["tie"] and abs(tie["logit_gap"]) < 0.001 and tie["lookup_gate"] > 5
    assert decision(bf16, json_prompt + json_plain, 288, 212)["logit_gap"] < 0  # bf16 flips it
    long_prompt = [bos] + sm.length_prompts(sm.LONG_PROMPTS, LOW, KEY, KEY, seed=8)[5]
    long_plain = [134, 252, 124, 98, 113, 227, 99, 298, 155, 308, 215, 141, 201, 144]
    clear = decision(fp32, long_prompt + long_plain, 187, 144)
    assert not clear["tie"] and clear["logit_gap"] > 8 and clear["argmax"] == 187 and abs(clear["lookup_gate"]) < 0.05
    assert decision(bf16, long_prompt + long_plain, 187, 144)["argmax"] == 144


# --- the script's cases against a real SGLang CPU server --------------------------------------------------------


@pytest.mark.slow
def test_cases_against_a_cpu_server(tmp_path_factory, monkeypatch):
    """One CPU server of the tiny target stands in for both servers of a pair (SGLang refuses DFLASH on CPU): the
    client and judging code of the stop, EOS-free greedy, grammar, sampling and logprob cases gives `exact`, the
    stops land inside blocks, and the KV is back to 0 after the traffic."""
    import serving_options as so
    from sglang_gemma4_dflash_testkit import e2e
    from sglang_gemma4_dflash_testkit.tiny import write_tiny_checkpoints

    paths = write_tiny_checkpoints(tmp_path_factory.mktemp("tiny"))
    args = e2e.cpu_server_args(8, max_total_tokens=8192)
    monkeypatch.setitem(so.CAP, "new_tokens", 24)  # the CPU is slow: 24 new tokens at most a request
    with e2e.Server(paths["target"], args, launcher=e2e.CPU_LAUNCHER, ready_timeout=300) as server:
        url = server.base_url
        pair = so.Pair(url, url, so.tokenizer_decode(str(paths["target"])))
        rows = {}
        for name in ("stops", "structured", "sampling", "logprobs"):
            option = sm.OPTIONS[name]
            out = so.run_option(option, pair)
            rows[name] = sm.make_row(option, sglang="cpu", pair="text", comparisons=out.comparisons,
                                     accept_lengths=out.accepts, refusals=out.refusals, errors=out.errors,
                                     plain_start_error=None, dflash_start_error=None, path={},
                                     details=out.details)  # fmt: skip
        kv = so.drained_kv(url)
        # a planted difference: the plain request is replayed up to it with top logprobs
        real = so.post(url, so.payload([so.LOW + 3, so.LOW + 40, so.LOW + 7], 6), 120)
        out = so.CaseOut()
        so.compare(out, pair, "greedy", 0, real, {**real, "ids": real["ids"][:3] + [real["ids"][3] + 1]})
        margin = out.comparisons[0]["first_difference"]["plain_margin"]
    assert margin["replay_equals_plain"] and margin["top"][0][1] == real["ids"][3], margin
    assert margin["gap"] is not None and margin["gap"] >= 0
    for name, row in rows.items():
        assert row["verdict"] == "exact", (name, row["errors"], row["first_difference"])
    stops = rows["stops"]["details"]
    assert len(stops["stop_ids"]) == 4 and len(stops["stop_strings"]) >= 2  # the stops picked before token 24
    for s in stops["stop_ids"]:  # the output ends at the stop token, inside a block
        assert sm.inside_block(s["position"], BLOCK) and s["plain_len"] == s["position"] + 1
    for s in stops["stop_strings"]:  # the output ends with the stop string's second token, inside the block
        assert sm.inside_block(s["position"] + 1, BLOCK) and s["plain_len"] == s["position"] + 2
    assert rows["structured"]["details"]["regex"]["breaks_grammar"] == {"plain": [], "dflash": []}
    assert rows["sampling"]["details"]["sampling"]["samples"] == [2, 1, 3]
    assert rows["logprobs"]["identical"]["total"] == 5  # 4 with logprobs + the follow-up
    assert kv == 0
