"""llm.c / modded-nanogpt shards: a 256-int32 header, then uint16 ids."""

from __future__ import annotations

import os

import numpy as np

from openwebtext.codec import open_regular
from openwebtext.tokenfiles.common import damaged

__all__ = [
    "LLMC_HEADER_BYTES",
    "LLMC_MAGIC",
    "LLMC_SHARD_TOKENS",
    "LLMC_VERSION",
    "llmc_cuts",
    "llmc_header",
    "read_llmc_header",
]

LLMC_MAGIC = 20240520
LLMC_VERSION = 1
LLMC_HEADER_BYTES = 256 * 4
LLMC_SHARD_TOKENS = 10**8


def llmc_header(tokens: int) -> bytes:
    """The 256-int32 header of an llm.c shard of ``tokens`` uint16 ids."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (LLMC_MAGIC, LLMC_VERSION, tokens)
    return header.tobytes()


def read_llmc_header(path: str | os.PathLike[str]) -> int:
    """The token count of an llm.c shard, its header and size checked.

    Raises:
        TokenFileError: a file shorter than the header, a wrong magic or version, or a count
            the file's size does not hold.
    """
    with os.fdopen(open_regular(path), "rb") as f:  # (a FIFO's read would wait forever)
        size, raw = os.fstat(f.fileno()).st_size, f.read(LLMC_HEADER_BYTES)
    if len(raw) < LLMC_HEADER_BYTES:  # before the parse: a cut header is not whole int32s
        raise damaged(path, f"{size} bytes, shorter than an llm.c header ({LLMC_HEADER_BYTES})")
    head = np.frombuffer(raw, dtype="<i4")
    if head[0] != LLMC_MAGIC:
        raise damaged(path, f"not an llm.c shard (magic {head[0]}, not {LLMC_MAGIC})")
    if head[1] != LLMC_VERSION:
        raise damaged(path, f"llm.c shard version {head[1]}, not {LLMC_VERSION} (uint16 ids)")
    tokens = int(head[2])
    if tokens < 0 or size != LLMC_HEADER_BYTES + 2 * tokens:
        raise damaged(path, f"{size} bytes, not the header and {tokens} uint16 ids it announces")
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
