"""What a red team of remote token files found (round rt3), over servers on 127.0.0.1: a URL's
credentials and signed query string reached units, errors and skips; a ``meta.json`` or an
index that could not be read was taken as none (the tokenizer check gone, an outage told as
"no index"); a URL's document ends were kept by URL alone, shared by two endpoints."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptDocument
from remote_servers import RangeServer

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote
isolated_storage = remote_servers.isolated_storage

PASSWORD = "hunter2"
SIGNATURE = "SEKRETSIG"
#: A signed URL's query string (its credential holds slashes, as AWS's does).
SIGNED = f"?X-Amz-Signature={SIGNATURE}&X-Amz-Credential=AKIAEXAMPLE/20240101/us-east-1/s3"
FILES = ("train.bin", "train.idx", "val.bin", "val.idx", "train.ds", "train.ds.index", "val.ds",
         "val.ds.index", "meta.json")


@pytest.fixture
def root(token_run: Path, tmp_path: Path) -> Path:
    """A copy of the token run (bytes tokenizer) to serve: its Megatron and datatrove files."""
    out = tmp_path / "site"
    out.mkdir()
    for name in FILES:
        shutil.copy(token_run / name, out / name)
    return out


class _Failing(RangeServer):
    """Serves a folder, but answers every GET (and HEAD, with ``head``) of the file ``name``
    with ``fault``: an HTTP status, or ``"reset"`` (the connection dropped, no answer)."""

    def __init__(self, root: Path, name: str, fault: int | str, head: bool = False) -> None:
        super().__init__(root)
        self.name, self.fault, self.on_head = name, fault, head

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        mine = h.path.split("?", 1)[0].rsplit("/", 1)[-1] == self.name
        if not mine or (head and not self.on_head):
            super()._answer(h, head)
        elif self.fault == "reset":
            h.close_connection = True
            h.connection.shutdown(2)
        else:
            self._empty(h, int(self.fault))


def _ids(corpus: Corpus, workers: int = 0) -> list[list[int]]:
    loader = Loader(corpus, workers=workers, shuffle=False, tokenizer="bytes")
    return [d.tokens.tolist() for d in loader]


# -- 01: credentials and signed query strings --------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_signed_token_url_is_read_and_shown_without_its_secrets(root: Path, workers: int) -> None:
    """A signed URL (``…/train.bin?X-Amz-Signature=…``) was refused as "not a token file"
    (its suffix was tested on the whole URL) with the signature and password in the message;
    now it is read, its units named by the URL without either (``Storage.alias``)."""
    want = _ids(Corpus.open_tokens([root / "train.bin", root / "val.ds"]))
    with RangeServer(root) as server:
        base = server.url.replace("http://", f"http://alice:{PASSWORD}@")
        corpus = Corpus.open_tokens([f"{base}/train.bin{SIGNED}", f"{base}/val.ds{SIGNED}"])
        assert sorted({u.path for u in corpus.units}) == [
            f"{server.url}/train.bin", f"{server.url}/val.ds"
        ]  # fmt: skip
        shown = " ".join(f"{u.path} {u.member} {u.subset}" for u in corpus.units)
        assert PASSWORD not in shown and SIGNATURE not in shown and "AKIA" not in shown
        assert _ids(corpus, workers) == want


def test_a_url_that_is_no_token_file_is_refused_without_its_secrets(root: Path) -> None:
    with RangeServer(root) as server:
        base = server.url.replace("http://", f"http://alice:{PASSWORD}@")
        with pytest.raises(CorpusError, match="not a token file this reads remotely") as raised:
            Corpus.open_tokens(f"{base}/meta.json{SIGNED}")
    said = f"{raised.value} {raised.value.path}"
    assert PASSWORD not in said and SIGNATURE not in said
    assert raised.value.path == f"{server.url}/meta.json"


def test_a_password_in_a_token_url_is_in_no_error_nor_skip(root: Path) -> None:
    """With ``http://user:password@host/train.bin`` the password was in every unit's path, and
    so in a damaged document's ``CorruptDocument`` and in ``stats.skipped``."""
    ids = np.fromfile(root / "train.bin", dtype="<u2")
    ids[3] = 60000  # past the bytes tokenizer's vocabulary: document 0 is damaged
    ids.tofile(root / "train.bin")
    with RangeServer(root) as server:
        url = server.url.replace("http://", f"http://alice:{PASSWORD}@") + "/train.bin"
        corpus = Corpus.open_tokens(url)
        assert {u.path for u in corpus.units} == {f"{server.url}/train.bin"}
        with pytest.raises(CorruptDocument) as raised:
            _ids(corpus)
        assert raised.value.path == f"{server.url}/train.bin"
        assert PASSWORD not in str(raised.value)
        loader = Loader(corpus, workers=0, shuffle=False, tokenizer="bytes", on_error="skip")
        with loader.iter() as it:
            for _ in it:
                pass
            skipped = it.stats.skipped
    assert skipped and not any(PASSWORD in s for s in skipped)


