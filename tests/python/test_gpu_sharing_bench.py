"""Issue 15's engine benches on the CPU. bench/probes/gpu_sharing.py, whose load processes then load
the CPU: every run measured, a profiled repeat that names the engine's parts, long-kernel loads,
the load processes stopped afterwards, and a bad run list named. bench/probes/gemm_shapes.py: every
GEMM timed three ways."""
import json
import os
import subprocess
import sys

import pytest

from mc_cli import BINARY, HAS_MODEL, ROOT

pytestmark = pytest.mark.skipif(not HAS_MODEL, reason="needs musacoder-model (libtorch)")
BENCH = os.path.join(ROOT, "bench", "probes", "gpu_sharing.py")


def test_each_run_is_measured_and_its_loads_stopped(tmp_path):
    out = tmp_path / "sharing.json"
    r = subprocess.run([sys.executable, BENCH, "--musacoder", BINARY, "--device", "cpu", "--model-dir", tmp_path / "model",
                        "--loads", "0,1,0+1", "--prompts", "3", "--prompt-len", "24", "--prompt-len-spread", "8",
                        "--new-tokens", "4", "--arrive-every", "2", "--profile", "0", "--out", out],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [(x["loads"], x["cpu_loads"]) for x in res["runs"]] == [(0, 0), (1, 0), (0, 1)]
    for x in res["runs"]:
        assert x["prefill_calls"] >= 1 and x["decode_steps"] >= 4 and x["tokens_per_s"] > 0
    assert res["runs"][0]["load_bursts_per_s"] == 0 and res["runs"][1]["load_bursts_per_s"] > 0
    assert "| 0 + 1 | " in r.stdout
    # The profiled repeat names the engine's prefill (its layers) and decode steps among the host
    # ops (generate --profile); prefill::prepare is too small on the CPU to reach the top rows.
    md = (tmp_path / "gpu_sharing-profile-0_0.md").read_text()
    for scope in ("engine::prefill", "prefill::layers", "engine::decode_step"):
        assert scope in md, scope
    # No load process outlives its run.
    left = subprocess.run(["pgrep", "-f", "while True: pass|torch.randn\\(1 << 22"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_long_kernel_loads_run(tmp_path):
    """--kernel-ms: each load process runs one long matmul after another (here on the CPU)."""
    out = tmp_path / "long.json"
    r = subprocess.run([sys.executable, BENCH, "--musacoder", BINARY, "--device", "cpu", "--model-dir", tmp_path / "model",
                        "--loads", "1", "--kernel-ms", "5", "--idle-ms", "1", "--prompts", "2", "--prompt-len", "16",
                        "--prompt-len-spread", "4", "--new-tokens", "3", "--out", out],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["kernel_ms"] == 5 and res["runs"][0]["load_bursts_per_s"] > 0
    # The kernel each load sized, timed after a warm-up call (session 48's first try timed the
    # library's start-up, stopped at the smallest size, and ran ~0.1 ms kernels on the GPU).
    assert res["runs"][0]["load_kernel_ms"] >= 5
    assert "one ~5 ms kernel (measured: " in r.stdout


def test_churn_loads_make_contexts_and_stop(tmp_path):
    """--churn: each load process starts one fresh torch process after another (a judge's spares),
    and neither it nor its last child outlives the run (here on the CPU)."""
    out = tmp_path / "churn.json"
    r = subprocess.run([sys.executable, BENCH, "--musacoder", BINARY, "--device", "cpu", "--model-dir", tmp_path / "model",
                        "--loads", "0,2", "--churn", "--prompts", "3", "--prompt-len", "16", "--prompt-len-spread", "4",
                        "--new-tokens", "48", "--out", out],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["churn"] is True and [x["loads"] for x in res["runs"]] == [0, 2]
    assert "each starting one fresh CUDA process after another" in r.stdout
    left = subprocess.run(["pgrep", "-f", "made \\+= 1|torch.randn\\(1 << 20"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_a_bad_run_list_is_named():
    r = subprocess.run([sys.executable, BENCH, "--musacoder", BINARY, "--loads", "1+x"], capture_output=True, text=True)
    assert r.returncode != 0 and "--loads: runs are G or G+C" in r.stderr


def test_gemm_shapes_reports_every_gemm_and_order(tmp_path):
    """bench/probes/gemm_shapes.py (the other half of issue 15's prefill question) on the CPU: each of
    the recipe's GEMMs timed for the same M, a new M every call, and M rounded to the bucket."""
    out = tmp_path / "gemm.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "probes", "gemm_shapes.py"), "--device", "cpu", "--calls", "3",
                        "--m-range", "16,80", "--bucket", "16", "--out", out], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [row["gemm"] for row in res["rows"]] == ["qkv", "o", "gate_up", "down"]
    for row in res["rows"]:
        assert all(row[k + "_host_us"] > 0 for k in ("same_m", "new_m", "bucketed_m"))
