"""Inputs: outer tars, bare members, folders, globs; every compression by its magic bytes."""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
from pathlib import Path

import pytest

from openwebtext import Corpus, CorpusError, Loader, UnknownFormat
from support import inner_tar, outer_tar, sample_docs

zstandard = pytest.importorskip("zstandard")

COMPRESS = {
    "xz": lzma.compress,
    "gzip": lambda b: gzip.compress(b, mtime=0),
    "bzip2": bz2.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "tar": lambda b: b,
}


def texts(loader: Loader) -> dict[str, str]:
    return {d.name: d.text for d in loader}


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_each_compression_is_recognised_by_magic(tmp_path: Path, kind: str) -> None:
    docs = sample_docs(kind, 7)
    # Misleading names on purpose: the format comes from the bytes.
    outer = outer_tar(
        tmp_path / "misnamed.zip",
        [(f"x/{kind}-{m}.xz", COMPRESS[kind](inner_tar(docs))) for m in range(2)],
    )
    corpus = Corpus.open(outer)
    assert [u.kind for u in corpus.units] == [kind, kind]
    got = list(Loader(corpus, workers=2, shuffle=False))
    assert len(got) == 14
    assert {d.name: d.text for d in got} == {k: v.decode() for k, v in docs.items()}


def test_folder_of_bare_members_and_a_plain_tar_of_documents(tmp_path: Path) -> None:
    a, b = sample_docs("a", 3), sample_docs("b", 4)
    (tmp_path / "urlsf_subset00-1_data.xz").write_bytes(lzma.compress(inner_tar(a)))
    (tmp_path / "urlsf_subset00-2_data.xz").write_bytes(gzip.compress(inner_tar(b)))
    (tmp_path / "_COMPLETE").write_text("ignored: starts with _")
    got = texts(Loader(tmp_path, workers=2))
    assert got == {k: v.decode() for k, v in {**a, **b}.items()}
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "docs.tar").write_bytes(inner_tar(a))
    corpus = Corpus.open(plain / "docs.tar")
    assert [u.kind for u in corpus.units] == ["tar"]
    assert texts(Loader(corpus)) == {k: v.decode() for k, v in a.items()}


def test_globs_and_lists(small_corpus: Path, small_docs: dict[str, str]) -> None:
    assert texts(Loader(str(small_corpus / "*.tar"))) == small_docs
    tars = sorted(small_corpus.glob("*.tar"))
    assert len(Corpus.open(tars[:1]).units) == 3
    assert len(Corpus.open([str(t) for t in tars]).units) == 6


def test_unpacked_release_tar(
    tmp_path: Path, small_corpus: Path, small_docs: dict[str, str]
) -> None:
    """openwebtext.tar (the release after `xz -d`): one tar of all the .xz members."""
    import tarfile

    members = []
    for tar_path in sorted(small_corpus.glob("*.tar")):
        with tarfile.open(tar_path) as tar:
            for info in tar:
                members.append((info.name, tar.extractfile(info).read()))  # type: ignore[union-attr]
    outer_tar(tmp_path / "openwebtext.tar", members)
    assert texts(Loader(tmp_path / "openwebtext.tar", workers=2)) == small_docs


def test_compressed_outer_tar_says_what_to_do(tmp_path: Path, small_corpus: Path) -> None:
    tar = sorted(small_corpus.glob("*.tar"))[0]
    packed = tmp_path / "openwebtext.tar.xz"
    packed.write_bytes(lzma.compress(tar.read_bytes(), preset=0))
    with pytest.raises(CorpusError, match=r"openwebtext\.tar\.xz.*decompress it first"):
        list(Loader(packed))


def test_unknown_file_format_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "notes.xz"
    bad.write_bytes(b"just some text, not compressed" * 40)
    with pytest.raises(UnknownFormat, match=r"notes\.xz.*not a tar") as info:
        Corpus.open(bad)
    assert info.value.path == str(bad)


def test_unknown_member_format_names_the_member_when_read(tmp_path: Path) -> None:
    outer = outer_tar(
        tmp_path / "urlsf_subset00.tar",
        [
            ("openwebtext/a_data.xz", lzma.compress(inner_tar(sample_docs("a", 2)))),
            ("openwebtext/b_data.rar", b"Rar!\x1a\x07\x00" + bytes(600)),
        ],
    )
    corpus = Corpus.open(outer)  # the error policy decides, when the member is read
    with pytest.raises(UnknownFormat) as info:
        list(Loader(corpus))
    assert info.value.member == "openwebtext/b_data.rar"
    assert "urlsf_subset00.tar[openwebtext/b_data.rar]" in str(info.value)


@pytest.mark.parametrize("where", ["missing", "empty-folder", "empty-glob"])
def test_paths_with_no_corpus(tmp_path: Path, where: str) -> None:
    (tmp_path / "empty").mkdir()
    path = {
        "missing": tmp_path / "nope.tar",
        "empty-folder": tmp_path / "empty",
        "empty-glob": tmp_path / "*.tar",
    }[where]
    with pytest.raises(CorpusError, match=str(path).replace("*", r"\*")):
        Corpus.open(path)


def test_outer_tar_copy_keeps_fingerprint(tmp_path: Path, small_corpus: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(small_corpus, copy)
    assert Corpus.open(copy).fingerprint() == Corpus.open(small_corpus).fingerprint()


def test_zstd_that_starts_with_a_skippable_frame_is_zstd(tmp_path: Path) -> None:
    """pzstd (parallel zstd) writes a skippable frame first (its magic 0x184D2A5?, not a
    frame's): a member or a ``.jsonl.zst`` so written is read, not refused as not zstd."""
    import json
    import struct

    def pzstd(data: bytes) -> bytes:
        return struct.pack("<II", 0x184D2A50, 4) + bytes(4) + zstandard.compress(data)

    docs = sample_docs("z", 3)
    outer = outer_tar(tmp_path / "o.tar", [("x/z-0.xz", pzstd(inner_tar(docs)))])
    corpus = Corpus.open(outer)
    assert [u.kind for u in corpus.units] == ["zstd"]
    assert texts(Loader(corpus, workers=0)) == {k: v.decode() for k, v in docs.items()}
    lines = "".join(json.dumps({"text": f"line {k}"}) + "\n" for k in range(5)).encode()
    (tmp_path / "a.jsonl.zst").write_bytes(pzstd(lines))
    got = [d.text for d in Loader(tmp_path / "a.jsonl.zst", workers=0, shuffle=False)]
    assert got == [f"line {k}" for k in range(5)]
