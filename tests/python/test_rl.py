"""`musacoder train rl` end to end on the CPU: a tiny random Qwen2 policy, the real MooreEval in
CPU mode, and planted answers (what the tiny model writes is not code) that reach every branch:
a pass at turn 1; a fail, then a pass at turn 2 after feedback; a group that fails entirely,
enters the retry buffer, and comes back as a repair task that is repaired. Also: the update's
gradient equals a PyTorch reference of the clipped GRPO loss on the same batch, only turn-1
tokens are trained, a killed run resumes to the same numbers, and bad input gets clear errors."""
import concurrent.futures
import json
import os
import shutil

import pytest

import tiny_models

from run_record import check_run_record  # noqa: E402
import mc_cli  # noqa: E402
from mc_cli import HAS_MODEL, ROOT, read_jsonl  # noqa: E402
CASES = os.path.join(ROOT, "tests", "cases", "rft")
pytestmark = pytest.mark.skipif(not HAS_MODEL, reason="musacoder-model not built (libtorch)")


def mc(*args, check=True, timeout=900, **kw):
    return mc_cli.run(*args, check=check, timeout=timeout, **kw)


RELU_OK = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor relu_cpu(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] > 0.f ? px[i] : 0.f;
    return out;
}
"""

ext = load_inline(name="rl_relu_ok", cpp_sources=src, functions=["relu_cpu"], with_cuda=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cpu(x.contiguous())
'''


def fenced(code):
    return f"Here is the kernel.\n\n```python\n{code}```\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("rl")
    problems = base / "problems"
    problems.mkdir()
    for p in ("1_Add.py", "2_ReLU.py"):
        shutil.copy(os.path.join(ROOT, "tests", "cases", "problems", p), problems / p)
    model = base / "model"
    tiny_models.make_model(str(model), "qwen2", max_positions=4096)
    add_ok = fenced(open(os.path.join(CASES, "add_base.py")).read())
    add_wrong = fenced(open(os.path.join(CASES, "add_wrong.py")).read())
    relu_broken = fenced(open(os.path.join(CASES, "relu_broken.py")).read())
    rows = [
        # 1_Add, every step: sample 0 passes at turn 1; sample 1 fails, then passes after feedback.
        {"problem": "1_Add", "turn": 1, "sample": 0, "answer": add_ok},
        {"problem": "1_Add", "turn": 1, "sample": 1, "answer": add_wrong},
        {"problem": "1_Add", "turn": 2, "sample": 1, "answer": add_ok},
        # 2_ReLU at step 1: the whole group fails, at both turns -> the retry buffer.
        {"problem": "2_ReLU", "step": 1, "turn": 1, "sample": 0, "answer": relu_broken},
        {"problem": "2_ReLU", "step": 1, "turn": 1, "sample": 1, "answer": relu_broken},
        {"problem": "2_ReLU", "step": 1, "turn": 2, "sample": 0, "answer": relu_broken},
        {"problem": "2_ReLU", "step": 1, "turn": 2, "sample": 1, "answer": relu_broken},
        # Step 2 re-issues it as a repair task; sample 0 repairs it (sample 1 is the model's own).
        {"problem": "2_ReLU", "step": 2, "turn": 1, "sample": 0, "answer": fenced(RELU_OK)},
    ]
    plant = base / "plant.jsonl"
    plant.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return base, problems, model, plant


def rl_args(setup, out, *extra):
    base, problems, model, plant = setup
    return ["train", "rl", "--model", model, "--problems", problems, "--out", out, "--format", "kernelbench",
            "--device", "cpu", "--verify-device", "cpu", "--cache-dir", base / "cache", "--timing-budget", "0.1",
            "--speed-weight", "0", "--group-size", "2", "--prompts-per-step", "2", "--max-turns", "2",
            "--max-new-tokens", "8", "--max-seq-len", "4096", "--micro-batch-tokens", "4096", "--bdr-prob", "1",
            "--samples-every", "1", "--plant", plant, "--no-progress", "--seed", "3", "--lr", "1e-3", *extra]


def replaced(args, **opts):
    """args with --name values replaced (CLI11 takes an option once)."""
    args = list(args)
    for name, value in opts.items():
        flag = "--" + name.replace("_", "-")
        i = args.index(flag)
        if value is None:
            del args[i:i + 2]
        else:
            args[i + 1] = value
    return args


def without_timing(row):
    # Wall-clock times (and which verdicts came after the wait began), and the measured speedups
    # (reward does not use them: --speed-weight 0).
    skip = {"generate_s", "verify_wait_s", "train_s", "step_s", "gen_tokens_per_s", "time", "speedup_geomean_correct",
            "fast1_share", "verify_overhead", "anchor_s", "wait_answers", "wait_work_s",
            "asked_while_decoding", "drain_s", "submit_s", "ask_s"}
    # gen_*: the engine's clocks, and its counts, which a resumed process (new graphs, a batch
    # made before the checkpoint) splits differently.
    return {k: v for k, v in row.items() if k not in skip and not k.startswith("gen_")}


def test_rl_steps_reach_every_branch(setup):
    base = setup[0]
    out = base / "run"
    dump = base / "dump"
    mc(*rl_args(setup, out, "--max-steps", "3", "--save-every", "1", "--grad-clip", "0", "--dump-steps", dump))
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    s1, s2, s3 = rows
    # Step 1: 1_Add passes at turn 1 (sample 0) and at turn 2 after feedback (sample 1); 2_ReLU
    # fails entirely and enters the buffer.
    assert s1["pass_rate_turn1"] == pytest.approx(1 / 4) and s1["rescued_turn2"] == pytest.approx(1 / 4)
    assert s1["solved_by_turn2"] == pytest.approx(2 / 4)
    assert s1["all_failed_share"] == pytest.approx(0.5) and s1["bdr_added"] == 1 and s1["bdr_size"] == 1
    # 1_Add's signal is a pass against a failure, not speed alone (speed_only_share).
    assert s1["speed_only_share"] == 0 and s1["zero_signal_share"] == pytest.approx(0.5)
    # Both of its answers push the update (neg_push_share: the failing answer's part of it).
    assert 0 < s1["neg_push_share"] < 1
    assert s1["verdicts"] == {"ok": 2, "incorrect": 1, "compile_error": 4}, s1["verdicts"]
    assert s1["verdicts_turn1"] == {"ok": 1, "incorrect": 1, "compile_error": 2}, s1["verdicts_turn1"]
    # Identical answers are judged once: 1_Add's turn-2 answer is sample 0's turn-1 answer, and
    # 2_ReLU's four answers are one text.
    assert s1["twin_answers_share"] == pytest.approx(4 / 7)
    # Step 2: the buffered problem comes back as a repair task (first slot) and is repaired.
    assert s2["repair_prompts"] == 1 and s2["bdr_reissued"] == 1
    assert s2["bdr_recovered"] == 1 and s2["bdr_repaired_removed"] == 1 and s2["bdr_size"] == 0
    # Step 2 answers 1_Add again with step 1's answers: their verdicts are remembered, not judged
    # again (rl/verdict_memory.h), and they are the same verdicts.
    assert s1["reused_verdicts_share"] == 0 and s2["reused_verdicts_share"] > 0
    t2 = read_jsonl(out / "samples" / "step-00000002.jsonl")
    add1 = {t["sample"]: [x["verdict"] for x in t["turns"]] for t in read_jsonl(out / "samples" / "step-00000001.jsonl")
            if t["problem"] == "1_Add"}
    assert {t["sample"]: [x["verdict"] for x in t["turns"]] for t in t2 if t["problem"] == "1_Add"} == add1
    # Step 3: nothing waits, so two fresh prompts; 2_ReLU, now answered by the model alone,
    # fails entirely again and re-enters the buffer.
    assert s3["repair_prompts"] == 0 and s3["bdr_added"] == 1 and s3["bdr_size"] == 1
    # What the wait was made of: answers judged after generation ended, and their work by stage.
    # Step 1 judges every distinct answer fresh, and the CPU judge runs their trials.
    assert 0 < s1["wait_answers"] <= 7 and s1["wait_work_s"]["compile"] >= 0, s1
    # Submission to verdict, and the part of it neither compiling nor judging (queues).
    w = s1["wait_work_s"]
    assert w["wall"] >= w["compile"] and 0 <= w["queued"] <= w["wall"], w
    assert s1["wait_work_s"].get("trials", 0) > 0, s1["wait_work_s"]
    # ... and the trials' parts: the judge's reference runs and the candidate's own.
    assert s1["wait_work_s"].get("trials.reference", 0) > 0 and s1["wait_work_s"].get("trials.candidate", 0) > 0, s1
    # ... and how their candidate processes started (imports, ...), ahead of time as spares.
    assert s1["wait_work_s"].get("start.total", 0) > 0 and "start.imports" in s1["wait_work_s"], s1["wait_work_s"]
    # ... and how many were forked by the zygote or started afresh (a count per kind).
    kinds = {k: v for k, v in s1["wait_work_s"].items() if k.startswith("process.")}
    assert kinds and set(kinds) <= {"process.forked", "process.started"} and sum(kinds.values()) >= 1, kinds
    # Sampling slips: a random tiny model gives almost every token of any answer p < 0.1.
    assert s1["turn1_low_prob_per_1000"] > 500, s1["turn1_low_prob_per_1000"]
    for r in rows:
        assert r["updated"] and r["trained_tokens"] > 0 and r["infra_trajectories"] == 0
        assert r["mirrorpop_filtered_share"] == 0 and r["mirrorpop_mean_abs_log_ratio"] < 1e-4  # same weights, fp32
    # Trajectories to read: the repair task's conversation holds the failed answer and its feedback.
    traj = read_jsonl(out / "samples" / "step-00000002.jsonl")
    rep = [t for t in traj if t["repair"]]
    assert rep and rep[0]["problem"] == "2_ReLU"
    roles = [m["role"] for m in rep[0]["prompt"]]
    assert roles == ["user", "assistant", "user"] and "rejected" in rep[0]["prompt"][2]["content"]
    assert "relu_cpu" in rep[0]["prompt"][1]["content"]
    t1 = read_jsonl(out / "samples" / "step-00000001.jsonl")
    add = {t["sample"]: t for t in t1 if t["problem"] == "1_Add"}
    assert add[0]["first_pass"] == 1 and [x["verdict"] for x in add[0]["turns"]] == ["ok"]
    assert add[1]["first_pass"] == 2 and [x["verdict"] for x in add[1]["turns"]] == ["incorrect", "ok"]
    # Later answers that ran to --max-new-tokens: planted ones stop, the tiny model's run to 8 tokens.
    later = [x["finish_reason"] for t in t1 for x in t["turns"][1:]]
    assert len(later) == 3 and s1["later_truncated_share"] == pytest.approx(later.count("length") / 3)
    # PrimeEcho with lambda = 0: s = 1 for a pass; the wrong sum passes no trial (s = -1).
    assert add[0]["reward"] == pytest.approx(0.75 * 1 + 0.25 * 1 + 0.1)
    assert add[1]["reward"] == pytest.approx(0.75 * -1 + 0.25 * 1 + 0.1 * 0.5)
    assert add[0]["advantage"] == pytest.approx(2 ** -0.5, rel=1e-4) and add[1]["advantage"] == pytest.approx(-(2 ** -0.5), rel=1e-4)
    # Only turn-1 tokens are trained: step 1 trains the two 1_Add answers of turn 1 (2_ReLU's
    # group carries no signal), never the turn-2 answer.
    batch = json.load(open(dump / "step-00000001.json"))
    assert len(batch["sequences"]) == 2
    turn1 = sorted(x["turns"][0]["tokens"] for x in add.values())
    assert sorted(len(s["tokens"]) - s["n_context"] for s in batch["sequences"]) == turn1
    assert s1["trained_tokens"] == sum(turn1)
    check_gradient_against_pytorch(setup[2], dump, out)
    # TensorBoard has the same curves.
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(out / "tensorboard"))


def check_gradient_against_pytorch(model_dir, dump, out):
    """Each dumped step: the gradient the update used equals PyTorch's gradient of the clipped
    surrogate, computed here with transformers on the weights the step started from."""
    import torch
    import transformers
    from safetensors.torch import load_file
    for step in (1, 2):
        start = model_dir if step == 1 else out / "checkpoints" / f"step-{step - 1:08d}"
        m = transformers.AutoModelForCausalLM.from_pretrained(str(start), torch_dtype=torch.float32)
        m.train(False)
        batch = json.load(open(dump / f"step-{step:08d}.json"))
        T, lo, hi, N = batch["temperature"], batch["clip_low"], batch["clip_high"], batch["normalizer"]
        m.zero_grad()
        total = 0
        for s in batch["sequences"]:
            ids = torch.tensor([s["tokens"]])
            c = s["n_context"]
            logits = m(ids).logits[0, c - 1:-1].float() / T
            lp = torch.log_softmax(logits, -1).gather(-1, ids[0, c:, None])[:, 0]
            ratio = torch.exp(lp - torch.tensor(s["old_logp"]))
            a = s["advantage"]
            per = -torch.minimum(ratio * a, torch.clamp(ratio, 1 - lo, 1 + hi) * a)
            if s["kept"]:
                total = total + per.sum()
        (total / N).backward()
        ours = load_file(str(dump / f"step-{step:08d}.safetensors"))
        ref = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
        assert set(ours) == set(ref), set(ours) ^ set(ref)
        for n in ref:
            torch.testing.assert_close(ours[n], ref[n], rtol=2e-4, atol=2e-6, msg=lambda e: f"step {step} {n}: {e}")


def test_resume_equals_uninterrupted(setup):
    """Turn by turn, killed after step 2 and resumed from step 1's checkpoint: the same rows and
    weights."""
    base = setup[0]
    straight, killed = base / "straight", base / "killed"
    # The anchor loss too: its start is measured once and kept in the checkpoint.
    anchor = base / "anchor.jsonl"
    anchor.write_text(json.dumps({"messages": [{"role": "user", "content": "Add two tensors."},
                                               {"role": "assistant", "content": fenced(RELU_OK)}]}) + "\n")
    args = ("--max-steps", "3", "--save-every", "1", "--anchor-data", anchor)
    mc(*rl_args(setup, straight, *args))
    kill_after_step_2(setup, killed, *args)
    assert [x["step"] for x in read_jsonl(killed / "metrics.jsonl")] == [1, 2]
    resume_from_step_1(setup, killed, *args)
    check_run_record(killed, "train rl", 2, given=("--max-steps", "--anchor-data"))
    a = assert_same_run(straight, killed)
    # Every step trains its own answers (on-policy) and moves the anchor loss.
    for x in a:
        assert x["updated"] and x["mirrorpop_mean_abs_log_ratio"] < 1e-4 and x["anchor_loss_change"] != 0, x
    # The retry buffer is in the checkpoint too.
    st = json.load(open(killed / "checkpoints" / "step-00000001" / "trainer_state.json"))
    assert [e["problem"] for e in st["retry_buffer"]["entries"]] == ["2_ReLU"]
    assert st["rollout"] == "turns" and st["format_version"] == 3



def test_older_checkpoints_resume_or_say_why(setup, tmp_path):
    """A checkpoint of format 2 (no "rollout": "async" said the schedule) resumes under the schedule
    it names; one made with a removed switch (--off-policy, --carry-repairs) is refused, naming it."""
    base = setup[0]
    straight = base / "straight"
    if not (straight / "metrics.jsonl").exists():
        mc(*rl_args(setup, straight, "--max-steps", "3", "--save-every", "1"))
    for name, fields, says in (("v2", {"format_version": 2}, None),
                               ("off-policy", {"pending": True}, "--off-policy or --carry-repairs"),
                               ("v2-async", {"format_version": 2, "async": True}, "ran with --rollout overlapped")):
        run = tmp_path / name
        (run / "checkpoints").mkdir(parents=True)
        shutil.copytree(straight / "checkpoints" / "step-00000001", run / "checkpoints" / "step-00000001")
        state = run / "checkpoints" / "step-00000001" / "trainer_state.json"
        st = json.loads(state.read_text())
        del st["rollout"]
        st.update(fields)
        state.write_text(json.dumps(st))
        r = mc(*rl_args(setup, run, "--max-steps", "2", "--save-every", "1", "--resume"), check=False)
        if says is None:
            assert r.returncode == 0 and "resumed from" in r.stderr, r.stderr[-2000:]
            assert [x["step"] for x in read_jsonl(run / "metrics.jsonl")] == [2]
        else:
            assert r.returncode != 0 and says in r.stderr, r.stderr[-2000:]


def kill_after_step_2(setup, killed, *args):
    """`train rl` with `args` into `killed`, stopped after step 2 (its checkpoint left unwritten:
    step 1's is the last)."""
    r = mc(*rl_args(setup, killed, *args, "--exit-after-step", "2"), check=False)
    assert r.returncode != 0


def resume_from_step_1(setup, killed, *args):
    """The run in `killed` resumed with `args`, from step 1's checkpoint."""
    r = mc(*rl_args(setup, killed, *args, "--resume"))
    assert "resumed from" in r.stderr and "step 1" in r.stderr, r.stderr


def assert_same_run(straight, killed, steps=3):
    """The resumed run's rows (less wall-clock times) and final weights equal the straight run's."""
    a = [without_timing(x) for x in read_jsonl(straight / "metrics.jsonl")]
    b = [without_timing(x) for x in read_jsonl(killed / "metrics.jsonl")]
    assert [x["step"] for x in b] == list(range(1, steps + 1))
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], float):
                assert y[k] == pytest.approx(x[k], rel=1e-5, abs=1e-7), (x["step"], k)
            else:
                assert y[k] == x[k], (x["step"], k)
    from safetensors.torch import load_file
    import torch
    wa = load_file(str(straight / "checkpoints" / f"step-{steps:08d}" / "model.safetensors"))
    wb = load_file(str(killed / "checkpoints" / f"step-{steps:08d}" / "model.safetensors"))
    for n in wa:
        torch.testing.assert_close(wa[n], wb[n], rtol=0, atol=1e-6)
    return a


