"""Any token file opened as a memory map and its documents, its format told by the file."""

from __future__ import annotations

import os
import struct
import weakref
from pathlib import Path
from typing import BinaryIO, NamedTuple, Protocol

import numpy as np

from openwebtext.codec import open_regular
from openwebtext.errors import SHORTAGES
from openwebtext.tokenfiles.common import (
    TokenFile,
    Vocabulary,
    check_run_record,
    damaged,
    eot_ends,
    local_bytes,
    run_beside,
)
from openwebtext.tokenfiles.datatrove import read_datatrove_index
from openwebtext.tokenfiles.llmc import (
    LLMC_HEADER_BYTES,
    LLMC_MAGIC,
    LLMC_VERSION,
    read_llmc_header,
)
from openwebtext.tokenfiles.megatron import read_megatron_index

__all__ = [
    "IndexedAs",
    "Placed",
    "companions",
    "indexed",
    "kept",
    "open_token_file",
    "opened",
    "remember",
]

#: What of a file ``open_token_file`` reads beside it, by (size, mtime_ns, inode, device) or None:
#: absent (a file put in place by a rename keeping its size and mtime is another).
_Stamp = tuple[int, int, int, int]
_Beside = tuple[_Stamp | None, ...]
#: Files opened by ``opened``, by (path, its stamp, what beside it, eot, dtype) ...
_OPENED: dict[tuple[str, _Stamp, _Beside, int | None, str], TokenFile] = {}
#: ... and by (path, its stamp, what beside it): the last one opened (a reader whose storage
#: indexed no such file: neither ``_INDEXED`` nor ``Storage.tokens`` say how).
_LAST: dict[tuple[str, _Stamp, _Beside], TokenFile] = {}


class IndexedAs(NamedTuple):
    """How a corpus indexed one token file: what its storage carries where the file's ends do
    not travel (``Storage.tokens``). A process the corpus is pickled to (spawned, a Ray task)
    did not inherit the ends (``indexed``) and is not sent them (tens of MB for a large
    corpus): it indexes the file again this way, once, as the corpus did (``index.tokens``),
    never with a reader's defaults (the tokenizer's end-of-text id, uint16), which would refuse
    a file of its own eot or read a signed dtype's ids as others."""

    eot: int | None
    """The end-of-text id its documents were cut at (a file without an index)."""
    dtype: str
    """The ids' type it was read as (an index of Megatron's gives its own)."""
    digest: str = ""
    """A remote file's: a hash of its index as fetched (``X.idx``, ``X.ds.index``; a local
    one is checked by its identity), which the index fetched again must have."""
    tokenizer: Vocabulary | None = None
    """A remote file's: what its run's ``meta.json`` recorded then (taken as it was, not
    fetched again)."""


class Placed(Protocol):
    """What a corpus reads with (``source.Storage``, one per corpus): where its URLs are read
    from (``place``: an endpoint…)."""

    place: str


#: Each corpus's token files as it indexed them (their ends, read with its eot and dtype), by
#: the storage it reads with (``indexed``; ``Corpus.open_tokens`` makes one per corpus), then
#: by path or URL: forked workers inherit them. Two corpora of one file (another cut once its
#: index changed, another eot) keep their own, and let them go with their storage.
_INDEXED: weakref.WeakKeyDictionary[Placed, dict[str, TokenFile]] = weakref.WeakKeyDictionary()
#: Remote files' (``remember``), by URL, then by place: what ``opened`` without a storage
#: finds (the same URL on two endpoints is two files).
_REMOTE: dict[str, dict[str, TokenFile]] = {}


def _ids(
    f: BinaryIO, name: str, dtype: np.dtype, offset: int = 0
) -> np.ndarray:
    """The ids of the open token file ``f`` (named ``name``) past ``offset``, memory-mapped."""
    size = os.fstat(f.fileno()).st_size - offset
    if size % dtype.itemsize:
        raise damaged(name, f"{size} bytes of ids, not a whole number of {dtype} ids")
    if size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(f, dtype=dtype, mode="r", offset=offset)


