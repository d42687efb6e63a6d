"""What is not a verdict on a member's bytes is never kept as one (session 39's red team).

- An exception the library did not make while a unit was read (a module an extra installs
  missing, a bug, a tokenizer's own error) was a ``WorkerError`` counted as a skipped member
  under ``on_error="skip"``: a run of no document, or ``owt tokenize``'s finished ``meta.json``
  without the file. It is an ``UnexpectedError`` now, raised whatever ``on_error``.
- A count under skip kept every failed member in the counts file, whatever the cause: one
  over ``max_member_bytes``, one a disk or network could not read, one whose worker died. A
  later run with other options, or once the network was back, read a share's edge past it:
  its documents lost, no skip counted. Such members are now marked (``Counts.unsure``), and
  the next count reads them again, and them only.
"""

from __future__ import annotations

import errno
import gzip
import json
import logging
import sys
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.engine import raw as engine_raw
from openwebtext.errors import UnexpectedError, Unreadable, WorkerError
from openwebtext.policy import a_verdict
from openwebtext.stream import count_documents


def _two_files(folder: Path) -> Path:
    """``a.jsonl.gz`` (10 documents, one unit of ~1.2 KB decompressed) and ``b.jsonl`` (10)."""
    folder.mkdir()
    with gzip.open(folder / "a.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": f"document {i} " + "x" * 100}) + "\n" for i in range(10))
    (folder / "b.jsonl").write_text("".join(json.dumps({"text": f"plain {i}"}) + "\n"
                                            for i in range(10)))  # fmt: skip
    return folder


def _over_ranks(folder: Path, **options: object) -> list[str]:
    """The texts of every rank of 2, even shares, under skip."""
    corpus = Corpus.open(folder, on_error="skip")
    texts: list[str] = []
    for rank in range(2):
        loader = Loader(corpus, workers=0, world_size=2, rank=rank, even="drop", shuffle=False,
                        on_error="skip", **options)  # type: ignore[arg-type]  # fmt: skip
        texts += [d.text for d in loader]
    return texts


def _gz_unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the disk fail (EIO) every read of a ``.gz`` file's units."""
    real = engine_raw.UnitBytes.read

    def eio(self, unit):  # type: ignore[no-untyped-def]
        if unit.path.endswith(".gz"):
            raise OSError(errno.EIO, "Input/output error")
        return real(self, unit)

    monkeypatch.setattr(engine_raw.UnitBytes, "read", eio)


def _counts_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(".owt-counts-*"))


# --- a limit, a read error: kept as unsure, read again by the next count ------------------


def _unsure(folder: Path) -> list[int]:
    (path,) = _counts_files(folder)
    return list(json.loads(path.read_text()).get("unsure", []))


def test_a_count_under_a_limit_is_read_again_by_a_run_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # fmt: skip
    folder = _two_files(tmp_path / "c")
    with caplog.at_level(logging.WARNING, "openwebtext"):
        limited = _over_ranks(folder, max_member_bytes=1000)
    assert len(limited) < 20 and _unsure(folder) == [0]
    assert "the next run reads them again" in caplog.text and "max_member_bytes=1000" in caplog.text
    assert sorted(_over_ranks(folder)) == sorted(_over_ranks(_two_files(tmp_path / "fresh")))
    assert len(_over_ranks(folder)) == 20 and _unsure(folder) == []


def test_only_the_unsure_members_are_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """A count that met a member it could not vouch for is saved, that member marked: the next
    count reads it alone (every run reading the whole corpus again was the cost before)."""
    folder = _two_files(tmp_path / "c")
    _over_ranks(folder, max_member_bytes=1000)
    read: list[str] = []
    real = engine_raw.UnitBytes.read

    def counting(self, unit):  # type: ignore[no-untyped-def]
        read.append(unit.member)
        return real(self, unit)

    monkeypatch.setattr(engine_raw.UnitBytes, "read", counting)
    corpus = Corpus.open(folder)
    counts = count_documents(corpus, workers=0, on_error="skip", again=corpus.counts)
    assert read == ["a.jsonl.gz"] and counts.documents == (10, 10) and counts.unsure == ()


def test_a_member_the_disk_could_not_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    folder = _two_files(tmp_path / "c")
    _gz_unreadable(monkeypatch)
    counts = count_documents(Corpus.open(folder), workers=0, on_error="skip")
    assert counts.failed == counts.unsure == (0,)
    assert len(_over_ranks(folder)) == 10 and _unsure(folder) == [0]
    monkeypatch.undo()
    assert len(_over_ranks(folder)) == 20 and _unsure(folder) == []


