"""The Hugging Face Hub: each ``hf://`` file resolved once per process, then read by range
from the signed CDN URL the Hub redirects to.

Every ranged read through ``HfFileSystem`` is one ``resolve/`` request, which the Hub
rate-limits (~3,000 per 5 minutes anonymous): indexing OpenWebText's 21 tars walks ~21,000
member headers. So :func:`resolve_hub` asks once per file (huggingface_hub's
``get_hf_file_metadata``: a HEAD that stops at the redirect, the token never sent to the
CDN), this module's table for the storage keeps the answer (forked workers inherit it; a
``Storage`` pickled for Ray does not carry it), and reads go to the
signed URL; a URL that stops working (401/403/404/410) is resolved again once, and content
other than what was indexed (ETag, size) is an error, never a misread. Signed URLs are kept
out of messages and of the HTTP libraries' request logs (``redaction.hide_in_logs``). Without a
redirect off the Hub (the Hub serves the file itself, or a bucket), reads go through
``HfFileSystem`` as before.

Used by ``fetching.fetch`` for ``hf://`` URLs; builds on the modules below it (settings,
filesystems, retries), never on ``fetching``.
"""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import NamedTuple, TypeGuard

from openwebtext.source.filesystems import filesystem
from openwebtext.source.redaction import hide_in_logs
from openwebtext.source.retry import Fatal, HTTPStatus, ShortRead, deadline
from openwebtext.source.settings import LOCK, FileInfo, PerStorage, Storage
from openwebtext.source.validators import CHANGED

__all__ = ["Resolved", "hub_read", "resolve_hub"]


class Resolved(NamedTuple):
    """Where the Hub sends reads of one ``hf://`` file (``resolve_hub``)."""

    location: str | None
    """The signed CDN URL; None: read through ``HfFileSystem`` (no redirect off the Hub)."""
    etag: str | None
    """The Hub's ETag of the content (its sha256 for LFS and Xet files)."""
    size: int | None


class _Stale(HTTPStatus):
    """The signed URL stopped working (expired, or gone): resolve the file again."""


class _NoRanges(Exception):
    """The CDN answered a ranged GET with the whole file."""


#: What a signed URL that stopped working answers (S3 and CloudFront: 403; others 401,
#: 404 or 410). Resolving again says whether the file itself is gone or refused.
_STALE = (401, 403, 404, 410)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

#: Each storage's resolutions, by real URL; forked workers inherit them.
_resolutions: PerStorage[str, Resolved] = PerStorage()
#: One lock per file and process: one resolve at a time, however many threads ask.
_locks: PerStorage[tuple[int, str], threading.Lock] = PerStorage()


def hub_read(
    real: str,
    start: int,
    end: int,
    store: Storage,
    known: FileInfo | None,
    through_fs: Callable[[], bytes],
) -> bytes:
    """One attempt (``with_retries`` makes more) at bytes ``[start, end)`` of an ``hf://`` file."""
    resolved = _resolution(real, store, known)
    for fresh in (False, True):
        if resolved.location is None:
            return through_fs()
        try:
            return _cdn_get(resolved.location, start, end, resolved)
        except _Stale as exc:
            if fresh:  # a URL signed a moment ago: the refusal is real
                raise HTTPStatus(exc.status) from None
            resolved = _resolution(real, store, known, stale=resolved)
        except _NoRanges:
            with LOCK:
                _resolutions.of(store)[real] = resolved._replace(location=None)
            return through_fs()
    raise AssertionError("unreachable: the second attempt returns or raises")


