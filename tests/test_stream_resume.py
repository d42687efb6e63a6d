"""Exact resume: any cut, any worker count, across blocks and epochs; states are checked.

Every stateful thing (documents, token documents, batches, the PyTorch dataset)
goes through the one checker of ``resumable.py``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, get_args, get_type_hints

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openwebtext import Loader, Options, StateError
from openwebtext.options import SHAPING
from openwebtext.stream import resume_options
from openwebtext.stream.counters import Counters
from resumable import Start, check_save_load
from resumable import run as run_subject


def documents(loader: Loader) -> Start:
    """The document iterator of ``loader`` as a resume subject."""
    return lambda state, epochs: loader.replace(epochs=epochs).iter(state=state)


def batches(loader: Loader, seq_len: int, batch_size: int) -> Start:
    """``loader.batches`` as a resume subject."""
    return lambda state, epochs: loader.replace(epochs=epochs).batches(
        seq_len, batch_size, state=state
    )


class DatasetRun:
    """One iteration of an ``OpenWebTextDataset``, as a resume subject runs it."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self._docs = iter(dataset)

    def __iter__(self) -> Any:
        return self._docs

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = self.dataset.state_dict()
        return state

    def close(self) -> None:
        self._docs.close()  # type: ignore[attr-defined]


def dataset(corpus: Path, options: Options) -> Start:
    """``openwebtext.torch.OpenWebTextDataset`` (without a DataLoader) as a resume subject."""
    from openwebtext.torch import OpenWebTextDataset

    def start(state: dict[str, Any] | None, epochs: int) -> DatasetRun:
        data = OpenWebTextDataset(corpus, replace(options, epochs=epochs))
        if state is not None:
            data.load_state_dict(state)
        return DatasetRun(data)

    return start


def name(doc: Any) -> str:
    return str(doc.name)


def name_and_ids(doc: Any) -> tuple[str, list[int]]:
    return doc.name, doc.tokens.tolist()


def as_list(batch: np.ndarray[Any, Any]) -> list[list[int]]:
    rows: list[list[int]] = batch.tolist()
    return rows


