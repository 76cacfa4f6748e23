"""`musacoder train sft` against PyTorch on the CPU, with tiny random Qwen2 (untied) and Qwen3
(tied) models the test makes: rendering and loss masks against the `tokenizers` library, two
optimizer steps against transformers + torch.optim.AdamW (same clipping, decay and schedule),
packed = unpacked, activation checkpointing = none, a killed run resumed = an uninterrupted
one, checkpoints that load in transformers, 2 ranks on gloo (torchrun) = 1 rank, TensorBoard
files the tensorboard package reads, and clear errors for bad input."""
import glob
import json
import math
import os
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

import tiny_models  # noqa: E402
from chatml_reference import render  # noqa: E402

from run_record import check_run_record  # noqa: E402
import mc_cli  # noqa: E402
from mc_cli import BINARY, read_jsonl, write_jsonl  # noqa: E402
pytestmark = pytest.mark.skipif(not os.path.exists(BINARY), reason="musacoder not built (scripts/build.sh)")
if os.path.exists(BINARY) and "train" not in subprocess.run([BINARY, "--help"], capture_output=True, text=True).stdout:
    pytestmark = pytest.mark.skip(reason="musacoder built without libtorch (MUSACODER_WITH_TORCH=OFF)")


def mc(*args, check=True, timeout=600, **kw):
    return mc_cli.run(*args, check=check, timeout=timeout, **kw)


WORDS = ["def", "forward", "self", "return", "torch", "relu", "kernel", "float", "void", "add", "softmax", "rows",
         "Write", "fast", "CUDA", "kernels", "__global__", "int", "blockIdx"]


def chat_rows(n, seed=0):
    g = torch.Generator().manual_seed(seed)

    def text(k):
        return " ".join(WORDS[i] for i in torch.randint(0, len(WORDS), (k,), generator=g).tolist())
    rows = []
    for i in range(n):
        msgs = [{"role": "user", "content": text(3 + i % 5)}, {"role": "assistant", "content": text(4 + (i * 3) % 7)}]
        if i % 3 == 0:
            msgs = [{"role": "system", "content": "You write fast CUDA kernels."}] + msgs + [
                {"role": "user", "content": text(2)}, {"role": "assistant", "content": text(3)}]
        rows.append({"messages": msgs})
    return rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("train")
    models = {}
    for arch, tie in (("qwen2", False), ("qwen3", True)):
        d = str(base / arch)
        tiny_models.make_model(d, arch, tie=tie)
        models[arch] = d
    data = write_jsonl(base / "data.jsonl", chat_rows(12))
    return base, models, data


