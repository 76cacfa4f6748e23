"""The shared timing loop and its statistics (CPU mode; the GPU suite times on the device)."""
import torch

from musacoder_harness.timing import L2Flusher, center_us, stats, time_adaptive, time_iterations


def test_stats():
    s = stats([3.0, 1.0, 2.0, 10.0])
    assert s["median_us"] == 2.5 and s["min_us"] == 1.0 and s["max_us"] == 10.0 and s["n"] == 4


def test_trimmed_mean_drops_the_tails_and_speedups_use_the_median():
    s = stats([100.0] + [5.0] * 17 + [6.0, 0.1])
    assert s["trimmed_mean_us"] == (5.0 * 17 + 6.0) / 18 and s["mean_us"] > 9
    assert center_us(s) == 5.0


def test_recent_outputs_are_held_so_outputs_land_at_several_addresses():
    import musacoder_harness.timing as timing
    seen = []

    def fn(x):
        y = torch.empty_like(x)
        seen.append(y.data_ptr())
        return y.copy_(x)
    sets = [[torch.ones(1024)]]
    time_iterations(fn, sets, "cpu", L2Flusher("cpu"), 40)
    # CPU tensors are not pooled like CUDA's caching allocator; what is checked here is that
    # up to HOLD_MAX outputs stay alive at once (distinct live addresses).
    assert len(set(seen[-timing.HOLD_MAX:])) == timing.HOLD_MAX


def test_iterations_rotate_input_sets_and_keep_last_outputs():
    sets = [[torch.full((3,), float(i))] for i in range(3)]
    times, last = time_iterations(lambda x: x * 2, sets, "cpu", L2Flusher("cpu"), 7)
    assert len(times) == 7 and all(t > 0 for t in times)
    assert [float(o[0]) for o in last] == [0.0, 2.0, 4.0]


def test_adaptive_stops_within_budget():
    st, _ = time_adaptive(lambda: sum(range(100)), [[]], "cpu", L2Flusher("cpu"), budget_s=0.2)
    assert st["n"] >= 10


def test_the_forgery_bound_forgives_overhead_and_a_floor_and_no_more():
    from musacoder_harness.timing import clock_forged
    # 100 iterations of a 5 us kernel, 100 us of calibrated overhead per iteration.
    claimed, overhead = 500.0, 100 * 100.0
    honest_wall = 100 * 120.0  # the GPU's flush and the call: about the calibration
    assert not clock_forged(claimed, honest_wall, overhead)
    # Unexplained wall time up to 10x the claim, beyond twice the overhead and the 2 ms floor.
    edge = 2 * overhead + 2000 + 10 * claimed
    assert not clock_forged(claimed, edge, overhead)
    assert clock_forged(claimed, edge + 1, overhead)
    # A run whose real work went unclaimed (a kernel 100x slower than its claim) is caught.
    assert clock_forged(claimed, 100 * 500.0 + honest_wall, overhead)
