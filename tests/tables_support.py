"""Parquet and JSON lines corpora for the tests, written from plain documents."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest


def sample_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` documents of a few hundred bytes, some of them not ASCII."""
    import random

    rnd = random.Random(seed)
    words = ["alpha", "beta", "gamma", "déjà", "naïve", "日本", "zeta", "\n\n\n", "end."]
    return [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 80))) for _ in range(n)]


def write_parquet(
    path: Path, texts: list[str], row_group: int = 17, column: str = "text", **kw: object
) -> Path:
    """A parquet file of ``texts`` (and an ``id`` and ``url`` column), ``row_group`` rows each."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table(
        {
            "id": [f"{path.stem}-{k}" for k in range(len(texts))],
            column: texts,
            "url": [f"https://example.com/{k}" for k in range(len(texts))],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group, **kw)  # type: ignore[arg-type]
    return path


def jsonl_bytes(texts: list[str], field: str = "text") -> bytes:
    lines = [json.dumps({"id": k, field: t}) for k, t in enumerate(texts)]
    return ("\n".join(lines) + "\n").encode()


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    """A JSON lines file of ``texts``, compressed as its name says (``.gz``, ``.zst``)."""
    data = jsonl_bytes(texts, field)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    elif path.name.endswith(".zst"):
        zstandard = pytest.importorskip("zstandard")
        data = zstandard.ZstdCompressor().compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def mixture_folders(small_corpus: Path, root: Path) -> dict[str, str]:
    """Three parts of three kinds under ``root``: ``web``, a copy of the small tar corpus (120
    documents); ``pq``, 50 parquet rows in 3 row groups; ``js``, 30 JSON lines."""
    import shutil

    shutil.copytree(small_corpus, root / "web")
    (root / "pq").mkdir()
    write_parquet(root / "pq" / "a.parquet", sample_texts(50, seed=1))
    (root / "js").mkdir()
    write_jsonl(root / "js" / "a.jsonl", sample_texts(30, seed=2))
    return {name: str(root / name) for name in ("web", "pq", "js")}
