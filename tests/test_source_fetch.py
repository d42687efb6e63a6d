"""Fetching byte ranges of remote files: short bodies, missing files, refused credentials,
redacted messages, retries, and the ranged reader's requests (merged, in flight, apart)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus, Loader, source
from openwebtext.errors import CorpusError, CorruptMember
from openwebtext.records import Unit
from openwebtext.source import RangeReader
from openwebtext.synth import write_corpus
from remote_servers import RangeServer, local_stream
from support import texts

fetch_module = importlib.import_module("openwebtext.source.fetching")

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote

http = remote_servers.http  # fixtures
isolated_storage = remote_servers.isolated_storage


def test_a_short_body_is_never_taken_as_data(monkeypatch: pytest.MonkeyPatch) -> None:
    class Short:
        calls = 0

        def cat_file(self, url: str, start: int, end: int) -> bytes:
            Short.calls += 1
            return bytes(end - start - (1 if Short.calls < 3 else 0))

    monkeypatch.setattr(fetch_module, "filesystem", lambda url, storage=None: Short())
    assert source.fetch("s3://b/k.tar", 10, 110) == bytes(100)
    assert Short.calls == 3
    Short.calls = -100
    with pytest.raises(CorruptMember, match=r"failed 6 times .*ShortRead: got 99 of 100"):
        source.fetch("s3://b/k.tar", 10, 110, "m.xz")


def test_missing_file_is_a_clear_error_at_once(http: RangeServer) -> None:
    with pytest.raises(CorpusError, match="no such file") as info:
        Corpus.open(http.url + "/urlsf_subset99.tar")
    assert "urlsf_subset99.tar" in str(info.value)
    assert http.requests <= 2  # fsspec's info tries HEAD, then GET; never retried


def test_a_file_gone_after_indexing_fails_its_members_at_once(tmp_path: Path) -> None:
    root = tmp_path / "served"
    write_corpus(root, subsets=2, members=2, docs=5, seed=0, workers=1)
    with RangeServer(root) as server:
        corpus = Corpus.open(server.url + "/")
        (root / "urlsf_subset01.tar").unlink()
        server.reset_counts()
        it = Loader(corpus, seed=0, workers=0, on_error="skip").iter()
        assert len(list(it)) == 10
        assert sorted(it.stats.skipped) == [
            f"{server.url}/urlsf_subset01.tar[openwebtext/urlsf_subset01-{k}_data.xz]: "
            "cannot read: no such file, key or bucket"
            for k in (1, 2)
        ]
        assert server.gets == 4  # one per member: nothing retried
        with pytest.raises(CorruptMember, match="cannot read: no such file"):
            list(Loader(corpus, seed=0, workers=0))


def test_refused_credentials_are_not_retried(http: RangeServer) -> None:
    http.faults.status = 403
    with pytest.raises(CorpusError, match="access refused"):
        Corpus.open(http.url + "/urlsf_subset00.tar")
    assert http.requests <= 2  # HEAD, then fsspec's GET; never retried


def test_messages_hold_no_signature_or_password(http: RangeServer) -> None:
    http.faults.status = 403
    url = http.url.replace("http://", "http://user:hunter2@") + "/a.tar?X-Amz-Signature=s3cr3t"
    with pytest.raises(CorpusError) as info:
        Corpus.open(url)
    text = str(info.value)
    assert "a.tar" in text
    assert "s3cr3t" not in text and "hunter2" not in text and "Signature" not in text
    assert source.redact("key='AKIA' secret=abc https://h/x?sig=1") == (
        "key='***' secret=*** https://h/x"
    )


def test_a_signed_url_never_shows_its_signature(small_corpus: Path, http: RangeServer) -> None:
    url = http.url + "/urlsf_subset00.tar?X-Amz-Credential=AKIA1&X-Amz-Signature=s3cr3t"
    corpus = Corpus.open(url)
    assert corpus.units[0].path == http.url + "/urlsf_subset00.tar"
    local = str(small_corpus / "urlsf_subset00.tar")
    assert texts(corpus, seed=1, workers=2) == texts(local, seed=1, workers=0)
    cached = "".join(p.read_text() for p in Path(os.environ["OWT_CACHE_DIR"]).rglob("*.json"))
    assert cached and "s3cr3t" not in cached and "AKIA1" not in cached
    http.faults.status = 503
    it = Loader(corpus, seed=1, workers=1, on_error="skip").iter()
    assert list(it) == [] and it.stats.skipped
    with pytest.raises(CorruptMember) as info:
        list(Loader(corpus, seed=1, workers=0))
    shown = " ".join([*it.stats.skipped, str(info.value)])
    assert "s3cr3t" not in shown and "AKIA1" not in shown


def test_retries_run_out_under_the_error_policy(http: RangeServer) -> None:
    corpus = Corpus.open(http.url + "/")
    http.faults.status = 503  # from now on the server only fails
    loader = Loader(corpus, seed=0, workers=1, on_error="skip")
    it = loader.iter()
    assert list(it) == []
    assert it.stats.skipped_members == len(corpus.units)
    assert all(name.startswith(http.url) for name in it.stats.skipped)
    with pytest.raises(CorruptMember, match=r"failed 6 times .* HTTP 503|failed 6 times") as info:
        list(Loader(corpus, seed=0, workers=0))
    assert info.value.path is not None and info.value.path.startswith(http.url)
    assert info.value.member is not None and info.value.member.endswith("_data.xz")


def test_reading_a_few_documents_fetches_only_their_members(http: RangeServer) -> None:
    corpus = Corpus.open(http.url + "/urlsf_subset00.tar")
    http.reset_counts()
    got = texts(corpus, seed=0, workers=0, take=3, shuffle_buffer=0)
    assert len(got) == 3
    first = corpus.units[0]
    size = os.path.getsize(http.root / "urlsf_subset00.tar")
    assert http.bytes_sent <= max(u.size for u in corpus.units) < size / 2
    assert http.gets == 1 and first.size > 0


def test_a_worker_keeps_more_than_one_request_in_flight(
    small_corpus: Path, http: RangeServer
) -> None:
    corpus = Corpus.open(http.url + "/")
    http.latency = 0.1
    http.reset_counts()
    got = texts(corpus, seed=8, workers=1, prefetch=3, shuffle_buffer=0)
    assert got == local_stream(small_corpus, seed=8, shuffle_buffer=0)
    assert http.max_in_flight >= 2  # one worker: its queued units are fetched meanwhile


def test_neighbouring_members_merge_into_one_request(http: RangeServer) -> None:
    corpus = Corpus.open(http.url + "/")
    units = list(corpus.units)
    http.reset_counts()
    reader = RangeReader()
    try:
        reader.prefetch(units)  # two files, three neighbouring members each
        data = [reader.read(u) for u in units]
    finally:
        reader.close()
    assert http.gets == 2 and reader.requests == 2
    local = [(http.root / u.path.rsplit("/", 1)[1]).read_bytes() for u in units]
    assert data == [f[u.offset : u.offset + u.size] for f, u in zip(local, units, strict=True)]


def test_prefetch_of_far_members_keeps_them_separate(http: RangeServer) -> None:
    corpus = Corpus.open(http.url + "/urlsf_subset00.tar")
    first, _, third = corpus.units
    reader = RangeReader()
    try:
        reader.prefetch([third, first])  # not neighbours in this order
        assert reader.read(first)[:6] == b"\xfd7zXZ\x00"
        assert reader.read(third)[:6] == b"\xfd7zXZ\x00"
    finally:
        reader.close()
    assert reader.requests == 2


def test_without_fsspec_a_url_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(CorpusError, match=r"pip install -e '\.\[remote\]'"):
        Corpus.open("s3://bucket/owt/")


def test_a_unit_path_that_is_a_url_reads_by_range(http: RangeServer) -> None:
    """The reader's hook: a unit whose path is a URL is fetched, not opened."""
    corpus = Corpus.open(http.url + "/urlsf_subset01.tar")
    unit: Unit = corpus.units[1]
    reader = RangeReader()
    try:
        data = reader.read(unit)
    finally:
        reader.close()
    raw = (http.root / "urlsf_subset01.tar").read_bytes()
    assert data == raw[unit.offset : unit.offset + unit.size]


def test_a_request_s_deadline_grows_with_its_size_from_a_floor() -> None:
    from openwebtext.source import retry

    assert retry.deadline(0) == retry.REQUEST_FLOOR
    sixteen = retry.deadline(16 << 20)
    assert sixteen == retry.REQUEST_FLOOR + 16 * (1 << 20) / retry.REQUEST_RATE
    assert sixteen < 60  # a merged request ends before the pool's default timeout


def test_fetch_gives_a_request_the_deadline_of_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 16 MiB merged range gets 30 s + 16 s, not a HEAD's 30 s (slow links)."""
    from openwebtext.source import filesystems, retry

    root = tmp_path / "big"
    root.mkdir()
    (root / "blob.bin").write_bytes(os.urandom(1 << 20) * 16)
    limits: list[float] = []
    real = filesystems.deadline
    monkeypatch.setattr(
        filesystems, "deadline", lambda size=0: limits.append(real(size)) or real(size)
    )
    with RangeServer(root) as server:
        url = server.url + "/blob.bin"
        data = source.fetch(url, 0, 16 << 20)
    assert len(data) == 16 << 20
    assert limits == [retry.REQUEST_FLOOR + 16.0] == [46.0]
