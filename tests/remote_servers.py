"""Servers for the remote tests, on 127.0.0.1 only: an HTTP server with byte ranges and faults.

``RangeServer`` serves a folder: ``HEAD`` and ``GET`` with one ``Range``
(``bytes=a-b``), ``ETag`` and ``Last-Modified`` from the file's size and mtime,
and an HTML listing for folders (what fsspec's HTTP filesystem reads). It can
add latency to every request and inject faults, each with its own probability
or as the next N requests: 503s, connections dropped before answering, and
bodies cut short of their ``Content-Length``. It counts requests and bytes sent.

It can also misbehave as hostile servers do (``Misbehaviour``, the server's ``misbehave``):
drip a body one byte every N s, stall after the headers, ignore ``Range`` (200 with the
whole file), answer 429 with ``Retry-After``, send neither ``ETag`` nor ``Last-Modified``, send
a weak ``ETag`` (and refuse every ``If-Match`` but the strong tag), or ignore ``If-Match``;
a file changed between index and read is one the test rewrites (``If-Match`` is honoured:
412 when the ETag is not the file's, unless told to ignore it).
"""

from __future__ import annotations

import email.utils
import html
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest


class Faults:
    """What the server does wrong; ``next_*`` counters fire first, then the rates."""

    def __init__(self, seed: int = 0) -> None:
        self.rate_503 = 0.0
        self.rate_drop = 0.0
        self.rate_short = 0.0
        self.next_503 = 0
        self.next_drop = 0
        self.next_short = 0
        self.status: int | None = None  # answer every request with this status (e.g. 403)
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def draw(self) -> str | None:
        with self._lock:
            if self.status is not None:
                return "status"
            for kind in ("503", "drop", "short"):
                if getattr(self, f"next_{kind}") > 0:
                    setattr(self, f"next_{kind}", getattr(self, f"next_{kind}") - 1)
                    return kind
            r = self._random.random()
            for kind in ("503", "drop", "short"):
                rate = getattr(self, f"rate_{kind}")
                if r < rate:
                    return kind
                r -= rate
            return None


@dataclass
class Misbehaviour:
    """How a ``RangeServer`` misbehaves (all off by default)."""

    drip: float = 0.0
    """Seconds between the bytes of every GET body (0: send at once)."""
    stall: float = 0.0
    """Seconds to wait after a GET's headers (before a HEAD's), then answer."""
    ignore_range: bool = False
    """Answer a ranged GET with 200 and the whole file."""
    shift_range: int = 0
    """Answer a ranged GET from that many bytes on with 206 and the range that many bytes
    earlier (a broken proxy)."""
    throttle: int = 0
    """Answer the next ``throttle`` requests with 429."""
    throttle_until: float = 0.0
    """Answer 429 until this ``time.monotonic()``."""
    retry_after: str | None = "1"
    """The ``Retry-After`` header of a 429 (None: none)."""
    validators: bool = True
    """Send ``ETag`` and ``Last-Modified``."""
    etag: bool = True
    """Send ``ETag`` (False: ``Last-Modified`` alone)."""
    weak_etag: bool = False
    """Send the ETag weak (``W/"…"``, as many CDNs do), and answer 412 to an ``If-Match``
    of anything but the strong tag (weak tags never match: RFC 9110's strong comparison)."""
    weak_etag_on_get: bool = False
    """Send the ETag strong to a HEAD and weak with a GET's body (a CDN that weakens what it
    passes on); ``If-Match`` of the strong tag is still honoured."""
    ignore_if_match: bool = False
    """Serve whatever the file holds now, whatever ``If-Match`` says."""
    understate: int = 0
    """Say a GET body's ``Content-Length`` that many bytes short of what is sent (the rest
    left on a kept-alive connection)."""
    redirect_loop: bool = False
    """Answer every request with a redirect to its own URL."""

    def throttled(self) -> bool:
        if self.throttle > 0:
            self.throttle -= 1
            return True
        return time.monotonic() < self.throttle_until


def _pause(bad: Misbehaviour, what: str) -> None:
    """Wait ``bad``'s ``what`` seconds, re-read as it goes (a server closing sets it to 0)."""
    began = time.monotonic()
    while (left := getattr(bad, what) - (time.monotonic() - began)) > 0:
        time.sleep(min(left, 0.05))


