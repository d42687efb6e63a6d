"""Red team of hand-edited states whose every field has the right type (session 17): one test
per defect class found (each fails on b54869a, its docstring says what was wrong). The
fields that only disagree with each other are cases of
``test_stream_schema.py::test_fields_that_disagree_name_their_record``; these need the run's
other ranks, the corpus's counts or its documents."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, Mixture, StateError, reshard
from tables_support import sample_texts, write_jsonl


@pytest.fixture
def js(tmp_path: Path) -> str:
    """30 JSON lines, not counted (a fresh folder each test: no counts file beside it)."""
    write_jsonl(tmp_path / "js" / "a.jsonl", sample_texts(30, seed=2))
    return str(tmp_path / "js")


def _opts(rank: int = 0, world: int = 1, **extra: Any) -> dict[str, Any]:
    return {"workers": 0, "seed": 3, "rank": rank, "world_size": world, "even": None,
            "epochs": None, **extra}  # fmt: skip


def _state(corpus: str | Mixture, n: int, **opts: Any) -> dict[str, Any]:
    with Loader(corpus, **opts).iter() as it:
        for _ in range(n):
            next(it)
        return json.loads(json.dumps(it.state_dict()))


def test_old_ranks_epochs_no_run_made_are_refused_at_once(js: str) -> None:
    """An old rank's ``position.epoch`` edited far ahead of the others' (10**9): ``reshard``
    built a section per epoch between them and never returned (2 s at 10**5). A rank can be
    ahead only by the epochs it handed documents out in (an endless stream hands one out each
    epoch, or says the epoch yielded none)."""
    states = [_state(js, 20, **_opts(0, 2)), _state(js, 40, **_opts(1, 2))]
    assert [s["position"]["epoch"] for s in states] == [1, 2]
    assert len(reshard(states, 3)) == 3  # genuine: a rank an epoch ahead of the other
    states[0]["position"]["epoch"] = 10**9
    began = time.monotonic()
    with pytest.raises(StateError, match=r"old rank 0 is at epoch 1000000000, 999999998 past") as e:
        reshard(states, 3)
    assert e.value.field == "position.epoch"
    assert time.monotonic() - began < 5


def test_an_old_rank_an_epoch_ahead_with_nothing_handed_out_before_it_is_refused(js: str) -> None:
    """An old rank's ``position.epoch`` edited 0 -> 1 (its 10 documents all of its epoch): the
    bound counted the documents of the epoch it is in as of epochs passed, so ``reshard`` took
    it as having finished epoch 0, and 51 documents of the rest were lost."""
    states = [_state(js, 6, **_opts(0, 2)), _state(js, 9, **_opts(1, 2))]
    assert states[0]["position"]["in_block"] and states[0]["position"]["epoch"] == 0
    assert len(reshard(states, 3)) == 3
    states[0]["position"]["epoch"] = 1
    with pytest.raises(StateError, match=r"old rank 0 is at epoch 1, 1 past the earliest rank's, "
                       r"having handed out 0 documents before it") as caught:  # fmt: skip
        reshard(states, 3)
    assert caught.value.field == "position.epoch"


def test_a_concat_cut_past_its_document_s_end_is_refused(js: str) -> None:
    """An old rank's concat ``offset`` edited to 10**9: resumed as it is, refused; resharded,
    the new rank whose share began with the cut document skipped the rest of it and went on
    with the next one's ids, without a word. Now ``reshard`` refuses it (the ids of the
    documents before it and it are not those of the batches out: ``BatchesState.check``); a
    resharded section's cut edited so is refused by the rank whose share begins with it."""
    opts = _opts(tokenizer="bytes")
    states = []
    for rank, n in enumerate((5, 9)):
        with Loader(js, **{**opts, "rank": rank, "world_size": 2}).batches(64, 2) as batches:
            for _ in range(n):
                next(batches)
            states.append(json.loads(json.dumps(batches.state_dict())))
    assert states[0]["offset"] > 0  # the next batch begins inside a document
    with pytest.raises(StateError, match=r"^state 0: bad batches state: offset: is 1000000000"):
        reshard([{**states[0], "offset": 10**9}, states[1]], 3)
    refused = []
    for rank, state in enumerate(reshard(states, 3)):
        state["documents"]["reshard"]["ranks"][0]["cut"] = 10**9 + 1
        with Loader(js, **{**opts, "rank": rank, "world_size": 3}).batches(64, 2, state=state) as b:
            try:
                for _ in range(3):
                    next(b)
            except StateError as exc:
                refused.append((rank, exc.field, str(exc)))
    assert len(refused) == 1, refused
    assert refused[0][1] == "reshard"
    assert "a cut of 1000000000 ids lies past the end of the document it is in" in refused[0][2]


