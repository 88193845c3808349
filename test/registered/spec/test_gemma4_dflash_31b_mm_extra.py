"""An image + text chat request under DFLASH, Gemma 4 31B (its multimodal checkpoint) with the z-lab draft, TP 2.

The image is made in the test (a red square on white, a PNG sent as a data URL), so nothing is fetched. Checks: the
server starts with DFLASH; the chat request completes with a finish reason and names the colour; the scheduler
reports an average accept length afterwards (at least 1: every verify step commits at least one token) and DFLASH
drafted more than that on text right after, so the draft is still working once an image went through.

Skipped (with the reason) when fewer than 2 CUDA GPUs are visible or the weights are not on local disk
(GEMMA4_DFLASH_31B_TARGET / GEMMA4_DFLASH_31B_DRAFT point at local copies; nothing is downloaded to check).
"""

import os
import unittest

try:
    from sglang.test.ci.ci_register import register_cuda_ci
except ImportError:  # SGLang not importable: the marker is a no-op at run time anyway

    def register_cuda_ci(*args, **kwargs):
        return None


from sglang_gemma4_dflash_testkit import e2e

register_cuda_ci(est_time=600, stage="extra-a", runner_config="2-gpu-large")

TARGET = os.environ.get("GEMMA4_DFLASH_31B_TARGET", "google/gemma-4-31B-it")
DRAFT = os.environ.get("GEMMA4_DFLASH_31B_DRAFT", "z-lab/gemma-4-31B-it-DFlash")
TP_SIZE = 2
NUM_DRAFT_TOKENS = 16
DRAFT_ATTENTION_BACKEND = "flashinfer"
QUESTION = "What colour is the square in this image? Answer with one word."
TEXT_PROMPT = "Count from 1 to 40, separated by commas:"

SKIP_REASON = e2e.skip_reason(
    TP_SIZE, {"GEMMA4_DFLASH_31B_TARGET": TARGET, "GEMMA4_DFLASH_31B_DRAFT": DRAFT}
)


@unittest.skipIf(SKIP_REASON is not None, f"Gemma 4 31B multimodal DFLASH: {SKIP_REASON}")
class TestGemma4DFlash31BImage(unittest.TestCase):
    def test_image_chat_completes_under_dflash(self):
        from sglang.srt.utils import kill_process_tree
        from sglang.test.test_utils import DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH, DEFAULT_URL_FOR_TEST, popen_launch_server

        target, draft = e2e.local_weights(TARGET), e2e.local_weights(DRAFT)
        args = e2e.dflash_server_args(draft, num_draft_tokens=NUM_DRAFT_TOKENS,
                                      draft_attention_backend=DRAFT_ATTENTION_BACKEND, tp_size=TP_SIZE,
                                      max_running_requests=8)
        base_url = DEFAULT_URL_FOR_TEST
        process = popen_launch_server(target, base_url, timeout=3 * DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
                                      other_args=args, env={"HF_HUB_OFFLINE": "1"})
        try:
            started = e2e.spec_summary(e2e.server_info(base_url))
            answer = e2e.chat(base_url, target, [e2e.image_message(QUESTION, e2e.square_png())], max_tokens=32)
            after_image = e2e.spec_summary(e2e.server_info(base_url))
            text = e2e.generate(base_url, TEXT_PROMPT, max_new_tokens=128)
        finally:
            kill_process_tree(process.pid)

        choice = answer["choices"][0]
        content = choice["message"]["content"] or ""
        print(f"[gemma-4-31B image DFLASH] answer={content!r} finish={choice.get('finish_reason')} "
              f"avg_spec_accept_length={after_image.avg_spec_accept_length} "
              f"text spec_accept_length={text.meta_info.get('spec_accept_length')}")
        self.assertEqual(started.speculative_algorithm, "DFLASH")
        self.assertIn(choice.get("finish_reason"), ("stop", "length"))
        self.assertIn("red", content.lower())
        self.assertIsNotNone(after_image.avg_spec_accept_length, "no accept length reported after the image")
        self.assertGreaterEqual(after_image.avg_spec_accept_length, 1.0)
        self.assertGreater(float(text.meta_info.get("spec_accept_length") or 0.0), 1.0,
                           "DFLASH accepted no drafted token on text after the image request")


if __name__ == "__main__":
    unittest.main()
