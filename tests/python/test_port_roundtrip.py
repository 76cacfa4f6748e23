"""bench/port_roundtrip.py on the CPU: cases ported to MUSA and back are judged by the real
verifier in CPU mode beside the originals, with identical verdicts (issue 18's GPU run uses the
same script on the GPU suite's cases)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("MUSACODER_BINARY", os.path.join(ROOT, "build", "musacoder"))
# The C++ tests' compile cache (ctest runs first and builds these same CPU cases): content-keyed.
CACHE = os.path.join(os.path.dirname(BINARY), "test-cache")
pytestmark = pytest.mark.skipif(not os.path.exists(BINARY), reason="musacoder not built (scripts/build.sh)")


def test_roundtrip_verdicts_equal_the_originals(tmp_path):
    cpu = os.path.join(ROOT, "tests", "cases", "cpu")
    cases = [os.path.join(cpu, f) for f in ("honest_add.py", "wrong_add.py", "compile_error.py", "torch_fallback.py")]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "port_roundtrip.py"), "--musacoder", BINARY,
                        "--out", str(tmp_path / "out"), "--device", "cpu", "--cases", *cases, "--",
                        "--timing-budget", "0.1", "--cache-dir", CACHE],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(x) for x in open(tmp_path / "out" / "roundtrip.jsonl")]
    assert [x["sample"] for x in rows] == ["honest_add", "wrong_add", "compile_error", "torch_fallback"]
    assert all(x["restored"] and x["same"] for x in rows), rows
    changed = {x["sample"] for x in rows if x["changes_to_musa"] > 0}  # load_inline's import and keyword moved
    assert {"honest_add", "wrong_add"} <= changed, rows
    verdicts = {x["sample"]: x["verdict"] for x in rows}
    assert verdicts["honest_add"] == "ok" and verdicts["wrong_add"] != "ok" and verdicts["compile_error"] != "ok"
    assert "4 restored byte for byte, 4 with the same verdict, 0 different" in r.stdout
