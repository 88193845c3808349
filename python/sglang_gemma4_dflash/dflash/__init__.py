"""Hooks into SGLang's DFlash worker, and the split draft head folded into the v2 draft CUDA graph."""
