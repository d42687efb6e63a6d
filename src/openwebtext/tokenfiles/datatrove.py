"""datatrove's tokenized files: ``NAME.ds`` (the ids) and ``NAME.ds.index`` (uint64 ends)."""

from __future__ import annotations

import os

import numpy as np

from openwebtext.tokenfiles.common import damaged, local_bytes

__all__ = ["datatrove_index", "read_datatrove_index"]


def datatrove_index(ends: np.ndarray) -> bytes:
    """A datatrove ``.ds.index``: each document's end, in ids, as uint64."""
    return np.asarray(ends, dtype="<u8").tobytes()


def read_datatrove_index(
    path: str | os.PathLike[str], tokens: int, body: bytes | None = None
) -> np.ndarray:
    """The document ends of a ``.ds.index`` (its ``body`` if given) for a ``.ds`` of
    ``tokens`` ids, checked.

    Raises:
        TokenFileError: a size not a multiple of 8, ends that go back or do not reach
            ``tokens``.
    """
    data = np.frombuffer(local_bytes(path) if body is None else body, np.uint8)
    if data.size % 8:
        raise damaged(path, f"{data.size} bytes, not a whole number of uint64 document ends")
    ends = data.view("<u8").astype(np.int64)
    last = int(ends[-1]) if ends.size else 0
    if (ends < 0).any() or (np.diff(ends) < 0).any() or last != tokens:
        raise damaged(path, f"document ends do not rise to the {tokens} ids of its .ds")
    return ends