def test_overlapped_rollouts(setup):
    """--rollout overlapped: the next step's first turn is decoded beside this step's turns, a
    failed answer's repair is asked for as soon as its verdict is in, later turns continue the
    engine's kept cache of their conversation, and a passing answer's timing waits until the
    engine stops. Step 1 is the turn-by-turn run's step 1 (the same weights sampled it): the same
    trajectories, verdicts, rewards and update. Step 2's answers were sampled before step 1's
    update (lr 1e-3 here): MirrorPop sees the drift and drops them all. Killed after step 2 and
    resumed from step 1's checkpoint, which holds step 2's first turn with its verdicts: the same
    run."""
    base = setup[0]
    args = ("--max-steps", "3", "--save-every", "1", "--grad-clip", "0")
    ref, out, killed = base / "run", base / "overlapped", base / "overlapped-killed"
    if not (ref / "metrics.jsonl").exists():
        mc(*rl_args(setup, ref, *args))
    mc(*rl_args(setup, out, *args, "--rollout", "overlapped"))
    a, r = read_jsonl(out / "metrics.jsonl"), read_jsonl(ref / "metrics.jsonl")
    assert [x["step"] for x in a] == [1, 2, 3]
    for k in ("verdicts", "reward_mean", "reward_std", "rescued_turn2", "all_failed_share", "trained_tokens",
              "trained_sequences", "grad_norm", "twin_answers_share", "bdr_added"):
        assert a[0][k] == pytest.approx(r[0][k], rel=1e-5, abs=1e-7), k
    assert a[0]["verdicts"] == {"ok": 2, "incorrect": 1, "compile_error": 4}, a[0]["verdicts"]

    def turns(run, step):
        return sorted((t["problem"], t["sample"], t["repair"], [x["verdict"] for x in t["turns"]], t["reward"])
                      for t in read_jsonl(run / "samples" / f"step-{step:08d}.jsonl"))
    assert turns(out, 1) == turns(ref, 1)
    assert a[0]["updated"] and a[0]["mirrorpop_mean_abs_log_ratio"] < 1e-4
    assert a[1]["mirrorpop_mean_abs_log_ratio"] > 0.1 and a[1]["mirrorpop_filtered_share"] == 1 and not a[1]["updated"]
    assert a[2]["updated"] and a[2]["mirrorpop_mean_abs_log_ratio"] < 1e-4
    # The retry buffer lags a step: step 2's prompts were drawn before step 1's all-failed group
    # entered it. Step 2 repairs 2_ReLU as a fresh prompt, and step 3, drawn before that was
    # known, still re-issues it.
    assert a[0]["bdr_added"] == 1 and a[1]["repair_prompts"] == 0 and a[1]["bdr_repaired_removed"] == 1
    assert a[2]["repair_prompts"] == 1
    # Answers asked for one by one are held to be prefilled together: the engine's counts are
    # in every row. Later turns continued their first turn's kept cache.
    assert all(x["gen_prefill_calls"] >= 1 and x["gen_admissions_held"] >= 0 for x in a)
    assert sum(x["gen_continued"] for x in a) > 0 and sum(x["gen_reused_tokens"] for x in a) > 0
    assert all(x["gen_continued"] == 0 for x in r)
    # The rollout loop's host work: every step handed answers to MooreEval; later turns' prompts
    # were made for the trajectories that failed.
    assert all(x["submit_s"] > 0 and x["ask_s"] >= 0 for x in a) and any(x["ask_s"] > 0 for x in a)
    # Answers given back while timing was held, among those waited for, and how often (at most
    # three times each): counted where there were any.
    for row in a:
        w = row["wait_work_s"]
        n = w.get("deferred.answers", 0)
        assert n <= row["wait_answers"] and n <= w.get("deferred.times", 0) <= 3 * n, w
    kill_after_step_2(setup, killed, *args, "--rollout", "overlapped")
    assert (killed / "checkpoints" / "step-00000001" / "rl-next-rank00000.json").exists()
    # A run resumes under the schedule it was made with.
    bad = mc(*rl_args(setup, killed, *args, "--resume"), check=False)
    assert bad.returncode != 0 and "--rollout overlapped" in bad.stderr and "give the same" in bad.stderr, bad.stderr[-2000:]
    resume_from_step_1(setup, killed, *args, "--rollout", "overlapped")
    assert_same_run(out, killed)
    assert_same_trajectories(out, killed, later_text=False)


