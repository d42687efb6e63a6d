"""Parquet files as units: one unit per row group, its bytes the text column's chunk.

A parquet file ends with its footer (Thrift ``FileMetaData``, its length, ``PAR1``): where
every row group's column chunks lie. Indexing reads only the footer (one ranged read of the
file's last ``FOOTER_GUESS`` bytes, a second one if the footer is larger) and lists, for each
row group, the byte span of the text column's chunk (dictionary page included): that span is
the unit's ``offset`` and ``size``, so the workers read it as any member, locally by
``pread`` and remotely through ``source``'s ranged reads (validators, retries, member cache).
The reader then decodes the chunk with pyarrow against the same footer (``footer_of``), which
it also uses to find which column the span is. Either parses the footer through
``parse_footer``, which refuses an encrypted file (Parquet Modular Encryption) on its Thrift,
before pyarrow's accessors abort the process on it.

A remote file's footer is kept in ``<cache folder>/parquet-footers/`` beside the remote index,
named the same way (URL and storage ``place``) and stamped with the file's size and identity,
so the workers of a second run read no footer at all; a changed file is read again.

A unit's ``member`` is ``<file>#rg<N>``; a document's name is ``<file>#<row>``, its row in the
whole file (stable however the file's row groups are read).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
from typing import Any

from openwebtext.codec import parse, read_file
from openwebtext.errors import CorpusError, OutputError, Unsupported, install_hint
from openwebtext.files import atomic_write, cache_root, open_to_read
from openwebtext.formats import PARQUET
from openwebtext.index.outer import LocalFile, Readable
from openwebtext.records import Unit
from openwebtext.source import RangeFile, Storage, is_url, placed, redact, resolve
from openwebtext.thrift import Shape, read_struct

__all__ = [
    "ENCRYPTED_MAGIC",
    "FOOTER_GUESS",
    "TEXT_COLUMN",
    "column_of",
    "footer_of",
    "parquet_units",
    "parse_footer",
    "read_footer",
    "save_footer",
]

#: The column (or JSON field) documents are read from unless told otherwise.
TEXT_COLUMN = "text"
#: Bytes read from a file's end to find its footer in one request (most footers fit).
FOOTER_GUESS = 64 << 10
_MAGIC = b"PAR1"
#: How a parquet file whose footer is encrypted begins and ends (Parquet Modular Encryption).
ENCRYPTED_MAGIC = b"PARE"

log = logging.getLogger("openwebtext")
_TEXT_TYPES = ("string", "large_string", "binary", "large_binary", "string_view")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise Unsupported(f"parquet files need pyarrow: {install_hint('parquet')}") from exc
    return pyarrow


def read_footer(f: Readable, name: str) -> bytes:
    """The footer of a parquet file (its Thrift metadata, then its length and ``PAR1``).

    Raises:
        Unsupported: a file whose footer is encrypted (it ends with ``PARE``).
        CorpusError: the file does not end as a parquet file does (truncated, or not parquet).
    """
    size = f.size
    if size < 12:
        raise CorpusError(f"not a parquet file: {size} bytes", path=name)
    guess = min(size, FOOTER_GUESS)
    tail = f.pread(guess, size - guess)
    if len(tail) == guess and tail[-4:] == ENCRYPTED_MAGIC:
        raise Unsupported(f"{_ENCRYPTED} (its footer is encrypted)", path=name)
    if len(tail) != guess or tail[-4:] != _MAGIC:
        raise CorpusError(
            "parquet file without its footer (it does not end with PAR1): truncated?", path=name
        )
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 12 > size:
        raise CorpusError(f"parquet footer of {length} bytes passes the file's size", path=name)
    if length + 8 > len(tail):
        tail = f.pread(length + 8, size - length - 8)
    return tail[-(length + 8) :]


def parse_footer(footer: bytes, name: str) -> Any:
    """The ``pyarrow.parquet.FileMetaData`` of a footer (``read_footer``), once its Thrift says
    pyarrow's accessors may read it (``_judge``): they abort the whole process (a C++
    exception thrown where Python cannot catch it) on an encrypted column chunk, and on a row
    group of more column chunks than the schema has columns. Every footer a reader or the
    index parses comes here, read from the file or from the footer cache alike.

    Raises:
        Unsupported: an encrypted file (Parquet Modular Encryption).
        CorpusError: the footer does not parse, or its row groups' chunks are not its
            schema's columns.
    """
    pa = _pyarrow()
    try:
        meta = pa.parquet.read_metadata(pa.BufferReader(footer))  # (parsed: no chunk read yet)
    except MemoryError:  # (pyarrow's ArrowMemoryError too: the machine's, not the file's)
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise CorpusError(f"parquet footer does not parse: {exc}", path=name) from exc
    _judge(footer, meta.num_columns, meta.num_row_groups, name)
    return meta


#: What ``_judge`` reads of a footer's ``FileMetaData`` (parquet.thrift's field ids): its row
#: groups (4), each one's column chunks (1) and whether each is encrypted (8:
#: crypto_metadata, 9: encrypted_column_metadata), and whether the file is (8:
#: encryption_algorithm, 9: footer_signing_key_metadata).
_JUDGED: Shape = {4: {1: {8: None, 9: None}}, 8: None, 9: None}
_ENCRYPTED = "encrypted parquet (Parquet Modular Encryption) is not read: decrypt it first"


def _judge(footer: bytes, columns: int, groups: int, name: str) -> None:
    """Refuse a footer pyarrow's metadata accessors would abort the process on, from its
    Thrift alone: one that says the file, or any of its column chunks, is encrypted, or a row
    group of other than ``columns`` chunks (``row_group(k).column(i)`` past the schema's
    columns). Its row groups and their chunks must be lists of structs, as parquet's C++ reads
    them whatever their bytes say (else this walk and pyarrow's would see other fields).

    Raises:
        Unsupported: an encrypted file.
        CorpusError: a footer this walk does not read as pyarrow did.
    """
    try:
        meta, _ = read_struct(footer, 0, _JUDGED)
    except (IndexError, ValueError) as exc:  # (pyarrow parsed it: a Thrift it reads past)
        why = str(exc) or "cut short"
        raise CorpusError(f"parquet footer does not parse: {why}", path=name) from None
    row_groups = meta.get(4)
    chunks: list[list[dict[int, Any]]] = []
    for group in row_groups if isinstance(row_groups, list) else ():
        each = group.get(1) if isinstance(group, dict) else None
        if not isinstance(each, list) or not all(isinstance(c, dict) for c in each):
            break
        chunks.append(each)
    if len(chunks) != groups:
        raise CorpusError("parquet footer is damaged: its row groups do not parse", path=name)
    if 8 in meta or 9 in meta or any(8 in each or 9 in each for c in chunks for each in c):
        raise Unsupported(_ENCRYPTED, path=name)
    k = next((k for k, c in enumerate(chunks) if len(c) != columns), None)
    if k is not None:
        raise CorpusError(f"parquet footer is damaged: row group {k} holds {len(chunks[k])} "
                          f"column chunks, not its schema's {columns}", path=name)  # fmt: skip


def column_of(meta: Any, column: str, name: str) -> int:
    """The index among ``meta``'s leaf columns of the top-level text column named exactly
    ``column``: a dotted name is a column's own name, never a path into a struct (as pyarrow's
    ``read_table(...).column(name)``).

    Raises:
        CorpusError: no such column (naming the ones there are), two of that name, one that
            is not text (a dictionary of text is text: its values are read), or a schema
            whose names do not decode.
    """
    pa = _pyarrow()
    try:
        schema = meta.schema.to_arrow_schema()
        names = schema.names
        leaves = [k for k in range(meta.num_columns) if _top_leaf(meta.schema.column(k), column)]
    except (ValueError, pa.ArrowException) as exc:  # a name not UTF-8: UnicodeDecodeError
        raise CorpusError(f"parquet schema does not parse: {exc}", path=name) from exc
    if column not in names:
        there = ", ".join(names) or "none"
        raise CorpusError(
            f"parquet file has no column {column!r} (its columns: {there}); "
            "name the text column with --text-column (Corpus.open(text_column=))",
            path=name,
        )
    if names.count(column) > 1:
        raise CorpusError(
            f"parquet file has {names.count(column)} columns named {column!r}: "
            "which one holds the text is not known",
            path=name,
        )
    kind = schema.field(names.index(column)).type
    values = kind.value_type if pa.types.is_dictionary(kind) else kind  # (a pandas category)
    if str(values) not in _TEXT_TYPES:
        raise CorpusError(f"parquet column {column!r} is {kind}, not text", path=name)
    if len(leaves) != 1:  # a text column is one leaf; a schema that says else is damaged
        raise CorpusError(f"parquet column {column!r} is not one leaf column", path=name)
    return leaves[0]


def _top_leaf(leaf: Any, column: str) -> bool:
    """Whether the leaf column ``leaf`` is the top-level column ``column`` (its path, the
    dotted join of its names, is then its own name)."""
    return bool(leaf.name == column and leaf.path == column)


@functools.cache
def _decompressible(codec: str) -> bool:
    """Whether this pyarrow decompresses column chunks of ``codec`` (as a footer names it:
    ``SNAPPY``, ``LZO``…): a build without it read each row group as "corrupt"."""
    if codec == "UNCOMPRESSED":
        return True
    pa = _pyarrow()
    try:
        return bool(pa.Codec.is_available(codec.lower()))
    except (ValueError, pa.ArrowException):  # (LZO: no codec of pyarrow's at all)
        return False


def _chunk_span(chunk: Any) -> tuple[int, int]:
    """Where a column chunk's pages lie: its dictionary page (if any) then its data pages."""
    start = chunk.data_page_offset
    dictionary = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
    if dictionary:  # some writers leave 0 here with no dictionary page
        start = min(start, dictionary)
    return start, chunk.total_compressed_size


