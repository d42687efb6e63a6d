"""What a red team of session 40 found in the reading of tars, each checked against tarfile,
the reference reader.

- A document whose text begins as a compressed format's magic does ("BZh", "PAR1"), or holds
  "ustar" at byte 257, made its whole member "a compressed outer tar", and a plain tar of
  documents an outer tar of members: every document lost. The format of a member or a
  document is now judged on evidence text cannot give by chance (``formats.sure_kind``).
- The walk skipped the size its header said for entries that carry no data (a hard link, a
  directory, a FIFO): the documents after them were lost without a word, or the member
  refused. It read Solaris's ``X`` pax header as a document, a V7 directory as an empty
  document, and applied a pax header's ``size`` to the GNU long-name header after it.
"""

from __future__ import annotations

import io
import lzma
import tarfile
from pathlib import Path

import pytest

from openwebtext import Loader
from openwebtext.tarwalk import walk
from support import inner_tar


def _outer(inner: bytes) -> bytes:
    return inner_tar({"openwebtext/urlsf_subset00-1_data.xz": lzma.compress(inner)})


def _read(path: Path) -> tuple[list[tuple[str, str]], int]:
    with Loader(str(path), shuffle=False, workers=0, on_error="skip").iter() as documents:
        read = [(d.name, d.text) for d in documents]
        return read, documents.stats.skipped_members + documents.stats.skipped_documents


_MAGIC_TEXTS = {
    "bzip2": b"BZh is how a bzip2 stream begins; this document is plain text.",
    "bzip2-level": b"BZh9 and then some words",
    "parquet": b"PAR1 was the first part of the report.",
    "ustar": b"x" * 257 + b"ustar is the magic of a POSIX tar header." + b" more" * 60,
}


@pytest.mark.parametrize("magic", sorted(_MAGIC_TEXTS))
@pytest.mark.parametrize("first", [True, False])
def test_a_document_that_begins_as_a_format_s_magic_is_a_document(
    tmp_path: Path, magic: str, first: bool
) -> None:
    docs = [("0000-a.txt", _MAGIC_TEXTS[magic]), ("0001-b.txt", b"an ordinary document")]
    docs = docs if first else docs[::-1]
    expected = sorted((name, data.decode()) for name, data in docs)
    (tmp_path / "urlsf_subset00.tar").write_bytes(_outer(inner_tar(dict(docs))))
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "docs.tar").write_bytes(inner_tar(dict(docs)))  # a plain tar of documents
    for path in (tmp_path / "urlsf_subset00.tar", tmp_path / "plain" / "docs.tar"):
        read, skipped = _read(path)
        assert (sorted(read), skipped) == (expected, 0), path


def test_a_compressed_outer_tar_is_still_named_as_one(tmp_path: Path) -> None:
    member = lzma.compress(inner_tar({"a.txt": b"a"}))
    members = inner_tar({"openwebtext/urlsf_subset00-1_data.xz": member})
    path = tmp_path / "openwebtext.tar.xz"
    path.write_bytes(lzma.compress(members))
    with pytest.raises(Exception, match="compressed outer tar"):
        _read_raising(path)


def _read_raising(path: Path) -> list[str]:
    with Loader(str(path), shuffle=False, workers=0).iter() as documents:
        return [d.name for d in documents]


# -- headers written by hand: what tarfile reads ------------------------------------------


def _header(name: bytes, size: int, kind: bytes, magic: bytes = b"ustar\x0000") -> bytes:
    h = bytearray(512)
    h[: len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % 1_600_000_000
    h[156:157] = kind
    h[257:265] = magic.ljust(8, b"\0")
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _entry(name: bytes, data: bytes = b"", kind: bytes = b"0", size: int | None = None,
           magic: bytes = b"ustar\x0000") -> bytes:  # fmt: skip
    said = len(data) if size is None else size
    return _header(name, said, kind, magic) + data + bytes(-len(data) % 512)


def _record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


_BODY = b"pax and a long name"
_HEADERS = {
    # entries that carry no data, whatever their size field says
    "hard link of size 700": [_entry(b"a.txt", b"first"), _entry(b"hl.txt", kind=b"1", size=700),
                              _entry(b"b.txt", b"second")],
    "directory of size 1024": [_entry(b"a.txt", b"first"), _entry(b"sub/", kind=b"5", size=1024),
                               _entry(b"b.txt", b"second")],
    "directory of size 4096": [_entry(b"a.txt", b"first"), _entry(b"sub/", kind=b"5", size=4096),
                               _entry(b"b.txt", b"second")],
    "fifo of size 512": [_entry(b"a.txt", b"first"), _entry(b"fifo", kind=b"6", size=512),
                         _entry(b"b.txt", b"second")],
    "solaris X": [_entry(b"PaxHeaders/x", _record("path", "a-long-document-name.txt"), b"X"),
                  _entry(b"a-long-doc.txt", b"solaris file")],
    "v7 directory": [_entry(b"olddir/", b"", b"\0", magic=b""),
                     _entry(b"olddir/f.txt", b"v7 file", b"\0", magic=b"")],
    "pax size, then a long name": [
        _entry(b"@PaxHeader", _record("size", str(len(_BODY))), b"x"),
        _entry(b"././@LongLink", b"L" * 120 + b".txt\0", b"L", magic=b"ustar  "),
        _entry(b"short", _BODY),
    ],
}


@pytest.mark.parametrize("case", sorted(_HEADERS))
def test_the_walk_reads_the_files_tarfile_reads(tmp_path: Path, case: str) -> None:
    raw = b"".join(_HEADERS[case]) + bytes(1024)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        expected = [(m.name, tar.extractfile(m).read()) for m in tar if m.isreg()]  # type: ignore[union-attr]
    assert len(expected) >= 1
    entries = walk(raw)
    found = [(name, raw[at : at + size]) for name, at, size in zip(*entries, strict=True)]
    assert found == expected
    (tmp_path / "urlsf_subset00.tar").write_bytes(_outer(raw))  # and through the loader
    read, skipped = _read(tmp_path / "urlsf_subset00.tar")
    assert (read, skipped) == ([(n, d.decode()) for n, d in expected], 0)


# -- a reviewer's find: no evidence of a format is not evidence of text --------------------


@pytest.mark.parametrize("kind", ["tar", "bzip2"])
def test_a_member_damaged_past_its_magic_is_corrupt_not_a_document(
    tmp_path: Path, kind: str
) -> None:
    """The first fix read a member whose magic says a format but whose bytes past it are
    damaged (a tar header's checksum, bzip2's first block) as no format: the outer tar became
    a tar of documents, and the member's raw bytes one document, with no word."""
    import bz2

    inner = inner_tar({"a.txt": b"a document"})
    if kind == "tar":
        member = bytearray(inner)
        member[136] ^= 0x01  # (its mtime: the checksum no longer holds)
        name = "sub/0.tar"
    else:
        member = bytearray(bz2.compress(inner))
        member[4] ^= 0xFF  # (the first block's magic)
        name = "sub/0.tar.bz2"
    (tmp_path / "c.tar").write_bytes(inner_tar({name: bytes(member)}))
    with Loader(str(tmp_path / "c.tar"), workers=0, on_error="skip").iter() as documents:
        assert list(documents) == []
        assert documents.stats.skipped_members == 1
        (said,) = documents.stats.skipped
    assert name in said and ("checksum" in said or "corrupt bzip2" in said)
