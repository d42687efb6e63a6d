"""Hostile servers (``remote_servers.Misbehaviour``): a body dripped or stalled, ``Range``
ignored, 429 with ``Retry-After``, a file changed between index and read, a signed URL's
query string, a member past the end of the file, a damaged member-cache entry."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, OWTError
from openwebtext.source import fetching, retry, watchdog
from openwebtext.source.membercache import FOLDER
from remote_servers import RangeServer, local_stream
from support import texts

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote

http = remote_servers.http  # fixtures
isolated_storage = remote_servers.isolated_storage


@pytest.fixture
def quick_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests must answer within 2 s (the default floor is 30 s)."""
    monkeypatch.setattr(retry, "REQUEST_FLOOR", 2.0)


@pytest.mark.slow  # deadlines waited out in real time: its own CI step
def test_a_dripping_body_while_indexing_ends_in_an_error_naming_the_url(
    http: RangeServer, quick_deadline: None
) -> None:
    http.misbehave.drip = 0.5  # a 2 KB window would take 17 minutes
    url = http.url + "/urlsf_subset00.tar"
    began = time.monotonic()
    with pytest.raises(CorpusError, match="no complete answer within 2 s") as info:
        Corpus.open(url)
    assert time.monotonic() - began < 20
    assert info.value.path == url


def test_the_main_process_watchdog_ends_what_outlasts_every_deadline(
    http: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retry, "REQUEST_FLOOR", 1000.0)  # as a call no deadline covers
    monkeypatch.setattr(watchdog, "IDLE_SECONDS", 2.0)
    http.misbehave.drip = 0.5
    url = http.url + "/urlsf_subset00.tar"
    began = time.monotonic()
    with pytest.raises(CorpusError, match="nothing received for 2 s") as info:
        Corpus.open(url)
    assert time.monotonic() - began < 15
    assert info.value.path == url


@pytest.mark.slow  # deadlines waited out in real time: its own CI step
def test_a_stall_after_the_headers_is_a_timeout_not_a_wait(
    http: RangeServer, quick_deadline: None
) -> None:
    http.misbehave.stall = 60.0  # past the socket's own 20 s read timeout
    began = time.monotonic()
    with pytest.raises(CorpusError, match="no complete answer") as info:
        Corpus.open(http.url + "/urlsf_subset00.tar")  # the HEAD stalls (retried)
    assert time.monotonic() - began < 30
    assert "urlsf_subset00.tar" in str(info.value)


@pytest.mark.slow  # deadlines waited out in real time: its own CI step
def test_a_dripping_member_read_fails_within_its_deadline(
    small_corpus: Path, http: RangeServer, quick_deadline: None
) -> None:
    corpus = Corpus.open(http.url + "/urlsf_subset01.tar")
    http.misbehave.drip = 0.5
    began = time.monotonic()
    with pytest.raises(OWTError, match="no complete answer"):
        texts(corpus, seed=0, workers=0)
    assert time.monotonic() - began < 20


def test_a_server_that_ignores_ranges_is_told_after_one_request(
    http: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetching, "WHOLE_FILE_BYTES", 1000)  # the file is "large"
    http.misbehave.ignore_range = True
    with pytest.raises(CorpusError, match="server ignores byte ranges") as info:
        Corpus.open(http.url + "/urlsf_subset00.tar")
    assert "ShortRead" not in str(info.value)
    assert http.gets == 1  # refused at its status line, never retried


def test_a_server_that_answers_another_range_is_told(http: RangeServer) -> None:
    http.misbehave.shift_range = 512
    with pytest.raises(OWTError, match=r"answered bytes from \d+ to a request for bytes from"):
        Corpus.open(http.url + "/urlsf_subset00.tar")  # the second window's answer is shifted
    assert http.gets == 2  # never retried