def send_bytes(
    h: BaseHTTPRequestHandler,
    path: Path,
    head: bool,
    fault: str | None,
    headers: dict[str, str],
    sent: Callable[[int], None],
    misbehave: Misbehaviour | None = None,
) -> None:
    """Answer with the bytes of ``path``, one ``Range`` honoured (206, or 416 past the end),
    cut short of their ``Content-Length`` when ``fault`` is ``"short"``; ``sent(n)`` is called
    before the bytes are written (the client may be done before ``write`` returns).
    ``misbehave`` may drip the body, stall after the headers or ignore the range."""
    bad = misbehave or Misbehaviour()
    size = path.stat().st_size
    start, end, status = 0, size, 200
    spec = None if bad.ignore_range else h.headers.get("Range")
    if spec and spec.startswith("bytes="):
        a, _, b = spec[6:].partition("-")
        start = int(a) if a else max(0, size - int(b))
        end = min(size, int(b) + 1) if a and b else size
        if bad.shift_range and start >= bad.shift_range:
            start, end = max(0, start - bad.shift_range), max(0, end - bad.shift_range)
        if start >= size:
            h.send_response(416)
            h.send_header("Content-Range", f"bytes */{size}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        status = 206
    h.send_response(status)
    said = end - start - (0 if head else bad.understate)
    h.send_header("Content-Length", str(max(0, said)))
    h.send_header("Accept-Ranges", "bytes")
    h.send_header("Content-Type", "application/octet-stream")
    for key, val in headers.items():
        h.send_header(key, val)
    if status == 206:
        h.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
    if fault == "short":
        h.close_connection = True
    if head and bad.stall:
        _pause(bad, "stall")
    h.end_headers()
    if head:
        return
    with open(path, "rb") as f:
        data = os.pread(f.fileno(), end - start, start)
    if fault == "short":
        data = data[: len(data) // 2]
    sent(len(data))
    if bad.stall:
        h.wfile.flush()
        _pause(bad, "stall")
    if bad.drip:
        for k in range(len(data)):
            h.wfile.write(data[k : k + 1])
            h.wfile.flush()
            _pause(bad, "drip")
        return
    h.wfile.write(data)
    if fault == "short":
        h.wfile.flush()
        h.connection.shutdown(2)


class Loopback:
    """A threaded HTTP server on 127.0.0.1 (a port the system picks), served while in ``with``.

    Subclasses call ``_bind(handler)`` once their state is set.
    """

    httpd: ThreadingHTTPServer
    thread: threading.Thread

    @classmethod
    def serving(cls, handler: type[BaseHTTPRequestHandler]) -> Loopback:
        """A plain server of ``handler``'s requests."""
        server = cls()
        server._bind(handler)
        return server

    def _bind(self, handler: type[BaseHTTPRequestHandler]) -> None:
        # Headers and body are two writes: with Nagle's algorithm on, the body waits for the
        # client's delayed ACK of the headers (~40 ms a request), as no real server makes it.
        handler.disable_nagle_algorithm = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        # (polled every 20 ms, not 0.5 s: ``shutdown`` waits for the poll to see it)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Any:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class RangeServer(Loopback):
    """A threaded HTTP server for ``root`` on 127.0.0.1 (a context manager)."""

    def __init__(self, root: Path, latency: float = 0.0, seed: int = 0) -> None:
        self.root = root
        self.latency = latency
        self.faults = Faults(seed)
        self.misbehave = Misbehaviour()
        self.requests = 0
        self.gets = 0
        self.bytes_sent = 0
        self.injected = 0
        self.in_flight = 0
        self.max_in_flight = 0  # GETs being answered at once, at most
        self.refused_if_match = 0  # 412s answered
        self.if_matches: list[str | None] = []  # each GET's If-Match header (None: none)
        self.sort_links = False  # a folder's page links to itself, sorted: Apache's ?C=N;O=D
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                server._handle(self, head=True)

            def do_GET(self) -> None:
                server._handle(self, head=False)

        self._bind(Handler)

    def __exit__(self, *exc: object) -> None:
        self.misbehave.drip = self.misbehave.stall = 0.0  # let answers in progress end
        super().__exit__(*exc)

    def reset_counts(self) -> None:
        with self._lock:
            self.requests = self.gets = self.bytes_sent = self.injected = 0
            self.max_in_flight = 0
            self.refused_if_match = 0
            self.if_matches.clear()

    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        with self._lock:
            self.requests += 1
            if not head:
                self.gets += 1
                self.if_matches.append(h.headers.get("If-Match"))
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._answer(h, head)
        finally:
            if not head:
                with self._lock:
                    self.in_flight -= 1

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        if self.latency:
            time.sleep(self.latency)
        with self._lock:
            throttled = self.misbehave.throttled()
        if throttled:
            h.send_response(429)
            if self.misbehave.retry_after is not None:
                h.send_header("Retry-After", self.misbehave.retry_after)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if self.misbehave.redirect_loop:
            h.send_response(302)
            h.send_header("Location", h.path)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        fault = self.faults.draw()
        if fault is not None:
            with self._lock:
                self.injected += 1
        if fault == "status":
            self._empty(h, self.faults.status or 500)
            return
        if fault == "503":
            self._empty(h, 503)
            return
        if fault == "drop":
            h.close_connection = True
            h.connection.shutdown(2)  # no answer at all: the client sees a reset connection
            return
        path = self.root / unquote(h.path.split("?", 1)[0]).lstrip("/")  # (as servers do)
        if path.is_dir():
            self._listing(h, path, head)
            return
        if not path.is_file():
            self._empty(h, 404)
            return
        st = path.stat()
        etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
        wanted = h.headers.get("If-Match")
        honoured = not self.misbehave.ignore_if_match
        if honoured and wanted is not None and wanted.strip() not in ("*", etag):
            with self._lock:
                self.refused_if_match += 1
            self._empty(h, 412)
            return
        weakened = self.misbehave.weak_etag_on_get and not head
        headers = {
            "ETag": f"W/{etag}" if self.misbehave.weak_etag or weakened else etag,
            "Last-Modified": email.utils.formatdate(st.st_mtime, usegmt=True),
        }
        if not self.misbehave.etag:
            del headers["ETag"]
        if not self.misbehave.validators:
            headers = {}
        try:
            send_bytes(h, path, head, fault, headers, self._sent, self.misbehave)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a deadline)
            h.close_connection = True

    def _sent(self, n: int) -> None:
        with self._lock:
            self.bytes_sent += n

    def _empty(self, h: BaseHTTPRequestHandler, status: int) -> None:
        h.send_response(status)
        h.send_header("Content-Length", "0")
        h.end_headers()

    def _listing(self, h: BaseHTTPRequestHandler, path: Path, head: bool) -> None:
        base = "/" + str(path.relative_to(self.root)).strip(".").strip("/")
        base = base.rstrip("/") + "/"
        links = "".join(
            f'<a href="{html.escape(quote(base + p.name))}">{html.escape(p.name)}</a>\n'
            for p in sorted(path.iterdir())
        )
        if self.sort_links:  # (Apache's autoindex: sort links, the parent, the folder itself)
            sorts = ("?C=N;O=D", "?C=M;O=A", "?C=S;O=A", f"{base}#top", base, "/")
            links = "".join(f'<a href="{html.escape(s)}">x</a>\n' for s in sorts) + links
        body = f"<html><body>\n{links}</body></html>\n".encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)


# -- what the remote tests share ---------------------------------------------------------


@pytest.fixture(autouse=True)
def isolated_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh cache folder, quick retries, and no storage options left behind (autouse in
    every test file that imports it)."""
    from openwebtext.source import configure, retry

    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(retry, "RETRY_BASE", 0.005)
    monkeypatch.setattr(retry, "RETRY_CAP", 0.05)
    configure(None)
    yield
    configure(None)


@pytest.fixture
def http(small_corpus: Path) -> Iterator[RangeServer]:
    """A ``RangeServer`` of the small corpus."""
    with RangeServer(small_corpus) as server:
        yield server


def local_stream(small_corpus: Path, **options: Any) -> list[str]:
    """The stream of the local copy, to compare a remote one with."""
    from openwebtext import Corpus
    from support import texts

    return texts(Corpus.open(str(small_corpus)), **options)
