"""run.json, the record of what made a run (src/cli/run_record.h), as the tests check it."""
import json
import os


def check_run_record(folder, command, invocations, given=()):
    """FOLDER/run.json names `command`, holds `invocations` entries (the first and each
    --resume), each with argv, every option's value, the options given and the commit."""
    rec = json.load(open(os.path.join(folder, "run.json")))
    assert rec["format_version"] == 1 and rec["command"] == command, rec
    assert len(rec["invocations"]) == invocations, rec["invocations"]
    for inv in rec["invocations"]:
        assert inv["argv"] and inv["options"] and inv["started_at"]
        assert "commit" in inv and (inv["commit"] is None or len(inv["commit"]) == 40)
        for g in given:
            assert g in inv["given"] and g in inv["options"], (g, inv)
    return rec