def test_one_share_s_position_is_checked_against_the_corpus_s_counts(js: str) -> None:
    """At world size 1 the stream reads no counts, so nothing checked a position against its
    counters: ``in_block`` edited one back handed a document out twice. Once the corpus is
    counted (here by a run on two ranks), the one share is checked as every share is."""
    Loader(js, **_opts(0, 2, even="drop")).iter().close()  # counts it (beside the corpus)
    state = _state(js, 10, **_opts())
    state["position"]["in_block"] -= 1
    said = r"in_block=9 does not agree with counters\.epoch_documents=10: 10 documents into"
    with pytest.raises(StateError, match=said):
        Loader(js, **_opts()).iter(state=state)  # (where it enters: no next() needed)


def test_an_uncounted_share_s_first_block_is_checked_against_the_epoch_s_count(js: str) -> None:
    """Not counted, nothing checked an uncounted share's position against its counters: in
    its first block, what the epoch handed out is what the block did (``in_block`` edited back
    handed documents out twice). Past the first block only a block's size is checked."""
    state = _state(js, 3, **_opts(shuffle_buffer=8))
    assert state["position"].get("block", 0) == 0 and state["position"]["in_block"] == 3
    state["position"]["in_block"] = 0
    with pytest.raises(StateError, match=r"position\.in_block: 0 in the share's first block, "
                       r"whose epoch handed out 3") as caught:  # fmt: skip
        Loader(js, **_opts(shuffle_buffer=8)).iter(state=state)
    assert caught.value.field == "position.in_block"
    assert not list(Path(js).glob(".owt-counts-*"))  # (checked without counting the corpus)


def test_every_part_and_every_later_epoch_is_checked_where_the_state_enters(js: str) -> None:
    """A mixture's part was checked when it was first read (the 11th document of a run on
    random turns), a later epoch's rest when that epoch began (after 22 documents): a job
    resumed from an edited state failed hours in. Both are checked where the state enters."""
    other = Path(js).parent / "other"
    write_jsonl(other / "a.jsonl", sample_texts(20, seed=5))
    mixture = Mixture({"a": js, "b": str(other)}, {"a": 0.5, "b": 0.5}, sampling="random")
    state = _state(mixture, 20, **_opts(1, 2, even="drop"))
    assert state["parts"]["b"]["position"]["in_block"] > 0
    state["parts"]["b"]["position"]["in_block"] -= 1
    with pytest.raises(StateError, match=r"does not agree with counters\.epoch_documents"):
        Loader(mixture, **_opts(1, 2, even="drop")).iter(state=state)
    states = [_state(js, n, **_opts(r, 3, even="drop")) for r, n in enumerate((3, 12, 25))]
    section = reshard(states, 2)[0]
    later = section["reshard"]["later"][1]["ranks"][2]
    assert later == {"block": 0, "in_block": 5, "handed": 5}  # old rank 2 in its epoch 2
    later["in_block"] -= 1
    with pytest.raises(StateError, match=r"does not agree .* old rank 2's share of epoch 2"):
        Loader(js, **_opts(0, 2, even="drop")).iter(state=section)


