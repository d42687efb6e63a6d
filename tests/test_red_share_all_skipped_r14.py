"""An evened-out share whose every document is damaged, under ``on_error="skip"`` (session 37):
it has none to repeat for its even share. Its rank stops with a ``CorpusError`` that says so
and names the way out (``even=None``), rather than a shorter epoch than the other ranks' (whose
collectives would wait for it for ever); ``even=None`` reads it, counting the skip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, CorpusError, Loader, reshard


def _corpus(tmp_path: Path) -> Corpus:
    """One file of 4 documents, the second damaged: 4 ranks' shares are one slot each."""
    lines = [json.dumps({"text": "d0 " + "x" * 9}), '{"text": 5}', json.dumps({"text": "d2 "
             + "y" * 9}), json.dumps({"text": "d3 " + "z" * 9})]  # fmt: skip
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    return Corpus.open(tmp_path, on_error="skip")


def _options(rank: int, world: int, even: str | None) -> dict[str, Any]:
    return {"rank": rank, "world_size": world, "even": even, "epochs": 2, "shuffle": False,
            "workers": 0, "on_error": "skip"}  # fmt: skip


def _texts(corpus: Corpus, options: dict[str, Any], state: Any = None) -> tuple[list[str], Any]:
    with Loader(corpus, **options).iter(state=state) as it:
        return [d.text.split()[0] for d in it], it.stats


@pytest.mark.parametrize("even", ["drop", "pad"])
def test_a_share_of_one_damaged_document_says_what_to_do(tmp_path: Path, even: str) -> None:
    corpus = _corpus(tmp_path)
    with pytest.raises(CorpusError, match=r"rank 1 read no document in a whole pass over its "
                       r"shard: none to repeat .*read it with even=None"):  # fmt: skip
        _texts(corpus, _options(1, 4, even))
    texts, stats = _texts(corpus, _options(1, 4, None))
    assert (texts, stats.skipped_documents) == ([], 2)


@pytest.mark.parametrize("even", ["drop", "pad"])
def test_a_resharded_share_of_one_damaged_document_says_what_to_do(
    tmp_path: Path, even: str
) -> None:
    """1 rank stops after its first document; 3 new ranks share the rest's 3 slots, one each:
    new rank 2's is the damaged one."""
    corpus = _corpus(tmp_path)
    with Loader(corpus, **_options(0, 1, even)).iter() as it:
        assert next(it).text.startswith("d0")
        states = [json.loads(json.dumps(it.state_dict()))]
    new = reshard(states, 3, even=even)
    assert _texts(corpus, {**_options(0, 3, even), "epochs": 1}, new[0])[0] == ["d2"]
    with pytest.raises(CorpusError, match=r"rank 2 read no document in a whole pass over its "
                       r"share of epoch 0's rest .*read it with even=None"):  # fmt: skip
        _texts(corpus, {**_options(2, 3, even), "epochs": 1}, new[2])
