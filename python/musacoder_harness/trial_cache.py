"""One problem's trial references, paid once and shared by the answers judged after it.

bench-model, RFT and RL send a judge many answers to one problem (8 samples, 3 turns, twins);
each trial's inputs, PyTorch's reference output and the float64 truth (compare.reference_truth)
are the same for all of them: the trial seeds follow the run's seed, not the answer. The judge
keeps them here for the problem it judges now and gives each answer a fresh copy of the inputs
(an answer that writes into its inputs never reaches the next one's), each answer still in its
own process. The copies live in host memory, so nothing of the cache stays on the device beside
another lane's problem (ledger.py); a trial too large to copy quickly (above MAX_ENTRY_BYTES) is
computed again on the device, which costs less than the copy.
"""
import torch

MAX_ENTRY_BYTES = 512 << 20
MAX_BYTES = 8 << 30


def _nbytes(x):
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v) for v in x)
    return 0


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device, copy=True)
    if isinstance(x, list):
        return [_to(v, device) for v in x]
    if isinstance(x, tuple):
        return tuple(_to(v, device) for v in x)
    return x


class TrialCache:
    def __init__(self):
        self.problem = None
        self.entries = {}
        self.bytes = 0
        self.hits = self.misses = 0

    def _for(self, problem):
        if problem != self.problem:  # answers of one problem come together: one problem kept
            self.problem, self.entries, self.bytes = problem, {}, 0

    def get(self, problem, key, device):
        """(inputs, ref, truth, variant, ref_s) on `device`, fresh copies, or None."""
        self._for(problem)
        e = self.entries.get(key)
        if e is None:
            self.misses += 1
            return None
        self.hits += 1
        inputs, ref, truth, variant, ref_s = e
        return _to(inputs, device), _to(ref, device), _to(truth, device), variant, ref_s

    def put(self, problem, key, inputs, ref, truth, variant, ref_s):
        """Keeps host copies of one trial (inputs as they were before any candidate saw them),
        if they are small enough to copy back quickly."""
        self._for(problem)
        n = _nbytes(inputs) + _nbytes(ref) + _nbytes([t[0] for t in (truth or []) if t is not None])
        if n > MAX_ENTRY_BYTES or self.bytes + n > MAX_BYTES or key in self.entries:
            return False
        cpu = torch.device("cpu")
        self.entries[key] = (_to(inputs, cpu), _to(ref, cpu), _to(truth, cpu), variant, ref_s)
        self.bytes += n
        return True
