"""A fast walk over the headers of an in-memory tar: the documents of one member.

``tarfile`` spends ~28 µs per document building ``TarInfo`` objects; this walk
reads only what the loader needs (name, data offset, size) in ~1-2 µs, which
matters because it runs once per document in the workers
(``benchmarks/bench_tarwalk.py`` keeps the comparison). It still handles what
real tars contain: POSIX ustar prefixes, GNU long names (``L``/``K``), pax
headers (``x``/``g``, Solaris's ``X``), base-256 sizes, and verifies every header checksum.
Links, directories (V7's too: a file named with a trailing ``/``), devices and FIFOs are
skipped, and carry no data whatever their size field says; sparse files are refused; an entry
of a type tar does not define is a file under its whole name. Each is read as tarfile reads it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Entries", "TarFormatError", "walk"]

BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
_ENDS = b"\0 "  # what ends a number field that does not fill its whole width
_REGULAR = frozenset(b"07\x00")
#: Hard and symbolic links, char and block devices, directories, FIFOs: no data follows their
#: header, whatever its size field says (tarfile's rule: a writer may put a linked file's size).
_SKIPPED = frozenset(b"123456")
#: What a pax (``x``, Solaris's ``X``) or GNU (``L``, ``K``) extension header sets applies to
#: the next header that is none of these; a global header (``g``) sets nothing we read.
_EXTENSIONS = frozenset(b"LKxXg")
#: Every type read as something other than a file; any type not here nor in _REGULAR is
#: unknown, and read as a regular file, as tarfile does.
_NOT_FILES = _SKIPPED | _EXTENSIONS | frozenset(b"S")


class TarFormatError(ValueError):
    """The bytes are not a well-formed tar; the message says where and why."""


class Entries(NamedTuple):
    """The regular files of a tar, in archive order."""

    names: list[str]
    offsets: list[int]
    sizes: list[int]


def _number(field: bytes, where: int) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256
        value = int.from_bytes(field[1:], "big")
        return -value if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise TarFormatError(f"bad number {field!r} in tar header at byte {where}") from None


def _pax(data: bytes, where: int) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise TarFormatError(f"bad pax record in tar header at byte {where}") from None
        if space < 0 or length <= 0:
            raise TarFormatError(f"bad pax record in tar header at byte {where}")
        key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        records[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        pos += length
    return records


def walk(buf: bytes, partial: bool = False) -> Entries:
    """List the regular files of the tar in ``buf``.

    With ``partial`` (``buf`` is known to be cut short), the walk stops at the
    cut instead: only entries that end before it are listed, and their headers
    are still verified.

    Raises:
        TarFormatError: truncated data, a bad checksum, a bad number or an
            unsupported entry type; the message names the byte offset.
    """
    names: list[str] = []
    offsets: list[int] = []
    sizes: list[int] = []
    headers: list[int] = []
    checksums: list[int] = []
    end = len(buf)
    pos = 0
    long_name: str | None = None
    pax_name: str | None = None
    pax_size: int | None = None
    while pos + BLOCK <= end:
        if buf[pos] == 0 and buf[pos : pos + BLOCK] == _ZERO_BLOCK:
            break
        headers.append(pos)
        try:  # the common case: six octal digits, then NUL or space; anything else takes _number
            if buf[pos + 154] not in _ENDS:
                raise ValueError
            checksums.append(int(buf[pos + 148 : pos + 154], 8))
        except ValueError:
            checksums.append(_number(buf[pos + 148 : pos + 156], pos))
        kind = buf[pos + 156]
        if kind == 0 and buf[pos : pos + 100].split(b"\0", 1)[0].endswith(b"/"):
            kind = 0x35  # V7's directory: a file whose name ends with "/" (tarfile's rule)
        if pax_size is not None and kind not in _EXTENSIONS:
            size = pax_size
        else:
            try:  # eleven digits, then NUL or space (twelve digits, or base-256: _number)
                if buf[pos + 135] not in _ENDS:
                    raise ValueError
                size = int(buf[pos + 124 : pos + 135], 8)
            except ValueError:
                size = _number(buf[pos + 124 : pos + 136], pos)
        if kind in _SKIPPED and size >= 0:
            size = 0  # (no data follows, whatever the header said: tarfile's rule)
        data = pos + BLOCK
        if partial and size >= 0 and data + size > end:
            headers.pop()
            checksums.pop()
            break
        if size < 0 or data + size > end:
            raise TarFormatError(f"tar entry at byte {pos} runs past the end of the data")
        if kind in _REGULAR or kind not in _NOT_FILES:
            if pax_name is not None:
                name = pax_name
            elif long_name is not None:
                name = long_name
            else:
                raw = buf[pos : pos + 100].split(b"\0", 1)[0]
                if buf[pos + 257 : pos + 263] == b"ustar\x00" and buf[pos + 345] != 0:
                    raw = buf[pos + 345 : pos + 500].split(b"\0", 1)[0] + b"/" + raw
                name = raw.decode("utf-8", "replace")
            names.append(name)
            offsets.append(data)
            sizes.append(size)
            long_name = pax_name = pax_size = None
        elif kind == 0x4C:  # GNU long name: the data is the next entry's name
            long_name = buf[data : data + size].split(b"\0", 1)[0].decode("utf-8", "replace")
        elif kind in b"xX":  # pax extended header for the next entry
            records = _pax(buf[data : data + size], pos)
            pax_name = records.get("path", pax_name)
            if "size" in records:
                try:
                    pax_size = int(records["size"])
                except ValueError:
                    raise TarFormatError(f"bad pax size at byte {pos}") from None
        elif kind == 0x53:
            raise TarFormatError(f"sparse tar entry at byte {pos} is not supported")
        elif kind in _SKIPPED:
            long_name = pax_name = pax_size = None
        # K (long link name) and g (global pax header) change nothing we read.
        pos = data + (size + BLOCK - 1) // BLOCK * BLOCK
    else:
        if buf[pos:].strip(b"\0") and not partial:
            raise TarFormatError(f"tar header at byte {pos} is truncated")
    if not headers and end and buf.strip(b"\0") and not partial:
        raise TarFormatError("no tar header found")
    _verify_checksums(buf, headers, checksums)
    return Entries(names, offsets, sizes)


def _verify_checksums(buf: bytes, headers: list[int], stored: list[int]) -> None:
    """Check every header's checksum at once (one vectorised pass per member)."""
    if not headers:
        return
    blocks = np.frombuffer(b"".join([buf[h : h + BLOCK] for h in headers]), dtype=np.uint8)
    blocks = blocks.reshape(len(headers), BLOCK)
    field = blocks[:, 148:156].sum(axis=1, dtype=np.uint32).astype(np.int64)
    unsigned = blocks.sum(axis=1, dtype=np.uint32).astype(np.int64) - field + 8 * 0x20
    want = np.asarray(stored, dtype=np.int64)
    for i in np.nonzero(unsigned != want)[0].tolist():  # some old tars summed signed bytes
        signed = blocks[i].view(np.int8)
        if int(signed.sum()) - int(signed[148:156].sum()) + 8 * 0x20 != stored[i]:
            raise TarFormatError(f"bad tar header checksum at byte {headers[i]}")
