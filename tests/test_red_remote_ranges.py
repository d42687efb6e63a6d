"""Remote ranges against servers that lie about a file's size or stall once: a ranged
answer whose ``Content-Range`` states another size than the indexed one is the file changed
(HTTP and S3), never a file read short; one stall, even one as long as the whole retry
budget, is retried, and a request that runs out says which timeout fired and how often."""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

import remote_servers
from openwebtext import Corpus
from openwebtext.errors import CorpusError, OWTError
from openwebtext.source import filesystems, retry
from openwebtext.source.settings import resolve
from remote_servers import Loopback, RangeServer, local_stream
from support import texts

pytest.importorskip("fsspec")
aiohttp = pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote

isolated_storage = remote_servers.isolated_storage  # fixture

LINES = [{"text": f"document {k} " + "word " * (k % 7 + 3)} for k in range(30)]


def _jsonl(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "a.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return path


class _Lying(RangeServer):
    """A ``RangeServer`` whose HEAD says a file is ``head_delta`` bytes longer than it is
    (its ranged GETs state the true size in ``Content-Range``), and whose next ``stalls``
    GETs send their headers, then nothing until the server closes."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.head_delta = 0
        self.stalls = 0
        self.stalled = 0
        self.closing = threading.Event()

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        super().__exit__(*exc)

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        if head and self.head_delta:
            send = h.send_header

            def send_header(key: str, value: str) -> None:
                if key == "Content-Length":
                    value = str(int(value) + self.head_delta)
                send(key, value)

            h.send_header = send_header  # type: ignore[method-assign]
            try:
                super()._answer(h, head)
            finally:
                del h.send_header  # the handler answers the connection's next requests too
            return
        if not head:
            with self._lock:
                stall = self.stalls > 0
                self.stalls -= stall
                self.stalled += stall
            if stall:  # no Content-Range, no validators: nothing is told but the stall
                first, _, last = h.headers["Range"].removeprefix("bytes=").partition("-")
                h.send_response(206)
                h.send_header("Content-Length", str(int(last) - int(first) + 1))
                h.end_headers()
                h.wfile.flush()
                self.closing.wait(60)
                h.close_connection = True
                return
        super()._answer(h, head)


@pytest.fixture
def short_socket_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP's socket read timeout is 1 s (20 s by default), as long as the retry budget."""
    monkeypatch.setattr(
        filesystems,
        "_http_timeout",
        lambda: aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=1),
    )
    monkeypatch.setattr(retry, "RETRY_SECONDS", 1.0)


# -- Content-Range's size against the indexed one ---------------------------------------------


def test_a_head_short_by_the_last_line_is_an_error_never_a_document_lost(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "served")
    last = len(json.dumps(LINES[-1])) + 1
    with _Lying(path.parent) as server:
        url = server.url + "/a.jsonl"
        server.head_delta = -last
        with pytest.raises(CorpusError, match="changed since it was indexed") as info:
            texts(Corpus.open(url), workers=0, shuffle=False)
        assert info.value.path == url
        assert f"holds {path.stat().st_size} bytes" in str(info.value)
        server.head_delta = 0
        got = texts(Corpus.open(url), workers=0, shuffle=False)
    assert got == [line["text"] for line in LINES]


def test_a_size_stated_by_a_read_other_than_the_indexed_one_fails_the_member(
    small_corpus: Path,
) -> None:
    """The HEAD was right when the corpus was opened; later answers state another size."""
    with _Lying(small_corpus) as server:
        corpus = Corpus.open(server.url + "/urlsf_subset00.tar")
        size = (small_corpus / "urlsf_subset00.tar").stat().st_size
        store, path = resolve(corpus.storage), corpus.units[0].path
        known = store.identity(path)
        assert known is not None and known.size == size
        store.remember(path, known._replace(size=size + 512))  # as if its HEAD had said 512 more
        with pytest.raises(OWTError, match="changed since it was indexed") as info:
            texts(corpus, seed=0, workers=0)
        assert f"holds {size} bytes, not the {size + 512} indexed" in str(info.value)


