"""The index of remote files: walked once by range requests, then kept in the cache folder.

Listing a remote tar's members means reading every member's header, one small
request each (~1,000 per OpenWebText subset tar). Within a file the walk is a
chain (each header says where the next one is), so files are walked in
parallel, one thread each, up to ``INDEX_THREADS``, under the main process's watchdog
(``source.watched``: nothing received for a minute is an error naming the URL). The same
code as for local files (``outer.walk_outer_tar``) reads the headers, through a
``source.RangeFile``: one request brings a header and its member's first bytes.

The result (members, offsets, sizes, formats) is kept in
``<cache folder>/remote-index/`` with the file's size and identity (ETag,
generation or last-modified). Opening again costs one metadata request per
file; a file whose size or identity changed is indexed again, never misread. An entry
that does not hold together (members left out, overlapping, past the end of the file, or
rows other than those its digest was made of) is indexed again, with a warning.
It is named by the URL and the storage's ``place`` (``Storage.place``: its
options without secrets), so the same ``s3://bucket/key`` on two endpoints
has two entries, and no credential is ever written.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Annotated, NamedTuple

import msgspec

from openwebtext.codec import Count, Record, parse, read_file, whose
from openwebtext.errors import CorpusError, OutputError, StateError, UnknownFormat
from openwebtext.files import atomic_write, cache_root
from openwebtext.formats import PARQUET, TAR
from openwebtext.index.inputs import named_as_corpus_file
from openwebtext.index.jsonl import split_jsonl_kind
from openwebtext.index.outer import file_kind, walk_outer_tar
from openwebtext.index.parquet import TEXT_COLUMN, save_footer
from openwebtext.index.tables import table_units
from openwebtext.records import Unit
from openwebtext.source import (
    FileInfo,
    RangeFile,
    Storage,
    expand_url,
    file_info,
    file_name,
    placed,
    resolve,
    watched,
)

__all__ = [
    "INDEX_FORMAT",
    "Ignored",
    "IndexCache",
    "cache_path",
    "index_remote_file",
    "index_url",
]

log = logging.getLogger("openwebtext")

INDEX_FORMAT = "openwebtext-remote-index/4"  # /2: with the digest of its units; /3: names
# decoded; /4: the digest covers the subset too (a /3 entry is another version's: absent)
BLOCK = 512  # a tar header, and the unit members are padded to
INDEX_THREADS = 32  # one per file for OpenWebText's 21 subset tars


def _cache_root() -> Path:
    return cache_root() / "remote-index"


def cache_path(url: str, place: str = "", column: str = TEXT_COLUMN) -> Path:
    """Where the index of ``url`` read from ``place`` is kept (``Storage.place``; named by a
    hash: URLs may hold anything); a text ``column`` other than ``text`` is another entry."""
    key = placed(url, place) + ("" if column == TEXT_COLUMN else f"\0column={column}")
    return _cache_root() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


def index_url(
    url: str, storage: Storage | None = None, text_column: str = TEXT_COLUMN
) -> list[list[Unit] | CorpusError | Ignored]:
    """The units of every file named by ``url`` (a file, a folder or a glob), in order: per
    file, its units, or the error that says why it cannot be indexed (unreadable, in none of
    the formats, a damaged tar), for the caller's ``on_error`` to decide, file by file; a
    file of a folder or pattern that is not a corpus file by name nor by bytes (README.md,
    checksums) is ``Ignored``, as in a local folder.

    Raises:
        CorpusError: nothing there (no such file, a folder or pattern that holds none).
    """
    listed = watched(lambda _: expand_url(url, storage), [url], url)[0]
    if isinstance(listed, BaseException):
        raise listed
    infos = dict(listed or {})  # nothing listed: the caller's "no documents"
    files = list(infos)
    results = watched(
        lambda file: index_remote_file(file, storage, text_column, infos[file]), files, url,
        INDEX_THREADS,
    )  # fmt: skip
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, CorpusError):
            raise result
    store = resolve(storage)
    out: list[list[Unit] | CorpusError | Ignored] = []
    for file, result in zip(files, results, strict=True):
        if isinstance(result, CorpusError) and files != [url] and _not_corpus(file, result, store):
            out.append(Ignored(store.alias(file)))
        elif isinstance(result, (list, CorpusError)):
            out.append(result)
    return out


class Ignored(NamedTuple):
    """A file of a remote folder or pattern that is not a corpus file (a README.md)."""

    url: str


def _not_corpus(url: str, error: CorpusError, store: Storage) -> bool:
    """Whether a file listed in a remote folder (or matched by a pattern) that ``error``
    says cannot be indexed is simply not a corpus file, left out as a local folder leaves
    it: neither its name (``inputs.named_as_corpus_file``) nor its bytes (empty, or in none
    of the formats) say corpus. A file named as one is never just "not a corpus file"."""
    if named_as_corpus_file(url):
        return False
    if isinstance(error, UnknownFormat):
        return True
    info = store.identity(store.alias(url))
    return info is not None and info.size == 0


def index_remote_file(
    url: str,
    storage: Storage | None = None,
    text_column: str = TEXT_COLUMN,
    info: FileInfo | None = None,
) -> list[Unit]:
    """The units of one remote file: from the cache if it still describes the file.

    The units' path is ``storage.alias(url)``: the URL without credentials or
    query string (a signed URL's signature must not reach errors or states).
    ``storage`` (None: the process's default) is what the file is read with,
    and what it learns (alias, identity) is kept there. ``info``: its size and identity,
    where the listing just asked them (None: asked here).
    """
    storage = resolve(storage)
    name = storage.alias(url)
    info = info or file_info(url, storage)
    storage.remember(name, info)
    if storage.cache is not None and not info.identity:
        _say_cache_off(name)
    place = storage.place
    cached = _load(name, info, place, text_column)
    if cached is not None:
        return cached
    units = _walk(name, info, storage, text_column)
    _save(name, info, units, place, text_column)
    return units


_cache_off: set[str] = set()


def _say_cache_off(name: str) -> None:
    """Once per URL and process: the member cache cannot tell this file's versions apart."""
    if name in _cache_off:
        return
    _cache_off.add(name)
    log.warning(
        "%s: the member cache is off for this file: the server sends neither ETag nor "
        "Last-Modified, so a changed file could not be told from the cached one",
        name,
    )


def _walk(name: str, info: FileInfo, storage: Storage | None, text_column: str) -> list[Unit]:
    """The units of the file ``name`` (an alias: ``fetch`` reads the URL behind it, checked
    against the identity noted under it)."""
    base = file_name(name.rstrip("/"))  # (decoded: a folder page's links are quoted)
    subset = base.split(".", 1)[0]
    f = RangeFile(name, info.size, storage=storage)
    try:
        table = table_units(f, name, subset, base, text_column)
        if table is not None:
            save_footer(name, storage)  # a parquet file's, for the workers
            return table
        kind = file_kind(f, name)
        if kind != TAR:
            return [Unit(name, base, 0, info.size, kind, subset, 0)]
        units, damage = walk_outer_tar(f, name, subset, base)
        if damage is not None:  # a remote file is skipped whole: never cached half-listed
            raise damage
        return units
    finally:
        f.close()


class _Row(Record, frozen=True, array_like=True):
    """A unit as the cache lists it: ``[member, offset, size, kind, member_index]``."""

    member: str
    offset: Count
    size: Count
    kind: str
    index: Count


class IndexCache(Record, frozen=True, tag_field="format", tag=INDEX_FORMAT):
    """A remote file's cached index (``_save``), read by the one codec: the file it is of
    (its URL, the place it was read from, its size and identity), its units (at least one)
    and their digest (an entry edited since is never taken)."""

    what = "remote index cache"
    url: str
    place: str
    size: Count
    identity: str
    subset: str
    units: Annotated[tuple[_Row, ...], msgspec.Meta(min_length=1)]
    digest: str


def _load(url: str, info: FileInfo, place: str, column: str) -> list[Unit] | None:
    """The units of the cached index of ``url`` as it is now (``info``); None: none cached,
    of another file, version or identity, or wrong (said; the file is indexed again)."""
    try:
        raw = parse(read_file(cache_path(url, place, column)))
    except (OSError, ValueError):
        return None
    if whose(raw, IndexCache) == "version":  # another version's entry: not this one's
        return None
    try:
        cached = IndexCache.from_json(raw)
    except StateError as exc:
        log.warning("%s: the cached index is wrong (%s): the file is indexed again", url, exc)
        return None
    if not info.identity or (cached.url, cached.place, cached.size, cached.identity) != (
        url, place, info.size, info.identity
    ):  # fmt: skip
        return None  # another file's, or this one changed (nothing to notice it by: walk again)
    rows = cached.units
    units = [Unit(url, r.member, r.offset, r.size, r.kind, cached.subset, r.index) for r in rows]
    wrong = _inconsistent(units, info)
    if wrong is None and cached.digest != _digest(rows, cached.subset):
        wrong = "its members are not those it was written with"
    if wrong is not None:
        log.warning("%s: the cached index is wrong (%s): the file is indexed again", url, wrong)
        return None
    return units


def _inconsistent(units: list[Unit], info: FileInfo) -> str | None:
    """Why ``units`` cannot be what the walk (``outer.walk_outer_tar``) found in a file of
    ``info.size`` bytes, or None: members numbered 0, 1, 2…, each after its own header and
    after the one before, none past the end of the file but the last (a member cut short)."""
    if not _is_tar_member(units[0].kind):  # row groups' column chunks, or lines
        return _spans_inconsistent(units, info)
    if units[0].offset == 0:  # the file is one unit (a tar of documents, or no tar)
        whole = len(units) == 1 and units[0].size == info.size and units[0].member_index == 0
        return None if whole else "a unit of the whole file beside others"
    end = 0
    for k, unit in enumerate(units):
        if unit.member_index != k:
            return f"member {k} is numbered {unit.member_index} (one left out, or repeated)"
        if unit.offset < end + BLOCK:
            return f"{unit.member} overlaps the member before it, or its own header"
        if unit.offset > info.size or (k < len(units) - 1 and unit.offset + unit.size > info.size):
            return f"{unit.member} lies past the end of the file ({info.size} bytes)"
        end = unit.offset + -(-unit.size // BLOCK) * BLOCK
    return None


def _rows(units: list[Unit]) -> tuple[_Row, ...]:
    """The units as the cache lists them."""
    return tuple(_Row(u.member, u.offset, u.size, u.kind, u.member_index) for u in units)


def _digest(rows: tuple[_Row, ...], subset: str) -> str:
    """A checksum of the rows of units as written, and of their subset (every document's
    ``subset``): an entry edited since is never taken."""
    said = [subset, [msgspec.structs.astuple(row) for row in rows]]
    return hashlib.sha256(json.dumps(said, separators=(",", ":")).encode()).hexdigest()


def _save(url: str, info: FileInfo, units: list[Unit], place: str, column: str) -> None:
    """Keep the index (atomically; a cache folder that cannot be written is not an error)."""
    if not units or not info.identity:
        return
    rows = _rows(units)
    subset = units[0].subset
    record = IndexCache(url, place, info.size, info.identity, subset, rows, _digest(rows, subset))
    try:
        path = cache_path(url, place, column)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(record.to_json()))
    except (OSError, OutputError):  # a cache that cannot be written is only a slower open
        pass


def _is_tar_member(kind: str) -> bool:
    return kind != PARQUET and split_jsonl_kind(kind) is None


def _spans_inconsistent(units: list[Unit], info: FileInfo) -> str | None:
    """Why ``units`` cannot be a parquet file's row groups or a JSON lines file's chunks:
    numbered 0, 1, 2…, in order, none overlapping the one before or past the file's end."""
    end = 0
    for k, unit in enumerate(units):
        if unit.member_index != k or unit.kind != units[0].kind:
            return f"unit {k} is numbered {unit.member_index} or of another kind"
        if unit.offset < end or unit.offset + unit.size > info.size:
            return f"{unit.member} overlaps the unit before it, or lies past the file's end"
        end = unit.offset + unit.size
    return None
