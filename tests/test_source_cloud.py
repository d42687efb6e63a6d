"""Reading from the Hugging Face Hub (``hf://``) and Google Cloud Storage (``gs://``).

Against fakes of their HTTP APIs on 127.0.0.1 (``cloud_servers``), driven by
the real client libraries (huggingface_hub's ``HfFileSystem``, gcsfs), pointed
there by storage options: ``endpoint=`` for the Hub, ``endpoint_url=`` and
``token="anon"`` for GCS. A guard makes any name lookup other than the loopback
fail, so nothing here can reach huggingface.co or Google.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Read by the libraries at import time, so set before they are imported (fsspec imports
# them on first use). gcsfs's "extended" filesystem asks a gRPC control plane for the
# bucket's layout before every read; the fake serves only the JSON API.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

from cloud_servers import REVISION, FakeGCS, FakeHub
from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember, OWTError
from openwebtext.source import RangeReader, configure, retry
from openwebtext.source.ranges import THREADS
from openwebtext.synth import write_corpus
from support import texts

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote

REPO = "Skylion007/openwebtext"
HF_URL = f"hf://datasets/{REPO}/subsets/"
GS_URL = "gs://owt-bucket/owt/"
SECRET = "hf_s3cr3tT0kenValue"

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_real_getaddrinfo = socket.getaddrinfo


def _loopback_only(host: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else str(host)
    if name not in _LOOPBACK:
        _LOOKUPS.append(name)
        raise socket.gaierror(f"test guard: no lookups beyond 127.0.0.1 ({name})")
    return _real_getaddrinfo(host, *args, **kwargs)


_LOOKUPS: list[str] = []


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh cache folder, quick retries, no token from the machine, loopback only."""
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved token
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setattr(retry, "RETRY_BASE", 0.005)
    monkeypatch.setattr(retry, "RETRY_CAP", 0.05)
    monkeypatch.setattr(socket, "getaddrinfo", _loopback_only)
    _LOOKUPS.clear()
    configure(None)
    yield
    configure(None)
    assert _LOOKUPS == [], f"tried to reach beyond 127.0.0.1: {_LOOKUPS}"


@pytest.fixture(scope="module")
def repo(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset repo laid out as the Hub's: the tars under ``subsets/``, a README beside."""
    root = tmp_path_factory.mktemp("hub") / "openwebtext"
    shutil.copytree(small_corpus, root / "subsets")
    (root / "README.md").write_text("# openwebtext\n")
    return root


@pytest.fixture
def hub(repo: Path) -> Iterator[FakeHub]:
    pytest.importorskip("huggingface_hub")
    with FakeHub({REPO: repo}) as server:
        yield server


@pytest.fixture
def gcs(repo: Path) -> Iterator[FakeGCS]:
    gcsfs = pytest.importorskip("gcsfs")
    if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:  # imported before this module
        pytest.fail("gcsfs's extended filesystem is on: it would wait 60 s for gRPC per read")
    bucket = repo.parent / "bucket"
    if not bucket.exists():
        shutil.copytree(repo / "subsets", bucket / "owt")
    with FakeGCS({"owt-bucket": bucket}) as server:
        yield server


def hf_options(hub: FakeHub, **more: Any) -> dict[str, Any]:
    return {"endpoint": hub.url, **more}


def gs_options(gcs: FakeGCS) -> dict[str, Any]:
    return {"endpoint_url": gcs.url, "token": "anon"}


def local_units(small_corpus: Path) -> list[tuple[Any, ...]]:
    return [u[1:] for u in Corpus.open(str(small_corpus)).units]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "openwebtext.cli", *args],
        env=full, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


# -- the Hugging Face Hub -----------------------------------------------------------