def test_a_file_cut_short_past_a_member_s_start_is_said_changed(
    small_corpus: Path, tmp_path: Path
) -> None:
    """A server that sends no validators answers a range past the file's end with 416: that
    is the file changed since it was indexed, and the size its Content-Range states."""
    root = tmp_path / "served"
    root.mkdir()
    (root / "urlsf_subset00.tar").write_bytes((small_corpus / "urlsf_subset00.tar").read_bytes())
    with RangeServer(root) as server:
        server.misbehave.validators = False
        corpus = Corpus.open(server.url + "/")
        size = (root / "urlsf_subset00.tar").stat().st_size
        (root / "urlsf_subset00.tar").write_bytes(bytes(100))  # before the first member's data
        with pytest.raises(OWTError, match="changed since it was indexed") as info:
            texts(corpus, seed=0, workers=0)
    assert f"holds 100 bytes, not the {size} indexed" in str(info.value)


def test_no_byte_of_a_remote_file_is_read_without_a_request(tmp_path: Path) -> None:
    """An empty file read whole (a remote run's ``meta.json``) is no bytes; its range
    ``bytes=0--1`` was refused with a 416, said as the file having changed."""
    from openwebtext.source import fetch

    (tmp_path / "empty").write_bytes(b"")
    with RangeServer(tmp_path) as server:
        server.reset_counts()
        assert fetch(server.url + "/empty", 0, 0) == b""
        assert server.requests == 0


class _S3Proxy(Loopback):
    """A proxy in front of moto's S3: ``head_delta`` added to every HEAD's Content-Length;
    the next ``resets`` ranged GETs reset, the next ``stalls`` ones stall until it closes;
    ``ranged`` counts the ranged GETs of each range."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.split("://", 1)[1]
        self.head_delta = 0
        self.resets = self.stalls = 0
        self.ranged: dict[str, int] = {}
        self.lock = threading.Lock()
        self.closing = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy.forward(self, "GET")

            def do_HEAD(self) -> None:
                proxy.forward(self, "HEAD")

        self._bind(Handler)

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        super().__exit__(*exc)

    def forward(self, h: BaseHTTPRequestHandler, method: str) -> None:
        fault = None
        if method == "GET" and h.headers.get("Range"):
            with self.lock:
                asked = h.headers["Range"]
                self.ranged[asked] = self.ranged.get(asked, 0) + 1
                if self.resets > 0:
                    self.resets, fault = self.resets - 1, "reset"
                elif self.stalls > 0:
                    self.stalls, fault = self.stalls - 1, "stall"
        if fault == "reset":
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if fault == "stall":
            self.closing.wait(60)
            h.close_connection = True
            return
        headers = {k: v for k, v in h.headers.items() if k.lower() != "host"}
        headers["Host"] = self.upstream
        upstream = http.client.HTTPConnection(self.upstream, timeout=30)
        upstream.request(method, h.path, headers=headers)
        answer = upstream.getresponse()
        body = answer.read()
        skip = ("content-length", "transfer-encoding", "connection", "server", "date")
        h.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in skip:
                h.send_header(key, value)
        length = int(answer.getheader("Content-Length") or 0) if method == "HEAD" else len(body)
        h.send_header("Content-Length", str(length + (self.head_delta if method == "HEAD" else 0)))
        h.end_headers()
        if method == "GET":
            h.wfile.write(body)
        upstream.close()


@pytest.fixture
def s3_proxy(s3_endpoint: str) -> Iterator[tuple[_S3Proxy, Callable[[str, bytes], str]]]:
    """A ``_S3Proxy`` of moto, and ``put(key, data)``: an object of bucket ``owt`` (its URL)."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    keys: list[str] = []

    def put(key: str, data: bytes) -> str:
        client.put_object(Bucket="owt", Key=key, Body=data)
        keys.append(key)
        return f"s3://owt/{key}"

    with _S3Proxy(s3_endpoint) as proxy:
        yield proxy, put
    for key in keys:
        client.delete_object(Bucket="owt", Key=key)


