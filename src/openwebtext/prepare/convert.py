"""The format pass: a finished run's ``train.bin`` / ``val.bin`` written again as the files
another trainer reads (``tokenfiles``: Megatron, llm.c, datatrove), beside them.

It runs after ``prepare`` or ``merge`` (either engine, any split rule, sharded or not), so
the tokenize pass, its resume and its merge are untouched and ``train.bin`` keeps its bytes.
Document boundaries come from the end-of-text ids (``tokenfiles.eot_ends``), and their count
is checked against the documents ``meta.json`` records: a tokenizer that ever wrote an
end-of-text inside a document fails here, it is never silently misread.

What each format adds: ``megatron`` ``train.idx`` and ``val.idx`` (``train.bin`` *is* its
``.bin``; also the document-offset sidecar of a nanoGPT run); ``datatrove`` ``train.ds``
(a hard link to ``train.bin`` where the file system allows, else a copy) and
``train.ds.index``; ``llmc`` ``train_000000.bin`` … (header + ids, a copy). Then
``FORMAT.json`` (the marker: which ``train.bin``/``val.bin`` by sha256, and each file
written, its size and sha256), written last. A pass killed midway goes on: the files
recorded in ``.FORMAT.progress.json`` for the same sources are kept, the others written; a
marker that is not the pass's goes before any file is written, and what killed passes left
(temporary files, a record whose marker was written) is swept under the lock
(``workdir.Workdir.sweep``), also by a pass that finds the format finished.
A URL is fetched to its staging folder, converted there, and the new files uploaded,
the marker last.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from openwebtext import codec
from openwebtext.codec import Record
from openwebtext.errors import StateError
from openwebtext.files import atomic_file
from openwebtext.options import MOST_INT, as_int, countable
from openwebtext.prepare import outputs
from openwebtext.prepare.config import Progress
from openwebtext.prepare.lock import confirm, hold
from openwebtext.prepare.meta import read_meta
from openwebtext.prepare.run import said_full, tidy
from openwebtext.prepare.state import FileInfo, FileName, FormatPass, Marker, Meta, Sources, Split
from openwebtext.prepare.workdir import PrepareError, Workdir, sha256_file
from openwebtext.source import Storage
from openwebtext.tokenfiles import (
    FORMATS,
    LLMC_SHARD,
    LLMC_SHARD_TOKENS,
    datatrove_index,
    eot_ends,
    llmc_cuts,
    llmc_header,
    megatron_index,
)

__all__ = ["format_files", "write_format"]

_SPLITS: tuple[Split, ...] = ("train", "val")
_COPY = 1 << 24  # ids copied at a time into an llm.c shard


def write_format(
    out: str | os.PathLike[str],
    fmt: str,
    store: Storage | None = None,
    *,
    shard_tokens: int = LLMC_SHARD_TOKENS,
    progress: Callable[[Progress], None] | None = None,
    wait: bool = False,
) -> dict[str, Any] | None:
    """Write ``fmt``'s files beside the finished run in ``out`` (a folder or a URL).

    Args:
        out: A folder (or URL) holding a finished run: ``meta.json``, ``train.bin``, ``val.bin``.
        fmt: ``nanogpt`` (nothing to add), ``megatron``, ``llmc`` or ``datatrove``.
        store: The storage a URL's filesystem is made with (None: the process default).
        shard_tokens: ``llmc``: ids a shard holds at most (whole documents).
        progress: Called with a ``Progress("format", …)`` after each file.
        wait: Wait for another run writing into the folder rather than fail.

    Returns:
        The marker ``FORMAT.json`` (None for ``nanogpt``).

    Raises:
        PrepareError: ``out`` holds no finished run; its files and ``meta.json`` disagree
            (documents found at end-of-text ids are not those it records); an upload failed.
        ValueError: an unknown format, a ``shard_tokens`` that is no int >= 1, or ``llmc``
            for ids wider than uint16.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    shard_tokens = as_int(shard_tokens)
    if not countable(shard_tokens, 1):  # (the marker says it: a record's count)
        raise ValueError(f"shard_tokens must be an int from 1 to {MOST_INT}, not {shard_tokens!r}")
    if fmt == "nanogpt":
        return None
    target = outputs.location(out)
    meta = _finished_meta(target, store)
    if fmt == "llmc" and meta.config.dtype != "uint16":
        raise ValueError(f"llm.c shards hold uint16 ids; this run's ids are {meta.config.dtype}")
    sources = _sources(meta, fmt, shard_tokens)
    stale = LLMC_SHARD.fullmatch if fmt == "llmc" else None  # (a trainer's glob takes them)
    if isinstance(target, Path):
        # A finished format is seen before the lock is taken, as a finished run is
        # (``run.written``): on a read-only folder it is "nothing to do".
        done = _finished(target, fmt, sources)
        if done is not None:
            tidy(target)  # what a killed pass left beside it, if the lock can be taken
            if not _stale_shards(target, fmt, done.files):
                return codec.encode(done)
        with hold(target, wait):
            done = _finished(target, fmt, sources)  # (again: a pass may have run meanwhile)
            if done is None:
                with said_full(target):
                    return _convert(target, fmt, meta, shard_tokens, progress)
            for path in _stale_shards(target, fmt, done.files):  # (copied in: they go, as
                path.unlink(missing_ok=True)  # a pass removes them)
            return codec.encode(done)
    known = _read(target, f"{fmt}.json", Marker, store)
    if known is not None and (known.format, known.source) == (fmt, sources):
        if stale is not None:
            outputs.strays(target, set(known.files), stale, store)
        return codec.encode(known)
    folder = outputs.staging(target, "fetch")
    with hold(folder, wait):  # (the copy is made under the lock too: it is swept there)
        outputs.fetch(target, codec.encode(meta), store, verify=False)
        with said_full(folder):
            marker = _convert(folder, fmt, meta, shard_tokens, progress)
        confirm(folder)
        outputs.upload(folder, target, [*marker["files"], f"{fmt}.json"], store, stale)
    return marker


