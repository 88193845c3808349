"""Gemma 4 26B-A4B (mixture of experts) target with its z-lab DFlash draft under SGLang's DFLASH, TP 2: the checks of
``sglang_gemma4_dflash_testkit.registered.GSM8KUnderDFlash`` (which also says when it skips).
docs/registered_tests.md says where each threshold comes from."""

import os
import unittest

from sglang_gemma4_dflash_testkit import registered
from sglang_gemma4_dflash_testkit.registered import register_cuda_ci

register_cuda_ci(est_time=900, stage="extra-a", runner_config="2-gpu-large")


class TestGemma4DFlash26BA4B(registered.GSM8KUnderDFlash):
    target_env = ("GEMMA4_DFLASH_26B_A4B_TARGET", "google/gemma-4-26B-A4B-it")
    draft_env = ("GEMMA4_DFLASH_26B_A4B_DRAFT", "z-lab/gemma-4-26B-A4B-it-DFlash")
    min_gsm8k_score = 0.75
    # Provisional (no public SGLang measurement for this pair was found): set from the first measured runs as the
    # measured mean minus 5% and recorded in docs/registered_tests.md; overridable while calibrating.
    min_accept_length = float(os.environ.get("GEMMA4_DFLASH_26B_A4B_MIN_ACCEPT", "4.0"))


if __name__ == "__main__":
    unittest.main()
