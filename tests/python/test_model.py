"""The policy-model stack (src/model, src/generate) against transformers on the CPU, with tiny
randomly initialised Qwen2 (untied, q/k/v biases) and Qwen3 (tied, q/k norms, head_dim !=
hidden/heads, attention biases) models made by the test: logits and log-probs, greedy
generation token for token, continuous batching, engine log-probs vs a forward pass, seeds,
top-k/top-p, stop strings, checkpoints we write loading in transformers, the OpenAI-compatible
server over plain HTTP, and clear errors for bad input."""
import json
import os
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

import tiny_models  # noqa: E402

import mc_cli  # noqa: E402
from mc_cli import BINARY, read_jsonl, write_jsonl  # noqa: E402
pytestmark = pytest.mark.skipif(not os.path.exists(BINARY), reason="musacoder not built (scripts/build.sh)")
if os.path.exists(BINARY) and "generate" not in subprocess.run([BINARY, "--help"], capture_output=True, text=True).stdout:
    pytestmark = pytest.mark.skip(reason="musacoder built without libtorch (MUSACODER_WITH_TORCH=OFF)")


def mc(*args, check=True, timeout=300, **kw):
    return mc_cli.run(*args, check=check, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    out = {}
    for arch, tie in (("qwen2", False), ("qwen3", True)):
        d = str(base / arch)
        model, tok = tiny_models.make_model(d, arch, tie=tie)
        out[arch] = (d, model, tok)
    return out


def hf_greedy(ref, prompt, new_tokens, eos=None):
    """transformers.generate, greedy, stopping only at `eos` (min_new_tokens would instead
    mask EOS out of the distribution, which is not what --ignore-eos does)."""
    saved = ref.generation_config.eos_token_id
    ref.generation_config.eos_token_id = eos
    try:
        with torch.no_grad():
            out = ref.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long), do_sample=False, max_new_tokens=new_tokens, pad_token_id=0)
    finally:
        ref.generation_config.eos_token_id = saved
    return out[0, len(prompt):].tolist()


def prompts_for(vocab, lengths=(5, 17, 40), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (L,), generator=g).tolist() for L in lengths]


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_logits_and_logprobs_match_transformers(models, arch, tmp_path):
    d, ref, _ = models[arch]
    seqs = prompts_for(ref.config.vocab_size, (2, 9, 64))
    inp = write_jsonl(tmp_path / "in.jsonl", [{"ids": s} for s in seqs])
    for temp in ("1", "0.7"):
        mc("score", "--model", d, "--device", "cpu", "--input", inp, "--output", str(tmp_path / "out.jsonl"),
           "--temperature", temp, "--logits", str(tmp_path / "logits.safetensors"))
        logits = load_file(str(tmp_path / "logits.safetensors"))
        for i, (s, row) in enumerate(zip(seqs, read_jsonl(tmp_path / "out.jsonl"))):
            with torch.no_grad():
                want = ref(torch.tensor([s])).logits[0]
            torch.testing.assert_close(logits[f"logits.{i}"], want, atol=1e-5, rtol=1e-5)
            lp = torch.log_softmax(want / float(temp), -1)[:-1].gather(-1, torch.tensor(s[1:])[:, None])[:, 0]
            torch.testing.assert_close(torch.tensor(row["logprobs"]), lp, atol=1e-5, rtol=1e-5)
            assert row["tokens"] == len(s) and abs(row["sum"] - lp.sum().item()) < 1e-3


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_greedy_generation_matches_transformers_generate(models, arch, tmp_path):
    d, ref, _ = models[arch]
    prompts = prompts_for(ref.config.vocab_size)
    pf = write_jsonl(tmp_path / "p.jsonl", [{"prompt_ids": p, "id": f"p{i}"} for i, p in enumerate(prompts)])
    mc("generate", "--model", d, "--device", "cpu", "--prompts", pf, "--temperature", "0", "--max-new-tokens", "40",
       "--ignore-eos", "--out", str(tmp_path / "g.jsonl"), "--no-progress")
    rows = read_jsonl(tmp_path / "g.jsonl")
    assert [r["id"] for r in rows] == ["p0", "p1", "p2"]
    for p, row in zip(prompts, rows):
        assert row["tokens"] == hf_greedy(ref, p, 40)
        assert row["finish_reason"] == "length" and len(row["logprobs"]) == 40
    # The other decode attention (SDPA instead of two GEMMs) decodes the same tokens.
    mc("generate", "--model", d, "--device", "cpu", "--prompts", pf, "--temperature", "0", "--max-new-tokens", "40",
       "--ignore-eos", "--decode-attention", "sdpa", "--out", str(tmp_path / "s.jsonl"), "--no-progress")
    assert [r["tokens"] for r in read_jsonl(tmp_path / "s.jsonl")] == [r["tokens"] for r in rows]


