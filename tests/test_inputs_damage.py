"""Inputs that are not what their names say, and compressed data cut short.

A file that looks like a corpus file by its name is read, or is an error naming it, or
(under an explicit skip) a counted skip said in the summary: never left out as "not a
corpus file" with one warning line. Every compressed kind detects its own end, zstd too.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, TruncatedMember
from openwebtext.formats import Truncated, decompress
from support import Owt
from tables_support import sample_texts, write_jsonl, write_parquet

TEXTS = sample_texts(60, seed=5)
LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize 123456\n" % (b"0" * 64)


#: Files named as a corpus file is, whose bytes are something else (what a clone without
#: git-lfs leaves, a page of HTML saved under the archive's name, nothing at all).
IMPOSTORS = {
    "train-00001-of-00002.parquet": LFS,
    "urlsf_subset01.tar": b"<html>not found</html>\n",
    "part-1.jsonl.zst": LFS,
    "part-1.jsonl": LFS,
    "extra.tar.xz": b"",
    "page.parquet": b"<html>not found</html>\n",
}


@pytest.fixture(params=sorted(IMPOSTORS))
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """A dataset folder: one good parquet file, a README, and an impostor."""
    data = tmp_path / "data"
    write_parquet(data / "train-00000-of-00002.parquet", TEXTS)
    (data / "README.md").write_text("# a dataset card\n")
    name = request.param
    (data / name).write_bytes(IMPOSTORS[name])
    return data, name


def test_an_impostor_is_an_error_naming_it(folder: tuple[Path, str]) -> None:
    data, name = folder
    with pytest.raises(CorpusError) as raised:
        Corpus.open(data)
    assert raised.value.path is not None and raised.value.path.endswith(name)
    if IMPOSTORS[name] == LFS:
        assert "Git LFS pointer" in str(raised.value)
    if name.endswith(".parquet"):  # what it was taken for, not "not a tar, or xz…"
        assert "named parquet" in str(raised.value)


def test_under_skip_an_impostor_is_a_counted_skip(folder: tuple[Path, str]) -> None:
    data, name = folder
    corpus = Corpus.open(data, on_error="skip")
    assert [Path(e.path or "").name for e in corpus.skipped_files] == [name]
    with Loader(corpus, workers=0, on_error="skip", shuffle=False).iter() as it:
        assert [d.text for d in it] == TEXTS
        assert it.stats.skipped_files == 1


def test_owt_index_refuses_then_says_the_skip(folder: tuple[Path, str], owt: Owt) -> None:
    """``owt`` in this process (``cli.main``): its exit code and what it printed."""
    data, name = folder
    refused = owt("index", str(data), "-q")
    assert refused.returncode != 0 and name in refused.stderr
    assert not list(data.glob("*counts*")) and not list(data.glob(".owt*"))
    skipped = owt("index", str(data), "-q", "--on-error", "skip")
    assert skipped.returncode == 0, skipped.stderr
    assert "skipped 1 file (not read at all" in skipped.stderr and name in skipped.stderr
    streamed = owt("stream", str(data), "-q", "--on-error", "skip", "--no-shuffle")
    assert streamed.returncode == 0, streamed.stderr
    assert "skipped 1 file (not read at all)" in streamed.stderr and name in streamed.stderr


def _zstd(data: bytes, frames: int = 1) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    step = -(-len(data) // frames)
    return b"".join(
        zstandard.ZstdCompressor().compress(data[k : k + step]) for k in range(0, len(data), step)
    )


@pytest.mark.parametrize("frames", [1, 3])
@pytest.mark.parametrize("cut", [1, 7, 200])
def test_zstd_cut_short_is_truncated(frames: int, cut: int) -> None:
    data = ("".join(TEXTS)).encode()
    packed = _zstd(data, frames)
    assert decompress(packed, "zstd", 1 << 30) == data
    with pytest.raises(Truncated) as raised:
        decompress(packed[:-cut], "zstd", 1 << 30)
    assert data.startswith(raised.value.data)


def test_a_truncated_jsonl_zst_keeps_its_whole_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl.zst", TEXTS)
    path.write_bytes(path.read_bytes()[:-300])
    with pytest.raises(TruncatedMember, match=r"t\.jsonl\.zst"):
        list(Loader(path, workers=0))
    with Loader(path, workers=0, on_error="skip", shuffle=False).iter() as it:
        got = [d.text for d in it]
        assert it.stats.partial_members == 1
    assert got == TEXTS[: len(got)] and len(got) < len(TEXTS)


def test_a_truncated_zstd_member_of_a_tar_is_a_truncated_member(tmp_path: Path) -> None:
    texts = sample_texts(2000, seed=6)  # several zstd blocks: those before the cut are read
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as tar:
        for k, text in enumerate(texts):
            body = text.encode()
            info = tarfile.TarInfo(f"doc{k:03d}.txt")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    member = _zstd(inner.getvalue())[:-50]
    path = tmp_path / "sub_data.zst"
    path.write_bytes(member)
    with pytest.raises(TruncatedMember, match=r"sub_data\.zst"):
        list(Loader(path, workers=0))
    with Loader(path, workers=0, on_error="skip", shuffle=False).iter() as it:
        got = [d.text for d in it]
        assert it.stats.partial_members == 1
    assert 0 < len(got) < len(texts) and got == texts[: len(got)]


def test_owt_tokenize_says_the_skipped_file(
    folder: tuple[Path, str], tmp_path: Path, owt: Owt
) -> None:
    data, name = folder
    out = tmp_path / "out"
    refused = owt("tokenize", str(data), "--out", str(out), "--tokenizer", "bytes", "-q")
    assert refused.returncode != 0 and name in refused.stderr
    done = owt("tokenize", str(data), "--out", str(out), "--tokenizer", "bytes", "-q",
               "--on-error", "skip")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "skipped 1 file (not read at all)" in done.stderr and name in done.stderr
