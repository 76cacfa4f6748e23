"""A real checkpoint converted by `musacoder-model convert --from-gguf` (scripts/get-model.sh)
against transformers in the same run, on KernelBench's own text:

  tokenizer  our ids (`musacoder tokenize`) = HF tokenizers' on our tokenizer.json = transformers'
             own tokenizer built from the GGUF (`gguf_file=`), on every KernelBench level 1-3
             problem file and on the model's greedy answers;
  chat       KernelBench's one-shot prompt as a user turn, rendered by our chat format (the
             model's default system turn included) = transformers' apply_chat_template, ids;
  weights    transformers loading our folder = transformers loading the GGUF itself (fp32);
  logits     ours (`score --logits`) against transformers on the same prompts: fp32 tightly, and
             bf16 no further from the fp32 truth than transformers' own bf16 run is;
  greedy     `generate --temperature 0` = transformers.generate, token for token, in fp32 (and
             how far bf16 runs agree, reported).

Prints a table, writes JSON to --out; exit 1 on any failure.
usage: python3 tests/gpu/real_model_parity.py --musacoder BIN --model DIR --gguf FILE
           --kernelbench KernelBench/ --out DIR [--device cuda] [--prompts 8] [--new-tokens 256]"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
ROWS = []


def check(name, ok, detail):
    ROWS.append({"check": name, "ok": bool(ok), "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)


def mc(a, *args):
    r = subprocess.run([a.musacoder, *map(str, args)], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"musacoder {args[0]} failed ({r.returncode}): {r.stderr[-3000:]}")
    return r


def jsonl(path, rows=None):
    if rows is None:
        return [json.loads(x) for x in open(path) if x.strip()]
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


def kernelbench_prompt(kb_root, ref):
    """KernelBench's own one-shot CUDA prompt (its prompt_constructor_toml), from its checkout."""
    from kernelbench_ref import load_kernelbench_module
    pc = load_kernelbench_module(kb_root, "prompt_constructor_toml")
    return pc.get_prompt_for_backend(ref, backend="cuda", option="one_shot", precision="fp32")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True, help="musacoder (musacoder-model beside it)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--kernelbench", required=True, help="KernelBench/ (level1..3 folders)")
    ap.add_argument("--kb-root", default=None, help="the checkout holding src/kernelbench (default: .kb, "
                    "scripts/get-kernelbench.sh's layout)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    kb_root = a.kb_root or os.path.join(os.path.dirname(os.path.abspath(a.kernelbench)), "..")
    t0 = time.time()

    files = sorted(glob.glob(os.path.join(a.kernelbench, "level[123]", "*.py")))
    texts = [open(f).read() for f in files]
    ours_tok = __import__("tokenizers").Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    hf_gguf_tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(a.gguf)),
                                                             gguf_file=os.path.basename(a.gguf))
    hf_tok = transformers.AutoTokenizer.from_pretrained(a.model)

    def tokenizer_check(name, texts):
        jsonl(os.path.join(a.out, "texts.jsonl"), [{"text": t} for t in texts])
        mc(a, "tokenize", "--tokenizer", os.path.join(a.model, "tokenizer.json"), "--input",
           os.path.join(a.out, "texts.jsonl"), "--output", os.path.join(a.out, "ids.jsonl"), "--no-progress")
        got = [r["ids"] for r in jsonl(os.path.join(a.out, "ids.jsonl"))]
        bad = [i for i, t in enumerate(texts)
               if not (got[i] == ours_tok.encode(t).ids == hf_gguf_tok.encode(t, add_special_tokens=False)
                       == hf_tok.encode(t, add_special_tokens=False))]
        check(f"tokenizer: {name}", not bad and len(got) == len(texts),
              f"{len(texts) - len(bad)}/{len(texts)} texts, {sum(map(len, got))} tokens identical"
              + (f"; first mismatch: text {bad[0]}" if bad else ""))

    tokenizer_check(f"{len(files)} KernelBench level 1-3 files", texts)

    # Chat: KernelBench's prompt for the first problems of each level.
    picks = [f for lvl in ("level1", "level2", "level3") for f in files if f"/{lvl}/" in f][:: max(1, len(files) // a.prompts)]
    picks = picks[: a.prompts]
    messages = [[{"role": "user", "content": kernelbench_prompt(kb_root, open(f).read())}] for f in picks]
    jsonl(os.path.join(a.out, "chat.jsonl"), [{"messages": m} for m in messages])
    mc(a, "tokenize", "--tokenizer", os.path.join(a.model, "tokenizer.json"), "--input", os.path.join(a.out, "chat.jsonl"),
       "--output", os.path.join(a.out, "chat_ids.jsonl"), "--no-progress")
    ours_chat = [r["ids"] for r in jsonl(os.path.join(a.out, "chat_ids.jsonl"))]
    hf_chat = [hf_tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True) for m in messages]
    hf_chat = [list(x["input_ids"]) if hasattr(x, "keys") else list(x) for x in hf_chat]
    rendered = hf_tok.apply_chat_template(messages[0], add_generation_prompt=True, tokenize=False)
    check("chat template: KernelBench prompts", ours_chat == hf_chat,
          f"{sum(x == y for x, y in zip(ours_chat, hf_chat))}/{len(hf_chat)} identical ({min(map(len, hf_chat))}-"
          f"{max(map(len, hf_chat))} tokens); default system turn rendered: {rendered.split(chr(10))[1][:70]!r}")

    # Weights: transformers on our folder = transformers on the GGUF (both fp32).
    ref32 = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).to(a.device).eval()
    via_gguf = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(a.gguf)),
                                                                 gguf_file=os.path.basename(a.gguf), dtype=torch.float32)
    sd_gguf = via_gguf.state_dict()
    # The folder holds the dequantized values in its own dtype (bf16 by default): compare them
    # with the GGUF loader's float32 values rounded the same way.
    folder = {"bfloat16": torch.bfloat16, "float32": torch.float32}[json.load(open(os.path.join(a.model, "config.json")))["dtype"]]
    diffs = [n for n, p in ref32.state_dict().items()
             if n in sd_gguf and not torch.equal(p.cpu(), sd_gguf[n].to(folder).to(torch.float32))]
    missing = [n for n in ref32.state_dict() if n not in sd_gguf]
    check(f"weights: our folder = transformers' GGUF loader (rounded to {folder})", not diffs and not missing,
          f"{len(sd_gguf)} tensors bit-identical" if not diffs else f"differ: {diffs[:4]} missing: {missing[:4]}")
    del via_gguf, sd_gguf

    # Logits on the chat prompts.
    jsonl(os.path.join(a.out, "seqs.jsonl"), [{"ids": s} for s in ours_chat[:4]])
    res = {}
    for dtype in ("fp32", "bf16"):
        mc(a, "score", "--model", a.model, "--device", a.device, "--dtype", dtype, "--input",
           os.path.join(a.out, "seqs.jsonl"), "--output", os.path.join(a.out, f"score_{dtype}.jsonl"), "--logits",
           os.path.join(a.out, f"logits_{dtype}.safetensors"))
    from safetensors.torch import load_file
    ours = {d: load_file(os.path.join(a.out, f"logits_{d}.safetensors")) for d in ("fp32", "bf16")}
    ref16 = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).to(a.device).eval()
    worst = {"fp32": 0.0, "bf16": 0.0, "hf_bf16": 0.0}
    agree = {"fp32": [0, 0], "bf16": [0, 0]}
    for i, s in enumerate(ours_chat[:4]):
        ids = torch.tensor([s], device=a.device)
        with torch.no_grad():
            truth = ref32(ids).logits[0].float().cpu()
            theirs16 = ref16(ids).logits[0].float().cpu()

        def rel(x):
            return float((x.float() - truth).norm() / truth.norm())
        worst["fp32"] = max(worst["fp32"], rel(ours["fp32"][f"logits.{i}"]))
        worst["bf16"] = max(worst["bf16"], rel(ours["bf16"][f"logits.{i}"]))
        worst["hf_bf16"] = max(worst["hf_bf16"], rel(theirs16))
        for d in ("fp32", "bf16"):
            agree[d][0] += int((ours[d][f"logits.{i}"].argmax(-1) == truth.argmax(-1)).sum())
            agree[d][1] += len(s)
    res["logits_rel_err"] = worst
    check("logits fp32 (ours vs transformers fp32)", worst["fp32"] < 1e-3,
          f"max ||ours - ref|| / ||ref|| = {worst['fp32']:.2e}; argmax agrees at {agree['fp32'][0]}/{agree['fp32'][1]} positions")
    check("logits bf16 (no further from fp32 than transformers' bf16)", worst["bf16"] <= 1.5 * worst["hf_bf16"] + 1e-4,
          f"ours {worst['bf16']:.2e} vs transformers bf16 {worst['hf_bf16']:.2e}; argmax agrees at "
          f"{agree['bf16'][0]}/{agree['bf16'][1]}")

    # Greedy generations on the KernelBench prompts.
    greedy = {}
    for dtype, ref in (("fp32", ref32), ("bf16", ref16)):
        jsonl(os.path.join(a.out, "prompts.jsonl"), [{"id": i, "prompt_ids": s} for i, s in enumerate(ours_chat)])
        mc(a, "generate", "--model", a.model, "--device", a.device, "--dtype", dtype, "--prompts",
           os.path.join(a.out, "prompts.jsonl"), "--temperature", "0", "--max-new-tokens", a.new_tokens,
           "--out", os.path.join(a.out, f"greedy_{dtype}.jsonl"), "--no-progress")
        rows = sorted(jsonl(os.path.join(a.out, f"greedy_{dtype}.jsonl")), key=lambda r: r["id"])
        same, prefix = 0, []
        for s, row in zip(ours_chat, rows):
            with torch.no_grad():
                out = ref.generate(torch.tensor([s], device=a.device), attention_mask=torch.ones(1, len(s), dtype=torch.long,
                                   device=a.device), do_sample=False, max_new_tokens=a.new_tokens,
                                   eos_token_id=ref.generation_config.eos_token_id, pad_token_id=hf_tok.pad_token_id)
            want = out[0, len(s):].tolist()
            eos = ref.generation_config.eos_token_id
            eos = set(eos if isinstance(eos, list) else [eos])
            while want and want[-1] in eos and row["tokens"] and row["tokens"][-1] not in eos:
                want = want[:-1]  # transformers keeps the EOS; compare the same span
            got = row["tokens"]
            same += got == want
            k = next((j for j, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            prefix.append(k)
        greedy[dtype] = {"identical": same, "of": len(rows), "common_prefix": prefix,
                         "texts": [r["text"] for r in rows]}
    check("greedy fp32: KernelBench prompts token for token", greedy["fp32"]["identical"] == greedy["fp32"]["of"],
          f"{greedy['fp32']['identical']}/{greedy['fp32']['of']} identical (common prefixes {greedy['fp32']['common_prefix']})")
    print(f"INFO  greedy bf16: {greedy['bf16']['identical']}/{greedy['bf16']['of']} identical, common prefixes "
          f"{greedy['bf16']['common_prefix']} of {a.new_tokens} (bf16 kernels differ; a near-tie flips a token)", flush=True)
    tokenizer_check("the model's greedy answers", greedy["fp32"]["texts"] + greedy["bf16"]["texts"])

    res.update({"model": a.model, "gguf": a.gguf, "device": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu",
                "checks": ROWS, "greedy": {d: {k: v for k, v in g.items() if k != "texts"} for d, g in greedy.items()},
                "answer_example": greedy["fp32"]["texts"][0][:1500], "seconds": time.time() - t0})
    json.dump(res, open(os.path.join(a.out, "parity.json"), "w"), indent=2)
    failed = [r for r in ROWS if not r["ok"]]
    print(f"\n{len(ROWS) - len(failed)} passed, {len(failed)} failed  ({a.model}, {time.time() - t0:.0f} s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
