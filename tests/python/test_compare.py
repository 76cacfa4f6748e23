"""The judge's comparison: tolerances, NaN, shapes, dtypes, scale-aware error, degeneracy."""
import torch

from musacoder_harness.compare import compare_outputs, degenerate


def test_exact_and_within_tolerance():
    r = torch.randn(100, 100)
    assert compare_outputs(r, r.clone(), 1e-4, 1e-4)[0]
    assert compare_outputs(r, r + 5e-5, 1e-4, 1e-4)[0]


def test_first_mismatch_is_reported():
    r = torch.zeros(4, 5)
    o = r.clone()
    o[2, 3] = 1.0
    ok, d = compare_outputs(r, o, 1e-4, 1e-4)
    assert not ok
    assert d["index"] == [2, 3] and d["expected"] == 0.0 and d["got"] == 1.0
    assert d["mismatched"] == 1 and d["total"] == 20


def test_nan_where_reference_is_finite_fails():
    r = torch.ones(10)
    o = r.clone()
    o[7] = float("nan")
    ok, d = compare_outputs(r, o, 1e-4, 1e-4)
    assert not ok and d["index"] == [7]


def test_shape_dtype_and_count():
    r = torch.ones(3)
    assert compare_outputs(r, torch.ones(4), 1e-4, 1e-4)[1]["kind"] == "shape"
    assert compare_outputs(r, torch.ones(3, dtype=torch.float64), 1e-4, 1e-4)[1]["kind"] == "dtype"
    assert compare_outputs((r, r), [r], 1e-4, 1e-4)[1]["kind"] == "output_count"


def test_tuple_outputs_are_compared_element_by_element():
    a, b = torch.randn(3), torch.randn(2)
    assert compare_outputs((a, b), [a.clone(), b.clone()], 1e-4, 1e-4)[0]
    ok, d = compare_outputs((a, b), [a.clone(), b + 1], 1e-4, 1e-4)
    assert not ok and d["output"] == 1


def test_constant_kernel_fails_on_long_softmax_rows():
    # Every softmax output of a 65536-wide row is far below atol=1e-4: allclose alone would
    # accept all zeros. The scale-aware bound rejects it.
    ref = torch.softmax(torch.rand(4, 65536), dim=1)  # KernelBench-style [0, 1) inputs
    assert torch.allclose(ref, torch.zeros_like(ref), atol=1e-4, rtol=1e-4)
    ok, d = compare_outputs(ref, torch.zeros_like(ref), 1e-4, 1e-4)
    assert not ok and d["kind"] == "relative_norm"


def test_integer_outputs_must_be_equal():
    r = torch.arange(10)
    assert compare_outputs(r, r.clone(), 1e-4, 1e-4)[0]
    assert not compare_outputs(r, r + 1, 1e-4, 1e-4)[0]


def test_degenerate_references():
    assert degenerate(torch.zeros(100))
    assert degenerate(torch.full((100,), 3.0))
    assert not degenerate(torch.randn(100))
    assert degenerate((torch.randn(10), torch.zeros(10)))
