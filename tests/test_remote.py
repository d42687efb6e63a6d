"""Reading a corpus where it lives: over HTTP and S3, against servers on 127.0.0.1 only.

The HTTP server (``remote_servers.RangeServer``) is written for these tests;
S3 is moto's server mode. Both are started here and stopped after.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember
from openwebtext.index import cache_path, remote
from openwebtext.prepare.workdir import PrepareError
from openwebtext.records import Unit
from openwebtext.source import MemberCache, RangeReader, parse_size, storage
from openwebtext.synth import write_corpus
from remote_servers import RangeServer
from support import local_files, s3_objects

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh cache folder, quick retries, and no storage options left behind."""
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(storage, "RETRY_BASE", 0.005)
    monkeypatch.setattr(storage, "RETRY_CAP", 0.05)
    storage.configure(None)
    yield
    storage.configure(None)


@pytest.fixture
def http(small_corpus: Path) -> Iterator[RangeServer]:
    with RangeServer(small_corpus) as server:
        yield server


def texts(corpus: Corpus | str, **options: Any) -> list[str]:
    return [doc.text for doc in Loader(corpus, **options)]


def local_stream(small_corpus: Path, **options: Any) -> list[str]:
    return texts(Corpus.open(str(small_corpus)), **options)


# -- HTTP -------------------------------------------------------------------------


def test_http_folder_gives_the_local_units_and_stream(
    small_corpus: Path, http: RangeServer
) -> None:
    remote = Corpus.open(http.url + "/")
    local = Corpus.open(str(small_corpus))
    assert [u[1:] for u in remote.units] == [u[1:] for u in local.units]
    assert remote.units[0].path == http.url + "/urlsf_subset00.tar"
    assert remote.fingerprint() == local.fingerprint()  # so a local state resumes remotely
    for workers in (0, 2):
        assert texts(remote, seed=5, workers=workers) == local_stream(small_corpus, seed=5)


def test_http_stream_survives_faults(small_corpus: Path, http: RangeServer) -> None:
    corpus = Corpus.open([http.url + "/urlsf_subset00.tar", http.url + "/urlsf_subset01.tar"])
    http.faults.next_503 = 2
    http.faults.next_drop = 2
    http.faults.next_short = 2
    http.faults.rate_503 = http.faults.rate_drop = http.faults.rate_short = 0.1
    got = texts(corpus, seed=7, workers=2)
    assert http.injected >= 6
    assert got == local_stream(small_corpus, seed=7)


def test_index_walk_survives_faults(small_corpus: Path, http: RangeServer) -> None:
    http.faults.next_short = 1
    http.faults.next_503 = 1
    http.faults.next_drop = 1
    remote = Corpus.open(http.url + "/")
    assert http.injected == 3
    assert [u[1:] for u in remote.units] == [u[1:] for u in Corpus.open(str(small_corpus)).units]


def test_file_urls_stream_as_local_paths(small_corpus: Path) -> None:
    folder = Corpus.open(f"file://{small_corpus}/")
    pattern = Corpus.open(f"file://{small_corpus}/urlsf_subset0*.tar")
    assert folder.units == pattern.units
    assert folder.units[0].path == f"file://{small_corpus}/urlsf_subset00.tar"
    assert [u[1:] for u in folder.units] == [u[1:] for u in Corpus.open(str(small_corpus)).units]
    local = local_stream(small_corpus, seed=5)
    for workers in (0, 2):
        assert texts(folder, seed=5, workers=workers) == local


def test_second_open_uses_the_cached_index(small_corpus: Path, tmp_path: Path) -> None:
    with RangeServer(Path(shutil.copytree(small_corpus, tmp_path / "c"))) as http:
        _second_open_uses_the_cached_index(http)  # a copy: the test changes a file