def format_files(meta: dict[str, Any], fmt: str) -> list[str]:
    """The names ``fmt`` adds to a run (llm.c's: those of its marker, known once written)."""
    if fmt == "megatron":
        return ["train.idx", "val.idx"]
    if fmt == "datatrove":
        return [n for s in _SPLITS for n in (f"{s}.ds", f"{s}.ds.index")]
    return []


def _finished_meta(target: outputs.Location, store: Storage | None) -> Meta:
    try:
        meta = Meta.from_json(read_meta(target, store))
    except StateError as exc:
        raise PrepareError(
            f"{outputs.shown(target)} holds no finished run of owt tokenize or owt merge "
            f"({exc}): write it first, then its format"
        ) from None
    if meta.config.slice is not None:
        raise PrepareError(
            f"{outputs.shown(target)} holds a slice: give the format to owt merge, which "
            "writes the whole run"
        )
    return meta


R = TypeVar("R", bound=Record)


def _read(
    folder: outputs.Location, name: str, record: type[R], store: Storage | None = None
) -> R | None:
    """``folder/name`` as ``record``; None if it is missing or damaged (its files are then
    written again: nothing is taken from a record that does not read as one)."""
    body = outputs.read_json(folder, name, store)
    try:
        return None if body is None else record.from_json(body)
    except StateError:
        return None


def _sources(meta: Meta, fmt: str, shard_tokens: int) -> Sources:
    """What the files are made of: the run's ``train.bin`` and ``val.bin`` (by sha256), and
    for llm.c the shard size."""
    made = {name.removesuffix(".bin"): info.sha256 for name, info in meta.files.items()}
    return Sources(**made, shard_tokens=shard_tokens if fmt == "llmc" else None)


