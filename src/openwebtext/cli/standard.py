"""The process's standard streams: at start a closed stdin, stdout or stderr is given
/dev/null (so no file opened later takes its number), and remembered in
``CLOSED_AT_START`` (``owt stream --jsonl`` refuses a closed stdout); while a command
runs, stderr's reader going away drops what it says but stops nothing (``messages``), and
the library's warnings are one line each; ``stdout_gone`` tells a broken pipe of stdout's
from another's."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from openwebtext.errors import one_line

__all__ = ["CLOSED_AT_START", "messages", "open_standard_streams", "stdout_gone"]

#: Standard descriptors found closed at start (and given /dev/null): {fd: True}.
CLOSED_AT_START: dict[int, bool] = {}


def open_standard_streams() -> None:
    """Give a closed stdin, stdout or stderr /dev/null.

    Otherwise the next file or pipe opened would take its number, and messages meant
    for stderr would go into it (or fail, ending the run).
    """
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:  # (an output open for reading only: a closed one's number taken before we ran,
            # as a pyenv shim's script takes a closed stderr's)
            if not fd or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
                os.fstat(fd)
                continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        CLOSED_AT_START[fd] = True
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "w" if fd else "r", encoding="utf-8", closefd=False))  # noqa: SIM115


class _Stderr:
    """``sys.stderr`` while a command runs: a reader gone away (``owt tokenize |& head``)
    makes what is written after it go to /dev/null, not a ``BrokenPipeError`` in the middle
    of the work (a progress bar's write) read as stdout's and ending the run with 0."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _OneLine(logging.Filter):
    """The library's log records made one line each (``one_line``), wherever they go: the
    last-resort handler on stderr, a host program's own handlers, a test's capture."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = one_line(record.getMessage()), None
        return True


def _one_line_warning(message: Warning | str, category: type[Warning], *args: Any,
                      **kwargs: Any) -> str:  # fmt: skip
    """A ``warnings`` warning as one line (the default adds the source line under it)."""
    return f"{category.__name__}: {one_line(str(message))}\n"


@contextlib.contextmanager
def messages() -> Iterator[None]:
    """While a command runs: stderr's reader going away stops nothing (``_Stderr``), and the
    library's log records and warnings are one line each (a file named with a newline: not
    two lines). Re-entrant (``cli.main`` called inside a command): the outer one holds."""
    if isinstance(sys.stderr, _Stderr):
        yield
        return
    stderr, library, one = sys.stderr, logging.getLogger("openwebtext"), _OneLine()
    wrapped, formatting = _Stderr(stderr), warnings.formatwarning
    sys.stderr, warnings.formatwarning = wrapped, _one_line_warning
    library.addFilter(one)
    try:
        yield
    finally:
        library.removeFilter(one)
        warnings.formatwarning = formatting
        if sys.stderr is wrapped:  # (another thread's, swapped meanwhile: left to it)
            sys.stderr = stderr


def stdout_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader went away (a ``BrokenPipeError`` is
    its, not another pipe's: a worker's, a server's)."""
    try:
        poll = select.poll()
        poll.register(1, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (OSError, ValueError):
        return False
