"""A corpus opened, its file changed, and the file opened again (a second ``Corpus.open``
without options): the first corpus still reads against what *it* indexed. A review found the
second open noted the file's new identity in the default storage every corpus opened without
options shares, and the first corpus then read the new bytes at its old offsets without a word
(locally and over HTTP: the range reads asked ``If-Match`` the new ETag). Each corpus now reads
with a view of the default storage keeping its own files' identities (``Storage.pinned``)."""

from __future__ import annotations

import shutil
from pathlib import Path

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


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_corpus_is_not_moved_by_another_open_of_its_changed_file(
    tmp_path: Path, kind: str, workers: int
) -> None:
    path, open_corpus = KINDS[kind](tmp_path)
    first = open_corpus(path)
    before = _read(first, 0)
    _same_size_rewrite(path)
    second = open_corpus(path)  # indexes the file as it is now
    with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
        _read(first, workers)
    assert caught.value.path == str(path) and caught.value.member
    after = _read(second, workers)
    assert len(after) == len(before) and after != before


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
    are not made twice), aliases, and ``configure``'s options; only the identities of its
    corpus's files are its own."""
    table: PerStorage[str, int] = PerStorage()
    default = resolve(None)
    default.remember("https://h.invalid/a", FileInfo(1, "etag:1"))
    view = default.pinned(["https://h.invalid/a"])
    table.of(None)["made"] = 1
    assert table.of(view) == {"made": 1} and view.root is default
    default.remember("https://h.invalid/a", FileInfo(2, "etag:2"))  # indexed again: changed
    default.remember("https://h.invalid/b", FileInfo(3, "etag:3"))
    assert view.identity("https://h.invalid/a") == FileInfo(1, "etag:1")
    assert view.identity("https://h.invalid/b") == FileInfo(3, "etag:3")  # (not its file's)
    configure({"anon": True})
    assert view.options == {"anon": True} and view.place == default.place
    assert table.of(view) == {}  # (configure emptied the default's tables: the view's too)
