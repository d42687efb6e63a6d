"""Byte ranges of remote files: ``fetch`` (exactly the bytes asked for, or an error) and
``RangeFile``, a read-only file over it for walking tar headers. The one module that knows
both fsspec and the Hub: ``hf://`` reads go to ``hub.hub_read`` (the signed CDN URL the Hub
redirects to), ``http(s)://`` to :func:`_http_range` (one GET on fsspec's session, its body
capped at the bytes asked for, ``If-Match`` the indexed ETag), ``s3://`` to
:func:`_s3_range` (``GetObject`` with ``IfMatch``), ``gs://`` to gcsfs's ``cat_file`` of the
indexed ``generation=``, every other URL to its fsspec filesystem's ``cat_file``; all under
``with_retries``, each attempt within its ``deadline``. Every HTTP and S3 response's ETag or
Last-Modified, and the file size its ``Content-Range`` states, are compared with the indexed
ones (``validators``).
A server that answers a ranged request with the whole file is told at once ("ignores
byte ranges"), never retried, unless the file is small (``WHOLE_FILE_BYTES``): then it is
read whole once, kept in the ``Storage``, and every range of it cut from that copy.
"""

from __future__ import annotations

import logging
from typing import Any

from openwebtext.errors import OutOfResources, Unreadable, Unsupported, ran_out
from openwebtext.source.filesystems import filesystem, info_of, within
from openwebtext.source.hub import hub_read
from openwebtext.source.redaction import redact
from openwebtext.source.retry import (
    Fatal,
    HTTPStatus,
    ShortRead,
    Stalled,
    deadline,
    host_of,
    with_retries,
)
from openwebtext.source.settings import LOCK, FileInfo, PerStorage, Storage, protocol, resolve
from openwebtext.source.validators import (
    CHANGED,
    CHANGED_OR_GONE,
    content_range,
    indexed_generation,
    resized,
    same_file,
    strong_etag,
)

__all__ = ["WHOLE_FILE_BYTES", "RangeFile", "fetch"]

log = logging.getLogger("openwebtext")

#: Per protocol, what ``cat_file`` needs to fetch exactly the range asked. HfFileSystem's
#: ``cat_file`` reads through a buffered file whose default cache reads a block (5 MB)
#: past the range: several times a member's own bytes, for every member.
_RANGE_OPTIONS: dict[str, dict[str, Any]] = {"hf": {"cache_type": "none"}}

#: Small files of servers that ignore byte ranges, read whole once per storage (by real URL and
#: the identity indexed: a corpus opened on the file after it changed reads its own body).
_bodies: PerStorage[tuple[str, FileInfo | None], bytes] = PerStorage()


def fetch(
    url: str, start: int, end: int, member: str | None = None, storage: Storage | None = None
) -> bytes:
    """Bytes ``[start, end)`` of ``url``, read with ``storage``: exactly that many, or an error.

    Raises:
        Unreadable: the file is missing, access is refused, it changed since it was
            indexed, or retries ran out; names the URL (redacted) and ``member``.
    """
    if end <= start:  # (no byte: no request, whose range "bytes=0--1" a server refuses)
        return b""
    store = resolve(storage)
    real = store.real_url(url)
    try:
        fs = filesystem(real, store)
    except Unsupported as exc:  # (an extra not installed: this URL's, said)
        raise Unsupported(exc.message, redact(url), member) from exc.__cause__
    proto = protocol(real)
    options = _RANGE_OPTIONS.get(proto, {})
    known = store.identity(url)

    def through_fs() -> bytes:
        data: bytes = within(fs, end - start, fs.cat_file, real, start=start, end=end, **options)
        return _exactly(data, start, end)

    def through_fs_checked() -> bytes:  # (no read conditional on a validator: asked after it)
        data = through_fs()
        if known is not None:
            fs.invalidate_cache(real)  # (an info from a folder's listing, cached, says nothing)
            if info_of(within(fs, 0, fs.info, real)) != known:
                raise Fatal(CHANGED)
        return data

    def through_gcs() -> bytes:
        # gcsfs's cat_file takes no ETag condition: the read names the indexed generation,
        # which a replaced object no longer has (404), unless the bucket keeps versions
        # (then the bytes are the indexed ones).
        try:
            data: bytes = within(
                fs, end - start, fs.cat_file, real, start=start, end=end, generation=generation
            )
        except FileNotFoundError:
            raise Fatal(CHANGED_OR_GONE) from None
        return _exactly(data, start, end)

    def through_http() -> bytes:
        bodies = _bodies.of(store)
        with LOCK:
            body = bodies.get((real, known))
        if body is None:
            try:
                data = within(fs, end - start, _http_range, fs, real, start, end, known, sync=True)
                return _exactly(data, start, end)
            except _WholeFile as whole:
                body = whole.body
            log.warning(
                "%s: the server ignores byte ranges; the file (%d bytes) is read whole, once "
                "in each process that reads it",
                redact(url),
                len(body),
            )
            with LOCK:
                bodies[(real, known)] = body
        return _exactly(body[start:end], start, end)

    def through_s3() -> bytes:
        data = within(fs, end - start, _s3_range, fs, real, start, end, known, sync=True)
        return _exactly(data, start, end)

    call = through_fs_checked  # (file://, sftp://…; the others ask for the indexed version)
    generation = indexed_generation(known)
    if proto in ("gs", "gcs") and generation is not None:
        call = through_gcs
    if proto in ("http", "https"):
        call = through_http
    if proto in ("s3", "s3a") and hasattr(fs, "get_s3"):
        call = through_s3
    if proto == "hf":
        call = lambda: hub_read(real, start, end, store, known, through_fs)  # noqa: E731

    try:
        host = host_of(real, store.place)
        return with_retries(call, f"GET bytes {start}-{end - 1}", host, deadline(end - start))
    except Fatal as exc:
        if ran_out(exc.last):  # (the machine's: never a skip)
            raise OutOfResources.reading(redact(url), member, exc.reason) from None
        raise Unreadable(f"cannot read: {exc.reason}", redact(url), member) from None


