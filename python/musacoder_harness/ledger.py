"""One memory ledger per GPU, shared by its judges: whether a candidate had the GPU to itself.

A candidate that runs out of device memory has earned a runtime_error only if it had the memory
the verifier promises a problem judged alone: the whole device, less the judge's own planned
tensors and the CUDA contexts of the verifier's processes. Every judge of a GPU keeps one entry
here (a JSON file named by its pid, beside the GPU's gate): what it holds and how many processes
(its candidates, spares and dying ones) it keeps. Before a judge waits for the gate it gives its
cached blocks back and says so here, so that the judge holding the gate alone can tell whether
it is alone. An entry whose process has died is dropped.

On the GPU the bytes held by others are measured, not taken on trust: the device's used memory
less this judge's own and one context allowance per verifier process (a candidate cannot make
another lane's candidate look alone by lying). On the CPU, which has no device memory to
measure, the entries' declared bytes are the ledger (the tests' analogue).
"""
import json
import os
import time

CONTEXT_BYTES = 1 << 30  # one CUDA context and its allocator's first segment (~0.9 GiB on the H200)
ALONE_SLACK_BYTES = 2 << 30  # what others may hold beyond their contexts: alone all the same


class Ledger:
    def __init__(self, lock_path):
        self.dir = (lock_path + ".ledger") if lock_path else ""
        self.path = os.path.join(self.dir, f"{os.getpid()}.json") if self.dir else ""
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)

    @property
    def enabled(self):
        return bool(self.dir)

    def declare(self, state, held_bytes, processes):
        """This judge's entry: its state ("idle", "waiting", "shared", "exclusive"), the device
        bytes it holds and the processes it keeps (itself included)."""
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "state": state, "held_bytes": int(held_bytes),
                       "processes": int(processes), "at": time.time()}, f)
        os.replace(tmp, self.path)

    def others(self):
        """The other judges' live entries."""
        out = []
        if not self.dir:
            return out
        for name in os.listdir(self.dir):
            if not name.endswith(".json") or name == os.path.basename(self.path):
                continue
            path = os.path.join(self.dir, name)
            try:
                with open(path) as f:
                    e = json.load(f)
                pid = int(e["pid"])
                if not _alive(pid):
                    raise ProcessLookupError(pid)
            except ProcessLookupError:
                try:
                    os.remove(path)
                except OSError:
                    pass
                continue
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being written, or not an entry: counted once it is one
            out.append(e)
        return out

    def close(self):
        if self.path:
            try:
                os.remove(self.path)
            except OSError:
                pass


def _alive(pid):
    """Whether the process exists and has not exited (a zombie holds no memory)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def others_bytes(ledger, torch, device, own_processes):
    """(bytes the rest of the verifier and anything else holds on the device beyond the
    allowance for contexts, detail for the row). Called with the candidate process gone."""
    entries = ledger.others()
    procs = own_processes + sum(int(e.get("processes", 1)) for e in entries)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        mine = torch.cuda.memory_reserved(device)
        held = max(0, (total - free) - mine - procs * CONTEXT_BYTES)
        detail = {"device_free_bytes": int(free), "device_total_bytes": int(total),
                  "judge_reserved_bytes": int(mine)}
    else:
        held = sum(int(e.get("held_bytes", 0)) for e in entries)
        detail = {}
    detail.update(others_bytes=int(held), verifier_processes=int(procs),
                  others={str(e.get("pid")): {"state": e.get("state"), "held_bytes": e.get("held_bytes")}
                          for e in entries})
    return held, detail


def alone(held):
    return held <= ALONE_SLACK_BYTES
