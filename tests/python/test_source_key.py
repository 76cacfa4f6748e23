"""The harness computes the same build key as the C++ compile pool (python_source_test.cc)."""
from musacoder_harness.candidate import source_key


def test_matches_cpp_digest():
    key = source_key("k", "int f();", ["a", "b"], ["f"], None, None, None, None, None)
    assert key == "53f16fee3a2b3d95b8c56a687c64da9f9776de9206bdf5b109e0d455995db3b2"


def test_equivalent_spellings():
    a = source_key("k", "x", None, "f", [], None, None, None, None)
    b = source_key("k", ["x"], [], ["f"], None, [], [], [], False)
    assert a == b
