"""Gemma 4 31B (dense) target with its z-lab DFlash draft under SGLang's DFLASH, tensor parallel 2.

Checks, on a real server: it starts with DFLASH, the configured draft attention backend and block size, CUDA graphs
on; GSM8K (5-shot, 200 questions, completion API, 512 new tokens) scores at least MIN_GSM8K_SCORE; the average
accept length the scheduler reports is at least MIN_ACCEPT_LENGTH. docs/registered_tests.md says where each
threshold comes from.

Skipped (with the reason) when fewer than 2 CUDA GPUs are visible or the weights are not on local disk; the check
looks at directories and the Hugging Face cache only, never the network. Point it at local copies with
GEMMA4_DFLASH_31B_TARGET / GEMMA4_DFLASH_31B_DRAFT; GSM8K_DATA_PATH names a local GSM8K test.jsonl (otherwise
SGLang's eval runner downloads it).
"""

import os
import unittest

try:
    from sglang.test.ci.ci_register import register_cuda_ci
except ImportError:  # SGLang not importable: the marker is a no-op at run time anyway

    def register_cuda_ci(*args, **kwargs):
        return None


from sglang_gemma4_dflash_testkit import e2e

register_cuda_ci(est_time=900, stage="extra-a", runner_config="2-gpu-large")

TARGET = os.environ.get("GEMMA4_DFLASH_31B_TARGET", "google/gemma-4-31B-it")
DRAFT = os.environ.get("GEMMA4_DFLASH_31B_DRAFT", "z-lab/gemma-4-31B-it-DFlash")
TP_SIZE = 2
NUM_DRAFT_TOKENS = 16
DRAFT_ATTENTION_BACKEND = "flashinfer"
GSM8K_QUESTIONS = 200
MIN_GSM8K_SCORE = 0.75
MIN_ACCEPT_LENGTH = 5.4

SKIP_REASON = e2e.skip_reason(
    TP_SIZE, {"GEMMA4_DFLASH_31B_TARGET": TARGET, "GEMMA4_DFLASH_31B_DRAFT": DRAFT}
)


@unittest.skipIf(SKIP_REASON is not None, f"Gemma 4 31B DFLASH: {SKIP_REASON}")
class TestGemma4DFlash31B(unittest.TestCase):
    def test_gsm8k_accuracy_and_accept_length(self):
        target, draft = e2e.local_weights(TARGET), e2e.local_weights(DRAFT)
        args = e2e.dflash_server_args(draft, num_draft_tokens=NUM_DRAFT_TOKENS,
                                      draft_attention_backend=DRAFT_ATTENTION_BACKEND, tp_size=TP_SIZE,
                                      max_running_requests=32)
        started, metrics, finished = e2e.gsm8k_under_dflash(target, args, GSM8K_QUESTIONS)

        print(f"[gemma-4-31B DFLASH] {started.as_dict()} gsm8k={metrics['score']:.4f} "
              f"avg_spec_accept_length={finished.avg_spec_accept_length}")
        self.assertEqual(started.speculative_algorithm, "DFLASH")
        self.assertEqual(started.speculative_draft_attention_backend, DRAFT_ATTENTION_BACKEND)
        self.assertEqual(started.speculative_num_draft_tokens, NUM_DRAFT_TOKENS)
        self.assertTrue(started.cuda_graph_on, "CUDA graphs are off")
        self.assertGreaterEqual(float(metrics["score"]), MIN_GSM8K_SCORE)
        self.assertIsNotNone(finished.avg_spec_accept_length, "the server reported no accept length")
        self.assertGreaterEqual(finished.avg_spec_accept_length, MIN_ACCEPT_LENGTH)


if __name__ == "__main__":
    unittest.main()
