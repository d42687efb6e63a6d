"""JSON lines inputs, local: plain (cut at lines), gzip and zstd; order, resume, even shares,
tokenize, the field, bad lines under skip and raise."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorruptDocument, CorruptMember
from openwebtext.index import jsonl
from resumable import check_save_load
from tables_support import jsonl_bytes, sample_texts, write_jsonl

TEXTS = sample_texts(120, seed=2)
SUFFIXES = [".jsonl", ".jsonl.gz", ".jsonl.zst"]


def owt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openwebtext.cli", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


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


def names(loader: Loader) -> list[str]:
    return [d.name for d in loader]


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


def test_seeded_order_is_the_same_for_any_worker_count(folder: Path, small_chunks: None) -> None:
    got = names(Loader(folder, seed=4, shuffle_buffer=30, workers=0))
    assert got == names(Loader(folder, seed=4, shuffle_buffer=30, workers=2))
    assert len(set(got)) == 120


def test_golden_order_of_a_plain_file(tmp_path: Path, small_chunks: None) -> None:
    # Golden values: changing them breaks every saved checkpoint of a JSON lines corpus.
    path = write_jsonl(tmp_path / "g.jsonl", TEXTS)
    assert names(Loader(path, seed=0, shuffle_buffer=40, workers=0))[:3] == GOLDEN


GOLDEN = ["g.jsonl@7583", "g.jsonl@8649", "g.jsonl@38865"]


def test_resume_exactly(folder: Path, small_chunks: None) -> None:
    loader = Loader(folder, seed=1, shuffle_buffer=25, workers=0)

    def start(loader: Loader) -> Any:
        return lambda state, epochs: loader.replace(epochs=epochs).iter(state=state)

    check_save_load(start(loader), key=lambda d: d.name, resumed=start(loader.replace(workers=2)))


def test_even_shares(folder: Path, small_chunks: None) -> None:
    shares = [names(Loader(folder, rank=r, world_size=7, seed=2, workers=2)) for r in range(7)]
    assert [len(s) for s in shares] == [120 // 7] * 7
    assert len({n for s in shares for n in s}) == 7 * (120 // 7)


def test_tokenize(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "bins"
    result = owt("tokenize", str(folder), "--out", str(out), "--tokenizer", "bytes",
                 "--val-fraction", "0.2", "-j", "2", "-q")  # fmt: skip
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert sum(meta["counts"]["documents"].values()) == 120
    assert sum(meta["counts"]["tokens"].values()) == sum(len(t.encode()) + 1 for t in TEXTS)


def test_the_field_is_named_by_text_column(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "b.jsonl.gz", TEXTS[:10], field="body")
    corpus = Corpus.open(path, text_column="body")
    assert corpus.units[0].kind == "jsonl.gz:body"
    assert [d.text for d in Loader(corpus, shuffle=False, workers=0)] == TEXTS[:10]
    result = owt("stream", str(path), "--text-column", "body", "--no-shuffle", "--jsonl", "-q")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == TEXTS[:10]
    with pytest.raises(CorruptDocument, match=r"line 1: not a JSON object with a string 'text'"):
        list(Loader(path, workers=0))


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
