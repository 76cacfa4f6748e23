"""On a GPU: the trainer's fused CUDA kernels give the same training as the ATen ops they replace.

Runs `musacoder train sft` for 3 steps on a small random Qwen2 model in bf16 on CUDA twice, with
the fused SwiGLU kernel (model/swiglu_kernel.cu) and with MUSACODER_UNFUSED_SWIGLU=1, and
compares losses, gradient norms and the final weights. The kernel is written to repeat ATen's
float math and roundings; this reports whether they come out bitwise equal and the largest
difference otherwise (the budget is bf16 noise: 1e-3 relative on losses).

usage: python3 tests/gpu/train_fused_parity.py --musacoder BIN --out DIR
"""
import argparse
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import tiny_models  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--musacoder", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(a.out, "model")
    tiny_models.make_model(model, "qwen2", max_positions=4096)
    data = os.path.join(a.out, "data.jsonl")
    g = torch.Generator().manual_seed(0)
    words = tiny_models.CORPUS[0].split() + tiny_models.CORPUS[1].split()
    with open(data, "w") as f:
        for i in range(24):
            n = int(torch.randint(20, 200, (1,), generator=g))
            text = " ".join(words[j] for j in torch.randint(0, len(words), (n,), generator=g).tolist())
            f.write(json.dumps({"messages": [{"role": "user", "content": text[: len(text) // 3]},
                                             {"role": "assistant", "content": text}]}) + "\n")
    model_bin = os.path.join(os.path.dirname(os.path.abspath(a.musacoder)), "musacoder-model")
    runs = {}
    for name, env in (("fused", {}), ("unfused", {"MUSACODER_UNFUSED_SWIGLU": "1"})):
        out = os.path.join(a.out, name)
        r = subprocess.run([model_bin, "train", "sft", "--model", model, "--data", data, "--out", out, "--max-steps", "3",
                            "--tokens-per-step", "2048", "--micro-batch-tokens", "1024", "--max-len", "1024", "--lr", "1e-3", "--dtype", "bf16",
                            "--device", "cuda", "--no-progress"], capture_output=True, text=True, env={**os.environ, **env})
        if r.returncode != 0:
            sys.exit(f"{name}: {r.stderr[-2000:]}")
        runs[name] = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    from safetensors.torch import load_file
    w = {k: load_file(os.path.join(a.out, k, "checkpoints", "step-00000003", "model.safetensors")) for k in runs}
    loss_diff = max(abs(x["loss"] - y["loss"]) for x, y in zip(runs["fused"], runs["unfused"]))
    gn_diff = max(abs(x["grad_norm"] - y["grad_norm"]) for x, y in zip(runs["fused"], runs["unfused"]))
    w_diff = max((w["fused"][k].float() - w["unfused"][k].float()).abs().max().item() for k in w["fused"])
    bitwise = loss_diff == 0 and gn_diff == 0 and w_diff == 0
    print(f"fused vs unfused SwiGLU, 3 bf16 steps on {torch.cuda.get_device_name(0)}: losses "
          f"{[round(x['loss'], 6) for x in runs['fused']]}; max |loss diff| {loss_diff:.3g}, max |grad norm diff| "
          f"{gn_diff:.3g}, max |weight diff| {w_diff:.3g} -> {'bitwise equal' if bitwise else 'not bitwise equal'}")
    ok = loss_diff <= 1e-3 * abs(runs["unfused"][0]["loss"])
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
