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


def test_recipe_refuses_a_corpus_without_cutlass(tmp_path):
    # Session 49 redid corpus through sft on a GPU machine without the nvidia-cutlass wheel: the
    # corpus skipped CUTLASS/CuTe, and every model after it differed from the carried start's.
    # A checkout without .kb/whl, where cutlass_library cannot be imported (shadowed here, in case
    # this machine has it), and the committed seed, whose corpus stage is not done: refused.
    repo = tmp_path / "checkout"
    repo.mkdir()
    for d in ("scripts", "recipes"):
        os.symlink(os.path.join(ROOT, d), repo / d)
    shadow = tmp_path / "shadow" / "cutlass_library"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not here, for the test')\n")
    run = tmp_path / "run"
    env = {**os.environ, "STAGES": "recipe", "BIN": "/bin/true", "OUT": str(tmp_path / "out"), "RECIPE_RUN": str(run),
           "START_STASH": str(tmp_path / "stash"), "PYTHONPATH": str(shadow.parent)}
    env.pop("RECIPE_NO_CUTLASS", None)
    r = subprocess.run(["bash", str(repo / "scripts" / "gpu-check.sh")], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "would run without CUTLASS/CuTe" in r.stdout, r.stdout + r.stderr
    assert (run / "recipe" / "state.json").exists() and not (run / "recipe" / "corpus.log").exists()
    assert not (run / "gpu-samples.csv").exists()  # no monitor started


def test_detached_stages_outlive_the_call_and_report_once_done(tmp_path):
    """DETACH=NAME (scripts/device/detach.sh): the stages run apart from the call, which waits up
    to DETACH_WAIT and copies their OUT back; a later call with the same name reports the run."""
    name = f"test-{os.getpid()}-{tmp_path.name}"
    env = {**os.environ, "STAGES": "none", "BIN": "/bin/true", "OUT": str(tmp_path / "out"), "DETACH": name,
           "DETACH_WAIT": "30", "START_STASH": str(tmp_path / "stash")}
    try:
        r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh")], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"{name}: started" in r.stdout and f"{name}: finished (rc 0)" in r.stdout, r.stdout
        assert (tmp_path / "out" / name / "console.log").exists()
        again = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh")], env=env, capture_output=True,
                               text=True, timeout=120)
        assert again.returncode == 0 and f"{name}: finished earlier (rc 0)" in again.stdout, again.stdout
    finally:
        subprocess.run(["rm", "-rf", f"/tmp/gpu-detached/{name}"])
