"""A message from a worker's pipe read within a deadline: ``Connection.recv`` blocks until the
whole message is in, so a worker stopped (SIGSTOP) or stuck while it sends one, after the
first bytes made the pipe readable, made its reader wait for ever.

The message is read as ``multiprocessing.connection.Connection`` writes it on POSIX: a
4-byte big-endian signed length (``-1``: an 8-byte unsigned length follows), then the
pickled bytes; ``test_engine_receive.py`` checks that against ``Connection.send`` for sizes
on both sides of each boundary, so a change of that format fails a test, not a run.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["recv_within"]


def recv_within(conn: Connection, seconds: float) -> Any:
    """The next message on ``conn`` (as ``conn.recv()``), read whole within ``seconds``.

    Raises:
        TimeoutError: the message was not whole in time (its sender stopped or stuck).
        EOFError: the pipe ended first (its sender died).
    """
    fd, deadline = conn.fileno(), time.monotonic() + seconds

    def read(n: int) -> bytearray:
        got = bytearray(n)
        view, at = memoryview(got), 0
        while at < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"a message of {n} bytes not whole after {seconds:g} s")
            count = os.readv(fd, [view[at:]])
            if not count:
                raise EOFError("the pipe ended inside a message")
            at += count
        return got

    (size,) = struct.unpack("!i", read(4))
    if size == -1:
        (size,) = struct.unpack("!Q", read(8))
    return pickle.loads(read(size))