def test_overlapped_through_the_service(setup):
    """Both schedules with MooreEval as a service (`musacoder serve` on loopback). Overlapped, the
    next step's answers are sent while this step's are outstanding, and each step collects only
    its own (the service verifier keeps answers it was not asked for). Two runs at once through
    the one service, as the recipe's RL arms share one: each collects only its own answers, and
    each is as when run in process."""
    base = setup[0]
    tmp = base / "serve"
    tmp.mkdir()
    args = ("--max-steps", "3", "--save-every", "1", "--grad-clip", "0")
    refs = [base / "run", base / "overlapped"]
    extra = [(), ("--rollout", "overlapped")]
    for ref, e in zip(refs, extra):
        if not (ref / "metrics.jsonl").exists():
            mc(*rl_args(setup, ref, *args, *e))
    with mc_cli.serving(tmp, "--device", "cpu", "--allow-inline-problems", "--cache-dir", base / "cache",
                        "--timing-budget", "0.1", "--speed-weight", "0") as url:
        # The service computes the rewards: one started with other settings than the run's is
        # refused before anything is generated, naming what differs.
        r = mc(*replaced(rl_args(setup, tmp / "other", "--max-steps", "1", "--verifier", url), verify_device=None,
                         timing_budget="0.2"), check=False)
        assert r.returncode != 0 and "timing_budget_s 0.1 there, 0.2 here" in r.stderr, r.stderr[-2000:]
        assert not (tmp / "other" / "metrics.jsonl").exists()
        together = [tmp / "turns", tmp / "overlapped"]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = [pool.submit(mc, *replaced(rl_args(setup, d, *args, "--verifier", url, *e), verify_device=None))
                    for d, e in zip(together, extra)]
            for r in runs:
                r.result()
    assert_same_trajectories(refs[0], together[0])
    assert_same_trajectories(refs[1], together[1], later_text=False)
    for run in together:
        for x in read_jsonl(run / "metrics.jsonl"):
            # Every answer got a verdict, none an infra error: none was lost between the batches.
            assert sum(x["verdicts"].values()) > 0 and "infra_error" not in x["verdicts"], x["verdicts"]