def _exactly(data: bytes, start: int, end: int) -> bytes:
    if len(data) > end - start:
        raise Fatal(_NO_RANGES.format(got=len(data), asked=end - start))
    if len(data) != end - start:
        raise ShortRead(f"got {len(data)} of {end - start} bytes at {start}")
    return data


_NO_RANGES = (
    "the server ignores byte ranges (it answered {got} bytes for a request of {asked}); "
    "serve the file from a server that honours Range requests, or download it"
)
#: A file this small, from a server that ignores byte ranges, is downloaded whole once and
#: its ranges cut from it; a larger one is an error at once (nothing of it is read).
WHOLE_FILE_BYTES = 8 << 20


class _WholeFile(Exception):
    """A server that ignores byte ranges sent a small file whole: ``body``."""

    def __init__(self, body: bytes):
        super().__init__(f"{len(body)} bytes")
        self.body = body


async def _http_range(fs: Any, url: str, start: int, end: int, known: FileInfo | None) -> bytes:
    """Bytes ``[start, end)`` by one GET on ``fs``'s (fsspec HTTP) session: never more than
    asked for, and only of the content indexed (``If-Match`` its ETag: 412 if it changed; the
    answer's validators and stated size compared too)."""
    import aiohttp

    kwargs = dict(fs.kwargs)
    headers = dict(kwargs.pop("headers", None) or {})
    headers["Range"] = f"bytes={start}-{end - 1}"
    headers["Accept-Encoding"] = "identity"
    etag = strong_etag(known)
    if etag is not None:
        headers["If-Match"] = etag
    session = await fs.set_session()
    try:
        async with session.get(fs.encode_url(url), headers=headers, **kwargs) as response:
            return await _answer(response, url, start, end, known)
    except aiohttp.ServerTimeoutError as exc:  # fsspec would name it the request's deadline
        raise _stalled(exc, kwargs.get("timeout") or session.timeout) from None


