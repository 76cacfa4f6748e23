"""A small model through the whole post-training path on one GPU (issue 14's GPU runs):

  synth   `musacoder synth` problems with verified-by-compile native teacher solutions;
  sft     a byte-level BPE tokenizer trained on that data, a small Qwen2 model with random
          weights, `musacoder train sft` on 90% of the problems (the other 10% give the eval
          loss): the loss curve on synthesized problems;
  rft     `musacoder rft` from the SFT checkpoint over every problem (seen and held-out): K
          samples each, verified by MooreEval on this GPU, diverse selection, the report;
          with --rft-args "--repair-rows 2 --repair-from {work}/synth/dataset.jsonl --train
          --train-args ..." also repair conversations (failed answer, feedback, fix) and SFT on
          them, so that repair turns have been seen before rl (--rl-from rft starts rl there);
  rl      `musacoder train rl` from the SFT checkpoint over the same problems (issue 15's GPU
          run): multi-turn GRPO with MooreEval in process on this GPU, resumed slice after
          slice from its checkpoints (--rl-out names the run, --rl-args adds options).

No pretrained model can be fetched here, so the policy is trained from scratch in minutes: on the
problems it was trained on it mostly reproduces the teacher; the held-out problems show what it
does without having seen the answer. The run shows the machinery working end to end at real
sizes, not a strong model.

Stages resume: each leaves its outputs under --work, and rft continues from verified.jsonl (a
GPU slice is 10 minutes): a later slice passes `--samples-from WORK/rft/samples.jsonl` (the
policy need not travel) and only what is not yet judged is verified.

usage: python3 bench/small_model_rft.py --musacoder BIN --work DIR --stages synth,sft,rft [...]
"""
import argparse
import json
import os
import random
import signal
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
START = time.time()
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def run(cmd, log, timeout=None):
    t0 = time.time()
    print("$", " ".join(cmd), flush=True)
    with open(log, "a") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the command and its judges
            p.wait()
            rc = "timeout"
    print(f"  -> {rc} in {time.time() - t0:.0f} s", flush=True)
    return rc


def stage_synth(a):
    out = os.path.join(a.work, "synth")
    if os.path.exists(os.path.join(out, "dataset.jsonl")):
        print("synth: reusing", out)
        return
    rc = run([a.musacoder, "synth", "--out", out, "--count", str(a.problems), "--seed", str(a.seed), "--formats", "native",
              "--verify", "compile", "--no-progress"], os.path.join(a.work, "synth.log"))
    if rc != 0:
        sys.exit(f"synth failed ({rc})")


