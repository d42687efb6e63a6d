"""Filesystems: this process's fsspec filesystem per protocol, made with a storage's
options (``skip_instance_cache``, keyed by pid: fsspec instances hold event loops, threads
and connection pools that do not survive a fork), and what is asked of them besides byte
ranges: a file's size and identity (``file_info``) and a URL's files (``expand_url``).
Every call to a filesystem goes through :func:`within`: its whole answer has a deadline
(``retry.deadline``), so a server that drips or stalls is a timeout (retried like one), in
the main process (indexing, listing, HEAD) as in the workers. Without fsspec (the ``remote``
extra) a URL is a clear error naming the extra.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Callable
from typing import Any

from openwebtext.errors import CorpusError, Unsupported, install_hint
from openwebtext.source.redaction import hide_in_logs, redact
from openwebtext.source.retry import Fatal, deadline, host_of, with_retries
from openwebtext.source.settings import (
    LOCK,
    FileInfo,
    PerStorage,
    Storage,
    decoded,
    is_url,
    protocol,
    resolve,
)

__all__ = ["expand_url", "file_info", "filesystem", "info_of", "is_pattern", "within"]

#: Each storage's filesystems in this process, by (pid, protocol): a forked worker makes its own.
_filesystems: PerStorage[tuple[int, str], Any] = PerStorage()


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError:
        raise Unsupported(
            f"reading URLs needs the remote extra: {install_hint('remote')}"
        ) from None
    return fsspec


def filesystem(url: str, storage: Storage | None = None) -> Any:
    """This process's fsspec filesystem for ``url``'s protocol, made with ``storage``'s options.

    Raises:
        Unsupported: fsspec, or the protocol's implementation, is not installed.
    """
    fsspec = _fsspec()
    proto = protocol(url)
    key = (os.getpid(), proto)
    store = resolve(storage)
    made = _filesystems.of(store)
    with LOCK:
        fs = made.get(key)
        if fs is None:
            options = dict(store.options)
            if proto in ("http", "https"):
                options = _http_options(options)
            try:
                fs = fsspec.filesystem(proto, skip_instance_cache=True, **options)
            except ImportError as exc:
                raise Unsupported(
                    f"reading {proto}:// URLs needs the remote extra: "
                    f"{install_hint('remote')} ({exc})"
                ) from None
            except ValueError as exc:
                raise Unsupported(f"unknown protocol {proto}://: {exc}") from None
            made[key] = fs
            hide_in_logs()  # (its modules, and so their loggers, are imported now)
    return fs


#: The keyword arguments of aiohttp's requests (``ClientSession.request``), which fsspec's HTTP
#: filesystem passes its other storage options to.
_AIOHTTP_REQUEST = frozenset({
    "params", "data", "json", "cookies", "headers", "skip_auto_headers", "auth",
    "allow_redirects", "max_redirects", "compress", "chunked", "expect100", "raise_for_status",
    "read_until_eof", "proxy", "proxy_auth", "timeout", "verify_ssl", "fingerprint",
    "ssl_context", "ssl", "server_hostname", "proxy_headers", "trace_request_ctx", "read_bufsize",
    "auto_decompress", "max_line_size", "max_field_size", "max_headers", "middlewares",
    "upload_tracker",
})  # fmt: skip
#: The storage options ``_http_options`` said it left out.
_SAID: set[tuple[str, ...]] = set()


def _http_options(options: dict[str, Any]) -> dict[str, Any]:
    """The storage options an HTTP(S) filesystem takes: its own (its listings cache's too) and
    its requests' (aiohttp's), with a read timeout; the others (a store's: ``endpoint_url``,
    ``anon``, given for the run's ``s3://`` URLs) left out with a warning, never passed on to
    fail each request."""
    import inspect

    from fsspec.dircache import DirCache
    from fsspec.implementations.http import HTTPFileSystem

    taken = {*inspect.signature(HTTPFileSystem.__init__).parameters, *_AIOHTTP_REQUEST,
             *inspect.signature(DirCache.__init__).parameters, "skip_instance_cache"}  # fmt: skip
    foreign = sorted(set(options) - taken)
    if foreign and tuple(foreign) not in _SAID:  # (once: forked workers inherit it)
        _SAID.add(tuple(foreign))
        logging.getLogger("openwebtext").warning(
            "storage options %s do not apply to http(s):// URLs: left out for them",
            ", ".join(foreign),
        )
    kept = {k: v for k, v in options.items() if k not in foreign}
    kept.setdefault("client_kwargs", {"timeout": _http_timeout()})
    return kept


def _http_timeout() -> Any:
    import aiohttp

    # A server that stops sending must become a retried timeout, not a hang.
    return aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=20)


def within(
    fs: Any, size: int, call: Callable[..., Any], *args: Any, sync: bool = False, **kwargs: Any
) -> Any:
    """``call(*args, **kwargs)`` on ``fs``, its whole answer within ``deadline(size)``.

    ``sync``: ``call`` is a coroutine function, run on ``fs``'s event loop. Otherwise
    ``call`` is one of ``fs``'s methods; an async filesystem's (s3fs, gcsfs, HTTP) take the
    deadline themselves (fsspec's ``timeout``), a blocking one's (the Hub's) keep their own
    per-read timeouts.

    Raises:
        TimeoutError: no complete answer in time (retried like any timeout).
    """
    limit = deadline(size)
    try:
        if sync:
            from fsspec.asyn import sync as run

            return run(fs.loop, call, *args, timeout=limit, **kwargs)
        if getattr(fs, "async_impl", False):
            return call(*args, timeout=limit, **kwargs)
        return call(*args, **kwargs)
    except Exception as exc:
        if type(exc).__name__ == "FSTimeoutError":
            raise TimeoutError(
                f"no complete answer within {limit:.0f} s (the server stalls or is too slow)"
            ) from None
        raise


_IDENTITY_KEYS = (
    "generation",  # GCS: before its etag, which changes with metadata too; reads pin it
    "ETag",
    "etag",
    "blob_id",
    "sha256",
    "LastModified",
    "Last-Modified",
    "last_modified",
    "mtime",
    "updated",
    "created",
)


def _identity(info: dict[str, Any]) -> str:
    lfs = info.get("lfs")
    if isinstance(lfs, dict) and lfs.get("sha256"):
        return f"sha256:{lfs['sha256']}"
    inode = f":ino:{info['ino']}" if info.get("ino") else ""  # (file://: a rename is another)
    for key in _IDENTITY_KEYS:
        value = info.get(key)
        if value:
            return f"{key}:{value}{inode}".replace('"', "")
    return ""


def _host(url: str, storage: Storage | None) -> str:
    return host_of(url, resolve(storage).place)


def file_info(url: str, storage: Storage | None = None) -> FileInfo:
    """The size and identity of a remote file (one request, retried).

    Raises:
        CorpusError: it does not exist, access is refused, or retries ran out.
    """
    fs = filesystem(url, storage)
    try:
        info = with_retries(lambda: within(fs, 0, fs.info, url), "HEAD", _host(url, storage))
    except Fatal as exc:
        raise CorpusError(exc.reason, path=redact(url)) from None
    if info.get("type") == "directory":
        raise CorpusError("is a folder, not a file", path=redact(url))
    found = info_of(info)
    if found is None:
        raise CorpusError("the server does not say the file's size", path=redact(url))
    return found


def info_of(info: dict[str, Any]) -> FileInfo | None:
    """The size and identity an fsspec ``info`` says (None: no size)."""
    size = info.get("size")
    return FileInfo(size, _identity(info)) if isinstance(size, int) else None


def _listed(name: str) -> bool:
    """The rule for folders, as for local ones: not hidden, not ``_``-prefixed."""
    return not name.startswith((".", "_"))


def expand_url(url: str, storage: Storage | None = None) -> dict[str, FileInfo | None]:
    """Turn a URL naming a file, a folder or a glob pattern into sorted file URLs, each with
    its size and identity where the asking said them (a file's URL: its one HEAD, which
    ``file_info`` would ask again), else None.

    Raises:
        CorpusError: nothing there, or a folder or pattern that holds no file.
    """
    fs = filesystem(url, storage)
    shown = redact(url)
    # Listings kept by the filesystem (HfFileSystem's, s3fs's dircache) from an earlier open
    # in this process would hide a file changed since: each open lists afresh.
    fs.invalidate_cache()

    def entries(call: Callable[[], Any], what: str) -> Any:
        try:
            return with_retries(call, what, _host(url, storage))
        except Fatal as exc:
            raise CorpusError(exc.reason, path=shown) from None

    if is_pattern(url):
        found = entries(lambda: within(fs, 0, fs.glob, url, detail=True), "listing")
        files = [
            name
            for name, info in found.items()
            if info.get("type") != "directory" and _listed(name.rstrip("/").rsplit("/", 1)[-1])
        ]
        if not files:
            raise CorpusError("pattern matches no file", path=shown)
        return dict.fromkeys(sorted((_full(fs, url, name) for name in files), key=decoded))
    if not url.endswith("/"):  # over HTTP only a trailing slash says "folder"
        info = entries(lambda: within(fs, 0, fs.info, url), "HEAD")
        if info.get("type") != "directory":
            return {url: info_of(info)}
    listing = entries(lambda: within(fs, 0, fs.ls, url, detail=True), "listing")
    files = [
        e["name"]
        for e in listing
        if e.get("type") != "directory" and _listed(e["name"].rstrip("/").rsplit("/", 1)[-1])
        and _in_folder(url, e["name"])
    ]  # fmt: skip
    if not files:
        raise CorpusError("folder holds no corpus file", path=shown)
    return dict.fromkeys(sorted((_full(fs, url, name) for name in files), key=decoded))


def _in_folder(folder: str, name: str) -> bool:
    """Whether a name an HTTP folder's page links to is a file in the folder: not a link with
    a query string or a fragment (an Apache listing's sort links, ``?C=N;O=D``, which fsspec
    lists as files), nor the folder itself."""
    if protocol(folder) not in ("http", "https"):
        return True
    parts = urllib.parse.urlsplit(name)
    return not (parts.query or parts.fragment) and (
        parts.path.rstrip("/") != urllib.parse.urlsplit(folder).path.rstrip("/")
    )


def is_pattern(url: str) -> bool:
    """Whether ``url`` is a glob pattern: ``*``, ``?`` or ``[`` in its path. A query string
    (``?X-Amz-Signature=…`` of a signed URL) or a fragment is never a pattern."""
    path = urllib.parse.urlsplit(url).path if protocol(url) in _QUERIED else url.split("://", 1)[1]
    return any(c in path for c in "*?[")


#: Protocols whose URLs may carry a query string (``?…``): fsspec passes it to the server.
_QUERIED = frozenset({"http", "https", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})


def _full(fs: Any, url: str, name: str) -> str:
    """A listed name as a URL of the same protocol as ``url``."""
    if is_url(name):
        return name
    full: str = fs.unstrip_protocol(name)
    return full
