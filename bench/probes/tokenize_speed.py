"""Our C++ byte-level BPE (`musacoder tokenize`, what `train sft` uses to read its data) beside
Hugging Face `tokenizers` (encode_batch, all cores) on the same JSONL of {"text"} rows and the
same tokenizer.json: seconds, MB/s, and whether every row's ids are identical.

usage: python3 bench/probes/tokenize_speed.py --musacoder BIN --tokenizer tokenizer.json --corpus corpus.jsonl
           [--max-mb 20]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", required=True, help='JSONL, one {"text": ...} per line (musacoder corpus writes it)')
    ap.add_argument("--max-mb", type=float, default=20, help="use the corpus's first rows up to this many MB")
    a = ap.parse_args()
    from tokenizers import Tokenizer

    rows, size = [], 0
    with open(a.corpus, encoding="utf-8") as f:
        for line in f:
            if size + len(line) > a.max_mb * 1e6 and rows:
                break
            rows.append(line)
            size += len(line)
    texts = [json.loads(r)["text"] for r in rows]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            f.writelines(rows)
        t0 = time.time()
        subprocess.run([a.musacoder, "tokenize", "--tokenizer", a.tokenizer, "--input", inp, "--output", out,
                        "--no-progress"], check=True, stdout=subprocess.DEVNULL)
        ours_s = time.time() - t0
        with open(out, encoding="utf-8") as f:
            ours = [json.loads(line)["ids"] for line in f]
    tok = Tokenizer.from_file(a.tokenizer)
    t0 = time.time()
    hf = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    hf_s = time.time() - t0
    same = sum(x == y for x, y in zip(ours, hf))
    tokens = sum(len(x) for x in hf)
    print(f"{len(texts)} rows, {mb:.1f} MB, {tokens} tokens ({os.cpu_count()} cores)")
    print(f"{'':24} {'seconds':>8} {'MB/s':>7}")
    print(f"{'musacoder tokenize':24} {ours_s:8.2f} {mb / ours_s:7.2f}   (one thread, process start included)")
    print(f"{'tokenizers encode_batch':24} {hf_s:8.2f} {mb / hf_s:7.2f}   (all cores)")
    print(f"identical ids: {same}/{len(texts)} rows")
    return 0 if same == len(texts) else 1


if __name__ == "__main__":
    sys.exit(main())