def test_continuous_batching_gives_the_same_tokens(models, tmp_path):
    """Two cache slots for 6 prompts x 2 samples, sequences finishing at different steps (a stop
    token), must give what one big batch gives: slots are freed and reused correctly."""
    d, ref, _ = models["qwen2"]
    prompts = prompts_for(ref.config.vocab_size, (3, 30, 8, 21, 5, 12), seed=4)
    pf = write_jsonl(tmp_path / "p.jsonl", [{"prompt_ids": p} for p in prompts])
    common = ["--model", d, "--device", "cpu", "--prompts", pf, "--temperature", "0.9", "--seed", "5", "--n", "2",
              "--max-new-tokens", "30", "--ignore-eos", "--no-progress"]
    # A stop token that the big batch actually samples somewhere mid-sequence.
    mc("generate", *common, "--max-batch", "64", "--out", str(tmp_path / "probe.jsonl"))
    stop = read_jsonl(tmp_path / "probe.jsonl")[1]["tokens"][10]
    mc("generate", *common, "--stop-token-id", str(stop), "--max-batch", "64", "--out", str(tmp_path / "big.jsonl"),
       "--stats", str(tmp_path / "big-stats.json"))
    mc("generate", *common, "--stop-token-id", str(stop), "--max-batch", "2", "--out", str(tmp_path / "small.jsonl"))
    # Sequences left running in high slots move down as others finish (slot_moves), the same tokens.
    big, small = read_jsonl(tmp_path / "big.jsonl"), read_jsonl(tmp_path / "small.jsonl")
    assert [r["tokens"] for r in big] == [r["tokens"] for r in small]
    assert json.load(open(tmp_path / "big-stats.json"))["slot_moves"] > 0
    lengths = {len(r["tokens"]) for r in big}
    assert len(lengths) > 1, "sequences should finish at different steps"
    assert any(r["finish_reason"] == "stop" and r["tokens"][-1] == stop for r in big)


def test_held_admissions_give_the_same_tokens(models, tmp_path):
    """Requests that reach the engine one at a time while others decode (--arrive-every, as RL's
    pipelined turns ask for answers) are held until three can be prefilled in one call
    (--admit-together), for at most four steps: fewer prefill calls, the same tokens as one big
    batch, since a sequence's sampling depends on its seed and position, not on when it starts."""
    d, ref, _ = models["qwen2"]
    prompts = prompts_for(ref.config.vocab_size, (3, 30, 8, 21, 5, 12), seed=6)
    pf = write_jsonl(tmp_path / "p.jsonl", [{"prompt_ids": p} for p in prompts])
    common = ["--model", d, "--device", "cpu", "--prompts", pf, "--temperature", "0.9", "--seed", "7", "--n", "2",
              "--max-new-tokens", "30", "--ignore-eos", "--no-progress"]
    runs = {"all": [], "arriving": ["--arrive-every", "2"],
            "held": ["--arrive-every", "2", "--admit-together", "3", "--admit-wait-steps", "4"]}
    for name, extra in runs.items():
        mc("generate", *common, *extra, "--out", str(tmp_path / f"{name}.jsonl"), "--stats", str(tmp_path / f"{name}.json"))
    tokens = {name: [r["tokens"] for r in read_jsonl(tmp_path / f"{name}.jsonl")] for name in runs}
    assert tokens["arriving"] == tokens["all"] and tokens["held"] == tokens["all"]
    stats = {name: json.load(open(tmp_path / f"{name}.json")) for name in runs}
    assert all(s["prefill_wall_ms_total"] > 0 for s in stats.values())
    # Arrivals at steps 0, 2, ..., 10: the first at once (nothing runs), then 1-3 and 4-5 together.
    assert stats["arriving"]["prefill_calls"] == 6 and stats["arriving"]["admissions_held"] == 0
    assert stats["held"]["prefill_calls"] == 3 and stats["held"]["admissions_held"] == 8, stats["held"]
    r = mc("generate", *common, "--admit-together", "0", check=False)
    assert r.returncode != 0 and "--admit-together" in r.stderr


