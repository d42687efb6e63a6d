"""The token files other trainers read: their layouts, built and parsed in one place.

Every format holds the same ids: each document's ids, then the end-of-text id, laid end to
end (nanoGPT's ``train.bin``). What differs is where the document boundaries are kept:

- ``nanogpt``: ``NAME.bin``, the ids alone (uint16 for GPT-2). Boundaries: every
  end-of-text id (the tokenizers encode a special token's text as text, so it is nowhere
  else), or a Megatron ``NAME.idx`` beside it.
- ``megatron``: the same ``NAME.bin`` and ``NAME.idx``, megatron-core's ``IndexedDataset``
  index: ``MMIDIDX\\x00\\x00``, uint64 version 1, uint8 dtype code, uint64 sequence count,
  uint64 document count (sequences + 1), int32 sizes, int64 byte pointers, int64 document
  indices (one sequence per document here). uint32 ids are written under code 4 (int32): the
  same bytes for every id below 2**31, and megatron-core has no uint32.
- ``llmc``: llm.c / modded-nanogpt shards ``NAME_000000.bin`` …: a 256-int32 header (magic
  20240520, version 1, token count), then the uint16 ids. Each shard holds whole documents,
  at most ``LLMC_SHARD_TOKENS`` ids unless one document is longer. Boundaries: end-of-text.
- ``datatrove``: ``NAME.ds``, the ids (2 or 4 bytes each), and ``NAME.ds.index``, each
  document's end in ids as uint64, datatrove's ``DatatroveFileDataset`` layout.

Document boundaries are ``ends``: an int64 array, the id count up to and including each
document. A damaged header, index or size is one :class:`TokenFileError` naming the file.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from openwebtext.errors import CorpusError

__all__ = [
    "FORMATS",
    "LLMC_HEADER_BYTES",
    "LLMC_MAGIC",
    "LLMC_SHARD_TOKENS",
    "LLMC_VERSION",
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "TokenFile",
    "TokenFileError",
    "TokenFormat",
    "datatrove_index",
    "eot_ends",
    "llmc_cuts",
    "llmc_header",
    "megatron_code",
    "megatron_index",
    "open_token_file",
    "read_datatrove_index",
    "read_llmc_header",
    "read_megatron_index",
]

FORMATS = ("nanogpt", "megatron", "llmc", "datatrove")
TokenFormat = Literal["nanogpt", "megatron", "llmc", "datatrove"]

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
_MEGATRON_HEAD = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, documents
#: megatron-core's ``DType`` codes.
MEGATRON_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("u1"),
    2: np.dtype("i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f8"),
    7: np.dtype("<f4"),
    8: np.dtype("<u2"),
}

LLMC_MAGIC = 20240520
LLMC_VERSION = 1
LLMC_HEADER_BYTES = 256 * 4
LLMC_SHARD_TOKENS = 10**8

#: Ids scanned at a time for end-of-text (bounds the memory of a scan: 2 bytes each).
_SCAN = 1 << 26


class TokenFileError(CorpusError):
    """A token file whose header, index or size is not its format's (``path`` names it)."""


class TokenFile(NamedTuple):
    """One file of ids and its documents: document ``i`` is ``ids[ends[i-1]:ends[i]]``."""

    path: str
    ids: np.ndarray
    ends: np.ndarray


def _fail(path: str | os.PathLike[str], why: str) -> TokenFileError:
    return TokenFileError(f"{os.fspath(path)}: {why}", os.fspath(path))


def megatron_code(dtype: np.dtype) -> int:
    """The megatron-core dtype code ids of ``dtype`` are written under (uint32 as int32)."""
    dtype = np.dtype(dtype)
    if dtype == np.dtype("<u4"):
        return 4
    for code, known in MEGATRON_DTYPES.items():
        if known == dtype:
            return code
    raise ValueError(f"megatron-core has no dtype code for {dtype}")


