"""bench/rl_pipeline.py's host hygiene on the CPU, with an nvidia-smi that lists what a file says:
the next arm waits for the last one's GPU processes to exit, and a process without a command line
(exiting, or a zombie) is named by its state and parent."""
import importlib.util
import json
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


def smi_listing(tmp_path, monkeypatch):
    """An nvidia-smi first on PATH that lists the process ids the returned file holds, one a line;
    every GPU watched (no CUDA_VISIBLE_DEVICES)."""
    listed = tmp_path / "pids"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ncat {listed}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return listed


def test_next_arm_waits_for_the_last_ones_gpu_processes(tmp_path, monkeypatch):
    listed = smi_listing(tmp_path, monkeypatch)
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


def test_an_unreaped_process_does_not_make_the_host_busy(tmp_path, monkeypatch):
    """A GPU process nvidia-smi still lists after it exited (a zombie, as orphans under a PID 1 that
    does not reap are) is counted apart; a live neighbour
    still flags the arm."""
    listed = smi_listing(tmp_path, monkeypatch)
    bench = load_bench()
    arm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    while bench.stat_fields(dead.pid)[0] != "Z":
        time.sleep(0.05)
    listed.write_text(f"{arm.pid}\n{dead.pid}\n")
    watch = bench.HostWatch(arm, every=0.1)
    time.sleep(0.4)
    host = watch.finish()
    assert host["quiet_host"] and host["other_gpu_processes"] == 0 and host["exited_listed"] == 1, host
    neighbour = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    listed.write_text(f"{arm.pid}\n{dead.pid}\n{neighbour.pid}\n")
    watch = bench.HostWatch(arm, every=0.1)
    time.sleep(0.4)
    host = watch.finish()
    assert not host["quiet_host"] and host["other_gpu_processes"] == 1 and "time.sleep(30)" in host["others"][0], host
    for p in (arm, neighbour):
        p.kill()
        p.wait()
    dead.wait()


