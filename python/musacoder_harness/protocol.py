"""Length-prefixed JSON messages between the judge and a candidate process.

The judge treats everything a candidate sends as untrusted data: it is parsed as JSON only
(never unpickled), sizes are bounded, and nothing in it can change a verdict by itself.
"""
import json
import os
import select
import struct
import time

MAX_MESSAGE_BYTES = 64 << 20


class ChannelClosed(Exception):
    """The other side closed the channel (it exited or crashed)."""


class ChannelTimeout(Exception):
    """No complete message arrived within the time limit."""


def send(fd, obj):
    data = json.dumps(obj).encode()
    buf = struct.pack("<I", len(data)) + data
    view = memoryview(buf)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd, n, deadline):
    chunks = []
    while n > 0:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise ChannelTimeout()
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            raise ChannelTimeout()
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise ChannelClosed()
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(fd, timeout_s=None):
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    (size,) = struct.unpack("<I", _read_exact(fd, 4, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ChannelClosed(f"message of {size} bytes exceeds the {MAX_MESSAGE_BYTES} limit")
    msg = json.loads(_read_exact(fd, size, deadline))
    if not isinstance(msg, dict):
        raise ChannelClosed("message is not a JSON object")
    return msg