def _resolution(
    real: str, store: Storage, known: FileInfo | None, stale: Resolved | None = None
) -> Resolved:
    """The file's resolution: this process's (or the one it was forked with), or a new one
    if there is none, it is ``stale``, or it names other content than ``known``."""

    def usable(current: Resolved | None) -> TypeGuard[Resolved]:
        return current is not None and current is not stale and _same(current, known)

    resolutions, locks = _resolutions.of(store), _locks.of(store)
    with LOCK:
        current = resolutions.get(real)
        lock = locks.setdefault((os.getpid(), real), threading.Lock())
    if usable(current):
        return current
    with lock:  # one resolve per file, however many threads find it missing or stale
        with LOCK:
            current = resolutions.get(real)
        if usable(current):
            return current
        fresh = resolve_hub(real, store)
        if not _same(fresh, known) or (
            stale is not None and stale.etag and fresh.etag and stale.etag != fresh.etag
        ):
            raise Fatal(CHANGED)
        with LOCK:
            resolutions[real] = fresh
        return fresh


def _same(resolved: Resolved, known: FileInfo | None) -> bool:
    """False if ``resolved`` is surely other content than ``known`` (the indexed file)."""
    if known is None:
        return True
    if resolved.size is not None and resolved.size != known.size:
        return False
    kind, _, value = known.identity.partition(":")
    etag = resolved.etag or ""
    if kind == "sha256" and _SHA256.match(etag) and _SHA256.match(value):
        return etag == value
    return True


def resolve_hub(url: str, storage: Storage | None = None) -> Resolved:
    """Ask the Hub where ``url`` (an ``hf://`` file) is served from: one ``resolve/`` request.

    Made with huggingface_hub's ``hf_hub_url`` and ``get_hf_file_metadata``
    (a HEAD that stops at a redirect off the Hub's host, the token never sent
    there). Errors are huggingface_hub's, for ``with_retries`` to classify.
    """
    from huggingface_hub import HfApi, constants, hf_hub_url

    hide_in_logs()  # before the first request: the redirect's headers are logged at DEBUG
    fs = filesystem(url, storage)
    path = fs.resolve_path(url)
    if getattr(path, "repo_id", None) is None:  # a bucket: no resolve/ redirect to follow
        return Resolved(None, None, None)
    where = hf_hub_url(
        path.repo_id,
        path.path_in_repo,
        repo_type=path.repo_type,
        revision=path.revision,
        endpoint=fs.endpoint,
    )
    api = HfApi(endpoint=fs.endpoint, token=fs.token)
    meta = api.get_hf_file_metadata(url=where, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    etag = (meta.etag or "").removeprefix("W/").strip('"') or None
    location = urllib.parse.urljoin(where, meta.location) if meta.location else None
    if location is None or _origin(location) == _origin(where):
        return Resolved(None, etag, meta.size)  # the Hub serves it itself: each read resolves
    return Resolved(location, etag, meta.size)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return (parts.scheme, (parts.hostname or "").lower(), parts.port)


def _cdn_get(location: str, start: int, end: int, resolved: Resolved) -> bytes:
    """Bytes ``[start, end)`` from a signed URL, with huggingface_hub's HTTP client (its
    proxies, certificates and offline mode), without the token (the signature is the key).
    A response whose ETag is a sha256 other than the resolved content's is refused."""
    from huggingface_hub import constants, get_session

    headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
    timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT
    size = resolved.size
    with get_session().stream("GET", location, headers=headers, timeout=timeout) as response:
        status = response.status_code
        if status in _STALE:
            raise _Stale(status)
        whole = start == 0 and size is not None and end == size
        if status == 200 and not whole:
            raise _NoRanges  # closed unread: it would be the whole file
        if status not in (200, 206):
            raise HTTPStatus(status, response.headers.get("Retry-After"))
        served = (response.headers.get("ETag") or "").strip().removeprefix("W/").strip('"')
        expected = resolved.etag or ""
        if _SHA256.match(served) and _SHA256.match(expected) and served != expected:
            raise Fatal(CHANGED)  # the CDN serves other content than the Hub resolved
        data = bytearray()
        limit = deadline(end - start)
        began = time.monotonic()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) > end - start:
                break
            if time.monotonic() - began > limit:  # a drip: each read within its timeout
                raise TimeoutError(f"no complete answer within {limit:.0f} s")
    if len(data) != end - start:
        raise ShortRead(f"got {len(data)} of {end - start} bytes at {start}")
    return bytes(data)


