"""Where ``owt tokenize`` and ``owt merge`` put their finished files: a folder or a URL.

A local folder is written in place (``workdir``). A URL (``s3://bucket/prefix/``, any
fsspec URL; the ``remote`` extra) is written through a local *staging* folder: the run works
there exactly as in a local folder (checkpoints, fsync, the commit step), then ``publish``
uploads the finished files: first the old ``meta.json`` goes, then the token files of an
earlier run that this one does not write (``workdir.owned``), then each file, then the new
``meta.json``. A remote folder's ``meta.json`` is thus its marker: it is there only when
every file it lists was uploaded in full, and readers check the sizes it records. A run
killed before the end leaves no ``meta.json`` and is done again.

Staging folders lie in the system's temporary folder (``TMPDIR``), named by a hash of the
URL, so that a rerun on the same machine goes on from a staged run's progress; each is
removed once published. Remote slices are read back (``fetch``) into staging folders too,
since the merge reads them by offset. The filesystems are ``storage``'s: made with the
``store`` given (``prepare`` gives its corpus's ``Corpus.storage``: the options the input
was opened with, ``--storage-option``), or the process's default one
(``source.configure``) when it is None.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from openwebtext import codec
from openwebtext.files import atomic_file
from openwebtext.prepare.workdir import PrepareError, owned, sha256_file
from openwebtext.source import Storage, describe, filesystem, is_url, redact, with_retries

__all__ = [
    "Location",
    "fetch",
    "is_remote",
    "join",
    "location",
    "mismatched",
    "publish",
    "read_json",
    "remove",
    "same_place",
    "shown",
    "sizes",
    "staging",
    "strays",
    "upload",
]

#: A local folder (a ``Path``) or a URL (a ``str``).
Location = Path | str

T = TypeVar("T")


def is_remote(out: str | os.PathLike[str]) -> bool:
    """Whether ``out`` is a URL (``scheme://…``), not a local path."""
    return isinstance(out, str) and is_url(out)


def location(out: str | os.PathLike[str], name: str = "out") -> Location:
    """``out`` as a ``Location``: a URL stays a string (a ``Path`` would fold its ``//``).

    Raises:
        TypeError: ``out`` is not a str or ``os.PathLike``.
        ValueError: it is empty or blank (``Path("")`` is the working folder: a run wrote its
            files there), or holds what no path does (a NUL, an unpaired surrogate), naming
            the argument (``name``).
    """
    if not isinstance(out, str | os.PathLike):
        raise TypeError(f"{name} must be a folder's path or a URL, not {type(out).__name__}")
    text = os.fspath(out)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} must name a folder or a URL, not {text!r}")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        text = "\0"  # (an unpaired surrogate: no file system's name, as a NUL)
    if "\0" in text:
        raise ValueError(f"{name} is not a path: {os.fspath(out)!r} holds a NUL or an unpaired "
                         "surrogate")  # fmt: skip
    return out.rstrip("/") if isinstance(out, str) and is_remote(out) else Path(out)


def join(folder: Location, name: str) -> Location:
    """``folder / name`` for either kind."""
    if isinstance(folder, str):
        return f"{folder.rstrip('/')}/{name}"
    return folder / name


#: The URL schemes of local files (fsspec's ``LocalFileSystem``): what follows ``://`` is a
#: path, relative to the working folder unless it starts with ``/``.
_LOCAL_SCHEMES = ("file://", "local://")


def _local(folder: Location) -> Path | None:
    """Where ``folder`` is on this machine's disk, resolved (symlinks, ``..``), if it is a
    path or a ``file://`` URL; None for any other URL."""
    if isinstance(folder, Path):
        return folder.resolve()
    for scheme in _LOCAL_SCHEMES:
        if folder.lower().startswith(scheme):
            return Path(folder[len(scheme) :] or ".").resolve()
    return None


def same_place(a: Location, b: Location) -> bool:
    """Whether two locations are the same folder: local ones (paths and ``file://`` URLs)
    resolved, other URLs compared without a final ``/``."""
    local_a, local_b = _local(a), _local(b)
    if local_a is not None or local_b is not None:
        return local_a == local_b
    return str(a).rstrip("/") == str(b).rstrip("/")


