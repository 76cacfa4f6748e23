"""Byte-level BPE tokenizers trained by the tests with Hugging Face `tokenizers`, the way Qwen2
("qwen": Split on Qwen's regex, then ByteLevel) and GPT-2 ("gpt2": ByteLevel's own regex)
build theirs: the recipe's own trainer (python/musacoder_tools/train_tokenizer.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python"))

from musacoder_tools.train_tokenizer import QWEN_SPLIT, SPECIALS, train_bpe  # noqa: E402,F401
