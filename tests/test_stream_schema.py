"""The typed state records: every kind round-trips through its record, the states the
release before them saved still load (and this code writes them byte for byte the same),
a damaged field is one ``StateError`` naming it, and the old spellings of ``even`` still
work with a warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from openwebtext import Loader, Options, StateError, reshard
from openwebtext.stream import DocumentState, Position
from openwebtext.stream.counters import Counters
from openwebtext.stream.schema import BATCHES_FORMAT, BatchesState, Level, OldRank, Reshard

GOLDEN = json.loads((Path(__file__).parent / "data" / "states-0.1.json").read_text())


def parse(state: dict[str, Any]) -> DocumentState | BatchesState:
    if state["format"] == BATCHES_FORMAT:
        return BatchesState.from_json(state)
    return DocumentState.from_json(state)


# -- the states of the release before typed states -----------------------------------------


def _doc_state(corpus: Path, n: int, **kw: Any) -> dict[str, Any]:
    with Loader(corpus, workers=0, seed=3, shuffle_buffer=30, **kw).iter() as it:
        for _ in range(n):
            next(it)
        return it.state_dict()


def _batch_state(corpus: Path, n: int, packing: str, state: Any = None, **kw: Any) -> Any:
    loader = Loader(corpus, workers=0, seed=3, shuffle_buffer=30, tokenizer="bytes", **kw)
    extra = {"packing": packing, "window": 8} if packing == "bestfit" else {}
    with loader.batches(32, 2, state=state, **extra) as b:
        for _ in range(n):
            next(b)
        return b.state_dict()


def written_now(corpus: Path) -> dict[str, Any]:
    """The states of ``tests/data/states-0.1.json``, taken the same way with this code."""
    states = {
        "documents": _doc_state(corpus, 17),
        "documents_rank": _doc_state(corpus, 9, rank=1, world_size=3),
        "documents_pad": _doc_state(corpus, 9, rank=0, world_size=2, even="pad"),
        "batches_concat": _batch_state(corpus, 5, "concat", rank=1, world_size=2),
        "batches_bestfit": _batch_state(corpus, 3, "bestfit", rank=0, world_size=2),
    }
    ranks = [_doc_state(corpus, 4 + 3 * r, rank=r, world_size=3) for r in range(3)]
    states["resharded"] = reshard(ranks, 2)[1]
    fit = [_batch_state(corpus, 2 + r, "bestfit", rank=r, world_size=2) for r in range(2)]
    states["resharded_bestfit"] = reshard(fit, 3)[2]
    cat = [_batch_state(corpus, 3 + r, "concat", rank=r, world_size=2) for r in range(2)]
    again = [
        _batch_state(corpus, 1, "concat", state=s, rank=r, world_size=3)
        for r, s in enumerate(reshard(cat, 3))
    ]
    states["resharded_twice"] = reshard(again, 2)[0]
    return states


@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_a_saved_state_round_trips_through_its_record(kind: str) -> None:
    state = GOLDEN[kind]
    assert parse(state).to_json() == state
    assert parse(json.loads(json.dumps(parse(state).to_json()))) == parse(state)


def test_this_code_writes_the_states_the_release_before_wrote(indexed: Path) -> None:
    assert written_now(indexed) == GOLDEN


@pytest.mark.parametrize("kind", ["documents", "documents_rank", "resharded"])
def test_a_saved_document_state_resumes(indexed: Path, kind: str) -> None:
    state = GOLDEN[kind]
    config = state["config"]
    loader = Loader(
        indexed, workers=0, seed=3, shuffle_buffer=30, rank=config["rank"],
        world_size=config["world_size"], even=config["even"] or "drop",
    )  # fmt: skip
    with loader.iter(state=state) as it:
        assert next(it).name


# -- every record round-trips ---------------------------------------------------------------

counts = st.integers(0, 2**40)
rules = st.sampled_from(["drop", "pad", None])
positions = st.builds(Position, counts, counts, counts)
counters = st.builds(Counters, *([counts] * 11))
old_ranks = st.builds(OldRank, counts, counts, st.none() | counts, counts)


@st.composite
def levels(draw: Any, best_fit: bool) -> Level:
    n = draw(st.integers(1, 5))
    ints = st.lists(counts, min_size=n, max_size=n).map(tuple)
    windows = st.lists(st.tuples(counts, counts), min_size=n, max_size=n).map(tuple)
    return Level(n, draw(rules), draw(ints), draw(ints), draw(windows) if best_fit else None)


@st.composite
def sections(draw: Any) -> Reshard:
    best_fit = draw(st.booleans())
    ranks = draw(st.lists(old_ranks, min_size=1, max_size=6).map(tuple))
    world = draw(st.integers(1, 8))
    exact = draw(st.none() | st.lists(st.booleans(), min_size=len(ranks), max_size=len(ranks)))
    windows = st.lists(st.tuples(counts, counts, counts), max_size=4).map(tuple)
    return Reshard(
        world_size=len(ranks),
        epoch=draw(counts),
        even=draw(rules),
        ranks=ranks,
        levels=tuple(draw(st.lists(levels(best_fit), max_size=3))),
        share=(draw(st.integers(0, world - 1)), world),
        rule=draw(rules),
        counted=draw(st.booleans()),
        exact=None if exact is None else tuple(exact),
        window=draw(st.integers(1, 10**6)) if best_fit else None,
        windows=draw(windows) if best_fit else None,
        next_window=draw(counts) if best_fit else None,
    )


configs = st.fixed_dictionaries(
    {"corpus": st.text(max_size=16), "units": counts, "even": rules, "rank": counts}
)


@st.composite
def document_states(draw: Any) -> DocumentState:
    section = draw(st.none() | sections())
    position = draw(positions)
    counted = draw(counters)
    if section is None:  # fields that agree: what is handed out covers the position
        handed = max(counted.epoch_documents, position.in_block)
        counted = Counters(**{**counted.to_json(), "epoch_documents": handed,
                              "documents": max(handed, counted.documents)})  # fmt: skip
        config = draw(configs)
        config["units"] = max(config["units"], position.block)
        return DocumentState(config, position, counted)
    return DocumentState(draw(configs), position, counted, section)


@st.composite
def batches_states(draw: Any) -> BatchesState:
    best_fit = draw(st.booleans())
    sizes = st.integers(1, 10**6)
    return BatchesState(
        draw(sizes), draw(sizes), draw(document_states()), draw(counts), draw(counts),
        "bestfit" if best_fit else "concat",
        draw(sizes) if best_fit else None,
        draw(counts) if best_fit else 0,
        draw(counts) if best_fit else 0,
        draw(st.none() | counts) if best_fit else None,
    )  # fmt: skip


@given(document_states())
def test_every_document_state_round_trips(state: DocumentState) -> None:
    saved = json.loads(json.dumps(state.to_json()))
    assert DocumentState.from_json(saved) == state
    assert DocumentState.from_json(saved).to_json() == saved


@given(batches_states())
def test_every_batches_state_round_trips(state: BatchesState) -> None:
    saved = json.loads(json.dumps(state.to_json()))
    assert BatchesState.from_json(saved) == state


# -- a damaged field is named -------------------------------------------------------------

DOCS = GOLDEN["documents"]
RESHARDED = GOLDEN["resharded"]
BATCHES = GOLDEN["batches_bestfit"]


def damaged(state: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(state))
    *parents, key = path.split(".")
    node = out
    for parent in parents:
        node = node[parent]
    node[key] = value
    return out


@pytest.mark.parametrize(
    ("state", "path", "value", "message"),
    [
        (DOCS, "position.block", "3", r"position\.block is '3', not an int >= 0"),
        (DOCS, "position.in_block", True, r"position\.in_block is True"),
        (DOCS, "counters.tokens", -1, r"counters\.tokens is -1"),
        (DOCS, "counters", [], r"counters is list, not an object"),
        (DOCS, "config", None, r"config is null, not an object"),
        (DOCS, "position.in_block", 10**6, r"in_block=1000000 is more than the counters"),
        (RESHARDED, "reshard.ranks", [[0, 1, 2]], r"reshard\.ranks malformed"),
        (RESHARDED, "reshard.share", [2, 2], r"reshard\.share malformed"),
        (RESHARDED, "reshard.exact", [True], r"reshard\.exact malformed"),
        (RESHARDED, "reshard.rule", "even", r"reshard\.rule is 'even'"),
        (RESHARDED, "reshard.counted", 0, r"reshard\.counted is 0, not true or false"),
        (BATCHES, "window", 0, r"bad batches state: window is 0, not null or an int >= 1"),
        (BATCHES, "packing", "greedy", r"packing is 'greedy'"),
        (BATCHES, "row", -2, r"row is -2"),
        (BATCHES, "documents.position.epoch", None, r"position\.epoch is None"),
    ],
)
def test_a_damaged_field_is_one_error_naming_it(
    state: dict[str, Any], path: str, value: Any, message: str
) -> None:
    assert parse(state) is not None  # the golden state itself is good
    with pytest.raises(StateError, match=message):
        parse(damaged(state, path, value))


# -- one spelling of even; the old ones still work, with a warning -----------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"even": True}, {"even": "drop"}),
        ({"even": True, "even_rule": "pad"}, {"even": "pad"}),
        ({"even": False}, {"even": None}),
        ({"even_rule": "pad"}, {"even": "pad"}),
    ],
)
def test_the_old_spellings_of_even_warn_and_mean_the_same(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    with pytest.warns(DeprecationWarning, match="is deprecated: pass even="):
        options = Options(world_size=2, **old)
    assert options == Options(world_size=2, **new)
    assert options.even_rule is None


def test_even_is_a_rule_or_none() -> None:
    assert Options().even == "drop" and Options().even_mode is None  # one share
    assert Options(world_size=2).even_mode == "drop"
    assert Options(world_size=2, even=None).even_mode is None
    with pytest.raises(ValueError, match="even must be 'drop', 'pad' or None, not 'yes'"):
        Options(even="yes")  # type: ignore[arg-type]


def test_reshard_old_spelling_warns() -> None:
    states = [GOLDEN["documents"]]
    with pytest.warns(DeprecationWarning, match=r"reshard\(even=True\) is deprecated"):
        new = reshard(states, 2, even=True)
    assert new == reshard(states, 2, even="drop")
    assert reshard(states, 2)[0]["config"]["even"] is None  # the run's own: one share
    with pytest.raises(ValueError, match="even must be 'drop', 'pad', None or 'keep'"):
        reshard(states, 2, even="yes")  # type: ignore[arg-type]