def test_an_s3_head_short_by_the_last_line_is_an_error_never_a_document_lost(
    tmp_path: Path, s3_proxy: tuple[_S3Proxy, Callable[[str, bytes], str]]
) -> None:
    proxy, put = s3_proxy
    url = put("red-ranges/a.jsonl", _jsonl(tmp_path).read_bytes())
    options = {"endpoint_url": proxy.url}
    proxy.head_delta = -(len(json.dumps(LINES[-1])) + 1)
    with pytest.raises(CorpusError, match="changed since it was indexed") as info:
        texts(Corpus.open(url, storage_options=options), workers=0, shuffle=False)
    assert info.value.path == url
    proxy.head_delta = 0
    got = texts(Corpus.open(url, storage_options=options), workers=0, shuffle=False)
    assert got == [line["text"] for line in LINES]


# -- one stall is retried, whatever it took -----------------------------------------------------


def test_one_stall_as_long_as_the_retry_budget_is_retried(
    small_corpus: Path, short_socket_timeout: None
) -> None:
    with _Lying(small_corpus) as server:
        corpus = Corpus.open(server.url + "/urlsf_subset00.tar")
        server.stalls = 1
        got = texts(corpus, seed=0, workers=0)
        assert server.stalled == 1
    assert got == local_stream(small_corpus / "urlsf_subset00.tar", seed=0)


def test_a_server_that_stalls_every_answer_fails_after_a_retry_naming_the_socket_timeout(
    small_corpus: Path, short_socket_timeout: None
) -> None:
    with _Lying(small_corpus) as server:
        corpus = Corpus.open(server.url + "/urlsf_subset00.tar")
        server.stalls = 1000
        with pytest.raises(OWTError) as info:
            texts(corpus, seed=0, workers=0)
    message = str(info.value)
    assert "nothing received for 1 s (the socket's read timeout)" in message
    assert "failed 2 times" in message and "no complete answer" not in message


