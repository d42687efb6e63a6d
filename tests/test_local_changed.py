"""A local file changed after the corpus was opened (rewritten in place at the same size, or
cut) is said to have changed, naming the file and the member, as a remote one is: never read
as if it held the documents indexed. A red team found a JSON lines line, a parquet file's rows
and a token file's ids rewritten after ``Corpus.open`` handed out as the corpus's, silently
(the reads ``pread`` the file; nothing compared it with its version as indexed)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, CorruptMember, Loader


def _jsonl(folder: Path) -> tuple[Path, Callable[[Path], Corpus]]:
    path = folder / "a.jsonl"
    path.write_bytes(b'{"text": "hello world"}\n{"text": "second doc"}\n')
    return path, Corpus.open


def _parquet(folder: Path) -> tuple[Path, Callable[[Path], Corpus]]:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = folder / "a.parquet"
    pq.write_table(pa.table({"text": ["alpha 1", "beta 22"]}), path, compression="NONE",
                   use_dictionary=False, write_statistics=False)  # fmt: skip
    return path, Corpus.open


def _tokens(folder: Path) -> tuple[Path, Callable[[Path], Corpus]]:
    path = folder / "train.bin"
    np.array([1, 2, 3, 256, 4, 5, 256], "<u2").tofile(path)
    return path, lambda p: Corpus.open_tokens(p, eot=256)


KINDS = {"jsonl": _jsonl, "parquet": _parquet, "tokens": _tokens}


def _same_size_rewrite(path: Path) -> None:
    """Other bytes at the same size (the ids' end-of-text ids and the JSON keep their
    places; a parquet file's values change, its layout not), and a later mtime."""
    data = bytearray(path.read_bytes())
    before = path.stat().st_mtime_ns
    if path.suffix == ".bin":
        ids = np.frombuffer(bytes(data), "<u2").copy()
        ids[ids != 256] = 9
        data = bytearray(ids.tobytes())
    else:
        for old, new in ((b"hello", b"HACKD"), (b"alpha", b"gamma"), (b"beta", b"zeta")):
            data = data.replace(old, new)
    with open(path, "r+b") as f:  # in place: an open descriptor sees the new bytes
        f.write(bytes(data))
    os.utime(path, ns=(before + 10**9, before + 10**9))


def _read(corpus: Corpus, workers: int) -> list[object]:
    tokenizer = "bytes" if corpus.units[0].path.endswith(".bin") else None
    with Loader(corpus, workers=workers, shuffle=False, tokenizer=tokenizer).iter() as it:
        return [d.tokens.tolist() if tokenizer else d.text for d in it]


@pytest.mark.parametrize("again", [False, True], ids=["", "opened-again"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_file_rewritten_after_opening_is_said_to_have_changed(
    tmp_path: Path, kind: str, workers: int, again: bool
) -> None:
    """And so when the file was opened again since (``again``: another corpus of it, which reads
    it as it is now): a review found the second open noted the new identity in the default
    storage every corpus opened without options shared, and the first corpus then read the new
    bytes at its old offsets without a word (``Storage.view``: each corpus its own)."""
    path, open_corpus = KINDS[kind](tmp_path)
    corpus = open_corpus(path)
    before = _read(corpus, 0)
    _same_size_rewrite(path)
    second = open_corpus(path) if again else None
    with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
        _read(corpus, workers)
    assert caught.value.path == str(path) and caught.value.member
    if second is not None:
        after = _read(second, workers)
        assert len(after) == len(before) and after != before


def test_a_tar_member_rewritten_after_opening_is_said_to_have_changed(
    small_corpus: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "c.tar"
    copy.write_bytes((small_corpus / "urlsf_subset00.tar").read_bytes())
    corpus = Corpus.open(copy)
    before = copy.stat().st_mtime_ns
    with open(copy, "r+b") as f:  # a byte of a member's xz data, in place
        f.seek(corpus.units[0].offset + corpus.units[0].size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(copy, ns=(before + 10**9, before + 10**9))
    with pytest.raises(CorruptMember, match="the file changed since it was indexed"):
        _read(corpus, 0)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_file_opened_again_after_a_rewrite_is_read_as_it_is_now(
    tmp_path: Path, kind: str
) -> None:
    """The check is against the version the corpus was opened with: opened again, the file
    is that corpus, and reads."""
    path, open_corpus = KINDS[kind](tmp_path)
    before = _read(open_corpus(path), 0)
    _same_size_rewrite(path)
    after = _read(open_corpus(path), 0)
    assert len(after) == len(before) and after != before


def test_a_storage_pickled_to_another_host_carries_no_local_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local file's identity (size, mtime, inode) is this machine's file's: a Ray task on
    another node reads its own copy, of other mtimes, which must not be "changed". URLs'
    identities go with the storage; a process of the same host (spawned) keeps both."""
    import pickle
    import socket

    from openwebtext.source import FileInfo, Storage

    path = _jsonl(tmp_path)[0]
    store = Storage(cache_dir=str(tmp_path / "cache"))
    store.remember(str(path), FileInfo(1, "mtime_ns:1"))
    store.remember("https://example.invalid/a.jsonl", FileInfo(2, "ETag:x"))
    sent = pickle.dumps(store)
    assert pickle.loads(sent).identity(str(path)) == FileInfo(1, "mtime_ns:1")  # (this host)
    monkeypatch.setattr(socket, "gethostname", lambda: "another-node.invalid")
    again = pickle.loads(sent)
    assert again.identity(str(path)) is None
    assert again.identity("https://example.invalid/a.jsonl") == FileInfo(2, "ETag:x")
    assert store.identity(str(path)) == FileInfo(1, "mtime_ns:1")  # (this process keeps it)
