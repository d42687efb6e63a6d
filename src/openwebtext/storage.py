"""Storage: files that live behind a URL (S3, GCS, HTTP, the Hugging Face Hub), read by byte range.

Everything here goes through ``fsspec`` (the ``remote`` extra); without it a
URL is a clear error naming the extra. What this module adds to fsspec:

- **Faults.** Every request is retried with exponential backoff and full
  jitter, within ``RETRY_ATTEMPTS`` attempts and ``RETRY_SECONDS`` seconds, on
  what may pass (connection refused or reset, timeouts, HTTP 429 and 5xx, a body
  shorter than asked for: a short read is never taken as data). A missing
  bucket, key or file, or a refused credential, is an error at once.
- **Messages.** URLs are shown without credentials or query strings (signed
  URLs carry their signature there), and library errors are reduced to their
  class and redacted text: no traceback, no secret.
- **Forks.** Workers are forked processes. fsspec instances hold event loops,
  threads and connection pools that do not survive a fork, so each process
  makes its own filesystems (``skip_instance_cache``), keyed by its pid.
- **Settings.** ``configure(storage_options)`` sets what every filesystem of
  this process (and of the workers it forks) is made with, passed to fsspec as
  is. ``Corpus.open(..., storage_options=...)`` calls it.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from .errors import CorpusError, CorruptMember

__all__ = [
    "REMOTE_EXTRA",
    "FileInfo",
    "RangeFile",
    "alias",
    "configure",
    "expand_url",
    "fetch",
    "file_info",
    "filesystem",
    "is_url",
    "redact",
]

REMOTE_EXTRA = "openwebtext[remote]"

#: Attempts per request (the first one included), and the time they may take in all:
#: with HTTP's 20 s read timeout, a unit fails within ~40 s, before the pool's default
#: ``timeout`` (60 s) would call its worker hung.
RETRY_ATTEMPTS = 6
RETRY_SECONDS = 20.0
#: Backoff: a random wait in [0, min(cap, base * 2**attempt)) ("full jitter").
RETRY_BASE = 0.05
RETRY_CAP = 4.0

T = TypeVar("T")

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+)://")
_lock = threading.Lock()
_settings: dict[str, Any] = {}
_filesystems: dict[tuple[int, str], Any] = {}


def is_url(path: object) -> bool:
    """True for ``scheme://…`` (two letters at least, so ``C:\\`` stays a path)."""
    return isinstance(path, str) and _URL.match(path) is not None


def protocol(url: str) -> str:
    match = _URL.match(url)
    return match.group(1).lower() if match else "file"


