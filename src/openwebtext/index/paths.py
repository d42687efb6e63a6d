"""Indexing what a corpus is opened with: every file named by paths, folders, glob patterns
or URLs, in order. The one place that chooses between local indexing (``local``, with
``inputs.find_files``) and remote indexing (``remote``), and applies ``on_error`` to the
files that cannot be indexed.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from typing import NamedTuple

from openwebtext.errors import CorpusError, one_line
from openwebtext.formats import PARQUET
from openwebtext.index.inputs import distinct_names, find_files
from openwebtext.index.jsonl import split_jsonl_kind
from openwebtext.index.local import index_file_before_damage
from openwebtext.index.parquet import TEXT_COLUMN
from openwebtext.index.remote import Ignored, index_url
from openwebtext.records import Unit
from openwebtext.source import Storage, decoded, file_name, is_url, redact, resolve

__all__ = ["Indexed", "file_key", "in_records", "index_inputs", "index_paths"]

log = logging.getLogger("openwebtext")


class Indexed(NamedTuple):
    """What ``index_inputs`` found."""

    units: list[Unit]
    skipped: list[CorpusError]
    """Files left out under ``on_error="skip"``: unreadable, not a corpus file, broken tar."""
    ignored: list[str]
    """Folder and pattern entries that are not corpus files."""


def index_inputs(
    paths: Sequence[str | os.PathLike[str]],
    *,
    on_error: str = "raise",
    storage: Storage | None = None,
    text_column: str = TEXT_COLUMN,
) -> Indexed:
    """Index every file named by ``paths`` (files, folders, globs, URLs), in order.

    Args:
        paths: What to index: local paths, or fsspec URLs (``openwebtext.index.remote``).
        on_error: ``raise``: the first bad file is an error; ``skip`` or
            ``warn``: bad files are left out and listed in ``skipped``.
        storage: What URLs are read with (None: the process's default).
        text_column: The column of parquet files, or the field of JSON lines, that holds
            each document's text.

    Raises:
        CorpusError: a bad file (under ``raise``), the same file twice, or no
            member at all.
    """
    indexed = Indexed([], [], [])
    for local, group in itertools.groupby(paths, key=lambda p: not is_url(p)):
        if local:
            _index_local(list(group), on_error, indexed, text_column, resolve(storage))
            continue
        for url in group:  # s3://, https://, hf://…: listed and indexed remotely, cached
            try:
                results = index_url(os.fspath(url), storage, text_column)
            except CorpusError as exc:  # (one that names no file: this URL's)
                named = exc if exc.path else type(exc)(exc.message, redact(os.fspath(url)))
                results = [named]
            for file in results:
                if isinstance(file, Ignored):
                    indexed.ignored.append(file.url)
                elif isinstance(file, CorpusError):
                    if on_error == "raise" or not file.skippable:
                        raise file
                    indexed.skipped.append(file)
                else:
                    indexed.units.extend(file)
    _refuse_twice(indexed.units)
    indexed.units[:] = _named_apart(indexed.units)
    units, skipped, ignored = indexed
    if not units:
        why = f" ({len(skipped)} files skipped; first: {skipped[0]})" if skipped else ""
        raise CorpusError(
            f"no documents: the corpus has no members{why}",
            path=", ".join(os.fspath(p) for p in paths),
        )
    folders = [p for p in ignored if p.endswith(os.sep)]
    said = []
    for left, one, many in [
        ([p for p in ignored if p not in folders], "file that is not a corpus file",
         "files that are not corpus files"),
        (folders, "folder (a folder's files are read, not its folders': name it to read it)",
         "folders (a folder's files are read, not its folders': name them to read them)"),
    ]:  # fmt: skip
        if left:
            shown = ", ".join(one_line(os.path.basename(p.rstrip(os.sep)), name=True)
                              + ("/" if p in folders else "") for p in left[:10])  # fmt: skip
            more = f" and {len(left) - 10} more" if len(left) > 10 else ""
            said.append(f"{len(left)} {one if len(left) == 1 else many}: {shown}{more}")
    if said:
        log.warning("left out %s", "; ".join(said))
    return indexed


def file_key(path: str) -> object:
    """The file ``path`` reads, by an identity two spellings share: a local file's (a path's
    or a ``file://`` URL's) device and inode, else the URL itself."""
    local = path[len("file://") :] if path.startswith("file://") else None
    if local is None and is_url(path):
        return decoded(path)  # (``é`` and ``%C3%A9``: one file)
    info = os.stat(local if local is not None else path)
    return (info.st_dev, info.st_ino)


def _refuse_twice(units: list[Unit]) -> None:
    """Refuse a file reached twice where ``find_files`` cannot see it: the same URL (or a
    folder and a file in it), a ``file://`` URL and a path, a path on both sides of a URL.

    Raises:
        CorpusError: naming the second spelling and the first.
    """
    keys: dict[str, object] = {}  # a path's file (``file_key``)
    owner: dict[object, str] = {}
    seen: set[tuple[object, str, int]] = set()
    for unit in units:
        key = keys.get(unit.path)
        if key is None:
            key = keys[unit.path] = file_key(unit.path)
        first = owner.setdefault(key, unit.path)
        if first != unit.path or (key, unit.member, unit.offset) in seen:
            raise CorpusError(
                f"the same file is given twice (also as {first}): its documents would be "
                "read twice; name each file once",
                path=unit.path,
            )
        seen.add((key, unit.member, unit.offset))


def in_records(unit: Unit) -> bool:
    """Whether ``unit`` is of a file of records (parquet rows, JSON lines), whose documents'
    text is a column or field (``text_column``), not a file of a tar."""
    return unit.kind == PARQUET or split_jsonl_kind(unit.kind) is not None


def _named_apart(units: list[Unit]) -> list[Unit]:
    """Units whose documents are named after their file (parquet rows, JSON lines) with the
    file's name made distinct within the corpus (``inputs.distinct_names``): a member
    ``train.parquet#rg0`` of ``en/`` and of ``de/`` becomes ``en/train.parquet#rg0``. Files
    whose names differ keep their members (and their documents' names) as they were."""
    named = [u for u in units if in_records(u)]
    names = distinct_names(u.path for u in named)
    renamed = []
    for unit in units:
        base = file_name(unit.path.rstrip("/"))
        name = names.get(unit.path, base)
        if name != base and unit.member.startswith(base):
            unit = unit._replace(member=name + unit.member[len(base) :])
        renamed.append(unit)
    return renamed


def _index_local(
    paths: list[str | os.PathLike[str]], on_error: str, indexed: Indexed, text_column: str,
    storage: Storage,
) -> None:  # fmt: skip
    """Index local paths, folders and globs into ``indexed`` (see ``index_inputs``)."""
    found = find_files(paths)
    if on_error == "raise" and found.problems:
        raise found.problems[0]  # before reading any file
    indexed.ignored.extend(found.ignored)
    for item in found.items:
        try:
            if isinstance(item, CorpusError):
                raise item
            before, damage = index_file_before_damage(item, text_column, storage)
        except CorpusError as exc:
            if on_error == "raise" or not exc.skippable:
                raise
            indexed.skipped.append(exc)
            continue
        if damage is not None and on_error == "raise":
            raise damage
        if damage is not None:
            note = f"{damage.message} (kept the {len(before)} members before it)"
            indexed.skipped.append(CorpusError(note, path=damage.path, member=damage.member))
        indexed.units.extend(before)


def index_paths(paths: Sequence[str | os.PathLike[str]]) -> list[Unit]:
    """Index every file named by ``paths`` (files, folders, globs), in order; see
    ``index_inputs``."""
    return index_inputs(paths).units
