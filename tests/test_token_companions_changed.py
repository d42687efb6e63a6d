"""A token corpus reads its files as it indexed them: their ends (from a Megatron ``.idx``, a
datatrove ``.ds.index``, or end-of-text scanned with the corpus's eot and dtype) and the
``meta.json`` beside them. A red team found the worker opened the file again whenever a file
beside it had changed since (its cache keyed on what they are now): a rewritten ``.idx``
re-cut the same corpus's documents silently; a ``meta.json`` put beside, changed or removed
made it read the file with the reader's eot (an error blaming the file's ids); a ``.bin``
appended to was "damaged"; a remote ``.idx`` replaced and opened again re-cut the first
corpus's documents. Each is now "the file changed since it was indexed" (or, remote, the
first corpus's own cut), naming the ``.bin`` and the member."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, CorruptMember, Loader
from openwebtext.source import CHANGED
from openwebtext.tokenfiles import megatron_index
from remote_servers import RangeServer
from support import rewrite_later

isolated_storage = remote_servers.isolated_storage  # fixture (autouse): fresh cache, storage

#: Twelve ids, cut into 3, 3 and 6 by the index as first written, into 1, 7 and 4 after.
IDS = np.arange(1, 13, dtype="<u2")
FIRST_CUT, SECOND_CUT = [3, 6, 12], [1, 8, 12]
FIRST_DOCS = [[1, 2, 3], [4, 5, 6], [7, 8, 9, 10, 11, 12]]
SECOND_DOCS = [[1], [2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12]]


def _read(corpus: Corpus, workers: int = 0) -> list[list[int]]:
    with Loader(corpus, workers=workers, shuffle=False, tokenizer="bytes").iter() as it:
        return [d.tokens.tolist() for d in it]


def _megatron(folder: Path) -> Path:
    path = folder / "train.bin"
    IDS.tofile(path)
    (folder / "train.idx").write_bytes(megatron_index(np.array(FIRST_CUT), np.dtype("<u2")))
    return path


def _said_changed(corpus: Corpus, path: Path, workers: int = 0) -> None:
    with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
        _read(corpus, workers)
    assert caught.value.path == str(path) and caught.value.member
    assert CHANGED in str(caught.value) and "end-of-text" not in str(caught.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_megatron_index_rewritten_after_the_open_is_a_change(
    tmp_path: Path, workers: int
) -> None:
    path = _megatron(tmp_path)
    corpus = Corpus.open_tokens(path)
    assert _read(corpus, workers) == FIRST_DOCS
    rewrite_later(tmp_path / "train.idx", megatron_index(np.array(SECOND_CUT), np.dtype("<u2")))
    _said_changed(corpus, path, workers)  # not SECOND_DOCS, silently


def test_a_datatrove_index_rewritten_after_the_open_is_a_change(tmp_path: Path) -> None:
    path, index = tmp_path / "train.ds", tmp_path / "train.ds.index"
    IDS.tofile(path)
    index.write_bytes(np.array(FIRST_CUT, "<u8").tobytes())
    corpus = Corpus.open_tokens(path)
    assert _read(corpus) == FIRST_DOCS
    rewrite_later(index, np.array(SECOND_CUT, "<u8").tobytes())
    _said_changed(corpus, path)


def _nanogpt(folder: Path, meta: str | None = None) -> tuple[Path, Corpus]:
    """A bare ``train.bin`` of documents ended by 7 (not the bytes tokenizer's 256), opened
    with ``eot=7``; ``meta`` a ``meta.json`` beside it then (another program's: no eot)."""
    path = folder / "train.bin"
    np.array([1, 2, 7, 3, 256, 4, 7, 5, 6, 7], "<u2").tofile(path)
    if meta is not None:
        (folder / "meta.json").write_text(meta)
    corpus = Corpus.open_tokens(path, eot=7)
    assert _read(corpus) == [[1, 2, 7], [3, 256, 4, 7], [5, 6, 7]]
    return path, corpus


@pytest.mark.parametrize("workers", [0, 2])
def test_a_meta_json_put_beside_after_the_open_is_a_change(tmp_path: Path, workers: int) -> None:
    """Was: the file opened again with the reader's eot (256), "its 10 ids do not end with
    the end-of-text id 256", blaming the file."""
    path, corpus = _nanogpt(tmp_path)
    (tmp_path / "meta.json").write_text("{}")
    _said_changed(corpus, path, workers)


def test_a_meta_json_changed_after_the_open_is_a_change(tmp_path: Path) -> None:
    path, corpus = _nanogpt(tmp_path, meta="{}")
    rewrite_later(tmp_path / "meta.json", b'{"written by": "another program"}')
    _said_changed(corpus, path)


def test_a_meta_json_removed_after_the_open_is_a_change(tmp_path: Path) -> None:
    path, corpus = _nanogpt(tmp_path, meta="{}")
    (tmp_path / "meta.json").unlink()
    _said_changed(corpus, path)


def test_a_bin_appended_to_after_the_open_is_a_change_not_damage(tmp_path: Path) -> None:
    """Was: the file opened again before its identity was checked, and "damaged" (its ids
    do not end with end-of-text: a document being written)."""
    path = tmp_path / "train.bin"
    np.array([1, 2, 256, 3, 256], "<u2").tofile(path)
    corpus = Corpus.open_tokens(path, eot=256)
    with open(path, "ab") as f:
        f.write(np.array([4, 5], "<u2").tobytes())
    _said_changed(corpus, path)


@pytest.mark.parametrize("workers", [0, 2])
def test_corpora_of_one_file_read_it_as_each_indexed_it(tmp_path: Path, workers: int) -> None:
    """An unchanged file opened twice: both corpora read it. Its index rewritten: both say
    so, and a corpus opened again reads the new cut (the first ones still say so)."""
    path = _megatron(tmp_path)
    one, two = Corpus.open_tokens(path), Corpus.open_tokens(path)
    assert _read(one, workers) == _read(two, workers) == FIRST_DOCS
    rewrite_later(tmp_path / "train.idx", megatron_index(np.array(SECOND_CUT), np.dtype("<u2")))
    three = Corpus.open_tokens(path)
    assert _read(three, workers) == SECOND_DOCS
    _said_changed(one, path, workers)
    _said_changed(two, path, workers)
    assert _read(three, workers) == SECOND_DOCS


@pytest.mark.remote
@pytest.mark.parametrize("workers", [0, 2])
def test_a_remote_index_replaced_and_opened_again_moves_no_first_corpus(
    tmp_path: Path, workers: int
) -> None:
    """Was: the second open's ends kept for the URL by the ``.bin``'s place and identity
    alone (the ``.bin`` untouched: the same), and the first corpus read by them."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    root = tmp_path / "site"
    root.mkdir()
    _megatron(root)
    with RangeServer(root) as server:
        url = server.url + "/train.bin"
        first = Corpus.open_tokens(url)
        assert _read(first, workers) == FIRST_DOCS
        rewrite_later(root / "train.idx", megatron_index(np.array(SECOND_CUT), np.dtype("<u2")))
        second = Corpus.open_tokens(url)
        assert _read(second, workers) == SECOND_DOCS
        assert _read(first, workers) == FIRST_DOCS  # its own cut, as it indexed it
        assert _read(second, workers) == SECOND_DOCS
