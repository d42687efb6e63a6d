"""An iterator read from two threads, and the reference API closed from another thread, say
the library's error (red team of session 40): both gave Python's raw "generator already
executing" (``ValueError``); ``OpenWebTextLoader.close`` also left the passes after a busy
one open."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from openwebtext import Loader, OpenWebTextLoader
from openwebtext.stream.turns import InsideNext

#: How long a test waits for a thread it started (a bound, never a wait for a race).
WAIT = 10.0


def _held(inside: threading.Event, release: threading.Event) -> Iterator[int]:
    """A generator that, at its second item, waits until released: a thread inside next()."""
    yield 1
    inside.set()
    release.wait(WAIT)
    yield 2


def test_next_from_a_second_thread_is_the_library_s_error(small_corpus: Path) -> None:
    docs = Loader(small_corpus, workers=0, seed=0).iter()
    docs.close()
    inside, release = threading.Event(), threading.Event()
    docs._gen = _held(inside, release)
    next(docs)
    reader = threading.Thread(target=next, args=(docs,))
    reader.start()
    try:
        assert inside.wait(WAIT)
        with pytest.raises(InsideNext, match=r"next\(\) while another thread is inside next"):
            next(docs)
    finally:
        release.set()
        reader.join(WAIT)


def test_an_error_inside_the_stream_is_its_own() -> None:
    """A ``ValueError`` the stream itself raised with those words stays as it is."""
    def raising() -> Iterator[int]:
        raise ValueError("generator already executing (the stream's own words)")
        yield 0

    from openwebtext.loader import DocumentIterator

    iterator = DocumentIterator.__new__(DocumentIterator)
    iterator._gen = raising()
    with pytest.raises(ValueError, match="the stream's own words"):
        next(iterator)


def test_the_reference_api_closed_from_another_thread(small_corpus: Path) -> None:
    """A close, or a second thread's ``next``, while a thread is inside the loader's ``next``
    is the library's error, and the pass goes on."""
    loader = OpenWebTextLoader([str(small_corpus)], num_workers=0)
    next(loader)
    running = loader._pass  # (the pass: its generator swapped for one that waits)
    assert running is not None
    running.close()
    inside, release = threading.Event(), threading.Event()
    running._gen = _held(inside, release)
    next(loader)
    reader = threading.Thread(target=next, args=(loader,))
    reader.start()
    try:
        assert inside.wait(WAIT)
        with pytest.raises(InsideNext, match=r"close\(\) while another thread"):
            loader.close()
        with pytest.raises(InsideNext, match=r"next\(\) while another thread is inside next"):
            next(loader)
    finally:
        release.set()
        reader.join(WAIT)
    loader.close()  # (now no thread is inside: the pass ends)
    with pytest.raises(StopIteration):
        next(loader)


def test_a_close_after_an_interrupt_left_the_queue_s_lock_held_ends(
    small_corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Ctrl-C landing inside the consumer's take from the queue, between its lock taken and
    its ``with`` begun, leaves the lock held (CPython raises it there): the close that follows
    waited for that lock for ever (1 run in ~30 of ``test_red_ahead_close``'s Ctrl-C, before
    and after session 40). It now takes the lock as held for ever after a bound, says so, and
    ends; the thread is a daemon, left to end with the program."""
    from openwebtext import ahead

    stage = ahead(Loader(small_corpus, tokenizer="bytes", workers=0, seed=0).batches(32, 2),
                  depth=1)  # fmt: skip
    next(stage)
    queued = stage._producer.ready
    deadline = time.monotonic() + WAIT
    while not queued.full() and time.monotonic() < deadline:  # (the thread waits for room)
        time.sleep(0.01)
    queued.mutex.acquire()  # (what the interrupt leaves)
    closer = threading.Thread(target=stage.close, daemon=True)
    try:
        with caplog.at_level("WARNING", logger="openwebtext"):
            closer.start()
            closer.join(WAIT)
        assert not closer.is_alive(), "the close waited for the queue's lock for ever"
        assert "left to end with the program" in caplog.text
    finally:
        queued.mutex.release()
        closer.join(WAIT)
