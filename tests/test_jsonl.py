"""JSON lines inputs, local: plain (cut at lines), gzip and zstd; units and names, the field,
bad lines under skip and raise. The guarantees every kind gives (seeded order, exact resume,
even shares, reshard, tokenize, the text column): test_corpus_contract.py."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptDocument, CorruptMember
from openwebtext.index import jsonl
from support import names
from tables_support import jsonl_bytes, sample_texts, write_jsonl

TEXTS = sample_texts(120, seed=2)
SUFFIXES = [".jsonl", ".jsonl.gz", ".jsonl.zst"]


@pytest.fixture(params=SUFFIXES, ids=lambda s: s.lstrip("."))
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Two files of one format: 80 and 40 documents."""
    suffix = request.param
    write_jsonl(tmp_path / "data" / f"part-0{suffix}", TEXTS[:80])
    write_jsonl(tmp_path / "data" / f"part-1{suffix}", TEXTS[80:])
    return tmp_path / "data"


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain files cut into units of about 4 KB (the workers fork after it is set)."""
    monkeypatch.setattr(jsonl, "CHUNK_BYTES", 4096)


def test_every_line_in_corpus_order(folder: Path, small_chunks: None) -> None:
    corpus = Corpus.open(folder)
    if corpus.units[0].kind == "jsonl":
        assert len(corpus.units) > 4  # cut at lines
        assert corpus.units[1].member == f"part-0.jsonl@{corpus.units[1].offset}"
    else:
        assert len(corpus.units) == 2
    docs = list(Loader(corpus, shuffle=False, workers=0))
    assert [d.text for d in docs] == TEXTS
    assert docs[0].name == f"{sorted(p.name for p in folder.iterdir())[0]}@0"


def test_document_names_are_file_and_byte(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", ["a", "b"])
    second = len(json.dumps({"id": 0, "text": "a"})) + 1
    assert names(Loader(path, shuffle=False, workers=0)) == ["d.jsonl@0", f"d.jsonl@{second}"]


def test_a_line_without_the_field_is_a_bad_document(tmp_path: Path) -> None:
    """(The field named by text_column: test_corpus_contract.py.)"""
    data = gzip.decompress(write_jsonl(tmp_path / "b.jsonl.gz", TEXTS[:10]).read_bytes())
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(data.replace(b'"text"', b'"body"', 1)))
    with pytest.raises(CorruptDocument, match=r"line 1: not a JSON object with a string 'text'"):
        list(Loader(tmp_path / "b.jsonl.gz", workers=0))
    with Loader(tmp_path / "b.jsonl.gz", workers=0, on_error="skip", shuffle=False).iter() as it:
        assert [d.text for d in it] == TEXTS[1:10] and it.stats.skipped_documents == 1


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("lines", [2, 10, 3000])
def test_a_file_none_of_whose_first_records_has_the_field_is_refused_at_the_open(
    tmp_path: Path, suffix: str, lines: int
) -> None:  # fmt: skip
    """As a parquet file without the column: not a run of skipped lines (under skip, every
    line was one, and the run read no document). 3000 lines: more than the head read."""
    if suffix == ".jsonl.zst":
        pytest.importorskip("zstandard")
    texts = (TEXTS * 30)[:lines]
    path = write_jsonl(tmp_path / f"b{suffix}", texts, field="body")
    said = r"JSON lines: its first (\d+ records have|record has) no field 'text' \(the first's "
    said += r"fields: id, body\); name the text field"
    with pytest.raises(CorpusError, match=said) as raised:
        Corpus.open(path)
    assert raised.value.path == str(path)
    with pytest.raises(CorpusError, match=r"no documents: .*1 files skipped"):
        Corpus.open(path, on_error="skip")
    assert len(list(Loader(Corpus.open(path, text_column="body"), workers=0))) == lines


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_bad_line_names_file_and_line_or_is_counted(tmp_path: Path, suffix: str) -> None:
    lines = jsonl_bytes(TEXTS[:5]).split(b"\n")
    lines[2] = b'{"text": "cut short'
    data = b"\n".join(lines)
    if suffix == ".jsonl.gz":
        data = gzip.compress(data)
    elif suffix == ".jsonl.zst":
        data = pytest.importorskip("zstandard").ZstdCompressor().compress(data)
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(data)
    with pytest.raises(CorruptDocument, match=r"line 3: not a JSON object") as raised:
        list(Loader(path, workers=0))
    assert raised.value.path == str(path) and str(path) in str(raised.value)
    with Loader(path, workers=2, on_error="skip", shuffle=False).iter() as it:
        assert [d.text for d in it] == TEXTS[:2] + TEXTS[3:5]
        assert it.stats.skipped_documents == 1


def test_a_corrupt_compressed_file_is_a_member_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl.gz", TEXTS[:50])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptMember, match=r"corrupt gzip data"):
        list(Loader(path, workers=0))
    with Loader(path, workers=0, on_error="skip").iter() as it:
        assert list(it) == [] and it.stats.skipped_members == 1


def test_a_truncated_compressed_file_keeps_its_whole_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl.gz", TEXTS[:50])
    path.write_bytes(path.read_bytes()[:-200])
    with Loader(path, workers=0, on_error="skip", shuffle=False).iter() as it:
        got = [d.text for d in it]
        assert it.stats.partial_members == 1
    assert 0 < len(got) < 50 and got == TEXTS[: len(got)]


def test_a_folder_keeps_jsonl_files_by_name(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "f" / "x.jsonl", TEXTS[:3])
    (tmp_path / "f" / "notes.json").write_text("{}")
    shutil.copy(tmp_path / "f" / "x.jsonl", tmp_path / "f" / "y.ndjson")
    corpus = Corpus.open(tmp_path / "f")
    assert [u.member for u in corpus.units] == ["x.jsonl", "y.ndjson"]


def test_a_first_record_without_the_field_before_a_long_one_is_not_judged_alone(
    tmp_path: Path
) -> None:  # fmt: skip
    """A first line without the field, then one longer than the head read at the open: one
    record alone is no verdict on the file (a bad document, left to the reader)."""
    path = tmp_path / "docs.jsonl"
    lines = [json.dumps({"meta": 1}), json.dumps({"text": "x" * (100 << 10)}),
             json.dumps({"text": "y"})]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    loader = Loader(Corpus.open(path), workers=0, shuffle=False, on_error="skip")
    with loader.iter() as it:
        assert [len(d.text) for d in it] == [100 << 10, 1]
        assert it.stats.skipped_documents == 1


def test_a_field_of_no_text_in_every_first_record_is_refused_at_the_open(tmp_path: Path) -> None:
    """``--text-column id`` of records whose ``id`` is a number: every line was a skipped
    document (parquet refused such a column at the open: "is int64, not text")."""
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"text": f"doc {i}", "id": i}) + "\n" for i in range(9)))
    said = r"its first 9 records have no text in field 'id' \(the first's: a JSON number\)"
    with pytest.raises(CorpusError, match=said):
        Corpus.open(path, text_column="id")
    assert len(list(Loader(Corpus.open(path), workers=0))) == 9


def test_a_file_of_one_record_without_the_field_is_a_bad_document(tmp_path: Path) -> None:
    """One record is too little to judge a file by (a file of one damaged line, among
    others, is a skipped document, as it always was)."""
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": 5}\n')
    with Loader(Corpus.open(path), workers=0, on_error="skip").iter() as it:
        assert list(it) == [] and it.stats.skipped_documents == 1


@pytest.mark.parametrize("kind", ["a long integer", "bytes not UTF-8"])
def test_a_header_line_before_records_json_loads_cannot_parse_is_read(
    tmp_path: Path, kind: str
) -> None:  # fmt: skip
    """A header record without the field, then records the reader reads but ``json.loads``
    does not (an integer past Python's digit limit; Latin-1 bytes, kept with U+FFFD): the open
    judged the file by its header alone and refused it (a review)."""
    if kind == "a long integer":
        lines = [b'{"text": "doc %d", "n": %s}' % (i, b"9" * 5000) for i in range(5)]
    else:
        lines = [b'{"text": "caf\xe9 %d"}' % i for i in range(5)]
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"version": 1}\n' + b"\n".join(lines) + b"\n")
    loader = Loader(Corpus.open(path), workers=0, on_error="skip", decode_errors="replace")
    with loader.iter() as it:
        assert len(list(it)) == 5 and it.stats.skipped_documents == 1
