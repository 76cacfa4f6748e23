"""`--shard weights` (ZeRO-3: each rank stores 1/W of every decoder layer and gathers a layer only
while it computes) on the CPU over gloo, through the code path NCCL takes: 2, 3 and 4 ranks equal
one rank with the same global batch, loss for loss and weight for weight, for SFT (with packing,
activation checkpointing, an eval set, a rank left without micro-batches, layers whose size W does
not divide, hybrid sharding over two groups of two) and for one RL step; a killed sharded run resumes to the uninterrupted one; its
checkpoint is one Hugging Face folder transformers loads with the same logits; and a resume under
another sharding, shard group or number of ranks, or a shard group that does not divide the
ranks, is refused, naming it."""
import json
import os
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402

import tiny_models  # noqa: E402
import mc_cli  # noqa: E402
from mc_cli import HAS_MODEL, MODEL_BINARY, ROOT, read_jsonl, write_jsonl  # noqa: E402

pytestmark = pytest.mark.skipif(not HAS_MODEL or not shutil.which("torchrun"),
                                reason="musacoder-model not built, or no torchrun (it comes with the torch wheel)")

WORDS = ["def", "forward", "self", "return", "torch", "relu", "kernel", "float", "void", "add", "softmax", "rows",
         "Write", "fast", "CUDA", "kernels", "__global__", "int", "blockIdx"]


