# One problem's trial references, shared by the answers judged after it
# (python/musacoder_harness/trial_cache.py): each answer gets its own copy of the inputs.
import torch

from musacoder_harness import trial_cache
from musacoder_harness.trial_cache import TrialCache


def trial():
    x = torch.rand(4, 8)
    ref = x * 2
    truth = [(ref.double().float(), 0.0, 1.0)]
    return [x, 3], ref, truth


def test_a_hit_gives_fresh_copies_that_an_answer_cannot_spoil_for_the_next():
    c = TrialCache()
    inputs, ref, truth = trial()
    assert c.put("sha-a", (42, 0), inputs, ref, truth, "native", 0.01)
    inputs[0].fill_(7)  # what a candidate did to the tensors it was handed
    got = c.get("sha-a", (42, 0), torch.device("cpu"))
    assert got is not None
    x, k = got[0]
    assert k == 3 and not torch.equal(x, torch.full_like(x, 7))
    x.fill_(9)  # this answer writes into its copy
    again = c.get("sha-a", (42, 0), torch.device("cpu"))[0][0]
    assert not torch.equal(again, x) and torch.equal(again * 2, again + again)
    assert got[3] == "native" and got[4] == 0.01
    assert torch.equal(got[1], c.get("sha-a", (42, 0), torch.device("cpu"))[1])
    assert (c.hits, c.misses) == (3, 0)


def test_another_problem_replaces_the_cache_and_large_trials_are_not_kept(monkeypatch):
    c = TrialCache()
    c.put("sha-a", (42, 0), *trial(), "native", 0.0)
    assert c.get("sha-b", (42, 0), torch.device("cpu")) is None
    assert c.get("sha-a", (42, 0), torch.device("cpu")) is None  # sha-b's turn replaced it
    monkeypatch.setattr(trial_cache, "MAX_ENTRY_BYTES", 64)
    assert not c.put("sha-a", (42, 1), *trial(), "native", 0.0)
    assert c.get("sha-a", (42, 1), torch.device("cpu")) is None
