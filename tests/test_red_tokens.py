"""What a red team of token files found beside the mixtures (issue 39's promise: a clear
error naming the file)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, CorpusError, Loader


def test_a_datatrove_ds_without_its_index_is_an_error_naming_it(tmp_path: Path) -> None:
    """A ``.ds`` copied without its ``.ds.index`` was a bare FileNotFoundError from numpy
    (not a CorpusError: ``except CorpusError`` and the commands' error line missed it)."""
    ids = np.array([1, 2, 256, 3, 256], "<u2")
    ids.tofile(tmp_path / "train.ds")
    with pytest.raises(CorpusError, match=r"train\.ds\.index beside it: it is missing") as raised:
        Corpus.open_tokens(tmp_path / "train.ds", eot=256)
    assert raised.value.path == str(tmp_path / "train.ds")
    (tmp_path / "train.ds.index").write_bytes(np.array([3, 5], "<u8").tobytes())
    corpus = Corpus.open_tokens(tmp_path / "train.ds", eot=256)
    with Loader(corpus, workers=0, shuffle=False, tokenizer="bytes").iter() as it:
        assert [d.tokens.tolist() for d in it] == [[1, 2, 256], [3, 256]]


@pytest.mark.parametrize("name", ["train.bin", "train.ds"])
def test_a_token_file_given_as_a_corpus_path_says_how_to_open_it(tmp_path: Path, name: str) -> None:
    """``Corpus.open`` (and so ``Loader(path)`` and a ``Mixture``'s paths) reads text corpora
    only: a ``train.bin`` given there says where token files are opened."""
    from openwebtext import Mixture, UnknownFormat

    np.array([1, 2, 256], "<u2").tofile(tmp_path / name)
    with pytest.raises(UnknownFormat, match=r"opened with Corpus\.open_tokens") as raised:
        Mixture({"ids": str(tmp_path / name)})
    assert raised.value.path == str(tmp_path / name)
