"""A count (for even shares, a torch dataset, a mixture's part) is a second way of reading a
corpus: it had none of the stream's tokenizer, its checks-first order or its part's name
(session 39's red team).

- A token corpus's held-out split needed a count, which read its units without a tokenizer:
  a ``WrongTokenizer`` ("give Options(tokenizer=...)") though one was given, under
  ``world_size > 1`` and in every torch dataset. A token unit's documents are named by their
  index: they are counted from its member's name, never read.
- An error met while counting a mixture's part did not name the part.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader, Mixture
from openwebtext.errors import CorpusError
from openwebtext.prepare import PrepareOptions, prepare
from openwebtext.synth import write_corpus


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the bytes tokenizer (train.bin, val.bin), and the web corpus it was made of."""
    root = tmp_path_factory.mktemp("run")
    write_corpus(root / "src", subsets=1, members=3, docs=4, seed=7)
    prepare(Corpus.open(root / "src"), root / "tok",
            PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.2))  # fmt: skip
    return root


def _ids(tmp_path: Path, run: Path) -> Corpus:
    """train.bin's ids under a name that is no split (split by document index)."""
    shutil.copy(run / "tok" / "train.bin", tmp_path / "tokens.bin")
    return Corpus.open_tokens(tmp_path / "tokens.bin", eot=256, dtype="uint16")


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_held_out_split_of_a_token_file_shards(tmp_path: Path, run: Path, split: str) -> None:
    corpus = _ids(tmp_path, run)
    options = {"workers": 0, "tokenizer": "bytes", "split": split, "val_fraction": 0.2,
               "shuffle": False}  # fmt: skip
    whole = [d.tokens.tolist() for d in Loader(corpus, **options)]  # type: ignore[arg-type]
    shares = [[d.tokens.tolist() for d in Loader(corpus, rank=r, world_size=2, even=None,
                                                  **options)]  # type: ignore[arg-type]
              for r in range(2)]  # fmt: skip
    assert whole and sorted(shares[0] + shares[1]) == sorted(whole)


def test_a_torch_dataset_of_a_token_file_s_held_out_split(tmp_path: Path, run: Path) -> None:
    pytest.importorskip("torch")
    from openwebtext.torch import OpenWebTextDataset

    dataset = OpenWebTextDataset(_ids(tmp_path, run), workers=0, tokenizer="bytes",
                                 split="train", val_fraction=0.2)  # fmt: skip
    assert len(list(dataset)) > 0


def test_a_split_of_a_part_named_as_a_split_is_refused_naming_it_when_sharded(
    run: Path
) -> None:  # fmt: skip
    mixture = Mixture({"web": Corpus.open(run / "src"),
                       "ids": Corpus.open_tokens(run / "tok" / "train.bin")})  # fmt: skip
    with pytest.raises(ValueError, match=r"^part 'ids': split='train' of .*train\.bin"):
        list(Loader(mixture, workers=0, tokenizer="bytes", split="train", rank=0, world_size=2,
                    epochs=1))  # fmt: skip


def test_an_error_met_counting_a_part_names_the_part(tmp_path: Path, run: Path) -> None:
    web = Path(shutil.copytree(run / "src", tmp_path / "web"))
    tar = web / "urlsf_subset00.tar"
    unit = Corpus.open(web).units[1]
    with open(tar, "r+b") as f:
        f.seek(unit.offset + unit.size // 2)
        f.write(b"\xff" * 16)
    mixture = Mixture({"web": Corpus.open(web),
                       "ids": Corpus.open_tokens(run / "tok" / "val.bin")})  # fmt: skip
    with pytest.raises(CorpusError, match=r"^part 'web': .*cannot count documents") as caught:
        list(Loader(mixture, workers=0, tokenizer="bytes", rank=0, world_size=2, epochs=1))
    assert caught.value.part == "web"
