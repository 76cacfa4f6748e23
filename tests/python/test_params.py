"""Parameter re-draws reach a candidate's tensors whatever it calls them (params.py)."""
import torch
import torch.nn as nn

from musacoder_harness.params import match_parameters, tensor_specs


class RefLN(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)


class OwnLN(nn.Module):  # the honest LayerNorm: its own weight and bias
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(16))
        self.bias = nn.Parameter(torch.zeros(16))


class Wrapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.impl = RefLN()


def test_same_names_map_to_themselves():
    m, un = match_parameters(tensor_specs(RefLN()), tensor_specs(RefLN()))
    assert m == {"ln.weight": "ln.weight", "ln.bias": "ln.bias"} and un == []


def test_own_names_map_by_order_and_shape():
    m, un = match_parameters(tensor_specs(RefLN()), tensor_specs(OwnLN()))
    assert m == {"ln.weight": "weight", "ln.bias": "bias"} and un == []
    m, un = match_parameters(tensor_specs(RefLN()), tensor_specs(Wrapped()))
    assert m == {"ln.weight": "impl.ln.weight", "ln.bias": "impl.ln.bias"} and un == []


def test_unique_shapes_map_when_order_differs():
    ref = [("fc.weight", (8, 4), "f"), ("fc.bias", (8,), "f")]
    cand = [("b", (8,), "f"), ("w", (8, 4), "f"), ("scratch", (3,), "f")]
    m, un = match_parameters(ref, cand)
    assert m == {"fc.weight": "w", "fc.bias": "b"} and un == []


def test_ambiguous_mappings_are_left_unmapped():
    # Two same-shaped tensors on each side in a different count: no unambiguous pairing.
    ref = [("a.weight", (8,), "f"), ("b.weight", (8,), "f")]
    cand = [("x", (8,), "f"), ("y", (8,), "f"), ("z", (8,), "f")]
    m, un = match_parameters(ref, cand)
    assert m == {} and sorted(un) == ["a.weight", "b.weight"]
    # A reference tensor the candidate does not hold at all.
    m, un = match_parameters([("w", (4, 4), "f")], [])
    assert un == ["w"]


def test_names_match_before_order():
    ref = [("w1", (4,), "f"), ("w2", (4,), "f")]
    cand = [("w2", (4,), "f"), ("w1", (4,), "f")]
    assert match_parameters(ref, cand)[0] == {"w1": "w1", "w2": "w2"}
