"""A worker's message read within a deadline (``engine.receive.recv_within``): the pool and
``owt synth`` waited for ever on ``Connection.recv`` when a worker was stopped (SIGSTOP) inside
a message larger than the pipe's buffer, after its first bytes made the pipe readable."""

from __future__ import annotations

import multiprocessing
import os
import signal
import struct
import threading
import time
from typing import Any

import pytest

from openwebtext.engine import recv_within
from openwebtext.engine.parent import _received, _Worker
from openwebtext.engine.tasks import Done

SIZES = [0, 1, 16383, 16384, 16385, 100_000, 2_000_000]


@pytest.mark.parametrize("size", SIZES)
def test_it_reads_what_connection_send_writes(size: int) -> None:
    """The format is ``Connection``'s own: each boundary of its writes (16 KiB: header and
    body apart) and a message past the pipe's buffer, sent from another thread."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    message: Any = (Done(7, size, b"x" * size, ["a"], [0], [size], [], 0, None), "tail")
    sender = threading.Thread(target=writer.send, args=(message,))
    sender.start()
    try:
        assert recv_within(reader, 30.0) == message
    finally:
        sender.join()
        reader.close()
        writer.close()


def _partial(writer: Any, then: str) -> None:
    """Write the start of a message of 1,000 bytes, then stop, or end the pipe."""
    os.write(writer.fileno(), struct.pack("!i", 1000) + b"x" * 10)
    if then == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    writer.close()


def test_a_message_stopped_inside_is_a_timeout_and_one_cut_is_an_eof() -> None:
    reader, writer = multiprocessing.Pipe(duplex=False)
    _partial(writer, "end")
    with pytest.raises(EOFError):
        recv_within(reader, 5.0)
    reader, writer = multiprocessing.Pipe(duplex=False)
    os.write(writer.fileno(), struct.pack("!i", 1000) + b"x" * 10)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"a message of 1000 bytes not whole after 0\.5 s"):
        recv_within(reader, 0.5)
    assert time.monotonic() - start < 5.0
    reader.close()
    writer.close()


def test_a_worker_stopped_inside_a_message_is_killed_and_said() -> None:
    """The pool's read: the worker is killed (it would hold its slot and pipe for ever) and
    the reason is the one its unit's ``WorkerError`` gives."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(target=_partial, args=(writer, "stop"), daemon=True)
    process.start()
    writer.close()
    try:
        said = _received(_Worker(0, process, writer, reader), 0.5)
        assert said == "stopped inside a message for 0.5 s"
        process.join(10)
        assert process.exitcode == -signal.SIGKILL
    finally:
        if process.is_alive():
            process.kill()
            process.join()
        reader.close()
