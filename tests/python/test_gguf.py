"""`musacoder-model convert --from-gguf` (src/model/gguf*.cc) against ggml's `gguf` package and
transformers' own GGUF loader, on GGUF files the tests write (tests/python/gguf_fixtures.py):
logits of tiny Qwen2 / Qwen3 models quantized to F32, F16, BF16, Q8_0, Q5_0 and Q4_0 equal
transformers' `from_pretrained(gguf_file=...)`; every dequantizer (the K-quants too) equals
`gguf.quants.dequantize` bit for bit on random blocks; the rebuilt tokenizer encodes as the
original tokenizer.json does; and bad files fail with errors that name the problem."""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")
from safetensors.numpy import load_file  # noqa: E402

import gguf_fixtures  # noqa: E402
import tiny_models  # noqa: E402
from gguf_fixtures import Q, gguf, quantize  # noqa: E402
from mc_cli import BINARY, HAS_MODEL, MODEL_BINARY, read_jsonl, write_jsonl  # noqa: E402
import mc_cli  # noqa: E402

pytestmark = pytest.mark.skipif(not HAS_MODEL, reason="musacoder-model not built (scripts/build.sh)")

TEMPLATE = ("{%- for message in messages %}{%- if loop.first and message.role != 'system' %}"
            "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
            "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
TEXTS = ["def forward(self, x):\n    return torch.relu(x) * 2\n",
         "__global__ void add(const float* a, float* out, int n) { int i = blockIdx.x; }\n",
         "<|im_start|>user\nWrite a kernel for softmax over rows.<|im_end|>\n<|im_start|>assistant\n",
         "naïve 東京 😀 <tool_call>{}</tool_call>  \n\n\t x=12345;", ""]


def convert(gguf_path, out, dtype="fp32", check=True):
    return mc_cli.run("convert", "--from-gguf", gguf_path, "--out", out, "--dtype", dtype, check=check,
                      binary=MODEL_BINARY)


def tiny(directory, arch, pad_rows=16, seed=0):
    """A tiny model (tiny_models.make_model) whose embedding has `pad_rows` more rows than the
    vocabulary (as Qwen's 151,936 rows for 151,665 tokens), with a non-special added token."""
    os.makedirs(directory, exist_ok=True)
    tok = tiny_models.make_tokenizer(os.path.join(directory, "tokenizer.json"))
    tok.add_tokens([tokenizers.AddedToken("<tool_call>", special=False, normalized=False),
                    tokenizers.AddedToken("</tool_call>", special=False, normalized=False)])
    tok.save(os.path.join(directory, "tokenizer.json"))
    # Qwen3 without attention biases, as Qwen3 checkpoints are (transformers' GGUF loader
    # drops them).
    model, _ = tiny_models.make_model(directory, arch, tie=arch == "qwen3", seed=seed,
                                      vocab=tok.get_vocab_size() + pad_rows, attention_bias=False)
    tok.save(os.path.join(directory, "tokenizer.json"))  # make_model wrote its own over it
    return model, tok


def quantized(model, qtype_of):
    return {n: quantize(p.detach().numpy(), qtype_of(n, p)) for n, p in model.state_dict().items()
            if not (model.config.tie_word_embeddings and n == "lm_head.weight")}


def weight_type(qtype):
    """2-D weights in `qtype`, norms and biases F32 (as llama.cpp quantizes)."""
    return lambda name, p: qtype if p.dim() == 2 else Q.F32


@pytest.mark.parametrize("arch,qtype", [("qwen2", Q.F32), ("qwen2", Q.F16), ("qwen2", Q.BF16), ("qwen2", Q.Q8_0),
                                        ("qwen2", Q.Q5_0), ("qwen2", Q.Q4_0), ("qwen3", Q.F32)])
def test_logits_equal_transformers_gguf_loader(tmp_path, arch, qtype):
    src = tmp_path / "src"
    model, _ = tiny(str(src), arch)
    f = gguf_fixtures.write(tmp_path / "m.gguf", model.config, quantized(model, weight_type(qtype)),
                            src / "tokenizer.json", arch=arch, chat_template=TEMPLATE)
    convert(f, str(tmp_path / "hf"))
    if arch == "qwen2":
        ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf", dtype=torch.float32)
    else:
        # transformers' GGUF loader ignores qwen3.attention.key_length (it gives Qwen3 its default
        # head_dim of 128), so for Qwen3 the reference is the original model, written as F32.
        ref = model
    ref.eval()
    seqs = [[5, 17, 33, 100, 7, 250, 3, 9], list(range(3, 60)), [ref.config.vocab_size - 1, 2]]
    inp = write_jsonl(tmp_path / "in.jsonl", [{"ids": s} for s in seqs])
    mc_cli.run("score", "--model", tmp_path / "hf", "--device", "cpu", "--input", inp, "--output",
               tmp_path / "out.jsonl", "--logits", tmp_path / "logits.safetensors")
    got = load_file(str(tmp_path / "logits.safetensors"))
    for i, s in enumerate(seqs):
        with torch.no_grad():
            want = ref(torch.tensor([s])).logits[0].numpy()
        np.testing.assert_allclose(got[f"logits.{i}"], want, atol=2e-5, rtol=1e-5)
    cfg = json.load(open(tmp_path / "hf" / "config.json"))
    assert cfg["vocab_size"] == ref.config.vocab_size == model.config.vocab_size
    assert cfg["tie_word_embeddings"] == (arch == "qwen3")
    # The folder loads in transformers too, to the same logits.
    again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32)
    with torch.no_grad():
        np.testing.assert_allclose(again(torch.tensor([seqs[0]])).logits[0].numpy(),
                                   ref(torch.tensor([seqs[0]])).logits[0].numpy(), atol=1e-6, rtol=1e-6)
    prov = json.load(open(tmp_path / "hf" / "gguf.json"))
    assert prov["general"]["general.name"] == "tiny test model" and prov["bytes"] == os.path.getsize(f)
    assert len(prov["sha256"]) == 64


