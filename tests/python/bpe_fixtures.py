"""Byte-level BPE tokenizers trained by the tests with Hugging Face `tokenizers`, the way Qwen2
("qwen": Split on Qwen's regex, then ByteLevel) and GPT-2 ("gpt2": ByteLevel's own regex)
build theirs."""
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_bpe(path, corpus, style="qwen", vocab_size=1200):
    tok = Tokenizer(models.BPE())
    if style == "qwen":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(path))
    return tok
