"""What a remote folder holds besides its corpus, and a token file's identity by URL (issue 39),
over the HTTP range server (``remote_servers.RangeServer`` on 127.0.0.1).

A folder's file that is no corpus file by name nor by bytes (README.md, an empty checksums
file) is left out and said, as in a local folder, under every ``on_error``; a file named as
a corpus file is read, or is an error naming it (a counted skip under ``skip``); a file named
directly is always read or refused."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember, UnknownFormat
from remote_servers import RangeServer
from tables_support import sample_texts, write_jsonl

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote
isolated_storage = remote_servers.isolated_storage

TEXTS = sample_texts(6, seed=3)
LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 12\n"


def _folder(root: Path) -> Path:
    write_jsonl(root / "a.jsonl", TEXTS)
    (root / "README.md").write_text("# a dataset\n\nIts card.\n")
    (root / "checksums.sha256").write_bytes(b"")
    return root


def test_a_remote_folder_leaves_out_its_readme_as_a_local_one_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _folder(tmp_path / "site")
    with RangeServer(root) as server:
        for on_error in ("raise", "skip"):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="openwebtext"):
                corpus = Corpus.open(server.url + "/", on_error=on_error)
            assert [u.member for u in corpus.units] == ["a.jsonl"]
            assert not corpus.skipped_files
            said = " ".join(r.getMessage() for r in caplog.records)
            assert "left out 2 files that are not corpus files: README.md, checksums" in said
            assert [d.text for d in Loader(corpus, workers=0, shuffle=False)] == TEXTS
        local = Corpus.open(root)  # the same rule as a local folder's
        assert [u.member for u in local.units] == ["a.jsonl"]
        with pytest.raises(UnknownFormat, match=r"README\.md"):
            Corpus.open(server.url + "/README.md")  # named: read, or refused


def test_a_remote_file_named_as_a_corpus_file_is_never_left_out(tmp_path: Path) -> None:
    root = _folder(tmp_path / "site")
    (root / "b.parquet").write_bytes(LFS)  # what a clone without git-lfs leaves
    (root / "c.jsonl.zst").write_bytes(b"not zstd at all\n")
    with RangeServer(root) as server:
        with pytest.raises(CorpusError, match=r"b\.parquet.*Git LFS pointer"):
            Corpus.open(server.url + "/")
        corpus = Corpus.open(server.url + "/", on_error="skip")
        assert [u.member for u in corpus.units] == ["a.jsonl"]
        skipped = sorted(os.path.basename(e.path or "") for e in corpus.skipped_files)
        assert skipped == ["b.parquet", "c.jsonl.zst"]


def test_a_token_file_by_url_is_known_by_its_validator(tmp_path: Path, token_run: Path) -> None:
    root = tmp_path / "tok"
    root.mkdir()
    for name in ("train.bin", "train.idx", "meta.json"):
        shutil.copy(token_run / name, root / name)
    with RangeServer(root) as server:
        url = server.url + "/train.bin"
        before = Corpus.open_tokens(url, unit_tokens=1 << 10)
        assert "unknown" not in before.versions[0]
        ids = np.fromfile(root / "train.bin", dtype="<u2")
        ids[0] = 65 if ids[0] != 65 else 66  # the same size and index, another first id
        ids.tofile(root / "train.bin")
        later = os.stat(root / "train.bin").st_mtime_ns + 10**9
        os.utime(root / "train.bin", ns=(later, later))  # the server's ETag changes
        with pytest.raises(CorruptMember, match="changed since it was indexed"):
            list(Loader(before, workers=0, shuffle=False, tokenizer="bytes"))
        after = Corpus.open_tokens(url, unit_tokens=1 << 10)
        assert [(u.member, u.size) for u in before.units] == [
            (u.member, u.size) for u in after.units
        ]
        assert before.fingerprint() != after.fingerprint()


def test_a_cached_footer_of_an_earlier_version_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Seeded-bug round, P8.) A remote parquet file's footer kept in the cache is stamped with
    the file's identity: a process that knows the file as replaced since (another ETag) reads
    the new footer, never the cached one of the old file."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from openwebtext.index import parquet
    from openwebtext.source import file_info, resolve

    root = tmp_path / "site"
    root.mkdir()
    pq.write_table(pa.table({"text": TEXTS}), root / "x.parquet", row_group_size=2)
    with RangeServer(root) as server:
        url = server.url + "/x.parquet"
        corpus = Corpus.open(url)  # indexed: its footer kept in the cache, stamped
        old = parquet.footer_of(url, corpus.storage)
        pq.write_table(pa.table({"text": TEXTS}), root / "x.parquet", row_group_size=3)
        later = os.stat(root / "x.parquet").st_mtime_ns + 10**9
        os.utime(root / "x.parquet", ns=(later, later))
        new = (root / "x.parquet").read_bytes()
        store = resolve(None)
        # a process that did not index it (the footers this one read are not inherited)
        monkeypatch.setattr(parquet, "_FOOTERS", {})
        store.remember(store.alias(url), file_info(url, None))
        footer = parquet.footer_of(url, None)
        assert footer != old and new.endswith(footer)


def test_a_remote_bin_longer_than_its_index_is_refused(tmp_path: Path, token_run: Path) -> None:
    """(Seeded-bug round, X4.) Ids past what the .idx beside a remote .bin says are not left
    out without a word."""
    root = tmp_path / "tok"
    root.mkdir()
    for name in ("train.idx", "meta.json"):
        shutil.copy(token_run / name, root / name)
    data = (token_run / "train.bin").read_bytes()
    (root / "train.bin").write_bytes(data + data[:4])
    with RangeServer(root) as server, pytest.raises(CorpusError, match=r"not the ids of .*\.idx"):
        Corpus.open_tokens(server.url + "/train.bin")


def test_a_remote_ds_of_a_part_of_an_id_is_refused(tmp_path: Path) -> None:
    """A datatrove ``.ds`` read by range whose size is not whole ids is refused, as a local
    one is (its last byte was left out without a word)."""
    from openwebtext.tokenfiles import datatrove_index

    root = tmp_path / "ds"
    root.mkdir()
    (root / "a.ds").write_bytes(np.array([1, 50256, 2, 50256], "<u2").tobytes() + b"\x07")
    (root / "a.ds.index").write_bytes(datatrove_index(np.array([2, 4])))
    with pytest.raises(CorpusError, match="9 bytes of ids, not a whole number"):
        Corpus.open_tokens(root / "a.ds")
    with RangeServer(root) as server, pytest.raises(CorpusError, match="9 bytes of ids"):
        Corpus.open_tokens(server.url + "/a.ds")