# Where each type's fp16 scales sit in a block (set to finite values; the rest is random).
SCALES = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q2_K: [80, 82],
          Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}


def random_blocks(rng, qtype, shape):
    """Random bytes in `qtype`'s block layout for a float tensor of `shape` (rows last-dim)."""
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    if qtype in (Q.F16, Q.BF16):
        x = (rng.standard_normal((rows, cols)) * 2).astype(np.float32)
        x[0, :4] = [6e-8, -3e-5, 0.0, -0.0]  # fp16 subnormals and signed zeros
        return quantize(x, qtype)[0].reshape(*shape[:-1], -1)
    raw = rng.integers(0, 256, size=(rows * cols // block, nbytes), dtype=np.uint8)
    for off in SCALES[qtype]:
        scale = rng.standard_normal(raw.shape[0]).astype(np.float32) * 0.05
        scale[::7] *= 1e-4  # some subnormal fp16 scales
        raw[:, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(*shape[:-1], -1)


ALL_TYPES = [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.F16, Q.BF16]


def test_every_dequantizer_equals_gguf_bit_for_bit(tmp_path):
    # Rows of 256 values so that every tensor can hold K-quant super-blocks.
    cfg = transformers.Qwen2Config(vocab_size=416, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   rope_theta=10000.0, tie_word_embeddings=False)
    model = transformers.Qwen2ForCausalLM(cfg)
    tiny_models.make_tokenizer(str(tmp_path / "tokenizer.json"))
    rng = np.random.default_rng(0)
    tensors, kinds = {}, {}
    two_d = [n for n, p in model.state_dict().items() if p.dim() == 2]
    for n, p in model.state_dict().items():
        if p.dim() == 2:
            qtype = ALL_TYPES[two_d.index(n) % len(ALL_TYPES)]
            tensors[n] = (random_blocks(rng, qtype, list(p.shape)), qtype)
        else:
            qtype = Q.F32
            tensors[n] = (rng.standard_normal(p.shape).astype(np.float32), None)
        kinds[n] = qtype
    assert set(kinds.values()) >= set(ALL_TYPES)
    f = gguf_fixtures.write(tmp_path / "k.gguf", cfg, tensors, tmp_path / "tokenizer.json")
    convert(f, str(tmp_path / "fp32"))
    convert(f, str(tmp_path / "bf16"), dtype="bf16")
    got = load_file(str(tmp_path / "fp32" / "model.safetensors"))
    reader = gguf.GGUFReader(f)
    for t in reader.tensors:
        name = next(n for n in tensors if gguf_fixtures.gguf_name(n) == t.name)
        want = gguf.quants.dequantize(t.data, t.tensor_type).reshape(got[name].shape)
        assert got[name].view(np.uint32).tolist() == want.view(np.uint32).tolist(), (name, t.tensor_type.name)
    # bf16: the same values rounded as torch rounds float32 to bfloat16.
    from safetensors.torch import load_file as load_torch
    got16 = load_torch(str(tmp_path / "bf16" / "model.safetensors"))
    for name, v in got.items():
        assert torch.equal(got16[name], torch.from_numpy(v).to(torch.bfloat16)), name
    assert json.load(open(tmp_path / "bf16" / "config.json"))["dtype"] == "bfloat16"


def test_tokenizer_rebuilt_from_gguf_encodes_as_the_original(tmp_path):
    src = tmp_path / "src"
    model, tok = tiny(str(src), "qwen2")
    f = gguf_fixtures.write(tmp_path / "m.gguf", model.config, quantized(model, weight_type(Q.Q8_0)),
                            src / "tokenizer.json", chat_template=TEMPLATE)
    convert(f, str(tmp_path / "hf"))
    ours = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    texts = TEXTS + tiny_models.CORPUS[:3]
    for t in texts:
        assert ours.encode(t).ids == tok.encode(t).ids, t
        assert ours.decode(tok.encode(t).ids, skip_special_tokens=False) == tok.decode(tok.encode(t).ids,
                                                                                       skip_special_tokens=False)
    # Our C++ tokenizer reads the rebuilt file to the same ids.
    write_jsonl(tmp_path / "t.jsonl", [{"text": t} for t in texts])
    mc_cli.run("tokenize", "--tokenizer", tmp_path / "hf" / "tokenizer.json", "--input", tmp_path / "t.jsonl",
               "--output", tmp_path / "ids.jsonl", "--no-progress")
    assert [r["ids"] for r in read_jsonl(tmp_path / "ids.jsonl")] == [tok.encode(t).ids for t in texts]
    # Special tokens and the chat template, as transformers reads them from the folder.
    cfg = json.load(open(tmp_path / "hf" / "tokenizer_config.json"))
    assert cfg["chat_template"] == TEMPLATE and cfg["eos_token"] == "<|im_end|>" and cfg["pad_token"] == "<|endoftext|>"
    added = {v["content"]: v["special"] for v in cfg["added_tokens_decoder"].values()}
    assert added["<|im_start|>"] and not added["<tool_call>"]
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    msgs = [{"role": "user", "content": "Write relu."}]
    assert hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite relu.<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert hf.eos_token_id == tok.token_to_id("<|im_end|>")
    # Every command renders a conversation as the template does, its default system turn
    # included: prompts (tokenize, as generate and serve-model render them) and training rows
    # (tokenize --training, as train sft renders them).
    convs = [msgs, [{"role": "system", "content": "Be terse."}] + msgs]
    write_jsonl(tmp_path / "c.jsonl", [{"messages": m} for m in convs])
    mc_cli.run("tokenize", "--tokenizer", tmp_path / "hf" / "tokenizer.json", "--input", tmp_path / "c.jsonl",
               "--output", tmp_path / "c_ids.jsonl", "--no-progress")
    assert [r["ids"] for r in read_jsonl(tmp_path / "c_ids.jsonl")] == [
        list(hf.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False)) for m in convs]
    rows = [{"messages": m + [{"role": "assistant", "content": "def relu(x): return x.clamp(min=0)"}]} for m in convs]
    write_jsonl(tmp_path / "r.jsonl", rows)
    mc_cli.run("tokenize", "--training", "--tokenizer", tmp_path / "hf" / "tokenizer.json", "--input",
               tmp_path / "r.jsonl", "--output", tmp_path / "r_ids.jsonl", "--no-progress")
    for r, got in zip(rows, read_jsonl(tmp_path / "r_ids.jsonl")):
        assert got["ids"] == list(hf.apply_chat_template(r["messages"], tokenize=True, return_dict=False))
        answer = [i for i, m in zip(got["ids"], got["loss_mask"]) if m]
        assert hf.decode(answer) == "def relu(x): return x.clamp(min=0)<|im_end|>"
    gen = json.load(open(tmp_path / "hf" / "generation_config.json"))
    assert gen["eos_token_id"] == tok.token_to_id("<|im_end|>")


def test_bad_files_are_named(tmp_path):
    def fails(path, *needles):
        r = convert(path, str(tmp_path / "out"), check=False)
        assert r.returncode != 0, r.stderr
        for n in needles:
            assert n in r.stderr, r.stderr

    (tmp_path / "text.gguf").write_text("hello, not a model\n")
    fails(tmp_path / "text.gguf", "is not a GGUF file")
    fails(tmp_path / "missing.gguf", "cannot open", "missing.gguf")

    src = tmp_path / "src"
    model, _ = tiny(str(src), "qwen2")
    f = gguf_fixtures.write(tmp_path / "m.gguf", model.config, quantized(model, weight_type(Q.Q8_0)),
                            src / "tokenizer.json")
    blob = open(f, "rb").read()
    for cut, needle in ((len(blob) - 100, "ends past the file's end"), (200, "the header ends inside")):
        (tmp_path / "cut.gguf").write_bytes(blob[:cut])
        fails(tmp_path / "cut.gguf", "truncated", needle)

    llama = gguf_fixtures.write(tmp_path / "llama.gguf", model.config, quantized(model, weight_type(Q.Q8_0)),
                                src / "tokenizer.json", arch="llama")
    fails(llama, 'architecture "llama"', "not supported", "qwen2 and qwen3")

    # A tensor in a type the converter does not dequantize (an i-quant).
    t = quantized(model, weight_type(Q.Q8_0))
    shape = t["model.layers.0.mlp.up_proj.weight"][0].shape
    t["model.layers.0.mlp.up_proj.weight"] = (np.zeros((shape[0], 64 // 32 * 18), np.uint8), Q.IQ4_NL)
    iq = gguf_fixtures.write(tmp_path / "iq.gguf", model.config, t, src / "tokenizer.json")
    fails(iq, "blk.0.ffn_up.weight", "IQ4_NL", "cannot dequantize", "Q4_K")

    # Metadata that contradicts the tensors: the converted folder's check (the model loader, on
    # the meta device) names the tensor.
    import copy
    wrong = copy.deepcopy(model.config)
    wrong.intermediate_size = 100
    contra = gguf_fixtures.write(tmp_path / "contra.gguf", wrong, quantized(model, weight_type(Q.F32)),
                                 src / "tokenizer.json")
    fails(contra, "mlp.gate_proj.weight", "has shape [96, 64] but config.json implies [100, 64]")
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(tmp_path / "out.partial")

    bad_pre = gguf_fixtures.write(tmp_path / "pre.gguf", model.config, quantized(model, weight_type(Q.F32)),
                                  src / "tokenizer.json", pre="llama-bpe")
    fails(bad_pre, 'pre-tokenizer "llama-bpe"', "not supported")
    assert not os.path.exists(tmp_path / "out" / "model.safetensors")


def test_get_model_checks_what_it_is_given(tmp_path):
    """scripts/get-model.sh refuses an unknown name and a GGUF that is not the pinned file
    (size, then sha256), before converting anything."""
    import subprocess
    script = os.path.join(mc_cli.ROOT, "scripts", "get-model.sh")
    env = {**os.environ, "MODELS": str(tmp_path / "models"), "MUSACODER_MODEL_BINARY": MODEL_BINARY}
    r = subprocess.run(["bash", script, "qwen-unknown"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "usage: scripts/get-model.sh" in r.stderr, r.stderr
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 100)
    r = subprocess.run(["bash", script, "qwen2.5-coder-0.5b-instruct"], capture_output=True, text=True,
                       env={**env, "GGUF": str(fake)})
    assert r.returncode != 0 and "has 104 bytes, expected 491400064" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "models" / "qwen2.5-coder-0.5b-instruct")
