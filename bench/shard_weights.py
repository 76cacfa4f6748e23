"""`train sft --shard weights` against `--shard optimizer` on one GPU: same losses, and the cost.

One model, one data set, one seed, `--deterministic`, run twice in this process's GPU: once with
`--shard optimizer` (every rank holds the whole bf16 model: the anchor) and once with
`--shard weights` (each layer's weights gathered before use and freed after; at world size 1 the
gathers are copies). Reports, step by step, whether the losses and gradient norms are identical,
whether the last checkpoints' weights are, each arm's median step time over the steps after the
first, and its peak allocated memory.

The model: --model DIR (a Hugging Face folder), or by default a Qwen2 of Qwen2.5-Coder-1.5B's
shape (untied head, as its GGUF has) with random bf16 weights, made here by transformers. The
comparison is of code paths; the weights' values do not enter it.

usage: python3 bench/shard_weights.py --musacoder-model BIN --data SFT.jsonl --out DIR [--steps 10]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from sft_determinism import weights_hash  # noqa: E402

# Qwen2.5-Coder-1.5B-Instruct's config.json, less what a random model does not need.
QWEN25_CODER_15B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                        num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                        rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False)


def make_model(directory):
    import torch
    import transformers
    import tiny_models
    os.makedirs(directory, exist_ok=True)
    tok = tiny_models.make_tokenizer(os.path.join(directory, "tokenizer.json"))
    cfg = transformers.Qwen2Config(eos_token_id=tok.token_to_id("<|im_end|>"), **QWEN25_CODER_15B)
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(directory)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder-model", required=True)
    ap.add_argument("--data", required=True, help="SFT JSONL (e.g. recipes/small/seed.tgz's synth/dataset.jsonl)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", help="a Hugging Face folder (default: a random model of Qwen2.5-Coder-1.5B's shape)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    model = a.model or os.path.join(a.out, "model-1.5b-shape")
    if not a.model and not os.path.exists(os.path.join(model, "config.json")):
        make_model(model)
    arms = {}
    for shard in ("optimizer", "weights"):
        out = os.path.join(a.out, shard)
        cmd = [a.musacoder_model, "train", "sft", "--model", model, "--data", a.data, "--out", out, "--max-steps",
               str(a.steps), "--tokens-per-step", "65536", "--micro-batch-tokens", "16384", "--max-len", "4096",
               "--lr", "1e-5", "--warmup-steps", "2", "--seed", "1", "--grad-checkpoint", "--deterministic",
               "--shard", shard, "--save-every", "1000000", "--device", a.device, "--no-progress"]
        print("$", " ".join(cmd), flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"shard_weights: --shard {shard} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            arms[shard] = [row for row in map(json.loads, f) if row.get("kind") == "train"]
    # The model's files only: the optimizer state is laid out by bucket, which the two arms do differently.
    same_weights = len({weights_hash(os.path.join(a.out, arm), "model*.safetensors") for arm in arms}) == 1
    opt, w = arms["optimizer"], arms["weights"]
    rows = []
    print(f"{'step':>4} {'loss (optimizer)':>18} {'loss (weights)':>18} {'same':>5} {'step_s opt':>11} {'step_s w':>9}")
    for x, y in zip(opt, w):
        same = x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"]
        rows.append({"step": x["step"], "loss_optimizer": x["loss"], "loss_weights": y["loss"],
                     "grad_norm_optimizer": x["grad_norm"], "grad_norm_weights": y["grad_norm"], "identical": same,
                     "step_s_optimizer": x["step_s"], "step_s_weights": y["step_s"]})
        print(f"{x['step']:>4} {x['loss']:>18.12f} {y['loss']:>18.12f} {'yes' if same else 'NO':>5} "
              f"{x['step_s']:>11.3f} {y['step_s']:>9.3f}")
    med = {k: statistics.median(r["step_s"] for r in v[1:]) for k, v in arms.items()}
    summary = {"model": a.model or "random, Qwen2.5-Coder-1.5B's shape", "steps": len(rows),
               "identical_steps": sum(r["identical"] for r in rows), "weights_identical": same_weights,
               "median_step_s": med, "step_time_change": med["weights"] / med["optimizer"] - 1,
               "peak_alloc_gib": {k: max(r.get("peak_alloc_gib", 0) for r in v) for k, v in arms.items()}}
    print(f"identical: {summary['identical_steps']}/{len(rows)} steps, weights {'yes' if same_weights else 'NO'}; median step (steps 2-{len(rows)}): "
          f"{med['weights']:.3f} s against {med['optimizer']:.3f} s ({100 * summary['step_time_change']:+.1f}%); "
          f"peak allocated {summary['peak_alloc_gib']['weights']:.1f} against "
          f"{summary['peak_alloc_gib']['optimizer']:.1f} GiB")
    with open(os.path.join(a.out, "steps.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if summary["identical_steps"] != len(rows) or len(rows) != a.steps or not same_weights:
        sys.exit("shard_weights: the two arms differ")


if __name__ == "__main__":
    main()
