"""CPU-mode tensor transport: shared mappings, so writes by the receiver are visible to the
sender (input mutation is detectable), and files outside the shared folder are refused."""
import pytest
import torch

from musacoder_harness.transport import open_tensor, open_value, share, share_value


def test_receiver_writes_are_visible_to_the_sender(tmp_path):
    x = torch.randn(4, 5)
    desc, mine = share(x, str(tmp_path))
    assert torch.equal(mine, x)
    theirs = open_tensor(desc, str(tmp_path))
    theirs.add_(1)
    assert torch.equal(mine, x + 1)


def test_scalars_and_dtypes(tmp_path):
    d, v = share_value(3, str(tmp_path))
    assert v == 3 and open_value(d) == 3
    for dtype in (torch.int64, torch.bool, torch.bfloat16):
        t = torch.ones(3, dtype=dtype)
        d, _ = share(t, str(tmp_path))
        assert torch.equal(open_tensor(d, str(tmp_path)), t)


def test_paths_outside_the_share_are_refused(tmp_path):
    d, _ = share(torch.ones(2), str(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ValueError):
        open_tensor(d, str(other))
    d["shape"] = [1000]
    with pytest.raises(ValueError):
        open_tensor(d, str(tmp_path))


def test_an_empty_descriptor_must_have_no_elements():
    """A CUDA tensor of no elements has no IPC handle and travels as its shape alone; a
    descriptor that claims elements it does not carry is refused (GPU side:
    tests/cases/faults/empty_output.py)."""
    with pytest.raises(ValueError, match=r"an 'empty' tensor descriptor with shape \[2, 3\] has elements"):
        open_tensor({"kind": "empty", "dtype": "torch.float32", "shape": [2, 3], "device": 0})
    with pytest.raises(ValueError, match="has elements"):
        open_tensor({"kind": "empty", "dtype": "torch.float32", "shape": [], "device": 0})
