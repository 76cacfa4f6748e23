"""The judge's input-mutation check: a salted fingerprint instead of a full copy."""
import torch

from musacoder_harness.judge import fingerprint


def test_unchanged_inputs_keep_their_fingerprint():
    for x in (torch.randn(1000), torch.randint(0, 9, (7, 3)), torch.randn(5, 5).half(),
              torch.tensor([float("nan"), 1.0]), torch.zeros(0)):
        assert fingerprint(x, 12345) == fingerprint(x.clone(), 12345)


def test_any_change_is_seen():
    x = torch.randn(4096)
    fp = fingerprint(x, 99)
    y = x.clone()
    y[1234] = torch.nextafter(y[1234], torch.tensor(float("inf")))  # one ulp
    assert fingerprint(y, 99) != fp
    z = x.clone()
    z[[3, 4]] = z[[4, 3]]  # a swap keeps the plain sum
    assert fingerprint(z, 99) != fp
    assert fingerprint(x.view(64, 64), 99) != fp  # shape is part of it


def test_chunk_boundaries_are_covered():
    x = torch.randn(3 * (1 << 24) // 2 + 17)  # crosses a chunk boundary
    a = fingerprint(x, 7)
    y = x.clone()
    y[-1] += 1
    assert fingerprint(y, 7) != a and fingerprint(x.clone(), 7) == a


def test_host_fallback_gives_the_same_value(monkeypatch):
    """Out of device memory for a chunk's temporaries, the fingerprint is taken on the host and
    must equal the device's exactly (the check compares a fingerprint taken before the
    candidate ran with one taken after). The device is simulated: a tensor that says it is on
    CUDA, and an allocation there that runs out of memory, as on the H100."""
    x = torch.randn(3 * (1 << 24) // 2 + 17)
    want = fingerprint(x, 4242)
    assert fingerprint(x, 4242, on_host=True) == want

    class OnDevice(torch.Tensor):
        @property
        def is_cuda(self):
            return True

        @property
        def device(self):
            return torch.device("cuda", 0)
    fake = x.as_subclass(OnDevice)
    real_zeros = torch.zeros
    asked = []

    def zeros(*a, **k):
        if str(k.get("device", "")).startswith("cuda"):
            asked.append(k["device"])
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 128.00 MiB")
        return real_zeros(*a, **k)
    monkeypatch.setattr(torch, "zeros", zeros)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert fingerprint(fake, 4242) == want
    assert asked  # the device was tried first
