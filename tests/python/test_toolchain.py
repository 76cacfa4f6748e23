"""The toolchain probe's facts cache: reused for the same torch installation, probed again
when the fingerprint differs or the file is damaged."""
import json
import os
import subprocess
import sys

HARNESS = os.path.join(os.path.dirname(__file__), "..", "..", "python")


def probe(cache):
    env = dict(os.environ, PYTHONPATH=HARNESS)
    out = subprocess.run([sys.executable, "-m", "musacoder_harness.toolchain", "--cache", cache],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_facts_are_reused_for_the_same_torch(tmp_path):
    cache = str(tmp_path / "toolchain" / "torch-facts.json")
    first = probe(cache)
    assert "cached" not in first and first["torch_version"]
    again = probe(cache)
    assert again.pop("cached") is True
    assert again == first


def test_a_different_fingerprint_or_a_damaged_file_probes_again(tmp_path):
    cache = str(tmp_path / "torch-facts.json")
    probe(cache)
    kept = json.load(open(cache))
    kept["fingerprint"] = "another torch"
    kept["facts"]["torch_version"] = "0.0-stale"
    json.dump(kept, open(cache, "w"))
    fresh = probe(cache)
    assert "cached" not in fresh and fresh["torch_version"] != "0.0-stale"
    open(cache, "w").write("{not json")
    assert "cached" not in probe(cache)
    assert probe(cache)["cached"] is True
