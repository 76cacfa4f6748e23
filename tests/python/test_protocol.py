"""The judge/candidate channel: framing, timeouts, closed peers, oversized messages."""
import os
import struct

import pytest

from musacoder_harness import protocol


def test_roundtrip():
    r, w = os.pipe()
    protocol.send(w, {"op": "run", "x": [1, 2]})
    assert protocol.recv(r, 1) == {"op": "run", "x": [1, 2]}


def test_timeout_and_close():
    r, w = os.pipe()
    with pytest.raises(protocol.ChannelTimeout):
        protocol.recv(r, 0.05)
    os.close(w)
    with pytest.raises(protocol.ChannelClosed):
        protocol.recv(r, 1)


def test_oversized_and_non_object_messages_are_refused():
    r, w = os.pipe()
    os.write(w, struct.pack("<I", protocol.MAX_MESSAGE_BYTES + 1))
    with pytest.raises(protocol.ChannelClosed):
        protocol.recv(r, 1)
    r, w = os.pipe()
    data = b"[1, 2]"
    os.write(w, struct.pack("<I", len(data)) + data)
    with pytest.raises(protocol.ChannelClosed):
        protocol.recv(r, 1)
