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
# An untrusted reply may take at most this share of the memory available when it arrives: the
# judge holds the reply, its own reference outputs and the pool of inputs at once.
REPLY_MEMORY_SHARE = 0.25
# An untrusted reply is walked by the judge (its tensors found, compared, cloned): a structure
# of more nodes than this, nested deeper, or one container reached twice (a DAG that unpacks to
# 2^60 leaves from a few hundred bytes) is refused before anything walks it.
MAX_REPLY_NODES = 1_000_000
MAX_REPLY_DEPTH = 64
# A string in a reply is an error message or a note: the judge quotes it, and copies it on the
# way out (a JSON escape can take six bytes a character), so a long one is refused, not quoted.
MAX_REPLY_CHARS = 1 << 16


class ChannelClosed(Exception):
    """The other end closed its pipe (it exited or died)."""


class ReplyRefused(Exception):
    """An untrusted reply the judge will not read or walk: too large, or not a plain tree."""


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


def available_memory_bytes() -> int:
    """What the kernel says could be allocated now without swapping (MemAvailable)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def reply_limit_bytes() -> int:
    return min(MAX_MESSAGE_BYTES, int(REPLY_MEMORY_SHARE * available_memory_bytes()))


def check_plain_tree(message) -> None:
    """ReplyRefused unless `message` is a tree the judge can walk in bounded time: at most
    MAX_REPLY_NODES nodes, MAX_REPLY_DEPTH levels, no container reached twice."""
    seen: set[int] = set()
    nodes = 0
    stack = [(message, 0)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_REPLY_NODES:
            raise ReplyRefused(f"the reply holds more than {MAX_REPLY_NODES:,} values")
        if isinstance(node, (list, tuple, dict)):
            if depth >= MAX_REPLY_DEPTH:
                raise ReplyRefused(f"the reply nests deeper than {MAX_REPLY_DEPTH} levels")
            if id(node) in seen:
                raise ReplyRefused("the reply holds one container in two places (a graph, "
                                   "not a tree of outputs)")  # fmt: skip
            seen.add(id(node))
            items = node.values() if isinstance(node, dict) else node
            stack.extend((item, depth + 1) for item in items)
            if isinstance(node, dict):
                stack.extend((key, depth + 1) for key in node)
        elif isinstance(node, (str, bytes)) and len(node) > MAX_REPLY_CHARS:
            raise ReplyRefused(
                f"the reply holds a string of {len(node):,} characters (more than "
                f"{MAX_REPLY_CHARS:,}: a message, not an output)"
            )


def check_stored(payload: bytes, limit: int) -> None:
    """ReplyRefused unless `payload` is torch.save's zip archive with every record stored
    uncompressed, and their sizes add up to at most `limit`. torch.load inflates deflated
    records, so a reply of a megabyte on the wire could become gigabytes in the judge; the
    worker's torch.save never compresses, so only a forged reply is refused."""
    import zipfile

    try:
        records = zipfile.ZipFile(io.BytesIO(payload)).infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ReplyRefused(f"the reply is not a torch.save archive ({exc})") from None
    if any(record.compress_type != zipfile.ZIP_STORED for record in records):
        raise ReplyRefused("the reply's records are compressed (torch.save stores them whole)")
    total = sum(record.file_size for record in records)
    if total > limit:
        raise ReplyRefused(
            f"the reply unpacks to {total / 2**20:,.0f} MiB, more than the judge reads "
            f"({limit / 2**20:,.0f} MiB)"
        )


def receive(fd: int, *, trusted: bool, deadline: float | None = None):
    """The next message on `fd`; ChannelTimeout after `deadline` (time.monotonic),
    ChannelClosed when the writer is gone. An untrusted message larger than a share of the
    available memory, or not a plain tree, raises ReplyRefused unread or unwalked."""
    (size,) = HEADER.unpack(_read_exactly(fd, HEADER.size, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ChannelClosed
    if not trusted:
        limit = reply_limit_bytes()
        if size > limit:
            raise ReplyRefused(
                f"the reply is {size / 2**20:,.0f} MiB, more than the judge reads "
                f"({limit / 2**20:,.0f} MiB: {REPLY_MEMORY_SHARE:.0%} of the memory available)"
            )
    payload = _read_exactly(fd, size, deadline)
    if not trusted:
        check_stored(payload, limit)
    message = decode(payload, trusted=trusted)
    if not trusted:
        check_plain_tree(message)
    return message
