"""`musacoder bench-model` end to end on the CPU, with the real verifier in CPU mode:
- planted answers from a scripted OpenAI-compatible server on loopback: fail, then pass at turn 2
  after MooreEval's feedback; per-turn metrics; the report and its plots; resume;
- KernelBench's prompt and fast_p equal KernelBench's own code (skipped, saying why, without a
  KernelBench checkout: set KERNELBENCH_SRC);
- a tiny model through our engine (--model) and through `musacoder serve-model` (--endpoint):
  greedy answers agree;
- an endpoint that fails or times out gives infra errors and no scores;
- clear errors for an unknown level, a missing problems folder, an unreachable endpoint."""
import hashlib
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import types

import pytest

import tiny_models

from kernelbench_ref import load_kernelbench_module  # noqa: E402
import mc_cli  # noqa: E402
from mc_cli import BINARY, HAS_MODEL, ROOT, read_jsonl  # noqa: E402
CASES = os.path.join(ROOT, "tests", "cases")
pytestmark = pytest.mark.skipif(not os.path.exists(BINARY), reason="musacoder not built (scripts/build.sh)")


def mc(*args, check=True, timeout=600, **kw):
    return mc_cli.run(*args, check=check, timeout=timeout, **kw)


def answer(name):
    return "Here it is.\n\n```python\n" + open(os.path.join(CASES, "rft", name)).read() + "```\n"


