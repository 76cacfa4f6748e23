"""SFT throughput and memory: `musacoder train sft` against a plain PyTorch + transformers loop
on the same model, data and batch, in the same run (the anchor of issue 14).

The model has Qwen2-0.5B's shape (24 layers, hidden 896, 14 heads / 2 KV heads, MLP 4864, vocab
151936, tied embeddings, q/k/v biases) with random weights: no pretrained model can be fetched
here, and throughput and memory do not depend on the values. The data is chat rows of code-like
text whose total is one step's tokens, so every step of either side is the whole dataset: the
per-step losses are then comparable too (bf16 noise), not only the speed.

PyTorch side: transformers' Qwen2ForCausalLM in bf16 with SDPA attention, torch.optim.AdamW
(fused=True) on the bf16 parameters, clip_grad_norm_, gradient accumulation over micro-batches
of length-sorted, right-padded rows (at most --micro-batch-tokens padded tokens each), loss
summed over target tokens and divided by their count per step. Tokens/s counts real tokens.

usage: python3 bench/sft_bench.py --musacoder BIN --out DIR [--steps 10] [--tokens-per-step 65536]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from bpe_fixtures import train_bpe  # noqa: E402
from chatml_reference import render  # noqa: E402

WORDS = ("def forward self return torch relu kernel float void add softmax rows Write fast CUDA kernels __global__ int "
         "blockIdx threadIdx blockDim const float* out in n for if else while shared sync warp reduce max sum exp "
         "x y z i j k tile load store half bf16 matmul conv stride pad batch").split()


def make_data(path, tok_path, tokens_per_step, max_len, seed=0, tok=None, system=None):
    """Rows whose total is one step's tokens; `tok` (a real model's tokenizer) or one trained here.
    `system`: a system turn every row starts with (a real model's default one, so that both sides
    render the same text: our trainer adds it to rows without one, chatml_reference does not)."""
    g = torch.Generator().manual_seed(seed)

    def text(k):
        return " ".join(WORDS[i] for i in torch.randint(0, len(WORDS), (k,), generator=g).tolist())
    corpus = [text(200) for _ in range(200)]
    if tok is None:
        tok = train_bpe(tok_path, corpus, "qwen", vocab_size=2000)
    rows, total = [], 0
    while True:
        n_prompt = int(torch.randint(100, 500, (1,), generator=g))
        n_answer = int(torch.randint(150, max_len // 2 - 100, (1,), generator=g))
        row = {"messages": [{"role": "user", "content": text(n_prompt)}, {"role": "assistant", "content": text(n_answer)}]}
        if system:
            row["messages"].insert(0, {"role": "system", "content": system})
        ids, _ = render(tok, row)
        if len(ids) > max_len:
            continue
        if total + len(ids) > tokens_per_step:
            break
        rows.append(row)
        total += len(ids)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return tok, rows, total


def make_model(directory, tok):
    import transformers
    cfg = transformers.Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                                   rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                   eos_token_id=tok.token_to_id("<|im_end|>"))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(directory)
    os.replace(os.path.join(directory, "..", "tokenizer.json"), os.path.join(directory, "tokenizer.json"))
    n = sum(p.numel() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return cfg, n


def step_flops(cfg, tokens, loss_tokens, pairs):
    """The same model-FLOP count as src/train/sft.cc: matrices 6/token, LM head at targets, attention."""
    q = cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads)
    kv = cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    layer = cfg.hidden_size * (q + 2 * kv) + q * cfg.hidden_size + 3 * cfg.hidden_size * cfg.intermediate_size
    return (6 * layer * cfg.num_hidden_layers * tokens + 6 * cfg.vocab_size * cfg.hidden_size * loss_tokens
            + 12 * q * cfg.num_hidden_layers * pairs)


def pytorch_loop(model_dir, examples, steps, lr, micro_tokens, clip):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=True)
    # Length-sorted micro-batches of right-padded rows.
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i][0]))
    batches, cur = [], []
    for i in order:
        L = len(examples[cur[0]][0]) if cur else len(examples[i][0])
        if cur and (len(cur) + 1) * L > micro_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    batches.append(cur)
    tensors = []
    for b in batches:
        L = max(len(examples[i][0]) for i in b)
        ids = torch.zeros(len(b), L, dtype=torch.long)
        att = torch.zeros(len(b), L, dtype=torch.long)
        lab = torch.full((len(b), L), -100, dtype=torch.long)
        for r, i in enumerate(b):
            x, m = examples[i]
            ids[r, :len(x)] = torch.tensor(x)
            att[r, :len(x)] = 1
            for t in range(1, len(x)):
                if m[t]:
                    lab[r, t - 1] = x[t]
        tensors.append((ids.cuda(), att.cuda(), lab.cuda()))
    targets = sum(int((lab != -100).sum()) for _, _, lab in tensors)
    tokens = sum(len(x) for x, _ in examples)
    torch.cuda.reset_peak_memory_stats()
    rows = []
    for s in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device="cuda", dtype=torch.float32)
        for ids, att, lab in tensors:
            logits = model(input_ids=ids, attention_mask=att).logits
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), lab.view(-1),
                                                     ignore_index=-100, reduction="sum")
            (loss / targets).backward()
            loss_sum += loss.detach()
            del logits, loss
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        loss_v = loss_sum.item() / targets
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        rows.append({"step": s + 1, "loss": loss_v, "grad_norm": float(gn), "step_s": dt, "tokens_per_s": tokens / dt,
                     "peak_alloc_gib": torch.cuda.max_memory_allocated() / 2**30,
                     "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30})
        print(f"pytorch step {s + 1}: loss {loss_v:.4f} {tokens / dt:.0f} tok/s", flush=True)
    pad_tokens = sum(ids.numel() for ids, _, _ in tensors)
    return rows, {"micro_batches": len(tensors), "padded_tokens": pad_tokens, "tokens": tokens, "targets": targets}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--model", help="a real model folder (e.g. models/qwen2.5-coder-1.5b-instruct; its tokenizer "
                    "renders the data) instead of the random Qwen2-0.5B-shaped one")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "work")
    os.makedirs(os.path.join(work, "model"), exist_ok=True)
    if a.model:
        import tokenizers
        import transformers
        real = tokenizers.Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
        import re
        tmpl = json.load(open(os.path.join(a.model, "tokenizer_config.json"))).get("chat_template", "")
        m = re.search(r"<\|im_start\|>system\\n([^'\"<]+)<\|im_end\|>", tmpl)
        tok, rows, total = make_data(os.path.join(work, "data.jsonl"), None, a.tokens_per_step, a.max_len, tok=real,
                                     system=m.group(1) if m else None)
        cfg = transformers.AutoConfig.from_pretrained(a.model)
        from safetensors import safe_open
        with safe_open(os.path.join(a.model, "model.safetensors"), "pt") as f:
            nparams = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
        model_dir = a.model
    else:
        tok, rows, total = make_data(os.path.join(work, "data.jsonl"), os.path.join(work, "tokenizer.json"),
                                     a.tokens_per_step, a.max_len)
        cfg, nparams = make_model(os.path.join(work, "model"), tok)
        model_dir = os.path.join(work, "model")
    examples = [render(tok, r) for r in rows]
    targets = sum(sum(m[1:]) for _, m in examples)
    pairs = sum(len(x) * (len(x) + 1) / 2 for x, _ in examples)
    print(f"model: {a.model or 'Qwen2-0.5B shape, random'}, {nparams / 1e6:.0f}M parameters; data: {len(rows)} rows, {total} tokens, {targets} targets",
          flush=True)

    env = dict(os.environ)
    cmd = [a.musacoder, "train", "sft", "--model", model_dir, "--data", os.path.join(work, "data.jsonl"),
           "--out", os.path.join(work, "ours"), "--max-steps", str(a.steps), "--tokens-per-step", str(a.tokens_per_step),
           "--micro-batch-tokens", str(a.micro_batch_tokens), "--max-len", str(a.max_len), "--lr", str(a.lr),
           "--schedule", "constant", "--grad-clip", "1.0", "--no-progress"]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    print(r.stderr[-2000:], flush=True)
    if r.returncode != 0:
        sys.exit(f"musacoder train sft failed ({r.returncode})")
    ours = [json.loads(line) for line in open(os.path.join(work, "ours", "metrics.jsonl")) if '"train"' in line]
    ours_wall = time.time() - t0
    theirs, info = pytorch_loop(model_dir, examples, a.steps, a.lr, a.micro_batch_tokens, 1.0)

    def summary(rs):
        warm = rs[2:] if len(rs) > 3 else rs
        tps = statistics.median(x["tokens_per_s"] for x in warm)
        step_s = statistics.median(x["step_s"] for x in warm)
        return {"tokens_per_s": tps, "step_s": step_s, "mfu": step_flops(cfg, total, targets, pairs) / step_s / 989e12,
                "peak_alloc_gib": max(x.get("peak_alloc_gib", 0) for x in rs),
                "peak_reserved_gib": max(x.get("peak_reserved_gib", 0) for x in rs),
                "losses": [x["loss"] for x in rs]}
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "model": a.model or "random 0.5B shape",
           "params": nparams, "rows": len(rows),
           "tokens_per_step": total, "targets_per_step": targets, "micro_batch_tokens": a.micro_batch_tokens, "steps": a.steps,
           "musacoder": summary(ours), "pytorch": summary(theirs), "pytorch_batches": info, "musacoder_wall_s": ours_wall}
    res["speedup"] = res["musacoder"]["tokens_per_s"] / res["pytorch"]["tokens_per_s"]
    res["memory_ratio"] = res["musacoder"]["peak_alloc_gib"] / res["pytorch"]["peak_alloc_gib"]
    res["max_loss_diff"] = max(abs(x - y) for x, y in zip(res["musacoder"]["losses"], res["pytorch"]["losses"]))
    with open(os.path.join(a.out, "sft_bench.json"), "w") as f:
        json.dump(res, f, indent=2)
    m, p = res["musacoder"], res["pytorch"]
    print(f"\n{'':<12}{'tokens/s':>12}{'step s':>9}{'MFU':>7}{'peak alloc GiB':>16}{'reserved GiB':>14}")
    for name, x in (("musacoder", m), ("pytorch", p)):
        print(f"{name:<12}{x['tokens_per_s']:>12.0f}{x['step_s']:>9.3f}{x['mfu']:>7.1%}{x['peak_alloc_gib']:>16.2f}{x['peak_reserved_gib']:>14.2f}")
    print(f"speedup {res['speedup']:.2f}x, memory {res['memory_ratio']:.2f}x, max |loss diff| over {a.steps} steps "
          f"{res['max_loss_diff']:.4f} (losses: ours {m['losses'][0]:.4f}->{m['losses'][-1]:.4f}, "
          f"pytorch {p['losses'][0]:.4f}->{p['losses'][-1]:.4f})")


if __name__ == "__main__":
    main()