_USERINFO = re.compile(r"(://)[^/@\s]*@")
_QUERY = re.compile(r"\?[^\s'\"]*")
_SECRETS = re.compile(
    r"((?:aws_)?(?:secret|token|key|password|signature|credential)[a-z_-]*['\"]?\s*[:=]\s*['\"]?)"
    r"[^\s'\",}]+",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` without URL credentials, query strings or ``secret=…``-like values."""
    text = _USERINFO.sub(r"\1", text)
    text = _QUERY.sub("", text)
    return _SECRETS.sub(r"\1***", text)


class CacheSettings(NamedTuple):
    """The optional local cache of members (``membercache``)."""

    root: str
    cap: int | None


_member_cache: list[CacheSettings] = []
_identities: dict[str, FileInfo] = {}


_aliases: dict[str, str] = {}


def alias(url: str) -> str:
    """The name units carry for ``url``: without credentials or query string.

    Units' paths end up in errors, skip lists and states, so a signed URL's
    signature must not be one. The real URL stays in this process (and the
    workers it forks), and ``fetch`` goes back to it.
    """
    shown = redact(url)
    if shown != url:
        with _lock:
            _aliases[shown] = url
    return shown


def _real(url: str) -> str:
    return _aliases.get(url, url)


def configure(
    storage_options: dict[str, Any] | None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_size: int | None = None,
) -> None:
    """Set what every filesystem of this process is made with, and the member cache.

    ``storage_options`` go to ``fsspec.filesystem`` as they are (for S3:
    ``endpoint_url``, ``anon``, ``key``…). ``cache_dir`` turns on the local
    cache of remote members (``cache_size`` bytes at most; None: no cap).
    Workers forked afterwards inherit all of it. Filesystems already made are
    dropped, so the next request uses the new options.
    """
    with _lock:
        _settings.clear()
        _settings.update(storage_options or {})
        _filesystems.clear()
        _member_cache.clear()
        if cache_dir is not None:
            _member_cache.append(CacheSettings(os.fspath(cache_dir), cache_size))


def member_cache() -> CacheSettings | None:
    """The member cache set by ``configure``, if any."""
    return _member_cache[0] if _member_cache else None


def remember(url: str, info: FileInfo) -> None:
    """Note what identifies ``url``'s content (the index does, before the workers fork)."""
    _identities[url] = info


def identity(url: str) -> FileInfo | None:
    """The size and identity (ETag, generation…) of ``url`` as last indexed, if it was.

    What a cache of anything read from ``url`` (members, counts) should be keyed on.
    """
    return _identities.get(url)


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError:
        raise CorpusError(
            f"reading URLs needs the remote extra: pip install '{REMOTE_EXTRA}'"
        ) from None
    return fsspec


def filesystem(url: str) -> Any:
    """This process's fsspec filesystem for ``url``'s protocol.

    Raises:
        CorpusError: fsspec, or the protocol's implementation, is not installed.
    """
    fsspec = _fsspec()
    proto = protocol(url)
    key = (os.getpid(), proto)
    with _lock:
        fs = _filesystems.get(key)
        if fs is None:
            options = dict(_settings)
            if proto in ("http", "https") and "client_kwargs" not in options:
                options["client_kwargs"] = {"timeout": _http_timeout()}
            try:
                fs = fsspec.filesystem(proto, skip_instance_cache=True, **options)
            except ImportError as exc:
                raise CorpusError(
                    f"reading {proto}:// URLs needs the remote extra: pip install "
                    f"'{REMOTE_EXTRA}' ({exc})"
                ) from None
            except ValueError as exc:
                raise CorpusError(f"unknown protocol {proto}://: {exc}") from None
            _filesystems[key] = fs
    return fs


def _http_timeout() -> Any:
    import aiohttp

    # A server that stops sending must become a retried timeout, not a hang.
    return aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=20)


# -- faults ---------------------------------------------------------------------


class ShortRead(Exception):
    """A response body shorter than what was asked for (retried, never used)."""


class _Fatal(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _classify(exc: BaseException) -> str | None:
    """Why ``exc`` must not be retried, or None if it may pass."""
    status = _status(exc)
    if isinstance(exc, FileNotFoundError) and status in (None, 404, 410):
        return "no such file, key or bucket"
    if isinstance(exc, PermissionError) or (
        # gcsfs raises a plain OSError for a 403, its text starting with "Forbidden"
        type(exc) is OSError and str(exc).startswith("Forbidden")
    ):
        return "access refused (check the credentials)"
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
        return "not a file"
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        if status in (401, 403):
            return f"access refused: HTTP {status} (check the credentials)"
        if status == 404:
            return "no such file, key or bucket"
        return f"HTTP {status}"
    if isinstance(exc, (TypeError, ValueError)) and not isinstance(exc, ShortRead):
        return describe(exc)
    return None


def _status(exc: BaseException | None) -> int | None:
    """The HTTP status behind ``exc`` (fsspec's HTTP ``info`` hides it as the cause)."""
    for _ in range(4):
        if exc is None:
            return None
        status = getattr(exc, "status", None)
        if isinstance(status, int):
            return status
        # huggingface_hub's errors keep their response; gcsfs's HttpError has a code
        # (only gcsfs's: aiohttp's parse errors, e.g. a body cut short, say code 400).
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
        status = getattr(exc, "code", None)
        if isinstance(status, int) and type(exc).__module__.startswith("gcsfs"):
            return status
        exc = exc.__cause__ or exc.__context__
    return None


def describe(exc: BaseException) -> str:
    """An exception as one short redacted line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    return redact(f"{name}: {text}" if text else name)


def with_retries(call: Callable[[], T], what: str) -> T:
    """Run ``call`` until it succeeds, a fatal error, or the attempts or time run out.

    Raises:
        _Fatal: a missing file or refused credential (at once), or retries ran
            out; its reason says which and why.
    """
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as exc:
            fatal = _classify(exc)
            if fatal is not None:
                raise _Fatal(fatal) from None
            elapsed = time.monotonic() - start
            if attempt >= RETRY_ATTEMPTS or elapsed >= RETRY_SECONDS:
                raise _Fatal(
                    f"{what} failed {attempt} times in {elapsed:.1f} s; last: {describe(exc)}"
                ) from None
            delay = random.uniform(0, min(RETRY_CAP, RETRY_BASE * 2**attempt))
            time.sleep(min(delay, max(0.0, RETRY_SECONDS - elapsed)))


# -- files ----------------------------------------------------------------------


class FileInfo(NamedTuple):
    """What identifies a remote file's content: its size and its ETag (or the like)."""

    size: int
    identity: str
    """ETag, generation, blob id or last-modified: what changes when the content does."""


_IDENTITY_KEYS = (
    "ETag",
    "etag",
    "generation",
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
    for key in _IDENTITY_KEYS:
        value = info.get(key)
        if value:
            return f"{key}:{value}".replace('"', "")
    return ""


def file_info(url: str) -> FileInfo:
    """The size and identity of a remote file (one request, retried).

    Raises:
        CorpusError: it does not exist, access is refused, or retries ran out.
    """
    fs = filesystem(url)
    try:
        info = with_retries(lambda: fs.info(url), "HEAD")
    except _Fatal as exc:
        raise CorpusError(exc.reason, path=redact(url)) from None
    if info.get("type") == "directory":
        raise CorpusError("is a folder, not a file", path=redact(url))
    size = info.get("size")
    if not isinstance(size, int):
        raise CorpusError("the server does not say the file's size", path=redact(url))
    return FileInfo(size, _identity(info))


#: Per protocol, what ``cat_file`` needs to fetch exactly the range asked. HfFileSystem's
#: ``cat_file`` reads through a buffered file whose default cache reads a block (5 MB)
#: past the range: several times a member's own bytes, for every member.
_RANGE_OPTIONS: dict[str, dict[str, Any]] = {"hf": {"cache_type": "none"}}


def fetch(url: str, start: int, end: int, member: str | None = None) -> bytes:
    """Bytes ``[start, end)`` of ``url``: exactly that many, or an error.

    Raises:
        CorruptMember: the file is missing, access is refused, or retries ran
            out; names the URL (redacted) and ``member``.
    """
    real = _real(url)
    fs = filesystem(real)
    options = _RANGE_OPTIONS.get(protocol(real), {})

    def call() -> bytes:
        data: bytes = fs.cat_file(real, start=start, end=end, **options)
        if len(data) != end - start:
            raise ShortRead(f"got {len(data)} of {end - start} bytes at {start}")
        return data

    try:
        return with_retries(call, f"GET bytes {start}-{end - 1}")
    except _Fatal as exc:
        raise CorruptMember(f"cannot read: {exc.reason}", redact(url), member) from None


def _listed(name: str) -> bool:
    """The rule for folders, as for local ones: not hidden, not ``_``-prefixed."""
    return not name.startswith((".", "_"))


def expand_url(url: str) -> list[str]:
    """Turn a URL naming a file, a folder or a glob pattern into sorted file URLs.

    Raises:
        CorpusError: nothing there, or a folder or pattern that holds no file.
    """
    fs = filesystem(url)
    shown = redact(url)

    def entries(call: Callable[[], Any], what: str) -> Any:
        try:
            return with_retries(call, what)
        except _Fatal as exc:
            raise CorpusError(exc.reason, path=shown) from None

    if any(c in url.split("://", 1)[1] for c in "*?["):
        found = entries(lambda: fs.glob(url, detail=True), "listing")
        files = [
            name
            for name, info in found.items()
            if info.get("type") != "directory" and _listed(name.rstrip("/").rsplit("/", 1)[-1])
        ]
        if not files:
            raise CorpusError("pattern matches no file", path=shown)
        return sorted(_full(fs, url, name) for name in files)
    if not url.endswith("/"):  # over HTTP only a trailing slash says "folder"
        info = entries(lambda: fs.info(url), "HEAD")
        if info.get("type") != "directory":
            return [url]
    listing = entries(lambda: fs.ls(url, detail=True), "listing")
    files = [
        e["name"]
        for e in listing
        if e.get("type") != "directory" and _listed(e["name"].rstrip("/").rsplit("/", 1)[-1])
    ]
    if not files:
        raise CorpusError("folder holds no corpus file", path=shown)
    return sorted(_full(fs, url, name) for name in files)


def _full(fs: Any, url: str, name: str) -> str:
    """A listed name as a URL of the same protocol as ``url``."""
    if is_url(name):
        return name
    full: str = fs.unstrip_protocol(name)
    return full


class RangeFile:
    """A read-only file over a remote one, fetching small windows by range.

    Made for walking tar headers (``tarfile`` reads a 512-byte header, then
    seeks past the member): each miss fetches ``window`` bytes, so a header and
    the first bytes of its member usually come in one request. Windows are
    kept, so reading a member's first bytes again costs nothing.
    """

    def __init__(self, url: str, size: int, window: int = 2048):
        self.url = url
        self.name = url
        self.size = size
        self.window = window
        self.position = 0
        self.requests = 0
        self._windows: dict[int, bytes] = {}

    def pread(self, n: int, offset: int) -> bytes:
        n = max(0, min(n, self.size - offset))
        if n == 0:
            return b""
        first = offset // self.window
        last = (offset + n - 1) // self.window
        missing = [k for k in range(first, last + 1) if k not in self._windows]
        if missing:
            start = missing[0] * self.window
            end = min(self.size, (missing[-1] + 1) * self.window)
            data = fetch(self.url, start, end)
            self.requests += 1
            for k in range(missing[0], missing[-1] + 1):
                at = k * self.window - start
                self._windows[k] = data[at : at + self.window]
        joined = b"".join(self._windows[k] for k in range(first, last + 1))
        at = offset - first * self.window
        return joined[at : at + n]

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self.position
        data = self.pread(n, self.position)
        self.position += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def close(self) -> None:
        self._windows.clear()
