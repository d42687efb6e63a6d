"""What a red team (session 31) found in mixtures: a part whose share is empty was said as a
part of no id; a resumed best-fit mixture's stats were not the uninterrupted run's.

Best fit read the window after the one being handed out paced by the batches handed out since
the last window was packed, which no state holds: a resumed run counted them from where it
resumed, so it asked for the next run of 256 documents later than the uninterrupted run (after
batch 64: 256 documents read against 512), and after the first window, where the next window
was packed ahead of its turn, at once. Batches and states were the same; ``stats`` differed
(docs/mixtures.md: "a resumed run's stats at a batch are the uninterrupted run's")."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, Mixture
from openwebtext.errors import CorpusError
from tables_support import sample_texts, write_jsonl


@pytest.mark.parametrize("tokenizer", ["bytes", None])
def test_a_part_whose_share_is_empty_is_said_as_no_document(
    tmp_path: Path, tokenizer: str | None
) -> None:
    """With a tokenizer, an epoch of no document was said as "documents of no id … by tokens
    it would be chosen for ever", of a mixture by documents."""
    write_jsonl(tmp_path / "a" / "a.jsonl", sample_texts(40))
    write_jsonl(tmp_path / "c" / "c.jsonl", sample_texts(3))  # (no document for rank 0 of 4)
    mixture = Mixture({"a": str(tmp_path / "a"), "c": str(tmp_path / "c")}, by="documents")
    loader = Loader(mixture, workers=0, seed=0, rank=0, world_size=4, even=None,
                    tokenizer=tokenizer)  # fmt: skip
    said = r"part 'c': .*epoch 0 yielded no document \(rank 0 of world_size 4\): a mixture reads"
    with pytest.raises(CorpusError, match=said) as info, loader.iter() as documents:
        for _ in range(20):
            next(documents)
    assert "no id" not in str(info.value)


def _texts(folder: Path, documents: int, seed: int) -> str:
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    with open(folder / "x.jsonl", "w") as f:
        for _ in range(documents):
            text = "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(20, 400)))
            f.write(json.dumps({"text": text}) + "\n")
    return str(folder)


@pytest.fixture(scope="module")
def mixture(tmp_path_factory: pytest.TempPathFactory) -> Mixture:
    folder = tmp_path_factory.mktemp("mix")
    return Mixture({"a": _texts(folder / "a", 700, 1), "b": _texts(folder / "b", 300, 2)})


def _said(it: Any) -> tuple[Any, ...]:
    s = it.stats
    return (s.documents, {k: v.documents for k, v in s.parts.items()}, dict(s.epochs), s.tokens)


@pytest.mark.parametrize("window", [256, 300])
def test_resumed_mixture_bestfit_stats_are_the_uninterrupted_runs(
    mixture: Mixture, window: int
) -> None:
    loader = Loader(mixture, workers=0, seed=3, tokenizer="bytes", epochs=None)
    kw: Any = {"seq_len": 63, "batch_size": 4, "packing": "bestfit", "window": window}
    n = 600
    whole, states, batches = [], [], []
    with loader.batches(**kw) as it:
        for _ in range(n):
            batches.append(hashlib.md5(next(it).tobytes()).hexdigest())
            whole.append(_said(it))
            states.append(json.loads(json.dumps(it.state_dict())))
    # 30: inside the first window (resumed, it read its next run 64 batches late); 100, 250,
    # 400: later windows, the next one packed ahead (resumed, it had read less at once)
    for stop in (30, 100, 250, 400):
        with loader.batches(state=states[stop - 1], **kw) as it:
            for i in range(stop, n):
                assert hashlib.md5(next(it).tobytes()).hexdigest() == batches[i], (stop, i + 1)
                assert _said(it) == whole[i], f"resumed after batch {stop}, at batch {i + 1}"
