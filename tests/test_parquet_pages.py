"""``engine.pages.chunk_pages``: what a parquet column chunk's page headers say (its size bound,
whether plain, the most one value may decode to), read from files pyarrow writes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from openwebtext.engine.pages import chunk_pages


def _chunk(path: Path) -> tuple[bytes, int, int]:
    """The first column chunk's bytes, its values and its uncompressed size (the footer's)."""
    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    with path.open("rb") as f:
        f.seek(start)
        raw = f.read(column.total_compressed_size)
    return raw, column.num_values, column.total_uncompressed_size


def _write(path: Path, texts: list[str], **options: object) -> Path:
    pq.write_table(pa.table({"text": texts}), path, row_group_size=len(texts),
                   data_page_size=64 << 10, **options)  # type: ignore[arg-type]  # fmt: skip
    return path


TEXTS = [f"document {k % 500} " * 3 for k in range(400_000)]


def test_a_dictionary_s_values_are_bounded_by_its_largest_page_not_the_chunk(
    tmp_path: Path,
) -> None:
    """pyarrow's default (a dictionary page, then pages of indices): one value is at most the
    largest page. The batches a dictionary's column is decoded in were sized by the whole
    chunk, so their number grew with the chunk: the time to read it, quadratic."""
    raw, values, footer_size = _chunk(_write(tmp_path / "d.parquet", TEXTS, compression="none"))
    size, plain, widest = chunk_pages(raw, values)
    assert not plain
    assert size >= footer_size * 0.9
    assert widest < size / 4  # (several pages: the dictionary's is one of them)
    assert widest >= max(len(t) for t in TEXTS)


@pytest.mark.parametrize(
    ("options", "built"),
    [({"use_dictionary": False}, False),
     ({"use_dictionary": False, "column_encoding": {"text": "DELTA_BYTE_ARRAY"}}, True)],
)  # fmt: skip
def test_values_built_on_others_are_bounded_by_the_whole_chunk(
    tmp_path: Path, options: dict[str, object], built: bool
) -> None:
    """Plain pages: a value is in its page. ``DELTA_BYTE_ARRAY`` builds each value on the one
    before (a prefix of it, then a suffix), so one value may be as long as every page."""
    raw, values, _ = _chunk(_write(tmp_path / "p.parquet", TEXTS, compression="none", **options))
    size, plain, widest = chunk_pages(raw, values)
    assert plain is not built
    assert (widest == size) is built