class _Clock:
    """The retry module's ``time.monotonic`` and ``time.sleep``; an attempt moves the clock on
    by what it took, with no real waiting."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(retry.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(retry.time, "sleep", self.sleep)
        monkeypatch.setattr(retry.random, "uniform", lambda a, b: b)

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def attempts(self, *outcomes: tuple[float, BaseException | None]) -> Callable[[], str]:
        """A call whose attempts take these seconds, then raise this (None: succeed)."""
        left = list(outcomes)

        def call() -> str:
            took, error = left.pop(0)
            self.now += took
            if error is not None:
                raise error
            return "done"

        return call


def test_every_transient_failure_is_retried_however_long_it_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(monkeypatch)
    stall = TimeoutError("nothing received for 20 s")
    reset = ConnectionResetError("reset by peer")
    assert retry.with_retries(clock.attempts((20.0, stall), (0.0, None)), "GET") == "done"
    assert retry.with_retries(clock.attempts((24.0, TimeoutError()), (0.0, None)), "GET")
    assert retry.with_retries(clock.attempts((0.1, reset), (20.0, stall), (0.1, None)), "GET")


def test_a_request_that_keeps_stalling_ends_after_its_retry_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(monkeypatch)
    stall = TimeoutError("nothing received for 20 s")
    call = clock.attempts(*[(20.0, stall)] * 6)
    with pytest.raises(retry.Fatal) as info:
        retry.with_retries(call, "GET bytes 0-9")
    assert re.search(
        r"GET bytes 0-9 failed 2 times in 40\.\d s; last: TimeoutError: nothing received for 20 s",
        info.value.reason,
    )


def test_an_s3_stall_as_long_as_the_retry_budget_is_retried(
    small_corpus: Path,
    s3_proxy: tuple[_S3Proxy, Callable[[str, bytes], str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy, put = s3_proxy
    url = put("red-ranges/a.tar", (small_corpus / "urlsf_subset00.tar").read_bytes())
    corpus = Corpus.open(url, storage_options={"endpoint_url": proxy.url})
    monkeypatch.setattr(retry, "REQUEST_FLOOR", 3.0)  # a request's deadline: the budget
    monkeypatch.setattr(retry, "RETRY_SECONDS", 3.0)
    proxy.stalls = 1
    assert texts(corpus, seed=0, workers=0) == local_stream(small_corpus / "urlsf_subset00.tar")


def test_s3_resets_are_told_as_resets_each_attempt_one_request(
    small_corpus: Path,
    s3_proxy: tuple[_S3Proxy, Callable[[str, bytes], str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attempts a message counts are the requests made: s3fs's own loop of retries does
    not hide in each of them (botocore's are the client's configuration: off here)."""
    proxy, put = s3_proxy
    url = put("red-ranges/b.tar", (small_corpus / "urlsf_subset00.tar").read_bytes())
    options = {"endpoint_url": proxy.url, "config_kwargs": {"retries": {"total_max_attempts": 1}}}
    corpus = Corpus.open(url, storage_options=options)
    monkeypatch.setattr(retry, "RETRY_ATTEMPTS", 3)
    proxy.ranged.clear()
    proxy.resets = 1000
    with pytest.raises(OWTError) as info:
        texts(corpus, seed=0, workers=0)
    message = str(info.value)
    assert "failed 3 times" in message
    # Per range, one request per attempt: two at most, as aiohttp asks once more on a kept-alive
    # connection the server closed (s3fs's own loop would make it five).
    assert proxy.ranged and max(proxy.ranged.values()) <= 2 * 3
    assert "Timeout" not in message and "no complete answer" not in message


def test_a_server_that_drips_every_answer_fails_the_unit_before_the_pool_calls_it_hung(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second attempt as long as a first that dripped for 30 s (its deadline) would end at
    60 s, the pool's default ``timeout``: the worker would be reported hung, a run under
    ``on_error="skip"`` ended. No attempt starts that would end past ``RETRY_CEILING``."""
    clock = _Clock(monkeypatch)
    drip = TimeoutError("no complete answer within 30 s")
    with pytest.raises(retry.Fatal) as info:
        retry.with_retries(clock.attempts(*[(30.0, drip)] * 6), "GET bytes 0-9")
    assert "failed 1 times in 30.0 s" in info.value.reason
    assert clock.now - 1000.0 < 60.0  # (within the pool's default timeout)


def test_a_head_that_failed_with_a_status_is_said_with_it() -> None:
    """fsspec's HTTP ``info`` turns every failed HEAD into a ``FileNotFoundError`` (the status
    its cause): a 503 said "last: FileNotFoundError", as if the file were missing."""

    class Answer(Exception):
        def __init__(self, status: int) -> None:
            super().__init__(f"status {status}")
            self.status = status

    for status, said in [(503, "HTTPStatus: HTTP 503"), (404, "FileNotFoundError: u")]:
        try:
            raise FileNotFoundError("u") from Answer(status)
        except FileNotFoundError as exc:
            assert retry.describe(exc) == said


def test_no_attempt_starts_that_could_end_past_the_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stall of 20 s, then a read that may take its deadline (46 s: 16 MiB asked for) would
    end at 66 s, past the pool's 60 s ``timeout``: not started. A short read's is."""
    clock = _Clock(monkeypatch)
    stall, drip = TimeoutError("nothing received for 20 s"), TimeoutError("no complete answer")
    with pytest.raises(retry.Fatal, match=r"failed 1 times in 20\.0 s"):
        retry.with_retries(clock.attempts((20.0, stall), (46.0, drip)), "GET", limit=46.0)
    assert retry.with_retries(clock.attempts((20.0, stall), (1.0, None)), "GET", limit=31.0)
