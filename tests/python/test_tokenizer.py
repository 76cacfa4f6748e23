"""`musacoder tokenize` (src/tokenizer/) against Hugging Face `tokenizers`: tokenizers trained in
the test (Qwen2-style Split regex + ByteLevel, and GPT-2-style ByteLevel with its own regex),
hard texts (code, CUDA, Unicode, long whitespace runs, special tokens), ids identical and
decoding back to the text; clear errors for bad files and lines."""
import json
import os
import subprocess

import pytest

tokenizers = pytest.importorskip("tokenizers")

from bpe_fixtures import train_bpe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("MUSACODER_BINARY", os.path.join(ROOT, "build", "musacoder"))
pytestmark = pytest.mark.skipif(not os.path.exists(BINARY), reason="musacoder not built (scripts/build.sh)")


CORPUS = [
    open(os.path.join(ROOT, p), encoding="utf-8").read()
    for p in ("src/synth/teacher.cc", "src/eval/compile_pool.cc", "python/musacoder_harness/judge.py",
              "README.md", "docs/synthesis.md")
] + ["Größe café naïve 東京 北京大学 русский язык العربية 😀🚀 ñandú" * 20]

HARD = [
    "def forward(self, x):\n    return torch.relu(x) * 2  # fused\n",
    "__global__ void k(const float* __restrict__ a, float* out, long long n) {\n\tif (i < n) out[i] = fmaxf(a[i], 0.0f);\n}",
    "<|im_start|>system\nYou write CUDA.<|im_end|>\n<|im_start|>user\nWrite relu<|im_end|>\n<|im_start|>assistant\n",
    "Größe 東京タワー 😀🚀👩‍💻 naïve ñ العربية\u00a0nbsp",
    "a" + " " * 37 + "b\n\n\n\t\t  \r\n   \n" + "\u3000 ideographic space",
    "x=1234567890; y = 3.14159e-10; z=0x7fffffffffffffffLL;",
    "I'll can't WE'RE you've It'S",
    "   leading spaces and trailing   ",
    "",
    "<|endoftext|><|endoftext|>text<|im_end|>",
    "emoji run 😀😀😀😀 mixed🚀text and \U0001F9EA combining e\u0301",
]


def train(path, style):
    return train_bpe(path, CORPUS, style)


def run(*args, check=True):
    r = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("style", ["qwen", "gpt2"])
def test_ids_identical_to_hf_tokenizers(tmp_path, style):
    ref = train(tmp_path / "tokenizer.json", style)
    texts = HARD + CORPUS[:3]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    run("tokenize", "--tokenizer", str(tmp_path / "tokenizer.json"), "--input", str(tmp_path / "in.jsonl"),
        "--output", str(tmp_path / "ids.jsonl"), "--no-progress")
    got = [json.loads(x)["ids"] for x in (tmp_path / "ids.jsonl").read_text().splitlines()]
    assert len(got) == len(texts)
    for text, ids in zip(texts, got):
        assert ids == ref.encode(text).ids, text[:80]
    # and back to text
    run("tokenize", "--decode", "--tokenizer", str(tmp_path / "tokenizer.json"), "--input",
        str(tmp_path / "ids.jsonl"), "--output", str(tmp_path / "back.jsonl"), "--no-progress")
    back = [json.loads(x)["text"] for x in (tmp_path / "back.jsonl").read_text().splitlines()]
    assert back == texts


def test_bad_inputs_are_named(tmp_path):
    train(tmp_path / "tokenizer.json", "qwen")
    (tmp_path / "in.jsonl").write_text('{"text": "ok"}\n{"txt": "no"}\n')
    r = run("tokenize", "--tokenizer", str(tmp_path / "tokenizer.json"), "--input", str(tmp_path / "in.jsonl"),
            "--output", str(tmp_path / "o.jsonl"), check=False)
    assert r.returncode == 2 and "in.jsonl:2: no \"text\" or \"messages\"" in r.stderr, r.stderr
    r = run("tokenize", "--tokenizer", str(tmp_path / "missing.json"), "--input", str(tmp_path / "in.jsonl"),
            "--output", str(tmp_path / "o.jsonl"), check=False)
    assert r.returncode == 2 and "tokenizer file not found" in r.stderr, r.stderr
    j = json.loads((tmp_path / "tokenizer.json").read_text())
    j["model"]["type"] = "Unigram"
    (tmp_path / "uni.json").write_text(json.dumps(j))
    r = run("tokenize", "--tokenizer", str(tmp_path / "uni.json"), "--input", str(tmp_path / "in.jsonl"),
            "--output", str(tmp_path / "o.jsonl"), check=False)
    assert r.returncode == 2 and "model type 'Unigram' is not supported" in r.stderr, r.stderr