def shown(folder: Location, resolve: bool = False) -> str:
    """How a location is named in messages and records (a URL without its secrets)."""
    if isinstance(folder, str):
        return redact(folder)
    return str(folder.resolve() if resolve else folder)


def _remote(call: Callable[[], T], what: str, url: str) -> T:
    try:
        return with_retries(call, what)
    except Exception as exc:  # storage's fatal error: its reason says why
        reason = getattr(exc, "reason", None) or describe(exc)
        raise PrepareError(f"{redact(url)}: {reason}") from None


def read_json(folder: Location, name: str, store: Storage | None = None) -> dict[str, Any] | None:
    """``folder/name`` read as a JSON object; None if it is missing or not one.

    Raises:
        PrepareError: a remote folder cannot be read (refused, retries ran out).
    """
    if isinstance(folder, Path):
        try:
            body: Any = codec.parse(codec.read_file(folder / name))
        except (OSError, ValueError):
            return None
    else:
        url = str(join(folder, name))
        fs = filesystem(url, store)

        def read() -> bytes | None:
            try:
                data: bytes = fs.cat_file(url)
            except FileNotFoundError:
                return None
            return data

        data = _remote(read, "GET", url)
        try:
            body = None if data is None else codec.parse(data)
        except ValueError:
            return None
    return body if isinstance(body, dict) else None


def sizes(folder: Location, names: list[str], store: Storage | None = None) -> dict[str, int]:
    """The size of each of ``names`` in ``folder``; -1 for a missing one.

    Raises:
        PrepareError: a remote folder cannot be read (refused, retries ran out).
    """
    if isinstance(folder, Path):
        paths = {name: folder / name for name in names}
        return {n: p.stat().st_size if p.is_file() else -1 for n, p in paths.items()}
    fs = filesystem(folder, store)
    fs.invalidate_cache(folder)  # the files may have been written by other processes since

    def size(url: str) -> int:
        try:
            info = fs.info(url)
        except FileNotFoundError:
            return -1
        return int(info["size"]) if info.get("type") != "directory" else -1

    urls = {name: str(join(folder, name)) for name in names}
    return {n: _remote(functools.partial(size, url), "HEAD", url) for n, url in urls.items()}


def remove(folder: Location, store: Storage | None = None) -> None:
    """Remove ``folder`` and everything under it, if it is there."""
    if isinstance(folder, Path):
        shutil.rmtree(folder, ignore_errors=True)
        return
    fs = filesystem(folder, store)

    def rm() -> None:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(folder, recursive=True)

    _remote(rm, "DELETE", folder)


def staging(url: str, purpose: str = "out") -> Path:
    """The local folder where the files of ``url`` are built (``out``) or read (``fetch``)."""
    digest = hashlib.sha256(f"{purpose}\0{url.rstrip('/')}".encode()).hexdigest()[:20]
    return Path(tempfile.gettempdir()) / f"owt-{purpose}-{digest}"


def publish(folder: Path, url: str, store: Storage | None = None) -> dict[str, Any]:
    """Upload the finished files of ``folder`` to ``url``, ``meta.json`` last; remove ``folder``.

    Returns:
        The ``meta.json`` published.

    Raises:
        PrepareError: an upload failed (the remote folder then has no ``meta.json``).
    """
    meta: dict[str, Any] = codec.parse(codec.read_file(folder / "meta.json"))
    fs = filesystem(url, store)
    _unmark(fs, url, "meta.json")
    _remove_stale(fs, url, set(meta["files"]))
    for name in [*meta["files"], "meta.json"]:
        target = str(join(url, name))
        source = str(folder / name)
        _remote(functools.partial(fs.put_file, source, target), "PUT", target)
    shutil.rmtree(folder, ignore_errors=True)
    return meta


def _unmark(fs: Any, url: str, name: str) -> None:
    """Delete the marker ``name`` at ``url`` if it is there, before what it says changes."""
    marker = str(join(url, name))

    def unmark() -> None:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(marker)

    _remote(unmark, "DELETE", marker)


