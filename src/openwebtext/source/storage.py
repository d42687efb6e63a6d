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
- **Settings, per corpus.** A ``Storage`` holds what one corpus's URLs are
  read with: its fsspec options (passed as they are), its member cache, and
  what indexing learnt (the real URL behind each alias, each file's identity).
  ``Corpus.open(..., storage_options=...)`` makes one and the corpus carries it
  (``Corpus.storage``) to its pools and readers; forked workers inherit it with
  their units, so nothing of it travels in a message. Two corpora opened with
  different options (two S3 endpoints, two sets of credentials) never share a
  filesystem, an alias or an identity. Every function here takes the
  ``storage`` to use; None means the process's default one, which
  ``configure`` sets (what a corpus opened without options uses, and Ray
  workers, which are not forked).
- **The Hub.** ``hf://`` files are resolved once per process, then read by
  range from the signed CDN URL the Hub redirects to (``hub.py``: the Hub
  rate-limits ``resolve/`` requests, and walking a tar's headers is ~1,000
  reads). ``fetch`` hands ``hf://`` reads to it.
- **Caches.** What is kept on disk about a remote file (its index, its
  members) is keyed on the URL and the storage's ``place``: a hash of its
  options without anything that looks like a secret (keys, tokens, headers),
  so ``endpoint_url`` tells two servers apart and no credential is ever
  written, not even hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from openwebtext.errors import CorpusError, CorruptMember

if TYPE_CHECKING:
    from openwebtext.source.hub import Resolved

__all__ = [
    "REMOTE_EXTRA",
    "FileInfo",
    "RangeFile",
    "Storage",
    "alias",
    "configure",
    "expand_url",
    "fetch",
    "file_info",
    "filesystem",
    "is_url",
    "placed",
    "redact",
    "redact_options",
    "resolve",
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


#: Option names whose values may be secret (or hold secrets, like ``headers``): never
#: part of a storage's ``place``.
_SECRET_NAMES = re.compile(
    r"secret|token|key|password|passwd|signature|credential|auth|session|cookie|headers",
    re.IGNORECASE,
)


def _public(value: Any, mask: bool = False) -> Any:
    """``value`` (options) without what may be secret, as JSON-safe data: secret-named
    entries left out, or their values shown as ``***`` with ``mask``."""
    if isinstance(value, dict):
        return {
            str(k): "***" if _SECRET_NAMES.search(str(k)) else _public(v, mask)
            for k, v in value.items()
            if mask or not _SECRET_NAMES.search(str(k))
        }
    if isinstance(value, (list, tuple)):
        return [_public(v, mask) for v in value]
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return type(value).__name__  # an object (a session, a client): its kind only


def redact_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Storage options as they may be shown or written: secret-named values as ``***``."""
    shown: dict[str, Any] = _public(options or {}, mask=True)
    return shown


def place(options: dict[str, Any] | None) -> str:
    """A short hash of where ``options`` point (``endpoint_url``, ``anon``, a profile…),
    made without anything that may be secret; "" for no options."""
    public = _public(options or {})
    if not public:
        return ""
    text = json.dumps(public, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def placed(url: str, place: str) -> str:
    """What a cache on disk keys ``url`` by: the URL, and ``place`` when it is not the
    default's (the same URL on another endpoint is another file)."""
    return f"{url}\0{place}" if place else url


class Storage:
    """What one corpus's URLs are read with: fsspec options and the member cache.

    It also keeps what indexing learnt about the corpus's files: the real URL
    behind each alias and each file's identity. Workers forked from the process
    inherit it; pickling it (Ray) keeps all that but the filesystems, which are
    made again where they are used. Its ``repr`` shows no option.

    Args:
        options: Passed as they are to ``fsspec.filesystem`` (for S3:
            ``endpoint_url``, ``anon``, ``key``…).
        cache_dir: Keep the remote members read in this folder (None: no cache).
        cache_size: The member cache's cap in bytes (None: no cap).
    """

    def __init__(
        self,
        options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int | None = None,
    ):
        self.options: dict[str, Any] = dict(options or {})
        self.cache = None if cache_dir is None else CacheSettings(os.fspath(cache_dir), cache_size)
        self.place = place(self.options)
        """What caches on disk are keyed on besides the URL (``place``)."""
        self.aliases: dict[str, str] = {}
        self.identities: dict[str, FileInfo] = {}
        self.filesystems: dict[tuple[int, str], Any] = {}
        self.resolved: dict[str, Resolved] = {}
        """Each ``hf://`` file's signed CDN URL (``hub.resolve_hub``); forked workers inherit it."""
        self.locks: dict[tuple[int, str], threading.Lock] = {}

    def __repr__(self) -> str:
        return f"Storage(place={self.place!r}, cache={self.cache})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["filesystems"] = {}  # event loops and sockets do not travel
        state["resolved"] = {}  # signed URLs stay in the process that asked for them
        state["locks"] = {}
        return state


_default = Storage()


def resolve(storage: Storage | None) -> Storage:
    """``storage``, or the process's default one (set by ``configure``) when None."""
    return _default if storage is None else storage


def alias(url: str, storage: Storage | None = None) -> str:
    """The name units carry for ``url``: without credentials or query string.

    Units' paths end up in errors, skip lists and states, so a signed URL's
    signature must not be one. The real URL stays in ``storage`` (in this
    process and the workers it forks), and ``fetch`` goes back to it.
    """
    shown = redact(url)
    if shown != url:
        with _lock:
            resolve(storage).aliases[shown] = url
    return shown


def _real(url: str, storage: Storage | None = None) -> str:
    return resolve(storage).aliases.get(url, url)


def configure(
    storage_options: dict[str, Any] | None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_size: int | None = None,
) -> None:
    """Set the process's default storage: what a corpus opened without options uses.

    ``storage_options`` go to ``fsspec.filesystem`` as they are (for S3:
    ``endpoint_url``, ``anon``, ``key``…). ``cache_dir`` turns on the local
    cache of remote members (``cache_size`` bytes at most; None: no cap).
    Workers forked afterwards inherit it. Filesystems already made are
    dropped, so the next request uses the new options. A corpus opened with
    its own ``storage_options`` or ``cache_dir`` (``Corpus.open``) is not
    affected: it carries its own ``Storage``.
    """
    fresh = Storage(storage_options, cache_dir, cache_size)
    with _lock:  # what indexing learnt (aliases, identities) stays
        _default.options, _default.cache, _default.place = fresh.options, fresh.cache, fresh.place
        _default.filesystems.clear()
        _default.resolved.clear()  # resolved with the old options (endpoint, token)


def member_cache(storage: Storage | None = None) -> CacheSettings | None:
    """The member cache of ``storage`` (None: the default one, set by ``configure``)."""
    return resolve(storage).cache


def remember(url: str, info: FileInfo, storage: Storage | None = None) -> None:
    """Note what identifies ``url``'s content (the index does, before the workers fork)."""
    resolve(storage).identities[url] = info


def identity(url: str, storage: Storage | None = None) -> FileInfo | None:
    """The size and identity (ETag, generation…) of ``url`` as last indexed, if it was.

    What a cache of anything read from ``url`` (members, counts) should be keyed on.
    """
    return resolve(storage).identities.get(url)


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError:
        raise CorpusError(
            f"reading URLs needs the remote extra: pip install '{REMOTE_EXTRA}'"
        ) from None
    return fsspec


def filesystem(url: str, storage: Storage | None = None) -> Any:
    """This process's fsspec filesystem for ``url``'s protocol, made with ``storage``'s options.

    Raises:
        CorpusError: fsspec, or the protocol's implementation, is not installed.
    """
    fsspec = _fsspec()
    proto = protocol(url)
    key = (os.getpid(), proto)
    store = resolve(storage)
    with _lock:
        fs = store.filesystems.get(key)
        if fs is None:
            options = dict(store.options)
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
            store.filesystems[key] = fs
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


class HTTPStatus(Exception):
    """An HTTP answer that is not the bytes asked for (classified by its ``status``)."""

    def __init__(self, status: int):
        super().__init__(f"HTTP {status}")
        self.status = status


def _classify(exc: BaseException) -> str | None:
    """Why ``exc`` must not be retried, or None if it may pass."""
    if isinstance(exc, _Fatal):
        return exc.reason
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


def file_info(url: str, storage: Storage | None = None) -> FileInfo:
    """The size and identity of a remote file (one request, retried).

    Raises:
        CorpusError: it does not exist, access is refused, or retries ran out.
    """
    fs = filesystem(url, storage)
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


def fetch(
    url: str, start: int, end: int, member: str | None = None, storage: Storage | None = None
) -> bytes:
    """Bytes ``[start, end)`` of ``url``, read with ``storage``: exactly that many, or an error.

    Raises:
        CorruptMember: the file is missing, access is refused, it changed since
            it was indexed, or retries ran out; names the URL (redacted) and ``member``.
    """
    real = _real(url, storage)
    fs = filesystem(real, storage)
    options = _RANGE_OPTIONS.get(protocol(real), {})

    def through_fs() -> bytes:
        data: bytes = fs.cat_file(real, start=start, end=end, **options)
        if len(data) != end - start:
            raise ShortRead(f"got {len(data)} of {end - start} bytes at {start}")
        return data

    call = through_fs
    if protocol(real) == "hf":
        from openwebtext.source.hub import (
            hub_read,  # the Hub's own read path (it builds on this module)
        )

        store = resolve(storage)
        known = identity(url, store)
        call = lambda: hub_read(real, start, end, store, known, through_fs)  # noqa: E731

    try:
        return with_retries(call, f"GET bytes {start}-{end - 1}")
    except _Fatal as exc:
        raise CorruptMember(f"cannot read: {exc.reason}", redact(url), member) from None


def _listed(name: str) -> bool:
    """The rule for folders, as for local ones: not hidden, not ``_``-prefixed."""
    return not name.startswith((".", "_"))


def expand_url(url: str, storage: Storage | None = None) -> list[str]:
    """Turn a URL naming a file, a folder or a glob pattern into sorted file URLs.

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

    def __init__(self, url: str, size: int, window: int = 2048, storage: Storage | None = None):
        self.url = url
        self.storage = storage
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
            data = fetch(self.url, start, end, storage=self.storage)
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
