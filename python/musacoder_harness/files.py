"""Small file helpers shared by the harness (no torch: toolchain.py imports this too)."""
import json
import os


def write_json_atomic(path, obj):
    """Writes obj as JSON so that readers see the old file or the whole new one, never a
    partial one (another judge or probe may read it at the same time)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)
