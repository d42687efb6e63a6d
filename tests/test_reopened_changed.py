"""A corpus opened, its file changed, and the file opened again (a second ``Corpus.open``
without options): the first corpus still reads against what *it* indexed. A review found the
second open noted the file's new identity in the default storage every corpus opened without
options shares, and the first corpus then read the new bytes at its old offsets without a word
(locally and over HTTP: the range reads asked ``If-Match`` the new ETag). Each corpus now reads
with a view of the default storage with aliases and identities of its own (``Storage.view``),
noted as it is indexed.

A red team then found the same class elsewhere: a file changed *while* it was indexed (its
identity was noted after), a server's whole body kept by URL for every corpus, ``file://`` URLs
never checked, a file put in place by a rename with its size and mtime kept, two URLs that
differ only in their query string sharing one alias, and a content fingerprint hashing the
file as it is now: each below."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import remote_servers
from openwebtext import Corpus, CorruptMember
from openwebtext.errors import OWTError
from openwebtext.source import FileInfo, configure, resolve
from openwebtext.source.settings import PerStorage
from remote_servers import RangeServer
from support import texts
from test_local_changed import KINDS, _read, _same_size_rewrite
from test_source_validators import _replace_member_bytes

isolated_storage = remote_servers.isolated_storage  # fixture


@pytest.mark.remote
def test_a_remote_corpus_is_not_moved_by_another_open_of_its_replaced_file(
    small_corpus: Path, tmp_path: Path
) -> None:
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    root = tmp_path / "served"
    shutil.copytree(small_corpus, root)
    with RangeServer(root) as server:
        url = server.url + "/urlsf_subset00.tar"
        first = Corpus.open(url)
        unit = first.units[0]
        _replace_member_bytes(root / "urlsf_subset00.tar", unit.offset, unit.size)
        second = Corpus.open(url)  # its new ETag, noted in the default storage
        with pytest.raises(OWTError, match="changed since it was indexed"):
            texts(first, seed=0, workers=0)
        assert server.refused_if_match  # (the first corpus asked for its own version)
        with pytest.raises(OWTError, match=r"(?i)corrupt"):  # replaced bytes: bad xz data
            texts(second, seed=0, workers=0)


def test_a_view_shares_its_storage_s_options_tables_and_configure(tmp_path: Path) -> None:
    """A view reads as the storage it was made of: the same backends' tables (its filesystems
    are not made twice) and ``configure``'s options; the aliases and identities of its corpus's
    files are its own."""
    table: PerStorage[str, int] = PerStorage()
    default = resolve(None)
    view = default.view()
    view.remember("https://h.invalid/a", FileInfo(1, "etag:1"))
    table.of(None)["made"] = 1
    assert table.of(view) == {"made": 1} and view.root is default
    other = default.view()
    other.remember("https://h.invalid/a", FileInfo(2, "etag:2"))  # indexed again: changed
    default.remember("https://h.invalid/a", FileInfo(3, "etag:3"))
    assert view.identity("https://h.invalid/a") == FileInfo(1, "etag:1")
    assert other.identity("https://h.invalid/a") == FileInfo(2, "etag:2")
    assert view.alias("https://h.invalid/a?sig=1") == "https://h.invalid/a"
    assert other.real_url("https://h.invalid/a") == "https://h.invalid/a"  # (not the view's)
    configure({"anon": True})
    assert view.options == {"anon": True} and view.place == default.place
    assert table.of(view) == {}  # (configure emptied the default's tables: the view's too)


def test_a_file_changed_while_it_is_indexed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its identity is the descriptor's it was indexed with, before a byte was read: a
    writer between the indexing and the open's end is a change (before: noted after the
    indexing, so the new bytes were read at the old offsets, silently)."""
    from openwebtext.index import corpus as corpus_module

    path, _ = KINDS["jsonl"](tmp_path)
    index = corpus_module.index_inputs

    def and_a_writer(*args: object, **kwargs: object) -> object:
        indexed = index(*args, **kwargs)  # type: ignore[arg-type]
        _same_size_rewrite(path)
        return indexed

    monkeypatch.setattr(corpus_module, "index_inputs", and_a_writer)
    with pytest.raises(OWTError, match="changed while it was indexed") as caught:
        Corpus.open(path)
    assert caught.value.path == str(path)


def _renamed_over(path: Path, data: bytes) -> None:
    """``data`` put in ``path``'s place by a rename, its size and mtime kept."""
    other = path.with_name("other" + path.suffix)
    other.write_bytes(data)
    stat = path.stat()
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, path)


@pytest.mark.parametrize("as_url", [False, True], ids=["path", "file-url"])
def test_a_file_put_in_place_by_a_rename_keeping_size_and_mtime_has_changed(
    tmp_path: Path, as_url: bool
) -> None:
    """``cp -p``, ``rsync -t``, ``mv`` of a file whose mtime was kept: its inode is another
    (a ``file://`` URL's identity holds it too)."""
    if as_url:
        pytest.importorskip("fsspec")
    path, _ = KINDS["jsonl"](tmp_path)
    corpus = Corpus.open(f"file://{path}" if as_url else path)
    _renamed_over(path, path.read_bytes().replace(b"hello", b"HACKD"))
    with pytest.raises(CorruptMember, match="the file changed since it was indexed"):
        _read(corpus, 0)


def test_a_content_fingerprint_is_never_of_a_file_changed_since_indexing(tmp_path: Path) -> None:
    """What a prepared run's files are said to be of (``owt tokenize``): hashed from the file
    as it is now, it named the new content while the run read (or skipped) the old units."""
    path, open_corpus = KINDS["jsonl"](tmp_path)
    corpus = open_corpus(path)
    _same_size_rewrite(path)
    with pytest.raises(OWTError, match="the file changed since it was indexed"):
        corpus.content_fingerprint()