def test_loops_stop_early(models, tmp_path):
    """--stop-loops W ends a sequence once its last W tokens are one block of at most W/4 tokens
    repeated (finish_reason "loop"), keeping what it had sampled; a longer block is left alone.
    The model is rewired so that greedy decoding walks a permutation of the vocabulary: layers
    silenced, the head's row for sigma(t) = token t's embedding. Tokens 10..14 form a 5-cycle,
    tokens 20..59 a 40-cycle."""
    d, _, _ = models["qwen2"]
    w = load_file(os.path.join(d, "model.safetensors"))
    for k in w:
        if k.endswith("o_proj.weight") or k.endswith("down_proj.weight"):
            w[k] = torch.zeros_like(w[k])
    w["model.norm.weight"] = torch.ones_like(w["model.norm.weight"])
    emb = w["model.embed_tokens.weight"]
    sigma = {t: t + 1 for t in range(emb.shape[0])}
    sigma.update({14: 10, 59: 20})
    head = torch.zeros_like(w["lm_head.weight"])
    for t, nxt in sigma.items():
        if nxt < emb.shape[0]:
            head[nxt] = 8 * emb[t] / emb[t].norm()
    w["lm_head.weight"] = head
    loop_dir = tmp_path / "loop"
    shutil.copytree(d, loop_dir)
    save_file(w, str(loop_dir / "model.safetensors"), metadata={"format": "pt"})
    pf = write_jsonl(tmp_path / "p.jsonl", [{"prompt_ids": [3, 4, 10]}, {"prompt_ids": [5, 20]}])
    common = ["--model", str(loop_dir), "--device", "cpu", "--prompts", pf, "--temperature", "0", "--max-new-tokens", "200",
              "--ignore-eos", "--no-progress"]
    mc("generate", *common, "--out", str(tmp_path / "full.jsonl"))
    mc("generate", *common, "--stop-loops", "128", "--out", str(tmp_path / "stopped.jsonl"))
    full, stopped = read_jsonl(tmp_path / "full.jsonl"), read_jsonl(tmp_path / "stopped.jsonl")
    assert full[0]["tokens"][:10] == [11, 12, 13, 14, 10, 11, 12, 13, 14, 10], "the rewired model should walk its 5-cycle"
    assert full[1]["tokens"][:3] == [21, 22, 23] and full[1]["tokens"][39:41] == [20, 21]
    assert [r["finish_reason"] for r in full] == ["length", "length"]
    # The 5-cycle fills the 128-token window at 128 tokens: stopped there, its tokens those it sampled.
    assert stopped[0]["finish_reason"] == "loop" and len(stopped[0]["tokens"]) == 128
    assert stopped[0]["tokens"] == full[0]["tokens"][:128]
    # A 40-token block is longer than 128 / 4: not a loop by this rule.
    assert stopped[1] == full[1]
    r = mc("generate", *common, "--stop-loops", "8", check=False)
    assert r.returncode == 2 and "loop_window must be 0 (off) or >= 16 tokens, got 8" in r.stderr


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_engine_logprobs_equal_a_forward_pass(models, arch, tmp_path):
    d, ref, _ = models[arch]
    prompts = prompts_for(ref.config.vocab_size, (6, 19))
    pf = write_jsonl(tmp_path / "p.jsonl", [{"prompt_ids": p} for p in prompts])
    mc("generate", "--model", d, "--device", "cpu", "--prompts", pf, "--temperature", "0.8", "--n", "3", "--seed", "1",
       "--max-new-tokens", "25", "--ignore-eos", "--out", str(tmp_path / "s.jsonl"), "--no-progress")
    rows = read_jsonl(tmp_path / "s.jsonl")
    assert len(rows) == 6 and len({tuple(r["tokens"]) for r in rows}) > 1, "samples of one prompt should differ"
    full = [prompts[r["index"]] + r["tokens"] for r in rows]
    mc("score", "--model", d, "--device", "cpu", "--temperature", "0.8", "--input",
       write_jsonl(tmp_path / "full.jsonl", [{"ids": f} for f in full]), "--output", str(tmp_path / "sc.jsonl"))
    for row, seq, sc in zip(rows, full, read_jsonl(tmp_path / "sc.jsonl")):
        n0 = len(prompts[row["index"]])
        with torch.no_grad():
            lp = torch.log_softmax(ref(torch.tensor([seq])).logits[0] / 0.8, -1)
        want = lp[n0 - 1:-1].gather(-1, torch.tensor(row["tokens"])[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(row["logprobs"]), want, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(torch.tensor(row["logprobs"]), torch.tensor(sc["logprobs"][n0 - 1:]), atol=2e-5, rtol=1e-5)


def test_seeds_top_k_top_p(models, tmp_path):
    d, ref, _ = models["qwen3"]
    pf = write_jsonl(tmp_path / "p.jsonl", [{"prompt_ids": p} for p in prompts_for(ref.config.vocab_size, (8,))])

    def gen(*extra):
        out = tmp_path / "o.jsonl"
        mc("generate", "--model", d, "--device", "cpu", "--prompts", pf, "--max-new-tokens", "30", "--ignore-eos",
           "--n", "2", "--out", str(out), "--no-progress", *extra)
        return [r["tokens"] for r in read_jsonl(out)]

    a, b, c = gen("--seed", "7"), gen("--seed", "7"), gen("--seed", "8")
    assert a == b and a != c
    greedy = gen("--temperature", "0")
    assert gen("--seed", "3", "--top-k", "1") == greedy
    assert gen("--seed", "3", "--top-p", "0.0001") == greedy
    # top-k 5: every sampled token is among the 5 most likely at its step.
    toks = gen("--seed", "9", "--top-k", "5", "--temperature", "1.5")[0]
    p = read_jsonl(pf)[0]["prompt_ids"]
    with torch.no_grad():
        logits = ref(torch.tensor([p + toks])).logits[0, len(p) - 1:-1]
    top5 = logits.topk(5, -1).indices
    assert all(t in top5[i].tolist() for i, t in enumerate(toks))


def test_answers_stop_at_the_models_context(models, tmp_path):
    """A prompt near the model's context (256 positions here; a late turn of a long conversation)
    gets the room that is left, the same tokens as transformers' greedy decode; one that fills
    the context gets an empty answer, and neither fails the other prompts."""
    d, ref, _ = models["qwen2"]
    ps = prompts_for(ref.config.vocab_size, (10, 240, 256), seed=4)
    out = tmp_path / "g.jsonl"
    r = mc("generate", "--model", d, "--device", "cpu", "--prompts", write_jsonl(tmp_path / "p.jsonl",
           [{"prompt_ids": p} for p in ps]), "--temperature", "0", "--max-new-tokens", "100", "--ignore-eos",
           "--out", str(out), "--no-progress")
    assert "1 prompt(s) leave fewer than --max-new-tokens 100" in r.stderr and "1 fill it" in r.stderr, r.stderr
    rows = {row["index"]: row for row in read_jsonl(out)}
    assert len(rows[0]["tokens"]) == 100 and rows[0]["finish_reason"] == "length"
    assert rows[1]["tokens"] == hf_greedy(ref, ps[1], 16) and rows[1]["finish_reason"] == "length"
    assert rows[2]["tokens"] == [] and rows[2]["finish_reason"] == "context_full"


def test_eos_from_generation_config(models, tmp_path):
    """A model stops at every EOS id of config.json and generation_config.json."""
    d, ref, _ = models["qwen2"]
    p = prompts_for(ref.config.vocab_size, (9,), seed=6)[0]
    greedy = hf_greedy(ref, p, 30)
    stop = greedy[12]
    v = tmp_path / "m"
    v.mkdir()
    for f in os.listdir(d):
        os.symlink(os.path.join(d, f), v / f) if f != "generation_config.json" else None
    json.dump({"eos_token_id": [999999, stop]}, open(v / "generation_config.json", "w"))
    out = tmp_path / "g.jsonl"
    mc("generate", "--model", str(v), "--device", "cpu", "--prompts", write_jsonl(tmp_path / "p.jsonl", [{"prompt_ids": p}]),
       "--temperature", "0", "--max-new-tokens", "30", "--out", str(out), "--no-progress")
    row = read_jsonl(out)[0]
    k = greedy.index(stop)
    assert row["tokens"] == greedy[:k + 1] and row["finish_reason"] == "stop"


def test_text_prompts_chat_and_stop_strings(models, tmp_path):
    d, ref, tok = models["qwen2"]
    out = tmp_path / "t.jsonl"
    mc("generate", "--model", d, "--device", "cpu", "--prompt", "def forward(self, x):", "--temperature", "0",
       "--max-new-tokens", "40", "--ignore-eos", "--out", str(out), "--no-progress")
    row = read_jsonl(out)[0]
    assert row["text"] == tok.decode(row["tokens"], skip_special_tokens=False)
    text = row["text"]
    # A stop string (ASCII: a random model's text has broken UTF-8 between tokens) from the
    # second half of the text: generation ends before its first occurrence.
    stop = re.search(r"[A-Za-z]{3}", text[len(text) // 3:]).group(0)
    mc("generate", "--model", d, "--device", "cpu", "--prompt", "def forward(self, x):", "--temperature", "0",
       "--max-new-tokens", "40", "--ignore-eos", "--stop", stop, "--out", str(out), "--no-progress")
    row = read_jsonl(out)[0]
    assert row["finish_reason"] == "stop" and row["text"] == text[: text.find(stop)]
    # --chat wraps the prompt in ChatML.
    mc("generate", "--model", d, "--device", "cpu", "--prompt", "hi", "--chat", "--temperature", "0",
       "--max-new-tokens", "5", "--out", str(out), "--no-progress")
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n").ids
    assert read_jsonl(out)[0]["tokens"] == hf_greedy(ref, ids, 5, eos=tok.token_to_id("<|im_end|>"))


@pytest.mark.parametrize("dtype,shard", [("fp32", None), ("bf16", None), ("fp32", "0.00005")])
def test_checkpoints_we_write_load_in_transformers(models, tmp_path, dtype, shard):
    d, ref, _ = models["qwen3"]
    dst = str(tmp_path / "conv")
    mc("convert", "--model", d, "--out", dst, "--dtype", dtype, *(["--max-shard-gb", shard] if shard else []))
    if shard:
        index = json.load(open(os.path.join(dst, "model.safetensors.index.json")))
        assert len(set(index["weight_map"].values())) > 1
    assert os.path.exists(os.path.join(dst, "tokenizer.json"))
    tdtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    loaded = transformers.AutoModelForCausalLM.from_pretrained(dst, dtype=tdtype).eval()
    orig = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=tdtype).eval()
    ids = torch.tensor([prompts_for(ref.config.vocab_size, (20,))[0]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, orig(ids).logits)
    # And we read our own (sharded) output back with the same results.
    inp = write_jsonl(tmp_path / "in.jsonl", [{"ids": ids[0].tolist()}])
    mc("score", "--model", dst, "--device", "cpu", "--dtype", dtype, "--input", inp, "--output", str(tmp_path / "a.jsonl"))
    mc("score", "--model", d, "--device", "cpu", "--dtype", dtype, "--input", inp, "--output", str(tmp_path / "b.jsonl"))
    assert read_jsonl(tmp_path / "a.jsonl") == read_jsonl(tmp_path / "b.jsonl")


def test_clear_errors(models, tmp_path):
    d, ref, _ = models["qwen2"]
    inp = write_jsonl(tmp_path / "in.jsonl", [{"ids": [1, 2, 3]}])
    r = mc("score", "--model", str(tmp_path / "nope"), "--input", inp, "--output", str(tmp_path / "o"), check=False)
    assert r.returncode == 2 and "does not exist" in r.stderr

    def variant(name, edit_config=None, edit_weights=None):
        v = tmp_path / name
        v.mkdir()
        cfg = json.load(open(os.path.join(d, "config.json")))
        if edit_config:
            edit_config(cfg)
        json.dump(cfg, open(v / "config.json", "w"))
        w = load_file(os.path.join(d, "model.safetensors"))
        if edit_weights:
            edit_weights(w)
        save_file(w, str(v / "model.safetensors"), metadata={"format": "pt"})
        return str(v)

    cases = [
        (variant("arch", lambda c: c.update(architectures=["GPT2LMHeadModel"])), "unsupported architecture \"GPT2LMHeadModel\""),
        (variant("shape", lambda c: c.update(intermediate_size=100)), "has shape [96, 64] but config.json implies [100, 64]"),
        (variant("missing", edit_weights=lambda w: w.pop("model.layers.1.mlp.down_proj.weight")),
         "no tensor \"model.layers.1.mlp.down_proj.weight\""),
        (variant("rope", lambda c: c.update(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4})), "unsupported RoPE scaling \"yarn\""),
    ]
    for model_dir, message in cases:
        r = mc("score", "--model", model_dir, "--device", "cpu", "--input", inp, "--output", str(tmp_path / "o"), check=False)
        assert r.returncode == 2 and message in r.stderr, r.stderr
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"ids": [1, 2, 99999]}])
    r = mc("score", "--model", d, "--device", "cpu", "--input", bad, "--output", str(tmp_path / "o"), check=False)
    assert r.returncode == 2 and "99999 is outside the vocabulary" in r.stderr
    r = mc("generate", "--model", d, "--device", "cpu", "--prompt", "x" * 50, "--max-new-tokens", "300",
           "--max-seq-len", "64", check=False)
    assert r.returncode == 2 and "exceeds the engine's max sequence length (64)" in r.stderr
    (tmp_path / "notjson.jsonl").write_text('{"prompt_ids": [1, 2]}\n{oops\n')
    r = mc("generate", "--model", d, "--device", "cpu", "--prompts", str(tmp_path / "notjson.jsonl"), check=False)
    assert r.returncode == 2 and "notjson.jsonl:2: not JSON" in r.stderr


