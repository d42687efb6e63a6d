"""The main process's watchdog over remote I/O: what the pool's ``timeout`` is to workers.

Indexing, listing and HEAD requests run in the main process, where no pool watches them.
:func:`watched` runs such work in daemon threads and gives up, with an error naming the URL,
when no request has started, finished or failed for ``IDLE_SECONDS`` (every attempt of
``retry.with_retries`` counts, see ``retry.touch``): each request also has its own deadline,
so this catches what lies outside them (a library's blocking call that never returns). The
threads are daemons, so one stuck in a socket never keeps the process from exiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from openwebtext.errors import CorpusError
from openwebtext.source.redaction import redact
from openwebtext.source.retry import idle

__all__ = ["IDLE_SECONDS", "watched"]

#: As the pool's default ``timeout``: nothing for this long is a hang.
IDLE_SECONDS = 60.0

T = TypeVar("T")
R = TypeVar("R")


def watched(
    call: Callable[[T], R], items: Sequence[T], url: str, threads: int = 1, first: bool = False
) -> list[R | BaseException]:
    """``call(item)`` for each of ``items`` on up to ``threads`` daemon threads, in order:
    each result, or the exception it raised (``first``: once one raised, the items not begun
    are not called, and say that exception: a caller that stops at the first error waits for
    no more).

    Raises:
        CorpusError: no remote I/O for ``IDLE_SECONDS`` before every call ended; names
            ``url`` (redacted).
    """
    # By position, whatever a result is (None, an empty list): every one is handed back.
    results: dict[int, R | BaseException] = {}
    queue = list(enumerate(items))
    lock = threading.Lock()
    finished = threading.Event()
    left = [len(items)]

    def run() -> None:
        while True:
            with lock:
                if not queue:
                    return
                k, item = queue.pop(0)
            result: R | BaseException
            try:
                result = call(item)
            except BaseException as exc:  # a value, for the caller to raise or keep
                result = exc
            with lock:
                results[k] = result
                left[0] -= 1
                if first and isinstance(result, BaseException):
                    for j, _ in queue:  # not begun: they say the error
                        results[j] = result
                    left[0] -= len(queue)
                    queue.clear()
                if left[0] == 0:
                    finished.set()

    if not items:
        return []
    for _ in range(max(1, min(threads, len(items)))):
        threading.Thread(target=run, name="owt-index", daemon=True).start()
    while not finished.wait(1.0):
        if idle() > IDLE_SECONDS:
            raise CorpusError(
                f"nothing received for {IDLE_SECONDS:.0f} s (the server stalls)", path=redact(url)
            )
    return [results[k] for k in range(len(items))]
