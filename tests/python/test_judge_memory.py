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


class OnceOutOfMemory(DeviceOutput):
    """An output whose device copy runs out of memory once: after the candidate's allocator
    cache went back to the driver (trim), it fits."""

    def __init__(self, value):
        super().__init__(value)
        self.tries = 0

    def clone(self):
        self.tries += 1
        if self.tries == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return self.value.clone()


def test_a_snapshot_that_runs_out_of_memory_trims_the_candidate_first():
    plan, trims = {"snapshots": "device"}, []
    x = OnceOutOfMemory(torch.arange(4.0))
    got = Judge.snapshot(FakeJudge(), x, plan, lambda: trims.append(1))
    assert torch.equal(got, torch.arange(4.0)) and trims == [1] and x.copies_to == []
    assert plan == {"snapshots": "device"}  # later snapshots stay on the device
    y = DeviceOutput(torch.ones(2))  # still no room after the trim: the host, as before
    assert torch.equal(Judge.snapshot(FakeJudge(), y, plan, lambda: trims.append(1)), torch.ones(2))
    assert trims == [1, 1] and y.copies_to == ["cpu"] and plan["snapshots"] == "host"


class ShortOfMemory(torch.nn.Module):
    """A reference whose float64 run finds the device full `times` times (the candidate's
    allocator cache held the room, H100), then runs."""

    def __init__(self, times):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([2.0]))
        self.left = times

    def forward(self, x):
        if x.dtype == torch.float64 and self.left > 0:
            self.left -= 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")
        return x * self.w


class TruthJudge:
    """What Judge.truth_run reads: torch, its device (the CPU stands in) and whether it is CUDA."""
    torch = torch
    device = torch.device("cpu")
    cuda = True


def test_the_float64_reference_trims_the_candidate_before_it_leaves_the_device():
    x = torch.rand(8)
    for times, where in ((1, ["device"]), (2, ["host"])):
        model, trims, res = ShortOfMemory(times), [], {}
        ref = model(x)
        truth = Judge.truth_run(TruthJudge(), model, [x], ref, {"truth": "device"}, res,
                                lambda: trims.append(1))
        assert res["truth_on"] == where and res["trims"] == 1 and trims == [1], (times, res)
        assert torch.equal(truth[0][0], ref)  # the float64 result, rounded
    res = {}  # without a trim (a plain call): device, then host, as before
    Judge.truth_run(TruthJudge(), ShortOfMemory(1), [x], x * 2, {"truth": "device"}, res)
    assert res["truth_on"] == ["host"] and "trims" not in res


class StatefulRNN(torch.nn.Module):
    """Level 3's 33_VanillaRNN in small: forward keeps its hidden state in a plain tensor
    attribute, replaced on every call."""

    def __init__(self):
        super().__init__()
        self.hidden = torch.randn(2, 3)
        self.i2h = torch.nn.Linear(4 + 3, 3)
        self.h2o = torch.nn.Linear(3, 2)

    def forward(self, x, initial_hidden=None):
        if initial_hidden is not None:
            self.hidden.copy_(initial_hidden)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.h2o(self.hidden)


def test_the_float64_reference_leaves_a_stateful_model_as_it_was():
    """The float64 reference run must not leave float64 state in the reference model: the next
    float32 run of L3/33_VanillaRNN failed with mixed dtypes, an infra error for every variant
    (H100, session 28)."""
    torch.manual_seed(0)
    model = StatefulRNN()
    inputs = [torch.rand(2, 4), torch.rand(2, 3)]
    with torch.no_grad():
        ref = model(*inputs)
    judge = types.SimpleNamespace(torch=torch, device=torch.device("cpu"), cuda=False)
    res = {}
    summary = Judge.truth_run(judge, model, inputs, [ref], {"truth": "device"}, res)
    assert summary is not None and res["truth_on"] == ["device"], res
    assert model.hidden.dtype == torch.float32
    with torch.no_grad():
        again = model(*inputs)  # the next trial's float32 reference
    assert torch.equal(again, ref)
