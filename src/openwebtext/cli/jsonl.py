"""``owt stream --jsonl``'s sink: one JSON line per document on stdout, written in chunks
with signals held back, following the mark of the last line that got out whole."""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import os
import stat
import sys
from typing import Any

from openwebtext import interrupts
from openwebtext.errors import OutputError, OWTError
from openwebtext.loader import Document, DocumentIterator, MixtureIterator

__all__ = ["write_jsonl"]

#: ``--jsonl`` writes its lines in chunks of about this many bytes.
_CHUNK = 1 << 16


def _writer() -> Any:
    """A function writing bytes to stdout, counting in ``sent[0]`` how many got out (also
    when a signal interrupts it).

    Straight to the descriptor: a buffered text stream may report a chunk as written
    when a signal cut the ``write(2)`` short. Streams without one (tests) get the text
    layer.
    """
    out = sys.stdout
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):

        def write_text(data: bytes, sent: list[int]) -> None:
            out.write(data.decode())
            out.flush()
            sent[0] = len(data)

        return write_text
    out.flush()

    def write_all(data: bytes, sent: list[int]) -> None:
        view = memoryview(data)
        sent[0] = 0
        while sent[0] < len(view):
            sent[0] += os.write(fd, view[sent[0] :])

    return write_all


def _json_line(doc: Document) -> bytes:
    record = {"subset": doc.subset, "member": doc.member, "name": doc.name, "text": doc.text}
    if doc.source is not None:  # a mixture's part
        record = {"source": doc.source, **record}
    try:
        return (json.dumps(record, ensure_ascii=False) + "\n").encode()
    except UnicodeEncodeError:  # a name that is not UTF-8 (surrogate escapes): JSON escapes
        return (json.dumps(record) + "\n").encode()


def _cut_line(sent: int, lines: list[bytes]) -> str:
    """After a write of ``lines`` that failed once ``sent`` bytes got out (a full disk): the
    part of a line it left is taken back from a regular file (truncated to the last whole
    line, as the state says), or said. What to add to the error."""
    ends = list(itertools.accumulate(map(len, lines), initial=0))
    cut = sent - ends[bisect.bisect_right(ends, sent) - 1]
    if not cut:
        return ""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = sys.stdout.fileno()
        if stat.S_ISREG(os.fstat(fd).st_mode):
            at = os.lseek(fd, 0, os.SEEK_CUR) - cut
            os.ftruncate(fd, at)
            os.lseek(fd, at, os.SEEK_SET)
            return f" (the {cut} bytes of a line it cut taken back: it ends with a whole line)"
    return f" (its last line cut after {cut} bytes: the state ends before it)"


def write_jsonl(iterator: DocumentIterator | MixtureIterator, written: list[Any]) -> None:
    """Write one JSON line per document to stdout; ``written[0]`` follows what got out.

    Lines are written in chunks with signals held back (``interrupts.deferred``), and
    ``written[0]`` becomes the iterator's mark after the last line that got out whole,
    so the state describes exactly the lines on stdout. An interrupt between chunks drops
    the lines not yet written (the resumed run hands them out again). Only a reader that
    takes nothing for ``GRACE_SECONDS`` after a signal can leave a line cut short; the
    state still ends before it.
    """
    write = _writer()
    lines: list[bytes] = []
    marks: list[Any] = []
    size = 0

    def flush() -> None:
        sent = [0]
        with interrupts.deferred:  # the note below too: a signal right after the write waits
            try:
                write(b"".join(lines), sent)
            except BrokenPipeError:  # (the reader went away: owt ends quietly)
                raise
            except OSError as exc:  # a full disk, an I/O error: said of the output
                cut = _cut_line(sent[0], lines)
                raise OutputError(f"cannot write standard output (--jsonl): "
                                  f"{exc.strerror or exc}{cut}") from exc  # fmt: skip
            finally:
                ends = itertools.accumulate(map(len, lines))
                whole = bisect.bisect_right(list(ends), sent[0])
                if whole:
                    written[0] = marks[whole - 1]
                lines.clear()
                marks.clear()

    try:
        for doc in iterator:
            line = _json_line(doc)
            lines.append(line)
            marks.append(iterator.mark())
            size += len(line)
            if size >= _CHUNK:
                interrupts.check()  # (a signal whose exception something swallowed)
                flush()
                size = 0
    except OWTError:
        flush()  # the documents before the error are good, and the state says so
        raise
    flush()