def run(
    loader: Loader, state: dict[str, Any] | None = None, n: int | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Up to ``n`` document names from ``loader`` (resumed from ``state``), and the state after."""
    return run_subject(lambda saved, _: loader.iter(state=saved), state, 0, n, name)


@pytest.mark.parametrize(
    ("options", "workers_after"),
    [
        pytest.param({"seed": 1, "shuffle_buffer": 30}, None, id="blocks-of-2-units"),
        pytest.param({"seed": 2, "shuffle_buffer": 50, "workers": 1}, 0, id="workers-1-then-0"),
        pytest.param({"seed": 3, "shuffle_buffer": 25, "workers": 0}, 2, id="workers-0-then-2"),
        pytest.param({"shuffle": False}, None, id="corpus-order"),
        pytest.param({"seed": 4, "shuffle_buffer": 0}, None, id="units-shuffled-only"),
        pytest.param({"seed": 5, "shuffle_buffer": 1000}, None, id="one-block"),
        pytest.param(
            {"seed": 6, "split": "val", "val_fraction": 0.2, "val_seed": 7}, None, id="split-val"
        ),
    ],
)
def test_documents_resume_exactly(
    small_corpus: Path, options: dict[str, Any], workers_after: int | None
) -> None:
    loader = Loader(small_corpus, **{"workers": 0, **options})
    resumed = None if workers_after is None else documents(loader.replace(workers=workers_after))
    check_save_load(documents(loader), key=name, resumed=resumed)


VAL = {"val_fraction": 0.2, "val_seed": 7}  # counted in the ``indexed`` corpus


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"world_size": 4, "rank": 1, "even": "drop"}, id="drop"),
        pytest.param({"world_size": 4, "rank": 3, "even": "pad"}, id="pad"),
        pytest.param({"world_size": 3, "rank": 2, "even": "pad", "split": "train", **VAL},
                     id="pad-train"),
        pytest.param({"world_size": 2, "rank": 1, "even": "drop", "split": "val", **VAL},
                     id="drop-val"),
    ],
)  # fmt: skip
def test_evened_out_ranks_resume_exactly(indexed: Path, options: dict[str, Any]) -> None:
    loader = Loader(indexed, workers=0, seed=5, shuffle_buffer=30, **options)
    check_save_load(documents(loader), key=name)


def test_token_documents_resume_exactly(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=0, seed=2, shuffle_buffer=30, tokenizer="bytes")
    whole = check_save_load(documents(loader), key=name_and_ids)
    text = [d.text for d in loader.replace(tokenizer=None, epochs=2)]
    assert [ids for _, ids in whole] == [[*t.encode(), 256] for t in text]


@pytest.mark.parametrize(
    ("options", "seq_len", "batch_size", "workers_after"),
    [
        pytest.param({"workers": 0}, 300, 2, 2, id="workers-0-then-2"),
        pytest.param({"shuffle": False}, 61, 3, None, id="short-rows"),
        pytest.param({"split": "val", **VAL}, 100, 1, None, id="split-val"),
    ],
)
def test_batches_resume_exactly(
    small_corpus: Path,
    options: dict[str, Any],
    seq_len: int,
    batch_size: int,
    workers_after: int | None,
) -> None:
    loader = Loader(
        small_corpus,
        **{"workers": 0, "seed": 4, "shuffle_buffer": 30, "tokenizer": "bytes", **options},
    )
    after = None if workers_after is None else loader.replace(workers=workers_after)
    check_save_load(
        batches(loader, seq_len, batch_size),
        key=as_list,
        resumed=None if after is None else batches(after, seq_len, batch_size),
    )


def test_gpt2_batches_resume_exactly(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=0, seed=4, shuffle_buffer=30, tokenizer="gpt2")
    check_save_load(
        batches(loader, 64, 2),
        key=as_list,
        cuts=lambda first, whole: [0, 1, first // 2, first, whole - 1],
    )


def test_evened_out_batches_resume_exactly(indexed: Path) -> None:
    loader = Loader(indexed, workers=0, seed=5, shuffle_buffer=30, tokenizer="bytes",
                    world_size=3, rank=1, even="pad")  # fmt: skip
    check_save_load(batches(loader, 200, 2), key=as_list)


@pytest.mark.parametrize("workers_after", [None, 1])
def test_the_pytorch_dataset_resumes_exactly(indexed: Path, workers_after: int | None) -> None:
    pytest.importorskip("torch")
    options = Options(workers=0, seed=3, shuffle_buffer=30)
    after = None if workers_after is None else replace(options, workers=workers_after)
    check_save_load(
        dataset(indexed, options),
        key=name,
        resumed=None if after is None else dataset(indexed, after),
    )


def test_resume_at_every_seventh_position(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=0, seed=1, shuffle_buffer=30)
    check_save_load(documents(loader), key=name, cuts=lambda _, whole: range(0, whole + 1, 7))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cuts=st.lists(st.integers(1, 240), min_size=1, max_size=3),
    workers=st.sampled_from([0, 1, 3]),
    workers_after=st.sampled_from([0, 2]),
    shuffle_buffer=st.sampled_from([0, 1, 25, 70, 1000]),
    epoch=st.integers(0, 3),
    shuffle=st.booleans(),
)
def test_resume_equals_uninterrupted(
    small_corpus: Path,
    cuts: list[int],
    workers: int,
    workers_after: int,
    shuffle_buffer: int,
    epoch: int,
    shuffle: bool,
) -> None:
    loader = Loader(
        small_corpus,
        workers=workers,
        seed=11,
        shuffle=shuffle,
        shuffle_buffer=shuffle_buffer,
        epoch=epoch,
    )
    check_save_load(
        documents(loader),
        key=name,
        resumed=documents(loader.replace(workers=workers_after)),
        cuts=lambda _, whole: sorted({min(cut, whole) for cut in cuts}),
    )


def test_a_finished_state_resumes_with_more_epochs(small_corpus: Path) -> None:
    """Saved at the end of a 1-epoch run, resumed with 2 epochs: the uninterrupted 2-epoch run."""
    loader = Loader(small_corpus, workers=0, seed=8, shuffle_buffer=30, tokenizer="bytes")
    for subject, key in ((documents(loader), name), (batches(loader, 90, 2), as_list)):
        first, finished = run_subject(subject, None, 1, key=key)
        rest, _ = run_subject(subject, finished, 2, key=key)
        whole, _ = run_subject(subject, None, 2, key=key)
        assert first and rest
        assert first + rest == whole


def test_two_epochs_differ_and_cover(small_corpus: Path, small_docs: dict[str, str]) -> None:
    both, _ = run(Loader(small_corpus, seed=2, epochs=2))
    first, second = both[:120], both[120:]
    assert sorted(first) == sorted(second) == sorted(small_docs)
    assert first != second
    assert run(Loader(small_corpus, seed=2, epoch=1))[0] == second


def test_endless_epochs(small_corpus: Path) -> None:
    names, state = run(Loader(small_corpus, seed=2, epochs=None), n=1000)
    assert len(names) == 1000
    assert state["position"]["epoch"] == 8  # 1000 // 120


def test_resume_does_not_reread_finished_units(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=1, seed=4, shuffle_buffer=30)
    _, state = run(loader, n=100)
    assert state["position"] == {"epoch": 0, "block": 4, "in_block": 20}
    with loader.iter(state=state) as it:
        rest = list(it)
        # Blocks are 2 units (40 documents >= 30): only the cut block's units 4 and 5 are read.
        assert it.stats.units - state["counters"].get("units", 0) == 2
    assert len(rest) == 20


def test_state_is_small_versioned_json(small_corpus: Path) -> None:
    _, state = run(Loader(small_corpus, seed=4), n=10)
    assert state["format"] == "openwebtext-state/2"
    assert len(json.dumps(state)) < 2000
    assert state["counters"]["documents"] == 10
    # Saved states of format 1 carry exactly these keys: renaming one breaks them.
    assert set(state) == {"format", "config", "position", "counters", "until"}
    assert set(state["position"]) == {"epoch", "block", "in_block"}
    # Counters at 0 are left out (a mixture's state holds one set per part): these are not.
    assert set(state["counters"]) == {"documents", "text_bytes", "epoch_documents", "units"}
    assert set(Counters.__struct_fields__) == {
        "documents", "text_bytes", "epoch_documents", "units", "skipped_members",
        "skipped_documents", "replaced_documents", "tokens", "partial_members",
        "repeated_documents", "dropped_documents",
    }  # fmt: skip
    assert set(state["config"]) == {
        "corpus", "units", "shuffle", "seed", "shuffle_buffer", "rank", "world_size", "even",
        "split", "val_fraction", "val_seed", "max_document_bytes", "decode_errors", "tokenizer",
    }  # fmt: skip


#: Options that may change between runs of one stream, and why. Every option is either
#: here or in ``SHAPING``: a shaping option dropped from that list fails this file.
NOT_SHAPING = {
    "workers": "the worker count never changes the stream",
    "prefetch": "read-ahead only",
    "timeout": "how long a silent worker may take",
    "max_member_bytes": "a limit on members read, not on documents kept",
    "on_error": "a clean stream has nothing to skip; a state counts what was skipped",
    "max_errors": "likewise",
    "epoch": "where a fresh run starts; a state carries its own epoch",
    "epochs": "how far a run goes, not what comes",
    "take": "how far a run goes, not what comes",
    "tokenizer": "saved as the vocabulary's fingerprint (tested apart)",
}

#: Every shaping option differs from its default here, so that a test can tell them apart.
SHAPED = Options(
    workers=0,
    seed=4,
    shuffle_buffer=30,
    world_size=2,
    rank=0,
    even=None,
    split="train",
    max_document_bytes=1 << 20,
    decode_errors="replace",
    **VAL,
)


def other_value(name: str, value: Any) -> Any:
    """A valid value of option ``name`` other than ``value``."""
    if name == "even":
        return "pad" if value != "pad" else None
    if isinstance(value, bool) or value is None:
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2
    choices = get_args(get_type_hints(Options)[name])
    return next(choice for choice in choices if choice != value)


def test_every_option_shapes_the_stream_or_says_why_not() -> None:
    names = {f.name for f in fields(Options)}
    assert set(SHAPING) & set(NOT_SHAPING) == set()
    assert names - set(SHAPING) - set(NOT_SHAPING) == set(), "neither shaping nor harmless"
    assert set(NOT_SHAPING) - names == set()


@pytest.mark.parametrize("option", SHAPING)
def test_resume_with_another_shaping_option_is_refused(indexed: Path, option: str) -> None:
    loader = Loader(indexed, SHAPED)
    _, state = run(loader, n=10)
    changed = loader.replace(**{option: other_value(option, getattr(SHAPED, option))})
    with pytest.raises(StateError, match=rf"\b{option}: saved .*, now.*to resume it, pass .*"):
        changed.iter(state=state)
    loader.iter(state=state).close()  # the same options resume


def test_a_state_that_does_not_fit_is_refused_before_counting(
    indexed: Path, small_corpus: Path, tmp_path: Path
) -> None:
    # Sharding counts every member first (a long read of a big corpus): a state saved
    # under other options must be refused at once, not after the count.
    _, state = run(Loader(indexed, SHAPED), n=10)  # the counted copy: the same fingerprint
    corpus = shutil.copytree(small_corpus, tmp_path / "c")  # not counted
    evened = Loader(corpus, SHAPED).replace(even="drop")
    with pytest.raises(StateError, match=r"even: saved None, now 'drop'.*pass even=None"):
        evened.iter(state=state)
    assert not list(Path(corpus).glob(".owt-counts-*"))  # nothing was counted


# (``epoch``: a state before the run's first epoch is refused, test_resume_past_run.py)
@pytest.mark.parametrize("option", sorted(set(NOT_SHAPING) - {"tokenizer", "epoch"}))
def test_resume_with_another_harmless_option_gives_the_same_documents(
    indexed: Path, option: str
) -> None:
    loader = Loader(indexed, SHAPED)
    _, state = run(loader, n=10)
    rest, _ = run(loader, state)
    value = getattr(SHAPED, option)
    changed = {"on_error": "skip", "max_errors": 3, "epochs": 2, "take": 5}.get(
        option, other_value(option, value)
    )
    other, _ = run(loader.replace(**{option: changed}), state)
    assert other and rest
    n = min(len(rest), len(other))
    assert other[:n] == rest[:n]


def test_the_even_rule_is_refused_only_while_there_are_shares(indexed: Path) -> None:
    loader = Loader(indexed, SHAPED, even="drop")
    _, state = run(loader, n=5)
    with pytest.raises(StateError, match="even: saved 'drop', now 'pad'"):
        loader.replace(even="pad").iter(state=state)
    one = replace(SHAPED, world_size=1, even="drop")  # one share is even by itself
    _, alone = run(Loader(indexed, one), n=5)
    assert alone["config"]["even"] is None
    Loader(indexed, one, even="pad").iter(state=alone).close()


def test_resume_options_take_the_shaping_options_from_the_state(indexed: Path) -> None:
    """What ``owt stream --resume`` does: shaping options not given again come from the state."""
    saved = replace(SHAPED, even="pad", workers=2)
    _, state = run(Loader(indexed, saved), n=5)
    options = resume_options({"workers": 1, "take": 3}, state)
    assert {n: getattr(options, n) for n in SHAPING} == {n: getattr(saved, n) for n in SHAPING}
    assert (options.even, options.workers, options.take) == ("pad", 1, 3)
    assert resume_options({"seed": 9}, state).seed == 9  # given again: refused on resume
    assert resume_options({}, None) == Options()
    unevened = resume_options({}, run(Loader(indexed, SHAPED), n=5)[1])
    assert unevened.even is None and unevened.even_mode is None


def test_resume_with_other_corpus_is_refused(small_corpus: Path, tmp_path: Path) -> None:
    from openwebtext.synth import write_corpus

    write_corpus(tmp_path / "other", subsets=1, members=2, docs=5, seed=9, workers=1)
    _, state = run(Loader(small_corpus), n=3)
    with pytest.raises(StateError, match="corpus: saved"):
        Loader(tmp_path / "other").iter(state=state)
    with pytest.raises(StateError, match="bad state: format: not 'openwebtext-state/2'"):
        Loader(small_corpus).iter(state={"position": 3})


def test_changing_only_workers_gives_the_same_stream(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=1, seed=6, shuffle_buffer=40)
    head, state = run(loader, n=50)
    rest, _ = run(loader.replace(workers=4, prefetch=1), state)
    assert head + rest == run(loader)[0]


def test_a_mark_expands_later_to_the_state_of_its_moment(small_corpus: Path) -> None:
    """``mark()`` is cheap; ``state_dict(mark)`` must equal the state taken when it was made."""
    with Loader(small_corpus, workers=2, seed=6, shuffle_buffer=30).iter() as it:
        taken = []
        for _ in range(70):  # across block boundaries (blocks of 40 documents here)
            taken.append((it.mark(), it.state_dict()))
            next(it)
        for mark, state in taken:
            assert it.state_dict(mark) == state
        assert taken[0][1]["position"] != taken[45][1]["position"]
