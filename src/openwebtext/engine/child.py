"""The child side: a worker process's main loop, and reading one unit as a worker does.

A worker takes ``Request``s off its task pipe in order, tells its reader what is queued
(``Reader.prefetch``), reads each unit (``read_unit``), copies the bytes into the request's
shared slot (or sends them inline) and answers with the document table (``Done``), or with the
unit's error as a value (``Failed``). ``InlinePool`` reads units with the same ``read_unit``
and ``open_reader`` in the calling process.
"""

from __future__ import annotations

import collections
import ctypes
import mmap
import os
import pickle
import signal
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection

import numpy as np

from openwebtext.engine.encode import encode_member
from openwebtext.engine.member import Member
from openwebtext.engine.options import Lanes, PoolOptions
from openwebtext.engine.read import Reader
from openwebtext.engine.tasks import Done, Failed, Request, failed
from openwebtext.errors import WorkerError, WrongTokenizer
from openwebtext.index import as_indexed
from openwebtext.records import Unit
from openwebtext.source import Storage, resolve
from openwebtext.tokenfiles import TOKENS
from openwebtext.tokenizer import Tokenizer

__all__ = ["LaneReaders", "open_reader", "read_unit", "worker_main"]


def _die_with_parent(parent: int, forked_by_main_thread: bool) -> None:
    """Have this worker die with its consumer, even mid-member.

    Without it, a worker busy with (or stuck in) a member outlives a consumer killed by
    SIGKILL or the OOM killer, holding the consumer's stdout open (a waiting one exits on EOF).
    Forked by the consumer's main thread, on Linux, the kernel kills it (``PR_SET_PDEATHSIG``).
    The kernel does so when the *thread* that forked it ends, not its process: a worker forked
    on another thread (``start()``'s, a caller's own) watches its parent instead, from a
    thread that looks every ``_WATCH_SECONDS`` (as torch's DataLoader workers do).
    """
    if forked_by_main_thread:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # pragma: no cover - not Linux
            pass
        else:
            if os.getppid() != parent:  # the consumer died before prctl took effect
                os._exit(1)
            return
    threading.Thread(target=_watch, args=(parent,), name="owt-watch-parent", daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_WATCH_SECONDS)
    os._exit(1)


_WATCH_SECONDS = 0.25
_PR_SET_PDEATHSIG = 1


