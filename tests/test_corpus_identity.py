"""What a corpus is known by (``Corpus.fingerprint``, what a state and the counts trust):
its units, the column its documents are read from, and each remote file's validator as
indexed. Another column of the same byte sizes, or an object replaced by one of the same
size and layout, is another corpus: a state of the first never resumes on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import StateError

ROWS = 60


def _parquet(path: Path, columns: dict[str, list[str]]) -> Path:
    """Plain-encoded, uncompressed columns: texts of equal lengths give chunks of equal sizes."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=20, compression="NONE",
                   use_dictionary=False, write_statistics=False)  # fmt: skip
    return path


def _texts(letter: str) -> list[str]:
    return [f"{letter}{k:04d} " * 20 for k in range(ROWS)]


def _state_after(corpus: Corpus, n: int) -> dict[str, Any]:
    with Loader(corpus, workers=0, shuffle=False).iter() as it:
        for _ in range(n):
            next(it)
        return it.state_dict()


def test_another_column_of_the_same_sizes_is_another_corpus(tmp_path: Path) -> None:
    path = _parquet(tmp_path / "t.parquet", {"text": _texts("a"), "title": _texts("b")})
    text, title = Corpus.open(path), Corpus.open(path, text_column="title")
    assert [(u.member, u.size, u.kind) for u in text.units] == [
        (u.member, u.size, u.kind) for u in title.units
    ]
    assert text.fingerprint() != title.fingerprint()
    state = _state_after(text, 5)
    with pytest.raises(StateError, match="corpus"):
        Loader(title, workers=0, shuffle=False).iter(state=state)
    resumed = Loader(text, workers=0, shuffle=False).iter(state=state)
    assert next(resumed).text == _texts("a")[5]
    resumed.close()


def test_the_default_column_keeps_its_fingerprint(tmp_path: Path) -> None:
    """Naming the default column changes nothing: states saved before still resume."""
    path = _parquet(tmp_path / "t.parquet", {"text": _texts("a")})
    assert Corpus.open(path).fingerprint() == Corpus.open(path, text_column="text").fingerprint()


def test_a_replaced_object_of_the_same_size_is_another_corpus(
    s3_endpoint: str, tmp_path: Path
) -> None:
    boto3 = pytest.importorskip("boto3")
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    first = _parquet(tmp_path / "a" / "x.parquet", {"text": _texts("a")})
    second = _parquet(tmp_path / "b" / "x.parquet", {"text": _texts("c")})
    assert first.stat().st_size == second.stat().st_size
    options = {"endpoint_url": s3_endpoint}
    url = "s3://owt/identity/x.parquet"
    client.upload_file(str(first), "owt", "identity/x.parquet")
    before = Corpus.open(url, storage_options=options)
    state = _state_after(before, 5)
    client.upload_file(str(second), "owt", "identity/x.parquet")
    after = Corpus.open(url, storage_options=options)
    assert [(u.member, u.size) for u in before.units] == [(u.member, u.size) for u in after.units]
    assert before.fingerprint() != after.fingerprint()
    with pytest.raises(StateError, match="corpus"):
        Loader(after, workers=0, shuffle=False).iter(state=state)