def test_only_the_benchs_own_gpus_are_watched(tmp_path, monkeypatch):
    """Given GPU 0 (CUDA_VISIBLE_DEVICES, by index or UUID) beside a recipe on GPU 1, the bench
    neither counts nor waits on GPU 1's processes; unset, it watches every GPU."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text('#!/bin/sh\ncase "$1" in\n'
                   '  --query-gpu=*) printf "0, GPU-aaa, 00000000:19:00.0\\n1, GPU-bbb, 00000000:2A:00.0\\n" ;;\n'
                   '  *) printf "101, 00000000:19:00.0\\n202, 00000000:2a:00.0\\n303, 00000000:2A:00.0\\n" ;;\nesac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    bench = load_bench()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert bench.gpu_pids() == {101}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbb")
    assert bench.gpu_pids() == {202, 303}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # names no GPU nvidia-smi lists: every one counts
    assert bench.gpu_pids() == {101, 202, 303}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert bench.gpu_pids() == {101, 202, 303}


def test_resume_keeps_finished_arms_and_reruns_a_killed_one_from_scratch(tmp_path):
    """A lease ends mid-bench: --resume keeps the arms SUMMARY.json already holds and runs the
    rest afresh (a killed arm's folder removed first: train rl would resume it), and refuses a
    summary of other options. The trainer here is a stand-in that writes metrics rows; what is
    tested is the bench's bookkeeping."""
    ran = tmp_path / "ran"
    trainer = tmp_path / "train-rl"
    trainer.write_text(f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--out") + 1]
arm = os.path.basename(out)
with open({str(ran)!r}, "a") as f:
    f.write(arm + (" leftover" if os.path.exists(os.path.join(out, "partial")) else "") + "\\n")
os.makedirs(out, exist_ok=True)
if os.environ.get("FAIL_ARM") == arm:
    open(os.path.join(out, "partial"), "w").close()
    sys.exit(3)
with open(os.path.join(out, "metrics.jsonl"), "w") as f:
    for step in (1, 2, 3, 4):
        f.write(json.dumps({{"step": step, "generate_s": 10.0, "verify_wait_s": 2.0, "drain_s": 0.0, "train_s": 1.0,
                            "step_s": 13.0 if "overlapped" in arm else 14.0, "verify_overhead": 0.2, "asked_while_decoding": 0,
                            "pass_rate_turn1": 0.5, "pass_rate_turn2": 0.1, "pass_rate_turn3": 0.0, "answers": 64,
                            "answer_tokens_mean": 500.0}}) + "\\n")
""")
    trainer.chmod(0o755)
    out = tmp_path / "bench"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "rl_pipeline.py"), "--musacoder-model", str(trainer),
           "--model", "m", "--problems", "p.jsonl", "--out", str(out), "--steps", "4",
           "--arms", "turns,overlapped", "--", "--level", "1"]
    first = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "FAIL_ARM": "overlapped"})
    assert first.returncode != 0 and "overlapped: train rl exited with 3" in first.stderr, first.stderr
    again = subprocess.run(cmd + [], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr  # without --resume: both arms again, the killed one's folder cleared
    assert ran.read_text().split() == ["turns", "overlapped", "turns", "overlapped"]
    ran.write_text("")
    (out / "overlapped" / "partial").parent.mkdir(parents=True, exist_ok=True)
    (out / "overlapped" / "partial").write_text("")
    summary = json.loads((out / "SUMMARY.json").read_text())
    del summary["arms"]["overlapped"]
    (out / "SUMMARY.json").write_text(json.dumps(summary))
    resumed = subprocess.run(cmd[:-3] + ["--resume", "--", "--level", "1"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed: turns" in resumed.stdout
    assert ran.read_text() == "overlapped\n"  # the killed arm's folder was cleared first
    summary = json.loads((out / "SUMMARY.json").read_text())
    assert set(summary["arms"]) == {"turns", "overlapped"}
    assert summary["arms"]["overlapped"]["overhead_vs_turns_all"] == (52 - 44) / 44
    # The stand-in's rows have no gen_continued: an overlapped arm that reused nothing is said.
    assert "overlapped: overlapped, but no prompt continued a kept cache" in resumed.stdout
    assert summary["arms"]["overlapped"]["kv_continued"] == 0 and summary["arms"]["turns"]["kv_continued"] is None
    # A repeat of an arm (NAME@K) runs as NAME into its own folder, and the spread is reported.
    ran.write_text("")
    again = cmd[:-3] + ["--resume", "--", "--level", "1"]
    again[again.index("--arms") + 1] = "turns,overlapped,turns@2"
    rep = subprocess.run(again, capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    assert ran.read_text() == "turns@2\n" and "--out" in rep.stdout and "turns@2" in rep.stdout
    summary = json.loads((out / "SUMMARY.json").read_text())
    assert summary["repeats"]["turns"] == {"step_s": [56.0, 56.0], "mean": 56.0, "spread": 0.0}
    assert "turns: 2 runs, steps 56.0, 56.0 s" in rep.stdout
    # Pooled over both turn-by-turn runs: 13 s a step against 10 + 1 s of generation and training.
    pooled = summary["pooled"]["overlapped"]
    assert pooled["runs"] == 1 and pooled["turns_runs"] == 2
    assert abs(pooled["per_token_steady"] - 2 / 11) < 1e-12 and abs(pooled["per_token_filled"] - 2 / 11) < 1e-12
    assert abs(summary["arms"]["overlapped"]["overhead_vs_turns_per_token_filled"] - 2 / 11) < 1e-12
    # --stop-by: an arm that would not finish by then (as long as the longest arm so far) is not
    # started, and a later --resume runs it.
    ran.write_text("")
    again[again.index("--arms") + 1] = "turns,overlapped,turns@2,overlapped@2"
    longest = max(s["wall_s"] for s in summary["arms"].values())
    late = subprocess.run(again[:-3] + ["--stop-by", str(time.time() + longest / 2), "--", "--level", "1"],
                          capture_output=True, text=True)
    assert late.returncode == 0, late.stderr
    assert ran.read_text() == "" and "overlapped@2: not started" in late.stdout
    assert "overlapped@2" not in json.loads((out / "SUMMARY.json").read_text())["arms"]
    soon = subprocess.run(again[:-3] + ["--stop-by", str(time.time() + 600), "--", "--level", "1"],
                          capture_output=True, text=True)
    assert soon.returncode == 0 and ran.read_text() == "overlapped@2\n", soon.stderr
    other = subprocess.run(cmd[:-3] + ["--resume", "--", "--level", "2"], capture_output=True, text=True)
    assert other.returncode != 0 and "another run's" in other.stderr