def megatron_index(ends: np.ndarray, dtype: np.dtype) -> bytes:
    """The ``.idx`` of one sequence per document ending at ``ends`` (ids of ``dtype``)."""
    ends = np.asarray(ends, dtype=np.int64)
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    sizes = ends - starts
    if sizes.size and int(sizes.max()) >= 2**31:
        raise ValueError("a document of 2**31 ids or more does not fit megatron's int32 sizes")
    n = len(ends)
    head = _MEGATRON_HEAD.pack(MEGATRON_MAGIC, 1, megatron_code(dtype), n, n + 1)
    pointers = starts * np.dtype(dtype).itemsize
    documents = np.arange(n + 1, dtype=np.int64)
    return b"".join(
        [head, sizes.astype("<i4").tobytes(), pointers.astype("<i8").tobytes(), documents.tobytes()]
    )


def read_megatron_index(path: str | os.PathLike[str]) -> tuple[np.dtype, np.ndarray]:
    """The ids' dtype and the document ends (in ids) of a megatron ``.idx``, checked whole.

    Raises:
        TokenFileError: not a version-1 index, a count its size does not hold, pointers or
            document indices that do not follow from the sizes.
    """
    data = np.fromfile(path, dtype=np.uint8)
    if data.size < _MEGATRON_HEAD.size:
        raise _fail(path, f"{data.size} bytes, shorter than a megatron index header")
    magic, version, code, sequences, documents = _MEGATRON_HEAD.unpack(
        bytes(data[: _MEGATRON_HEAD.size])
    )
    if magic != MEGATRON_MAGIC:
        raise _fail(path, f"not a megatron index (magic {magic!r}, not {MEGATRON_MAGIC!r})")
    if version != 1:
        raise _fail(path, f"megatron index version {version}, not 1")
    if code not in MEGATRON_DTYPES:
        raise _fail(path, f"unknown megatron dtype code {code}")
    want = _MEGATRON_HEAD.size + 12 * sequences + 8 * documents
    if data.size != want or documents < 1:
        raise _fail(
            path,
            f"{data.size} bytes, not the {want} of {sequences} sequences and {documents} "
            "document indices",
        )
    at = _MEGATRON_HEAD.size
    sizes = data[at : at + 4 * sequences].view("<i4").astype(np.int64)
    at += 4 * sequences
    pointers = data[at : at + 8 * sequences].view("<i8")
    indices = data[at + 8 * sequences :].view("<i8")
    dtype = MEGATRON_DTYPES[code]
    cumulative = np.concatenate([[0], np.cumsum(sizes)])
    if (sizes < 0).any() or not np.array_equal(pointers, cumulative[:-1] * dtype.itemsize):
        raise _fail(path, "sequence pointers do not follow from the sequence sizes")
    if indices[0] != 0 or indices[-1] != sequences or (np.diff(indices) < 0).any():
        raise _fail(path, f"document indices do not run from 0 to {sequences} in order")
    return dtype, cumulative[indices[1:]]


def llmc_header(tokens: int) -> bytes:
    """The 256-int32 header of an llm.c shard of ``tokens`` uint16 ids."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (LLMC_MAGIC, LLMC_VERSION, tokens)
    return header.tobytes()


def read_llmc_header(path: str | os.PathLike[str]) -> int:
    """The token count of an llm.c shard, its header and size checked.

    Raises:
        TokenFileError: a wrong magic or version, or a count the file's size does not hold.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = np.frombuffer(f.read(LLMC_HEADER_BYTES), dtype="<i4")
    if head.size < 256:
        raise _fail(path, f"{size} bytes, shorter than an llm.c header ({LLMC_HEADER_BYTES})")
    if head[0] != LLMC_MAGIC:
        raise _fail(path, f"not an llm.c shard (magic {head[0]}, not {LLMC_MAGIC})")
    if head[1] != LLMC_VERSION:
        raise _fail(path, f"llm.c shard version {head[1]}, not {LLMC_VERSION} (uint16 ids)")
    tokens = int(head[2])
    if tokens < 0 or size != LLMC_HEADER_BYTES + 2 * tokens:
        raise _fail(path, f"{size} bytes, not the header and {tokens} uint16 ids it announces")
    return tokens


