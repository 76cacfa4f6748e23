"""bench/rl_pipeline.py's host hygiene on the CPU, with an nvidia-smi that lists what a file says:
the next arm waits for the last one's GPU processes to exit, and a process without a command line
(exiting, or a zombie) is named by its state and parent."""
import importlib.util
import os
import subprocess
import sys
import threading
import time

from mc_cli import ROOT


def load_bench():
    spec = importlib.util.spec_from_file_location("rl_pipeline", os.path.join(ROOT, "bench", "rl_pipeline.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_next_arm_waits_for_the_last_ones_gpu_processes(tmp_path, monkeypatch):
    listed = tmp_path / "pids"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ncat {listed}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    bench = load_bench()
    # Another job's process (here: this test's parent) was on the GPU before the first arm.
    other = os.getppid()
    listed.write_text(f"{other}\n")
    before = bench.gpu_pids()
    assert before == {other}
    # The last arm's process still listed: waited for until the list drops it.
    lingering = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    listed.write_text(f"{other}\n{lingering.pid}\n")
    threading.Timer(1.5, lambda: listed.write_text(f"{other}\n")).start()
    waited, left = bench.wait_gpu_released(before, timeout=20, every=0.2)
    assert 1.0 <= waited < 10 and left == [], (waited, left)
    # One that never goes: given up on after the timeout, named. Exited but not yet reaped
    # (a zombie, without a command line), it is named by its state and parent.
    listed.write_text(f"{other}\n{lingering.pid}\n")
    waited, left = bench.wait_gpu_released(before, timeout=0.5, every=0.2)
    assert waited >= 0.5 and len(left) == 1 and "time.sleep(30)" in left[0], left
    lingering.kill()
    time.sleep(0.3)
    assert bench.command_of(lingering.pid) == f"[{lingering.pid}: Z, parent {os.getpid()}]"
    lingering.wait()
    assert bench.command_of(lingering.pid) is None
