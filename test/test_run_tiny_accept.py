"""The drafting pair's prompts (scripts/gpu/run_tiny_accept.py): plain greedy must be a decided oracle on them."""

import sys
from pathlib import Path

from sglang_gemma4_dflash_testkit.tiny import min_lookup_gate, mode_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "gpu"))

import run_tiny_accept  # noqa: E402


def test_prompts_keep_the_plants_lookup_decided(tiny_targets):
    """Every row of the 64-token continuations has the planted lookup's gate well off its threshold in fp32 and bf16.
    The seed they replaced (17) puts prompt 15's at 0.50 (fp32) 33 tokens in, where SGLang 0.5.23's plain server
    answered the other way on the GPU: the screen sees that one."""
    new, old = run_tiny_accept.prompts(), run_tiny_accept.prompts(seed=17)
    assert [mode_of(p) for p in new] == [i % 2 for i in range(len(new))]  # odd ones carry the key, as before
    for model in tiny_targets.values():
        assert min(min_lookup_gate(model, p, run_tiny_accept.MAX_NEW_TOKENS) for p in new) > 1.5
        assert min_lookup_gate(model, old[15], run_tiny_accept.MAX_NEW_TOKENS) < 0.6