def test_ablation_switches(setup):
    base = setup[0]
    out = base / "ablate"
    mc(*rl_args(setup, out, "--max-steps", "2", "--no-bdr", "--no-primeecho", "--no-mirrorpop", "--profile-step", "2",
                "--verdict-memory", "0"))
    s1, s2 = read_jsonl(out / "metrics.jsonl")
    # No verdict memory: step 2's repeated answers are judged again.
    assert s2["reused_verdicts_share"] == 0
    # The engine's counts are in every row; step 2 was profiled with libtorch's profiler.
    assert s1["gen_decode_steps"] > 0 and 1 <= s1["gen_rows_per_decode_step"] <= 4 and s1["gen_span_mean"] > 0
    prof = json.load(open(out / "profile" / "step-2.json"))
    assert prof["largest"]["phase"] in {"generate", "waiting for MooreEval", "train"}, prof["largest"]
    assert [p["name"] for p in prof["phases"]] == [
        "generate", "decode: the model's GPU time", "decode: sampling's GPU time",
        "decode: the rest of the step (host, copies)", "prefill", "between decode steps (taking tokens, answers to MooreEval)",
        "answers handed to MooreEval (extraction, static checks, compile submitted)", "waiting for MooreEval", "train",
        "rest of the step (rewards, advantages, bookkeeping)"], prof["phases"]
    ops = {o["name"] for o in prof["host_ops"]}
    assert "aten::mm" in ops or "aten::matmul" in ops or "aten::linear" in ops, ops
    md = open(out / "profile" / "step-2.md").read()
    assert "Largest cost" in md and "PyTorch ops" in md
    assert not (out / "profile" / "step-1.json").exists()
    # No buffer: the all-failed group is dropped, so step 2 has no repair task.
    assert s1["all_failed_share"] == pytest.approx(0.5) and s1["bdr_size"] == 0 and s2["repair_prompts"] == 0
    t1 = read_jsonl(out / "samples" / "step-00000001.jsonl")
    add = {t["sample"]: t for t in t1 if t["problem"] == "1_Add"}
    # No PrimeEcho: the last turn's reward alone.
    assert add[0]["reward"] == pytest.approx(1.0) and add[1]["reward"] == pytest.approx(1.0)


