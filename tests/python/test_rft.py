"""`musacoder rft` end to end on the CPU: planted answers (tests/cases/rft) judged by the real
verifier in CPU mode, in process and through a real `musacoder serve` on loopback; diverse
selection keeps and drops what it should; the dataset trains with `--train`; a stopped run
reuses its verdicts; sampling from a tiny model through `musacoder-model generate`; clear errors."""
import hashlib
import json
import os
import shutil

import pytest

import tiny_models

from run_record import check_run_record  # noqa: E402
import mc_cli  # noqa: E402
from mc_cli import BINARY, HAS_MODEL, ROOT, read_jsonl  # noqa: E402
CASES = os.path.join(ROOT, "tests", "cases", "rft")
pytestmark = pytest.mark.skipif(not os.path.exists(BINARY), reason="musacoder not built (scripts/build.sh)")
ADD = ["base", "dup", "renamed", "slow", "unrolled", "wrong"]


def mc(*args, check=True, timeout=600, **kw):
    return mc_cli.run(*args, check=check, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("rft")
    problems = base / "problems"
    problems.mkdir()
    for p in ("1_Add.py", "2_ReLU.py"):
        shutil.copy(os.path.join(ROOT, "tests", "cases", "problems", p), problems / p)
    samples = base / "samples.jsonl"
    with open(samples, "w") as f:
        for name in ADD:
            code = open(os.path.join(CASES, f"add_{name}.py")).read()
            f.write(json.dumps({"problem": "1_Add", "sample_id": name,
                                "answer": f"The sum, one loop.\n\n```python\n{code}```\n"}) + "\n")
        f.write(json.dumps({"problem": "2_ReLU", "sample_id": "broken",
                            "answer": "```python\n" + open(os.path.join(CASES, "relu_broken.py")).read() + "```"}) + "\n")
    model = None
    if HAS_MODEL:
        model = base / "model"
        tiny_models.make_model(str(model), "qwen2", max_positions=4096)
    return base, problems, samples, model


def rft_args(problems, samples, out, cache):
    return ["rft", "--problems", problems, "--samples-from", samples, "--out", out, "--device", "cpu",
            "--format", "kernelbench", "--timing-budget", "0.3", "--cache-dir", cache, "--no-progress"]


def check_selection(out):
    rows = {r["sample"]: r for r in read_jsonl(out / "verified.jsonl")}
    assert {k: v["verdict"] for k, v in rows.items()} == {
        "base": "ok", "dup": "ok", "renamed": "ok", "slow": "ok", "unrolled": "ok", "wrong": "incorrect",
        "broken": "compile_error"}
    speed = {k: v["result"].get("speedup") for k, v in rows.items()}
    kept = {r["sample"]: r for r in read_jsonl(out / "dataset.jsonl")}
    dropped = {r["sample"]: r for r in read_jsonl(out / "dropped.jsonl")}
    assert set(kept) | set(dropped) == set(rows) and not set(kept) & set(dropped)
    # The three copies of one loop: the fastest is kept, the other two name it as their twin.
    copies = ["base", "dup", "renamed"]
    fastest = max(copies, key=lambda k: speed[k])
    assert set(kept) == {fastest, "unrolled"}, (kept.keys(), dropped)
    for k in copies:
        if k != fastest:
            assert dropped[k]["reason"] in ("duplicate", "renamed_copy") and dropped[k]["twin"] == fastest, dropped[k]
    assert fastest == "renamed" or dropped["renamed"]["reason"] == "renamed_copy"
    assert speed["slow"] < speed[fastest] / 5, speed
    assert dropped["slow"]["reason"] == "slower_twin" and dropped["slow"]["twin"] == fastest
    assert dropped["wrong"]["reason"] == "rejected" and dropped["wrong"]["verdict"] == "incorrect"
    assert dropped["broken"]["reason"] == "rejected" and dropped["broken"]["verdict"] == "compile_error"
    # SFT rows: the task prompt (the problem's source in it) and the answer as the model wrote it.
    add_src = open(os.path.join(ROOT, "tests", "cases", "problems", "1_Add.py")).read()
    for k, r in kept.items():
        user, assistant = r["messages"]
        assert user["role"] == "user" and add_src in user["content"] and "ModelNew" in user["content"]
        assert assistant["role"] == "assistant" and assistant["content"].startswith("The sum, one loop.")
        assert r["problem"] == "1_Add" and r["speedup"] == pytest.approx(speed[k])
    rep = json.load(open(out / "report.json"))
    assert rep["problems"] == 2 and rep["problems_covered"] == 1 and rep["coverage"] == 0.5
    assert rep["kept"] == 2 and rep["samples"] == 7
    assert rep["pass_rate"] == pytest.approx(5 / 7)
    assert rep["mean_pairwise_similarity_after"] < rep["mean_pairwise_similarity_before"]
    assert rep["dropped"]["slower_twin"] == 1 and rep["dropped"]["rejected"] == 2
    return kept, dropped


def kept_samples(out):
    return {r["sample"] for r in read_jsonl(out / "dataset.jsonl")}


def test_planted_answers_selected_and_trained(setup):
    base, problems, samples, model = setup
    out = base / "run"
    extra = []
    if model:
        extra = ["--model", model, "--train", "--train-args",
                 "--max-steps 2 --device cpu --tokens-per-step 8192 --max-len 4096 --lr 1e-3"]
    r = mc(*rft_args(problems, samples, out, base / "cache"), *extra)
    assert "coverage (>= 1 answer kept)" in r.stdout and "1 of 2 (50.0%)" in r.stdout, r.stdout
    check_selection(out)
    if model:
        metrics = read_jsonl(out / "sft" / "metrics.jsonl")
        assert [m["step"] for m in metrics if m["kind"] == "train"] == [1, 2]
        assert os.path.isdir(out / "sft" / "checkpoints" / "step-00000002")
    # A rerun judges nothing again: every verdict is reused, the selection is the same.
    before = (out / "dataset.jsonl").read_text()
    r = mc(*rft_args(problems, samples, out, base / "cache"))
    assert "7 answers already judged" in r.stderr and "0 to judge" in r.stderr, r.stderr
    check_run_record(out, "rft", 2, given=("--problems", "--samples-from"))
    assert (out / "dataset.jsonl").read_text() == before

    # Repair conversations from the same verdicts: the wrong Add is paired with a kept Add; the
    # broken ReLU (no sample passed) with a verified answer from --repair-from. The failed answer
    # is context (weight 0); the feedback is the user turn `train rl` would show.
    relu = base / "relu_answers.jsonl"
    relu.write_text(json.dumps({"problem": "2_ReLU", "messages": [
        {"role": "user", "content": "task"}, {"role": "assistant", "content": "```python\n# a fixed ReLU\n```"}]}) + "\n" +
        json.dumps({"level": 1, "problem_id": 5, "name": "Elsewhere", "verdict": "ok", "messages": [
            {"role": "assistant", "content": "not this run's problem"}]}) + "\n")
    r = mc(*rft_args(problems, samples, out, base / "cache"), "--repair-rows", "2", "--repair-from", relu)
    assert "0 to judge" in r.stderr and "repair conversations: 2 over 2 problems" in r.stdout, r.stdout
    rows = {x["problem"]: x for x in read_jsonl(out / "repair.jsonl")}
    assert set(rows) == {"1_Add", "2_ReLU"}
    verified = {x["sample"]: x for x in read_jsonl(out / "verified.jsonl")}
    for problem, sample, verdict in (("1_Add", "wrong", "incorrect"), ("2_ReLU", "broken", "compile_error")):
        x = rows[problem]
        assert x["failed_sample"] == sample and x["failed_verdict"] == verdict and x["source"] == "rft-repair"
        user, failed, feedback, fixed = x["messages"]
        assert failed["role"] == "assistant" and failed["weight"] == 0 and "```python" in failed["content"]
        assert feedback["role"] == "user" and feedback["content"].startswith("The verifier rejected your solution:")
        assert verified[sample]["result"]["feedback"] in feedback["content"]
        assert fixed["role"] == "assistant" and "weight" not in fixed
    assert rows["1_Add"]["answer_from"].startswith("rft:") and rows["1_Add"]["answer_from"][4:] in kept_samples(out)
    assert rows["2_ReLU"]["answer_from"] == f"{relu}:1" and "a fixed ReLU" in rows["2_ReLU"]["messages"][3]["content"]
    rep = json.load(open(out / "report.json"))["repair"]
    assert rep["rows"] == 2 and rep["by_failed_verdict"] == {"compile_error": 1, "incorrect": 1}
    assert rep["answers_from_dataset"] == 1 and rep["passing_answers"]["dataset"] == 1


def test_planted_answers_through_the_service(setup):
    base, problems, samples, _ = setup
    tmp = base / "serve"
    tmp.mkdir()
    out = base / "via-service"
    with mc_cli.serving(tmp, "--device", "cpu", "--allow-inline-problems", "--cache-dir", base / "cache",
                        "--timing-budget", "0.3") as url:
        # A service judging under other settings is refused before anything is sampled.
        other = [a if a != "0.3" else "0.5" for a in rft_args(problems, samples, base / "other", base / "cache")]
        r = mc(*other, "--verifier", url, check=False)
        assert r.returncode == 2 and "timing_budget_s 0.3 there, 0.5 here" in r.stderr, r.stderr[-2000:]
        mc(*rft_args(problems, samples, out, base / "cache"), "--verifier", url)
    check_selection(out)


@pytest.mark.skipif(not HAS_MODEL, reason="musacoder built without libtorch")
def test_sampling_from_a_model(setup):
    base, problems, _, model = setup
    out = base / "sampled"
    args = ["rft", "--model", model, "--problems", problems, "--samples", "2", "--max-new-tokens", "6",
            "--model-device", "cpu", "--out", out, "--device", "cpu", "--cache-dir", base / "cache", "--no-progress",
            "--seed", "5"]
    mc(*args)
    prompts = read_jsonl(out / "prompts.jsonl")
    assert [p["id"] for p in prompts] == ["1_Add", "2_ReLU"]
    assert "Write a single .cu file" in prompts[0]["messages"][0]["content"]  # --format native (default)
    samples = read_jsonl(out / "samples.jsonl")
    assert sorted((s["id"], s["sample"]) for s in samples) == [("1_Add", 0), ("1_Add", 1), ("2_ReLU", 0), ("2_ReLU", 1)]
    verified = read_jsonl(out / "verified.jsonl")
    assert len(verified) == 4
    # A random tiny model writes no kernel: every answer is dropped, each with its verdict.
    assert (out / "dataset.jsonl").read_text() == ""
    assert all(d["reason"] == "rejected" for d in read_jsonl(out / "dropped.jsonl"))
    # The same settings again: the samples are reused, not drawn again.
    r = mc(*args)
    assert "reusing" in r.stderr
    # They are reused only for the same weights, not only the same folder: the meta names their hash.
    meta = json.load(open(out / "samples.meta.json"))
    weights = hashlib.sha256(open(os.path.join(model, "model.safetensors"), "rb").read()).hexdigest()
    assert meta["weights_sha256"] == {"model.safetensors": weights}, meta
    meta["weights_sha256"]["model.safetensors"] = "0" * 64  # as if another model had been there
    (out / "samples.meta.json").write_text(json.dumps(meta))
    r = mc(*args)
    assert "reusing" not in r.stderr and "sampling 2 answers" in r.stderr, r.stderr
    # Another slice, without the policy: the samples file is verified; nothing is judged twice.
    r = mc("rft", "--problems", problems, "--samples-from", out / "samples.jsonl", "--out", out, "--device", "cpu",
           "--cache-dir", base / "cache", "--no-progress")
    assert "4 answers already judged" in r.stderr and "0 to judge" in r.stderr, r.stderr
    # --train with nothing kept says so.
    r = mc(*args, "--train", check=False)
    assert r.returncode != 0 and "no answer was kept" in r.stderr


def test_clear_errors(setup, tmp_path):
    base, problems, samples, _ = setup
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1_Add", "answer": "x"}\n{not json\n')
    # As in `musacoder eval`, every input line gets its row: the malformed one is dropped naming
    # its file and line.
    mc(*rft_args(problems, bad, tmp_path / "o1", base / "cache"))
    why = [d["why"] for d in read_jsonl(tmp_path / "o1" / "dropped.jsonl")]
    assert any("malformed JSONL line" in w and "bad.jsonl:2" in w for w in why), why
    bad_from = tmp_path / "from.jsonl"
    bad_from.write_text('{"messages": [{"role": "assistant", "content": "x"}]}\n')
    r = mc(*rft_args(problems, samples, tmp_path / "o1", base / "cache"), "--repair-rows", "1", "--repair-from",
           bad_from, check=False)
    assert r.returncode != 0 and "from.jsonl:1:" in r.stderr and "needs \"problem\"" in r.stderr, r.stderr
    r = mc(*rft_args(tmp_path / "nowhere", samples, tmp_path / "o2", base / "cache"), check=False)
    assert r.returncode != 0 and "nowhere" in r.stderr
    r = mc("rft", "--problems", problems, "--out", tmp_path / "o3", "--device", "cpu", check=False)
    assert r.returncode != 0 and "--model" in r.stderr
    # An output folder that cannot be made (its parent is a file; root may write anywhere else).
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = mc(*rft_args(problems, samples, blocker / "out", base / "cache"), check=False)
    assert r.returncode != 0 and "--out: cannot create" in r.stderr and "a-file" in r.stderr, r.stderr


def test_twins_are_judged_once(setup, tmp_path):
    """The same answer text twice for one problem: judged once, the twin gets that verdict (its
    row says twin_of); --judge-twins judges both."""
    base, problems, _, _ = setup
    code = open(os.path.join(CASES, "add_base.py")).read()
    samples = tmp_path / "twins.jsonl"
    with open(samples, "w") as f:
        for sid in ("first", "again"):
            f.write(json.dumps({"problem": "1_Add", "sample_id": sid, "answer": f"```python\n{code}```\n"}) + "\n")
    out = tmp_path / "run"
    r = mc(*rft_args(problems, samples, out, base / "cache"))
    assert "rft: 1 answers shared a twin's verdict" in r.stderr, r.stderr
    rows = {x["sample"]: x for x in read_jsonl(out / "verified.jsonl")}
    assert "twin_of" not in rows["first"] and rows["again"]["twin_of"] == "first"
    assert rows["again"]["verdict"] == rows["first"]["verdict"] == "ok"
    assert rows["again"]["result"]["speedup"] == rows["first"]["result"]["speedup"]
    out2 = tmp_path / "run-each"
    r = mc(*rft_args(problems, samples, out2, base / "cache"), "--judge-twins")
    assert "shared a twin's verdict" not in r.stderr
    assert not any("twin_of" in x for x in read_jsonl(out2 / "verified.jsonl"))
