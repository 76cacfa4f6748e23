"""The GPU gate shared by a GPU's lanes (musacoder_harness/lanes.py), with real processes:
shared holders run together, a timer waits for them and keeps newcomers out, a shared holder
sees the timer waiting, and a holder that dies releases what it held."""
import multiprocessing as mp
import os
import time

from musacoder_harness.lanes import GpuLock


def _hold(path, mode, seconds, events):
    lock = GpuLock(path, lanes=3)
    lock.acquire(mode)
    events.put((mode, "in", time.monotonic()))
    time.sleep(seconds)
    events.put((mode, "out", time.monotonic()))
    lock.release()


def _die_holding(path, ready):
    lock = GpuLock(path, lanes=2)
    lock.acquire("exclusive")
    ready.set()
    os._exit(9)  # no release: the kernel drops the lock with the process


def _drain(q, n):
    return [q.get(timeout=20) for _ in range(n)]


def test_shared_holders_overlap_and_a_timer_waits_for_them(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    ctx = mp.get_context("fork")
    events = ctx.Queue()
    readers = [ctx.Process(target=_hold, args=(path, "shared", 0.6, events)) for _ in range(2)]
    for p in readers:
        p.start()
    first = _drain(events, 2)  # both inside at once
    assert all(e[1] == "in" for e in first)
    timer = ctx.Process(target=_hold, args=(path, "exclusive", 0.1, events))
    timer.start()
    rest = _drain(events, 4)
    for p in readers + [timer]:
        p.join(10)
    outs = [t for m, what, t in rest if m == "shared" and what == "out"]
    timer_in = [t for m, what, t in rest if m == "exclusive" and what == "in"][0]
    assert len(outs) == 2 and timer_in >= max(outs)


def test_a_waiting_timer_keeps_newcomers_out_and_is_seen(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    ctx = mp.get_context("fork")
    events = ctx.Queue()
    holder = GpuLock(path, lanes=3)
    holder.acquire("shared")
    assert not holder.timer_waiting()
    timer = ctx.Process(target=_hold, args=(path, "exclusive", 0.3, events))
    timer.start()
    time.sleep(0.3)  # the timer is in the turnstile, waiting for us
    newcomer = ctx.Process(target=_hold, args=(path, "shared", 0.0, events))
    newcomer.start()
    seen = False
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        seen = holder.timer_waiting(settle_s=0.1)
        time.sleep(0.05)
    assert seen, "the shared holder never saw the waiting timer"
    assert events.empty(), "someone got in while we held the gate shared"
    released = time.monotonic()
    holder.release()
    got = sorted(_drain(events, 4), key=lambda e: (e[2], e[1] == "in"))  # by time (queues interleave)
    timer.join(10)
    newcomer.join(10)
    order = [(m, what) for m, what, _ in got]
    # The timer first (it waited in the turnstile), the newcomer only after it left.
    assert order[0] == ("exclusive", "in") and order[1] == ("exclusive", "out"), order
    assert got[0][2] >= released - 0.01


def test_no_timer_no_preemption_signal(tmp_path):
    holder = GpuLock(str(tmp_path / "g.lock"), lanes=2)
    other = GpuLock(str(tmp_path / "g.lock"), lanes=2)
    holder.acquire("shared")
    other.acquire("shared")  # a second shared holder is no timer
    time.sleep(0.15)
    assert not holder.timer_waiting(settle_s=0.1)
    assert not holder.timer_waiting(settle_s=0.1)
    other.close()
    holder.close()


def test_a_dead_holder_releases_the_gate(tmp_path):
    path = str(tmp_path / "gpu0.lock")
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_die_holding, args=(path, ready))
    p.start()
    assert ready.wait(10)
    p.join(10)
    lock = GpuLock(path, lanes=2)
    t0 = time.monotonic()
    lock.acquire("exclusive")
    assert time.monotonic() - t0 < 2
    lock.close()


def test_without_a_path_it_is_a_no_op():
    lock = GpuLock("", lanes=1)
    assert not lock.enabled
    assert lock.acquire("shared") == 0.0
    assert lock.mode == "shared" and not lock.timer_waiting()
    lock.acquire("exclusive")
    lock.release()
    assert lock.mode is None