class Scripted(http.server.ThreadingHTTPServer):
    """An OpenAI-compatible server that answers from a script: script(messages) -> text, or an
    int HTTP status to fail with, or a float number of seconds to stall."""

    def __init__(self, script):
        self.script, self.requests = script, []
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(200, {"object": "list", "data": [{"id": "planted", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        out = self.server.script(body["messages"])
        if isinstance(out, int):
            return self.reply(out, {"error": {"message": f"scripted {out}"}})
        if isinstance(out, float):
            time.sleep(out)
            return self.reply(200, {"choices": []})
        n = body.get("n", 1)
        self.reply(200, {"choices": [{"index": i, "message": {"role": "assistant", "content": out},
                                      "finish_reason": "stop"} for i in range(n)]})


def planted(messages):
    """1_Add: wrong at turn 1, right once MooreEval's feedback came back. 2_ReLU: never compiles."""
    turn = sum(m["role"] == "user" for m in messages)
    if "Element-wise sum of two tensors" in messages[0]["content"]:
        return answer("add_wrong.py") if turn == 1 else answer("add_base.py")
    return answer("relu_broken.py")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One compile cache for the module: a planted answer is compiled once."""
    return tmp_path_factory.mktemp("bench-cache")


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench") / "problems"
    d.mkdir()
    for p in ("1_Add.py", "2_ReLU.py"):
        shutil.copy(os.path.join(CASES, "problems", p), d / p)
    return d


def bench_args(problems, out, cache, *extra):
    return ["bench-model", "--problems", problems, "--out", out, "--device", "cpu", "--timing-budget", "0.3",
            "--cache-dir", cache, "--no-progress", "--no-compile-baseline", *extra]


def test_planted_multi_turn_report_and_resume(problems, cache, tmp_path):
    srv = Scripted(planted)
    out = tmp_path / "run"
    args = bench_args(problems, out, cache, "--endpoint", srv.url, "--model-name", "planted", "--samples", "2",
                      "--turns", "3")
    r = mc(*args)
    rep = json.load(open(out / "report.json"))
    t1, t2, t3 = (rep["per_turn"][k]["all"] for k in range(3))
    assert t1["pass"] == {"pass@1": 0.0, "pass@2": 0.0}, t1
    assert t2["pass"] == {"pass@1": 0.5, "pass@2": 0.5} and t2["avg@k"] == 0.5, t2
    assert t3["pass"] == t2["pass"] and t3["scored_problems"] == 2 and t3["infra_errors"] == 0
    assert t3["verdicts"] == {"ok": 2, "compile_error": 2}, t3
    assert t3["fast_eager"]["fast_0"] == 0.5 and t3["compiled"] == 0.5
    # Turn 2 carried MooreEval's feedback on the wrong sum; 2_ReLU was asked three times.
    add_turn2 = [q for q in srv.requests if len(q["messages"]) == 3 and "Element-wise sum of two tensors" in q["messages"][0]["content"]]
    assert len(add_turn2) == 2 and "The verifier rejected your solution" in add_turn2[0]["messages"][2]["content"]
    assert "mismatch" in add_turn2[0]["messages"][2]["content"].lower() or "incorrect" in add_turn2[0]["messages"][2]["content"].lower()
    rows = read_jsonl(out / "results.jsonl")
    assert len(rows) == 2 * 1 + 2 * 1 + 2 * 3  # Add: turns 1-2; ReLU: turns 1-3
    assert {(r["problem"], r["turn"], r["result"]["verdict"]) for r in rows} >= {("1_Add", 1, "incorrect"), ("1_Add", 2, "ok")}
    assert len(read_jsonl(out / "answers.jsonl")) == len(rows)
    # Twins (the same text for the same problem, any sample or turn) are judged once and share
    # that verdict: 1_Add's two samples at turns 1 and 2, 2_ReLU's six answers (one text).
    twins = [row for row in rows if "twin_of" in row]
    assert len(twins) == 1 + 1 + 5, [(t["problem"], t["sample"], t["turn"]) for t in twins]
    by = {(row["problem"], row["sample"], row["turn"]): row for row in rows}
    for t in twins:
        lead = by[(t["problem"], t["twin_of"]["sample"], t["twin_of"]["turn"])]
        assert "twin_of" not in lead and lead["answer_sha256"] == t["answer_sha256"]
        assert t["result"]["verdict"] == lead["result"]["verdict"]
    assert json.load(open(out / "report.json"))["timing"]["twins_sharing_a_verdict"] == 7
    assert "answers sharing a twin's verdict (the same text, judged once): 7" in open(out / "report.txt").read()
    for f in ("report.md", "report.txt", "fast_p.svg", "grid.svg"):
        assert (out / f).stat().st_size > 200, f
    assert open(out / "grid.svg").read().startswith("<svg") and "1_Add" in open(out / "grid.svg").read()
    md = open(out / "report.md").read()
    assert "## After turn 2" in md and "| all | 2 | 50.0% | 50.0% |" in md, md
    assert "pass@1" in r.stdout and "decontamination: The model was reached through an endpoint" in r.stdout
    assert rep["samples"][0].keys() >= {"problem", "sample", "verdict", "turn", "speedup_eager"}

    # Resume: nothing asked again, the same numbers.
    before = len(srv.requests)
    mc(*args, "--resume")
    assert len(srv.requests) == before
    assert json.load(open(out / "report.json"))["final"] == rep["final"]
    # A verdict lost (a stopped run): only that answer is judged again, no answer is asked again.
    kept = [r for r in rows if not (r["problem"] == "1_Add" and r["turn"] == 2 and r["sample"] == 0)]
    with open(out / "results.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in kept)
    mc(*args, "--resume")
    assert len(srv.requests) == before and len(read_jsonl(out / "results.jsonl")) == len(rows)
    assert json.load(open(out / "report.json"))["final"]["pass"] == rep["final"]["pass"]
    # Without --resume the folder is not overwritten; with other settings it is refused.
    r = mc(*args, check=False)
    assert r.returncode == 2 and "pass --resume" in r.stderr
    r = mc(*bench_args(problems, out, cache, "--endpoint", srv.url, "--model-name", "planted", "--samples", "3",
                       "--turns", "3", "--resume"), check=False)
    assert r.returncode == 2 and "--resume: samples differs" in r.stderr
    mc("bench-model", "compare", out, out, "--out", tmp_path / "cmp.md", "--svg", tmp_path / "cmp.svg")
    cmp = open(tmp_path / "cmp.md").read()
    assert cmp.count(str(out)) == 2
    # Intervals from the report's per-problem counts; a run against itself differs by nothing.
    assert "95% interval" in cmp and "Against run 1" in cmp, cmp
    assert "| 2 | +0.0 | +0.0 to +0.0 | 0 / 0 of 2 | +0.0 | +0.0 to +0.0 | 0 / 0 of 2 |" in cmp, cmp
    assert all("by_problem" in t for t in json.load(open(out / "report.json"))["per_turn"])
    assert open(tmp_path / "cmp.svg").read().startswith("<svg")
    # One arm trained from two seeds (two recipe runs' eval/rl): mean and range across them.
    seeds = []
    for i, p1 in enumerate((0.25, 0.75)):
        d = tmp_path / f"seed{i}" / "rl"
        shutil.copytree(out, d)
        rj = json.load(open(d / "report.json"))
        rj["per_turn"][0]["all"]["pass"]["pass@1"] = p1
        json.dump(rj, open(d / "report.json", "w"))
        seeds.append(d)
    mc("bench-model", "compare", out, *seeds, "--seeds-by-name", "--out", tmp_path / "cmp-seeds.md")
    cmp_s = open(tmp_path / "cmp-seeds.md").read()
    assert "Across seeds" in cmp_s and "| rl | 2 | 50.0% (25.0%–75.0%) |" in cmp_s, cmp_s
    assert f"| {out.name} |" not in cmp_s.split("Across seeds")[1], cmp_s  # one run alone: no row
    # A recipe that skipped a stage (RL from SFT, no RFT): that folder is named and left out.
    r = mc("bench-model", "compare", out, tmp_path / "never-run", check=False)
    assert r.returncode == 2 and "has no report.json" in r.stderr
    mc("bench-model", "compare", out, tmp_path / "never-run", "--skip-missing", "--out", tmp_path / "cmp2.md")
    cmp2 = open(tmp_path / "cmp2.md").read()
    assert cmp2.count(str(out)) == 1 and f"Not run (no report.json), left out: {tmp_path / 'never-run'}" in cmp2, cmp2
    r = mc("bench-model", "compare", tmp_path / "never-run", "--skip-missing", check=False)
    assert r.returncode == 2 and "none of the 1 folders holds a finished bench-model run" in r.stderr


def test_baseline_is_timed_only_for_problems_with_a_correct_answer(problems, cache, tmp_path):
    """A speedup over torch.compile needs that problem's baseline only if an answer is correct:
    1_Add passes at turn 2 and is timed (eager and torch.compile), 2_ReLU never passes and is
    not. A resumed run times nothing again."""
    srv = Scripted(planted)
    out = tmp_path / "run"
    args = [a for a in bench_args(problems, out, cache, "--endpoint", srv.url, "--model-name", "planted",
                                  "--samples", "1", "--turns", "2", "--judge-twins") if a != "--no-compile-baseline"]
    r = mc(*args)
    # --judge-twins: 2_ReLU's second answer, the same text as its first, is judged itself.
    assert not any("twin_of" in row for row in read_jsonl(out / "results.jsonl"))
    assert "timing eager and torch.compile references of the 1 problem(s) with a correct answer" in r.stderr, r.stderr
    b = json.load(open(out / "baseline.json"))
    assert b["source"] == "timed by this run, for the problems with a correct answer"
    assert set(b["eager"]["level0"]) == {"1_Add.py"} and set(b["compile"]["level0"]) == {"1_Add.py"}, b
    assert b["errors"] == {} and b["compile"]["level0"]["1_Add.py"]["median"] > 0
    t = json.load(open(out / "timing.json"))
    assert len(t) == 1 and t[0]["baseline_s"] > 0
    rep = json.load(open(out / "report.json"))
    assert rep["final"]["pass"]["pass@1"] == 0.5 and "fast_compile" in rep["final"], rep["final"]
    assert "vs torch.compile: no baseline" not in r.stdout
    r = mc(*args, "--resume")
    t = json.load(open(out / "timing.json"))
    assert len(t) == 2 and t[1]["baseline_s"] == 0 and "timing eager" not in r.stderr
    assert json.load(open(out / "baseline.json")) == b


def kernelbench_src():
    src = os.environ.get("KERNELBENCH_SRC", "")
    if not (src and os.path.exists(os.path.join(src, "src", "kernelbench", "prompt_constructor_toml.py"))):
        pytest.skip("no KernelBench checkout: set KERNELBENCH_SRC to one (git clone "
                    "https://github.com/ScalingIntelligence/KernelBench) to compare with its own code")
    return src


def test_kernelbench_prompt_and_fastp_equal_kernelbench(problems, cache, tmp_path):
    src = kernelbench_src()
    np = pytest.importorskip("numpy")
    srv = Scripted(planted)
    out = tmp_path / "run"
    mc(*bench_args(problems, out, cache, "--endpoint", srv.url, "--model-name", "planted", "--samples", "2",
                   "--turns", "2", "--precision", "fp32"))
    pc = load_kernelbench_module(src, "prompt_constructor_toml")
    for p in ("1_Add.py", "2_ReLU.py"):
        want = pc.get_prompt_for_backend(open(problems / p).read(), "cuda", "one_shot", "fp32")
        got = [q["messages"][0]["content"] for q in srv.requests if len(q["messages"]) == 1 and
               q["messages"][0]["content"].find(open(problems / p).read()) >= 0]
        assert got and got[0] == want
    # fast_p: KernelBench's score.fastp per sample index (one sample per problem, as its runs
    # are), averaged over the indices, equals ours.
    score = load_kernelbench_module(src, "score")
    rep = json.load(open(out / "report.json"))
    for p_thr, key in ((0.0, "fast_0"), (1.0, "fast_1"), (1.1, "fast_1.1"), (2.0, "fast_2")):
        per_index = []
        for s in range(2):
            rows = [r for r in rep["samples"] if r["sample"] == s]
            ok = np.array([r["verdict"] == "ok" for r in rows])
            sp = np.array([r["speedup_eager"] or 1.0 for r in rows])
            per_index.append(score.fastp(ok, sp, np.ones(len(rows)), len(rows), p_thr))
        assert rep["final"]["fast_eager"][key] == pytest.approx(float(np.mean(per_index)), abs=1e-12), key


def test_endpoint_failures_are_infra_errors_not_scores(problems, cache, tmp_path):
    for script, extra in ((lambda m: 503, ["--max-retries", "1"]), (lambda m: 400, []),
                          (lambda m: 3.0, ["--request-timeout", "1", "--max-retries", "0"])):
        srv = Scripted(script)
        out = tmp_path / f"run{len(extra)}{id(script)}"
        r = mc(*bench_args(problems, out, cache, "--endpoint", srv.url, "--model-name", "planted",
                           "--samples", "2", *extra))
        rep = json.load(open(out / "report.json"))
        f = rep["final"]
        assert f["scored_problems"] == 0 and f["samples"] == 0 and f["infra_errors"] == 4, f
        assert f["pass"] == {"pass@1": 0.0, "pass@2": 0.0} and not (out / "results.jsonl").read_text()
        assert all(a["error"] for a in read_jsonl(out / "answers.jsonl"))
        assert "infra" in r.stdout
    # The endpoint recovers: --resume asks only for what was missing and scores it.
    srv = Scripted(planted)
    r = mc(*bench_args(problems, out, cache, "--endpoint", srv.url, "--model-name", "planted", "--samples",
                       "2", "--request-timeout", "1", "--max-retries", "0", "--resume"))
    f = json.load(open(out / "report.json"))["final"]
    assert f["scored_problems"] == 2 and f["infra_errors"] == 0 and len(srv.requests) == 2


def test_clear_errors(problems, tmp_path):
    srv = Scripted(planted)
    base = ["--endpoint", srv.url, "--model-name", "planted"]
    cases = [
        (bench_args(problems, tmp_path / "a", tmp_path / "c", *base, "--levels", "4"), "unknown level 4"),
        (bench_args(problems, tmp_path / "a", tmp_path / "c", *base, "--levels", "x"), "'x' is not a level number"),
        (bench_args(tmp_path / "nope", tmp_path / "a", tmp_path / "c", *base), "no folder or file"),
        (bench_args(problems, tmp_path / "a", tmp_path / "c", "--endpoint", "http://127.0.0.1:9", "--model-name", "m"),
         "endpoint http://127.0.0.1:9 does not answer"),
        (bench_args(problems, tmp_path / "a", tmp_path / "c", *base[:2], "--model-name", "other"),
         "does not serve model 'other'"),
        (bench_args(problems, tmp_path / "a", tmp_path / "c"), "one of the two"),
        (bench_args(problems, tmp_path / "a", tmp_path / "c", *base, "--format", "native"), "use --prompt musacoder"),
    ]
    for args, msg in cases:
        r = mc(*args, check=False)
        assert r.returncode == 2 and msg in r.stderr, (msg, r.stderr)
    # A MooreEval service judging under other settings than the run's: its report would name
    # settings its verdicts and speedups were not measured under.
    with mc_cli.serving(tmp_path, "--device", "cpu", "--allow-inline-problems", "--cache-dir", tmp_path / "sc",
                        "--timing-budget", "0.1") as url:
        r = mc(*bench_args(problems, tmp_path / "v", tmp_path / "c", *base, "--verifier", url), check=False)
    assert r.returncode == 2 and "timing_budget_s 0.1 there, 0.3 here" in r.stderr, r.stderr[-2000:]


@pytest.mark.skipif(not HAS_MODEL, reason="musacoder-model not built")
def test_tiny_model_engine_and_served_agree(problems, cache, tmp_path):
    model = tmp_path / "model"
    tiny_models.make_model(str(model), "qwen2", max_positions=8192)
    common = ["--samples", "2", "--temperature", "0", "--max-new-tokens", "24", "--prompt", "musacoder"]
    mc(*bench_args(problems, tmp_path / "engine", cache, "--model", model, "--model-device", "cpu", *common))
    p = subprocess.Popen([BINARY, "serve-model", "--model", model, "--device", "cpu", "--port", "0", "--max-seq-len", "8192",
                          "--served-model-name", "tiny"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", p.stdout.readline())
        assert m
        mc(*bench_args(problems, tmp_path / "served", cache, "--endpoint", f"http://127.0.0.1:{m.group(1)}",
                       "--model-name", "tiny", *common))
    finally:
        p.terminate()
        p.wait(timeout=30)
    key = lambda a: (a["problem"], a["sample"])
    engine = sorted(read_jsonl(tmp_path / "engine" / "answers.jsonl"), key=key)
    served = sorted(read_jsonl(tmp_path / "served" / "answers.jsonl"), key=key)
    assert len(engine) == 4 and [a["text"] for a in engine] == [a["text"] for a in served]
    for d in ("engine", "served"):
        f = json.load(open(tmp_path / d / "report.json"))["final"]
        assert f["scored_problems"] == 2 and f["samples"] == 4 and f["infra_errors"] == 0  # judged (a tiny model's text)
    assert json.load(open(tmp_path / "engine" / "report.json"))["decontamination"]["status"] == "unknown"
    # Decontamination, from the checkpoint's training data: its trainer_state.json names the data,
    # whose folder holds `musacoder synth`'s report.
    synth = tmp_path / "synth"
    synth.mkdir()
    (synth / "dataset.jsonl").write_text("{}\n")
    (model / "trainer_state.json").write_text(json.dumps(
        {"kind": "sft", "fingerprint": {"data": [{"path": str(synth / "dataset.jsonl"), "bytes": 3}]}}))
    sources = sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in problems.glob("*.py"))
    for report, status in (({"families": {}}, "not_decontaminated"),
                           ({"families": {}, "decontamination": {"benchmark": str(tmp_path / "elsewhere")}}, "other_benchmark"),
                           ({"families": {}, "decontamination": {"benchmark": str(problems)}}, "decontaminated"),
                           # Made on another machine and carried (a recipe seed): the absolute path
                           # is gone there, the one relative to the synth folder still holds.
                           ({"families": {}, "decontamination": {"benchmark": "/made/elsewhere/problems", "against": [
                               {"path": "/made/elsewhere/problems", "relative": os.path.relpath(problems, synth)}]}},
                            "decontaminated"),
                           # Checked against a copy of these problems at a path gone here (a
                           # KernelBench checkout carried to /tmp): known by content; with one
                           # of them missing from its hashes, another benchmark.
                           ({"families": {}, "decontamination": {"benchmark": "/gone/kb", "against": [
                               {"path": "/gone/kb", "relative": "gone", "problem_sha256": sources + ["0" * 64]}]}},
                            "decontaminated"),
                           ({"families": {}, "decontamination": {"benchmark": "/gone/kb", "against": [
                               {"path": "/gone/kb", "relative": "gone", "problem_sha256": sources[1:]}]}},
                            "other_benchmark")):
        (synth / "report.json").write_text(json.dumps(report))
        r = mc(*bench_args(problems, tmp_path / "engine", cache, "--model", model, "--model-device", "cpu", *common,
                           "--resume"))
        d = json.load(open(tmp_path / "engine" / "report.json"))["decontamination"]
        assert d["status"] == status, r.stdout
        assert ("by content" in d["text"]) == (status == "decontaminated" and report["decontamination"]["benchmark"] == "/gone/kb")


@pytest.mark.skipif(not HAS_MODEL, reason="musacoder-model not built")
def test_engine_uses_the_models_chat_template(problems, cache, tmp_path):
    """--model renders ChatML with the default system turn of the model's own template (Qwen2's
    here), and refuses a template that is not ChatML."""
    model = tmp_path / "model"
    tiny_models.make_model(str(model), "qwen2", max_positions=8192)
    template = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}")
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    args = ["--model", model, "--model-device", "cpu", "--samples", "1", "--max-new-tokens", "4", "--prompt", "musacoder"]
    mc(*bench_args(problems, tmp_path / "run", cache, *args))
    rows = read_jsonl(tmp_path / "run" / "engine_prompts.jsonl")
    assert rows[0]["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    assert rows[0]["messages"][1]["role"] == "user"
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "[INST] {{ messages[0]['content'] }} [/INST]"}))
    r = mc(*bench_args(problems, tmp_path / "run2", cache, *args), check=False)
    assert r.returncode == 2 and "is not ChatML" in r.stderr and "--endpoint" in r.stderr
