"""Gemma 4 31B (dense) target with its z-lab DFlash draft under SGLang's DFLASH, tensor parallel 2: the checks of
``sglang_gemma4_dflash_testkit.registered.GSM8KUnderDFlash`` (which also says when it skips).

On a real server: it starts with DFLASH, the configured draft attention backend and block size, CUDA graphs on;
GSM8K (5-shot, 200 questions, completion API, 512 new tokens) scores at least ``min_gsm8k_score``; the average accept
length the scheduler reports is at least ``min_accept_length``. docs/registered_tests.md says where each threshold
comes from.
"""

import unittest

from sglang_gemma4_dflash_testkit import registered
from sglang_gemma4_dflash_testkit.registered import register_cuda_ci

register_cuda_ci(est_time=900, stage="extra-a", runner_config="2-gpu-large")


class TestGemma4DFlash31B(registered.GSM8KUnderDFlash):
    target_env = ("GEMMA4_DFLASH_31B_TARGET", "google/gemma-4-31B-it")
    draft_env = ("GEMMA4_DFLASH_31B_DRAFT", "z-lab/gemma-4-31B-it-DFlash")
    min_gsm8k_score = 0.75
    min_accept_length = 5.4


if __name__ == "__main__":
    unittest.main()
