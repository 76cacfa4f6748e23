"""scripts/gpu-check.sh's own housekeeping, without a GPU: what it leaves in OUT comes back
through the device tool, which takes only names of letters, digits, '.', '_' and '-'."""
import os
import subprocess

from mc_cli import ROOT


def test_out_names_are_made_fit_for_the_device_tool(tmp_path):
    out = tmp_path / "out"
    (out / "bench+run").mkdir(parents=True)
    for name in ("gpu_sharing-profile-0+16.md", "kept_name-1.2.json", "bench+run/async-defer-kv@2.log"):
        (out / name).write_text(name)
    env = {**os.environ, "STAGES": "none", "BIN": "/bin/true", "OUT": str(out), "START_STASH": str(tmp_path / "stash")}
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    found = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert found == ["bench_run/async-defer-kv_2.log", "gpu_sharing-profile-0_16.md", "kept_name-1.2.json"], found
    assert (out / "gpu_sharing-profile-0_16.md").read_text() == "gpu_sharing-profile-0+16.md"
    assert "renamed for the device tool: gpu_sharing-profile-0+16.md -> gpu_sharing-profile-0_16.md" in r.stdout
