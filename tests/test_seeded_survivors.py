"""What seeded bugs survived the layer's tests (issue 39): each pinned here by behaviour."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptDocument
from openwebtext.tokenfiles import opened
from tables_support import sample_texts

TEXTS = sample_texts(25, seed=13)


@pytest.mark.parametrize("kind", ["string", "large_string", "binary", "large_binary"])
def test_every_text_type_is_read_whole(tmp_path: Path, kind: str) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    values = [t.encode() for t in TEXTS] if "binary" in kind else TEXTS
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": pa.array(values, getattr(pa, kind)())}), path,
                   row_group_size=7)  # fmt: skip
    assert [d.text for d in Loader(path, workers=0, shuffle=False)] == TEXTS


@pytest.mark.parametrize("kind", ["int64", "float64", "bool_"])
def test_a_column_that_is_not_text_is_refused_at_index_time(tmp_path: Path, kind: str) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "n.parquet"
    pq.write_table(
        pa.table(
            {
                "text": pa.array([1, 0, 1], getattr(pa, kind)())
                if kind != "bool_"
                else pa.array([True, False])
            }
        ),
        path,
    )
    with pytest.raises(CorpusError, match=r"not text"):
        Corpus.open(path)


def test_a_last_line_without_its_newline(tmp_path: Path) -> None:
    whole = tmp_path / "w.jsonl"
    whole.write_bytes(b'{"text": "a"}\n{"text": "b"}')  # whole, no final newline: read
    assert [d.text for d in Loader(whole, workers=0, shuffle=False)] == ["a", "b"]
    cut = tmp_path / "c.jsonl"
    cut.write_bytes(b'{"text": "a"}\n{"text": "b')  # cut in its last line: that line's error
    with pytest.raises(CorruptDocument, match="line 2"):
        list(Loader(cut, workers=0, shuffle=False))
    with Loader(cut, workers=0, shuffle=False, on_error="skip").iter() as it:
        assert [d.text for d in it] == ["a"] and it.stats.skipped_documents == 1


def test_the_token_file_cache_sees_a_rewrite_of_the_same_size(tmp_path: Path) -> None:
    path = tmp_path / "train.bin"
    path.write_bytes(np.array([1, 2, 256, 3, 256], "<u2").tobytes())
    assert opened(path, eot=256).ends.tolist() == [3, 5]
    path.write_bytes(np.array([1, 256, 2, 3, 256], "<u2").tobytes())
    later = path.stat().st_mtime_ns + 10**9
    os.utime(path, ns=(later, later))  # the same size, a later mtime: opened again
    assert opened(path, eot=256).ends.tolist() == [2, 5]