def chat_rows(n, seed=0):
    g = torch.Generator().manual_seed(seed)

    def text(k):
        return " ".join(WORDS[i] for i in torch.randint(0, len(WORDS), (k,), generator=g).tolist())
    return [{"messages": [{"role": "user", "content": text(3 + i % 5)},
                          {"role": "assistant", "content": text(4 + (i * 3) % 7)}]} for i in range(n)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("shard")
    models = {}
    for arch, tie in (("qwen2", False), ("qwen3", True)):
        models[arch] = str(base / arch)
        tiny_models.make_model(models[arch], arch, tie=tie)
    data = write_jsonl(base / "data.jsonl", chat_rows(12))
    held_out = write_jsonl(base / "eval.jsonl", chat_rows(5, seed=1))
    return base, models, data, held_out


PORTS = iter(range(29631, 29700))


def launch(ranks, *args, check=True):
    """`musacoder-model ARGS` on one rank, or under torchrun on `ranks` gloo ranks."""
    args = [str(a) for a in args]
    if ranks == 1:
        return mc_cli.run(*args, check=check, binary=MODEL_BINARY, timeout=600)
    cmd = ["torchrun", "--no-python", "--nproc-per-node", str(ranks), "--master-port", str(next(PORTS)), MODEL_BINARY, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr[-4000:]
    return r


def sft(ranks, model, data, out, *extra, check=True):
    return launch(ranks, "train", "sft", "--model", model, "--data", data, "--out", out, "--device", "cpu", "--no-progress",
                  "--max-len", "128", "--micro-batch-tokens", "128", "--lr", "1e-3", "--bucket-mb", "0.01", *extra,
                  check=check)


def weights(out, step):
    return load_file(os.path.join(str(out), "checkpoints", f"step-{step:08d}", "model.safetensors"))


def assert_same(one, many, tol=1e-6):
    a, b = read_jsonl(one / "metrics.jsonl"), read_jsonl(many / "metrics.jsonl")
    assert [x["step"] for x in a] == [x["step"] for x in b] and a
    for x, y in zip(a, b):
        assert x["kind"] == y["kind"]
        for k in ("loss", "grad_norm", "micro_batches"):
            if k in x:
                assert abs(x[k] - y[k]) <= tol * max(1, abs(x[k])), (x["step"], k, x[k], y[k])
    step = a[-1]["step"]
    wa, wb = weights(one, step), weights(many, step)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert (wa[k] - wb[k]).abs().max().item() <= tol, k


@pytest.mark.parametrize("ranks,arch,extra,sharding", [
    (2, "qwen2", (), ()),
    # Tied embeddings, recomputed layers, 3 micro-batches a step over 4 ranks (one makes an idle
    # pass) and, at 3 ranks, layers of a size 3 does not divide (their buffers are padded).
    (4, "qwen3", ("--grad-checkpoint",), ()),
    (3, "qwen3", ("--grad-checkpoint",), ()),
    # Hybrid: two shard groups of two ranks, replicated across.
    (4, "qwen2", (), ("--shard-group-size", "2")),
])
def test_sharded_sft_equals_one_rank(setup, tmp_path, ranks, arch, extra, sharding):
    base, models, data, held_out = setup
    common = ["--max-steps", "3", "--tokens-per-step", "300", "--eval-data", held_out, "--eval-every", "1", *extra]
    sft(1, models[arch], data, tmp_path / "one", *common)
    sft(ranks, models[arch], data, tmp_path / "sharded", *common, "--shard", "weights", *sharding)
    rows = read_jsonl(tmp_path / "sharded" / "metrics.jsonl")
    assert any(r.get("eval_loss") for r in rows)
    if ranks == 4 and arch == "qwen3":
        assert all(r["micro_batches"] % 4 for r in rows if r["kind"] == "train"), rows
    assert_same(tmp_path / "one", tmp_path / "sharded")
    # One rank with sharded weights is the same arithmetic as without, bit for bit (the gradient
    # norm is summed per parameter, whatever the buckets).
    if ranks == 2:
        sft(1, models[arch], data, tmp_path / "one-sharded", *common, "--shard", "weights")
        assert_same(tmp_path / "one", tmp_path / "one-sharded", tol=0)


def test_sharded_resume_and_checkpoint(setup, tmp_path):
    base, models, data, _ = setup
    common = ["--max-steps", "4", "--tokens-per-step", "300", "--save-every", "1", "--keep", "5", "--shard", "weights"]
    sft(2, models["qwen2"], data, tmp_path / "whole", *common)
    r = sft(2, models["qwen2"], data, tmp_path / "cut", *common, "--exit-after-step", "3", check=False)
    assert r.returncode != 0
    assert sorted(os.listdir(tmp_path / "cut" / "checkpoints"))[-1] == "step-00000002"
    # Another sharding, or another number of ranks, is refused, naming what differs.
    r = sft(2, models["qwen2"], data, tmp_path / "cut", *common[:-2], "--resume", check=False)
    assert r.returncode != 0 and "--shard" in r.stderr and "shard=weights" in r.stderr, r.stderr[-2000:]
    r = sft(1, models["qwen2"], data, tmp_path / "cut", *common, "--resume", check=False)
    assert r.returncode != 0 and "written by 2 rank(s); this run has 1" in r.stderr, r.stderr[-2000:]
    r = sft(2, models["qwen2"], data, tmp_path / "cut", *common, "--resume", "--shard-group-size", "1", check=False)
    assert r.returncode != 0 and "shard_group=1" in r.stderr, r.stderr[-2000:]
    # A shard group that does not divide the world.
    r = sft(2, models["qwen2"], data, tmp_path / "bad", *common, "--shard-group-size", "3", check=False)
    assert r.returncode != 0 and "--shard-group-size 3 does not divide the number of ranks 2" in r.stderr, r.stderr[-2000:]
    sft(2, models["qwen2"], data, tmp_path / "cut", *common, "--resume")
    a = [x for x in read_jsonl(tmp_path / "whole" / "metrics.jsonl")]
    b = [x for x in read_jsonl(tmp_path / "cut" / "metrics.jsonl")]
    assert [x["loss"] for x in a] == [x["loss"] for x in b]
    wa, wb = weights(tmp_path / "whole", 4), weights(tmp_path / "cut", 4)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # The checkpoint is one Hugging Face folder: transformers loads it, with the logits of the
    # same weights loaded into the original model.
    ckpt = tmp_path / "whole" / "checkpoints" / "step-00000004"
    got = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32)
    want = transformers.AutoModelForCausalLM.from_pretrained(models["qwen2"], dtype=torch.float32)
    want.load_state_dict(wa, strict=False)
    x = torch.randint(0, 200, (2, 17))
    with torch.no_grad():
        assert torch.equal(got(x).logits, want(x).logits)


def test_sharded_rl_step_equals_one_rank(tmp_path):
    """One RL step, every answer planted (so the ranks' split of the sampling cannot differ): two
    ranks with sharded weights equal one rank without, and the engine samples exactly the weights
    the trainer stepped (MirrorPop's log ratio stays at the numerics' noise)."""
    problems = tmp_path / "problems"
    problems.mkdir()
    for p in ("1_Add.py", "2_ReLU.py"):
        shutil.copy(os.path.join(ROOT, "tests", "cases", "problems", p), problems / p)
    model = tmp_path / "model"
    tiny_models.make_model(str(model), "qwen2", max_positions=4096)
    cases = os.path.join(ROOT, "tests", "cases", "rft")

    def fenced(name):
        return f"Here is the kernel.\n\n```python\n{open(os.path.join(cases, name)).read()}```\n"
    rows = [{"problem": "1_Add", "turn": 1, "sample": 0, "answer": fenced("add_base.py")},
            {"problem": "1_Add", "turn": 1, "sample": 1, "answer": fenced("add_wrong.py")},
            {"problem": "1_Add", "turn": 2, "sample": 1, "answer": fenced("add_base.py")}]
    rows += [{"problem": "2_ReLU", "turn": t, "sample": s, "answer": fenced("relu_broken.py")} for t in (1, 2) for s in (0, 1)]
    plant = write_jsonl(tmp_path / "plant.jsonl", rows)

    def rl(ranks, out, *extra):
        return launch(ranks, "train", "rl", "--model", model, "--problems", problems, "--out", out, "--format", "kernelbench",
                      "--device", "cpu", "--verify-device", "cpu", "--cache-dir", tmp_path / "cache",
                      "--timing-budget", "0.1", "--speed-weight", "0", "--group-size", "2", "--prompts-per-step", "2",
                      "--max-turns", "2", "--max-new-tokens", "8", "--max-seq-len", "4096", "--micro-batch-tokens", "4096",
                      "--plant", plant, "--no-progress", "--seed", "3", "--lr", "1e-3", "--max-steps", "2",
                      "--bucket-mb", "0.01", *extra)
    rl(1, tmp_path / "one")
    rl(2, tmp_path / "sharded", "--shard", "weights")
    a, b = read_jsonl(tmp_path / "one" / "metrics.jsonl"), read_jsonl(tmp_path / "sharded" / "metrics.jsonl")
    assert [x["step"] for x in a] == [x["step"] for x in b] == [1, 2]
    for x, y in zip(a, b):
        for k in ("reward_mean", "pass_rate_turn1", "grad_norm", "trained_tokens"):
            if k in x:
                assert y[k] == pytest.approx(x[k], rel=1e-5, abs=1e-7), (x["step"], k)
        assert y["updated"] and y["mirrorpop_mean_abs_log_ratio"] < 1e-4, y
    # Weights: equal to 1e-6 but for a few elements. Adam divides by sqrt(v) + eps, so where a
    # gradient is near zero the update is about lr * g / eps, and the two ranks' summation order
    # (gradients 1e-10 apart) moves it by up to 1e5 times that at lr 1e-3 (seen: 55 of 109k
    # elements, at most 6e-5, with grad norms equal to 1e-7). A sharding bug moves many elements
    # by about lr.
    wa, wb = weights(tmp_path / "one", 2), weights(tmp_path / "sharded", 2)
    off = sum(int(((wa[k] - wb[k]).abs() > 1e-6).sum()) for k in wa)
    total = sum(wa[k].numel() for k in wa)
    assert off <= total // 1000, (off, total)
    for k in wa:
        assert (wa[k] - wb[k]).abs().max().item() < 1e-4, k
