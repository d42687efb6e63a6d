"""Public objects through pickle and copy (a spawned process, a saved object, ``copy.copy``):
a copy is independent of the original, or refused clearly; errors keep all they say.

Each test fails before session 42's fixes (the red team's findings: a copy sharing a running
pass or a dataset's shared memory, errors losing their notes, refusals saying themselves twice,
a corpus's repr of megabytes).
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest

from openwebtext import Corpus, CorruptDocument, CorruptMember, OpenWebTextLoader, StateError
from openwebtext.stream.turns import InsideNext, OtherThread, OwnNext
from openwebtext.synth import write_corpus
from support import child_pids


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("copies") / "c"
    write_corpus(folder, subsets=2, members=3, docs=5, seed=0)
    return folder


def test_a_reference_loader_pickles_as_what_it_reads_and_never_inside_a_pass(
    corpus: Path,
) -> None:
    loader = OpenWebTextLoader(str(corpus), num_workers=1, random_state=3)
    again = pickle.loads(pickle.dumps(loader))  # (it did not pickle: a lock)
    assert [name for _, (_, name), _ in again] == [name for _, (_, name), _ in loader]
    running = OpenWebTextLoader(str(corpus), num_workers=1, random_state=3)
    next(running)
    with pytest.raises(TypeError, match="inside a pass does not pickle or copy"):
        copy.copy(running)  # (a copy shared the pass: its close ended the original's)
    running.close()
    assert child_pids() == []
    assert len(list(copy.copy(running))) == 30


torch = pytest.importorskip("torch")
from openwebtext.torch import OpenWebTextDataset  # noqa: E402


def test_a_dataset_s_copy_changes_nothing_of_the_original(corpus: Path) -> None:
    dataset = OpenWebTextDataset(corpus, seed=1, workers=0)
    first = [d.name for d in dataset]
    other = copy.copy(dataset)
    other.set_epoch(1)  # (the copy's epoch was the original's shared memory)
    assert [d.name for d in dataset] == first and [d.name for d in other] != first
    running = iter(dataset)
    head = [next(running).name for _ in range(7)]
    state = dataset.state_dict()
    running.close()
    with pytest.raises(TypeError, match="a pass over a dataset does not pickle or copy"):
        copy.copy(iter(dataset))

    def resharded() -> OpenWebTextDataset:
        made = OpenWebTextDataset(corpus, seed=1, workers=0)
        made.load_resharded([state])
        return made

    original = resharded()
    twin = copy.copy(original)
    assert head + [d.name for d in twin] == first
    assert head + [d.name for d in original] == first  # (it read its 7 documents again)
    for copied in (copy.deepcopy(resharded()), pickle.loads(pickle.dumps(resharded()))):
        assert head + [d.name for d in copied] == first  # (both raised: shared memory)


def test_errors_keep_their_notes_through_pickle_and_copy() -> None:
    errors = [CorruptMember("corrupt xz data", "a.tar", "m.xz"),
              CorruptDocument("not UTF-8", "a.tar", "m.xz", "d.txt"),
              StateError("bad state: position: …", "position")]  # fmt: skip
    for error in errors:
        error.in_part("web") if hasattr(error, "in_part") else None
        error.add_note("while reading shard 3 of job 17")
        for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
            assert type(again) is type(error) and str(again) == str(error)
            assert again.__notes__ == ["while reading shard 3 of job 17"]
            assert vars(again) == vars(error)


def test_a_refusal_made_again_says_itself_once() -> None:
    for error in (InsideNext("close()"), InsideNext("next()"), OtherThread("state_dict()"),
                  OwnNext("state_dict()")):  # fmt: skip
        for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
            assert type(again) is type(error) and str(again) == str(error)


def test_a_corpus_s_repr_is_a_summary(corpus: Path) -> None:
    opened = Corpus.open(corpus)
    counted = "counted" if opened.counts is not None else "not counted"
    assert repr(opened) == f"Corpus({len(opened.units)} units of 2 files, {counted})"
