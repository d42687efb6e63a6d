"""An iterator read from two threads, and the reference API closed from another thread, say
the library's error (red team of session 40): both gave Python's raw "generator already
executing" (``ValueError``); ``OpenWebTextLoader.close`` also left the passes after a busy
one open."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from openwebtext import Loader, OpenWebTextLoader
from openwebtext.stream.source import InsideNext

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
    loader = OpenWebTextLoader([str(small_corpus)], num_workers=0)
    first, second = iter(loader), iter(loader)
    next(first), next(second)
    inside, release = threading.Event(), threading.Event()
    busy = _held(inside, release)
    next(busy)
    loader._passes.add(busy)  # (a pass another thread is inside)
    reader = threading.Thread(target=next, args=(busy,))
    reader.start()
    try:
        assert inside.wait(WAIT)
        with pytest.raises(InsideNext, match=r"close\(\) while another thread"):
            loader.close()
        assert list(first) == [] and list(second) == []  # (the others: closed)
    finally:
        release.set()
        reader.join(WAIT)
