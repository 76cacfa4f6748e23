"""A byte-level BPE tokenizer trained with Hugging Face `tokenizers`, as Qwen2 builds its own
(Split on Qwen's pre-tokenizer regex, then ByteLevel), with the ChatML special tokens; written
as tokenizer.json, which the C++ tokenizer reads with ids identical to `tokenizers`'
(tests/python/test_tokenizer.py). The recipe's tokenizer stage:

    python3 -m musacoder_tools.train_tokenizer --corpus RUN/corpus/corpus.jsonl --vocab 16384 --out RUN/tokenizer

Also "gpt2" style (ByteLevel's own regex), which the tests use for a second pre-tokenizer.
"""
import argparse
import json
import os
import sys
import time

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_bpe(path, corpus, style="qwen", vocab_size=1200):
    """Trains on an iterable of texts and saves tokenizer.json at `path`; returns the Tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
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


def corpus_texts(paths, max_bytes):
    """The "text" of every row of the JSONL files, up to max_bytes in all (0: no limit)."""
    seen = 0
    for p in paths:
        with open(p) as f:
            for no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)["text"]
                except (ValueError, KeyError, TypeError) as e:
                    sys.exit(f"{p}:{no}: a corpus row needs \"text\" ({e})")
                yield text
                seen += len(text)
                if max_bytes and seen >= max_bytes:
                    return


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, action="append", help="corpus.jsonl ({\"text\"} rows); repeatable")
    ap.add_argument("--out", required=True, help="folder for tokenizer.json")
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--max-bytes", type=int, default=0, help="train on at most this many characters (0: all)")
    ap.add_argument("--style", choices=["qwen", "gpt2"], default="qwen")
    a = ap.parse_args()
    for p in a.corpus:
        if not os.path.isfile(p):
            sys.exit(f"--corpus: no file {p}")
    if a.vocab < 256 + len(SPECIALS):
        sys.exit(f"--vocab must be at least {256 + len(SPECIALS)} (the byte alphabet and the special tokens)")
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    tok = train_bpe(os.path.join(a.out, "tokenizer.json"), corpus_texts(a.corpus, a.max_bytes), a.style, a.vocab)
    report = {"vocab_size": tok.get_vocab_size(), "requested_vocab": a.vocab, "style": a.style, "corpus": a.corpus,
              "max_bytes": a.max_bytes, "specials": {s: tok.token_to_id(s) for s in SPECIALS},
              "seconds": round(time.time() - t0, 2)}
    with open(os.path.join(a.out, "tokenizer_report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"tokenizer: {report['vocab_size']} ids ({a.style}) in {report['seconds']} s -> {a.out}/tokenizer.json")


if __name__ == "__main__":
    main()
