"""Compression formats, recognised by their magic bytes, never by file names."""

from __future__ import annotations

import bz2
import lzma
import re
import zlib
from typing import Any

from openwebtext.errors import install_hint

__all__ = [
    "FORMATS",
    "MAGIC_BYTES",
    "PARQUET",
    "LimitExceeded",
    "Truncated",
    "decompress",
    "detect",
    "is_empty_tar",
    "sure_kind",
]

XZ, GZIP, BZIP2, ZSTD, TAR = "xz", "gzip", "bzip2", "zstd", "tar"
FORMATS = (XZ, GZIP, BZIP2, ZSTD, TAR)
#: A parquet file (``PAR1``): a file of row groups, never a member (``index.parquet``).
PARQUET = "parquet"

#: How many leading bytes ``detect`` needs to see.
MAGIC_BYTES = 512

_MAGIC = (
    (b"\xfd7zXZ\x00", XZ),
    (b"\x1f\x8b", GZIP),
    (b"BZh", BZIP2),
    (b"\x28\xb5\x2f\xfd", ZSTD),
    (b"PAR1", PARQUET),
)
#: bzip2's stream header ("BZh", a level) and what follows it, a block's magic or the end of
#: stream's (``sure_kind``: "BZh" alone is text a document may begin with).
_BZIP2 = re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)")


def detect(head: bytes) -> str | None:
    """Return the format of data starting with ``head``, or None if unknown: by its magic
    bytes alone, so that data damaged past them is still said as that format's (corrupt).

    ``tar`` means an uncompressed tar (ustar or GNU magic at byte 257).
    """
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if head[1:4] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50:  # a skippable frame (pzstd's)
        return ZSTD
    if len(head) >= 262 and head[257:262] == b"ustar":
        return TAR
    return None


def sure_kind(head: bytes, tail: bytes) -> str | None:
    """The format of a tar's member or document that starts with ``head`` and ends with
    ``tail``, on evidence text cannot give by chance (a document's text may begin "PAR1" or
    "BZh", or hold "ustar" at byte 257): a tar's first header must hold its checksum, bzip2's
    header its first block's magic, a parquet file its magic at both ends; None: text, no
    known format, or one damaged there (``detect`` says what its magic says)."""
    kind = detect(head)
    if (kind == TAR and not _summed(head)) or (kind == BZIP2 and not _BZIP2.match(head)):
        return None
    return None if kind == PARQUET and not tail.endswith(b"PAR1") else kind


def _summed(header: bytes) -> bool:
    """Whether the first 512 bytes are a tar header that holds its own checksum (of its
    bytes unsigned, or signed as some old tars summed them)."""
    field = header[148:156].split(b"\0", 1)[0].strip()
    if len(header) < 512 or not field or not set(field) <= set(b"01234567"):
        return False
    rest = header[:148] + b" " * 8 + header[156:512]
    total = sum(rest)
    return int(field, 8) in (total, total - 256 * sum(b > 127 for b in rest))


def is_empty_tar(head: bytes) -> bool:
    """A tar with no member is only its end-of-archive zero blocks."""
    return len(head) == MAGIC_BYTES and not head.strip(b"\0")


class LimitExceeded(Exception):
    """Decompressed output would pass the limit."""


class Truncated(EOFError):
    """The compressed data ran out before its end-of-stream marker, with no error before.

    Attributes:
        data: Everything decompressed before the data ran out (exact: only a
            decoder error would mean corruption, and there was none).
    """

    def __init__(self, message: str, data: bytes) -> None:
        super().__init__(message)
        self.data = data


def decompress(data: bytes, kind: str, limit: int) -> bytes:
    """Decompress ``data`` of format ``kind``, refusing output past ``limit`` bytes.

    Raises:
        LimitExceeded: the output is larger than ``limit`` (a bomb is stopped
            here, having allocated at most ``limit + 1`` bytes).
        Truncated: xz, gzip, bzip2 or zstd data that ends early, with what came before.
        lzma.LZMAError, zlib.error, OSError, EOFError, ValueError: corrupt or
            truncated data; the caller wraps these with the member's name.
    """
    if kind == TAR:
        if len(data) > limit:
            raise LimitExceeded
        return data
    if kind == ZSTD:
        return _zstd(data, limit)
    return _streams(data, kind, limit)


