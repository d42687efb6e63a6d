"""A mixture's mark copied (session 36): the changes of weights it holds are a chain of links
(``mixschema.Pending``), which ``pickle`` and ``copy.deepcopy`` walked link by link, so a mark
before ~1,000 ``set_weights`` raised ``RecursionError``. A chain is copied as its changes."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

from openwebtext import Loader, Mixture
from openwebtext.synth import write_corpus


def test_a_mark_before_thousands_of_changes_of_weights_copies(
    tmp_path: Path, small_corpus: Path
) -> None:
    other = tmp_path / "b"
    write_corpus(other, subsets=1, members=2, docs=10, seed=1, workers=1)
    mixture = Mixture({"a": small_corpus, "b": other}, {"a": 0.5, "b": 0.5})
    with Loader(mixture, workers=0, seed=0, epochs=None).iter() as docs:
        for _ in range(3):
            next(docs)
        mark = docs.mark()
        for n in range(3000):  # (each a document later: the mark holds them all)
            docs.set_weights({"a": 0.3 if n % 2 else 0.7, "b": 0.7 if n % 2 else 0.3})
            next(docs)
        state = docs.state_dict(mark)
        for copied in (pickle.loads(pickle.dumps(mark)), copy.deepcopy(mark)):
            assert docs.state_dict(copied) == state
    assert [c["at"] for c in state["changes"]] == list(range(3, 3003))