def parquet_units(f: Readable, name: str, subset: str, base: str, column: str) -> list[Unit]:
    """The units of one parquet file: one per row group, the span of ``column``'s chunk (a
    row group of no rows: a unit of 0 bytes and no document, where the one before ends; a file
    of no row group, as a writer closed before any row writes it: none).

    Raises:
        CorpusError: no footer, a footer that does not parse or whose counts of rows disagree,
            no such column, a column chunk past the file's end.
    """
    footer = read_footer(f, name)
    meta = parse_footer(footer, name)
    index = column_of(meta, column, name)
    rows = [meta.row_group(k).num_rows for k in range(meta.num_row_groups)]
    # Each row group's rows name its documents (``FILE#ROW``) and bound what is read of it:
    # counts the footer says twice must agree (a flat column holds one value per row).
    values = [meta.row_group(k).column(index).num_values if n else 0 for k, n in enumerate(rows)]
    if sum(rows) != meta.num_rows or values != rows:
        k = next((k for k, (n, v) in enumerate(zip(rows, values, strict=True)) if n != v), None)
        said = (f"row group {k} says {rows[k]} rows and {values[k]} values of {column!r}"
                if k is not None else f"its row groups hold {sum(rows)} rows, not the file's "
                f"{meta.num_rows}")  # fmt: skip
        raise CorpusError(f"parquet footer is damaged: {said}", path=name)
    units: list[Unit] = []
    for k in range(meta.num_row_groups):
        if rows[k] == 0:  # a unit of no document (writers leave such)
            at = units[-1].offset + units[-1].size if units else 4
            units.append(Unit(name, f"{base}#rg{k}", at, 0, PARQUET, subset, k))
            continue
        chunk = meta.row_group(k).column(index)
        if not _decompressible(chunk.compression):
            raise Unsupported(f"row group {k}'s column {column!r} is compressed with "
                              f"{chunk.compression}, which this pyarrow cannot decompress",
                              path=name)  # fmt: skip
        start, size = _chunk_span(chunk)
        if start < 4 or start + size > f.size - len(footer):
            raise CorpusError(
                f"row group {k}'s column {column!r} lies outside the file's data", path=name
            )
        units.append(Unit(name, f"{base}#rg{k}", start, size, PARQUET, subset, k))
    if is_url(name):
        _READ[name, threading.get_ident()] = footer  # (``save_footer``'s, on this thread)
    return units


