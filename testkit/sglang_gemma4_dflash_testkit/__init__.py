"""Test kit of sglang-gemma4-dflash: the tiny offline checkpoints, SGLang on CPU, the server harness,
the multi-process helper and the main job. Used by the tests and the main job; not part of the plugin's wheel."""
