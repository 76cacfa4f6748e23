"""The Python client and the RL-framework adapters against a real `musacoder serve` on loopback
(embedded mode, compile-only jobs: CI has no GPU), called with each framework's own signature."""
import asyncio
import os
import types

import pytest

from mc_cli import BINARY, ROOT, serving
from musacoder_client import ClientError, InfraError, MooreEvalClient, adapters, reward_of

PROBLEMS = os.path.join(ROOT, "tests", "cases", "problems")
TOKEN = "adapter-test-token-0123456789"
NATIVE_ADD = open(os.path.join(ROOT, "tests", "cases", "gpu", "native", "1_Add.cu")).read()
TORCH_ADD = ("```python\nimport torch\nclass ModelNew(torch.nn.Module):\n"
             "    def forward(self, a, b):\n        return torch.add(a, b)\n```")


def start_server(tmp, *args, device="cpu"):
    tok = tmp / "tokens"
    tok.write_text(TOKEN + "\n")
    return serving(tmp, "--problems", PROBLEMS, "--device", device, "--cache-dir", tmp / "cache", "--token-file", tok,
                   *args)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not os.path.exists(BINARY):
        pytest.skip(f"{BINARY} not built (scripts/build.sh)")
    with start_server(tmp_path_factory.mktemp("serve"), "--compile-only", "--allow-inline-problems") as url:
        yield url


@pytest.fixture(autouse=True)
def configured(server):
    adapters.configure(server, TOKEN, max_concurrency=4, batch=2)
    yield


def test_client_verifies_in_order_and_maps_rewards(server):
    c = MooreEvalClient(server, TOKEN, max_concurrency=3, batch=2)
    items = [{"problem": "1_Add", "answer": NATIVE_ADD},
             {"problem": "1_Add", "answer": TORCH_ADD},
             {"problem": "1_Add", "answer": "no code"},
             {"problem": "1_Add", "answer": NATIVE_ADD + "\n#error broken\n"}]
    rows = c.verify(items)
    assert [r["verdict"] for r in rows] == ["compiled", "static_violation", "extract_error",
                                           "compile_error"]
    assert [reward_of(r) for r in rows] == [None, -1.0, -1.0, -1.0]
    assert reward_of({"verdict": "infra_error", "reward": None}) is None
    again = asyncio.run(c.averify(items[:2]))
    assert [r["job_id"] for r in again] == [r["job_id"] for r in rows[:2]]


def test_client_errors_are_named(server):
    with pytest.raises(ClientError) as e:
        MooreEvalClient(server, TOKEN).verify([{"problem": "404_Nothing", "answer": "x"}])
    assert e.value.status == 422 and "404_Nothing" in str(e.value)
    with pytest.raises(ClientError) as e:
        MooreEvalClient(server, "wrong-token-wrong-token").verify([{"problem": "1_Add", "answer": "x"}])
    assert e.value.status == 403
    dead = MooreEvalClient("http://127.0.0.1:9", TOKEN, max_transient_retries=1)
    with pytest.raises(InfraError):  # unreachable verifier: an error, never a score of 0
        dead.verify([{"problem": "1_Add", "answer": "x"}])


def test_verl_signatures(server):
    out = adapters.verl_compute_score("kernelbench", TORCH_ADD, "1_Add", {"index": 0})
    assert out["score"] == -1.0 and out["verdict"] == "static_violation"
    problem_src = open(os.path.join(PROBLEMS, "2_ReLU.py")).read()
    outs = adapters.verl_compute_score_batch(["kb", "kb"], ["no code", TORCH_ADD],
                                             [problem_src, "1_Add"], [{}, {}])
    assert [o["verdict"] for o in outs] == ["extract_error", "static_violation"]


def test_trl_signature(server):
    completions = [[{"role": "assistant", "content": TORCH_ADD}], "no code at all"]
    rewards = adapters.trl_reward(prompts=["p1", "p2"], completions=completions,
                                  problem=["1_Add", "1_Add"])
    assert rewards == [-1.0, -1.0]
    with pytest.raises(ValueError):
        adapters.trl_reward(prompts=["p"], completions=["c"])


def test_openrlhf_signature(server):
    torch = pytest.importorskip("torch")
    out = adapters.reward_func(["PROMPT" + TORCH_ADD, "PROMPTnothing"], ["PROMPT", "PROMPT"],
                               ["1_Add", "1_Add"])
    assert torch.equal(out["rewards"], torch.tensor([-1.0, -1.0]))
    assert out["scores"].tolist() == [0.0, 0.0]


def test_slime_signatures(server):
    s = types.SimpleNamespace(response=TORCH_ADD, label="1_Add")
    assert asyncio.run(adapters.slime_rm(None, s)) == -1.0
    group = [types.SimpleNamespace(response=r, label="1_Add") for r in ("x", TORCH_ADD, "y")]
    assert asyncio.run(adapters.slime_group_rm(None, group)) == [-1.0, -1.0, -1.0]


def test_infra_errors_are_surfaced_not_scored(tmp_path):
    """A server whose judges cannot start (device cuda on a machine without a usable GPU)
    answers infra_error: TRL gets None, the strict adapters raise."""
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("this machine has a GPU: the judge would start")
    with start_server(tmp_path, "--gpu-kind", "none", device="cuda") as url:
        adapters.configure(url, TOKEN, max_concurrency=2)
        assert adapters.trl_reward(prompts=["p"], completions=[NATIVE_ADD], problem=["1_Add"]) == [None]
        with pytest.raises(InfraError):
            adapters.verl_compute_score("kb", NATIVE_ADD, "1_Add")
