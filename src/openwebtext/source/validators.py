"""Whether a response comes from the file as it was indexed: the validators it carries
(``ETag``, ``Last-Modified``, a GCS generation) against the identity noted then.

A server that honours ``If-Match`` refuses a changed file with a 412; one that ignores it
(many proxies and CDNs) serves the new bytes with their new validators. So every response's
validators are compared, whatever the request asked. ETags are compared weakly (RFC 9110
§8.8.3.2: ``W/"x"`` and ``"x"`` are the same tag), as a CDN may weaken a tag it passes on;
``If-Match`` itself carries only a strong tag (:func:`strong_etag`): a weak one never
matches there, and a server that follows the standard would answer 412 to every range.
A ranged answer also states the file's whole size (``Content-Range: bytes a-b/n``): another
size than the indexed one is the file changed too, or a server whose HEAD said another
(:func:`resized`): never a file read short or long of what was indexed. A local file is
checked against its identity as noted (``unchanged``: size, mtime and inode; ``NOT_THERE``
for a file read beside a token file that was not there).
"""

from __future__ import annotations

import os

from openwebtext.source.settings import FileInfo, Storage

__all__ = [
    "CHANGED",
    "CHANGED_OR_GONE",
    "NOT_THERE",
    "content_range",
    "indexed_generation",
    "local_identity",
    "resized",
    "same_file",
    "strong_etag",
    "unchanged",
]

CHANGED = "the file changed since it was indexed (index it again)"
CHANGED_OR_GONE = "the file changed since it was indexed, or is gone (index it again)"
#: The identity noted of a local file that is not there (an index or ``meta.json`` beside a
#: token file): one put there since is a change.
NOT_THERE = FileInfo(-1, "not there")


def local_identity(path: str) -> FileInfo:
    """The local file ``path``'s identity now (``FileInfo.of_local``), or ``NOT_THERE`` (absent;
    or unreadable: then its open says so)."""
    try:
        return FileInfo.of_local(os.stat(path))
    except OSError:
        return NOT_THERE


def unchanged(storage: Storage, path: str, now: FileInfo) -> None:
    """Check the local file ``path`` (its identity ``now``: ``FileInfo.of_local`` of its open
    descriptor, or ``local_identity``) against what ``storage`` noted of it; nothing noted (a
    pickled storage: another machine's files) is nothing to check.

    Raises:
        OSError: ``CHANGED``.
    """
    known = storage.identity(path)
    if known is not None and known != now:
        raise OSError(CHANGED)


#: The identity kinds ``filesystems.file_info`` notes, by the validator that carries them.
_ETAG = frozenset({"ETag", "etag"})
_MODIFIED = frozenset({"LastModified", "Last-Modified", "last_modified"})


def _tag(value: str) -> str:
    """An ETag without quotes or weakness mark: what a weak comparison compares."""
    return value.strip().removeprefix("W/").replace('"', "")


def strong_etag(known: FileInfo | None) -> str | None:
    """The indexed ETag, quoted, if it is a strong one (``If-Match`` compares those only)."""
    kind, _, value = known.identity.partition(":") if known else ("", "", "")
    if kind in _ETAG and value and not value.startswith("W/"):
        return f'"{value}"'
    return None


def indexed_generation(known: FileInfo | None) -> str | None:
    """The GCS generation noted at indexing, if that is what identifies the file."""
    kind, _, value = known.identity.partition(":") if known else ("", "", "")
    return value.strip() or None if kind == "generation" else None


def same_file(
    known: FileInfo | None,
    etag: object = None,
    modified: object = None,
    generation: object = None,
) -> bool:
    """False if a response's validators say it is not the file ``known`` describes; True
    when they agree, or when the response carries none of the kind that was indexed."""
    if known is None:
        return True
    kind, _, value = known.identity.partition(":")
    if kind in _ETAG and etag:
        return _tag(str(etag)) == _tag(value)
    if kind in _MODIFIED and modified:
        return str(modified).replace('"', "").strip() == value.strip()
    if kind == "generation" and generation:
        return str(generation).strip() == value.strip()
    return True


def content_range(header: object) -> tuple[int | None, int | None]:
    """The first byte and the file's whole size a ``Content-Range: bytes a-b/n`` header
    states (None for what it does not state: no header, ``*``, another unit)."""
    unit, _, spec = (header if isinstance(header, str) else "").strip().partition(" ")
    span, _, total = spec.partition("/")
    first = span.split("-", 1)[0].strip()
    if unit != "bytes":
        return None, None
    return (
        int(first) if first.isdigit() else None,
        int(total.strip()) if total.strip().isdigit() else None,
    )


def resized(known: FileInfo | None, total: int | None) -> str | None:
    """Why an answer is not of the file ``known`` describes: it states (``Content-Range``,
    or a whole file's length) another ``total`` size than the indexed one; None when it
    states that one, or none."""
    if known is None or total is None or total == known.size:
        return None
    return f"{CHANGED}: the server says it holds {total} bytes, not the {known.size} indexed"