def test_a_state_at_an_epoch_s_end_goes_on_into_the_next_epoch(js: str) -> None:
    """A state at its epoch's end whose ``epoch_documents`` says 0 (edited): the stream raised
    ``CorpusError`` "epoch 0 yielded no document", blaming a healthy corpus for an epoch it
    had not read. In epoch 0 no document came before, so ``epoch_documents`` is ``documents``:
    the edit is refused, naming the counters, and the genuine state goes on."""
    state = _state(js, 30, **_opts())
    assert state["position"] == {"epoch": 0, "block": 1, "in_block": 0}
    with Loader(js, **_opts()).iter(state=state) as it:
        assert len([next(it).name for _ in range(5)]) == 5
    state["counters"]["epoch_documents"] = 0
    with pytest.raises(StateError, match="epoch_documents=0 is not documents=30") as caught:
        Loader(js, **_opts()).iter(state=state)
    assert caught.value.field == "counters"


@pytest.mark.parametrize(("field", "value"), [("window_number", 10**6), ("window_number", 2),
                                              ("window_epoch", 3)])  # fmt: skip
def test_a_best_fit_window_its_documents_cannot_hold_is_refused(
    js: str, field: str, value: int
) -> None:
    """A corpus's best-fit ``window_number`` (or its epoch) edited: the window was packed again
    in another seeded order and its first rows skipped (rows doubled and others lost). The
    windows before the one the state is in hold 1 to ``window`` documents each: a number those
    handed out cannot make is refused where the state enters."""
    opts = _opts(tokenizer="bytes")
    with Loader(js, **opts).batches(256, 2, packing="bestfit", window=4) as batches:
        for _ in range(24):
            next(batches)
        state = json.loads(json.dumps(batches.state_dict()))
    handed = state["documents"]["counters"]["epoch_documents"]
    assert (state["window_number"], state["row"], handed, state["window_epoch"]) == (3, 4, 12, 1)
    state[field] = value
    with pytest.raises(StateError, match=r"^bad batches state: window_number: .* does not agree "
                       rf"with the {handed} documents its epoch handed out") as caught:  # fmt: skip
        Loader(js, **opts).batches(256, 2, packing="bestfit", window=4, state=state)
    assert caught.value.field == "window_number"


def _mixture_batches(
    js: str, tmp_path: Path, batches: int, seq_len: int, **shape: Any
) -> tuple[Mixture, dict[str, Any]]:
    """A mixture of ``js`` and 20 other lines, half each, and the state of its batches of 2
    rows of ``seq_len`` (byte ids) after ``batches`` of them, as JSON gives it back."""
    write_jsonl(tmp_path / "b" / "a.jsonl", sample_texts(20, seed=5))
    mixed = Mixture({"js": js, "b": str(tmp_path / "b")}, {"js": 0.5, "b": 0.5})
    with Loader(mixed, **_opts(tokenizer="bytes")).batches(seq_len, 2, **shape) as made:
        for _ in range(batches):
            next(made)
        return mixed, json.loads(json.dumps(made.state_dict()))


@pytest.mark.parametrize(("field", "value", "said"), [
    ("window_number", 10**6, r"window_number: 1000000 does not agree with the 40 documents the "
     r"mixture handed out"),
    ("window_number", 9, r"window_number: 9 does not agree with the 40"),
    ("window_epoch", 5, r"window_epoch: 5, not a mixture's"),
])  # fmt: skip
def test_a_mixture_s_best_fit_window_its_documents_cannot_hold_is_refused(
    js: str, tmp_path: Path, field: str, value: int, said: str
) -> None:
    """The same of a mixture's best fit (session 18, a red team of ``owt stream --mix --pack
    bestfit``): its windows are numbered from its start, in epoch 0, over the documents it
    handed out; an edited number or epoch was taken, and the window packed again in another
    seeded order (``owt stream --resume`` exited 0 with other batches)."""
    mixed, state = _mixture_batches(js, tmp_path, 20, 256, packing="bestfit", window=4)
    opts = _opts(tokenizer="bytes")
    assert (state["window_number"], state["documents"]["handed"]) == (10, 40)
    state[field] = value
    with pytest.raises(StateError, match=rf"^bad batches state: {said}") as caught:
        Loader(mixed, **opts).batches(256, 2, packing="bestfit", window=4, state=state)
    assert caught.value.field == field