def test_hub_folder_and_glob_stream_as_local(small_corpus: Path, hub: FakeHub) -> None:
    options = hf_options(hub)
    folder = Corpus.open(HF_URL, storage_options=options)
    pattern = Corpus.open(HF_URL + "urlsf_subset0*.tar", storage_options=options)
    assert [u[1:] for u in folder.units] == local_units(small_corpus)  # _COMPLETE left out
    assert folder.units == pattern.units
    assert folder.units[0].path == HF_URL + "urlsf_subset00.tar"
    assert hub.counts["tree"] >= 2  # the listing's pages (2 entries each) were followed
    local = texts(str(small_corpus), seed=5)
    for workers in (0, 2):
        assert texts(folder, seed=5, workers=workers) == local
    assert hub.counts["cdn"] > 0 and hub.counts["other"] == 0
    pinned = f"hf://datasets/{REPO}@{REVISION}/subsets/"  # a revision, in the URL
    at_revision = Corpus.open(pinned, storage_options=options)
    assert at_revision.units[0].path == pinned + "urlsf_subset00.tar"
    assert texts(at_revision, seed=5, workers=0) == local


def test_hub_reads_members_by_range_not_whole_files(repo: Path, hub: FakeHub) -> None:
    corpus = Corpus.open(HF_URL + "urlsf_subset00.tar", storage_options=hf_options(hub))
    first = corpus.units[0]  # the first member: a whole file's worth of bytes follows it
    hub.reset_counts()
    reader = RangeReader(storage=corpus.storage)  # the options are the corpus's
    try:
        data = reader.read(first)
    finally:
        reader.close()
    raw = (repo / "subsets" / "urlsf_subset00.tar").read_bytes()
    assert data == raw[first.offset : first.offset + first.size]
    # Its bytes and no more: no block of readahead beyond it (fsspec's default: 5 MB).
    assert hub.bytes_sent == first.size < len(raw) / 2
    assert hub.counts["cdn"] == 1
    hub.reset_counts()
    assert len(texts(corpus, seed=0, workers=0, take=3, shuffle_buffer=0)) == 3
    assert hub.counts["cdn"] == 1 and hub.bytes_sent <= max(u.size for u in corpus.units)


def test_hub_second_open_uses_the_index_from_owt_index(small_corpus: Path, hub: FakeHub) -> None:
    run = cli("index", HF_URL, "-q", "-j", "1", "--storage-option", f"endpoint={hub.url}")
    assert run.returncode == 0, run.stderr
    assert "120 documents in 6 members" in run.stderr
    walked = hub.counts["cdn"]
    assert walked > 0
    hub.reset_counts()
    again = Corpus.open(HF_URL, storage_options=hf_options(hub))
    assert [u[1:] for u in again.units] == local_units(small_corpus)
    # The repo, the folder's listing pages and nothing else: no header is read again.
    assert hub.counts["cdn"] == hub.counts["resolve"] == 0
    assert hub.requests == hub.counts["info"] + hub.counts["tree"] <= 4


