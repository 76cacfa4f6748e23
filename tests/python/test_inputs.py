"""Trial inputs: seeded, beyond [0, 1), integers untouched; parameter re-draws; the timing
sets' secret."""
import json
import os
import subprocess
import sys
import types

import torch

from musacoder_harness.inputs import make_inputs, redraw_parameters, variant_for


def problem():
    m = types.SimpleNamespace()
    m.get_inputs = lambda: [torch.rand(1000), torch.randint(0, 10, (5,)), 3]
    return m


def test_seeded_and_deterministic():
    a = make_inputs(problem(), 7, "signed", "cpu", torch.float32)
    b = make_inputs(problem(), 7, "signed", "cpu", torch.float32)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == 3
    c = make_inputs(problem(), 8, "signed", "cpu", torch.float32)
    assert not torch.equal(a[0], c[0])


def test_variants_leave_the_unit_interval():
    native = make_inputs(problem(), 1, "native", "cpu", torch.float32)[0]
    assert native.min() >= 0 and native.max() < 1
    assert make_inputs(problem(), 1, "signed", "cpu", torch.float32)[0].min() < 0
    assert make_inputs(problem(), 1, "scaled", "cpu", torch.float32)[0].abs().max() > 5
    assert make_inputs(problem(), 1, "outliers", "cpu", torch.float32)[0].abs().max() > 20
    assert {variant_for(t) for t in range(5)} >= {"native", "signed", "scaled", "outliers"}


def test_integers_stay_integers_and_precision_applies():
    x = make_inputs(problem(), 1, "signed", "cpu", torch.bfloat16)
    assert x[0].dtype == torch.bfloat16 and x[1].dtype == torch.int64


def test_redraw_moves_affine_parameters_off_their_defaults():
    ln = torch.nn.LayerNorm(64)
    new = redraw_parameters(ln, 3)
    assert set(new) == {"weight", "bias"}
    assert not torch.allclose(ln.weight, torch.ones(64))
    assert not torch.allclose(ln.bias, torch.zeros(64))


def seeds_in_a_fresh_process(env_extra):
    """trial_schedule(42, 5) and the timing sets' seeds as a new judge process draws them."""
    harness = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python")
    env = {k: v for k, v in os.environ.items() if k != "MUSACODER_JUDGE_TIMING_SALT"}
    env.update(PYTHONPATH=harness, **env_extra)
    p = subprocess.run([sys.executable, "-c", "import json; from musacoder_harness.inputs import trial_schedule, timing_seed;"
                        "print(json.dumps([trial_schedule(42, 5), [timing_seed(42, i) for i in range(3)]]))"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0 or env_extra, p.stderr[-2000:]
    return json.loads(p.stdout) if p.returncode == 0 else p.stderr


def test_timing_inputs_mix_in_a_secret_of_the_judge_process():
    """The run's seed is sent to the candidate (its weights start as the reference's), so the
    timed inputs' seeds must not follow from it alone: two judge processes draw different ones.
    The correctness trials stay the run seed's, the very ones synth's probe checked."""
    a, b = seeds_in_a_fresh_process({}), seeds_in_a_fresh_process({})
    assert a[1] != b[1] and len(set(a[1])) == 3 and all(0 <= s < 2 ** 56 for s in a[1])
    assert a[0] == b[0] == [[42 * 1000 + t + 1, variant_for(t)] for t in range(5)]
    # Fixed, to replay a timing on the same inputs.
    c, d = seeds_in_a_fresh_process({"MUSACODER_JUDGE_TIMING_SALT": "7"}), \
        seeds_in_a_fresh_process({"MUSACODER_JUDGE_TIMING_SALT": "7"})
    assert c == d and c[1] != a[1]
    err = seeds_in_a_fresh_process({"MUSACODER_JUDGE_TIMING_SALT": "seven"})
    assert "MUSACODER_JUDGE_TIMING_SALT must be an integer, got 'seven'" in err


def test_candidates_never_get_the_secret(monkeypatch, tmp_path):
    from musacoder_harness.candidate_proc import candidate_env
    monkeypatch.setenv("MUSACODER_JUDGE_TIMING_SALT", "7")
    assert "MUSACODER_JUDGE_TIMING_SALT" not in candidate_env("/harness", str(tmp_path))
