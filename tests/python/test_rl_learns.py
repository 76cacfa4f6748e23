"""RL moves a policy the right way, end to end on the CPU: a tiny model fine-tuned to answer one
prompt with a working kernel or a refusal, half and half (fork_policy.py), is trained by
`musacoder-model train rl` through the real MooreEval in CPU mode. The test checks what
the other RL tests cannot: the sign of the whole loop. The working answer's advantage is
positive in the batch that is trained, the fork's probability moves to it (measured with
transformers on the checkpoints, not by sampling), the memorized rest of the answer survives,
and the sampled pass rate reaches 1. A flipped sign, or advantages paired with the wrong
sequences, fails here; the gradient parity test in test_rl.py would still pass."""
import json
import math
import os

import pytest

import fork_policy
from mc_cli import HAS_MODEL, read_jsonl

pytestmark = pytest.mark.skipif(not HAS_MODEL, reason="musacoder-model not built (libtorch)")


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    return fork_policy.build(tmp_path_factory.mktemp("fork"))


def test_rl_moves_the_fork_to_the_working_answer(fork):
    out = os.path.join(fork.base, "run")
    dump = os.path.join(fork.base, "dump")
    fork_policy.model(*fork_policy.rl_args(fork, out, "--dump-steps", dump, "--anchor-data", fork.data))
    rows = read_jsonl(os.path.join(out, "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # Step 1 samples both branches; every answer is one of the two, judged as it should be.
    s1 = rows[0]
    assert 0 < s1["pass_rate_turn1"] < 1, s1
    assert set(s1["verdicts"]) == {"ok", "extract_error"}, s1["verdicts"]
    for t in read_jsonl(os.path.join(out, "samples", "step-00000001.jsonl")):
        answer, verdict = t["turns"][0]["answer"], t["turns"][0]["verdict"]
        assert answer in (fork_policy.OK, fork_policy.REFUSE), answer[:200]
        assert (verdict == "ok") == (answer == fork_policy.OK) == (t["advantage"] > 0), t
    # The batch step 1 trained on: working answers carry the positive advantage.
    batch = json.load(open(os.path.join(dump, "step-00000001.json")))
    seqs = batch["sequences"]
    assert len(seqs) == 8 and all(s["kept"] for s in seqs)
    context = seqs[0]["tokens"][:seqs[0]["n_context"]]
    answers = {}
    for s in seqs:
        assert s["tokens"][:s["n_context"]] == context
        answers.setdefault(s["advantage"] > 0, s["tokens"][s["n_context"]:])
    ok, refuse = answers[True], answers[False]
    assert ok[0] != refuse[0]  # the fork is the first answer token
    # Teacher-forced, before and after: the fork moves to the working answer, the tail stays.
    ok_before, no_before, tail_before = fork_policy.branch_logprobs(fork.sft, context, ok, refuse[0])
    final = os.path.join(out, "checkpoints", "step-00000004")
    ok_after, no_after, tail_after = fork_policy.branch_logprobs(final, context, ok, refuse[0])
    assert abs(ok_before - no_before) < math.log(4), (ok_before, no_before)  # about half and half
    assert ok_after > ok_before and no_after < no_before - 1.0, (ok_before, ok_after, no_before, no_after)
    assert tail_after > tail_before - 1.0, (tail_before, tail_after)
    # And so the policy samples it (every answer by step 2 in the recorded run; at T = 0.5 the
    # fork is then at p > 0.98, so 7 of 8 leaves room for another machine's arithmetic).
    last = rows[-1]
    assert last["pass_rate_turn1"] >= 7 / 8 and set(last["verdicts"]) <= {"ok", "extract_error"}, last
    # What SFT taught is kept: the anchor loss (SFT's own data) barely moves.
    assert all(abs(r["anchor_loss_change"]) < 0.01 for r in rows), [r["anchor_loss_change"] for r in rows]


def test_anchor_loss_shows_an_update_that_breaks_what_sft_taught(fork):
    """Too large a first AdamW step (lr 2e-3 after SFT at 5e-3, no warmup) breaks the memorized
    answer: nothing passes after it, and the anchor loss says why (bench/rl_fork.py maps where
    that starts)."""
    out = os.path.join(fork.base, "too-fast")
    fork_policy.model(*fork_policy.rl_args(fork, out, "--anchor-data", fork.data, "--anchor-every", "2",
                                           lr="2e-3", steps=2))
    rows = read_jsonl(os.path.join(out, "metrics.jsonl"))
    assert rows[0]["updated"] and "anchor_loss" not in rows[0]  # measured every 2 steps
    assert rows[1]["pass_rate_turn1"] == 0, rows[1]
    assert rows[1]["anchor_loss_change"] > 0.02 and rows[1]["anchor_loss"] > 5 * (rows[1]["anchor_loss"] - rows[1]["anchor_loss_change"])