def test_a_file_url_changed_after_opening_is_said_to_have_changed(tmp_path: Path) -> None:
    """``file://`` (and any protocol read without a validator): the file's info is asked
    after each read and compared with the indexed (before: never checked)."""
    pytest.importorskip("fsspec")
    path, _ = KINDS["jsonl"](tmp_path)
    corpus = Corpus.open(f"file://{path}")
    _same_size_rewrite(path)
    with pytest.raises(CorruptMember, match="the file changed since it was indexed"):
        _read(corpus, 0)


@pytest.mark.remote
def test_a_whole_body_kept_for_a_server_ignoring_ranges_is_its_version_s(tmp_path: Path) -> None:
    """A small file from a server that ignores byte ranges is read whole once: kept by its URL
    alone, a corpus opened on it after it changed read the first corpus's body, silently."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from openwebtext.index import jsonl

    root = tmp_path / "served"
    root.mkdir()
    (root / "a.jsonl").write_bytes(b'{"text": "hello world"}\n{"text": "second doc"}\n')
    with RangeServer(root) as server, pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl, "CHUNK_BYTES", 20)  # a unit per line: no range is the whole file
        server.misbehave.ignore_range = True
        url = server.url + "/a.jsonl"
        assert texts(Corpus.open(url), shuffle=False, workers=0) == ["hello world", "second doc"]
        (root / "a.jsonl").write_bytes(b'{"text": "NEW!! world"}\n{"text": "NEWWWW doc"}\n')
        os.utime(root / "a.jsonl", ns=(10**18, 10**18))
        second = Corpus.open(url)
        assert texts(second, shuffle=False, workers=0) == ["NEW!! world", "NEWWWW doc"]


@pytest.mark.remote
def test_urls_differing_only_in_their_query_string_keep_their_own_files(tmp_path: Path) -> None:
    """A download endpoint's ``?f=…`` (or S3's ``?versionId=…``) is left out of the units'
    names, which must not send one corpus's reads to another's URL; in one corpus the two
    would be one name, refused."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from urllib.parse import parse_qs, urlsplit

    class ByQuery(RangeServer):
        def _answer(self, h: Any, head: bool) -> None:
            asked = parse_qs(urlsplit(h.path).query)
            if "f" in asked:
                h.path = "/" + asked["f"][0]
            super()._answer(h, head)

    root = tmp_path / "served"
    root.mkdir()
    (root / "a.jsonl").write_bytes(b'{"text": "file A one"}\n{"text": "file A two"}\n')
    (root / "b.jsonl").write_bytes(b'{"text": "file B one"}\n{"text": "file B two"}\n')
    with ByQuery(root) as server:
        server.misbehave.validators = False  # (with them: a false "changed")
        first = Corpus.open(server.url + "/get.jsonl?f=a.jsonl")
        second = Corpus.open(server.url + "/get.jsonl?f=b.jsonl")
        assert texts(second, shuffle=False, workers=0) == ["file B one", "file B two"]
        assert texts(first, shuffle=False, workers=0) == ["file A one", "file A two"]
        with pytest.raises(OWTError, match="differs from it only in its query string"):
            Corpus.open([server.url + "/get.jsonl?f=a.jsonl", server.url + "/get.jsonl?f=b.jsonl"])


def test_a_token_file_put_in_place_by_a_rename_is_read_as_it_is(tmp_path: Path) -> None:
    """The files opened in this process are kept by their size, mtime and inode: keyed by
    size and mtime alone, a second ``open_tokens`` of a file renamed over the first (its size
    and mtime kept) took the old file's cut, and read the new ids at the old ends, silently."""
    import numpy as np

    path = tmp_path / "train.bin"
    np.array([1, 2, 3, 256, 4, 5, 256], "<u2").tofile(path)
    first = Corpus.open_tokens(path, eot=256)
    assert len(_read(first, 0)) == 2
    _renamed_over(path, np.array([7, 256, 8, 9, 10, 11, 256], "<u2").tobytes())  # another cut
    assert _read(Corpus.open_tokens(path, eot=256), 0) == [[7, 256], [8, 9, 10, 11, 256]]
    with pytest.raises(CorruptMember, match="the file changed since it was indexed"):
        _read(first, 0)


def test_a_pickled_view_reads_with_the_default_of_the_process_it_lands_in(tmp_path: Path) -> None:
    """A corpus opened without options, pickled (a Ray task's argument, a spawned worker):
    its storage is a view of *that* process's default, which ``configure`` there reaches
    (``ray.tokenize`` configures its tasks with the ``storage_options`` it is given); its
    URLs' identities travel, none of the driver's options. ``detached`` keeps them (the
    driver's default, for ``ray.read_openwebtext``'s readers)."""
    import pickle

    path, _ = KINDS["jsonl"](tmp_path)
    configure({"endpoint_url": "http://driver.invalid:9000"})
    corpus = Corpus.open(path)
    corpus.storage.remember("https://h.invalid/x", FileInfo(3, "etag:3"))
    sent = pickle.dumps(corpus)
    assert b"driver.invalid" not in sent
    landed = pickle.loads(sent)
    configure({"endpoint_url": "http://task.invalid:9000"})
    assert landed.storage.root is resolve(None)
    assert landed.storage.options == {"endpoint_url": "http://task.invalid:9000"}
    assert landed.storage.identity("https://h.invalid/x") == FileInfo(3, "etag:3")
    kept = pickle.loads(pickle.dumps(corpus.storage.detached()))
    assert kept.options == {"endpoint_url": "http://task.invalid:9000"}  # (this process's now)
    assert kept.root is kept and kept.identity("https://h.invalid/x") == FileInfo(3, "etag:3")
