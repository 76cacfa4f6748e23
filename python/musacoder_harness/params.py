"""Which of a candidate's tensors hold which of the reference's parameters.

KernelBench gives ModelNew the same seed and the same init inputs as Model, so a candidate that
builds the same layers starts with the same weights, whatever it calls them: `self.weight`
where the reference has `self.ln.weight`, or the whole reference wrapped as `self.impl`. The
judge's parameter re-draws must reach those tensors, so the mapping goes, in this order:
  1. the same name and shape;
  2. the remaining tensors in registration order, when both sides have as many left and their
     shapes agree pairwise;
  3. a shape that exactly one remaining tensor on each side has.
A reference tensor that none of these maps leaves the mapping incomplete: the judge then does
not re-draw for that candidate and records why; it never turns into a failed trial.
Runs in the judge (trusted); the candidate only reports its tensors' names, shapes and dtypes.
"""


def tensor_specs(module):
    """[(name, shape, dtype)] of the floating parameters and buffers, in registration order
    (the order redraw_parameters and the reference's state_dict use)."""
    out = []
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if t.is_floating_point():
            out.append((name, tuple(t.shape), str(t.dtype)))
    return out


def match_parameters(ref_specs, cand_specs):
    """Returns ({reference name: candidate name}, [reference names left unmapped])."""
    cand_specs = [(n, tuple(s), d) for n, s, d in cand_specs]
    ref_specs = [(n, tuple(s), d) for n, s, d in ref_specs]
    cand_shape = {n: s for n, s, _ in cand_specs}
    mapping = {}
    for name, shape, _ in ref_specs:  # 1. same name, same shape
        if cand_shape.get(name) == shape:
            mapping[name] = name
    used = set(mapping.values())
    ref_left = [(n, s) for n, s, _ in ref_specs if n not in mapping]
    cand_left = [(n, s) for n, s, _ in cand_specs if n not in used]
    if not ref_left:
        return mapping, []
    if len(ref_left) == len(cand_left) and all(rs == cs for (_, rs), (_, cs) in zip(ref_left, cand_left)):
        for (rn, _), (cn, _) in zip(ref_left, cand_left):  # 2. by order and shape
            mapping[rn] = cn
        return mapping, []
    unmapped = []
    for rn, rs in ref_left:  # 3. a shape unique on both sides
        refs_with = [n for n, s in ref_left if s == rs]
        cands_with = [n for n, s in cand_left if s == rs]
        if len(refs_with) == 1 and len(cands_with) == 1:
            mapping[rn] = cands_with[0]
        else:
            unmapped.append(rn)
    return mapping, unmapped
