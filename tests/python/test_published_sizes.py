# bench/published_sizes.py's answer set, without a GPU: every case of bench/kb_level1 names a
# real KernelBench level-1 problem and a verdict MooreEval gives, and N answers per case are N
# distinct sources (each its own compile, as a model's samples are).
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERDICTS = {"ok", "incorrect", "runtime_error", "timeout", "compile_error", "illegal", "static_violation"}


def load():
    spec = importlib.util.spec_from_file_location("published_sizes", os.path.join(ROOT, "bench", "published_sizes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_case_names_a_level1_problem_and_a_verdict():
    ps = load()
    rows = ps.answers(os.path.join(ROOT, "bench", "kb_level1"), 1)
    assert len(rows) >= 14
    for r in rows:
        assert r["problem"].startswith("L1/") and r["expect"] in VERDICTS, r["sample_id"]
        assert "class ModelNew" in r["answer"] and r["answer"].startswith("```python\n")
    assert {r["expect"] for r in rows} >= {"ok", "incorrect", "runtime_error", "timeout"}


def test_answers_of_one_case_are_distinct_sources():
    ps = load()
    rows = ps.answers(os.path.join(ROOT, "bench", "kb_level1"), 3, only={"relu", "softmax"})
    assert [r["sample_id"] for r in rows] == ["relu#0", "relu#1", "relu#2", "softmax#0", "softmax#1", "softmax#2"]
    assert len({r["answer"] for r in rows}) == 6
