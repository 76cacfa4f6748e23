"""Candidate processes forked by the zygote: they serve the judge like freshly started ones, their
exit status still reaches the judge, and each may write only below its own scratch folder."""
import os
import signal
import subprocess
import sys

import pytest

from musacoder_harness.candidate_proc import ForkedCandidateProc, Zygote

HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python")


@pytest.fixture
def zygote(tmp_path):
    z = Zygote([], sys.executable, HARNESS, "cpu", str(tmp_path))
    yield z
    z.close()


def landlock_available():
    p = subprocess.run([sys.executable, "-c", "from musacoder_harness.zygote import restrict_writes_to;"
                        "print(restrict_writes_to(['/tmp']) or 'ok')"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=HARNESS))
    return p.stdout.strip() == "ok"


def test_the_zygote_preloads_what_load_inline_imports_without_asking_the_driver():
    """torch.utils.cpp_extension itself asks the driver (children could not use CUDA), so the
    zygote leaves it to each child but imports what it imports (setuptools: most of its time)."""
    p = subprocess.run([sys.executable, "-c", "import sys; from musacoder_harness.zygote import warm_imports, "
                        "fork_is_poisoned; warm_imports(); print('setuptools.command.build_ext' in sys.modules, "
                        "'torch.utils.cpp_extension' in sys.modules, fork_is_poisoned())"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=HARNESS))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["True", "False", "False"], p.stdout + p.stderr[-2000:]


def test_forked_candidate_serves_the_judge_and_its_death_is_reported(zygote, tmp_path):
    c = ForkedCandidateProc(zygote, str(tmp_path / "cand-1"), 120)
    ready = c.wait_ready(120)
    assert ready["op"] == "ready" and ready["pid"] == c.pid
    assert c.request({"op": "calibrate", "iters": 5}, 60)["op"] == "calibrated"
    trimmed = c.request({"op": "trim"}, 60)  # the judge short of memory: our cache back (none on the CPU)
    assert trimmed == {"op": "trimmed", "freed_bytes": 0}, trimmed
    os.kill(c.pid, signal.SIGSEGV)
    assert c._exit_description() == "killed by SIGSEGV"
    c.kill()
    # The zygote keeps forking after a child died.
    d = ForkedCandidateProc(zygote, str(tmp_path / "cand-2"), 120)
    assert d.wait_ready(120)["pid"] != c.pid
    d.send({"op": "exit"})
    assert d._exit_description() == "exited with status 0"
    d.kill()


def test_a_forked_candidate_writes_only_below_its_scratch(zygote, tmp_path):
    if not landlock_available():
        pytest.skip("this kernel has no Landlock")
    sibling = tmp_path / "cand-other"
    sibling.mkdir()
    solution = tmp_path / "solution.py"
    solution.write_text(
        "import os\n"
        "open(os.path.join(os.getcwd(), 'mine.txt'), 'w').write('ok')\n"  # its own scratch: fine
        f"open({str(sibling / 'theirs.txt')!r}, 'w').write('no')\n")
    c = ForkedCandidateProc(zygote, str(tmp_path / "cand-3"), 120)
    c.wait_ready(120)
    rep = c.request({"op": "load", "format": "kernelbench", "dtype": "torch.float32", "seed": 1,
                     "solution_path": str(solution), "artifacts": {}, "init_inputs": []}, 120)
    assert rep["op"] == "error" and "Permission" in rep["error"], rep
    assert (tmp_path / "cand-3" / "mine.txt").read_text() == "ok"
    assert not (sibling / "theirs.txt").exists()
    c.kill()


BINARY = os.environ.get("MUSACODER_BINARY", os.path.join(os.path.dirname(HARNESS), "build", "musacoder"))


def test_a_child_of_the_sandboxed_zygote_writes_its_own_proc_entry_only(tmp_path):
    """The CUDA driver names its threads through /proc/self/task/*/comm when it starts: a child
    that cannot do that gets no CUDA context (error 304 on the H100 machines). The zygote runs
    under `sandbox-exec --fork-server` so its children can; each child's own layer still keeps
    it out of other processes' entries."""
    if not os.path.exists(BINARY):
        pytest.skip(f"no musacoder binary at {BINARY}")
    if not landlock_available():
        pytest.skip("this kernel has no Landlock")
    z = Zygote([BINARY, "sandbox-exec", "--scratch", str(tmp_path), "--fork-server", "--"],
               sys.executable, HARNESS, "cpu", str(tmp_path))
    try:
        solution = tmp_path / "solution.py"
        solution.write_text(
            "import os, threading\n"
            "open(f'/proc/self/task/{threading.get_native_id()}/comm', 'w').write('driver-like')\n"
            "try:\n"
            "    open(f'/proc/{os.getppid()}/comm', 'w')\n"
            "    raise RuntimeError('opened the zygote /proc entry for writing')\n"
            "except PermissionError:\n"
            "    pass\n"
            "raise RuntimeError('own entry written, the zygote entry refused')\n")
        c = ForkedCandidateProc(z, str(tmp_path / "cand-4"), 120)
        assert "landlock" in c.wait_ready(120)["sandbox"]
        rep = c.request({"op": "load", "format": "kernelbench", "dtype": "torch.float32", "seed": 1,
                         "solution_path": str(solution), "artifacts": {}, "init_inputs": []}, 120)
        assert rep["op"] == "error" and "own entry written, the zygote entry refused" in rep["error"], rep
        c.kill()
    finally:
        z.close()


