"""Optional GPU kernels. Importing this package never needs CUDA or Triton.

``head_argmax`` holds the fused "argmax over a block of LM-head rows" used by the greedy draft
head, with a pure-torch reference of the same contract that also runs on CPU.
"""