def test_max_problems_and_loop_stop(setup):
    """--max-problems N trains on the first N problems in curriculum order, epoch after epoch,
    and lists them in OUT/problems.txt; --stop-loops reaches the engine (answers of 8 tokens are
    never caught: the share is 0, but it is reported)."""
    out = setup[0] / "subset"
    mc(*replaced(rl_args(setup, out, "--max-steps", "2", "--max-problems", "1", "--stop-loops", "16"), prompts_per_step="1"))
    assert open(out / "problems.txt").read().split() == ["1_Add"]
    rows = read_jsonl(out / "metrics.jsonl")
    assert len(rows) == 2 and all(r["turn1_loop_share"] == 0 for r in rows)
    for step in (1, 2):
        assert {t["problem"] for t in read_jsonl(out / "samples" / f"step-{step:08d}.jsonl")} == {"1_Add"}


def results_rows(*rows):
    """bench-model results.jsonl rows: (problem, turn, verdict[, infra error[, reward]])."""
    out = []
    for i, (problem, turn, verdict, *more) in enumerate(rows):
        result = {"verdict": verdict, "infra_error": more[0] if more else ""}
        if len(more) > 1:
            result["reward"] = more[1]
        out.append({"problem": problem, "sample": i, "turn": turn, "result": result})
    return "".join(json.dumps(r) + "\n" for r in out)