def _second_open_uses_the_cached_index(http: RangeServer) -> None:
    first = Corpus.open(http.url + "/")
    walked = http.requests
    assert cache_path(http.url + "/urlsf_subset00.tar").is_file()
    http.reset_counts()
    again = Corpus.open(http.url + "/")
    assert again.units == first.units
    # One listing and one HEAD per file: no header is read again.
    assert http.requests == 1 + 2 < walked
    assert http.gets == 1
    os.utime(http.root / "urlsf_subset01.tar")  # a new Last-Modified and ETag, same size
    http.reset_counts()
    assert Corpus.open(http.url + "/").units == first.units
    assert http.gets > 1  # walked again


def test_a_short_body_is_never_taken_as_data(monkeypatch: pytest.MonkeyPatch) -> None:
    class Short:
        calls = 0

        def cat_file(self, url: str, start: int, end: int) -> bytes:
            Short.calls += 1
            return bytes(end - start - (1 if Short.calls < 3 else 0))

    monkeypatch.setattr(storage, "filesystem", lambda url, storage=None: Short())
    assert storage.fetch("s3://b/k.tar", 10, 110) == bytes(100)
    assert Short.calls == 3
    Short.calls = -100
    with pytest.raises(CorruptMember, match=r"failed 6 times .*ShortRead: got 99 of 100"):
        storage.fetch("s3://b/k.tar", 10, 110, "m.xz")