def llmc_cuts(ends: np.ndarray, shard_tokens: int = LLMC_SHARD_TOKENS) -> list[tuple[int, int]]:
    """The documents ``[first, stop)`` of each shard: whole documents, at most
    ``shard_tokens`` ids a shard unless one document alone is longer; one empty shard for
    no documents (a trainer then finds an empty file, not none)."""
    cuts: list[tuple[int, int]] = []
    first, base, n = 0, 0, len(ends)
    while first < n:
        stop = int(np.searchsorted(ends, base + shard_tokens, side="right"))
        stop = max(stop, first + 1)
        cuts.append((first, stop))
        base, first = int(ends[stop - 1]), stop
    return cuts or [(0, 0)]


def datatrove_index(ends: np.ndarray) -> bytes:
    """A datatrove ``.ds.index``: each document's end, in ids, as uint64."""
    return np.asarray(ends, dtype="<u8").tobytes()


def read_datatrove_index(path: str | os.PathLike[str], tokens: int) -> np.ndarray:
    """The document ends of a ``.ds.index`` for a ``.ds`` of ``tokens`` ids, checked.

    Raises:
        TokenFileError: a size not a multiple of 8, ends that go back or do not reach
            ``tokens``.
    """
    data = np.fromfile(path, dtype=np.uint8)
    if data.size % 8:
        raise _fail(path, f"{data.size} bytes, not a whole number of uint64 document ends")
    ends = data.view("<u8").astype(np.int64)
    last = int(ends[-1]) if ends.size else 0
    if (ends < 0).any() or (np.diff(ends) < 0).any() or last != tokens:
        raise _fail(path, f"document ends do not rise to the {tokens} ids of its .ds")
    return ends


def eot_ends(ids: np.ndarray, eot: int, path: str | os.PathLike[str]) -> np.ndarray:
    """The document ends of ``ids`` laid out as ``doc, eot, doc, eot, …`` (scanned in chunks).

    Raises:
        TokenFileError: the ids do not end with ``eot`` (a cut file, or another layout).
    """
    found = [
        np.flatnonzero(ids[at : at + _SCAN] == eot) + (at + 1) for at in range(0, len(ids), _SCAN)
    ]
    ends = np.concatenate(found).astype(np.int64) if found else np.zeros(0, np.int64)
    if len(ids) and (not ends.size or ends[-1] != len(ids)):
        raise _fail(path, f"its {len(ids)} ids do not end with the end-of-text id {eot}")
    return ends


def _ids(path: str | os.PathLike[str], dtype: np.dtype, offset: int = 0) -> np.ndarray:
    size = os.path.getsize(path) - offset
    if size % dtype.itemsize:
        raise _fail(path, f"{size} bytes of ids, not a whole number of {dtype} ids")
    if size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset)


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
        TokenFileError: a damaged header or index, or ids that do not fit it.
        ValueError: boundaries needed from end-of-text and no ``eot`` given.
    """
    name = os.fspath(path)
    if name.endswith(".ds"):
        ids = _ids(name, np.dtype(dtype).newbyteorder("<"))
        return TokenFile(name, ids, read_datatrove_index(name + ".index", len(ids)))
    with open(name, "rb") as f:
        magic = f.read(4)
    if len(magic) == 4 and struct.unpack("<i", magic)[0] == LLMC_MAGIC:
        tokens = read_llmc_header(name)
        ids = _ids(name, np.dtype("<u2"), LLMC_HEADER_BYTES)
        return TokenFile(name, ids, _eot_ends_of(ids, eot, name, tokens))
    idx = Path(name).with_suffix(".idx")
    if idx.is_file():
        idx_dtype, ends = read_megatron_index(idx)
        ids = _ids(name, idx_dtype)
        if (ends[-1] if ends.size else 0) != len(ids):
            raise _fail(name, f"{len(ids)} ids, not the {ends[-1] if ends.size else 0} of {idx}")
        return TokenFile(name, ids, ends)
    ids = _ids(name, np.dtype(dtype).newbyteorder("<"))
    return TokenFile(name, ids, _eot_ends_of(ids, eot, name, len(ids)))


def _eot_ends_of(ids: np.ndarray, eot: int | None, name: str, tokens: int) -> np.ndarray:
    if eot is None:
        raise ValueError(f"{name}: its documents end at end-of-text: give eot=")
    if tokens != len(ids):
        raise _fail(name, f"{len(ids)} ids, not the {tokens} its header announces")
    return eot_ends(ids, eot, name)
