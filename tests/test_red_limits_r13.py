"""Integer limits of files and offsets (session 36's red team, on sparse files): one ``pread``
returns at most ~2 GiB on Linux, so a unit past that (``max_member_bytes`` allows 2**40) was
said to be "file is truncated" (under ``skip``, its documents silently skipped); a tar header
declaring 2**63-1 bytes raised a bare ``OverflowError`` from deep inside."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader, TruncatedMember, codec


def _cap(monkeypatch: pytest.MonkeyPatch, most: int = 4096) -> None:
    """``pread`` capped at ``most`` bytes a call, as Linux caps it at 0x7ffff000."""
    read = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        return read(fd, min(n, most), offset)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(codec, "_ONE_READ", most, raising=False)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_unit_longer_than_one_read_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_error: str
) -> None:
    ids = np.arange(40_000, dtype="<u2") % 1000
    ids[[9_999, 39_999]] = 50256  # two documents in one unit of 80,000 bytes
    path = tmp_path / "train.bin"
    ids.tofile(path)
    corpus = Corpus.open_tokens(path, eot=50256, unit_tokens=10**6)
    assert len(corpus.units) == 1 and corpus.units[0].size == 80_000
    _cap(monkeypatch)  # (the unit's read: its scan at open is read in chunks of 4 MiB)
    loader = Loader(corpus, tokenizer="gpt2", workers=0, shuffle=False, on_error=on_error)
    with loader.iter() as docs:
        got = [d.tokens.tolist() for d in docs]
    assert got == [ids[:10_000].tolist(), ids[10_000:].tolist()]
    assert docs.stats.skipped == ()


def test_pread_all_stops_at_the_file_s_end_and_past_any_offset(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert codec.pread_all(fd, 2**63, 4) == b"x" * 6
        assert codec.pread_all(fd, 5, 2**63 - 1) == b""
        assert codec.pread_all(fd, 5, 2**64) == b""
    finally:
        os.close(fd)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_tar_member_declaring_2_63_bytes_is_a_truncated_member(
    tmp_path: Path, small_corpus: Path, on_error: str
) -> None:
    with tarfile.open(small_corpus / "urlsf_subset00.tar") as source:
        first = source.getmembers()[0]
        xz = source.extractfile(first).read()  # type: ignore[union-attr]

    def header(name: str, size: int) -> bytes:
        info = tarfile.TarInfo(f"openwebtext/{name}")
        info.size, info.mtime = size, 0
        return info.tobuf(format=tarfile.GNU_FORMAT)  # (a size past 8 GiB: base-256)

    path = tmp_path / "urlsf_subset00.tar"
    with open(path, "wb") as f:
        f.write(header("urlsf_subset00-1_data.xz", len(xz)) + xz + b"\0" * (-len(xz) % 512))
        f.write(header("urlsf_subset00-2_data.xz", 2**63 - 1) + xz[:1000])
    loader = Loader(path, workers=0, on_error=on_error)
    if on_error == "raise":
        with pytest.raises(TruncatedMember, match=r"urlsf_subset00.tar\[.*-2_data.xz\]"):
            list(loader.iter())
        return
    with loader.iter() as docs:
        assert sum(1 for _ in docs) > 0
    assert [s for s in docs.stats.skipped if "-2_data.xz" in s]


def test_pread_all_goes_on_after_a_short_read_inside_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network or FUSE file system may return fewer bytes than asked, far from the end."""
    path = tmp_path / "f"
    path.write_bytes(bytes(range(200)))
    read = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: read(fd, min(n, 7), at))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert codec.pread_all(fd, 150, 10) == bytes(range(10, 160))
    finally:
        os.close(fd)