def test_a_corrupt_member_is_a_verdict_and_is_kept(tmp_path: Path) -> None:
    """The other side: a member whose bytes are corrupt fails in any run: kept as failed."""
    folder = _two_files(tmp_path / "c")
    body = (folder / "a.jsonl.gz").read_bytes()
    (folder / "a.jsonl.gz").write_bytes(body[:20] + bytes(b ^ 0xFF for b in body[20:40])
                                        + body[40:])  # fmt: skip
    counts = count_documents(Corpus.open(folder), workers=0, on_error="skip")
    assert counts.failed == (0,) and counts.unsure == ()
    _over_ranks(folder)
    assert len(_counts_files(folder)) == 1


def test_what_a_count_may_keep() -> None:
    from openwebtext.errors import CorruptMember, MemberTooLarge, TruncatedMember, UnknownFormat

    kept = [CorruptMember("corrupt xz data"), TruncatedMember("cut"), UnknownFormat("?")]
    unsure = [Unreadable("cannot read: EIO"), MemberTooLarge("over"), WorkerError("died"),
              UnexpectedError("unexpected KeyError")]  # fmt: skip
    assert [a_verdict(e) for e in kept] == [True] * 3
    assert [a_verdict(e) for e in unsure] == [False] * 4


def test_owt_index_marks_the_counts_it_cannot_vouch_for_and_reads_them_again(
    tmp_path: Path, owt, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:  # fmt: skip
    folder = _two_files(tmp_path / "c")
    _gz_unreadable(monkeypatch)
    ran = owt("index", str(folder), "--on-error", "skip", "--jobs", "0")
    assert ran.returncode == 0 and "Input/output error" in ran.stderr
    assert "1 member could not be read for a cause that is not their bytes" in ran.stderr
    assert _unsure(folder) == [0]
    monkeypatch.undo()
    ran = owt("index", str(folder), "--jobs", "0")
    assert ran.returncode == 0 and "reading them again" in ran.stderr
    assert _unsure(folder) == [] and "20 documents" in ran.stderr


# --- what the library did not expect: never a skip --------------------------------------------


@pytest.mark.parametrize("workers", [0, 1])
def test_a_missing_extra_is_raised_under_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:  # fmt: skip
    zstandard = pytest.importorskip("zstandard")
    path = tmp_path / "a.jsonl.zst"
    lines = b"".join(json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(10))
    path.write_bytes(zstandard.ZstdCompressor().compress(lines))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # (the extra not installed)
    loader = Loader(Corpus.open(path), workers=workers, on_error="skip")
    with pytest.raises(UnexpectedError, match=r"a\.jsonl\.zst\]: zstd members need the zst"):
        list(loader)


def test_owt_tokenize_raises_a_missing_extra_under_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """Not a finished run of 0 documents, which a second run would have taken as done."""
    zstandard = pytest.importorskip("zstandard")
    from openwebtext.prepare import PrepareOptions, prepare

    path = tmp_path / "a.jsonl.zst"
    lines = b"".join(json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(10))
    path.write_bytes(zstandard.ZstdCompressor().compress(lines))
    monkeypatch.setitem(sys.modules, "zstandard", None)
    options = PrepareOptions(tokenizer="bytes", workers=0, on_error="skip")
    with pytest.raises(UnexpectedError, match="zstd members need the zstandard package"):
        prepare(Corpus.open(path), tmp_path / "out", options)
    assert not (tmp_path / "out" / "meta.json").exists()


def test_a_tokenizer_s_own_error_is_raised_under_skip(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    from openwebtext import Tokenizer

    def blows_up(self, texts):  # type: ignore[no-untyped-def]
        raise RuntimeError("the tokenizer failed")

    monkeypatch.setattr(Tokenizer, "encode_batch", blows_up)
    loader = Loader(small_corpus, workers=0, tokenizer="bytes", on_error="skip")
    with pytest.raises(UnexpectedError, match=r"unexpected RuntimeError .*the tokenizer failed"):
        list(loader)


def test_joined_counts_keep_this_run_s_unsure_failures() -> None:
    """A count of one more split joined with the splits counted before keeps what this run
    could not vouch for: else it was saved."""
    from openwebtext.index import Counts

    known = Counts((3, 0, 2), {}, (1,))
    counted = Counts((3, 0, 2), {"val:0.1:1": (0, 0, 1)}, (1,), (1,))
    assert known.joined(counted).unsure == (1,)


def test_a_row_group_pyarrow_finds_corrupt_is_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """pyarrow's OSError of a row group's bytes, in memory (corrupt snappy data, say): the
    bytes' fault, kept in the count as failed (never ``Unreadable``)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from openwebtext.engine import tables

    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(20)]}), path,
                   row_group_size=10)  # fmt: skip
    real = tables._one_column
    calls: list[int] = []

    def corrupt(table):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:
            raise OSError("Corrupt snappy compressed data.")
        return real(table)

    monkeypatch.setattr(tables, "_one_column", corrupt)
    skipped: list[Exception] = []
    counts = count_documents(Corpus.open(path), workers=0, on_error="skip", on_skip=skipped.append)
    assert [type(e).__name__ for e in skipped] == ["CorruptMember"]
    assert counts.failed == (1,) and counts.unsure == ()


@pytest.mark.remote
def test_a_remote_member_that_could_not_be_fetched_is_unreadable(tmp_path: Path) -> None:
    """A file gone from the server since the open: no verdict on its bytes."""
    pytest.importorskip("aiohttp")
    from openwebtext.synth import write_corpus
    from remote_servers import RangeServer

    write_corpus(tmp_path / "c", subsets=2, members=3, docs=5)
    with RangeServer(tmp_path / "c") as server:
        corpus = Corpus.open(server.url + "/")
        (tmp_path / "c" / "urlsf_subset00.tar").rename(tmp_path / "gone")
        skipped: list[Exception] = []
        counts = count_documents(corpus, workers=0, on_error="skip", on_skip=skipped.append)
    assert skipped and all(type(e) is Unreadable for e in skipped), skipped
    assert counts.unsure == counts.failed and len(counts.failed) == 3


@pytest.mark.remote
def test_a_prefetched_span_that_could_not_be_fetched_is_unreadable(tmp_path: Path) -> None:
    """The error of a span fetched ahead (``RangeReader.prefetch``) keeps its kind."""
    pytest.importorskip("aiohttp")
    from openwebtext.source.ranges import RangeReader, Span
    from remote_servers import RangeServer

    (tmp_path / "f.bin").write_bytes(b"x" * 100)
    with RangeServer(tmp_path) as server:
        reader = RangeReader(threads=1)
        (tmp_path / "f.bin").unlink()
        span = Span(server.url + "/f.bin", 0, 10, "m")
        reader.prefetch([span])
        with pytest.raises(Unreadable) as caught:
            reader.read(span)
    assert type(caught.value) is Unreadable and caught.value.member == "m"


# --- the other doors (a second red team): the same class -------------------------------------


def test_a_url_without_the_remote_extra_is_refused_under_skip_naming_it(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """A corpus of local tars and a URL, opened under skip without fsspec: the URL was a
    skipped file, said without its name (and in Ray, one skip for all its members)."""
    from openwebtext.errors import Unsupported
    from openwebtext.source import configure

    monkeypatch.setitem(sys.modules, "fsspec", None)
    configure(None)
    with pytest.raises(Unsupported, match=r"127\.0\.0\.1:9/x\.tar: reading URLs needs the remote"):
        Corpus.open([small_corpus, "http://127.0.0.1:9/x.tar"], on_error="skip")


def test_a_parquet_file_without_pyarrow_is_one_line_of_owt(
    tmp_path: Path, owt, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:  # fmt: skip
    """It was a traceback (a ``ModuleNotFoundError`` at the open, which ``owt`` did not
    catch); under skip, the library's error (never a skipped file)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"text": ["a", "b"]}), path)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    ran = owt("stream", str(path), "--on-error", "skip", "-q", "-j", "0")
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert "parquet files need pyarrow" in ran.stderr


def test_owt_tokenize_never_keeps_a_member_it_could_not_read_as_skipped(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """A read error under skip was kept in a finished run; a run again, the disk back, found
    "nothing to do", the member's documents lost for good."""
    from openwebtext.prepare import PrepareOptions, prepare

    real = engine_raw.UnitBytes.read
    corpus = Corpus.open(small_corpus)

    def eio(self, unit):  # type: ignore[no-untyped-def]
        if unit == corpus.units[1]:
            raise OSError(errno.EIO, "Input/output error")
        return real(self, unit)

    monkeypatch.setattr(engine_raw.UnitBytes, "read", eio)
    options = PrepareOptions(tokenizer="bytes", workers=0, on_error="skip")
    with pytest.raises(Unreadable, match="Input/output error"):
        prepare(corpus, tmp_path / "out", options)
    assert not (tmp_path / "out" / "meta.json").exists()
    monkeypatch.undo()
    report = prepare(corpus, tmp_path / "out", options)
    counts = report.meta["counts"]
    assert not report.already and counts["skipped_members"] == 0
    assert sum(counts["documents"].values()) == len(list(Loader(corpus, workers=0)))


def test_ray_s_reader_names_the_unit_of_an_error_it_did_not_make(small_corpus: Path) -> None:
    """The Ray door's task read a unit and tokenized it outside the library's errors: a
    missing extra or a tokenizer's own error came back raw, naming no file."""
    from openwebtext.ray.dataset import _ReadGroup

    class Failing:
        def read(self, unit):  # type: ignore[no-untyped-def]
            raise ModuleNotFoundError("zstd members need the zstandard package")

    unit = Corpus.open(small_corpus).units[0]
    group = _ReadGroup((), (), None, "skip", None, 1 << 30, 1 << 26)
    with pytest.raises(UnexpectedError, match=r"cannot read .*\]: zstd members need") as caught:
        group._read(Failing(), unit, None, {}, [], [])
    assert (caught.value.path, caught.value.member) == (unit.path, unit.member)