async def _answer(response: Any, url: str, start: int, end: int, known: FileInfo | None) -> bytes:
    """The bytes of ``_http_range``'s ``response``, or why it is not them."""
    status = response.status
    if status == 404:
        raise FileNotFoundError(url)
    if status == 412:
        raise Fatal(CHANGED)
    if status == 416:  # not one byte of a range that was in the file when it was indexed
        stated = resized(known, content_range(response.headers.get("Content-Range"))[1])
        raise Fatal(stated or f"{CHANGED}: the server holds no byte from {start} on (HTTP 416)")
    if status >= 400:
        raise HTTPStatus(status, response.headers.get("Retry-After"))
    if not same_file(known, response.headers.get("ETag"), response.headers.get("Last-Modified")):
        raise Fatal(CHANGED)  # a server that ignores If-Match
    length = response.headers.get("Content-Length")
    got = int(length) if length and length.isdigit() else None
    answered, total = content_range(response.headers.get("Content-Range"))
    encoding = response.headers.get("Content-Encoding", "identity").lower()
    if status != 206 and encoding == "identity":
        total = got  # the whole file, as it is now
    changed = resized(known, total)
    if changed is not None and encoding != "identity":  # sizes of the encoded file
        raise Fatal(f"the server answered ranges of the file {encoding}-encoded, not as it is")
    if changed is not None:
        raise Fatal(changed)
    whole = start == 0 and known is not None and end == known.size
    if status != 206 and not whole:
        if got is None or got > WHOLE_FILE_BYTES or (known and got != known.size):
            raise Fatal(_NO_RANGES.format(got=got or "the whole file's", asked=end - start))
        body = await _capped(response, got)
        if len(body) != got:
            raise ShortRead(f"got {len(body)} of the file's {got} bytes")
        raise _WholeFile(body)
    if status == 206 and answered is not None and answered != start:
        raise Fatal(
            f"the server answered bytes from {answered} to a request for bytes from {start} "
            "(it does not honour byte ranges)"
        )
    if status == 206 and encoding == "identity" and got is not None and got < end - start:
        # Never read: aiohttp reads the length said, and gives the connection back with the
        # rest of the body on it, which the next request on it would read as its answer.
        response.close()
        raise ShortRead(f"the server said {got} bytes for a range of {end - start}")
    return await _capped(response, end - start)


def _stalled(exc: BaseException, timeout: Any) -> Stalled:
    """aiohttp's socket timeout ``exc`` as what it is: no connection, or nothing received,
    for the seconds of ``timeout`` (an ``aiohttp.ClientTimeout``) it names."""
    connect = "ConnectionTimeout" in type(exc).__name__ or "onnection timeout" in str(exc)
    seconds = getattr(timeout, "sock_connect" if connect else "sock_read", None)
    took = f"{seconds:g} s" if isinstance(seconds, (int, float)) else "its timeout"
    if connect:
        return Stalled(f"no connection within {took} (the connect timeout)")
    return Stalled(f"nothing received for {took} (the socket's read timeout)")


async def _s3_range(fs: Any, url: str, start: int, end: int, known: FileInfo | None) -> bytes:
    """Bytes ``[start, end)`` of an S3 object by one ``GetObject`` on ``fs`` (s3fs), with
    ``IfMatch`` its indexed ETag: an object replaced since it was indexed is an error, and
    so is one whose ``ContentRange`` states another size. One attempt is one request of the
    client (its own retries, botocore's, aside): not s3fs's loop of retries, which would
    spend the attempt's whole deadline on a server that resets or slows down."""
    from s3fs.errors import translate_boto_error

    bucket, key, version = fs.split_path(url)
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "Range": f"bytes={start}-{end - 1}"}
    if version:
        kwargs["VersionId"] = version
    etag = strong_etag(known)
    if etag is not None:
        kwargs["IfMatch"] = etag
    await fs.set_session()
    client = await fs.get_s3(bucket)
    # What s3fs adds to each of its calls (requester pays, SSE-C keys…), where GetObject takes it.
    takes = client.meta.service_model.operation_model("GetObject").input_shape.members
    extra = {**fs.s3_additional_kwargs, **fs.req_kw}
    kwargs = {**{k: v for k, v in extra.items() if k in takes and v is not None}, **kwargs}
    try:
        response = await client.get_object(**kwargs)
    except Exception as exc:
        answer = getattr(exc, "response", None)
        code = answer.get("Error", {}).get("Code") if isinstance(answer, dict) else None
        if code in ("PreconditionFailed", "412") or "pre-condition" in str(exc).lower():
            raise Fatal(CHANGED) from None
        error = translate_boto_error(exc)  # as s3fs raises them (FileNotFoundError…)
        if error is exc:
            raise
        raise error from exc
    body = response["Body"]
    try:
        if not same_file(known, response.get("ETag"), response.get("LastModified")):
            raise Fatal(CHANGED)  # an S3-compatible store that ignores IfMatch
        changed = resized(known, content_range(response.get("ContentRange"))[1])
        if changed is not None:
            raise Fatal(changed)
        data: bytes = await body.read()
    finally:
        body.close()
    return data


async def _capped(response: Any, size: int) -> bytes:
    """A response's body, read up to one chunk past ``size`` bytes (what follows is never
    read: a longer body is told by its length)."""
    data = bytearray()
    async for chunk in response.content.iter_chunked(1 << 16):
        data += chunk
        if len(data) > size:
            break
    return bytes(data)


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
