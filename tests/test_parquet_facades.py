"""Parquet through the facades: the PyTorch dataset (DataLoader workers are shares) and the
Hugging Face helper, on a parquet folder of this module's own (counted when first sharded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tables_support import sample_texts, write_parquet

pytest.importorskip("pyarrow")

TEXTS = sample_texts(90, seed=8)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("facades") / "data"
    write_parquet(root / "a.parquet", TEXTS[:50], row_group=13)
    write_parquet(root / "b.parquet", TEXTS[50:], row_group=13)
    return root


def test_a_torch_dataloader_reads_every_row_once(folder: Path) -> None:
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from openwebtext.torch import OpenWebTextDataset

    dataset = OpenWebTextDataset(folder, seed=1, workers=0)
    got = [doc.text for doc in DataLoader(dataset, batch_size=None, num_workers=2)]
    assert sorted(got) == sorted(TEXTS)


def test_the_hf_helper_reads_every_row_once(folder: Path) -> None:
    pytest.importorskip("datasets")
    from openwebtext.hf import iterable_dataset

    got = [row["text"] for row in iterable_dataset(folder, seed=1, workers=0, num_shards=2)]
    assert sorted(got) == sorted(TEXTS)