def test_changed_file_is_indexed_again(tmp_path: Path) -> None:
    root = tmp_path / "served"
    write_corpus(root, subsets=1, members=2, docs=5, seed=0, workers=1)
    with RangeServer(root) as server:
        url = server.url + "/urlsf_subset00.tar"
        cache = tmp_path / "members"  # cached members of the old file must not be served
        before = Corpus.open(url, cache_dir=cache)
        assert texts(before, seed=1, workers=0) == texts(str(root), seed=1, workers=0)
        other = tmp_path / "other"
        write_corpus(other, subsets=1, members=3, docs=7, seed=1, workers=1)
        shutil.copy(other / "urlsf_subset00.tar", root / "urlsf_subset00.tar")
        os.utime(root / "urlsf_subset00.tar", ns=(1, 1))  # even an equal size is noticed
        after = Corpus.open(url, cache_dir=cache)
        assert len(after.units) == 3 != len(before.units)
        assert [u[1:] for u in after.units] == [u[1:] for u in Corpus.open(str(root)).units]
        assert texts(after, seed=1, workers=0) == texts(str(root), seed=1, workers=0)


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
    assert storage.redact("key='AKIA' secret=abc https://h/x?sig=1") == (
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


def test_resume_from_a_remote_corpus(small_corpus: Path, http: RangeServer) -> None:
    corpus = Corpus.open(http.url + "/")
    whole = texts(corpus, seed=11, workers=2, shuffle_buffer=30)
    it = Loader(corpus, seed=11, workers=2, shuffle_buffer=30).iter()
    head = [next(it).text for _ in range(47)]
    state = it.state_dict()
    it.close()
    rest = [d.text for d in Loader(corpus, seed=11, workers=2, shuffle_buffer=30).iter(state)]
    assert head + rest == whole == local_stream(small_corpus, seed=11, shuffle_buffer=30)


def test_split_tokens_and_the_reference_api_work_remotely(
    small_corpus: Path, http: RangeServer
) -> None:
    from openwebtext.compat import OpenWebTextLoader

    url = http.url + "/"
    options: dict[str, Any] = {"seed": 6, "workers": 2, "split": "val", "val_fraction": 0.2}
    remote_val = texts(url, **options)
    assert remote_val == local_stream(small_corpus, **options) and remote_val
    tokens = {"seed": 6, "workers": 2, "tokenizer": "bytes"}
    remote_ids = [d.tokens.tolist() for d in Loader(url, **tokens)]
    assert remote_ids == [d.tokens.tolist() for d in Loader(str(small_corpus), **tokens)]
    tars = sorted(p.name for p in small_corpus.glob("*.tar"))
    with OpenWebTextLoader([f"{http.url}/{t}" for t in tars], random_state=2) as remote:
        got = list(remote)
    with OpenWebTextLoader([str(small_corpus / t) for t in tars], random_state=2) as local:
        want = list(local)
    assert got == want and got


def test_without_fsspec_a_url_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(CorpusError, match=r"openwebtext\[remote\]"):
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


def test_cli_index_and_stream_over_http(
    small_corpus: Path, http: RangeServer, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    url = http.url + "/"
    index = subprocess.run(
        [sys.executable, "-m", "openwebtext.cli", "index", url, "-j", "1", "-q",
         "--storage-option", "block_size=0"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert index.returncode == 0, index.stderr
    assert "120 documents in 6 members" in index.stderr
    counts = list((Path(os.environ["OWT_CACHE_DIR"]) / "counts").glob("owt-counts-*.json"))
    assert len(counts) == 1 and json.loads(counts[0].read_text())["total"] == 120
    stream = subprocess.run(
        [sys.executable, "-m", "openwebtext.cli", "stream", url, "--jsonl", "-q", "-j", "2",
         "--seed", "3", "--world-size", "2", "--rank", "1"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert stream.returncode == 0, stream.stderr
    remote = [json.loads(line)["text"] for line in stream.stdout.splitlines()]
    copy = shutil.copytree(small_corpus, tmp_path / "c")  # its counts are cached beside it
    local = [d.text for d in Loader(str(copy), seed=3, world_size=2, rank=1)]
    assert remote == local and remote


def test_cli_missing_url_is_one_line(http: RangeServer) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, "-m", "openwebtext.cli", "index", http.url + "/nothing.tar", "-q"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.strip() == f"owt: error: {http.url}/nothing.tar: no such file, key or bucket"


# -- S3 (moto's server) -----------------------------------------------------------


def test_s3_folder_and_glob_stream_as_local(small_corpus: Path, s3_endpoint: str) -> None:
    options = {"endpoint_url": s3_endpoint}
    folder = Corpus.open("s3://owt/data/", storage_options=options)
    pattern = Corpus.open("s3://owt/data/urlsf_subset0*.tar", storage_options=options)
    local = Corpus.open(str(small_corpus))
    assert [u[1:] for u in folder.units] == [u[1:] for u in local.units]  # _SUCCESS left out
    assert folder.units == pattern.units
    assert folder.units[0].path == "s3://owt/data/urlsf_subset00.tar"
    assert texts(folder, seed=2, workers=2) == local_stream(small_corpus, seed=2)


def test_s3_missing_bucket_and_key_are_clear_errors(s3_endpoint: str) -> None:
    options = {"endpoint_url": s3_endpoint}
    with pytest.raises(CorpusError, match=r"s3://no-such-bucket/owt/: no such file"):
        Corpus.open("s3://no-such-bucket/owt/", storage_options=options)
    with pytest.raises(CorpusError, match=r"s3://owt/data/missing.tar: no such file"):
        Corpus.open("s3://owt/data/missing.tar", storage_options=options)


# -- storage options belong to a corpus ---------------------------------------------


@pytest.fixture(scope="module")
def other_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another corpus with the same file and member names as ``small_corpus``, other text."""
    out = tmp_path_factory.mktemp("other")
    write_corpus(out, subsets=2, members=3, docs=20, seed=1, workers=1)
    return out


@pytest.fixture(scope="module")
def s3_second(other_corpus: Path, s3_endpoint: str) -> Iterator[str]:
    """A second S3 server (moto in its own process: in this one it would share the first's
    buckets) holding ``other_corpus`` under the same bucket and keys as ``s3_endpoint``."""
    import socket

    boto3 = pytest.importorskip("boto3")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        for _ in range(300):  # up to 30 s to start
            try:
                client.create_bucket(Bucket="owt")
                break
            except Exception:
                if proc.poll() is not None:
                    pytest.fail("the second moto server did not start")
                time.sleep(0.1)
        for path in sorted(other_corpus.glob("*.tar")):
            client.upload_file(str(path), "owt", f"data/{path.name}")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def interleaved(*corpora: Corpus, **options: Any) -> list[list[str]]:
    """The texts of each corpus, read a document from each in turn, in one process."""
    out: list[list[str]] = [[] for _ in corpora]
    with contextlib.ExitStack() as stack:
        docs = [stack.enter_context(Loader(c, **options).iter()) for c in corpora]
        active = list(range(len(corpora)))
        while active:
            for k in list(active):
                doc = next(docs[k], None)
                if doc is None:
                    active.remove(k)
                else:
                    out[k].append(doc.text)
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_two_endpoints_in_one_process_each_read_with_their_own_options(
    small_corpus: Path, other_corpus: Path, s3_endpoint: str, s3_second: str, workers: int
) -> None:
    first = Corpus.open("s3://owt/data/", storage_options={"endpoint_url": s3_endpoint})
    second = Corpus.open("s3://owt/data/", storage_options={"endpoint_url": s3_second})
    assert [u.path for u in first.units] == [u.path for u in second.units]  # the same URLs
    a, b = interleaved(first, second, seed=3, workers=workers)
    assert a == local_stream(small_corpus, seed=3)
    assert b == texts(Corpus.open(str(other_corpus)), seed=3)
    assert a != b


def test_the_index_cache_keeps_two_endpoints_apart_and_no_secret(
    small_corpus: Path,
    other_corpus: Path,
    s3_endpoint: str,
    s3_second: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "s3cr3t-never-written"
    options = [
        {"endpoint_url": s3_endpoint, "key": "testing", "secret": secret},
        {"endpoint_url": s3_second, "key": "testing", "secret": secret},
    ]
    url = "s3://owt/data/urlsf_subset00.tar"
    locals_ = [Corpus.open(str(small_corpus)), Corpus.open(str(other_corpus))]
    walked: list[str] = []
    walk = remote._walk
    monkeypatch.setattr(remote, "_walk", lambda url, *a: walked.append(url) or walk(url, *a))
    for round_ in range(2):  # indexed, then from the cache
        opened = [Corpus.open("s3://owt/data/", storage_options=o) for o in options]
        for corpus, local in zip(opened, locals_, strict=True):
            assert [u[1:] for u in corpus.units] == [u[1:] for u in local.units]
        # Each endpoint's files walked once: the second does not overwrite the first's.
        assert len(walked) == 4, round_
    places = [storage.Storage(o).place for o in options]
    assert places[0] != places[1] and all(places)
    assert cache_path(url, places[0]) != cache_path(url, places[1])
    assert cache_path(url, places[0]).is_file() and cache_path(url, places[1]).is_file()
    assert storage.Storage({"endpoint_url": s3_endpoint, "secret": "other"}).place == places[0]
    written = b"".join(p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert secret.encode() not in written and b"testing" not in written
    assert secret not in repr(opened[0]) and secret not in repr(opened[0].storage)


def test_the_member_cache_belongs_to_its_corpus(
    small_corpus: Path, other_corpus: Path, s3_endpoint: str, s3_second: str, tmp_path: Path
) -> None:
    members = tmp_path / "members"
    cached = Corpus.open(
        "s3://owt/data/", storage_options={"endpoint_url": s3_endpoint}, cache_dir=members
    )
    plain = Corpus.open("s3://owt/data/", storage_options={"endpoint_url": s3_second})
    a, b = interleaved(cached, plain, seed=5, workers=2)
    assert a == local_stream(small_corpus, seed=5)
    assert b == texts(Corpus.open(str(other_corpus)), seed=5)
    # Only the first corpus's members: its cache is not the second's, nor dropped by it.
    assert len(list(members.glob("*/*"))) == len(cached.units)
    again = Corpus.open(
        "s3://owt/data/", storage_options={"endpoint_url": s3_second}, cache_dir=members
    )
    assert texts(again, seed=5) == b  # same URLs, other endpoint: never the first's bytes


# -- owt bench on URLs --------------------------------------------------------------


def owt_bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "openwebtext.cli", "bench", *args]
    argv += ["--workers", "1", "--repeat", "1", "--warmup", "0", "--take", "25", "-q"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def bench_rows(out: Path) -> tuple[list[dict[str, str]], dict[str, Any]]:
    import csv

    with open(out / "timings.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads((out / "bench.json").read_text())


def check_bench(out: Path, local: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """The loader read what it reads locally; the ceiling fetched and decompressed."""
    rows, data = bench_rows(out)
    assert [(r["kind"], r["status"], r["exit_code"]) for r in rows] == [
        ("loader", "ok", "0"),
        ("ceiling", "ok", "0"),
    ]
    it = Loader(local, seed=0, take=25, workers=0).iter()
    with it:
        for _ in it:
            pass
    loader, ceiling = rows
    assert int(loader["documents"]) == 25 == it.stats.documents == data["corpus"]["documents"]
    assert int(loader["text_bytes"]) == it.stats.text_bytes == data["corpus"]["text_bytes"]
    assert loader["compressed_bytes"] == ceiling["compressed_bytes"]
    assert "--units" in ceiling["command"] and ceiling["decoder"]
    return rows, data


def test_owt_bench_over_http(small_corpus: Path, http: RangeServer, tmp_path: Path) -> None:
    url = http.url + "/urlsf_subset00.tar?X-Amz-Signature=s3cr3t"
    out = tmp_path / "out"
    done = owt_bench(
        url, "--out", str(out), "--storage-option", 'headers={"X-Token": "hunter2"}'
    )
    assert done.returncode == 0, done.stderr
    _, data = check_bench(out, str(small_corpus / "urlsf_subset00.tar"))
    assert data["corpus"]["paths"] == [http.url + "/urlsf_subset00.tar"]
    assert data["settings"]["storage_options"] == {"headers": "***"}
    assert "ceiling: fetch + decompress" in done.stdout
    assert f"corpus: {http.url}/urlsf_subset00.tar (25 documents" in done.stdout
    written = (out / "timings.csv").read_text() + (out / "bench.json").read_text()
    for secret in ("s3cr3t", "hunter2", "Signature"):
        assert secret not in written and secret not in done.stdout + done.stderr


def test_owt_bench_on_s3_with_storage_options(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    out, members = tmp_path / "out", tmp_path / "members"
    done = owt_bench(
        "s3://owt/data/",
        "--out", str(out),
        "--storage-option", f"endpoint_url={s3_endpoint}",
        "--cache-dir", str(members),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _, data = check_bench(out, str(small_corpus))
    assert data["settings"]["storage_options"] == {"endpoint_url": s3_endpoint}
    assert list(members.glob("*/*"))  # the children read with the cache they were given


# -- the member cache -------------------------------------------------------------


def test_second_epoch_reads_from_the_member_cache(
    small_corpus: Path, http: RangeServer, tmp_path: Path
) -> None:
    corpus = Corpus.open(http.url + "/", cache_dir=tmp_path / "members")
    first = texts(corpus, seed=4, workers=2)
    http.reset_counts()
    second = texts(corpus, seed=4, workers=2)
    assert http.gets == 0
    assert first == second == local_stream(small_corpus, seed=4)
    assert len(list((tmp_path / "members").glob("*/*"))) == len(corpus.units)


def test_member_cache_respects_its_cap(http: RangeServer, tmp_path: Path) -> None:
    corpus = Corpus.open(http.url + "/")
    sizes = sorted(u.size for u in corpus.units)
    cap = sizes[-1] + sizes[-2]  # room for two members, never three
    storage.configure(None, cache_dir=tmp_path / "members", cache_size=cap)
    texts(corpus, seed=4, workers=2)
    held = [p.stat().st_size for p in (tmp_path / "members").glob("*/*")]
    assert 1 <= len(held) <= 2 and sum(held) <= cap


def test_member_cache_evicts_the_least_recently_used(tmp_path: Path) -> None:
    cache = MemberCache(tmp_path, cap=250)
    for k in range(2):
        cache.put(f"k{k}", bytes(100))
        os.utime(cache._path(f"k{k}"), (1000 + k, 1000 + k))
    # k0 is the older, but used last: k1 goes when k2 passes the cap.
    assert cache.get("k0", 100) == bytes(100)
    cache.put("k2", bytes(100))
    assert sorted(p.name for p in tmp_path.glob("*/*")) == ["k0", "k2"]
    assert cache.get("k0", 99) is None  # a wrong length is never data


def test_member_cache_survives_a_process_killed_mid_write(tmp_path: Path) -> None:
    child = f"""
import os, sys, time
from openwebtext.source.membercache import MemberCache
def stall(*args):
    print("writing", flush=True)
    time.sleep(60)
os.replace = stall
MemberCache({str(tmp_path)!r}).put("kk1", b"x" * 100000)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, "-c", child], env=env, stdout=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
        finally:
            proc.kill()
    cache = MemberCache(tmp_path, cap=10**6)
    assert cache.get("kk1", 100000) is None and not cache.contains("kk1")
    left = list(tmp_path.glob("*/.tmp-*"))
    assert len(left) == 1  # counted towards the cap until it is stale
    assert cache.evict() == 100000
    cache.put("kk1", b"y" * 100000)
    assert cache.get("kk1", 100000) == b"y" * 100000
    os.utime(left[0], (1, 1))
    assert cache.evict() == 100000 and not left[0].exists()


def test_sizes_parse() -> None:
    assert parse_size("20G") == 20 << 30
    assert parse_size("512M") == 512 << 20
    assert parse_size("1.5K") == 1536
    assert parse_size("1000") == 1000
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


# -- output to S3 (owt tokenize --out s3://…, owt merge) -------------------------


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_tokenize_to_s3_writes_the_local_files(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path, split: str
) -> None:
    """The local engine with an S3 output: the same three files as a local output, byte for
    byte, and nothing else (no progress record, no part) there or in the staging folder."""
    from openwebtext.prepare import PrepareOptions, outputs, prepare

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    options = PrepareOptions(split=split, workers=2, val_fraction=0.1)  # type: ignore[arg-type]
    url = f"s3://owt/out-{split}/"
    report = prepare(corpus, url, options)
    local = prepare(corpus, tmp_path / "local", options)
    assert s3_objects(s3_endpoint, f"out-{split}/") == local_files(tmp_path / "local")
    assert report.out == url.rstrip("/") and report.meta == local.meta
    assert not outputs.staging(url.rstrip("/")).exists()
    assert prepare(corpus, url, options).already


def test_interrupted_tokenize_to_s3_goes_on(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after half the bytes (some of the 6 members), then again while uploading
    (after train.bin and val.bin, before meta.json): nothing remote looks finished; each rerun
    goes on where the last stopped, and the result is one run's."""
    from openwebtext.prepare import PrepareOptions, Progress, outputs, prepare

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    options = PrepareOptions(workers=0, val_fraction=0.1)
    url = "s3://owt/stopped"

    class Stop(Exception):
        pass

    first: list[Progress] = []

    def stop_halfway(event: Progress) -> None:
        first.append(event)
        if event.phase == "tokenize" and event.done >= sum(u.size for u in corpus.units) // 2:
            raise Stop

    try:
        with pytest.raises(Stop):
            prepare(corpus, url, options, progress=stop_halfway, checkpoint_seconds=0)
        assert 0 < len(first) < 6
        assert s3_objects(s3_endpoint, "stopped/") == {}
        fs = storage.filesystem(url, corpus.storage)  # the output's: the corpus's options
        put = fs.put_file

        def fail_on_meta(source: str, target: str, **kwargs: Any) -> Any:
            if target.endswith("meta.json"):
                raise PermissionError("injected")
            return put(source, target, **kwargs)

        monkeypatch.setattr(fs, "put_file", fail_on_meta)
        events: list[Progress] = []
        with pytest.raises(PrepareError, match=r"stopped/meta\.json: access refused"):
            prepare(corpus, url, options, progress=events.append)
        assert len(first) + len(events) == 6  # the members the first run did not do
        assert sorted(s3_objects(s3_endpoint, "stopped/")) == ["train.bin", "val.bin"]
        monkeypatch.undo()
        events.clear()
        report = prepare(corpus, url, options, progress=events.append)
        assert not report.already and events == []  # uploaded again, nothing tokenized again
    finally:
        outputs.remove(outputs.staging(url))
    prepare(corpus, tmp_path / "local", options)
    assert s3_objects(s3_endpoint, "stopped/") == local_files(tmp_path / "local")


def test_cli_shards_to_s3_and_merge_from_s3(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    """`owt tokenize --shard i/n --out s3://…` for every i, then `owt merge s3://… --out
    s3://…` (the endpoint given by --storage-option): the files of one local run."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    owt = [sys.executable, "-m", "openwebtext.cli"]
    endpoint = ["--storage-option", f"endpoint_url={s3_endpoint}"]
    common = ["--split", "nanogpt", "--val-fraction", "0.1", "-j", "1", "-q", *endpoint]
    for i in range(2):
        run = subprocess.run(
            [*owt, "tokenize", str(small_corpus), "--shard", f"{i}/2",
             "--out", f"s3://owt/shards/{i}", *common],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
    slices = [f"s3://owt/shards/{i}/" for i in (1, 0)]
    run = subprocess.run(
        [*owt, "merge", *slices, "--out", "s3://owt/merged/", "-q", *endpoint],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    local = [*owt, "tokenize", str(small_corpus), "--out", str(tmp_path / "local"), *common]
    subprocess.run(local, env=env, check=True, timeout=60)
    assert s3_objects(s3_endpoint, "merged/") == local_files(tmp_path / "local")


def test_interrupted_merge_from_s3_goes_on(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    """nanogpt slices in S3, the merge into S3 stopped during the permutation: the rerun goes
    on from its checkpoint (and the slices' local copies), and writes one run's files."""
    from openwebtext.prepare import PrepareOptions, Progress, merge, outputs, prepare

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    options = PrepareOptions(split="nanogpt", workers=0, val_fraction=0.1)
    slices = [f"s3://owt/nano/{i}" for i in range(3)]
    for i, url in enumerate(slices):
        prepare(corpus, url, options, shard=(i, 3))

    class Stop(Exception):
        pass

    def stop(event: Progress) -> None:
        if event.phase == "permute" and event.done > 0:
            raise Stop

    out = "s3://owt/nano-merged/"
    try:
        with pytest.raises(Stop):
            merge(slices, out, progress=stop, checkpoint_seconds=0, storage=corpus.storage)
        assert s3_objects(s3_endpoint, "nano-merged/") == {}
        report = merge(slices, out, storage=corpus.storage)
        assert report.resumed
        assert [u for u in slices if outputs.staging(u, "fetch").exists()] == []  # copies gone
    finally:
        for url in [out, *slices]:  # local staging folders
            outputs.remove(outputs.staging(url))
            outputs.remove(outputs.staging(url, "fetch"))
    prepare(corpus, tmp_path / "local", options)
    assert s3_objects(s3_endpoint, "nano-merged/") == local_files(tmp_path / "local")
    try:  # into a local folder: the slices' local copies go too once it is done
        merge(slices, tmp_path / "merged", storage=corpus.storage)
        assert [u for u in slices if outputs.staging(u, "fetch").exists()] == []
    finally:
        for url in slices:
            outputs.remove(outputs.staging(url, "fetch"))
    assert local_files(tmp_path / "merged") == local_files(tmp_path / "local")
