"""A mixture of input kinds (session 38's red team): the loader's held-out ``split`` was
applied to a token file's documents by a hash of their index in the file, ``train.bin`` too,
a split already (``owt tokenize`` held its documents out by their names when it wrote it):
``split="train"`` silently left 2 of train.bin's 20 documents out, and ``split="val"`` handed
train documents out as held-out data, alone or as a mixture's part (where the loader's split
applies to every part). A file of ids named as a split (train, val) is refused a held-out
split now, naming the file (and the part); other token files are still split by index
(``test_seeded_survivors_r7.py``, ``_r11.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_held_out_split_of_a_token_corpus_is_refused(token_run: Path, split: str) -> None:
    tokens = Corpus.open_tokens(token_run / "train.bin")
    said = rf"split='{split}' of .*train\.bin: a file of ids named train or val is one split"
    with pytest.raises(ValueError, match=said):
        Loader(tokens, tokenizer="bytes", workers=0, split=split).iter()


def test_a_mixture_names_its_token_part_and_reads_it_whole_when_told(
    token_run: Path, small_corpus: Path
) -> None:
    tokens = Corpus.open_tokens(token_run / "train.bin")
    with Loader(tokens, tokenizer="bytes", workers=0, epochs=1).iter() as it:
        every = sorted(d.name for d in it)
    parts = {"web": Corpus.open(small_corpus), "ids": tokens}
    loader = Loader(Mixture(parts), tokenizer="bytes", workers=0, split="train", epochs=1)
    with pytest.raises(ValueError, match=r"^part 'ids': split='train' of "):
        loader.iter()
    whole = Mixture(parts, options={"ids": {"split": "all"}})
    with Loader(whole, tokenizer="bytes", workers=0, split="train", epochs=1).iter() as it:
        got = sorted(d.name for d in it if d.source == "ids")
    assert set(got) == set(every) and len(got) >= len(every)  # (a part reads on: endless)


@pytest.mark.parametrize(("name", "refused"), [
    ("fineweb_val_000000.bin", True), ("tiny_shakespeare_val.bin", True),  # (llm.c's own)
    ("train-00001.bin", True), ("TRAIN.bin", True), ("train_000001.bin", True),
    ("training.bin", False), ("interval.bin", False), ("ids.bin", False),  # (split by index)
])  # fmt: skip
def test_a_file_of_ids_named_as_a_split_is_refused_a_held_out_split(
    tmp_path: Path, name: str, refused: bool
) -> None:
    """The reviewer's find: the name was matched at its start only (llm.c's own shards,
    ``fineweb_val_000000.bin``, were split again)."""
    (tmp_path / name).write_bytes(np.array([[k + 1, 256] for k in range(20)], "<u2").tobytes())
    loader = Loader(Corpus.open_tokens(tmp_path / name, eot=256), tokenizer="bytes", workers=0,
                    split="val", val_fraction=0.3, epochs=1)  # fmt: skip
    if refused:
        with pytest.raises(ValueError, match=rf"split='val' of .*{re.escape(name)}: a file"):
            loader.iter()
    else:
        with loader.iter() as it:
            assert 0 < sum(1 for _ in it) < 20
