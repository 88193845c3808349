"""An image + text chat request under DFLASH, Gemma 4 31B (its multimodal checkpoint) with the z-lab draft, TP 2.

The image is made in the test (a red square on white, a PNG sent as a data URL), so nothing is fetched. Checks
(sglang_gemma4_dflash_testkit.registered.ImageChatUnderDFlash): the server starts with DFLASH; the chat request
completes with a finish reason and names the colour; the scheduler reports an average accept length afterwards (at
least 1: every verify step commits at least one token) and DFLASH drafted more than that on text right after, so the
draft is still working once an image went through.

Skipped (with the reason) as ``registered`` says: without 2 CUDA GPUs or without the weights on local disk.
"""

import unittest

from sglang_gemma4_dflash_testkit import registered
from sglang_gemma4_dflash_testkit.registered import register_cuda_ci

register_cuda_ci(est_time=600, stage="extra-a", runner_config="2-gpu-large")


class TestGemma4DFlash31BImage(registered.ImageChatUnderDFlash):
    target_env = ("GEMMA4_DFLASH_31B_TARGET", "google/gemma-4-31B-it")
    draft_env = ("GEMMA4_DFLASH_31B_DRAFT", "z-lab/gemma-4-31B-it-DFlash")


if __name__ == "__main__":
    unittest.main()
