"""What a red team (session 30) found on the input kinds beside tars: a parquet footer whose
row count was lowered lost rows with no error; a token file's index with an end moved handed
out documents cut in the wrong place, and a token file cut at a document's end was read
against its run's records; a parquet file of no row group was refused, C4's and Dolma's
``.json.gz`` JSON lines were read as tars, and text files given by the wrong name or to the
wrong opener were said as something else."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember, UnknownFormat
from openwebtext.tokenfiles import TokenFileError
from support import copy_run
from tables_support import sample_texts, write_jsonl, write_parquet

pq = pytest.importorskip("pyarrow.parquet")


def _lowered_row_count(path: Path) -> Path:
    """``path`` (3 row groups of 10) with one footer byte flipped so that row group 1 says 2
    rows while its text chunk still says 10 values (the file's row count still 30)."""
    raw = bytearray(path.read_bytes())
    length = int.from_bytes(raw[-8:-4], "little")
    for at in range(len(raw) - 8 - length, len(raw) - 8):
        raw[at] ^= 0x10
        path.write_bytes(bytes(raw))
        try:
            meta = pq.read_metadata(path)
            if meta.num_row_groups == 3 and meta.row_group(1).num_rows == 2:
                return path
        except Exception:
            pass
        raw[at] ^= 0x10
    raise AssertionError("no footer byte gives row group 1 two rows")


def test_a_parquet_footer_whose_row_counts_disagree_is_damaged(tmp_path: Path) -> None:
    path = _lowered_row_count(write_parquet(tmp_path / "a.parquet", sample_texts(30), 10))
    with pytest.raises(CorpusError, match="parquet footer is damaged: row group 1 says 2 rows "
                       "and 10 values of 'text'"):  # fmt: skip
        Corpus.open(path)
    write_parquet(tmp_path / "b.parquet", sample_texts(4))
    corpus = Corpus.open(tmp_path, on_error="skip")  # (22 of a.parquet's 30 were read, no skip)
    assert [str(e.path) for e in corpus.skipped_files] == [str(path)]
    assert len(list(Loader(corpus, workers=0, on_error="skip"))) == 4


def test_a_parquet_file_of_no_row_group_holds_no_document(tmp_path: Path) -> None:
    texts = sample_texts(5)
    write_parquet(tmp_path / "part-0.parquet", texts)
    table = pq.read_table(tmp_path / "part-0.parquet").schema
    pq.ParquetWriter(tmp_path / "part-1.parquet", table).close()  # Spark's empty partition
    corpus = Corpus.open(tmp_path)
    assert corpus.skipped_files == ()
    assert sorted(d.text for d in Loader(corpus, workers=0)) == sorted(texts)


def test_json_gz_files_are_json_lines(tmp_path: Path) -> None:
    texts = sample_texts(7)
    name = "c4-train.00000-of-01024.json.gz"  # allenai/c4's layout
    write_jsonl(tmp_path / "c4" / name, texts)
    assert [d.text for d in Loader(tmp_path / "c4", shuffle=False, workers=0)] == texts
    assert Corpus.open(tmp_path / "c4").units[0].kind == "jsonl.gz"


def test_text_under_names_that_do_not_say_it_is_said_so(tmp_path: Path) -> None:
    line = json.dumps({"text": "a"}) + "\n"
    (tmp_path / "train.json").write_text(line)
    with pytest.raises(UnknownFormat, match="its bytes look like JSON: JSON lines are read by "
                       r"their name \(\.jsonl"):  # fmt: skip
        Corpus.open(tmp_path / "train.json")
    (tmp_path / "data.gz").write_bytes(gzip.compress(line.encode()))
    with pytest.raises(CorruptMember, match=r"not a valid tar: .*its bytes look like JSON"):
        list(Loader(tmp_path / "data.gz", workers=0))
    shutil.copy(write_parquet(tmp_path / "p" / "a.parquet", ["x"]), tmp_path / "a.jsonl")
    with pytest.raises(CorpusError, match="named plain JSON lines, but its bytes are parquet"):
        Corpus.open(tmp_path / "a.jsonl")
    (tmp_path / "b.jsonl").write_bytes(gzip.compress(line.encode()))
    with pytest.raises(CorpusError, match="named plain JSON lines, but its bytes are gzip"):
        Corpus.open(tmp_path / "b.jsonl")


def test_text_given_as_token_ids_is_refused_saying_what_it_is(
    tmp_path: Path, small_corpus: Path
) -> None:
    cases = {
        "a.parquet": write_parquet(tmp_path / "a.parquet", ["x"]),
        "a.jsonl": write_jsonl(tmp_path / "a.jsonl", ["x"]),
        "tar": small_corpus / "urlsf_subset00.tar",
    }
    for said, path in zip(("parquet", "JSON", "tar"), cases.values(), strict=True):
        with pytest.raises(CorpusError, match=f"is {said} data, not token ids: a corpus of text "
                           "is opened with Corpus.open"):  # fmt: skip
            Corpus.open_tokens(path)


def test_a_token_file_cut_at_a_document_end_is_refused_by_its_run_record(
    token_run: Path, tmp_path: Path
) -> None:
    corpus = Corpus.open_tokens(token_run / "train.bin")
    eot = 256  # the bytes tokenizer's: uint16 ids
    ids = np.fromfile(token_run / "train.bin", dtype="<u2")
    cut = int(np.flatnonzero(ids == eot)[9]) + 1  # after the tenth document
    bare = copy_run(token_run, tmp_path / "bare", ("train.bin",))
    (bare / "train.bin").write_bytes(ids[:cut].tobytes())
    with pytest.raises(TokenFileError, match=r"train.bin: \d+ bytes, not the \d+ its run's "
                       r"meta.json records \(cut short, or not the run's\)"):  # fmt: skip
        Corpus.open_tokens(bare / "train.bin")
    ds = copy_run(token_run, tmp_path / "ds", ("train.ds", "train.ds.index"))
    (ds / "train.ds").write_bytes(ids[:cut].tobytes())
    ends = np.fromfile(token_run / "train.ds.index", dtype="<u8")[:10]
    ends.tofile(ds / "train.ds.index")
    with pytest.raises(TokenFileError, match=r"train.ds: 10 documents, not the \d+ of train its "
                       "run's meta.json records"):  # fmt: skip
        Corpus.open_tokens(ds / "train.ds")
    assert len(corpus.units) > 0  # (the run's own files: taken)


def test_an_index_that_moves_a_document_end_is_a_corrupt_member(
    token_run: Path, tmp_path: Path
) -> None:
    ds = copy_run(token_run, tmp_path / "ds", ("train.ds", "train.ds.index"))
    ends = np.fromfile(ds / "train.ds.index", dtype="<u8")
    ends[5] += 1  # document 5 takes document 6's first id
    ends.tofile(ds / "train.ds.index")
    with pytest.raises(CorruptMember, match=r"document 5 does not end with the end-of-text id "
                       r"256 its run's meta\.json records"):  # fmt: skip
        list(Loader(Corpus.open_tokens(ds / "train.ds"), shuffle=False, workers=0))
    stats = Loader(Corpus.open_tokens(ds / "train.ds"), workers=0, on_error="skip").iter()
    assert sum(1 for _ in stats) < len(ends) and stats.stats.skipped_members >= 1


def test_ids_or_lines_that_begin_like_another_kind_are_read(tmp_path: Path) -> None:
    """The review of these checks: ids whose first bytes are ``{``, ``[`` or gzip's magic, and
    a plain JSON lines file with tar's ``ustar`` at byte 257 of its text, were refused."""
    for first, second in ((123, 8), (91, 8), (35615, 8), (0x4150, 0x3152)):  # (last: "PAR1")
        path = tmp_path / f"{first}.tokens"
        np.array([first, second, 5, 50256, 7, 50256], dtype="<u2").tofile(path)
        corpus = Corpus.open_tokens(path, eot=50256)
        assert len(list(Loader(corpus, workers=0, tokenizer="gpt2"))) == 2, first
    text = "x" * (257 - len('{"text": "')) + "ustar\x0000"
    lines = tmp_path / "u.jsonl"
    lines.write_text(json.dumps({"text": text}) + "\n" + json.dumps({"text": "b"}) + "\n")
    assert lines.read_bytes()[257:262] == b"ustar"
    assert [d.text for d in Loader(lines, shuffle=False, workers=0)] == [text, "b"]


def test_a_text_column_for_a_mixture_names_its_parts_of_records(
    tmp_path: Path, small_corpus: Path
) -> None:
    from openwebtext import cli

    write_jsonl(tmp_path / "code" / "a.jsonl", ["one", "two"], field="content")
    code = cli.main(["stream", "--mix", f"web={small_corpus}:0.5", "--mix",
                     f"code={tmp_path / 'code'}:0.5", "--text-column", "content", "--take", "6",
                     "-q"])  # fmt: skip
    assert code == 0
