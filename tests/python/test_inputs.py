"""Trial inputs: seeded, beyond [0, 1), integers untouched; parameter re-draws."""
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