#: Input fed at a time to streams after the first, so ``unused_data`` stays small and
#: a member of many tiny streams costs linear time.
_CHUNK = 64 << 10
_NONZERO = re.compile(rb"[^\x00]")


def _streams(data: bytes, kind: str, limit: int) -> bytes:
    """Every concatenated stream of ``data`` (pbzip2, bgzip, ``cat a.xz b.xz``), one limit."""
    view = memoryview(data)
    parts: list[bytes] = []
    total = pos = 0
    first = True
    while pos < len(view):
        decomp = _decompressor(kind)
        while True:
            chunk = view[pos:] if first else view[pos : pos + _CHUNK]
            out: bytes = decomp.decompress(chunk, limit + 1 - total)
            total += len(out)
            parts.append(out)
            if total > limit or (kind == GZIP and decomp.unconsumed_tail):
                raise LimitExceeded
            if decomp.eof:
                pos += len(chunk) - len(decomp.unused_data)
                break
            pos += len(chunk)
            if pos >= len(view):
                raise Truncated(
                    "compressed data ends before the end-of-stream marker", b"".join(parts)
                )
        first = False
        # Zero padding between or after streams (xz stream padding, padded gzip) is allowed.
        nonzero = _NONZERO.search(data, pos)
        pos = nonzero.start() if nonzero else len(data)
        if pos < len(data) and detect(data[pos : pos + MAGIC_BYTES]) != kind:
            if any(magic.startswith(data[pos:]) for magic in _STARTS[kind]):  # (cut in it)
                raise Truncated("compressed data ends inside the header of its next stream",
                                b"".join(parts))  # fmt: skip
            raise ValueError(f"{len(data) - pos} bytes of trailing garbage after the {kind} data")
    return b"".join(parts)


#: How each stream of a format begins, as far as ``detect`` reads it: data cut inside these
#: bytes after a whole stream is a stream cut short, not garbage.
_STARTS = {
    XZ: [b"\xfd7zXZ\x00"],
    GZIP: [b"\x1f\x8b"],
    BZIP2: [b"BZh%d" % level + then for level in range(1, 10)
            for then in (b"1AY&SY", b"\x17rE8P\x90")],
}


def _decompressor(kind: str) -> Any:
    if kind == XZ:
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    if kind == GZIP:
        return zlib.decompressobj(wbits=31)
    if kind == BZIP2:
        return bz2.BZ2Decompressor()
    raise ValueError(f"unknown format {kind!r}")


def _zstd(data: bytes, limit: int) -> bytes:
    """Every zstd frame of ``data`` under one limit, its end checked (as ``_streams``).

    ``zstandard``'s stream reader stops quietly where the data stops, so a file cut in a
    frame would read as a short, whole one: each frame is decoded by a ``decompressobj``,
    whose ``eof`` says that frame reached its end. It has no output bound, so its input is
    fed in slices small enough that even zstd's largest ratio (a 128 KiB block from 4 bytes)
    cannot pass the limit by more than half what is left of it.
    """
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ModuleNotFoundError(
            f"zstd members need the zstandard package: {install_hint('zstd')}"
        ) from exc
    view = memoryview(data)
    parts: list[bytes] = []
    total = pos = 0
    inside = False  # a frame has begun and not yet ended
    decomp = zstandard.ZstdDecompressor().decompressobj()
    try:
        while pos < len(view):
            step = min(max((limit + 1 - total) >> 16, 1 << 10), 1 << 20)
            chunk = view[pos : pos + step]
            out: bytes = decomp.decompress(chunk)
            inside = True
            total += len(out)
            parts.append(out)
            if total > limit:
                raise LimitExceeded
            if decomp.eof:
                pos += len(chunk) - len(decomp.unused_data)
                decomp = zstandard.ZstdDecompressor().decompressobj()
                inside = False
            else:
                pos += len(chunk)
    except zstandard.ZstdError as exc:
        raise ValueError(str(exc)) from exc
    if inside:
        raise Truncated("compressed data ends before the end of its zstd frame", b"".join(parts))
    return b"".join(parts)