def test_a_mixture_s_best_fit_window_parts_not_its_window_s_are_refused(
    js: str, tmp_path: Path
) -> None:
    """A mixture's best-fit ``window_parts`` (the window's documents of each part, which a
    reshard deals to the new ranks) edited, their sum kept: nothing else reads them, so the
    state was taken, and a reshard of it dealt the old rank's documents wrong. The window is
    read again where the state enters: parts it does not hold are refused."""
    mixed, state = _mixture_batches(js, tmp_path, 5, 64, packing="bestfit", window=8)
    opts = _opts(tokenizer="bytes")
    held = state["window_parts"]
    assert state["row"] > 0 and len(held) == 2 and held[0] > 0, state
    Loader(mixed, **opts).batches(64, 2, packing="bestfit", window=8, state=state).close()
    state["window_parts"] = [held[0] - 1, held[1] + 1]
    with pytest.raises(StateError, match=r"^bad batches state: window_parts: .* but its window "
                       r"holds") as caught:  # fmt: skip
        Loader(mixed, **opts).batches(64, 2, packing="bestfit", window=8, state=state)
    assert caught.value.field == "window_parts"


def test_a_mixture_s_concat_cut_of_another_part_is_refused(js: str, tmp_path: Path) -> None:
    """A mixture's concat state inside a document names its part (``documents.next``): a
    reshard deals the rest of that document by it. An edited one was taken (the stream chose
    the part again, by its turns) and a reshard dealt the document as the other part's. The
    document is read again before the first batch: another part's is refused."""
    mixed, state = _mixture_batches(js, tmp_path, 5, 64)
    opts = _opts(tokenizer="bytes")
    part = state["documents"]["next"]
    assert state["offset"] > 0 and part in (0, 1), state
    state["documents"]["next"] = 1 - part
    said = rf"^bad batches state: documents\.next: {1 - part}, but the document the next batch"
    with (
        Loader(mixed, **opts).batches(64, 2, state=state) as batches,
        pytest.raises(StateError, match=rf"{said} begins in is part {part}'s") as caught,
    ):
        next(batches)
    assert caught.value.field == "documents.next"


def _batch_states(corpus: str | Mixture, **kw: Any) -> list[dict[str, Any]]:
    """The state before each batch of a run (epoch 0 to its end) and after the last."""
    with Loader(corpus, **{**_opts(tokenizer="bytes"), "epochs": 1}).batches(**kw) as it:
        states = [json.loads(json.dumps(it.state_dict()))]
        states += [json.loads(json.dumps(it.state_dict())) for _ in it]
    return states


def _edited(state: dict[str, Any], keys: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(state))
    node = out
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value(node[keys[-1]]) if callable(value) else value
    return out


FIT = {"seq_len": 16, "batch_size": 2, "packing": "bestfit", "window": 4}
STEPS = {"schedule": [(0, 8, 2), (10, 16, 2), (30, 32, 1)], "packing": "bestfit", "window": 4}


