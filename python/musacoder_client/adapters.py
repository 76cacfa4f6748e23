"""MooreEval as the reward function of Python RL frameworks.

Every adapter talks to a running `musacoder serve` (MOOREEVAL_URL, MOOREEVAL_TOKEN or
MOOREEVAL_TOKEN_FILE in the environment, or configure() from code). The problem of a sample is
its label / ground truth: either a problem key the server knows ("L1/19_ReLU") or the problem's
KernelBench source (anything containing "class Model").

An infrastructure failure is never scored: adapters whose framework accepts a missing reward
(TRL) return None for it; the others raise InfraError, so the step fails loudly instead of
training on a fake 0.

    verl      custom_reward_function.path=musacoder_client/adapters.py
              custom_reward_function.name=verl_compute_score   (or verl_compute_score_batch
              with the batch reward manager)
    TRL       GRPOTrainer(reward_funcs=[trl_reward], ...)  -- dataset column "problem"
    OpenRLHF  --remote_rm_url musacoder_client/adapters.py, which exports reward_func;
              --label_key problem
    slime     --custom-rm-path musacoder_client.adapters.slime_rm   (or slime_group_rm with
              --group-rm)
"""
from __future__ import annotations

import os
import threading
from typing import Any, Sequence

from .client import InfraError, MooreEvalClient, reward_of

_client: MooreEvalClient | None = None
_lock = threading.Lock()


def configure(url: str | None = None, token: str | None = None, **kwargs: Any) -> MooreEvalClient:
    """Sets the client the adapters use (else it is built from the environment on first use)."""
    global _client
    with _lock:
        if _client is not None:
            _client.close()
        _client = MooreEvalClient(url or os.environ.get("MOOREEVAL_URL", "http://127.0.0.1:8080"),
                                  token if token is not None else _env_token(), **kwargs)
        return _client


def _env_token() -> str | None:
    if os.environ.get("MOOREEVAL_TOKEN"):
        return os.environ["MOOREEVAL_TOKEN"]
    path = os.environ.get("MOOREEVAL_TOKEN_FILE")
    if path:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    return line
    return None


def client() -> MooreEvalClient:
    with _lock:
        if _client is not None:
            return _client
    return configure()


def _item(problem: Any, answer: str, sample_id: Any = 0) -> dict:
    if isinstance(problem, dict):  # {"problem": key} or {"problem_source": ..., "problem_name": ...}
        item = dict(problem)
    elif isinstance(problem, str) and "class Model" in problem:
        item = {"problem_source": problem, "problem_name": "problem"}
    elif isinstance(problem, str) and problem:
        item = {"problem": problem}
    else:
        raise ValueError(f"a sample's problem must be a key or KernelBench source, got {problem!r:.80}")
    item["answer"] = answer
    item["sample_id"] = str(sample_id)
    return item


def _text(completion: Any) -> str:
    """A completion as text: plain strings, or chat messages (the last assistant turn)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def _strict(rows: Sequence[dict]) -> list[float]:
    out = []
    for row in rows:
        r = reward_of(row)
        if r is None:
            raise InfraError(f"MooreEval could not judge a sample: {row.get('infra_error', '?')}")
        out.append(r)
    return out


# -- verl -------------------------------------------------------------------------------------
def verl_compute_score(data_source: str, solution_str: str, ground_truth: Any,
                       extra_info: dict | None = None) -> dict:
    """verl's custom reward function: {"score": reward, plus MooreEval's verdict details}."""
    row = client().verify([_item(ground_truth, solution_str)])[0]
    score = _strict([row])[0]
    return {"score": score, "verdict": row.get("verdict"), "speedup": row.get("speedup") or 0.0,
            "correct": bool(row.get("correct"))}


def verl_compute_score_batch(data_sources: Sequence[str], solution_strs: Sequence[str],
                             ground_truths: Sequence[Any], extra_infos: Sequence[Any] | None = None
                             ) -> list[dict]:
    """verl's batch reward manager: one request stream for the whole batch."""
    rows = client().verify([_item(g, s, k) for k, (s, g) in enumerate(zip(solution_strs, ground_truths))])
    scores = _strict(rows)
    return [{"score": sc, "verdict": r.get("verdict"), "speedup": r.get("speedup") or 0.0}
            for sc, r in zip(scores, rows)]


# -- TRL --------------------------------------------------------------------------------------
def trl_reward(prompts: Sequence[Any], completions: Sequence[Any], problem: Sequence[Any] | None = None,
               **kwargs: Any) -> list[float | None]:
    """GRPOTrainer reward function. `problem` is the dataset column naming each sample's
    problem. Infra failures give None, which TRL leaves out of the reward."""
    if problem is None:
        raise ValueError("trl_reward needs a dataset column 'problem' (a key or KernelBench source)")
    rows = client().verify([_item(p, _text(c), k) for k, (p, c) in enumerate(zip(problem, completions))])
    return [reward_of(r) for r in rows]


# -- OpenRLHF ---------------------------------------------------------------------------------
def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any]) -> dict:
    """OpenRLHF's --remote_rm_url file function. `queries` are prompt + response; the answer is
    the part after the prompt. Returns {"rewards", "scores", "extra_logs"} as tensors."""
    import torch  # OpenRLHF runs with torch; the rest of this package does not need it

    answers = [q[len(p):] if q.startswith(p) else q for q, p in zip(queries, prompts)]
    rows = client().verify([_item(l, a, k) for k, (a, l) in enumerate(zip(answers, labels))])
    rewards = torch.tensor(_strict(rows), dtype=torch.float32)
    correct = torch.tensor([1.0 if r.get("correct") else 0.0 for r in rows])
    return {"rewards": rewards, "scores": correct, "extra_logs": {"mooreeval_correct": correct}}


# -- slime ------------------------------------------------------------------------------------
async def slime_rm(args: Any, sample: Any) -> float:
    """slime --custom-rm-path: one Sample (its .response and .label)."""
    rows = await client().averify([_item(sample.label, sample.response)])
    return _strict(rows)[0]


async def slime_group_rm(args: Any, samples: Sequence[Any]) -> list[float]:
    """slime --custom-rm-path with --group-rm: a list of Samples, one reward each, in order."""
    rows = await client().averify([_item(s.label, s.response, k) for k, s in enumerate(samples)])
    return _strict(rows)