def test_keep_solved(setup, tmp_path):
    """--keep-solved trains only on the problems the starting model solved at turn 1 in a
    bench-model run of it: a later turn's pass and an infra error do not count."""
    res = tmp_path / "results.jsonl"
    res.write_text(results_rows(("1_Add", 1, "incorrect"), ("1_Add", 1, "ok"), ("2_ReLU", 1, "incorrect"),
                                ("2_ReLU", 2, "ok"), ("2_ReLU", 1, "infra_error", "verifier: lost")))
    out = tmp_path / "kept"
    r = mc(*replaced(rl_args(setup, out, "--max-steps", "1", "--keep-solved", res), prompts_per_step="1"))
    assert open(out / "problems.txt").read().split() == ["1_Add"]
    assert "--keep-solved: 1 of " in r.stderr and "(0 every time); 1 never" in r.stderr, r.stderr
    # Results that name none of the problems, none solved, a row that is not bench-model's.
    for text, message in ((results_rows(("L1/9_Other", 1, "ok")), "names none of the"),
                          (results_rows(("1_Add", 1, "incorrect"), ("2_ReLU", 2, "ok")), "solved none of the"),
                          ('{"problem": "1_Add", "turn": 1}\n', "results.jsonl:1: not a row of bench-model's")):
        res.write_text(text)
        r = mc(*rl_args(setup, tmp_path / "bad", "--max-steps", "1", "--keep-solved", res), check=False)
        assert r.returncode != 0 and message in r.stderr, (message, r.stderr)


