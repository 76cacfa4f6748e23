"""Generation throughput: `musacoder generate` against `transformers.generate` in the same run.

A randomly initialised model of Qwen2-0.5B's shape (24 layers, hidden 896, 14 heads / 2 KV
heads, intermediate 4864, vocabulary 151936, tied embeddings) in bf16; 64 prompts of
--prompt-len random tokens, 8 samples each, exactly 512 new tokens (EOS ignored on both sides),
plain sampling at temperature 1 (no top-k / top-p on either side). Reports sampled tokens per
second (generation only, model load excluded), prefill calls and their cost, and peak GPU memory,
as a table and JSON. RL's pipelined turns' prefill (issue 15), prompts arriving a few at a time:
  --shape recipe-small --prompts 64 --n 1 --prompt-len 1500 --prompt-len-spread 700
  --skip-transformers --arrive-every 4   (gpu-check stage prefill)"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

QWEN05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
               num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
               rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, eos_token_id=151643)
# recipes/small's policy (docs/recipe.md): a 33 M-parameter Qwen3.
RECIPE_SMALL = dict(vocab_size=16384, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                    num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=16384,
                    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, eos_token_id=0)
SHAPES = {"qwen05b": (QWEN05B, "Qwen2"), "recipe-small": (RECIPE_SMALL, "Qwen3")}


def make_model(path, shape="qwen05b"):
    import transformers
    if os.path.exists(os.path.join(path, "config.json")):
        return
    torch.manual_seed(0)
    conf, arch = SHAPES[shape]
    cfg = getattr(transformers, arch + "Config")(**conf)
    model = getattr(transformers, arch + "ForCausalLM")(cfg).to(torch.bfloat16)
    model.save_pretrained(path)


def write_prompts(path, shape, count, length, spread, seed=1):
    """`count` random prompts over the shape's vocabulary, of `length` tokens, or uniformly within
    +-`spread` of it (1 at least), from torch's generator seeded with `seed`; written to path as
    JSONL ({"prompt_ids": [...]}, what `musacoder generate --prompts` reads) and returned."""
    g = torch.Generator().manual_seed(seed)
    vocab = SHAPES[shape][0]["vocab_size"]
    lens = (torch.randint(max(1, length - spread), length + spread + 1, (count,), generator=g).tolist() if spread
            else [length] * count)
    prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt_ids": p}) + "\n")
    return prompts


def arrival_cmd(a, pfile, stats, max_batch, *extra):
    """`musacoder generate` over pfile's prompts arriving one every a.arrive_every engine steps,
    one sample each, a.new_tokens tokens (EOS ignored), its stats to `stats`: the run that
    bench/probes/gpu_sharing.py measures (a: its options; extra: more of generate's)."""
    return [a.musacoder, "generate", *extra, "--model", a.model_dir, "--prompts", pfile, "--n", "1", "--max-new-tokens",
            str(a.new_tokens), "--ignore-eos", "--max-batch", str(max_batch),
            "--dtype", "fp32" if a.device == "cpu" else "bf16", "--device", a.device, "--out", "/dev/null",
            "--stats", stats, "--no-progress", "--arrive-every", str(a.arrive_every)]


def engine_row(stats):
    """What a generate run's stats file says per prefill call and per decode step."""
    st = json.load(open(stats))
    calls, steps = max(1, st["prefill_calls"]), max(1, st["decode_steps"])
    return {"seconds": st["seconds"], "tokens_per_s": st["tokens_per_s"], "prefill_calls": st["prefill_calls"],
            "prefill_wall_ms": st["prefill_wall_ms_total"] / calls,
            "prefill_gpu_ms": st.get("prefill_gpu_ms_total", 0.0) / calls,
            "prefill_s": st["prefill_wall_ms_total"] / 1e3, "padded_tokens": st.get("prefill_padded_tokens", 0),
            "decode_steps": st["decode_steps"], "step_wall_ms": st["step_wall_ms_total"] / steps,
            "step_model_gpu_ms": st["decode_gpu_ms_total"] / steps}


def run_transformers(path, prompts, n, new_tokens):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    ids = torch.tensor(prompts, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_p=1.0,
                             top_k=0, num_return_sequences=n, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, pad_token_id=0)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    generated = (out.shape[1] - ids.shape[1]) * out.shape[0]
    return {"seconds": secs, "generated_tokens": generated, "tokens_per_s": generated / secs,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--model-dir", default=None, help="default: /tmp/<shape>-random")
    ap.add_argument("--shape", default="qwen05b", choices=sorted(SHAPES), help="the random model's shape")
    ap.add_argument("--out", default="generate_bench.json")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--prompt-len-spread", type=int, default=0,
                    help="prompt lengths uniform in prompt-len +- this (RL's turns: each prompt its own length)")
    ap.add_argument("--max-batch", type=int, default=512)
    ap.add_argument("--skip-transformers", action="store_true")
    ap.add_argument("--device", default="cuda", help="musacoder's device (cpu: a check of this script, bf16 -> fp32)")
    ap.add_argument("--extra", nargs="*", default=[], help="more musacoder generate options")
    ap.add_argument("--decode-attention", default="matmul", help="sdpa or matmul")
    ap.add_argument("--also-no-graphs", action="store_true", help="also run musacoder without CUDA graphs")
    ap.add_argument("--arrive-every", type=int, default=0,
                    help="musacoder: prompts reach the engine one every N engine steps (generate --arrive-every)")
    ap.add_argument("--temperature", default="1", help="musacoder's sampling temperature (transformers: 1)")
    ap.add_argument("--top-p", default="1", help="musacoder's top-p (transformers: off)")
    a = ap.parse_args()
    if a.device == "cpu" and not a.skip_transformers:
        ap.error("--device cpu needs --skip-transformers (the comparison is a GPU one)")
    if a.prompt_len_spread and not a.skip_transformers:
        ap.error("--prompt-len-spread needs --skip-transformers (transformers takes one prompt length)")
    gpu = a.device != "cpu"
    a.model_given = bool(a.model_dir)
    a.model_dir = a.model_dir or f"/tmp/{a.shape}-random"
    make_model(a.model_dir, a.shape)
    pfile = os.path.join(os.path.dirname(os.path.abspath(a.out)), "bench_prompts.jsonl")
    prompts = write_prompts(pfile, a.shape, a.prompts, a.prompt_len, a.prompt_len_spread)
    def ours(tag, *extra):
        stats = os.path.join(os.path.dirname(os.path.abspath(a.out)), f"musacoder_generate_stats{tag}.json")
        cmd = [a.musacoder, "generate", "--model", a.model_dir, "--prompts", pfile, "--n", str(a.n),
               "--max-new-tokens", str(a.new_tokens), "--ignore-eos", "--temperature", a.temperature, "--top-p", a.top_p, "--max-batch",
               str(a.max_batch), "--dtype", "bf16" if gpu else "fp32", "--device", a.device, "--out", "/dev/null", "--stats", stats,
               "--no-progress", "--decode-attention", a.decode_attention, "--arrive-every", str(a.arrive_every),
               *a.extra, *extra]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        sys.stderr.write(r.stderr[-3000:])
        if r.returncode != 0:
            raise SystemExit(f"musacoder generate failed (rc {r.returncode})")
        st = json.load(open(stats))
        st["process_wall_seconds"] = wall
        return st

    ours_main = ours("")
    res = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(0) if gpu else "cpu", "torch": torch.__version__,
           "shape": a.model_dir if a.model_given else f"{a.shape} (random init, bf16)", "prompts": a.prompts, "n": a.n, "new_tokens": a.new_tokens,
           "prompt_len": a.prompt_len, "prompt_len_spread": a.prompt_len_spread, "arrive_every": a.arrive_every,
           "musacoder": ours_main}
    if a.also_no_graphs:
        res["musacoder_no_cuda_graphs"] = ours("_nographs", "--no-cuda-graphs")
    res["temperature"], res["top_p"] = a.temperature, a.top_p
    if not a.skip_transformers:
        import transformers
        res["transformers_version"] = transformers.__version__
        res["transformers"] = run_transformers(a.model_dir, prompts, a.n, a.new_tokens)
    json.dump(res, open(a.out, "w"), indent=2)
    print(f"\n| engine | tokens | seconds | tokens/s | ms per decode step (wall / GPU graph / GPU sampling) | "
          f"prefill calls, ms each | peak GiB (reserved) |\n|---|---|---|---|---|---|---|")
    rows = [("musacoder generate", ours_main)]
    if "musacoder_no_cuda_graphs" in res:
        rows.append(("musacoder generate --no-cuda-graphs", res["musacoder_no_cuda_graphs"]))
    for name, o in rows:
        n = max(1, o["decode_steps"])
        print(f"| {name} | {o['generated_tokens']} | {o['seconds']:.2f} | {o['tokens_per_s']:.0f} | "
              f"{o['step_wall_ms_total'] / n:.3f} / {o['decode_gpu_ms_total'] / n:.3f} / {o['sample_gpu_ms_total'] / n:.3f} | "
              f"{o['prefill_calls']}, {o['prefill_wall_ms_total'] / max(1, o['prefill_calls']):.1f} | "
              f"{o['peak_reserved_gib']:.2f} |")
    if "transformers" in res:
        t = res["transformers"]
        print(f"| transformers {res['transformers_version']} generate | {t['generated_tokens']} | {t['seconds']:.2f} | "
              f"{t['tokens_per_s']:.0f} | | | {t['peak_reserved_gib']:.2f} |")
        print(f"\nspeedup: {ours_main['tokens_per_s'] / t['tokens_per_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
