# The judge's copy of a candidate's output falls back to host memory when the device copy runs
# out of memory (an honest float64 candidate kept more than the memory plan counted on
# L1/19_ReLU, H100): slower, never an infra error or a verdict. CPU tensors stand in for the
# device's; the out-of-memory error is the real torch.OutOfMemoryError.
import types

import torch

from musacoder_harness.judge import Judge


class DeviceOutput:
    """An output whose device copy runs out of memory; its host copy works."""

    is_cuda = True

    def __init__(self, value):
        self.value = value
        self.copies_to = []

    def clone(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")

    def to(self, device):
        self.copies_to.append(device)
        return self.value.clone()


class FakeJudge:
    """Judge.snapshot's one dependency, torch, with DeviceOutput counted as a tensor."""
    torch = types.SimpleNamespace(Tensor=(torch.Tensor, DeviceOutput), OutOfMemoryError=torch.OutOfMemoryError,
                                  cuda=torch.cuda)


def snapshot(x, plan):
    return Judge.snapshot(FakeJudge(), x, plan)


def test_out_of_memory_at_a_snapshot_moves_it_and_later_ones_to_the_host():
    plan = {"snapshots": "device"}
    x = DeviceOutput(torch.arange(4.0))
    got = snapshot(x, plan)
    assert torch.equal(got, torch.arange(4.0)) and x.copies_to == ["cpu"]
    assert plan["snapshots"] == "host" and "out of memory" in plan["snapshots_why"]
    y = DeviceOutput(torch.ones(2))
    assert torch.equal(snapshot(y, plan), torch.ones(2)) and y.copies_to == ["cpu"]


def test_device_snapshots_are_private_copies():
    plan = {"snapshots": "device"}
    x = torch.arange(3.0)
    got = snapshot(x, plan)
    x.add_(1)
    assert torch.equal(got, torch.arange(3.0)) and plan == {"snapshots": "device"}
