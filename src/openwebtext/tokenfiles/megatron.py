"""megatron-core's indexed dataset: the ``.idx`` beside a ``.bin`` of ids."""

from __future__ import annotations

import os
import struct

import numpy as np

from openwebtext.tokenfiles.common import damaged, local_bytes

__all__ = [
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "megatron_code",
    "megatron_index",
    "read_megatron_index",
]

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
_MEGATRON_HEAD = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, documents
#: megatron-core's ``DType`` codes (a file of its float ones is refused: ids are integers).
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


def megatron_code(dtype: np.dtype) -> int:
    """The megatron-core dtype code ids of ``dtype`` are written under (uint32 as int32)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu":
        raise ValueError(f"token ids are integers, not {dtype}")
    if dtype == np.dtype("<u4"):
        return 4
    for code, known in MEGATRON_DTYPES.items():
        if known == dtype:
            return code
    raise ValueError(f"megatron-core has no dtype code for {dtype}")


def megatron_index(ends: np.ndarray, dtype: np.dtype) -> bytes:
    """The ``.idx`` of one sequence per document ending at ``ends`` (ids of ``dtype``):
    megatron-core's ``IndexedDatasetBuilder``'s, a pointer per sequence (none for none)."""
    ends = np.asarray(ends, dtype=np.int64)
    starts = np.concatenate([np.zeros(1, np.int64), ends])[:-1]
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


def read_megatron_index(
    path: str | os.PathLike[str], body: bytes | None = None
) -> tuple[np.dtype, np.ndarray]:
    """The ids' dtype and the document ends (in ids) of a megatron ``.idx`` (its ``body``
    if given: a remote one, fetched), checked whole.

    Raises:
        TokenFileError: not a version-1 index, a dtype not of integers (megatron-core's
            float codes), a count its size does not hold, pointers or document indices that
            do not follow from the sizes.
    """
    data = np.frombuffer(local_bytes(path) if body is None else body, np.uint8)
    if data.size < _MEGATRON_HEAD.size:
        raise damaged(path, f"{data.size} bytes, shorter than a megatron index header")
    magic, version, code, sequences, documents = _MEGATRON_HEAD.unpack(
        bytes(data[: _MEGATRON_HEAD.size])
    )
    if magic != MEGATRON_MAGIC:
        raise damaged(path, f"not a megatron index (magic {magic!r}, not {MEGATRON_MAGIC!r})")
    if version != 1:
        raise damaged(path, f"megatron index version {version}, not 1")
    if code not in MEGATRON_DTYPES:
        raise damaged(path, f"unknown megatron dtype code {code}")
    dtype = MEGATRON_DTYPES[code]
    if dtype.kind not in "iu":  # megatron-core's float codes: no token ids
        raise damaged(path, f"megatron dtype code {code} is {dtype}: token ids are integers")
    want = _MEGATRON_HEAD.size + 12 * sequences + 8 * documents
    if documents < 1:  # (its first document index, 0, is always there)
        raise damaged(path, "0 document indices: a megatron index holds one at least (0)")
    if data.size != want:
        raise damaged(
            path,
            f"{data.size} bytes, not the {want} of {sequences} sequences and {documents} "
            "document indices",
        )
    at = _MEGATRON_HEAD.size
    sizes = data[at : at + 4 * sequences].view("<i4").astype(np.int64)
    at += 4 * sequences
    pointers = data[at : at + 8 * sequences].view("<i8")
    indices = data[at + 8 * sequences :].view("<i8")
    cumulative = np.concatenate([[0], np.cumsum(sizes)])
    if (sizes < 0).any() or not np.array_equal(pointers, cumulative[:-1] * dtype.itemsize):
        raise damaged(path, "sequence pointers do not follow from the sequence sizes")
    if indices[0] != 0 or indices[-1] != sequences or (np.diff(indices) < 0).any():
        raise damaged(path, f"document indices do not run from 0 to {sequences} in order")
    return dtype, cumulative[indices[1:]]