def lr_at(step, lr, warmup, total, kind="cosine", min_lr=0.0):
    if step < warmup:
        return lr * (step + 1) / warmup
    if kind == "constant":
        return lr
    progress = min(1.0, (step - warmup) / max(1, total - warmup - 1))
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def reference_train(model_dir, examples, steps, lr, wd, clip, warmup, total, kind="cosine", per_step=None):
    """transformers + torch.optim.AdamW: each step's loss is the sum over its target tokens
    divided by their count; decay on matrices only; clip_grad_norm_; the schedule above."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    named = list(model.named_parameters())
    opt = torch.optim.AdamW([{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": wd},
                             {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.999), eps=1e-8)
    losses, snapshots = [], []
    for s in range(steps):
        batch = per_step(s) if per_step else examples
        total_targets = sum(sum(m[1:]) for _, m in batch)
        opt.zero_grad()
        loss_sum = 0.0
        for ids, mask in batch:
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
            sel = torch.tensor(mask[1:]).bool()
            l = torch.nn.functional.cross_entropy(logits[sel], torch.tensor(ids[1:])[sel], reduction="sum")
            (l / total_targets).backward()
            loss_sum += l.item()
        losses.append(loss_sum / total_targets)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(s, lr, warmup, total, kind)
        opt.step()
        snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return model, losses, snapshots


def sft(model, data, out, *extra, check=True, env=None):
    return mc("train", "sft", "--model", model, "--data", data, "--out", str(out), "--device", "cpu", "--no-progress",
              "--max-len", "128", "--micro-batch-tokens", "128", *extra, check=check, env=env)


def checkpoint_weights(out, step):
    return load_file(os.path.join(str(out), "checkpoints", f"step-{step:08d}", "model.safetensors"))


def train_losses(out):
    return [r["loss"] for r in read_jsonl(os.path.join(str(out), "metrics.jsonl")) if r["kind"] == "train"]


def test_rendering_and_loss_mask_match_the_documented_template(setup, tmp_path):
    base, models, _ = setup
    tok = Tokenizer.from_file(os.path.join(models["qwen2"], "tokenizer.json"))
    repair = {"messages": [{"role": "user", "content": "Write a ReLU kernel"},
                           {"role": "assistant", "content": "__global__ void relu( // unfinished", "weight": 0},
                           {"role": "user", "content": "The verifier rejected your solution: compile_error"},
                           {"role": "assistant", "content": "__global__ void relu(float* x) {}"}]}
    rows = chat_rows(6, seed=3) + [{"prompt": "Write fast kernels", "completion": "__global__ void add"},
                                   {"text": "def forward(self): return torch.relu"}, repair]
    inp = write_jsonl(tmp_path / "rows.jsonl", rows)
    mc("tokenize", "--tokenizer", os.path.join(models["qwen2"], "tokenizer.json"), "--input", inp,
       "--output", str(tmp_path / "out.jsonl"), "--training", "--no-progress")
    got = read_jsonl(tmp_path / "out.jsonl")
    for row, g in zip(rows, got):
        ids, mask = render(tok, row)
        assert g["ids"] == ids and g["loss_mask"] == mask
        if "text" in row:
            continue
        # The masked tokens are exactly the assistant turns' contents, each with its <|im_end|>.
        msgs = row.get("messages") or [{"role": "assistant", "content": row["completion"]}]
        want = "".join(t["content"] + "<|im_end|>" for t in msgs if t["role"] == "assistant" and t.get("weight", 1))
        assert tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False) == want
        # and the whole sequence is the ChatML rendering.
        full = "".join(f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>\n" for t in row.get("messages", []))
        if full:
            assert tok.decode(ids, skip_special_tokens=False) == full


def test_long_documents_are_split_not_truncated(setup, tmp_path):
    # Pretraining reads {"text"} documents longer than --max-len (128 here): each is split into
    # consecutive pieces of 128 tokens, and the step equals the PyTorch reference on those pieces.
    base, models, _ = setup
    tok = Tokenizer.from_file(os.path.join(models["qwen3"], "tokenizer.json"))
    rows = [{"text": " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(300))},
            {"text": "def forward(self): return torch.relu"}]
    data = write_jsonl(tmp_path / "docs.jsonl", rows)
    r = sft(models["qwen3"], data, tmp_path / "run", "--max-steps", "1", "--tokens-per-step", "100000", "--lr", "1e-3",
            "--warmup-steps", "1", "--weight-decay", "0", "--grad-clip", "1.0")
    pieces = []
    for row in rows:
        ids, mask = render(tok, row)
        pieces += [(ids[at:at + 128], mask[at:at + 128]) for at in range(0, len(ids), 128) if len(ids) - at >= 2]
    assert len(render(tok, rows[0])[0]) > 2 * 128 and len(pieces) >= 4
    assert f"sft: {len(pieces)} examples" in r.stderr and "1 documents split" in r.stderr, r.stderr
    _, losses, _ = reference_train(models["qwen3"], pieces, 1, 1e-3, 0.0, 1.0, 1, 1)
    got = train_losses(tmp_path / "run")
    assert abs(got[0] - losses[0]) < 1e-5 * max(1, abs(losses[0])), (got, losses)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_two_steps_equal_pytorch_adamw(setup, tmp_path, arch):
    base, models, data = setup
    tok = Tokenizer.from_file(os.path.join(models[arch], "tokenizer.json"))
    examples = [render(tok, r) for r in read_jsonl(data)]
    # Every step is the whole epoch (tokens per step above the data's), split over several
    # packed micro-batches; warmup then cosine over 3 steps; clipping active.
    sft(models[arch], data, tmp_path / "run", "--max-steps", "3", "--tokens-per-step", "100000", "--lr", "1e-3",
        "--warmup-steps", "1", "--weight-decay", "0.1", "--grad-clip", "0.5", "--save-every", "1", "--keep", "5")
    ref, losses, snaps = reference_train(models[arch], examples, 3, 1e-3, 0.1, 0.5, 1, 3)
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["micro_batches"] > 1
    for r, want, s in zip(rows, losses, range(3)):
        assert abs(r["loss"] - want) < 1e-5 * max(1, abs(want)), (r["loss"], want)
        assert abs(r["lr"] - lr_at(s, 1e-3, 1, 3)) < 1e-12
    for step in (1, 3):
        got = checkpoint_weights(tmp_path / "run", step)
        for name, want in snaps[step - 1].items():
            assert name in got, name
            diff = (got[name].float() - want).abs().max().item()
            assert diff < 2e-5, f"step {step} {name}: max |diff| {diff}"
    # The mid-run checkpoint is a Hugging Face model: transformers loads it, logits identical
    # to the reference's after the same step.
    mid = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "run" / "checkpoints" / "step-00000001"), dtype=torch.float32)
    ref1 = transformers.AutoModelForCausalLM.from_pretrained(models[arch], dtype=torch.float32)
    ref1.load_state_dict(snaps[0], strict=False)
    x = torch.tensor([examples[0][0]])
    with torch.no_grad():
        assert torch.allclose(mid(x).logits, ref1(x).logits, atol=1e-4, rtol=1e-4)
    assert os.path.exists(tmp_path / "run" / "checkpoints" / "step-00000001" / "tokenizer.json")


def test_packed_unpacked_and_checkpointed_layers_agree(setup, tmp_path):
    base, models, data = setup
    common = ["--max-steps", "2", "--tokens-per-step", "400", "--lr", "1e-3", "--schedule", "constant"]
    sft(models["qwen3"], data, tmp_path / "packed", *common)
    sft(models["qwen3"], data, tmp_path / "unpacked", *common, "--no-packing")
    sft(models["qwen3"], data, tmp_path / "ckpt", *common, "--grad-checkpoint")
    # --deterministic (libtorch's deterministic kernels; what it changes is on the GPU) says so
    # and trains the same steps.
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    r = sft(models["qwen3"], data, tmp_path / "det", *common, "--deterministic", env=env)
    assert "sft: deterministic algorithms (CUBLAS_WORKSPACE_CONFIG=:4096:8)" in r.stderr, r.stderr
    packed = read_jsonl(tmp_path / "packed" / "metrics.jsonl")
    unpacked = read_jsonl(tmp_path / "unpacked" / "metrics.jsonl")
    assert packed[0]["micro_batches"] < unpacked[0]["micro_batches"]
    for a, b in zip(train_losses(tmp_path / "packed"), train_losses(tmp_path / "unpacked")):
        assert abs(a - b) < 1e-5
    w = {k: checkpoint_weights(tmp_path / k, 2) for k in ("packed", "unpacked", "ckpt")}
    for name, t in w["packed"].items():
        assert (t - w["unpacked"][name]).abs().max().item() < 2e-5, name
        # Recomputing each layer in backward gives the same gradients: the same weights.
        assert torch.equal(t, w["ckpt"][name]), name
    assert train_losses(tmp_path / "packed") == train_losses(tmp_path / "ckpt")
    det = checkpoint_weights(tmp_path / "det", 2)
    assert all(torch.equal(t, det[name]) for name, t in w["packed"].items())


def test_killed_run_resumes_exactly(setup, tmp_path):
    base, models, data = setup
    common = ["--max-steps", "6", "--tokens-per-step", "300", "--lr", "1e-3", "--warmup-steps", "2", "--save-every", "2",
              "--keep", "2", "--seed", "7"]
    sft(models["qwen2"], data, tmp_path / "whole", *common)
    # Killed (SIGKILL, no chance to save) once step 3's metrics row is written: the last
    # checkpoint is step 2; --resume continues from it.
    r = sft(models["qwen2"], data, tmp_path / "cut", *common, "--exit-after-step", "3", check=False)
    assert r.returncode != 0
    assert sorted(os.listdir(tmp_path / "cut" / "checkpoints")) == ["step-00000002"]
    sft(models["qwen2"], data, tmp_path / "cut", *common, "--resume")
    assert train_losses(tmp_path / "cut") == train_losses(tmp_path / "whole")
    # run.json records both invocations, the resume's --resume among the options given.
    rec = check_run_record(tmp_path / "cut", "train sft", 2, given=("--lr", "--max-steps"))
    assert rec["invocations"][1]["options"]["--resume"] is True and rec["invocations"][0]["options"]["--resume"] is False
    assert rec["invocations"][0]["options"]["--lr"] == "1e-3"
    a, b = checkpoint_weights(tmp_path / "whole", 6), checkpoint_weights(tmp_path / "cut", 6)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # Only the last --keep checkpoints stay.
    assert sorted(os.listdir(tmp_path / "whole" / "checkpoints")) == ["step-00000004", "step-00000006"]


def test_tensorboard_events_and_plot_hold_the_metrics(setup, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    base, models, data = setup
    sft(models["qwen2"], data, tmp_path / "run", "--max-steps", "3", "--tokens-per-step", "300")
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    events = acc.Scalars("train/loss")
    assert [e.step for e in events] == [1, 2, 3]
    for e, want in zip(events, train_losses(tmp_path / "run")):
        assert abs(e.value - want) < 1e-5 * max(1, abs(want))
    # The same curves as an image.
    mc("plot", str(tmp_path / "run"), "--out", str(tmp_path / "curves.svg"), "--metrics", "loss,lr,grad_norm")
    svg = open(tmp_path / "curves.svg").read()
    assert svg.startswith("<svg") and svg.count("<polyline") == 3 and ">loss<" in svg
    # A run that never happened (a recipe stage not run) is named and left out with --skip-missing.
    r = mc("plot", str(tmp_path / "run"), str(tmp_path / "never-run"), "--out", str(tmp_path / "c2.svg"), "--metrics", "loss",
           check=False)
    assert r.returncode == 2 and "no metrics.jsonl" in r.stderr
    r = mc("plot", str(tmp_path / "run"), str(tmp_path / "never-run"), "--skip-missing", "--out", str(tmp_path / "c2.svg"),
           "--metrics", "loss")
    assert "never-run has no metrics.jsonl, left out" in r.stderr and open(tmp_path / "c2.svg").read().count("<polyline") == 1
    # A run keeps its colour in every panel, also where the run before it has no points.
    for name, row in (("a", {"step": 1, "y": 1.0}), ("b", {"step": 1, "x": 2.0, "y": 2.0})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    mc("plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c3.svg"), "--metrics", "x,y")
    lines = [l for l in open(tmp_path / "c3.svg").read().splitlines() if l.startswith("<polyline")]
    assert len(lines) == 3 and sum('stroke="#d62728"' in l for l in lines) == 2, lines
    # Runs whose rows are all of one kind (RL's "rl") are named by the run alone in the legend.
    for name in ("a", "b"):
        (tmp_path / name / "metrics.jsonl").write_text(json.dumps({"kind": "rl", "step": 1, "y": 1.0}) + "\n")
    mc("plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c4.svg"), "--metrics", "y")
    svg = open(tmp_path / "c4.svg").read()
    assert ">a<" in svg and ">b<" in svg and ">a rl<" not in svg, svg
    # Files side by side in one folder (bench/rl_pipeline.py's NAME-metrics.jsonl) by their names.
    for name in ("turns", "async"):
        (tmp_path / f"{name}-metrics.jsonl").write_text(json.dumps({"kind": "rl", "step": 1, "y": 1.0}) + "\n")
    mc("plot", str(tmp_path / "turns-metrics.jsonl"), str(tmp_path / "async-metrics.jsonl"), "--out", str(tmp_path / "c5.svg"),
       "--metrics", "y")
    svg = open(tmp_path / "c5.svg").read()
    assert ">turns<" in svg and ">async<" in svg, svg


def test_two_gloo_ranks_equal_one_rank(setup, tmp_path):
    torchrun = shutil.which("torchrun")
    if not torchrun:
        pytest.skip("torchrun is not installed (it comes with the torch wheel)")
    base, models, data = setup
    common = ["--max-steps", "2", "--tokens-per-step", "400", "--lr", "1e-3", "--bucket-mb", "0.01"]
    sft(models["qwen2"], data, tmp_path / "one", *common)
    model_bin = os.path.join(os.path.dirname(BINARY), "musacoder-model")
    cmd = [torchrun, "--no-python", "--nproc-per-node", "2", "--master-port", "29611", model_bin, "train", "sft",
           "--model", models["qwen2"], "--data", data, "--out", str(tmp_path / "two"), "--device", "cpu", "--no-progress",
           "--max-len", "128", "--micro-batch-tokens", "128", *common]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    one, two = read_jsonl(tmp_path / "one" / "metrics.jsonl"), read_jsonl(tmp_path / "two" / "metrics.jsonl")
    assert [x["micro_batches"] for x in one] == [x["micro_batches"] for x in two]
    for a, b in zip(one, two):
        assert abs(a["loss"] - b["loss"]) < 1e-6 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-5
    a, b = checkpoint_weights(tmp_path / "one", 2), checkpoint_weights(tmp_path / "two", 2)
    for k in a:
        assert (a[k] - b[k]).abs().max().item() < 1e-6, k
    # Each rank wrote its optimizer shard.
    assert len(glob.glob(str(tmp_path / "two" / "checkpoints" / "step-00000002" / "optimizer-rank*-of-00002.safetensors"))) == 2


def test_clear_errors(setup, tmp_path):
    base, models, data = setup
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(chat_rows(1)[0]) + "\n" + '{"messages": [{"role": "user", "content": "hi"}\n')
    r = sft(models["qwen2"], str(bad), tmp_path / "o1", "--max-steps", "1", check=False)
    assert r.returncode != 0 and "bad.jsonl:2:" in r.stderr and "not valid JSON" in r.stderr
    noasst = write_jsonl(tmp_path / "noasst.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    r = sft(models["qwen2"], noasst, tmp_path / "o2", "--max-steps", "1", check=False)
    assert r.returncode != 0 and "noasst.jsonl:1:" in r.stderr and "no assistant turn" in r.stderr
    badw = write_jsonl(tmp_path / "badw.jsonl", [{"messages": [{"role": "user", "content": "hi"},
                                                              {"role": "assistant", "content": "x", "weight": 0.5}]}])
    r = sft(models["qwen2"], badw, tmp_path / "o6", "--max-steps", "1", check=False)
    assert r.returncode != 0 and "badw.jsonl:1:" in r.stderr and '"weight" must be 0 or 1' in r.stderr
    allw0 = write_jsonl(tmp_path / "allw0.jsonl", [{"messages": [{"role": "user", "content": "hi"},
                                                                {"role": "assistant", "content": "x", "weight": 0}]}])
    r = sft(models["qwen2"], allw0, tmp_path / "o7", "--max-steps", "1", check=False)
    assert r.returncode != 0 and "all of weight 0" in r.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    r = sft(models["qwen2"], str(empty), tmp_path / "o3", "--max-steps", "1", check=False)
    assert r.returncode != 0 and "training data is empty" in r.stderr
    # A tokenizer with more ids than the model's vocabulary.
    small = str(tmp_path / "small")
    tiny_models.make_model(small, "qwen2", vocab=300)
    r = sft(small, data, tmp_path / "o4", "--max-steps", "1", check=False)
    assert r.returncode != 0 and "does not match the model" in r.stderr and "vocab_size is 300" in r.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = sft(models["qwen2"], data, blocker / "out", "--max-steps", "1", check=False)
    assert r.returncode != 0 and "output folder" in r.stderr and str(blocker) in r.stderr
    r = sft(models["qwen2"], data, tmp_path / "o5", "--max-steps", "1", "--resume", check=False)
    assert r.returncode != 0 and "--resume: no checkpoint" in r.stderr