def test_keep_varied(setup, tmp_path):
    """--keep-varied trains only on the problems whose turn-1 answers got different rewards in
    the probe: a wrong answer beside a partly correct one is kept, a problem solved every time
    alike is not (its group has no spread)."""
    res = tmp_path / "results.jsonl"
    res.write_text(results_rows(("1_Add", 1, "incorrect", "", -1.0), ("1_Add", 1, "incorrect", "", -0.4),
                                ("2_ReLU", 1, "ok", "", 1.2), ("2_ReLU", 1, "ok", "", 1.2),
                                ("2_ReLU", 2, "incorrect", "", -1.0)))
    out = tmp_path / "kept"
    r = mc(*replaced(rl_args(setup, out, "--max-steps", "1", "--keep-varied", res), prompts_per_step="1"))
    assert open(out / "problems.txt").read().split() == ["1_Add"]
    assert "--keep-varied: 1 of " in r.stderr and "(0 of them solved at least once); 1 alike" in r.stderr, r.stderr
    for args, text, message in (
            (("--keep-varied", res), results_rows(("1_Add", 1, "ok")), "results.jsonl:1: no reward in the result"),
            (("--keep-varied", res), results_rows(("1_Add", 1, "ok", "", 1.0), ("1_Add", 1, "ok", "", 1.0)),
             "got the same reward for every turn-1 answer"),
            (("--keep-varied", res, "--keep-solved", res), results_rows(("1_Add", 1, "ok", "", 1.0)), "contradict")):
        res.write_text(text)
        r = mc(*rl_args(setup, tmp_path / "bad", "--max-steps", "1", *args), check=False)
        assert r.returncode != 0 and message in r.stderr, (message, r.stderr)


