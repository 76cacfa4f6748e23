# A deferred answer's trials are not repeated when it is timed later (judge.py TimingDeferred,
# `passed_trials`): the record the evaluator hands back must say that every one of this
# request's trials passed, or the judge refuses it as its caller's mistake (Infra, never a
# verdict). The whole path runs in tests/unit/evaluator_cpu_test.cc (DeferredTiming...).
import pytest

from musacoder_harness.judge import TRIAL_RECORD, Infra, passed_trials_record


def record(**kw):
    rec = {"trials_passed": 5, "trials_total": 5, "extra_atol": [0.0, 1e-6], "tolerance": [],
           "mismatch": None}
    rec.update(kw)
    return rec


def test_absent_means_the_trials_run():
    assert passed_trials_record({}, 5) is None


def test_a_full_record_is_kept():
    rec = record()
    assert passed_trials_record({"passed_trials": rec}, 5) is rec
    assert {"trials_passed", "trials_total", "extra_atol"} <= set(TRIAL_RECORD)


@pytest.mark.parametrize("bad", [
    record(trials_passed=4),            # a failed trial is never timed
    record(trials_total=3),             # another request's trial count
    record(trials_passed=True),         # not a count
    record(trials_passed="5"),
    record(extra_atol="0.1"),
    record(extra_atol=[None]),
    [5, 5],
])
def test_a_record_that_does_not_show_every_trial_passed_is_refused(bad):
    with pytest.raises(Infra, match="passed_trials"):
        passed_trials_record({"passed_trials": bad}, 5)
