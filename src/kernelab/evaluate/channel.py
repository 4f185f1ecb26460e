"""Messages between the judge and a solution's worker: length-prefixed torch.save bytes on a
pair of pipes.

Tensors travel as tensors (CUDA ones come back on their device), so the judge compares what
the solution produced with its own, never-patched torch. Replies from the worker are read
with `weights_only=True`: they can hold tensors, numbers, strings and the plain containers,
but no object whose unpickling would run the solution's code inside the judge.
"""

from __future__ import annotations

import io
import os
import select
import struct
import time

HEADER = struct.Struct("<Q")
MAX_MESSAGE_BYTES = 1 << 36  # 64 GiB: a length beyond this is garbage, not a message


class ChannelClosed(Exception):
    """The other end closed its pipe (it exited or died)."""


class ChannelTimeout(Exception):
    """No complete message before the deadline."""


def encode(message) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(message, buffer)
    payload = buffer.getvalue()
    return HEADER.pack(len(payload)) + payload


def decode(payload: bytes, *, trusted: bool):
    import torch

    return torch.load(io.BytesIO(payload), weights_only=not trusted)


def send(fd: int, message, deadline: float | None = None) -> None:
    """Write one message; with a deadline `fd` must be non-blocking, and a reader that stops
    reading (a hung worker) raises ChannelTimeout instead of blocking the judge."""
    view = memoryview(encode(message))
    while view:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise ChannelTimeout
            _, ready, _ = select.select([], [fd], [], min(wait, 0.5))
            if not ready:
                continue
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        except BrokenPipeError:
            raise ChannelClosed from None
        view = view[written:]


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, left = [], size
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise ChannelTimeout
            ready, _, _ = select.select([fd], [], [], min(wait, 0.5))
            if not ready:
                continue
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            raise ChannelClosed
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, *, trusted: bool, deadline: float | None = None):
    """The next message on `fd`; ChannelTimeout after `deadline` (time.monotonic),
    ChannelClosed when the writer is gone."""
    (size,) = HEADER.unpack(_read_exactly(fd, HEADER.size, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ChannelClosed
    return decode(_read_exactly(fd, size, deadline), trusted=trusted)