def test_hub_changed_file_is_indexed_again(tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    root = tmp_path / "repo"
    write_corpus(root / "subsets", subsets=1, members=2, docs=5, seed=0, workers=1)
    with FakeHub({REPO: root}) as server:
        url = HF_URL + "urlsf_subset00.tar"
        before = Corpus.open(url, storage_options=hf_options(server))
        other = tmp_path / "other"
        write_corpus(other, subsets=1, members=3, docs=7, seed=1, workers=1)
        shutil.copy(other / "urlsf_subset00.tar", root / "subsets" / "urlsf_subset00.tar")
        after = Corpus.open(url, storage_options=hf_options(server))
        assert len(after.units) == 3 != len(before.units)
        assert texts(after, seed=1, workers=0) == texts(str(root / "subsets"), seed=1)


def test_hub_missing_repo_and_file_are_clear_errors_at_once(hub: FakeHub) -> None:
    options = hf_options(hub)
    missing_repo = "hf://datasets/nobody/nothing/subsets/"
    with pytest.raises(CorpusError) as info:
        Corpus.open(missing_repo, storage_options=options)
    assert str(info.value) == f"{missing_repo}: no such file, key or bucket"
    assert hub.requests == 1  # the repo's info, never retried
    hub.reset_counts()
    missing_file = HF_URL + "urlsf_subset99.tar"
    with pytest.raises(CorpusError) as info:
        Corpus.open(missing_file, storage_options=options)
    assert str(info.value) == f"{missing_file}: no such file, key or bucket"
    assert hub.requests <= 3  # repo, then the parent's listing; nothing retried


def test_hub_faults_are_retried(small_corpus: Path, hub: FakeHub) -> None:
    corpus = Corpus.open(HF_URL, storage_options=hf_options(hub))
    # Ranged reads go to the CDN with the library's own retries (source.with_retries).
    hub.faults.next_503 = 1
    hub.faults.next_short = 1
    hub.faults.next_drop = 1
    got = texts(corpus, seed=7, workers=0)
    assert hub.injected == 3
    assert got == texts(str(small_corpus), seed=7)


def test_hub_a_file_gone_after_indexing_fails_at_once(hub: FakeHub) -> None:
    corpus = Corpus.open(HF_URL + "urlsf_subset01.tar", storage_options=hf_options(hub))
    hub.repos = {}  # the repo is gone
    # The CDN serves what was resolved while indexing (the content indexed) until its
    # signature expires; then resolving again finds nothing.
    hub.expire()
    hub.reset_counts()
    with pytest.raises(CorruptMember, match="cannot read: no such file") as info:
        list(Loader(corpus, seed=0, workers=0))
    assert info.value.path == HF_URL + "urlsf_subset01.tar"
    assert hub.counts["resolve"] <= 1  # never retried


def test_hub_token_opens_a_private_repo_and_is_never_shown(small_corpus: Path, repo: Path) -> None:
    pytest.importorskip("huggingface_hub")
    with FakeHub({REPO: repo}, tokens={REPO: SECRET}) as server:
        corpus = Corpus.open(HF_URL, storage_options=hf_options(server, token=SECRET))
        assert texts(corpus, seed=3, workers=2) == texts(str(small_corpus), seed=3)
        assert server.counts["api-refused"] == 0
        assert any(f"Bearer {SECRET}" in h for h in server.headers_seen)
        # The token goes to the Hub, never to the CDN (the signed URL is its own key).
        sent = list(zip(server.log, server.headers_seen, strict=True))
        assert any(path.startswith("/cdn/") for (_, path), _ in sent)
        assert not any(SECRET in h for (_, path), h in sent if path.startswith("/cdn/"))
        shown: list[str] = []
        wrong = SECRET[:-1] + "X"
        for options in (hf_options(server, token=wrong), hf_options(server)):
            with pytest.raises(CorpusError) as info:
                Corpus.open(HF_URL, storage_options=options)
            shown.append(str(info.value))
        # A read refused after indexing, with the right token in use.
        corpus = Corpus.open(HF_URL, storage_options=hf_options(server, token=SECRET))
        server.faults.status = 403
        with pytest.raises(CorruptMember, match="cannot read: access refused") as read_error:
            list(Loader(corpus, seed=3, workers=0))
        shown.append(str(read_error.value))
        server.faults.status = None
        run = cli("index", HF_URL, "-q", "--storage-option", f"endpoint={server.url}",
                  env={"HF_TOKEN": wrong})  # fmt: skip
        assert run.returncode == 1
        shown += [run.stdout, run.stderr]
        run = cli("index", HF_URL, "-q", "--storage-option", f"endpoint={server.url}",
                  "--storage-option", f"token={SECRET}")  # fmt: skip
        assert run.returncode == 0, run.stderr
        shown += [run.stdout, run.stderr]
    # The Hub answers 401 for a private repo without (the right) token.
    assert shown[0] == shown[1] == f"{HF_URL}: access refused: HTTP 401 (check the credentials)"
    for text in shown:
        assert SECRET not in text and wrong not in text and "s3cr3t" not in text


def test_hub_token_from_hf_token(small_corpus: Path, repo: Path, monkeypatch: Any) -> None:
    pytest.importorskip("huggingface_hub")
    with FakeHub({REPO: repo}, tokens={REPO: SECRET}) as server:
        monkeypatch.setenv("HF_TOKEN", SECRET)
        corpus = Corpus.open(HF_URL, storage_options=hf_options(server))
        assert len(corpus.units) == 6
        assert texts(corpus, seed=1, workers=0) == texts(str(small_corpus), seed=1)


def _hub_corpus(root: Path) -> Path:
    """2 subset tars of 8 members each under ``root/subsets``: enough reads per file to tell
    one ``resolve/`` per file from one per read."""
    write_corpus(root / "subsets", subsets=2, members=8, docs=3, seed=4, workers=1)
    return root


def test_hub_resolves_each_file_once_per_process(tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    root = _hub_corpus(tmp_path / "repo")
    local = texts(str(root / "subsets"), seed=2)
    with FakeHub({REPO: root}) as server:
        corpus = Corpus.open(HF_URL, storage_options=hf_options(server))
        files = 2
        assert len(corpus.units) == 16
        # Each file's 8 headers are read from the CDN; the Hub is asked where once per file.
        assert server.counts["cdn"] >= 16
        assert server.counts["resolve"] <= files
        for workers in (0, 2):  # forked workers inherit the resolutions
            assert texts(corpus, seed=2, workers=workers) == local
        assert server.counts["resolve"] <= files
        server.reset_counts()
        run = cli("index", HF_URL, "-q", "-j", "1", "--storage-option", f"endpoint={server.url}")
        assert run.returncode == 0, run.stderr
        assert server.counts["cdn"] >= 2  # its index is cached: counting reads the members
        assert server.counts["resolve"] <= files


def test_hub_expired_signature_is_resolved_again_once(small_corpus: Path, hub: FakeHub) -> None:
    corpus = Corpus.open(HF_URL + "urlsf_subset00.tar", storage_options=hf_options(hub))
    local = texts(str(small_corpus / "urlsf_subset00.tar"), seed=4)
    hub.expire()  # the URL signed while indexing now gets a 403
    hub.reset_counts()
    assert texts(corpus, seed=4, workers=0) == local
    # Requests in flight when it expired are refused (up to ranges.THREADS of them); the
    # file is resolved again once, however many saw it.
    assert 1 <= hub.counts["cdn-refused"] <= THREADS
    assert hub.counts["resolve"] == 1
    # A refusal right after resolving again is real: an error at once, not a loop.
    hub.expire()
    hub.faults.status = 403
    hub.reset_counts()
    with pytest.raises(CorruptMember, match="cannot read: access refused: HTTP 403"):
        list(Loader(corpus, seed=4, workers=0))
    assert hub.counts["resolve"] == 1 and hub.counts["cdn"] == 2


def test_hub_changed_file_is_indexed_again_in_the_same_process(tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    root = tmp_path / "repo"
    write_corpus(root / "subsets", subsets=1, members=2, docs=5, seed=0, workers=1)
    url = HF_URL + "urlsf_subset00.tar"
    with FakeHub({REPO: root}) as server:
        configure({"endpoint": server.url})  # one storage: resolutions are kept
        before = Corpus.open(url)
        assert len(texts(before, seed=1, workers=0)) == 10
        other = tmp_path / "other"
        write_corpus(other, subsets=1, members=3, docs=7, seed=1, workers=1)
        shutil.copy(other / "urlsf_subset00.tar", root / "subsets" / "urlsf_subset00.tar")
        # The old content is still at the URL resolved before (the CDN serves it by hash).
        after = Corpus.open(url)
        assert len(after.units) == 3 != len(before.units)
        assert texts(after, seed=1, workers=0) == texts(str(root / "subsets"), seed=1)


def test_hub_file_changed_after_indexing_is_an_error_not_a_misread(tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    root = tmp_path / "repo"
    write_corpus(root / "subsets", subsets=1, members=2, docs=5, seed=0, workers=1)
    url = HF_URL + "urlsf_subset00.tar"
    with FakeHub({REPO: root}) as server:
        corpus = Corpus.open(url, storage_options=hf_options(server))
        other = tmp_path / "other"
        write_corpus(other, subsets=1, members=3, docs=7, seed=1, workers=1)
        shutil.copy(other / "urlsf_subset00.tar", root / "subsets" / "urlsf_subset00.tar")
        server.expire()  # later: the signed URL has expired, resolving again finds the new file
        with pytest.raises(CorruptMember, match="changed since it was indexed") as info:
            list(Loader(corpus, seed=0, workers=0))
        assert info.value.path == url


def test_hub_file_replaced_by_one_of_another_size_is_an_error_whatever_its_etag(
    tmp_path: Path,
) -> None:
    pytest.importorskip("huggingface_hub")
    root = tmp_path / "repo"
    write_corpus(root / "subsets", subsets=1, members=2, docs=5, seed=0, workers=1)
    url = HF_URL + "urlsf_subset00.tar"
    target = root / "subsets" / "urlsf_subset00.tar"
    with FakeHub({REPO: root}) as server:
        corpus = Corpus.open(url, storage_options=hf_options(server))
        indexed = hashlib.sha256(target.read_bytes()).hexdigest()
        size = target.stat().st_size
        other = tmp_path / "other"
        write_corpus(other, subsets=1, members=3, docs=7, seed=1, workers=1)
        shutil.copy(other / "urlsf_subset00.tar", target)
        assert target.stat().st_size != size
        server.etags["subsets/urlsf_subset00.tar"] = indexed  # the Hub claims the old content
        server.expire()  # the URL signed while indexing stops working: resolved again
        with pytest.raises(CorruptMember, match="changed since it was indexed") as info:
            list(Loader(corpus, seed=0, workers=0))
        assert info.value.path == url


def test_hub_signed_url_never_shown(
    small_corpus: Path, hub: FakeHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every library's request log
    corpus = Corpus.open(HF_URL, storage_options=hf_options(hub))
    assert texts(corpus, seed=0, workers=0) == texts(str(small_corpus), seed=0)
    assert b"s3cr3t" not in pickle.dumps(corpus.storage)  # what Ray workers are sent
    hub.faults.rate_503 = 1.0  # the CDN fails from now on: retries run out after resolving
    with pytest.raises(CorruptMember, match="cannot read: GET bytes") as info:
        list(Loader(corpus, seed=0, workers=0))
    shown = [str(info.value), *(r.getMessage() for r in caplog.records)]
    assert any("/cdn/" in text for text in shown)  # the CDN's requests were logged
    run = cli("index", HF_URL, "-q", "--storage-option", f"endpoint={hub.url}")
    assert run.returncode == 1
    shown += [run.stdout, run.stderr]
    shown += [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    for text in shown:
        assert "s3cr3t" not in text and "Signature" not in text


def test_hub_without_a_redirect_reads_through_hffilesystem(small_corpus: Path, repo: Path) -> None:
    pytest.importorskip("huggingface_hub")
    with FakeHub({REPO: repo}, tokens={REPO: SECRET}) as server:
        server.redirect = False  # the Hub serves the bytes itself (they need the token)
        corpus = Corpus.open(HF_URL, storage_options=hf_options(server, token=SECRET))
        assert texts(corpus, seed=6, workers=0) == texts(str(small_corpus), seed=6)
        assert server.counts["cdn"] == 0 and server.counts["resolve"] > 6


# -- Google Cloud Storage -----------------------------------------------------------


def test_gcs_folder_and_glob_stream_as_local(small_corpus: Path, gcs: FakeGCS) -> None:
    options = gs_options(gcs)
    folder = Corpus.open(GS_URL, storage_options=options)
    pattern = Corpus.open(GS_URL + "urlsf_subset0*.tar", storage_options=options)
    assert [u[1:] for u in folder.units] == local_units(small_corpus)  # _COMPLETE left out
    assert folder.units == pattern.units
    assert folder.units[0].path == GS_URL + "urlsf_subset00.tar"
    assert gcs.counts["list"] >= 2  # the listing's pages (2 entries each) were followed
    local = texts(str(small_corpus), seed=5)
    for workers in (0, 2):
        assert texts(folder, seed=5, workers=workers) == local
    assert gcs.counts["media"] > 0 and gcs.counts["other"] == 0


def test_gcs_second_open_uses_the_index_from_owt_index(small_corpus: Path, gcs: FakeGCS) -> None:
    run = cli("index", GS_URL, "-q", "-j", "1",
              "--storage-option", f"endpoint_url={gcs.url}", "--storage-option", "token=anon",
              env={"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "120 documents in 6 members" in run.stderr
    assert gcs.counts["media"] > 0
    gcs.reset_counts()
    again = Corpus.open(GS_URL, storage_options=gs_options(gcs))
    assert [u[1:] for u in again.units] == local_units(small_corpus)
    assert gcs.counts["media"] == 0
    assert gcs.requests == gcs.counts["list"] == 2  # the prefix's 2 pages give every stat


def test_gcs_reads_members_by_range(repo: Path, gcs: FakeGCS) -> None:
    corpus = Corpus.open(GS_URL + "urlsf_subset00.tar", storage_options=gs_options(gcs))
    first = corpus.units[0]
    gcs.reset_counts()
    reader = RangeReader(storage=corpus.storage)  # the options are the corpus's
    try:
        data = reader.read(first)
    finally:
        reader.close()
    raw = (repo / "subsets" / "urlsf_subset00.tar").read_bytes()
    assert data == raw[first.offset : first.offset + first.size]
    assert gcs.bytes_sent == first.size < len(raw) / 2
    assert gcs.counts["media"] == 1


def test_gcs_missing_bucket_and_object_are_clear_errors_at_once(gcs: FakeGCS) -> None:
    options = gs_options(gcs)
    for url in ("gs://no-such-bucket/owt/", GS_URL + "urlsf_subset99.tar"):
        gcs.reset_counts()
        with pytest.raises(CorpusError) as info:
            Corpus.open(url, storage_options=options)
        assert str(info.value) == f"{url}: no such file, key or bucket"
        assert gcs.requests <= 3  # gcsfs's own probes (object, then listing); never retried


def test_gcs_faults_are_retried(small_corpus: Path, gcs: FakeGCS) -> None:
    corpus = Corpus.open(GS_URL, storage_options=gs_options(gcs))
    gcs.faults.next_503 = 1
    gcs.faults.next_short = 1
    gcs.faults.next_drop = 1
    got = texts(corpus, seed=7, workers=0)
    assert gcs.injected == 3
    assert got == texts(str(small_corpus), seed=7)


@pytest.mark.parametrize("status", [401, 403])
def test_gcs_refused_access_is_not_retried(gcs: FakeGCS, status: int) -> None:
    corpus = Corpus.open(GS_URL + "urlsf_subset00.tar", storage_options=gs_options(gcs))
    gcs.faults.status = status  # gcsfs: an HttpError with its code, or OSError("Forbidden…")
    gcs.reset_counts()
    with pytest.raises(CorruptMember, match="cannot read: access refused") as info:
        list(Loader(corpus, seed=0, workers=0))
    assert info.value.path == GS_URL + "urlsf_subset00.tar"
    assert gcs.counts["media"] == 1


def test_gcs_changed_object_is_indexed_again(tmp_path: Path) -> None:
    pytest.importorskip("gcsfs")
    root = tmp_path / "bucket"
    write_corpus(root / "owt", subsets=1, members=2, docs=5, seed=0, workers=1)
    with FakeGCS({"owt-bucket": root}) as server:
        url = GS_URL + "urlsf_subset00.tar"
        before = Corpus.open(url, storage_options=gs_options(server))
        other = tmp_path / "other"
        write_corpus(other, subsets=1, members=3, docs=7, seed=1, workers=1)
        shutil.copy(other / "urlsf_subset00.tar", root / "owt" / "urlsf_subset00.tar")
        after = Corpus.open(url, storage_options=gs_options(server))
        assert len(after.units) == 3 != len(before.units)
        assert texts(after, seed=1, workers=0) == texts(str(root / "owt"), seed=1)


def test_without_gcsfs_a_gs_url_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from fsspec.registry import _registry

    monkeypatch.setitem(sys.modules, "gcsfs", None)
    for name in ("gs", "gcs"):  # forget the class imported by the tests above
        monkeypatch.delitem(_registry, name, raising=False)
    extra = r"gs:// URLs needs the remote extra: from the clone: pip install -e '\.\[remote\]'"
    with pytest.raises(CorpusError, match=extra):
        Corpus.open("gs://bucket/owt/")
    assert _LOOKUPS == []


def test_cli_missing_repo_and_bucket_are_one_line(hub: FakeHub, gcs: FakeGCS) -> None:
    missing_repo = "hf://datasets/nobody/nothing/subsets/"
    run = cli("index", missing_repo, "-q", "--storage-option", f"endpoint={hub.url}")
    assert run.returncode == 1
    assert run.stderr.strip() == f"owt: error: {missing_repo}: no such file, key or bucket"
    missing_bucket = "gs://no-such-bucket/owt/urlsf_subset00.tar"
    options = ["--storage-option", f"endpoint_url={gcs.url}", "--storage-option", "token=anon"]
    # (Google's libraries warn at import on Python 3.10 that they will stop supporting it)
    quiet = {"PYTHONWARNINGS": "ignore::FutureWarning"}
    run = cli("stream", missing_bucket, "-q", *options, env=quiet)
    assert run.returncode == 1
    assert run.stderr.strip() == f"owt: error: {missing_bucket}: no such file, key or bucket"
    assert run.stdout == ""


def test_gcs_object_replaced_after_indexing_is_an_error_never_a_misread(tmp_path: Path) -> None:
    """gcsfs's reads take no ETag condition: they name the indexed generation."""
    pytest.importorskip("gcsfs")
    root = tmp_path / "bucket"
    write_corpus(root / "owt", subsets=1, members=2, docs=5, seed=0, workers=1)
    with FakeGCS({"owt-bucket": root}) as server:
        corpus = Corpus.open(GS_URL + "urlsf_subset00.tar", storage_options=gs_options(server))
        path = root / "owt" / "urlsf_subset00.tar"
        data = bytearray(path.read_bytes())
        unit = corpus.units[0]
        for k in range(unit.offset + 64, unit.offset + unit.size - 64, 97):
            data[k] ^= 0x5A  # other bytes, the same size: a new generation
        path.write_bytes(bytes(data))
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        with pytest.raises(OWTError, match="changed since it was indexed") as info:
            texts(corpus, seed=0, workers=0)
        assert "corrupt" not in str(info.value)
        assert server.counts["media-other-generation"] == 1  # not retried


def test_hub_cdn_serving_other_content_than_resolved_is_an_error(tmp_path: Path) -> None:
    """The CDN's answer is checked too: an ETag that is another sha256 than the one the Hub
    resolved is other content (a CDN that serves a replaced object under the old URL)."""
    pytest.importorskip("huggingface_hub")
    root = tmp_path / "repo"
    write_corpus(root / "subsets", subsets=1, members=2, docs=5, seed=0, workers=1)
    with FakeHub({REPO: root}) as server:
        corpus = Corpus.open(HF_URL + "urlsf_subset00.tar", storage_options=hf_options(server))
        (blob,) = server.blobs.iterdir()  # what the signed URL serves
        data = bytearray(blob.read_bytes())
        unit = corpus.units[0]
        for k in range(unit.offset + 64, unit.offset + unit.size - 64, 97):
            data[k] ^= 0x5A  # other bytes, the same size, at the same URL
        blob.write_bytes(bytes(data))
        with pytest.raises(CorruptMember, match="changed since it was indexed") as info:
            list(Loader(corpus, seed=0, workers=0))
        assert "corrupt" not in str(info.value)


def test_hub_file_replaced_by_one_of_the_same_size_is_an_error_in_a_new_process(
    tmp_path: Path,
) -> None:
    """A process that resolves the file for the first time (a pickled corpus: Ray) compares
    the Hub's sha256 with the indexed one: the same size is not the same file."""
    pytest.importorskip("huggingface_hub")
    root = tmp_path / "repo"
    write_corpus(root / "subsets", subsets=1, members=2, docs=5, seed=0, workers=1)
    with FakeHub({REPO: root}) as server:
        opened = Corpus.open(HF_URL + "urlsf_subset00.tar", storage_options=hf_options(server))
        corpus = pickle.loads(pickle.dumps(opened))  # its resolutions stay behind
        path = root / "subsets" / "urlsf_subset00.tar"
        data = bytearray(path.read_bytes())
        unit = corpus.units[0]
        for k in range(unit.offset + 64, unit.offset + unit.size - 64, 97):
            data[k] ^= 0x5A  # other bytes, the same size
        path.write_bytes(bytes(data))
        with pytest.raises(CorruptMember, match="changed since it was indexed"):
            list(Loader(corpus, seed=0, workers=0))
