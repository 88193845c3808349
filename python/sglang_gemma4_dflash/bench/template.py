"""The chat template applied on the client, as the DFlash authors' server mode does: the target's transformers
tokenizer turns one user turn into token ids, with `enable_thinking` passed to the template."""

from __future__ import annotations

from sglang_gemma4_dflash.bench.errors import BenchError, need


def load_tokenizer(path: str):
    """The transformers tokenizer at `path` (a directory or hub id); BenchError if it cannot be loaded."""
    transformers = need("transformers", "the client-side chat template")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    except Exception as e:  # missing files, no hub: one message
        first = str(e).splitlines()[0] if str(e) else ""
        raise BenchError(f"cannot load the tokenizer {path!r} ({type(e).__name__}: {first}); pass --tokenizer DIR")
    if not getattr(tokenizer, "chat_template", None):
        raise BenchError(f"the tokenizer {path!r} has no chat template; pass --tokenizer with the target's tokenizer")
    return tokenizer


def chat_ids(tokenizer, prompt: str, enable_thinking: bool) -> list[int]:
    """Token ids of one user turn plus the generation prompt (the template brings BOS: none is added again)."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
    )
    return list(tokenizer.encode(text, add_special_tokens=False))
