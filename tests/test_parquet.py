"""Parquet inputs, local: a unit per row group, nanoGPT's bins, a missing column, damaged row
groups. The guarantees every kind gives (seeded order, exact resume, even shares, reshard,
tokenize, the text column): test_corpus_contract.py."""

from __future__ import annotations

import io
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember
from support import Owt
from tables_support import sample_texts, write_parquet

pytest.importorskip("pyarrow")

TEXTS = sample_texts(150, seed=1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """a.parquet (100 rows, row groups of 17: 6) and b.parquet (50 rows: 3), and a README."""
    root = tmp_path_factory.mktemp("parquet") / "data"
    write_parquet(root / "a.parquet", TEXTS[:100])
    write_parquet(root / "b.parquet", TEXTS[100:], compression="zstd")
    (root / "README.md").write_text("# a dataset card\n")
    return root


def test_units_are_row_groups_and_documents_are_named_by_file_and_row(folder: Path) -> None:
    corpus = Corpus.open(folder)
    assert [u.member for u in corpus.units][:3] == [
        "a.parquet#rg0",
        "a.parquet#rg1",
        "a.parquet#rg2",
    ]
    assert len(corpus.units) == 9 and {u.kind for u in corpus.units} == {"parquet"}
    docs = list(Loader(corpus, shuffle=False, workers=0))
    assert [d.text for d in docs] == TEXTS
    assert docs[20].name == "a.parquet#20" and docs[20].member == "a.parquet#rg1"
    assert docs[20].document_index == 3 and docs[120].name == "b.parquet#20"


def _nanogpt_order(tars: list[Path]) -> list[str]:
    """The documents of a tar corpus in the order nanoGPT's loading script reads them."""
    texts = []
    for path in sorted(tars, key=lambda p: p.name):
        with tarfile.open(path) as outer:
            for member in outer:
                if not member.isreg():
                    continue
                raw = lzma.decompress(outer.extractfile(member).read())  # type: ignore[union-attr]
                with tarfile.open(fileobj=io.BytesIO(raw)) as inner:
                    texts += [inner.extractfile(e).read().decode()  # type: ignore[union-attr]
                              for e in inner if e.isreg()]  # fmt: skip
    return texts


def test_nanogpt_bins_of_parquet_are_those_of_the_tar_corpus(
    owt: Owt, small_corpus: Path, tmp_path: Path
) -> None:
    texts = _nanogpt_order(list(small_corpus.glob("*.tar")))
    write_parquet(tmp_path / "pq" / "train-00000-of-00002.parquet", texts[:70], row_group=9)
    write_parquet(tmp_path / "pq" / "train-00001-of-00002.parquet", texts[70:], row_group=9)
    bins = {}
    for name, source in (("tar", small_corpus), ("parquet", tmp_path / "pq")):
        out = tmp_path / name
        result = owt("tokenize", str(source), "--out", str(out), "--split", "nanogpt",
                     "--val-fraction", "0.1", "-j", "2", "-q")  # fmt: skip
        assert result.returncode == 0, result.stderr
        bins[name] = [(out / f).read_bytes() for f in ("train.bin", "val.bin")]
    assert bins["parquet"] == bins["tar"]
    assert len(bins["tar"][1]) > 0


def test_a_file_without_the_column_is_one_clear_error(owt: Owt, folder: Path) -> None:
    with pytest.raises(CorpusError, match=r"no column 'body' \(its columns: id, text, url\)"):
        Corpus.open(folder, text_column="body")
    result = owt("stream", str(folder / "a.parquet"), "--text-column", "body", "-q")
    assert result.returncode != 0
    assert "a.parquet" in result.stderr and "its columns: id, text, url" in result.stderr
    assert "Traceback" not in result.stderr


def _damage_row_group(path: Path, group: int) -> None:
    """Overwrite the first page header of ``group``'s text chunk with garbage."""
    unit = Corpus.open(path).units[group]
    with open(path, "r+b") as f:
        f.seek(unit.offset)
        f.write(b"\xff" * 24)


def test_a_corrupt_row_group_is_an_error_naming_it_or_a_counted_skip(
    tmp_path: Path, folder: Path
) -> None:
    path = Path(shutil.copy(folder / "a.parquet", tmp_path / "a.parquet"))
    _damage_row_group(path, 2)
    with pytest.raises(CorruptMember, match=r"corrupt parquet row group 2") as raised:
        list(Loader(path, workers=2))
    assert raised.value.member == "a.parquet#rg2" and raised.value.path == str(path)
    with Loader(path, workers=2, on_error="skip").iter() as it:
        got = [d.text for d in it]
        assert it.stats.skipped_members == 1
    assert sorted(got) == sorted(TEXTS[:34] + TEXTS[51:100])


def test_a_null_text_is_a_counted_document(tmp_path: Path) -> None:
    texts: list[Any] = ["one", None, "three"]
    path = write_parquet(tmp_path / "n.parquet", texts)
    with pytest.raises(CorruptMember, match=r"row 1: its 'text' is null"):
        list(Loader(path, workers=0))
    with Loader(path, workers=0, on_error="skip", shuffle=False).iter() as it:
        assert [d.text for d in it] == ["one", "three"]
        assert it.stats.skipped_documents == 1


def test_a_truncated_file_is_a_clear_error(tmp_path: Path, folder: Path) -> None:
    path = tmp_path / "cut.parquet"
    path.write_bytes((folder / "a.parquet").read_bytes()[:-100])
    with pytest.raises(CorpusError, match=r"does not end with PAR1"):
        Corpus.open(path)


def test_the_bench_ceiling_is_pyarrow_reading_the_same_row_groups(folder: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "openwebtext.bench", "ceiling-one", "--workers", "2", "--",
         str(folder / "a.parquet"), str(folder / "b.parquet")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["decoder"] == "pyarrow read_row_group" and report["units"] == 9
    assert report["decompressed_bytes"] == sum(len(t.encode()) for t in TEXTS)