# -- footers in the workers ----------------------------------------------------------------

#: Footers of remote files this process read or indexed (forked workers inherit them), by
#: ``_version``: the same URL on another endpoint, or in another version, is another file.
_FOOTERS: dict[tuple[str, str, int, str], bytes] = {}
#: The footer ``parquet_units`` just read of a URL on a thread, until ``save_footer`` (which
#: knows where it was read from) keeps it: indexing threads may read one URL of two endpoints.
_READ: dict[tuple[str, int], bytes] = {}


def _version(url: str, store: Storage) -> tuple[str, str, int, str] | None:
    """``url`` where ``store`` reads it from, in the version it indexed (None: not indexed)."""
    info = store.identity(url)
    return None if info is None else (url, store.place, info.size, info.identity or "")


def _footer_path(url: str, place: str) -> Any:
    key = placed(url, place)
    return cache_root() / "parquet-footers" / (hashlib.sha256(key.encode()).hexdigest()[:32])


def save_footer(url: str, storage: Storage | None) -> None:
    """Keep the footer this process read of the remote file ``url`` (if it is parquet) with
    the file's identity (a cache that cannot be written is only a slower read)."""
    footer = _READ.pop((url, threading.get_ident()), None)
    store = resolve(storage)
    info, version = store.identity(url), _version(url, store)
    if footer is None or info is None or version is None:
        return
    _FOOTERS[version] = footer
    if not info.identity:
        return
    stamp = json.dumps({"url": url, "size": info.size, "identity": info.identity,
                        "sha256": hashlib.sha256(footer).hexdigest()})  # fmt: skip
    try:
        path = _footer_path(url, store.place)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, stamp + "\n" + footer.hex())
    except (OSError, OutputError):
        pass