def test_a_small_file_of_a_server_that_ignores_ranges_is_read_whole_once(
    small_corpus: Path, http: RangeServer, caplog: pytest.LogCaptureFixture
) -> None:
    http.misbehave.ignore_range = True
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        corpus = Corpus.open(http.url + "/urlsf_subset00.tar")
        got = texts(corpus, seed=5, workers=0)
    assert got == local_stream(small_corpus / "urlsf_subset00.tar", seed=5)
    assert http.gets == 1  # one whole-file download, every range cut from it
    said = [r.getMessage() for r in caplog.records if "ignores byte ranges" in r.getMessage()]
    assert len(said) == 1 and "read whole, once" in said[0]


def test_429_with_retry_after_is_waited_for(small_corpus: Path, http: RangeServer) -> None:
    # Retries back off over ~0.1 s here (isolated_storage): only Retry-After outlasts it.
    http.misbehave.retry_after = "1"
    http.misbehave.throttle_until = time.monotonic() + 1.5
    corpus = Corpus.open(http.url + "/")
    assert texts(corpus, seed=3, workers=0) == local_stream(small_corpus, seed=3)
    http.misbehave.throttle = 2  # reads too
    assert texts(corpus, seed=3, workers=2) == local_stream(small_corpus, seed=3)


def test_retry_after_is_capped(monkeypatch: pytest.MonkeyPatch, http: RangeServer) -> None:
    monkeypatch.setattr(retry, "RETRY_AFTER_CAP", 0.5)
    http.misbehave.retry_after = "3600"
    http.misbehave.throttle = 2
    began = time.monotonic()
    assert Corpus.open(http.url + "/urlsf_subset00.tar").units
    assert 0.45 <= time.monotonic() - began < 10  # one capped wait, not an hour (or 20 s)


def test_a_file_changed_between_index_and_read_is_an_error_never_a_misread(
    small_corpus: Path, tmp_path: Path
) -> None:
    root = tmp_path / "served"
    shutil.copytree(small_corpus, root)
    with RangeServer(root) as server:
        corpus = Corpus.open(server.url + "/urlsf_subset00.tar")
        path = root / "urlsf_subset00.tar"
        data = bytearray(path.read_bytes())
        unit = corpus.units[0]
        for k in range(unit.offset + 64, unit.offset + unit.size - 64, 97):
            data[k] ^= 0x5A  # other bytes, the same size
        path.write_bytes(bytes(data))
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        with pytest.raises(OWTError, match="changed since it was indexed") as info:
            texts(corpus, seed=0, workers=0)
        assert "corrupt" not in str(info.value)


def test_a_query_string_is_never_a_glob(small_corpus: Path, http: RangeServer) -> None:
    url = http.url + "/urlsf_subset00.tar?X-Amz-Signature=abc&X-Amz-Expires=60"
    http.faults.status = 403
    with pytest.raises(CorpusError) as info:
        Corpus.open(url)
    assert "HTTP 403" in str(info.value) and "pattern" not in str(info.value)
    assert "abc" not in str(info.value)
    http.faults.status = None
    http.faults.next_503 = 2  # retried, as any 503
    corpus = Corpus.open(url)
    local = Corpus.open(str(small_corpus / "urlsf_subset00.tar"))
    assert [u[1:] for u in corpus.units] == [u[1:] for u in local.units]