@pytest.mark.parametrize(
    ("kw", "pick", "keys", "value", "field", "says"),
    [
        ({"seq_len": 16, "batch_size": 2}, lambda s: s["batches"] == 0, ("offset",), 1, "offset",
         "offset: is 1: ids of a document in batches out, with none out"),
        ({"seq_len": 16, "batch_size": 2}, lambda s: s["offset"] > 1, ("offset",),
         lambda v: v - 1, "offset", "not the \\d+ ids the batches out hold"),
        (FIT, lambda s: s["batches"] == 0, ("row",), 1, "row", "with no batch out"),
        (FIT, lambda s: s["window_number"] == 1 and s["row"], ("window_number",), 2,
         "window_number", "does not agree with the 4 documents"),
        (FIT, lambda s: s["window_number"] == 0 and s["row"] > 1, ("row",), lambda v: v - 1,
         "row", "the rows out of the first window are the"),
        (STEPS, lambda s: s["batches"] == 5, ("schedule", "packings", 0, "seq_len"), 16,
         "schedule", "packings: the last's seq_len is not 8"),
        (STEPS, lambda s: len(s.get("schedule", {}).get("packings", ())) == 2,
         ("schedule", "packings", 1, "seq_len"), lambda v: 8 if v == 16 else 16, "schedule",
         "one per seq_len in turn"),
        (STEPS, lambda s: s["batches"] == 15 and s["window_number"] == 0,
         ("schedule", "packings", 0, "rows"), lambda v: v - 1, "row",
         "the rows out of the first window"),
    ],
)  # fmt: skip
def test_batches_fields_that_disagree_with_the_run_are_refused(
    js: str, kw: dict[str, Any], pick: Any, keys: tuple[Any, ...], value: Any, field: str,
    says: str,
) -> None:  # fmt: skip
    """Each field of a real batches state, edited within its type to a value the run never
    had: the concat offset (ids skipped or read twice), a best-fit row with no batch out, a
    window number its documents do not reach, rows of the first window that are not the
    batches', a schedule's packing not the last batch's seq_len or twice in a row. Each was
    taken and resumed into other batches than the run's (session 21's red team): now refused
    where the state enters, and by ``reshard``."""
    state = next(s for s in _batch_states(js, **kw) if pick(s))
    bad = _edited(state, keys, value)
    with pytest.raises(StateError, match=says) as caught:
        Loader(js, **{**_opts(tokenizer="bytes"), "epochs": 1}).batches(**kw, state=bad)
    assert caught.value.field == field
    with pytest.raises(StateError, match=f"^state 0: .*{says}"):
        reshard([bad], 2)


def test_reshard_of_batches_states_names_their_fields(js: str) -> None:
    """A difference of batches states was named as a document state's field (``config.seed``,
    ``position.epoch``: no such path in the states given), or not at all (``seq_len``,
    ``window``, two states of one rank)."""
    def states(seq_len: int = 16, **extra: Any) -> list[dict[str, Any]]:
        out = []
        for rank in range(2):
            opts = _opts(rank, 2, tokenizer="bytes")
            with Loader(js, **opts).batches(seq_len, 2, **extra) as batches:
                next(batches)
                out.append(json.loads(json.dumps(batches.state_dict())))
        return out

    edited = states()
    edited[1]["documents"]["config"]["seed"] = 4
    other = [states()[0], states(packing="bestfit", window=8)[1]]
    longer = [states()[0], states(32)[1]]
    for given, field in [(edited, "documents.config.seed"), (longer, "seq_len"),
                         (other, "packing"), ([edited[0], edited[0]], "documents.config.rank")]:
        with pytest.raises(StateError) as caught:
            reshard(given, 3)
        assert caught.value.field == field, caught.value


def test_a_batches_state_whose_begun_document_lies_past_the_run_is_refused(js: str) -> None:
    """A concat state (ids of its next document in batches out) with its documents' epoch
    edited to the one after the run's last: taken as a finished run's state, and the run
    handed out nothing. Its next document is one to read, so it lies within the run."""
    opts = {**_opts(tokenizer="bytes"), "epochs": 1}
    with Loader(js, **opts).batches(16, 2) as batches:
        for _ in range(3):
            next(batches)
        state = json.loads(json.dumps(batches.state_dict()))
    assert state["offset"] > 0 and state["documents"]["position"]["epoch"] == 0
    state["documents"]["position"] = {"epoch": 1}
    with pytest.raises(StateError, match="nothing left to read: the state is at epoch 1") as e:
        Loader(js, **opts).batches(16, 2, state=state)
    assert e.value.field == "documents.position.epoch"