def stage_sft(a):
    import torch
    import transformers
    from bpe_fixtures import train_bpe
    synth = os.path.join(a.work, "synth")
    rows = [json.loads(line) for line in open(os.path.join(synth, "dataset.jsonl"))]
    key = lambda r: f"L{r['level']}/{r['problem_id']}"  # noqa: E731
    problems = sorted({key(r) for r in rows})
    rng = random.Random(a.seed)
    held = set(rng.sample(problems, max(1, len(problems) // 10)))
    train = [r for r in rows if key(r) not in held]
    ev = [r for r in rows if key(r) in held]
    for name, part in (("train", train), ("eval", ev)):
        with open(os.path.join(a.work, f"sft-{name}.jsonl"), "w") as f:
            for r in part:
                f.write(json.dumps({"messages": r["messages"]}) + "\n")
    with open(os.path.join(a.work, "held_out.json"), "w") as f:
        json.dump(sorted(held), f)
    print(f"sft: {len(train)} training rows ({len(problems) - len(held)} problems), {len(ev)} eval rows "
          f"({len(held)} held-out problems)", flush=True)
    model_dir = os.path.join(a.work, "model")
    os.makedirs(model_dir, exist_ok=True)
    corpus = [m["content"] for r in rows for m in r["messages"]]
    tok = train_bpe(os.path.join(model_dir, "tokenizer.json"), corpus, "qwen", vocab_size=a.vocab)
    cfg = transformers.Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=a.hidden, intermediate_size=a.hidden * 3,
                                   num_hidden_layers=a.layers, num_attention_heads=a.hidden // 64, num_key_value_heads=2,
                                   max_position_embeddings=8192, rope_theta=10000.0, rms_norm_eps=1e-6,
                                   tie_word_embeddings=True, eos_token_id=tok.token_to_id("<|im_end|>"))
    torch.manual_seed(a.seed)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(model_dir)
    n = sum(p.numel() for p in model.parameters())
    print(f"sft: model {n / 1e6:.1f}M parameters (hidden {a.hidden}, {a.layers} layers), vocab {tok.get_vocab_size()}",
          flush=True)
    model_bin = os.path.join(os.path.dirname(os.path.abspath(a.musacoder)), "musacoder-model")
    rc = run([model_bin, "train", "sft", "--model", model_dir, "--data", os.path.join(a.work, "sft-train.jsonl"),
              "--eval-data", os.path.join(a.work, "sft-eval.jsonl"), "--eval-every", "20", "--out",
              os.path.join(a.work, "sft"), "--epochs", str(a.epochs), "--lr", str(a.lr), "--min-lr", str(a.lr / 10),
              "--warmup-steps", "20", "--tokens-per-step", str(a.tokens_per_step), "--max-len", "6144",
              "--micro-batch-tokens", "32768", "--weight-decay", "0.1", "--save-every", "50", "--keep", "1",
              "--no-progress"], os.path.join(a.work, "sft.log"), timeout=budget(a, a.sft_timeout, reserve=a.rft_reserve))
    if rc not in (0, "timeout"):
        sys.exit(f"sft failed ({rc})")


def budget(a, want, reserve=0):
    """A stage's time limit: `want`, cut so that the whole script ends by --deadline with `reserve`
    seconds left for the stages after it."""
    if not a.deadline:
        return want
    left = a.deadline - (time.time() - START) - reserve - 10
    return max(30, min(want, left) if want else left)


def last_checkpoint(a, stage="sft"):
    """The newest checkpoint of WORK/sft (stage sft) or of rft --train's WORK/rft/sft (stage rft)."""
    ck = os.path.join(a.work, *(("rft", "sft") if stage == "rft" else ("sft",)), "checkpoints")
    steps = sorted(d for d in os.listdir(ck) if d.startswith("step-"))
    return os.path.join(ck, steps[-1])


def stage_rft(a):
    cmd = [a.musacoder, "rft", "--problems", os.path.join(a.work, "synth", "problems.jsonl"), "--out",
           os.path.join(a.work, "rft"), "--timing-budget", "0.1", "--no-progress", "--cap", "4"]
    if a.samples_from:
        cmd += ["--samples-from", a.samples_from]
    else:
        model = last_checkpoint(a)
        print("rft: policy", model, flush=True)
        cmd += ["--model", model, "--samples", str(a.samples), "--temperature", str(a.temperature), "--max-new-tokens",
                str(a.max_new_tokens), "--seed", str(a.seed)]
    # e.g. --rft-args "--repair-rows 2 --repair-from {work}/synth/dataset.jsonl --train --train-args ..."
    cmd += shlex.split(a.rft_args.replace("{work}", a.work))
    rc = run(cmd, os.path.join(a.work, "rft.log"), timeout=budget(a, None))
    if rc not in (0, "timeout"):
        sys.exit(f"rft failed ({rc})")


def rl_problems(a):
    """The problems `train rl` draws from: all of synth's, or (--rl-problems N) N level-1 problems
    the SFT stage trained on, chosen by --seed, so that a short run passes over the same prompts
    several times and a change in their pass rate is learning, not a change of prompts."""
    path = os.path.join(a.work, "synth", "problems.jsonl")
    if not a.rl_problems:
        return path
    held = set(json.load(open(os.path.join(a.work, "held_out.json"))))
    rows = [json.loads(line) for line in open(path)]
    seen = sorted((r for r in rows if r["level"] == 1 and f"L1/{r['id']}" not in held), key=lambda r: r["id"])
    if len(seen) < a.rl_problems:
        sys.exit(f"--rl-problems {a.rl_problems}: only {len(seen)} seen level-1 problems")
    pick = random.Random(a.seed).sample(seen, a.rl_problems)
    out = os.path.join(a.work, "synth", f"problems-rl{a.rl_problems}.jsonl")  # beside it: paths are relative
    with open(out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in sorted(pick, key=lambda r: r["id"]))
    print(f"rl: {a.rl_problems} seen level-1 problems in {out}", flush=True)
    return out


def stage_rl(a):
    out = os.path.join(a.work, a.rl_out)
    model_bin = os.path.join(os.path.dirname(os.path.abspath(a.musacoder)), "musacoder-model")
    cmd = [model_bin, "train", "rl", "--model", last_checkpoint(a, a.rl_from), "--problems",
           rl_problems(a), "--out", out, "--format", "native", "--timing-budget", "0.1",
           "--max-new-tokens", str(a.max_new_tokens), "--max-seq-len", "8192", "--micro-batch-tokens", "32768",
           "--save-every", "1", "--keep", "2", "--samples-every", "5", "--seed", str(a.seed), "--no-progress"]
    cmd += a.rl_args.split()
    if os.path.isdir(os.path.join(out, "checkpoints")) and any(
            d.startswith("step-") for d in os.listdir(os.path.join(out, "checkpoints"))):
        cmd.append("--resume")
    # GPU utilization while it runs, sampled every second.
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,memory.used", "--format=csv,noheader",
                            "-l", "1"], stdout=open(os.path.join(a.work, f"{a.rl_out}-gpu-util.csv"), "a"),
                           stderr=subprocess.DEVNULL)
    try:
        rc = run(cmd, os.path.join(a.work, f"{a.rl_out}.log"), timeout=budget(a, None))
    finally:
        smi.terminate()
    if rc not in (0, "timeout"):
        sys.exit(f"rl failed ({rc})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--stages", default="synth,sft,rft")
    ap.add_argument("--problems", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--sft-timeout", type=int, default=240)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-new-tokens", type=int, default=3072)
    ap.add_argument("--samples-from", default="")
    ap.add_argument("--deadline", type=int, default=0, help="seconds: end every stage by then (a GPU slice)")
    ap.add_argument("--rft-reserve", type=int, default=200, help="seconds the sft stage leaves for rft")
    ap.add_argument("--rl-out", default="rl", help="the rl run's folder under --work")
    ap.add_argument("--rl-problems", type=int, default=0,
                    help="rl on this many level-1 problems seen in SFT (0: every synthesized problem)")
    ap.add_argument("--rl-args", default="", help="more `train rl` options, one string")
    ap.add_argument("--rft-args", default="", help="more `musacoder rft` options, one string ({work}: --work)")
    ap.add_argument("--rl-from", default="sft", choices=["sft", "rft"],
                    help="the policy rl starts from: the sft stage's, or rft --train's (repair rows included)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for s in a.stages.split(","):
        {"synth": stage_synth, "sft": stage_sft, "rft": stage_rft, "rl": stage_rl}[s](a)


if __name__ == "__main__":
    main()