def _cut(path: Path) -> Path:
    """``path`` cut in the middle of its last member (its header claims more than is left)."""
    units = Corpus.open(str(path)).units
    last = units[-1]
    os.truncate(path, last.offset + last.size // 2)
    return path


def test_a_member_past_the_end_of_a_remote_file_reads_as_truncated_like_a_local_one(
    small_corpus: Path, tmp_path: Path
) -> None:
    root = tmp_path / "served"
    root.mkdir()
    shutil.copy(small_corpus / "urlsf_subset00.tar", root)
    _cut(root / "urlsf_subset00.tar")
    local = Corpus.open(str(root / "urlsf_subset00.tar"))
    with pytest.raises(OWTError) as local_error:
        list(Loader(local, seed=0, workers=0))
    with RangeServer(root) as server:
        remote = Corpus.open(server.url + "/urlsf_subset00.tar")
        assert [u[1:] for u in remote.units] == [u[1:] for u in local.units]
        server.reset_counts()
        with pytest.raises(OWTError) as remote_error:
            list(Loader(remote, seed=0, workers=0))
        assert server.gets <= len(remote.units)  # nothing retried
    assert "file is truncated" in str(local_error.value)
    assert str(remote_error.value).split(": ", 1)[1] == str(local_error.value).split(": ", 1)[1]
    skipped = list(Loader(remote, seed=0, workers=0, on_error="skip"))
    assert [d.text for d in skipped] == [d.text for d in Loader(local, seed=0, on_error="skip")]


def test_a_damaged_member_cache_entry_is_dropped_and_fetched_again(
    small_corpus: Path, http: RangeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "members"
    corpus = Corpus.open(http.url + "/", cache_dir=cache)
    first = texts(corpus, seed=4, workers=0)
    entries = sorted(p for p in (cache / FOLDER).glob("*/*") if not p.name.startswith("."))
    assert len(entries) == len(corpus.units)
    for entry in entries:
        data = bytearray(entry.read_bytes())
        for k in range(len(data) // 2, len(data), 101):
            data[k] ^= 0xFF  # the same length, other bytes
        entry.write_bytes(bytes(data))
    http.reset_counts()
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        second = texts(corpus, seed=4, workers=0)
    assert second == first == local_stream(small_corpus, seed=4)
    assert http.gets >= 1  # fetched again
    damaged = [r for r in caplog.records if "member cache" in r.getMessage()]
    assert len(damaged) == len(entries) and "checksum" in damaged[0].getMessage()
    http.reset_counts()
    assert texts(corpus, seed=4, workers=0) == first
    assert http.gets == 0  # the entries written again are good


def test_an_s3_object_replaced_between_index_and_read_is_an_error_never_a_misread(
    small_corpus: Path, s3_endpoint: str
) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    data = bytearray((small_corpus / "urlsf_subset00.tar").read_bytes())
    client.put_object(Bucket="owt", Key="changing/urlsf_subset00.tar", Body=bytes(data))
    try:
        corpus = Corpus.open(
            "s3://owt/changing/urlsf_subset00.tar", storage_options={"endpoint_url": s3_endpoint}
        )
        unit = corpus.units[0]
        for k in range(unit.offset + 64, unit.offset + unit.size - 64, 97):
            data[k] ^= 0x5A  # other bytes, the same size
        client.put_object(Bucket="owt", Key="changing/urlsf_subset00.tar", Body=bytes(data))
        with pytest.raises(OWTError, match="changed since it was indexed") as info:
            texts(corpus, seed=0, workers=0)
        assert "corrupt" not in str(info.value)
    finally:
        client.delete_object(Bucket="owt", Key="changing/urlsf_subset00.tar")


def test_watched_hands_back_every_result_in_order_none_and_empty_ones_too() -> None:
    def call(k: int) -> object:
        if k == 3:
            raise ValueError("three")
        return {1: None, 2: []}.get(k, k)

    got = watchdog.watched(call, [0, 1, 2, 3, 4], "http://127.0.0.1:9/x", threads=3)
    assert got[:3] == [0, None, []] and got[4] == 4
    assert isinstance(got[3], ValueError)
    assert watchdog.watched(call, [], "http://127.0.0.1:9/x") == []


def test_an_empty_listing_is_the_no_documents_error(
    http: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openwebtext.index import remote

    for listing in ([], None):  # None: a listing library that answers nothing at all
        monkeypatch.setattr(remote, "expand_url", lambda url, storage, listed=listing: listed)
        with pytest.raises(CorpusError, match="no documents"):
            Corpus.open(http.url + "/")


class _Clock:
    """``time.monotonic`` and ``time.sleep`` of the retry module, where sleeping moves the
    clock on at once: a test of who waits for what, with no real waiting."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        self.slept = 0.0
        self.on_sleep: list[object] = []
        monkeypatch.setattr(retry.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(retry.time, "sleep", self.sleep)
        monkeypatch.setattr(retry.random, "uniform", lambda a, b: 0.0)  # no jitter

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        while self.on_sleep:
            self.on_sleep.pop(0)()  # type: ignore[operator]


def test_retry_after_holds_back_every_request_to_its_host_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(monkeypatch)
    host = retry.host_of("http://127.0.0.1:9/a.tar")
    other = retry.host_of("http://127.0.0.2:9/a.tar")
    started: list[tuple[str, float]] = []
    waited_before = retry.waited()

    def request(name: str, refusals: list[str]) -> Callable[[], str]:
        def call() -> str:
            started.append((name, clock.now))
            if refusals:
                raise retry.HTTPStatus(429, refusals.pop())
            return name

        return call

    # A is refused with Retry-After: 5. While A waits, B (another thread's request to the same
    # host) and C (another host) start: B must wait for the same time, once; C must not.
    def others() -> None:
        assert retry.with_retries(request("C", []), "GET", other) == "C"
        assert retry.with_retries(request("B", []), "GET", host) == "B"

    clock.on_sleep.append(others)
    assert retry.with_retries(request("A", ["5"]), "GET", host) == "A"
    times = dict((name, t) for name, t in started)
    assert [name for name, _ in started] == ["A", "C", "B", "A"]
    assert times["C"] == 1000.0  # another host: not held back
    assert times["B"] == 1005.0  # held back until the host's time
    assert retry.waited() - waited_before == pytest.approx(5.0)  # one wait of 5 s, not two


def test_the_host_s_wait_counts_in_the_request_s_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock(monkeypatch)
    host = retry.host_of("http://127.0.0.3:9/a.tar")
    monkeypatch.setattr(retry, "RETRY_ATTEMPTS", 3)

    def refused() -> None:
        raise retry.HTTPStatus(429, "4")

    with pytest.raises(retry.Fatal, match=r"failed 3 times in 8\.0 s"):
        retry.with_retries(refused, "GET", host)
    assert clock.slept == pytest.approx(8.0)


def test_whole_file_bytes_is_the_largest_file_read_whole(
    http: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = (http.root / "urlsf_subset00.tar").stat().st_size
    http.misbehave.ignore_range = True
    monkeypatch.setattr(fetching, "WHOLE_FILE_BYTES", size - 1)
    with pytest.raises(CorpusError, match="server ignores byte ranges"):
        Corpus.open(http.url + "/urlsf_subset00.tar")
    monkeypatch.setattr(fetching, "WHOLE_FILE_BYTES", size)
    assert Corpus.open(http.url + "/urlsf_subset00.tar").units


class _Aborted(BaseException):
    """Ends a request mid-wait (a thread the test no longer needs)."""


def test_a_shorter_retry_after_never_cuts_a_host_s_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """B was in flight when A was told to wait 10 s; B's own answer says 1 s: the host's
    time stays the later one."""
    clock = _Clock(monkeypatch)
    host = retry.host_of("http://127.0.0.4:9/a.tar")
    started: list[float] = []

    def stop() -> None:
        raise _Aborted

    def refused_for_ten() -> None:
        clock.on_sleep.append(stop)  # A's part ends once its refusal is noted
        raise retry.HTTPStatus(429, "10")

    def b() -> str:
        started.append(clock.now)
        if len(started) == 1:  # in flight: meanwhile A is refused for 10 s
            with pytest.raises(_Aborted):
                retry.with_retries(refused_for_ten, "GET", host)
            raise retry.HTTPStatus(429, "1")
        return "B"

    assert retry.with_retries(b, "GET", host) == "B"
    assert started == [1000.0, 1010.0]


def test_watched_stops_at_the_first_error_when_asked() -> None:
    """``first=True`` (the content fingerprint's checks): once a call raised, the items not
    begun are not called, each saying that error (every member of a corpus whose server is
    down went through its whole retries before the error came out)."""
    from openwebtext.source import watched

    called: list[int] = []

    def call(k: int) -> int:
        called.append(k)
        if k == 2:
            raise ValueError("down")
        return k

    out = watched(call, list(range(100)), "http://x/", threads=1, first=True)
    assert called == [0, 1, 2]
    assert out[:2] == [0, 1] and all(isinstance(r, ValueError) for r in out[2:])
    called.clear()
    assert len(watched(call, list(range(10)), "http://x/", threads=1)) == 10 and len(called) == 10