def _index(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of the index beside a token file, None if there is none."""
    try:
        return local_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # (a FIFO, a folder: never read as no index)
        if exc.errno in SHORTAGES:  # (the machine's, not the file's: its reader says so)
            raise
        raise damaged(path, f"cannot read it: {exc.strerror}") from None


def open_token_file(
    path: str | os.PathLike[str], *, eot: int | None = None, dtype: str = "uint16"
) -> TokenFile:
    """Open one token file of any of the four formats as a memory map and its documents.

    The format is the file's: ``X.ds`` is datatrove's (``X.ds.index`` beside it); a file
    that starts with llm.c's magic is a shard; ``X.bin`` with ``X.idx`` beside it is
    megatron's (the idx gives the dtype); any other ``X.bin`` is nanoGPT's, of ``dtype``.

    Args:
        path: The file of ids.
        eot: The end-of-text id, for the formats whose boundaries are end-of-text
            (nanoGPT without an idx, llm.c).
        dtype: A nanoGPT file's and a datatrove ``.ds``'s id type.

    Raises:
        OSError: the file cannot be opened, or is not a regular file (a FIFO, a device).
        TokenFileError: a damaged header or index (one that is not a regular file too), or ids
            that do not fit it.
        ValueError: boundaries needed from end-of-text and no ``eot`` given, or an ``eot``
            the ids' dtype cannot hold; a ``dtype`` not of integers.
    """
    if np.dtype(dtype).kind not in "iu":
        raise ValueError(f"token ids are integers: dtype {dtype!r} is not")
    name = os.fspath(path)
    with os.fdopen(open_regular(name), "rb") as f:  # (a FIFO's read would wait forever)
        return _open(f, name, eot, np.dtype(dtype).newbyteorder("<"))


def _open(f: BinaryIO, name: str, eot: int | None, dtype: np.dtype) -> TokenFile:
    """``open_token_file`` of the open file ``f``: its ids memory-mapped, their ends read,
    checked against its run's records (``check_run_record``)."""
    run = run_beside(name)  # (its meta.json read once: the tokenizer, the files, the counts)
    found = _ends(f, name, eot, dtype, None if run is None else run.config)
    check_run_record(run, name, os.fstat(f.fileno()).st_size, len(found.ends))
    return found


def _ends(f: BinaryIO, name: str, eot: int | None, dtype: np.dtype,
          tokenizer: Vocabulary | None) -> TokenFile:  # fmt: skip
    if name.endswith(".ds"):
        index = _index(name + ".index")
        if index is None:
            raise damaged(name, f"a datatrove .ds is read with {os.path.basename(name)}.index "
                          "beside it: it is missing")  # fmt: skip
        ids = _ids(f, name, dtype)
        return TokenFile(name, ids, read_datatrove_index(name + ".index", len(ids), index),
                         tokenizer)  # fmt: skip
    head = f.read(LLMC_HEADER_BYTES)
    if (len(head) >= 4 and struct.unpack("<i", head[:4])[0] == LLMC_MAGIC) or _damaged_llmc(
        head, os.fstat(f.fileno()).st_size
    ):
        tokens = read_llmc_header(name)  # a damaged magic is said there, naming the file
        ids = _ids(f, name, np.dtype("<u2"), LLMC_HEADER_BYTES)
        ends = _eot_ends_of(ids, eot, name, tokens, f.fileno(), LLMC_HEADER_BYTES)
        return TokenFile(name, ids, ends, tokenizer)
    idx = Path(name).with_suffix(".idx")
    body = _index(idx)
    if body is not None:
        idx_dtype, ends = read_megatron_index(idx, body)
        ids = _ids(f, name, idx_dtype)
        want = int(ends[-1]) if ends.size else 0
        if want != len(ids):
            raise damaged(name, f"{len(ids)} ids, not the {want} of its {idx.name}")
        return TokenFile(name, ids, ends, tokenizer)
    ids = _ids(f, name, dtype)
    return TokenFile(name, ids, _eot_ends_of(ids, eot, name, len(ids), f.fileno()), tokenizer)


def _damaged_llmc(head: bytes, size: int) -> bool:
    """Whether a header whose magic is not llm.c's is otherwise one: the rest of its 256
    int32s are llm.c's (a version, a count the file's size holds, then zeros). Read as a bare
    ``train.bin``, its header would become 512 ids, some past any vocabulary."""
    if len(head) < LLMC_HEADER_BYTES:
        return False
    words = np.frombuffer(head, dtype="<i4")
    fits = int(words[2]) >= 0 and size == LLMC_HEADER_BYTES + 2 * int(words[2])
    return not words[3:].any() and (fits or int(words[1]) == LLMC_VERSION)


def _eot_ends_of(ids: np.ndarray, eot: int | None, name: str, tokens: int, fd: int,
                 offset: int = 0) -> np.ndarray:  # fmt: skip
    if eot is None:
        raise ValueError(f"{name}: its documents end at end-of-text: give eot=")
    if tokens != len(ids):
        raise damaged(name, f"{len(ids)} ids, not the {tokens} its header announces")
    return eot_ends(ids, eot, name, fd, offset)  # (read, not through the map: a cut is said)


def opened(
    path: str | os.PathLike[str],
    *,
    eot: int | None = None,
    dtype: str | None = None,
    storage: Placed | None = None,
) -> TokenFile:
    """The token file ``path`` as the corpus reading with ``storage`` indexed it (``indexed``:
    its ends, its eot and dtype), when ``dtype`` is not given: a worker's read, its file and
    the files beside it checked unchanged by the reader (``engine.tokens``). Else (no
    storage, a dtype, or a storage that indexed no such file here: a process it was pickled to
    indexes it again as ``Storage.tokens`` says, ``index.tokens``) ``open_token_file``, once
    per process for a file as it is now (the size and mtime of it, of its index, ``X.idx`` or
    ``X.ds.index``, and of the ``meta.json`` beside it: a changed or damaged index is read
    again) and as it is read (``eot`` and ``dtype``); without a ``dtype``, as it was last
    opened (else as ``uint16``). A URL's are those ``remember`` kept for it as read from
    ``storage`` (None: the one place this process read it from).

    Raises:
        OSError: the file is gone, or is no longer a regular file (a FIFO put in its place
            would wait for a writer forever).
        TokenFileError: a URL whose index this process did not read (from ``storage``), or,
            without ``storage``, read from several places.
    """
    name = os.fspath(path)
    if "://" in name:  # a URL: its ends were fetched when its corpus was opened (``remember``)
        return _remembered(name, storage)
    if storage is not None and dtype is None:
        known = kept(name, storage)
        if known is not None:
            return known
    # (a FIFO or device put in the file's place since the open: another stamp, so never one
    # opened before; ``open_token_file`` refuses it)
    now = (name, _stamp(os.stat(name)), _beside(name))
    if dtype is None and now in _LAST:
        return _LAST[now]
    dtype = dtype or "uint16"
    key = (*now, eot, np.dtype(dtype).str)
    known = _OPENED.get(key)
    if known is None:
        known = _OPENED[key] = open_token_file(name, eot=eot, dtype=dtype)
    _LAST[now] = known
    return known


def companions(path: str) -> tuple[str, str]:
    """The files ``open_token_file`` reads beside the local token file ``path``: its index
    (``X.idx``; ``X.ds.index`` for ``X.ds``), there or not, and its folder's ``meta.json``."""
    index = path + ".index" if path.endswith(".ds") else str(Path(path).with_suffix(".idx"))
    return index, os.path.join(os.path.dirname(path), "meta.json")


def _beside(name: str) -> _Beside:
    """The size, mtime and inode of each file ``open_token_file`` may read beside ``name``
    (``companions``), None for one that is not there."""
    stamps: list[_Stamp | None] = []
    for path in companions(name):
        try:
            stat = os.stat(path)
        except OSError:  # (absent, or unreadable: then the open says so)
            stamps.append(None)
            continue
        stamps.append(_stamp(stat))
    return tuple(stamps)


def _stamp(stat: os.stat_result) -> _Stamp:
    return stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_dev


def indexed(path: str, token_file: TokenFile, storage: Placed) -> None:
    """Keep ``token_file`` as the corpus reading with ``storage`` indexed ``path`` (a local
    path, or a URL's alias): ``opened`` with that storage hands it out, in this process and
    the workers it forks, whatever was opened of the same file since."""
    _INDEXED.setdefault(storage, {})[path] = token_file


def kept(path: str, storage: Placed) -> TokenFile | None:
    """What ``indexed`` kept of ``path`` for the corpus reading with ``storage``, in this
    process or the one it was forked from; None: nothing (a storage pickled to this process)."""
    return _INDEXED.get(storage, {}).get(path)


def remember(url: str, token_file: TokenFile, storage: Placed) -> None:
    """Keep a remote token file's ends (its index fetched) as read from ``storage``, for
    ``opened`` in this process and the workers it forks (``indexed``)."""
    indexed(url, token_file, storage)
    places = _REMOTE.setdefault(url, {})
    places.pop(storage.place, None)  # the last one remembered, last
    places[storage.place] = token_file


def _remembered(url: str, storage: Placed | None) -> TokenFile:
    """What ``remember`` kept of ``url`` as read from ``storage`` (None: from its one place)."""
    if storage is not None:
        found = kept(url, storage)
    elif len(places := _REMOTE.get(url, {})) > 1:
        raise damaged(url, "read from several endpoints in this process: which one is meant "
                           "is not said (the same URL there may be another file)")  # fmt: skip
    else:  # its last version read
        found = next(reversed(places.values()), None)
    if found is None:
        raise damaged(url, "a remote token file's index was not read in this process")
    return found