def worker_main(
    lanes: Lanes,
    tasks: Connection,
    results: Connection,
    shared: mmap.mmap | None,
    options: PoolOptions,
    inherited: list[Connection],
    parent: int,
    forked_by_main_thread: bool = True,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the consumer decides when we stop
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by the fork
    # terminate() ends us at once, whatever SIGTERM handler the consumer's program has.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(parent, forked_by_main_thread)
    for conn in inherited:
        conn.close()
    readers = LaneReaders(lanes)
    units = lanes.units
    slot_bytes = options.slot_bytes
    queued: collections.deque[Request | None] = collections.deque()
    try:
        while True:
            try:
                request = _next_task(tasks, queued, readers)
            except EOFError:
                return
            if request is None:
                return
            seq, unit, slot = request
            try:
                reader, lane = readers.of(unit)
                member, payload, offsets, counts = read_unit(
                    reader, lane.tokenizer, units[unit], lane.normalise
                )
            except Exception as exc:  # every failure is the unit's, sent as a value
                _send_failure(results, failed(seq, exc, units[unit]))
                continue
            data: bytes | None = payload
            size = len(payload)
            if shared is not None and slot is not None and size <= slot_bytes:
                shared[slot * slot_bytes : slot * slot_bytes + size] = payload
                data = None
            results.send(
                Done(
                    seq,
                    size,
                    data,
                    member.names,
                    offsets,
                    member.sizes,
                    member.dropped,
                    member.replace,
                    counts,
                )
            )
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        return
    finally:
        readers.close()


class LaneReaders:
    """A reader of each lane, opened when the lane's first unit comes (a worker's, and the
    inline pool's)."""

    def __init__(self, lanes: Lanes) -> None:
        self.lanes = lanes
        self.readers: dict[int, Reader] = {}

    def of(self, unit: int) -> tuple[Reader, PoolOptions]:
        """The reader of pool unit ``unit``, and its lane's options."""
        number = self.lanes.of(unit)
        return self.reader(number), self.lanes.lanes[number].options

    def reader(self, number: int) -> Reader:
        """Lane ``number``'s reader."""
        reader = self.readers.get(number)
        if reader is None:
            lane = self.lanes.lanes[number]
            reader = self.readers[number] = open_reader(lane.options, lane.storage)
        return reader

    def prefetch(self, queued: Sequence[int]) -> None:
        """Tell each lane's reader which of its units are queued (remote ones fetch ahead)."""
        by_lane: dict[int, list[Unit]] = {}
        for unit in queued:
            by_lane.setdefault(self.lanes.of(unit), []).append(self.lanes.units[unit])
        for number, units in by_lane.items():
            self.reader(number).prefetch(units)

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()


def _send_failure(results: Connection, message: Failed) -> None:
    """Send a failure; an error that cannot be pickled goes as a ``WorkerError`` saying so."""
    try:
        results.send(message)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        error = WorkerError(
            f"{message.error} (and its {type(message.error).__name__} cannot be sent: {exc})",
            path=getattr(message.error, "path", None),
            member=getattr(message.error, "member", None),
        )
        results.send(Failed(message.seq, error, message.traceback))


def _next_task(
    tasks: Connection,
    queued: collections.deque[Request | None],
    readers: LaneReaders,
) -> Request | None:
    """The next task; every task already sent is taken off the pipe and told to the reader.

    So a reader of remote files fetches the queued units while this one is
    decompressed (``Reader.prefetch``); local files ignore it.
    """
    if not queued:
        queued.append(tasks.recv())
    while queued[-1] is not None and tasks.poll():
        queued.append(tasks.recv())
    readers.prefetch([t.unit for t in queued if t is not None])
    return queued.popleft()


def read_unit(
    reader: Reader, tokenizer: Tokenizer | None, unit: Unit, normalise: bool = False
) -> tuple[Member, bytes, list[int], list[int] | None]:
    """Read a unit: its member, the bytes for the consumer, their offsets and token counts."""
    if unit.kind == TOKENS:  # ids already: they ride in the member's bytes
        try:
            member = reader.read(unit)
        except WrongTokenizer:  # (its ids outside the vocabulary: the file's record says why)
            read_with(tokenizer, unit, reader.storage)
            raise
        counts = token_counts(member, read_with(tokenizer, unit, reader.storage))
        return member, member.data, member.offsets, counts
    member = reader.read(unit)
    if tokenizer is None:
        return member, member.data, member.offsets, None
    encoded = encode_member(member, tokenizer, unit, normalise=normalise)
    return member, encoded.data, encoded.offsets, encoded.counts


def read_with(tokenizer: Tokenizer | None, unit: Unit, storage: Storage | None = None) -> int:
    """The width of the ids of a token unit, checked to be the tokenizer's, and the tokenizer
    the one its run's ``meta.json`` records, if any (a URL's file as read with ``storage``).

    Raises:
        WrongTokenizer: no tokenizer, or another width or fingerprint than the file's.
    """
    if tokenizer is None:
        raise WrongTokenizer(
            "a token corpus is read with the tokenizer its ids were written with: give "
            "Options(tokenizer=...)",
            unit.path,
            unit.member,
        )
    itemsize = tokenizer.dtype.itemsize
    token_file = as_indexed(unit.path, resolve(storage), tokenizer.eot)  # as the reader
    width = token_file.ids.dtype.itemsize
    if width != itemsize:
        why = f"ids of {width} bytes, not the {itemsize} of the tokenizer {tokenizer.spec!r}"
        raise WrongTokenizer(why, unit.path, unit.member)
    recorded = token_file.tokenizer  # the meta.json beside it: ids of the same width differ
    if recorded is not None and recorded.fingerprint != tokenizer.fingerprint:
        why = (
            f"its ids were written with the tokenizer {recorded.tokenizer!r} (fingerprint "
            f"{recorded.fingerprint}, its meta.json), not read with {tokenizer.spec!r} "
            f"(fingerprint {tokenizer.fingerprint}): read it with {recorded.tokenizer!r}"
        )
        raise WrongTokenizer(why, unit.path, unit.member)
    return itemsize


def token_counts(member: Member, itemsize: int) -> list[int]:
    """The ids of each document of a token unit of ids of ``itemsize`` bytes (0: left out)."""
    if member.counts is not None:  # the token reader's
        return member.counts
    counts = np.asarray(member.sizes, dtype=np.int64) // itemsize  # no Python per document
    counts[np.asarray(member.offsets, dtype=np.int64) < 0] = 0
    kept: list[int] = counts.tolist()
    return kept


def open_reader(options: PoolOptions, storage: Storage | None) -> Reader:
    """The reader a worker (or the inline pool) reads units with."""
    return Reader(
        options.max_member_bytes,
        options.max_document_bytes,
        split=options.split,
        decode_errors=options.decode_errors,
        storage=storage,
        texts=options.tokenizer is not None,  # encode_member's texts, decoded by the check
        token_eot=None if options.tokenizer is None else options.tokenizer.eot,
        token_vocab=None if options.tokenizer is None else options.tokenizer.n_vocab,
    )
