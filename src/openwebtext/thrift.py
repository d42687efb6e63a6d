"""Thrift's compact protocol, read: the encoding of parquet's metadata (a footer's
``FileMetaData``, a page's ``PageHeader``), so that the package judges what a file says before
pyarrow reads it (``index.parquet``: an encrypted file, which pyarrow's metadata accessors
abort the process on; ``engine.pages``: what a column chunk's pages decompress to).

A struct is read as a dict of its fields by id, whatever parquet's schema calls them: ints,
bools, bytes (a binary or a string), floats, structs (dicts) and lists (a set too); a map is
skipped (None: parquet's metadata has none).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = ["Shape", "read_struct"]

#: The fields of a struct to read, by id: each with the shape of its own struct, or of its
#: list's structs (None: the whole value).
Shape: TypeAlias = Mapping[int, "Shape | None"]

#: How deep structs and lists may nest (parquet's metadata nests under ten deep): a deeper
#: one is damaged, and would otherwise recurse as deep as its bytes say.
_DEEPEST = 16


def read_struct(buf: bytes, at: int = 0, shape: Shape | None = None) -> tuple[dict[int, Any], int]:
    """The Thrift compact struct at byte ``at`` of ``buf``: its fields by id, and where it ends.

    ``shape``, if given, names the fields to read, each with the shape of its own struct (or
    of its list's structs), or None for the whole value: the others are walked past, never
    built (a footer's statistics, say, when only whether its chunks are encrypted is wanted).

    Raises:
        IndexError: the struct is cut short (``buf`` ends inside it).
        ValueError: a type no Thrift value has, or values nested past ``_DEEPEST``.
    """
    return _struct(buf, at, 0, shape, True)


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while buf[at] & 0x80:
        value, shift, at = value | (buf[at] & 0x7F) << shift, shift + 7, at + 1
    return value | buf[at] << shift, at + 1


def _struct(
    buf: bytes, at: int, depth: int, shape: Shape | None, keep: bool
) -> tuple[dict[int, Any], int]:
    """A struct's fields (those of ``shape``; none if not ``keep``), and where it ends."""
    fields: dict[int, Any] = {}
    field = 0
    while True:
        byte, at = buf[at], at + 1
        if byte == 0:
            return fields, at
        if byte >> 4:  # (the id as a delta from the field before)
            field += byte >> 4
        else:
            zigzag, at = _varint(buf, at)
            field = (zigzag >> 1) ^ -(zigzag & 1)
        wanted = keep and (shape is None or field in shape)
        inner = shape.get(field) if shape is not None else None
        value, at = _value(buf, at, byte & 0x0F, depth, inner, wanted)
        if wanted:
            fields[field] = value


def _value(
    buf: bytes, at: int, kind: int, depth: int, shape: Shape | None, keep: bool
) -> tuple[Any, int]:
    """The Thrift compact value of type ``kind`` at ``at`` (None if not ``keep``), and where
    it ends."""
    if depth > _DEEPEST:
        raise ValueError("values nested too deep")
    if kind in (1, 2):  # a bool field: its value is its type
        return kind == 1, at
    if kind == 3:
        return buf[at], at + 1
    if kind in (4, 5, 6):
        zigzag, at = _varint(buf, at)
        return (zigzag >> 1) ^ -(zigzag & 1), at
    if kind in (7, 8):  # a double; a binary, its length first
        length, at = (8, at) if kind == 7 else _varint(buf, at)
        if at + length > len(buf):
            raise IndexError  # (a list of them would otherwise walk past the end forever)
        if not keep:
            return None, at + length
        data = buf[at : at + length]
        return (struct.unpack("<d", data)[0] if kind == 7 else data), at + length
    if kind in (9, 10):  # a list or a set (a bool in one is a byte)
        count, element, at = buf[at] >> 4, buf[at] & 0x0F, at + 1
        if count == 15:
            count, at = _varint(buf, at)
        element = 3 if element in (1, 2) else element
        values = []
        for _ in range(count):  # (each value is a byte at least: ``buf`` bounds the count)
            value, at = _value(buf, at, element, depth + 1, shape, keep)
            if keep:
                values.append(value)
        return (values if keep else None), at
    if kind == 11:  # a map: walked past
        count, at = _varint(buf, at)
        kinds = [3 if k in (1, 2) else k for k in (buf[at] >> 4, buf[at] & 0x0F)] if count else []
        at += 1 if count else 0
        for _ in range(count):
            for each in kinds:
                _, at = _value(buf, at, each, depth + 1, None, False)
        return None, at
    if kind == 12:
        return _struct(buf, at, depth + 1, shape, keep)
    raise ValueError(f"Thrift type {kind}")
