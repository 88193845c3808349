"""An offline byte-level BPE tokenizer for the tiny Gemma 4 checkpoints.

Built with the `tokenizers` library from a fixed corpus, so the same bytes come out on every run.
Special tokens come first, at Gemma's ids (pad 0, eos 1, bos 2, unk 3, mask 4), then Gemma 4's
multimodal and turn markers, then the 256 byte symbols, then merges up to the vocabulary size.
"""

from __future__ import annotations

import json
from pathlib import Path

# Order is the id: SPECIAL_TOKENS[i] has id i.
SPECIAL_TOKENS = (
    "<pad>", "<eos>", "<bos>", "<unk>", "<mask>",
    "<|image>", "<image|>", "<|image|>",
    "<|audio>", "<audio|>", "<|audio|>",
    "<|video|>", "<|turn>", "<turn|>",
)  # fmt: skip
TOKEN_ID = {token: i for i, token in enumerate(SPECIAL_TOKENS)}

_CORPUS = (
    "The quick brown fox jumps over the lazy dog. ",
    "Speculative decoding drafts a block of tokens and the target verifies them in one pass. ",
    "A tiny Gemma 4 model for tests: hello world, the cat sat on the mat. ",
    "def main():\n    return 0\n",
    "0123456789 + - * / = ( ) [ ] { } , . ; : ! ?",
)

# A Gemma 4 style chat template: <|turn>role\ncontent<turn|>\n ... <|turn>model\n
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'text' %}{{ item['text'] }}{% elif item['type'] == 'image' %}{{ '<|image|>' }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<turn|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|turn>model\n' }}{% endif %}"
)


def build_tokenizer(vocab_size: int):
    """A `tokenizers.Tokenizer` with exactly ``vocab_size`` tokens (byte-level BPE, bos prepended)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=1,
        show_progress=False,
    )
    tokenizer.train_from_iterator([line * 4 for line in _CORPUS], trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"tiny tokenizer has {tokenizer.get_vocab_size()} tokens, wanted {vocab_size}: "
            "the corpus is too small for that many merges"
        )
    bos = "<bos>"
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, TOKEN_ID[bos])]
    )
    return tokenizer


def tokenizer_config(*, multimodal: bool) -> dict:
    """tokenizer_config.json in the layout of the published Gemma 4 repositories.

    The class is the generic tokenizers backend (the tokenizer.json is used as written);
    the named multimodal tokens give `tokenizer.image_token_id` etc. to Gemma4Processor.
    """
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        "boi_token": "<|image>",
        "eoi_token": "<image|>",
        "image_token": "<|image|>",
        "boa_token": "<|audio>",
        "eoa_token": "<audio|>",
        "audio_token": "<|audio|>",
        "sot_token": "<|turn>",
        "eot_token": "<turn|>",
        "extra_special_tokens": {"video_token": "<|video|>"},
        "add_bos_token": True,
        "padding_side": "left",
        "model_max_length": 4096,
        "chat_template": CHAT_TEMPLATE,
    }
    if multimodal:
        config["processor_class"] = "Gemma4Processor"
    return config


def write_tokenizer(directory: Path, vocab_size: int, *, multimodal: bool) -> None:
    directory = Path(directory)
    build_tokenizer(vocab_size).save(str(directory / "tokenizer.json"))
    text = json.dumps(tokenizer_config(multimodal=multimodal), indent=2, sort_keys=True) + "\n"
    (directory / "tokenizer_config.json").write_text(text)
