"""DFlash speculative decoding for Gemma 4 targets in SGLang, as an SGLang general plugin.

Installing the package is all it takes: SGLang finds the entry point ``gemma4_dflash`` in the
group ``sglang.srt.plugins`` and calls ``sglang_gemma4_dflash.plugin.register`` in every process.
"""

__version__ = "0.1.0"