def test_forked_candidates_die_with_the_zygote(tmp_path):
    """A judge killed outright takes its zygote with it (EOF on the control socket); the zygote's
    children must not outlive it: a hanging candidate would spin a core forever (seen after a
    killed test run)."""
    import time
    z = Zygote([], sys.executable, HARNESS, "cpu", str(tmp_path))
    try:
        c = ForkedCandidateProc(z, str(tmp_path / "cand-1"), 120)
        c.wait_ready(120)
        os.kill(z.proc.pid, signal.SIGKILL)
        z.proc.wait(30)
        def alive(pid):  # a zombie (killed, not yet reaped by whoever adopted it) is gone
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:
                return False
        for _ in range(100):
            if not alive(c.pid):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"candidate {c.pid} outlived its zygote")
    finally:
        try:
            os.killpg(c.pid, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError, PermissionError):
            pass
        z.close()


def test_timing_inputs_are_opened_once_and_reused_by_the_pilot_and_timed_runs(zygote, tmp_path):
    """The judge's wall clock of a timed run bounds the candidate's claimed times, so the run
    must not pay for opening its inputs: the candidate opens them at warm-up and reuses them
    while the judge names the same sets; other sets are opened afresh."""
    import torch
    from musacoder_harness.transport import describe_value, open_tensor
    solution = tmp_path / "solution.py"
    solution.write_text("import torch\n"
                        "class ModelNew(torch.nn.Module):\n"
                        "    def forward(self, x):\n"
                        "        return x + 1\n")
    scratch = tmp_path / "cand-t"
    c = ForkedCandidateProc(zygote, str(scratch), 120)
    c.wait_ready(120)
    assert c.request({"op": "load", "format": "kernelbench", "dtype": "torch.float32", "seed": 1,
                      "solution_path": str(solution), "artifacts": {}, "init_inputs": []}, 120)["op"] == "loaded"
    xs = [torch.rand(64), torch.rand(64)]
    sets = [[describe_value(x, str(scratch))] for x in xs]

    def timed(descs):
        rep = c.request({"op": "time", "input_sets": descs, "iters": 4}, 60)
        outs = c.recv(60)
        c.send({"op": "release"})
        return rep, [open_tensor(d[0], str(scratch)).clone() for d in outs["outputs"]]
    warm = c.request({"op": "warmup", "input_sets": sets}, 60)
    assert warm["op"] == "warm" and warm["open_s"] > 0
    for _ in range(2):  # the pilot, then the timed run
        rep, outs = timed(sets)
        assert rep["op"] == "timed" and len(rep["times_us"]) == 4 and rep["open_s"] == 0
        assert all(torch.equal(o, x + 1) for o, x in zip(outs, xs))
    other = [[describe_value(torch.rand(64), str(scratch))]]
    assert timed(other)[0]["open_s"] > 0
    c.kill()


def test_a_paused_candidate_runs_nothing_until_resumed(zygote, tmp_path):
    """MUSACODER_TIMING_QUIESCE=stop pauses spares still creating their CUDA contexts while the
    judge times: a paused process does nothing until resumed, then carries on where it was."""
    c = ForkedCandidateProc(zygote, str(tmp_path / "cand-p"), 120)
    c.wait_ready(120)
    assert not c.starting()
    assert c.pause()
    with open(f"/proc/{c.pid}/stat") as f:
        assert f.read().rsplit(")", 1)[1].split()[0] == "T"  # stopped
    c.send({"op": "calibrate", "iters": 5})
    assert not c.readable(1.0)
    c.resume()
    assert c.recv(60)["op"] == "calibrated"
    c.resume()  # resuming twice is harmless
    c.kill()


def test_an_unknown_timing_quiesce_mode_is_named():
    p = subprocess.run([sys.executable, "-c", "import musacoder_harness.judge"], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=HARNESS, MUSACODER_TIMING_QUIESCE="pause"))
    assert p.returncode != 0 and "MUSACODER_TIMING_QUIESCE='pause'" in p.stderr, p.stderr