def test_clear_errors(setup, tmp_path):
    base, problems, model, plant = setup
    r = mc(*replaced(rl_args(setup, tmp_path / "a", "--max-steps", "1"), group_size=1), check=False)
    assert r.returncode != 0 and "--group-size 1" in r.stderr and "at least 2" in r.stderr, r.stderr
    r = mc(*rl_args(setup, tmp_path / "b", "--max-steps", "1", "--verifier", "http://127.0.0.1:9", "--verify-gpus", "0"),
           check=False)
    assert r.returncode != 0 and "contradict" in r.stderr, r.stderr
    r = mc(*rl_args(setup, tmp_path / "b1", "--max-steps", "1", "--stop-loops", "8"), check=False)
    assert r.returncode != 0 and "--stop-loops must be 0 (off) or at least 16 tokens, got 8" in r.stderr, r.stderr
    r = mc(*rl_args(setup, tmp_path / "b3", "--max-steps", "1", "--anchor-data", tmp_path / "nope.jsonl"), check=False)
    assert r.returncode != 0 and f"--anchor-data: no file {tmp_path / 'nope.jsonl'}" in r.stderr, r.stderr
    bad = tmp_path / "bad-anchor.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{not json\n')
    r = mc(*rl_args(setup, tmp_path / "b4", "--max-steps", "1", "--anchor-data", bad), check=False)
    assert r.returncode != 0 and "bad-anchor.jsonl" in r.stderr, r.stderr
    r = mc(*rl_args(setup, tmp_path / "b5", "--max-steps", "1", "--rollout", "async"), check=False)
    assert r.returncode != 0 and "--rollout" in r.stderr and "turns" in r.stderr and "overlapped" in r.stderr, r.stderr
    # A verifier that is not there.
    r = mc(*replaced(rl_args(setup, tmp_path / "c", "--max-steps", "1", "--verifier", "http://127.0.0.1:9"),
                     verify_device=None), check=False)
    assert r.returncode != 0 and "127.0.0.1:9" in r.stderr and "does not answer" in r.stderr, r.stderr
    # Nothing to train on: every prompt is longer than the conversation allows.
    r = mc(*replaced(rl_args(setup, tmp_path / "d", "--max-steps", "1"), max_seq_len=64, micro_batch_tokens=64),
           check=False)
    assert r.returncode != 0 and "nothing to train on" in r.stderr, r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = mc(*replaced(rl_args(setup, tmp_path / "e", "--max-steps", "1"), problems=empty), check=False)
    assert r.returncode != 0 and "empty" in r.stderr, r.stderr


def assert_same_trajectories(ref, out, later_text=True):
    """The trajectories to read are the same, turn for turn. later_text=False: the answers after
    the first (never trained) by verdict only. Decoded beside another step's first turn, they
    share decode steps with other answers as verdicts happen to come, and on the tiny random
    model's flat distributions the last bits of a batched matmul can decide a token."""
    for step in ("step-00000001.jsonl", "step-00000002.jsonl", "step-00000003.jsonl"):
        def turns(run):
            return sorted((t["problem"], t["sample"], t["repair"],
                           [(x["verdict"], x["answer"] if later_text or k == 0 else None) for k, x in enumerate(t["turns"])],
                           t["reward"]) for t in read_jsonl(run / "samples" / step))
        assert turns(out) == turns(ref), step