def _remove_stale(
    fs: Any, url: str, keep: set[str], which: Callable[[str], object] = owned
) -> None:
    """Delete the token files an earlier run left at ``url`` that this one does not write
    (``which``; by default ``workdir.owned``: its ``train.idx``, llm.c shards, ``.ds`` files),
    as a local commit does: a trainer reading the folder would take them with the new
    ``train.bin``."""
    folder = url.rstrip("/")

    def listing() -> list[str]:
        fs.invalidate_cache(folder)
        try:
            entries = fs.ls(folder, detail=True)
        except FileNotFoundError:
            return []
        return [str(e["name"]) for e in entries if e.get("type") != "directory"]

    for entry in _remote(listing, "listing", folder):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if which(name) and name not in keep:
            target = str(join(url, name))
            _remote(functools.partial(fs.rm_file, target), "DELETE", target)


def strays(url: str, names: set[str], stale: Callable[[str], object],
           store: Storage | None = None) -> None:  # fmt: skip
    """Remove the files at ``url`` that ``stale`` says of a format's kind and its marker's
    ``names`` does not name (a shard copied in beside a finished format).

    Raises:
        PrepareError: the listing or a removal failed.
    """
    _remove_stale(filesystem(url, store), url, names, stale)


def upload(
    folder: Path,
    url: str,
    names: list[str],
    store: Storage | None = None,
    stale: Callable[[str], object] | None = None,
) -> None:
    """Upload ``names`` of the local ``folder`` to ``url``, in order (a marker last), first
    removing the marker at ``url`` and the files there that ``stale`` says of its kind and
    ``names`` does not name (llm.c shards of an earlier pass: a trainer's glob would take
    them; a marker is never beside a file of its kind it does not name).

    Raises:
        PrepareError: an upload (or a removal) failed.
    """
    fs = filesystem(url, store)
    if stale is not None:
        _unmark(fs, url, names[-1])
        _remove_stale(fs, url, set(names), stale)
    for name in names:
        target = str(join(url, name))
        _remote(functools.partial(fs.put_file, str(folder / name), target), "PUT", target)


def fetch(
    url: str, meta: dict[str, Any], store: Storage | None = None, verify: bool = True
) -> Path:
    """A local copy of the finished remote folder ``url`` whose ``meta.json`` is ``meta``.

    A copy already made of the same ``meta`` is used if every file is the size ``meta``
    records (and, with ``verify``, has its sha256); else every file is downloaded again.
    ``meta.json`` is written last.

    Raises:
        PrepareError: a download failed, or a file is not the size ``meta`` records (or,
            with ``verify``, not its sha256).
    """
    folder = staging(url, "fetch")
    names = list(meta["files"])
    if read_json(folder, "meta.json") == meta:
        found = sizes(folder, names)
        if all(found[n] == meta["files"][n]["bytes"] for n in names) and (
            not verify or not mismatched(folder, meta)
        ):
            return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").unlink(missing_ok=True)
    fs = filesystem(url, store)
    for name in names:
        source = str(join(url, name))
        _remote(functools.partial(_download, fs, source, folder / name), "GET", source)
        got = (folder / name).stat().st_size
        if got != meta["files"][name]["bytes"]:
            raise PrepareError(
                f"{redact(source)} holds {got} bytes, not the "
                f"{meta['files'][name]['bytes']} of its meta.json"
            )
    for name in mismatched(folder, meta) if verify else []:
        raise PrepareError(
            f"{redact(str(join(url, name)))}: its sha256 is not the one its meta.json records (the "
            "file changed after the slice was written); --no-verify skips this check"
        )
    with atomic_file(folder / "meta.json", durable=True) as f:
        f.write(json.dumps(meta).encode())
    return folder


def mismatched(folder: Path, meta: dict[str, Any]) -> list[str]:
    """The files of ``folder`` whose sha256 is not the one ``meta`` records (reads them all)."""
    files = meta["files"]
    return [name for name in files if sha256_file(folder / name) != files[name]["sha256"]]


def _download(fs: Any, source: str, target: Path) -> None:
    """Copy the remote file ``source`` to ``target``, whole or not at all (``atomic_file``)."""
    with fs.open(source, "rb") as remote, atomic_file(target, durable=False) as local:
        shutil.copyfileobj(remote, local, 8 << 20)
