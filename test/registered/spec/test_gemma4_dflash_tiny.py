"""DFLASH on a tiny Gemma 4 target gives exactly the plain server's greedy tokens (one GPU, no network).

Two real SGLang servers on the same tiny target (the checkpoints come from sglang_gemma4_dflash_testkit.tiny, written to a
temporary directory): a plain one and a DFLASH one with the tiny DFlash draft, triton attention for target and
draft, `--sampling-backend pytorch`. 18 greedy prompts go to each, some longer than the target's sliding window,
the last 8 in flight together. The plain outputs must follow the target's planted successor map (so the comparison
is not two runs agreeing on noise); every DFLASH output must equal the plain one token for token; /server_info must
show DFLASH with the configured block size and draft backend; the reported average accept length must reach
0.75 x the block size (ACCEPT_FLOOR). The tiny draft predicts the whole block only from the right captured target
features and the right head ids (docs/tiny_checkpoints.md), so the floor checks the plugin's capture and head too.

With the plugin installed it is meant for SGLang 0.5.12-0.5.13 (where upstream cannot serve Gemma 4 DFLASH) as well
as later lines. Skipped, with the reason, without a CUDA GPU.
"""

import json
import os
import tempfile
import unittest

try:
    from sglang.test.ci.ci_register import register_cuda_ci
except ImportError:  # SGLang not importable: the marker is a no-op at run time anyway

    def register_cuda_ci(*args, **kwargs):
        return None


from sglang_gemma4_dflash_testkit import e2e

register_cuda_ci(est_time=300, stage="base-b", runner_config="1-gpu-small")

NUM_PROMPTS = 18
ACCEPT_FLOOR = 0.75  # x block size; the planted pair accepts the whole block (CPU prediction: test_tiny_accept.py)
CONCURRENT = 8
MAX_NEW_TOKENS = 40
COMMON_ARGS = e2e.gpu_server_args(CONCURRENT)

SKIP_REASON = None if e2e.cuda_device_count() >= 1 else "needs a CUDA GPU, found none"


def draft_block_size(draft_dir: str) -> int:
    """The draft's block size as its config.json states it (top level or under dflash_config)."""
    with open(os.path.join(draft_dir, "config.json")) as f:
        config = json.load(f)
    block = config.get("block_size") or (config.get("dflash_config") or {}).get("block_size")
    if not block:
        raise ValueError(f"{draft_dir}/config.json names no block_size")
    return int(block)


def prompt_lengths(window: int) -> list[int]:
    """Short prompts, prompts around the sliding window and prompts well past it."""
    base = [3, 7, 16, 31, window - 5, window + 1, window + 37, 2 * window + 11]
    return [base[i % len(base)] + i for i in range(NUM_PROMPTS)]


@unittest.skipIf(SKIP_REASON is not None, f"tiny Gemma 4 DFLASH: {SKIP_REASON}")
class TestGemma4DFlashTiny(unittest.TestCase):
    def test_dflash_tokens_equal_plain_greedy(self):
        from sglang_gemma4_dflash_testkit.tiny import TINY, planted_continuation, write_tiny_checkpoints

        with tempfile.TemporaryDirectory() as root:
            paths = write_tiny_checkpoints(root)
            target, draft = paths["target"], paths["draft"]
            block = draft_block_size(draft)
            prompts = e2e.token_prompts(
                TINY.vocab_size, prompt_lengths(TINY.sliding_window), seed=11, low=TINY.num_special_tokens
            )
            self.assertTrue(any(len(p) > TINY.sliding_window for p in prompts))

            with e2e.Server(target, COMMON_ARGS, ready_timeout=600) as server:
                plain = e2e.greedy_suite(server.base_url, prompts, MAX_NEW_TOKENS, CONCURRENT, ignore_eos=True)
            with e2e.Server(target, COMMON_ARGS + e2e.dflash_args(draft, block), ready_timeout=600) as server:
                spec = e2e.greedy_suite(server.base_url, prompts, MAX_NEW_TOKENS, CONCURRENT, ignore_eos=True)
                summary = e2e.spec_summary(e2e.server_info(server.base_url))

        verdicts = e2e.compare_outputs(plain, spec)
        different = [v.as_dict() for v in verdicts if not v.identical]
        print(f"[tiny DFLASH] {summary.as_dict()} identical={len(verdicts) - len(different)}/{len(verdicts)}")
        self.assertTrue(all(len(g.output_ids) == MAX_NEW_TOKENS for g in plain + spec), "a run stopped early")
        # the plain server must follow the planted successor map (wide top-1 margins): otherwise "identical"
        # could be two runs agreeing on noise
        planted = [planted_continuation(p, MAX_NEW_TOKENS) for p in prompts]
        self.assertEqual([g.output_ids for g in plain], planted, "the plain tiny target left its planted map")
        self.assertEqual(different, [], "DFLASH tokens differ from plain greedy")
        self.assertEqual(summary.speculative_algorithm, "DFLASH")
        self.assertEqual(summary.speculative_num_draft_tokens, block)
        self.assertEqual(summary.speculative_draft_attention_backend, "triton")
        self.assertIsNotNone(summary.avg_spec_accept_length, "the server reported no accept length")
        # a capture one layer off or a head returning wrong ids accepts about 1 token per step
        self.assertGreaterEqual(summary.avg_spec_accept_length, ACCEPT_FLOOR * block)


if __name__ == "__main__":
    unittest.main()
