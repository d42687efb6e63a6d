"""Document names are unique within a corpus (the held-out split hashes them): files of one
base name in different folders (the Hub's per-config layout), and llm.c's shards, whose
documents each count from 0."""

from __future__ import annotations

import pickle
from array import array
from collections import Counter
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.engine import Reader
from openwebtext.index.inputs import distinct_names
from openwebtext.prepare import PrepareOptions, prepare, write_format
from openwebtext.records import Names
from openwebtext.tokenfiles import document_names
from tables_support import sample_texts, write_jsonl, write_parquet

TEXTS = sample_texts(40, seed=11)


def _names(corpus: Corpus, **options: object) -> list[str]:
    loader = Loader(corpus, workers=0, shuffle=False, **options)  # type: ignore[arg-type]
    return [d.name for d in loader]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".jsonl.gz"])
def test_one_base_name_in_two_folders(tmp_path: Path, suffix: str) -> None:
    for config in ("en", "de"):
        if suffix == ".parquet":
            write_parquet(tmp_path / config / f"train-00000-of-00001{suffix}", TEXTS)
        else:
            write_jsonl(tmp_path / config / f"train-00000-of-00001{suffix}", TEXTS)
    corpus = Corpus.open([tmp_path / "en", tmp_path / "de"])
    names = _names(corpus)
    assert len(names) == 80 and len(set(names)) == 80
    assert names[0].startswith("en/train-00000-of-00001") and names[40].startswith("de/")
    # The held-out split is drawn per document, not the same rows of each file.
    val = _names(corpus, split="val", val_fraction=0.3, val_seed=1)
    rows = Counter(name.split("/", 1)[1] for name in val)
    assert any(n == 1 for n in rows.values())


def test_distinct_base_names_keep_their_names(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a" / "x.parquet", TEXTS[:3])
    write_parquet(tmp_path / "b" / "y.parquet", TEXTS[3:6])
    assert _names(Corpus.open([tmp_path / "a", tmp_path / "b"]))[:2] == [
        "x.parquet#0",
        "x.parquet#1",
    ]


def test_distinct_names() -> None:
    got = distinct_names(["/d/en/t.parquet", "/d/de/t.parquet", "/d/u.parquet",
                          "s3://b/a/x", "s3://b/c/a/x"])  # fmt: skip
    assert got == {
        "/d/en/t.parquet": "en/t.parquet",
        "/d/de/t.parquet": "de/t.parquet",
        "/d/u.parquet": "u.parquet",
        "s3://b/a/x": "b/a/x",
        "s3://b/c/a/x": "c/a/x",
    }


def test_llmc_shards_name_their_documents_apart(small_corpus: Path, tmp_path: Path) -> None:
    prepare(Corpus.open(small_corpus), tmp_path, PrepareOptions(tokenizer="bytes", workers=0))
    write_format(tmp_path, "llmc", shard_tokens=10_000)
    shards = sorted(tmp_path.glob("train_*.bin"))
    assert len(shards) > 2
    corpus = Corpus.open_tokens(shards)
    names = _names(corpus, tokenizer="bytes")
    assert len(names) == len(set(names)) == sum(corpus.counts.documents)  # type: ignore[union-attr]
    assert names[0] == "train_000000.bin#0"
    single = _names(Corpus.open_tokens(tmp_path / "train.bin"), tokenizer="bytes")
    assert single[:2] == ["0", "1"]  # one file: its documents' names as before


@pytest.mark.parametrize("member", ["docs 3-9", "a/train.bin docs 3-9"])
def test_a_token_units_names_are_made_when_asked(member: str) -> None:
    """A token unit's names (``document_names``) are made one by one when asked, and read as
    the list of them would: by index, slice, iteration and equality, and through a pickle
    (a worker sends them so)."""
    names = document_names(member, 3, 9)
    prefix = "" if member.startswith("docs") else "a/train.bin#"
    expected = [f"{prefix}{k}" for k in range(3, 9)]
    assert len(names) == 6 and list(names) == expected and names == expected
    assert names[0] == expected[0] and names[-1] == expected[-1] and names[1:4] == expected[1:4]
    with pytest.raises(IndexError):
        names[6]
    assert pickle.loads(pickle.dumps(names)) == expected
    assert names != expected[:-1] and names != "".join(expected)


def test_names_numbered_by_line_start_read_as_their_list() -> None:
    """``records.Names`` over an int64 array (a JSON lines chunk's line starts) reads as the
    list of its names: by index (negative too), slice, iteration, equality, a pickle."""
    names = Names("d/a.jsonl", array("q", [0, 17, 40]), "@")
    expected = ["d/a.jsonl@0", "d/a.jsonl@17", "d/a.jsonl@40"]
    assert len(names) == 3 and list(names) == expected and names == expected
    assert names[-1] == expected[-1] and names[1:] == expected[1:] and names[::2] == expected[::2]
    with pytest.raises(IndexError):
        names[3]
    again = pickle.loads(pickle.dumps(names))
    assert again == expected and isinstance(again.numbers, array)


def test_table_units_hold_no_name_string_per_document(tmp_path: Path) -> None:
    """A parquet row group's and a JSON lines chunk's names travel from the worker as a file,
    a separator and numbers (a ``range``, or 8 bytes a document), made only when asked: a
    unit of millions of short documents held a string for each, in the worker, the pipe and
    the consumer. The names a loader hands out are the same."""
    write_jsonl(tmp_path / "j" / "a.jsonl", TEXTS[:5])
    write_parquet(tmp_path / "p" / "a.parquet", TEXTS[:5])
    for folder, sep in (("j", "@"), ("p", "#")):
        corpus = Corpus.open(tmp_path / folder)
        reader = Reader(1 << 24, 1 << 20)
        try:
            names = reader.read(corpus.units[0]).names
        finally:
            reader.close()
        assert isinstance(names, Names)
        assert isinstance(names.numbers, array if folder == "j" else range)
        assert list(names) == _names(corpus)
        assert all(name.startswith(f"a.{'jsonl' if folder == 'j' else 'parquet'}{sep}")
                   for name in names)  # fmt: skip