@pytest.fixture(scope="module")
def server(models):
    d, ref, tok = models["qwen2"]
    p = subprocess.Popen([BINARY, "serve-model", "--model", d, "--device", "cpu", "--port", "0", "--max-seq-len", "256",
                          "--served-model-name", "tiny"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
    assert m, f"no address in {line!r}: {p.stderr.read() if p.poll() is not None else ''}"
    yield f"http://127.0.0.1:{m.group(1)}", d, ref, tok
    p.terminate()
    assert p.wait(timeout=30) == 0


def post(url, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_server_completions_match_generate(server, tmp_path):
    url, d, ref, tok = server
    status, body = post(url + "/v1/completions", {"model": "tiny", "prompt": "def forward(self, x):", "max_tokens": 20,
                                                  "temperature": 0, "logprobs": 1, "ignore_eos": True})
    assert status == 200, body
    choice = body["choices"][0]
    mc("generate", "--model", d, "--device", "cpu", "--prompt", "def forward(self, x):", "--temperature", "0",
       "--max-new-tokens", "20", "--ignore-eos", "--out", str(tmp_path / "g.jsonl"), "--no-progress")
    want = read_jsonl(tmp_path / "g.jsonl")[0]
    assert choice["text"] == want["text"] and choice["token_ids"] == want["tokens"]
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(want["logprobs"], abs=1e-5)
    assert body["usage"]["completion_tokens"] == 20 and body["object"] == "text_completion"
    with urllib.request.urlopen(url + "/v1/models") as r:
        assert json.loads(r.read())["data"][0]["id"] == "tiny"


def test_server_chat_n_seed_and_concurrency(server):
    url, d, ref, tok = server
    req = {"model": "tiny", "messages": [{"role": "system", "content": "You write CUDA."},
                                         {"role": "user", "content": "softmax kernel"}],
           "n": 3, "temperature": 1.0, "seed": 42, "max_tokens": 12, "logprobs": True}
    status, a = post(url + "/v1/chat/completions", req)
    assert status == 200, a
    assert len(a["choices"]) == 3 and a["object"] == "chat.completion"
    assert all(c["message"]["role"] == "assistant" for c in a["choices"])
    assert all(len(c["logprobs"]["content"]) == len(c["token_ids"]) for c in a["choices"])
    _, b = post(url + "/v1/chat/completions", req)
    assert [c["token_ids"] for c in a["choices"]] == [c["token_ids"] for c in b["choices"]]
    # Many clients at once: every request answered, each as if alone (same seed, same tokens).
    results = [None] * 8

    def one(i):
        results[i] = post(url + "/v1/chat/completions", req)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(s == 200 and [c["token_ids"] for c in r["choices"]] == [c["token_ids"] for c in a["choices"]]
               for s, r in results)


def test_server_rejects_malformed_requests(server):
    url = server[0]
    cases = [
        (None, b"{not json", "not JSON"),
        ({"messages": []}, None, "non-empty list"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, None, "temperature must be >= 0"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}, None, "\"max_tokens\" has the wrong type"),
        ({"messages": [{"role": "user", "content": "x"}], "stream": True}, None, "stream"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}, None, "exceeds the engine's max sequence length"),
        # Our extension (--stop-loops of generate): read, and checked like the rest.
        ({"messages": [{"role": "user", "content": "x"}], "loop_window": 8}, None, "loop_window must be 0 (off) or >= 16"),
    ]
    for body, raw, message in cases:
        status, resp = post(url + "/v1/chat/completions", body, raw=raw)
        assert status == 400 and message in resp["error"]["message"], resp
    status, resp = post(url + "/v1/completions", {"max_tokens": 3})
    assert status == 400 and "prompt" in resp["error"]["message"]
    # The server is still healthy afterwards.
    status, _ = post(url + "/v1/completions", {"prompt": "x", "max_tokens": 2})
    assert status == 200
