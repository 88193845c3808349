"""Attention for the DFLASH block: the kernel and where SGLang runs it."""
