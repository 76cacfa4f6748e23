"""Moves tensors between the judge and a candidate process without copying through the host.

CUDA tensors travel as CUDA IPC handles (the receiver maps the sender's memory); CPU tensors
(the CPU test mode) travel as memory-mapped files in the candidate's scratch folder, mapped
by both sides, so in both modes a candidate that writes into its inputs is seen doing so.
Only raw bytes cross: nothing received is ever unpickled. Descriptors are plain JSON.
"""
import os
import uuid

import torch

_DTYPES = {str(d): d for d in (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
    torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64)}


def dtype_from_name(name):
    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}")
    return _DTYPES[name]


def describe(t, share_dir=None):
    """JSON descriptor through which another process can map or read tensor `t`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a tensor, got {type(t).__name__}")
    base = {"dtype": str(t.dtype), "shape": list(t.shape)}
    if t.is_cuda and t.numel() == 0:
        # No bytes, so no IPC handle (_share_cuda_ gives None): the shape says all there is,
        # and the judge's shape check says what was expected.
        base.update(kind="empty", device=t.device.index or 0)
        return base
    if t.is_cuda:
        storage = t.untyped_storage()
        (device, handle, size_bytes, offset_bytes, ref_handle, ref_offset, event_handle,
         event_sync) = storage._share_cuda_()
        base.update(kind="cuda_ipc", device=device, handle=handle.hex(), size_bytes=size_bytes,
                    offset_bytes=offset_bytes, ref_handle=ref_handle.hex(), ref_offset=ref_offset,
                    event_handle=event_handle.hex() if event_handle else "",
                    event_sync=bool(event_sync), stride=list(t.stride()),
                    storage_offset=t.storage_offset())
        return base
    return share(t, share_dir)[0]


def share(t, share_dir=None):
    """(descriptor, tensor the sender keeps using): for CPU tensors the second is the shared
    mapping, so the sender sees what the receiver writes."""
    if t.is_cuda:
        return describe(t), t
    path = os.path.join(share_dir, f"t-{uuid.uuid4().hex}.bin")
    n = t.numel()
    open(path, "wb").close()
    mapped = torch.from_file(path, shared=True, size=max(n, 1), dtype=t.dtype)[:n].view(t.shape)
    mapped.copy_(t.detach())
    return {"dtype": str(t.dtype), "shape": list(t.shape), "kind": "shm_file", "path": path}, mapped


def open_tensor(d, share_dir=None):
    """Maps or reads a tensor from a descriptor made by describe() in another process."""
    dtype = dtype_from_name(d["dtype"])
    shape = [int(s) for s in d["shape"]]
    if d["kind"] == "cuda_ipc":
        storage = torch.UntypedStorage._new_shared_cuda(
            int(d["device"]), bytes.fromhex(d["handle"]), int(d["size_bytes"]),
            int(d["offset_bytes"]), bytes.fromhex(d["ref_handle"]), int(d["ref_offset"]),
            bytes.fromhex(d["event_handle"]) if d["event_handle"] else b"", bool(d["event_sync"]))
        typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)
        t = torch._utils._rebuild_tensor(typed, int(d["storage_offset"]), tuple(shape),
                                         tuple(int(s) for s in d["stride"]))
        return t
    if d["kind"] == "empty":
        if 0 not in shape:
            raise ValueError(f"an 'empty' tensor descriptor with shape {shape} has elements")
        return torch.empty(shape, dtype=dtype, device=f"cuda:{int(d['device'])}")
    if d["kind"] == "shm_file":
        path = os.path.realpath(d["path"])
        if share_dir is not None and not path.startswith(os.path.realpath(share_dir) + os.sep):
            raise ValueError("tensor file outside the shared folder")
        n = 1
        for s in shape:
            n *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if os.path.getsize(path) < n * itemsize:
            raise ValueError("tensor file is smaller than its descriptor says")
        return torch.from_file(path, shared=True, size=max(n, 1), dtype=dtype)[:n].view(shape)
    raise ValueError(f"unknown tensor descriptor kind {d.get('kind')!r}")


def share_value(v, share_dir=None):
    """(descriptor, value the sender keeps using); see share()."""
    if isinstance(v, torch.Tensor):
        d, mapped = share(v, share_dir)
        return {"tensor": d}, mapped
    return describe_value(v, share_dir), v


def describe_value(v, share_dir=None):
    """Tensors become descriptors; ints, floats, bools and None pass as JSON scalars."""
    if isinstance(v, torch.Tensor):
        return {"tensor": describe(v, share_dir)}
    if isinstance(v, (bool, int, float)) or v is None:
        return {"scalar": v}
    if isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float)) for x in v):
        return {"scalar_list": list(v), "tuple": isinstance(v, tuple)}
    raise TypeError(f"unsupported input of type {type(v).__name__}")


def open_value(d, share_dir=None):
    if "tensor" in d:
        return open_tensor(d["tensor"], share_dir)
    if "scalar_list" in d:
        return tuple(d["scalar_list"]) if d.get("tuple") else list(d["scalar_list"])
    return d["scalar"]