# -- 02: a meta.json that cannot be read -------------------------------------------------------


@pytest.mark.parametrize(("fault", "head"), [(503, True), (503, False), (429, False),
                                             ("reset", False)])  # fmt: skip
def test_a_meta_json_that_cannot_be_read_is_an_error_not_none(
    root: Path, fault: int | str, head: bool
) -> None:
    """A ``meta.json`` beside a remote file that answered 503, 429 or a reset until the retries
    ran out was taken as none: the tokenizer check was gone, and a ``bytes`` run was read with
    ``tokenizer="gpt2"`` (its ids as GPT-2's). Only a missing one (404) is none."""
    with _Failing(root, "meta.json", fault, head) as server:
        with pytest.raises(CorpusError, match=r"cannot read: .*failed \d+ times") as raised:
            Corpus.open_tokens(server.url + "/train.bin")
        assert raised.value.path == f"{server.url}/meta.json"
        if not head and fault != "reset":
            assert f"HTTP {fault}" in str(raised.value)
        server.fault = 404  # not there: no run recorded, the ids read as given
        corpus = Corpus.open_tokens(server.url + "/train.bin")
        assert corpus.units and _ids(corpus)[0]
        server.name = ""  # served: the run's tokenizer is checked
        corpus = Corpus.open_tokens(server.url + "/train.bin")
        with pytest.raises(CorpusError, match="written with the tokenizer 'bytes'"):
            list(Loader(corpus, workers=0, shuffle=False, tokenizer="gpt2"))


# -- 04: an index that cannot be read ----------------------------------------------------------


@pytest.mark.parametrize(("name", "index"), [("train.bin", "train.idx"),
                                             ("train.ds", "train.ds.index")])  # fmt: skip
def test_an_index_that_cannot_be_read_is_no_missing_index(
    root: Path, name: str, index: str
) -> None:
    """An outage of the ``.idx`` beside a remote ``.bin`` (503 until the retries ran out) was
    told as "there is no index ... write the index", the 503 and the file's name dropped."""
    with _Failing(root, index, 503) as server:
        with pytest.raises(CorpusError, match=r"cannot read: .*HTTP 503") as raised:
            Corpus.open_tokens(f"{server.url}/{name}")
        assert raised.value.path == f"{server.url}/{index}"
        assert "write the index" not in str(raised.value)
        server.fault = 404  # not there: the index is missing, and said so
        with pytest.raises(CorpusError, match=f"read with its index beside it \\({index} is not"):
            Corpus.open_tokens(f"{server.url}/{name}")
        fix = "--format datatrove" if name.endswith(".ds") else "--format megatron"
        with pytest.raises(CorpusError) as raised:  # (a .ds was told to write a megatron .idx)
            Corpus.open_tokens(f"{server.url}/{name}")
        assert str(raised.value).endswith(f"(owt tokenize {fix})")
        assert ("llm.c" in str(raised.value)) == name.endswith(".bin")


# -- 08: the same URL on two endpoints ---------------------------------------------------------

REPO = "owner/tokens"
HF_URL = f"hf://datasets/{REPO}/run/train.bin"


def _hand_run(folder: Path, docs: list[str]) -> list[int]:
    """A Megatron ``train.bin`` and ``train.idx`` of byte ids, each document ended by 256; its
    documents' ends."""
    from openwebtext.tokenfiles import megatron_index

    folder.mkdir(parents=True)
    ids = [[*d.encode(), 256] for d in docs]
    np.array([i for doc in ids for i in doc], "<u2").tofile(folder / "train.bin")
    ends = np.cumsum([len(doc) for doc in ids]).astype(np.int64)
    (folder / "train.idx").write_bytes(megatron_index(ends, np.dtype("<u2")))
    return ends.tolist()


@pytest.fixture
def two_hubs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """Two fake Hubs (``cloud_servers.FakeHub``) whose repo ``owner/tokens`` holds a
    ``run/train.bin`` of the same size, cut into other documents."""
    pytest.importorskip("huggingface_hub")
    from cloud_servers import FakeHub

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved token
    monkeypatch.delenv("HF_TOKEN", raising=False)
    _hand_run(tmp_path / "a" / "run", ["alpha beta", "gamma delta epsilon"] * 20)
    _hand_run(tmp_path / "b" / "run", ["alpha beta gamma", "delta epsilon"] * 20)
    assert os.path.getsize(tmp_path / "a/run/train.bin") == os.path.getsize(
        tmp_path / "b/run/train.bin"
    )
    with FakeHub({REPO: tmp_path / "a"}) as one, FakeHub({REPO: tmp_path / "b"}) as two:
        yield one.url, two.url


