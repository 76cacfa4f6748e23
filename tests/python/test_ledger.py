# The GPU's memory ledger (python/musacoder_harness/ledger.py): what the rest of the verifier holds
# beside a judge, the measure of whether a candidate that ran out of memory had the GPU to itself.
import json
import os
import subprocess
import sys
import time

import torch

from musacoder_harness.ledger import ALONE_SLACK_BYTES, Ledger, alone, others_bytes


def entry(folder, pid, held, state="waiting", processes=1):
    with open(os.path.join(folder, f"{pid}.json"), "w") as f:
        json.dump({"pid": pid, "state": state, "held_bytes": held, "processes": processes}, f)


def test_a_judge_sees_the_others_declared_memory_on_the_cpu(tmp_path):
    lock = str(tmp_path / "gpu0.lock")
    me = Ledger(lock)
    me.declare("exclusive", 0, 3)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        entry(me.dir, other.pid, 50 << 30, processes=4)
        held, detail = others_bytes(me, torch, torch.device("cpu"), 3)
        assert held == 50 << 30 and not alone(held)
        assert detail["verifier_processes"] == 7
        assert detail["others"][str(other.pid)] == {"state": "waiting", "held_bytes": 50 << 30}
        entry(me.dir, other.pid, ALONE_SLACK_BYTES)  # gave its memory back before waiting
        assert alone(others_bytes(me, torch, torch.device("cpu"), 3)[0])
    finally:
        other.kill()
        other.wait()


def test_entries_of_dead_and_exited_processes_are_dropped(tmp_path):
    me = Ledger(str(tmp_path / "gpu0.lock"))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    entry(me.dir, gone.pid, 50 << 30)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # exited, not yet waited for
    try:
        for _ in range(200):
            with open(f"/proc/{zombie.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.05)
        entry(me.dir, zombie.pid, 50 << 30)
        assert me.others() == []
        assert not os.path.exists(os.path.join(me.dir, f"{gone.pid}.json"))
    finally:
        zombie.wait()


def test_own_entry_is_not_counted_and_goes_with_close(tmp_path):
    me = Ledger(str(tmp_path / "gpu0.lock"))
    me.declare("waiting", 80 << 30, 2)
    assert me.others() == []
    assert os.path.exists(me.path)
    me.close()
    assert not os.path.exists(me.path)


def test_without_a_gate_there_is_no_ledger():
    me = Ledger("")
    me.declare("idle", 1, 1)
    assert not me.enabled and me.others() == []
