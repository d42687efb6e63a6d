"""What a member's content is known by, read cheaply: the integrity checks its format keeps.

A corpus is known by more than its members' names and sizes (``Corpus.fingerprint``): a
member rewritten with other text at the same compressed size has the same names and sizes.
``member_check`` gives bytes that change whenever the member's decompressed content does:

- an xz member (OpenWebText's): the check of every block (CRC64 by default, over the
  block's uncompressed data) and every stream's index (the blocks' sizes), found from the
  stream footer at the member's end: a few small reads near its end, nothing decompressed;
- any other member (gzip, bzip2, zstd, a plain tar), an xz member without checks, or one
  whose footer or index cannot be parsed (it fails when read anyway): a hash of all its
  bytes.

Reads go through ``outer.Readable``, so a local file and a remote ``RangeFile`` are alike.
"""

from __future__ import annotations

import hashlib
import zlib

from openwebtext.formats import XZ
from openwebtext.index.outer import Readable
from openwebtext.records import Unit

__all__ = ["member_check"]

_XZ_MAGIC = b"\xfd7zXZ\x00"
_FOOTER_MAGIC = b"YZ"
_HEADER = _FOOTER = 12
#: Bytes of a block's check for each check type (the stream flags' low 4 bits).
_CHECK_SIZES = (0, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64)
_CHUNK = 1 << 20


def member_check(file: Readable, unit: Unit) -> bytes:
    """Bytes that change when ``unit``'s decompressed content changes (module docstring)."""
    if unit.kind == XZ:
        checks = _xz_checks(file, unit.offset, unit.offset + unit.size)
        if checks is not None:
            return b"xz:" + checks
    return b"blake2b:" + _whole(file, unit.offset, unit.size)


def _whole(file: Readable, offset: int, size: int) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    done = 0
    while done < size:
        data = file.pread(min(_CHUNK, size - done), offset + done)
        if not data:
            break
        h.update(data)
        done += len(data)
    return h.digest()


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def _varints(data: bytes, position: int, count: int) -> tuple[list[int], int] | None:
    """``count`` xz multibyte integers from ``position``, and the position after them."""
    values = []
    for _ in range(count):
        value = shift = 0
        while True:
            if position >= len(data) or shift > 56:
                return None
            byte = data[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        values.append(value)
    return values, position


def _index_records(index: bytes) -> list[int] | None:
    """The unpadded sizes of the blocks an xz index lists, if it is one (its CRC32 right)."""
    if len(index) < 8 or index[0] != 0 or len(index) % 4:
        return None
    if zlib.crc32(index[:-4]) != int.from_bytes(index[-4:], "little"):
        return None
    found = _varints(index, 1, 1)
    if found is None:
        return None
    (count,), position = found
    if count > len(index):  # two bytes a record at least
        return None
    records = _varints(index, position, 2 * count)
    if records is None:
        return None
    return records[0][0::2]


def _xz_checks(file: Readable, start: int, end: int) -> bytes | None:
    """Every stream's index and blocks' checks, last stream first; None if there are none
    or the member's end is not a run of xz streams."""
    parts = []
    while end > start:
        while end - 4 >= start and file.pread(4, end - 4) == b"\0\0\0\0":
            end -= 4  # stream padding
        if end - start < _HEADER + _FOOTER:
            return None
        footer = file.pread(_FOOTER, end - _FOOTER)
        if len(footer) != _FOOTER or footer[10:] != _FOOTER_MAGIC or footer[8] != 0:
            return None
        check = _CHECK_SIZES[footer[9] & 0x0F]
        index_size = (int.from_bytes(footer[4:8], "little") + 1) * 4
        index_start = end - _FOOTER - index_size
        if check == 0 or index_start < start + _HEADER:
            return None
        index = file.pread(index_size, index_start)
        blocks = _index_records(index)
        if blocks is None:
            return None
        position = index_start - sum(_pad4(size) for size in blocks)
        stream = position - _HEADER
        if stream < start or any(size < check for size in blocks):
            return None
        if stream > start and file.pread(len(_XZ_MAGIC), stream) != _XZ_MAGIC:
            return None
        parts.append(footer[8:10] + index)
        for size in blocks:
            parts.append(file.pread(check, position + size - check))
            position += _pad4(size)
        end = stream
    return b"".join(parts) if parts else None