def test_a_url_s_document_ends_are_kept_per_endpoint(two_hubs: tuple[str, str]) -> None:
    """The ends of a remote token file were kept by URL alone: opening the same URL on another
    endpoint (a file of the same size, other documents) re-cut the first corpus's documents
    silently. Each storage keeps its own (``tokenfiles.opened(url, storage=)``); a reader that
    does not say which storage, read from several, gets an error."""
    from openwebtext.tokenfiles import opened

    first = Corpus.open_tokens(HF_URL, eot=256, storage_options={"endpoint": two_hubs[0]})
    before = _ids(first)
    assert [bytes(d[:-1]).decode() for d in before[:2]] == ["alpha beta", "gamma delta epsilon"]
    second = Corpus.open_tokens(HF_URL, eot=256, storage_options={"endpoint": two_hubs[1]})
    assert _ids(first) == before  # the readers ask for their storage's
    assert _ids(first, workers=2) == before
    assert opened(HF_URL, storage=first.storage).ends.tolist()[:2] == [11, 31]
    assert opened(HF_URL, storage=second.storage).ends.tolist()[:2] == [17, 31]


def test_a_url_s_parquet_footer_is_kept_per_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The footers of remote parquet files were kept by URL alone: the same URL opened on
    another endpoint replaced the first corpus's footer, and its row groups were read by the
    other file's."""
    pytest.importorskip("huggingface_hub")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from cloud_servers import FakeHub

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    texts = {"a": [f"alpha {k}" for k in range(40)], "b": [f"beta gamma {k}" for k in range(30)]}
    for name, docs in texts.items():
        (tmp_path / name / "run").mkdir(parents=True)
        pq.write_table(pa.table({"text": docs}), tmp_path / name / "run" / "x.parquet",
                       row_group_size=7)  # fmt: skip
    url = f"hf://datasets/{REPO}/run/x.parquet"
    with FakeHub({REPO: tmp_path / "a"}) as one, FakeHub({REPO: tmp_path / "b"}) as two:
        first = Corpus.open(url, storage_options={"endpoint": one.url})
        second = Corpus.open(url, storage_options={"endpoint": two.url})
        for corpus, name in [(first, "a"), (second, "b"), (first, "a")]:
            for workers in (0, 2):
                got = [d.text for d in Loader(corpus, workers=workers, shuffle=False)]
                assert got == texts[name], (name, workers)


class _RefusesWhatItLacks(RangeServer):
    """A store that answers 403 for a key it does not hold (S3 to a reader without
    ``s3:ListBucket``, CloudFront before S3, a public bucket read anonymously)."""

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        if not (self.root / h.path.split("?", 1)[0].lstrip("/")).exists():
            self._empty(h, 403)
            return
        super()._answer(h, head)


def test_a_meta_json_refused_by_a_store_that_refuses_what_it_lacks_is_none_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Megatron run (no ``meta.json``) on such a store opens, with a warning; its index,
    refused, is an error (its ids cannot be placed without it)."""
    ends = _hand_run(tmp_path / "run", ["alpha beta", "gamma"])
    with _RefusesWhatItLacks(tmp_path / "run") as server:
        corpus = Corpus.open_tokens(server.url + "/train.bin", eot=256)
        assert "meta.json: access refused, read as none" in caplog.text
        got = [d.tokens.tolist() for d in Loader(corpus, workers=0, shuffle=False,
                                                 tokenizer="bytes")]  # fmt: skip
        assert [len(ids) for ids in got] == np.diff([0, *ends]).tolist()
        (tmp_path / "run" / "train.idx").unlink()
        with pytest.raises(CorpusError, match=r"train\.idx: cannot read: access refused"):
            Corpus.open_tokens(server.url + "/train.bin", eot=256)


def test_a_token_corpus_opened_before_configure_reads_after_it(tmp_path: Path) -> None:
    """``configure()`` changes the default storage's place but keeps what indexing learnt:
    the ends kept under the old place are found by the file's version."""
    from openwebtext.source import configure

    ends = _hand_run(tmp_path / "run", ["alpha beta", "gamma", "delta epsilon"])
    with RangeServer(tmp_path / "run") as server:
        corpus = Corpus.open_tokens(server.url + "/train.bin", eot=256)
        try:
            configure({"block_size": 1 << 20})
            for workers in (0, 2):
                got = Loader(corpus, workers=workers, shuffle=False, tokenizer="bytes")
                assert [len(d.tokens) for d in got] == np.diff([0, *ends]).tolist()
        finally:
            configure(None)
