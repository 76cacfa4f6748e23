"""A policy with one decision to learn, for RL tests and the RL stability bench.

A tiny random Qwen2 is fine-tuned (`musacoder-model train sft`) on two answers to the same
KernelBench prompt (1_Add, the exact prompt `train rl --format kernelbench` builds), in equal
shares: a working CPU kernel, and a refusal that MooreEval scores as an extract error. The
result is near-deterministic everywhere except at the answer's first token, where it picks
either branch about half the time: the shape of a real SFT model's groups (mostly copies, a
fork here and there), small enough for the CPU. RL through the real MooreEval in CPU mode
should move that fork to the working branch without breaking the memorized tail.

build(base) returns a Fork with the problems folder, the SFT checkpoint and the two answers.
Costs about a minute on two cores: the SFT run, and one kernel compile on the first RL step."""
import dataclasses
import json
import os
import shutil

import mc_cli
import tiny_models
from mc_cli import ROOT

OK = "Here is the kernel.\n\n```python\n" + open(os.path.join(ROOT, "tests", "cases", "rft", "add_base.py")).read() + "```\n"
REFUSE = "I cannot write this kernel.\n"


@dataclasses.dataclass
class Fork:
    base: str
    problems: str
    sft: str  # the SFT checkpoint: an HF-format model directory
    prompt: list  # the chat turns RL sends
    data: str  # the SFT data (both answers): RL's --anchor-data


def model(*args):
    """`musacoder ARGS...` (train sft / train rl go to musacoder-model), failing with its output."""
    return mc_cli.run(*args, timeout=900)


def rl_args(fork, out, *extra, lr="1e-4", steps=4, temperature=0.5, max_new_tokens=640):
    """`train rl` on the fork: one prompt of eight answers a step, one turn, T = 0.5 (the fork's
    two equal logits stay 50/50; the memorized tail gets sharper)."""
    return ["train", "rl", "--model", fork.sft, "--problems", fork.problems, "--out", out, "--format", "kernelbench",
            "--device", "cpu", "--verify-device", "cpu", "--cache-dir", os.path.join(fork.base, "cache"),
            "--timing-budget", "0.1", "--speed-weight", "0", "--group-size", "8", "--prompts-per-step", "1",
            "--max-turns", "1", "--max-new-tokens", str(max_new_tokens), "--max-seq-len", "4096", "--micro-batch-tokens", "8192",
            "--temperature", str(temperature), "--top-p", "1", "--seed", "3", "--lr", str(lr), "--max-steps", str(steps),
            "--samples-every", "1", "--samples", "8", "--no-progress", *extra]


def build(base):
    base = str(base)
    problems = os.path.join(base, "problems")
    os.makedirs(problems, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "tests", "cases", "problems", "1_Add.py"), problems)
    tiny_models.make_model(os.path.join(base, "model"), "qwen2", max_positions=4096)
    # The prompt, exactly as RL renders it: one step of four tokens on the random model.
    probe = Fork(base, problems, os.path.join(base, "model"), [], "")
    model(*rl_args(probe, os.path.join(base, "probe"), steps=1, max_new_tokens=4))
    with open(os.path.join(base, "probe", "samples", "step-00000001.jsonl")) as f:
        prompt = json.loads(f.readline())["prompt"]
    data = os.path.join(base, "sft.jsonl")
    with open(data, "w") as f:
        for answer in (OK, REFUSE):
            f.write(json.dumps({"messages": prompt + [{"role": "assistant", "content": answer}]}) + "\n")
    model("train", "sft", "--model", os.path.join(base, "model"), "--data", data, "--out", os.path.join(base, "sft"),
          "--max-steps", "300", "--lr", "5e-3", "--warmup-steps", "5", "--tokens-per-step", "8192",
          "--micro-batch-tokens", "8192", "--max-len", "4096", "--device", "cpu", "--no-progress")
    ckpts = sorted(os.listdir(os.path.join(base, "sft", "checkpoints")))
    return Fork(base, problems, os.path.join(base, "sft", "checkpoints", ckpts[-1]), prompt, data)


def branch_logprobs(model_dir, context, ok, refuse_first):
    """Teacher-forced with transformers, after the prompt's tokens `context`: log P(ok[0]),
    log P(refuse_first) and the summed log-prob of the rest of the working answer `ok`
    (token ids as RL sampled them, from its --dump-steps batch)."""
    import torch
    import transformers
    m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    m.train(False)
    with torch.no_grad():
        lp = torch.log_softmax(m(torch.tensor([context + ok])).logits[0].float(), -1)
    first = lp[len(context) - 1]
    tail = lp[len(context):len(context) + len(ok) - 1].gather(-1, torch.tensor(ok[1:])[:, None]).sum().item()
    return first[ok[0]].item(), first[refuse_first].item(), tail
