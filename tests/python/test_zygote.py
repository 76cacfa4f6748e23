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


def test_forked_candidate_serves_the_judge_and_its_death_is_reported(zygote, tmp_path):
    c = ForkedCandidateProc(zygote, str(tmp_path / "cand-1"), 120)
    ready = c.wait_ready(120)
    assert ready["op"] == "ready" and ready["pid"] == c.pid
    assert c.request({"op": "calibrate", "iters": 5}, 60)["op"] == "calibrated"
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
