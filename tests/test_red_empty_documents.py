"""Documents of no id (a token file's index may repeat an end: a datatrove ``.ds.index``, a
Megatron sequence of size 0) in packed batches. Each test failed before its fix:

- best fit opened a row of padding only for a document of no id when every row was full, or
  for a window of such documents alone (``fitting.best_fit_rows``): a batch of padding only,
  whose masked loss is NaN;
- concat's ``segment_ids`` counted them: a row holding two documents said 4
  (``packed.segmented``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader

EOT = 50256


def datatrove(folder: Path, documents: list[list[int]]) -> Path:
    """A datatrove ``train.ds`` of ``documents`` (uint16 ids), its index of their ends."""
    folder.mkdir(parents=True, exist_ok=True)
    np.array([i for d in documents for i in d], dtype=np.uint16).tofile(folder / "train.ds")
    ends = np.cumsum([len(d) for d in documents]).astype("<u8")
    ends.tofile(folder / "train.ds.index")
    return folder / "train.ds"


def loader(path: Path) -> Loader:
    return Loader(Corpus.open_tokens(path), tokenizer="gpt2", shuffle=False, workers=0)


@pytest.mark.parametrize(
    ("documents", "window", "rows"),
    [
        ([[1, 2, 3, EOT], []], 4096, [[1, 2, 3, EOT]]),  # every row full
        ([[], [1, 2, 3, EOT], [], []], 4096, [[1, 2, 3, EOT]]),
        ([[1, 2, 3, EOT], [], [4, EOT]], 1, [[1, 2, 3, EOT], [4, EOT, EOT, EOT]]),  # window 1
        ([[5, EOT], [], [6, EOT]], 4096, [[5, EOT, 6, EOT]]),
    ],
)
def test_best_fit_opens_no_row_for_documents_of_no_id(
    tmp_path: Path, documents: list[list[int]], window: int, rows: list[list[int]]
) -> None:
    """No row of padding only: a document of no id has nothing to place."""
    path = datatrove(tmp_path, documents)
    with loader(path).batches(3, 1, packing="bestfit", segments=True, window=window) as it:
        got = [batch.tokens[0].tolist() for batch in it]
        stats = it.stats
    assert sorted(got) == sorted(rows)
    assert stats.padding_ids == 4 * len(rows) - sum(map(len, documents))


def test_best_fit_over_documents_of_no_id_resumes_exactly(tmp_path: Path) -> None:
    documents = [[k, k + 1, EOT] if k % 3 else [] for k in range(1, 40)]
    path = datatrove(tmp_path, documents)
    kw = {"packing": "bestfit", "segments": True, "window": 4}
    with loader(path).batches(5, 2, **kw) as it:
        whole = [b.tokens.tolist() for b in it]
    assert whole and all(any(t != EOT for t in row) for batch in whole for row in batch)
    for stop in range(len(whole)):
        with loader(path).batches(5, 2, **kw) as it:
            first = [next(it).tokens.tolist() for _ in range(stop)]
            state = it.state_dict()
        with loader(path).batches(5, 2, state=state, **kw) as it:
            assert first + [b.tokens.tolist() for b in it] == whole


def test_concat_segments_count_the_documents_a_row_holds(tmp_path: Path) -> None:
    path = datatrove(tmp_path, [[5, 6, EOT], [], [], [7, EOT], [], [8, EOT]])
    with loader(path).batches(4, 1, segments=True) as it:
        batch = next(it)
    assert batch.tokens[0].tolist() == [5, 6, EOT, 7, EOT]
    assert batch.segment_ids[0].tolist() == [1, 1, 1, 2, 2]