def _convert(
    folder: Path,
    fmt: str,
    meta: Meta,
    shard_tokens: int,
    progress: Callable[[Progress], None] | None,
) -> dict[str, Any]:
    """Write ``fmt``'s files in the local ``folder`` (its lock held), going on from a killed
    pass's record.

    What killed passes left is swept first (``Workdir.sweep``: their temporary files, and a
    record whose marker was written). A marker that is not this pass's goes before any file
    is written (a folder without one has no finished format), and so do llm.c shards that
    its record does not keep (a trainer's glob would take them)."""
    Workdir(folder).sweep()
    sources = _sources(meta, fmt, shard_tokens)
    name = f"{fmt}.json"
    if (finished := _finished(folder, fmt, sources)) is not None:
        return codec.encode(finished)
    (folder / name).unlink(missing_ok=True)
    record_path = folder / f".{fmt}.progress.json"
    record = _read(folder, record_path.name, FormatPass)
    done = dict(record.files) if record is not None and record.source == sources else {}
    for stale in _stale_shards(folder, fmt, done):
        stale.unlink(missing_ok=True)
    dtype = np.dtype(meta.config.dtype).newbyteorder("<")
    written = 0
    total = sum(info.bytes for info in meta.files.values())
    eot = meta.config.eot
    for split in _SPLITS:
        path = folder / f"{split}.bin"
        with os.fdopen(codec.open_regular(path), "rb") as f:  # (read, never through a map)
            ids = _Ids(f.fileno(), path, dtype, meta.files[cast(FileName, path.name)].bytes)
            ends = eot_ends(ids.shape, eot, path, ids.fd)
            if len(ends) != (documents := meta.counts.documents[split]):
                raise PrepareError(
                    f"{path}: {len(ends)} documents end at the end-of-text id {eot}, not "
                    f"the {documents} its meta.json records: the tokenizer wrote an "
                    "end-of-text inside a document, or the file is not this run's"
                )
            for file, write in _files(fmt, folder, split, ids, ends, shard_tokens):
                if not _kept(folder / file, done.get(file)):
                    done[file] = write()
                    confirm(folder)
                    _save(record_path, FormatPass(sources, done))
        written += ids.size
        if progress is not None:
            progress(Progress("format", written, total, ids.size // dtype.itemsize))
    marked = codec.encode(Marker(source=sources, files=done, format=cast(Any, fmt)))
    with atomic_file(folder / name, durable=True) as f:
        f.write(json.dumps(marked, indent=1).encode())
    record_path.unlink(missing_ok=True)  # (else the next pass's sweep: the marker is there)
    return marked


def _finished(folder: Path, fmt: str, sources: Sources) -> Marker | None:
    """The marker of ``fmt``'s finished files made of ``sources`` in the local ``folder``:
    the marker says them, and every file it lists has its size; else None."""
    marker = _read(folder, f"{fmt}.json", Marker)
    if marker is None or (marker.format, marker.source) != (fmt, sources):
        return None
    sizes = outputs.sizes(folder, list(marker.files))
    if any(sizes[n] != info.bytes for n, info in marker.files.items()):
        return None
    return marker


def _stale_shards(folder: Path, fmt: str, files: dict[str, FileInfo]) -> list[Path]:
    """llm.c shards in ``folder`` that this pass did not write (a trainer's glob would take
    them)."""
    if fmt != "llmc":
        return []
    return [p for p in folder.iterdir() if LLMC_SHARD.fullmatch(p.name) and p.name not in files]


def _kept(path: Path, info: FileInfo | None) -> bool:
    """Whether a killed pass wrote ``path`` whole (its record names it, at that size)."""
    return info is not None and path.is_file() and path.stat().st_size == info.bytes


def _save(path: Path, record: FormatPass) -> None:
    with atomic_file(path, durable=True) as f:
        f.write(json.dumps(codec.encode(record)).encode())


Writer = Callable[[], FileInfo]


def _files(
    fmt: str, folder: Path, split: str, ids: _Ids, ends: np.ndarray, shard_tokens: int
) -> Iterator[tuple[str, Writer]]:
    """Each file ``fmt`` writes for ``split``, with the call that writes it."""
    if fmt == "megatron":
        body = megatron_index(ends, ids.shape.dtype)
        yield f"{split}.idx", lambda: _write(folder / f"{split}.idx", [body])
    elif fmt == "datatrove":
        yield f"{split}.ds", lambda: _link(folder / f"{split}.bin", folder / f"{split}.ds")
        index = f"{split}.ds.index"
        yield index, lambda: _write(folder / index, [datatrove_index(ends)])
    else:
        for k, (first, stop) in enumerate(llmc_cuts(ends, shard_tokens)):
            start = int(ends[first - 1]) if first else 0
            end = int(ends[stop - 1]) if stop else 0
            shard = folder / f"{split}_{k:06d}.bin"
            yield shard.name, _shard_writer(shard, ids, start, end)


class _Ids:
    """A split's ids, read from its open file ``fd`` by ``pread`` (never mapped: a file cut by
    another program meanwhile would kill the process with SIGBUS at a page past its end).

    Raises:
        PrepareError: the file is not the size its ``meta.json`` records, or was cut while
            it was read.
    """

    def __init__(self, fd: int, path: Path, dtype: np.dtype[Any], size: int) -> None:
        self.fd, self.path, self.size = fd, path, os.fstat(fd).st_size
        if self.size != size:
            raise PrepareError(f"{path}: {self.size} bytes, not the {size} its meta.json "
                               "records: the file changed since its run finished")  # fmt: skip
        #: Only its length and dtype are read (``eot_ends`` reads ``fd``).
        self.shape = np.broadcast_to(np.zeros((), dtype), (size // dtype.itemsize,))

    def read(self, start: int, end: int) -> bytes:
        """The bytes of ids ``[start, end)``."""
        item = self.shape.dtype.itemsize
        data = codec.pread_all(self.fd, (end - start) * item, start * item)
        if len(data) != (end - start) * item:
            raise PrepareError(f"{self.path}: it was cut while it was read (changed since its "
                               "run finished)")  # fmt: skip
        return data


def _shard_writer(shard: Path, ids: _Ids, start: int, end: int) -> Writer:
    def write() -> FileInfo:
        chunks = (ids.read(at, min(at + _COPY, end)) for at in range(start, end, _COPY))
        return _write(shard, itertools.chain([llmc_header(end - start)], chunks))

    return write


def _write(path: Path, parts: Iterator[bytes] | list[bytes]) -> FileInfo:
    """Write ``parts`` as ``path`` (whole or not at all); its size and sha256."""
    digest = hashlib.sha256()
    size = 0
    with atomic_file(path, durable=True) as f:
        for part in parts:
            f.write(part)
            digest.update(part)
            size += len(part)
    return FileInfo(size, digest.hexdigest())


def _link(source: Path, path: Path) -> FileInfo:
    """``path`` as a hard link to ``source`` (same bytes), or a copy where links fail."""
    tmp = path.with_name(f".{path.name}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        with os.fdopen(codec.open_regular(source), "rb") as f:
            return _write(path, iter(lambda: f.read(_COPY), b""))
    os.replace(tmp, path)  # (a no-op, tmp kept, when path is a link to source already)
    tmp.unlink(missing_ok=True)
    return FileInfo(path.stat().st_size, sha256_file(path))