def _load_footer(url: str, store: Storage) -> bytes | None:
    info = store.identity(url)
    if info is None or not info.identity:
        return None
    try:
        stamp, body = read_file(_footer_path(url, store.place)).decode().split("\n", 1)
        known = parse(stamp)
        footer = bytes.fromhex(body)
    except (OSError, ValueError):
        return None
    said = {"url": url, "size": info.size, "identity": info.identity}
    if not isinstance(known, dict) or {k: known.get(k) for k in said} != said:
        return None
    if "sha256" not in known:  # (an entry of before its digest: absent, nothing said)
        return None
    if known["sha256"] != hashlib.sha256(footer).hexdigest():  # (damaged on disk: read it)
        log.warning("parquet footer cache entry of %s is damaged: read again", redact(url))
        return None
    return footer


def footer_of(path: str, storage: Storage | None) -> bytes:
    """The footer of the parquet file at ``path``, read once per process: a local file's
    end, or a remote one's from this process, the footer cache, or one ranged read.

    Raises:
        CorpusError: the file has no footer (it changed since it was indexed).
        OSError: a local file that cannot be read.
    """
    if not is_url(path):
        fd = open_to_read(path)  # (a FIFO put in its place: an error, not a wait)
        try:
            footer = read_footer(LocalFile(fd, os.fstat(fd).st_size), path)
        finally:
            os.close(fd)
        return footer  # a local file's footer is cheap: not kept (the file may change)
    store = resolve(storage)
    info, version = store.identity(path), _version(path, store)
    if info is None or version is None:
        raise CorpusError("parquet file read before it was indexed", path=path)
    found = _FOOTERS.get(version) or _load_footer(path, store)
    if found is None:
        found = read_footer(RangeFile(path, info.size, window=FOOTER_GUESS, storage=store), path)
        _READ[path, threading.get_ident()] = found
        save_footer(path, store)
    _FOOTERS[version] = found
    return found
