"""The state records of format 2: every kind round-trips through its record, this code writes
the golden states of ``tests/data/states-2.json`` byte for byte (changing them breaks every
saved checkpoint), and any damaged field at any depth is one ``StateError`` naming its path."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext import Loader, Options, StateError, reshard
from openwebtext.codec import replace, whose
from openwebtext.loader import Mixture
from openwebtext.stream import DocumentState, Position
from openwebtext.stream.counters import Counters
from openwebtext.stream.schema import (
    BATCHES_FORMAT,
    MIXTURE_FORMAT,
    BatchesState,
    MixtureState,
    StreamConfig,
)
from openwebtext.stream.sections import Begun, Level, OldRank, Reshard, WindowAt
from records import changed, check_one_error, mutants
from support import Ran
from tables_support import sample_texts, write_jsonl

GOLDEN = json.loads((Path(__file__).parent / "data" / "states-2.json").read_text())


def parse(state: dict[str, Any]) -> DocumentState | BatchesState | MixtureState:
    if state["format"] == BATCHES_FORMAT:
        return BatchesState.from_json(state)
    if state["format"] == MIXTURE_FORMAT:
        return MixtureState.from_json(state)
    return DocumentState.from_json(state)


# -- the golden states of format 2 -----------------------------------------


def _doc_state(corpus: Path, n: int, state: Any = None, **kw: Any) -> dict[str, Any]:
    with Loader(corpus, workers=0, seed=3, shuffle_buffer=30, **kw).iter(state=state) as it:
        for _ in range(n):
            next(it)
        return it.state_dict()


#: The schedule of the scheduled states: from 32 ids a row to 16 at batch 2.
SCHEDULE = [(0, 32, 2), (2, 16, 3)]


def _batch_state(
    corpus: Path | Mixture,
    n: int,
    packing: str,
    state: Any = None,
    scheduled: bool = False,
    **kw: Any,
) -> Any:
    loader = Loader(corpus, workers=0, seed=3, shuffle_buffer=30, tokenizer="bytes", **kw)
    extra: dict[str, Any] = {"packing": packing, "window": 8} if packing == "bestfit" else {}
    extra |= {"schedule": SCHEDULE} if scheduled else {"seq_len": 32, "batch_size": 2}
    with loader.batches(state=state, **extra) as b:
        for _ in range(n):
            next(b)
        return b.state_dict()


def _mixture(corpus: Path, js: Path) -> Mixture:
    """The small corpus mixed with 30 JSON lines, by ids, under a schedule of weights."""
    write_jsonl(js / "a.jsonl", sample_texts(30, seed=2))
    steps = [(6, {"web": 0.25, "js": 0.75})]
    return Mixture({"web": str(corpus), "js": str(js)}, {"web": 2, "js": 1}, by="tokens",
                   schedule=steps)  # fmt: skip


def _mixture_state(mixture: Mixture) -> dict[str, Any]:
    """After 9 documents, with weights set at the 8th (applied: in the weights and counts),
    and again after the 9th (not yet applied: a change and its position)."""
    with Loader(mixture, workers=0, seed=3, tokenizer="bytes").iter() as it:
        for n in range(9):
            if n == 7:
                it.set_weights({"web": 1.0, "js": 1.0})
            next(it)
        it.set_weights({"web": 1.0, "js": 3.0})
        return it.state_dict()


def written_now(corpus: Path, js: Path) -> dict[str, Any]:
    """The states of ``tests/data/states-2.json``, taken the same way with this code."""
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
    # Ranks in different epochs (rank 1 two epochs ahead): the rests of epochs 1 and 2 follow.
    apart = [_doc_state(corpus, n, rank=r, world_size=2, epochs=None)
             for r, n in enumerate((3, 130))]  # fmt: skip
    states["resharded_epochs"] = reshard(apart, 3)[1]
    # Past those rests, in its own epoch: the rests it handed out (``passed``).
    states["passed_rests"] = _doc_state(corpus, 150, states["resharded_epochs"], rank=1,
                                        world_size=3, epochs=None)  # fmt: skip
    # Under a schedule: inside a best-fit window packed again at the change.
    states["batches_scheduled"] = _batch_state(corpus, 3, "bestfit", scheduled=True)
    mixed = _mixture(corpus, js)
    states["mixture"] = _mixture_state(mixed)
    states["batches_mixture"] = _batch_state(mixed, 3, "concat")
    # Best fit of a mixture, inside windows, resharded: the windows to replay.
    fit_mixed = [_batch_state(mixed, 2 + r, "bestfit", rank=r, world_size=2) for r in range(2)]
    states["batches_mixture_bestfit"] = fit_mixed[1]
    states["resharded_mixture_bestfit"] = reshard(fit_mixed, 1)[0]
    return states


@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_a_saved_state_round_trips_through_its_record(kind: str) -> None:
    state = GOLDEN[kind]
    assert parse(state).to_json() == state
    assert parse(json.loads(json.dumps(parse(state).to_json()))) == parse(state)


def _rebuilt(value: Any) -> Any:
    """``value`` built again of new, equal objects: a record from its fields, a new tuple, a
    new string (never the constants of the records' defaults)."""
    if isinstance(value, msgspec.Struct):
        fields = {f: _rebuilt(getattr(value, f)) for f in value.__struct_fields__}
        return type(value)(**fields)
    if isinstance(value, tuple):
        return tuple([_rebuilt(v) for v in value])
    if isinstance(value, dict):
        return {_rebuilt(k): _rebuilt(v) for k, v in value.items()}
    return "".join(list(value)) if isinstance(value, str) else value


@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_a_state_is_written_the_same_whatever_objects_hold_its_values(kind: str) -> None:
    """msgspec leaves out a field at its default only when it holds the default object itself:
    a reshard's ``share`` built as ``(0, 1)`` was written, the golden one's not, and an empty
    tuple Python 3.10 builds from a generator wrote ``"finished": []``. A record now holds the
    default whenever its value equals it."""
    assert _rebuilt(parse(GOLDEN[kind])).to_json() == GOLDEN[kind]


def test_a_list_where_a_record_holds_a_tuple_is_written_as_the_tuple() -> None:
    level = Level(world_size=2, rule=None, done=(1, 2), cuts=(0, 0), finished=[], led=[1])  # type: ignore[arg-type]
    assert level.to_json() == {"world_size": 2, "rule": None, "done": [1, 2], "cuts": [0, 0],
                               "led": [1]}  # fmt: skip
    assert Level.from_json(level.to_json()) == replace(level, led=(1,))


def test_this_code_writes_the_golden_states(indexed: Path, tmp_path: Path) -> None:
    """``OWT_WRITE_GOLDEN=1`` writes them anew: only with a new state format (or kind)."""
    now = written_now(indexed, tmp_path)
    if os.environ.get("OWT_WRITE_GOLDEN") == "1":
        (Path(__file__).parent / "data" / "states-2.json").write_text(
            json.dumps(now, indent=1, sort_keys=True) + "\n"
        )
    assert now == GOLDEN


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
positive = st.integers(1, 2**40)
rules = st.sampled_from(["drop", "pad", None])
fingerprints = st.text("0123456789abcdef", min_size=16, max_size=16)
positions = st.builds(Position, counts, counts, counts)
counters = st.builds(Counters, *([counts] * 11))
old_ranks = st.builds(OldRank, counts, counts, counts, st.booleans(), counts)


@st.composite
def levels(draw: Any, best_fit: bool) -> Level:
    n = draw(st.integers(1, 5))
    ints = st.lists(counts, min_size=n, max_size=n).map(tuple)
    at = st.builds(WindowAt, counts, counts)
    windows = st.lists(at, min_size=n, max_size=n).map(tuple)
    return Level(n, draw(rules), draw(ints), draw(ints), draw(windows) if best_fit else None)


@st.composite
def sections(draw: Any) -> Reshard:
    best_fit = draw(st.booleans())
    ranks = draw(st.lists(old_ranks, min_size=1, max_size=6).map(tuple))
    world = draw(st.integers(1, 8))
    exact = draw(st.none() | st.lists(st.booleans(), min_size=len(ranks), max_size=len(ranks)))
    begun = st.builds(Begun, counts, counts, rank=st.integers(0, len(ranks) - 1))
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
        window=draw(positive) if best_fit else None,
        windows=tuple(draw(st.lists(begun, max_size=4))) if best_fit else None,
        next_window=draw(counts) if best_fit else None,
    )


@st.composite
def configs(draw: Any, units: int = 0) -> StreamConfig:
    world = draw(st.integers(1, 64))
    return StreamConfig(
        corpus=draw(fingerprints), units=max(units, draw(counts)),
        shuffle=draw(st.booleans()), seed=draw(counts), shuffle_buffer=draw(counts),
        rank=draw(st.integers(0, world - 1)), world_size=world, even=draw(rules),
        split=draw(st.sampled_from(["all", "train", "val"])),
        val_fraction=draw(st.floats(1e-9, 1 - 1e-9)), val_seed=draw(counts),
        max_document_bytes=draw(positive),
        decode_errors=draw(st.sampled_from(["strict", "replace"])),
        tokenizer=draw(st.none() | st.text(max_size=8)),
    )  # fmt: skip


@st.composite
def document_states(draw: Any) -> DocumentState:
    section = draw(st.none() | sections())
    position = draw(positions)
    counted = draw(counters)
    if section is None:  # fields that agree: what is handed out covers the position
        handed = max(counted.epoch_documents, position.in_block)
        documents = max(handed, counted.documents) if position.epoch else handed  # (none before)
        counted = replace(counted, epoch_documents=handed, documents=documents)
        units = position.block + (position.in_block > 0)  # the position lies within them
        return DocumentState(draw(configs(units=units)), position, counted)
    config = draw(configs())  # a rest is the config's share, from its epoch's start
    section = replace(section, share=(config.rank, config.world_size), rule=config.even)
    counted = replace(counted, documents=counted.epoch_documents)  # (counted from the reshard)
    return DocumentState(config, Position(section.epoch), counted, section)


@st.composite
def batches_states(draw: Any) -> BatchesState:
    best_fit = draw(st.booleans())
    seq_len, batch_size, documents = draw(positive), draw(positive), draw(document_states())
    offset, batches = draw(counts), draw(counts)
    section = documents.reshard  # (a rest is packed as the batches are: its window theirs)
    best_fit = best_fit if section is None else section.window is not None
    window = draw(positive) if section is None or section.window is None else section.window
    if not best_fit and not documents.resharded:  # concat: the ids before are the batches'
        seq_len, batch_size = draw(st.integers(1, 4096)), draw(st.integers(1, 256))
        ids, tokens = seq_len * batch_size, documents.counters.tokens
        batches = -(-tokens // ids) + draw(st.integers(0, 2))
        offset = batches * ids - tokens
    offset = offset if batches else 0  # (no batch out: no id of the next document in one)
    return BatchesState(
        seq_len, batch_size, documents, 0 if best_fit else offset, batches,
        "bestfit" if best_fit else "concat",
        window if best_fit else None,
        draw(counts) if best_fit else 0,
        draw(counts) if best_fit and batches else 0,
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


# -- a damaged field, at any depth, is one error naming its path ---------------------------


@pytest.mark.parametrize("kind", sorted(GOLDEN))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_damaged_field_at_any_depth_is_one_error_naming_it(kind: str, data: Any) -> None:
    check_one_error(parse, data.draw(mutants(GOLDEN[kind])))


@pytest.mark.parametrize(
    ("state", "path", "value", "message"),
    [
        (GOLDEN["documents"], "position.in_block", 10**6, r"in_block=1000000 is more than"),
        # A rest is packed as its batches are; no batch out holds ids of the next document.
        (GOLDEN["resharded_bestfit"], "documents.reshard.window", 16,
         r"documents\.reshard\.window: is 16, not the batches' window 8"),
        (GOLDEN["resharded_mixture_bestfit"], "documents.parts.js.reshard.window", 16,
         r"documents\.parts\.js\.reshard\.window: is 16, not the batches' window 8"),
        (GOLDEN["resharded_twice"], "offset", 1, r"offset: is 1: ids of a document in batches"),
        # No epoch comes before epoch 0, nor before a rest (its counts start from the reshard).
        (GOLDEN["documents"], "counters.documents", 30, r"^bad state: counters: epoch_documents"
         r"=17 is not documents=30: no epoch came before"),
        (GOLDEN["resharded"], "counters", {"documents": 5, "epoch_documents": 4},
         r"counters: epoch_documents=4 is not documents=5"),
        (GOLDEN["resharded"], "counters", {"documents": 5, "epoch_documents": 6},
         r"counters: epoch_documents=6 is more than documents=5"),
        (GOLDEN["resharded"], "reshard.share", [2, 2], r"reshard\.share: \[2, 2\] is not"),
        (GOLDEN["resharded"], "reshard.exact", [True], r"reshard\.exact: must hold one flag"),
        (GOLDEN["resharded_epochs"], "reshard.later", GOLDEN["resharded_epochs"]["reshard"]
         ["later"][1:], r"reshard\.later: must hold the sections of epochs 1 on"),
        (GOLDEN["batches_bestfit"], "window", None, r"window: is needed by best fit"),
        # What the other packing's state says (taken, and read by nothing).
        (GOLDEN["batches_bestfit"], "offset", 5, r"offset: is concat's only, not bestfit's"),
        (GOLDEN["batches_mixture_bestfit"], "offset", 1, r"offset: is concat's only"),
        (GOLDEN["batches_concat"], "row", 3, r"row: is best fit's only, not concat's"),
        (GOLDEN["batches_concat"], "window_number", 2, r"window_number: is best fit's only"),
        (GOLDEN["batches_mixture"], "window_epoch", 0, r"window_epoch: is best fit's only"),
        (GOLDEN["batches_bestfit"], "window_documents", 8, r"window_documents: is a best-fit"),
        (GOLDEN["batches_concat"], "window_documents", 3, r"window_documents: is a best-fit"),
        (GOLDEN["batches_bestfit"], "window_documents", True, r"documents: Expected `int`, got"),
        (GOLDEN["batches_bestfit"], "window_documents", 0, r"documents: Expected `int` >= 1"),
        (GOLDEN["batches_mixture_bestfit"], "window_parts", [], r"window_parts: counts a mix"),
        (GOLDEN["batches_concat"], "window_parts", [1], r"window_parts: counts a mixture's"),
        (GOLDEN["batches_mixture_bestfit"], "window_parts", [3, 4, 1], r"window_parts: must"),
        (GOLDEN["batches_mixture_bestfit"], "window_parts", [5, 5], r"window_parts: must count"),
        (GOLDEN["resharded_bestfit"], "documents.reshard.windows", [{"number": 0, "rank": 0,
         "rows": 4, "documents": 9}], r"windows: hold more documents than a window's 8"),
        (GOLDEN["documents"], "config.corpus", "web", r"config\.corpus: Expected `str` matching"),
        (GOLDEN["batches_scheduled"], "schedule.at", 10, r"schedule: at=10 is not batches=3"),
        (GOLDEN["mixture"], "handed", 3, r"handed: is 3, not the 9 documents its parts"),
        (GOLDEN["mixture"], "served", [10**6, 0], r"served: \[1000000, 0\] counts more than"),
        (GOLDEN["mixture"], "weights", [2, 3], r"weights: must be normalised \(their sum 1\)"),
        (GOLDEN["batches_mixture_bestfit"], "window_parts", [0, 0], r"window_parts: must count"),
        (GOLDEN["mixture"], "changes", [{"at": 9, "weights": [0.5, 0.5]}, {"at": 3, "weights":
         [0.5, 0.5]}], r"changes: must be in the order they apply: \[9, 3\]"),
        (GOLDEN["mixture"], "config.schedule", [{"at": 6, "weights": [0.5, 0.5]}, {"at": 2,
         "weights": [0.5, 0.5]}], r"config\.schedule: must be in the order they apply"),
        # A rest is the config's share, from its epoch's start (else another rank's, or lost).
        (GOLDEN["resharded"], "reshard.share", [0, 2], r"^bad state: reshard: share and rule must"),
        (GOLDEN["resharded"], "reshard.rule", "pad", r"reshard: share and rule must be the config"),
        (GOLDEN["resharded"], "reshard.epoch", 1, r"position: of a rest must be its epoch 1's st"),
        (GOLDEN["resharded"], "position.block", 2, r"position: of a rest must be its epoch 0"),
        # Best fit's window is the one its documents' state is at the start of.
        (GOLDEN["batches_scheduled"], "schedule.packings", [{"rows": 4, "seq_len": 31}, {"rows": 3,
         "seq_len": 16}], r"schedule: packings: each one's seq_len must be one of the schedule's"),
        (GOLDEN["resharded_mixture_bestfit"], "documents.replays", [
            dict(GOLDEN["resharded_mixture_bestfit"]["documents"]["replays"][0], documents=9)
        ], r"^bad batches state: documents\.replays: hold more than a window of 8"),
        # An old rank's window begun says no replays (an earlier share's window, ``WindowAt``).
        (GOLDEN["resharded_bestfit"], "documents.reshard.windows", [{"number": 0, "rank": 0,
         "rows": 4, "replays": 1}], r"reshard\.windows\[0\]\.replays: Object contains unknown"),
    ],
)
def test_fields_that_disagree_name_their_record(
    state: dict[str, Any], path: str, value: Any, message: str
) -> None:
    keys = tuple(path.split("."))
    with pytest.raises(StateError, match=message):
        parse(changed(state, keys, value))


def test_what_is_not_a_state_is_said() -> None:
    wrong = r"^bad state: format: not 'openwebtext-state/2' \(found 'openwebtext-batches/2'\)"
    with pytest.raises(StateError, match=wrong) as caught:
        DocumentState.from_json(GOLDEN["batches_concat"])
    assert caught.value.field == "format"
    # A record of another kind (as a caller holding records passes it) is said the same way.
    with pytest.raises(StateError, match=wrong) as caught:
        DocumentState.from_json(BatchesState.from_json(GOLDEN["batches_concat"]))
    assert caught.value.field == "format"
    missing = r"^bad batches state: format: not 'openwebtext-batches/2' \(found None\)"
    with pytest.raises(StateError, match=missing):
        BatchesState.from_json({})
    with pytest.raises(StateError, match=r"the record: Expected `object`, got `array`"):
        BatchesState.from_json([])


# -- one spelling of even ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"format": "openwebtext-batches/2"}, "this"),
        ({"format": "openwebtext-batches/1"}, "version"),
        ({"format": "openwebtext-batches/3", "x": 1}, "version"),
        ({"format": "openwebtext-state/2"}, "other"),  # another record of ours
        ({"format": "openwebtext-batchesX/2"}, "other"),
        ({"format": ["openwebtext-batches/2"]}, "other"),
        ({"format": 2}, "other"),
        ({}, "other"),
        (["openwebtext-batches/2"], "other"),
        (None, "other"),
    ],
)
def test_whose_tells_this_version_another_version_and_another_s(value: Any, said: str) -> None:
    """The one reading of a record's format before it is decoded (the counts file, the remote
    index cache and a token run's meta.json each read it by hand before, three ways)."""
    assert whose(value, BatchesState) == said


def test_the_old_spellings_of_even_are_refused() -> None:
    with pytest.raises(ValueError, match="even must be 'drop', 'pad' or None, not True"):
        Options(world_size=2, even=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="even_rule"):
        Options(world_size=2, even_rule="pad")  # type: ignore[call-arg]


def test_even_is_a_rule_or_none() -> None:
    assert Options().even == "drop" and Options().even_mode is None  # one share
    assert Options(world_size=2).even_mode == "drop"
    assert Options(world_size=2, even=None).even_mode is None
    with pytest.raises(ValueError, match="even must be 'drop', 'pad' or None, not 'yes'"):
        Options(even="yes")  # type: ignore[arg-type]


def test_reshard_takes_a_rule() -> None:
    states = [GOLDEN["documents"]]
    # A one-rank run has no rule in force (one share is even by itself): Loader's default.
    assert reshard(states, 2)[0]["config"]["even"] == "drop"
    assert reshard(states, 2, even=None)[0]["config"]["even"] is None
    with pytest.raises(ValueError, match="even must be 'drop', 'pad', None or 'keep'"):
        reshard(states, 2, even="yes")  # type: ignore[arg-type]


def test_a_replays_fields_are_named_as_its_own() -> None:
    """A replay's weights and counts that do not fit the parts name the replay's field (its
    weights were once named as the mixture state's own)."""
    state = GOLDEN["resharded_mixture_bestfit"]
    for field, value in [("weights", [0.5]), ("left", [1]), ("served", [0, 0, 0])]:
        bad = json.loads(json.dumps(state))
        bad["documents"]["replays"][1][field] = value
        with pytest.raises(StateError) as caught:
            BatchesState.from_json(bad)
        assert caught.value.field == f"documents.replays[1].{field}", str(caught.value)


# -- a state's format, whatever it holds, is read once and said ---------------------------

NOT_FORMATS = [["openwebtext-state/2"], {"v": 2}, 2, None, True]


@pytest.mark.parametrize("kind", ["documents", "batches_concat", "mixture", "batches_mixture"])
@pytest.mark.parametrize("found", NOT_FORMATS, ids=repr)
def test_a_format_that_is_no_state_s_is_one_error_at_every_entry(
    indexed: Path, tmp_path: Path, owt: Callable[..., Ran], kind: str, found: Any
) -> None:
    """``reshard``, ``Loader.iter``/``batches`` and ``owt stream --resume`` each read which
    kind a state is before decoding it (``schema.kind_of``): a format of any JSON type is one
    ``StateError`` naming ``format`` (a list was a ``TypeError`` from a dict lookup)."""
    bad = changed(GOLDEN[kind], ("format",), found)
    with pytest.raises(StateError) as caught:
        reshard([bad, bad], 3)
    assert caught.value.field == "format", str(caught.value)
    loader = Loader(indexed, workers=0, tokenizer="bytes")
    with pytest.raises(StateError) as caught:
        if kind.startswith("batches"):
            loader.batches(seq_len=32, batch_size=2, state=bad)
        else:
            loader.iter(state=bad)
    assert caught.value.field == "format", str(caught.value)
    saved = tmp_path / "state.json"
    saved.write_text(json.dumps(bad))
    pack = ["--pack", "concat", "--tokenizer", "bytes"] if kind.startswith("batches") else []
    ran = owt("stream", str(indexed), "--resume", str(saved), "--take", "1", *pack)
    assert ran.returncode == 1 and "format" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize("by", [-1, 1, 10**6])
def test_a_concat_offset_that_is_not_the_batches_is_refused_where_it_enters(
    indexed: Path, by: int
) -> None:
    """The offset of a concat state says where in the document the next batch begins: one
    past its end was taken, and ids left out (one within it: ids left out or read twice,
    unsaid). With the ids of the documents before it (``counters.tokens``), it makes the ids
    of the batches out: any other is refused as the state enters."""
    loader = Loader(indexed, workers=0, seed=3, tokenizer="bytes")
    with loader.batches(32, 2) as it:
        next(it)
        state = it.state_dict()
    assert state["documents"]["counters"].get("tokens", 0) + state["offset"] == 64
    bad = changed(state, ("offset",), state["offset"] + by)
    with pytest.raises(StateError, match=r"offset: is \d+: with the ids of the documents before"
                       r" it, \d+, not the 64 ids the batches out hold") as raised:  # fmt: skip
        loader.batches(32, 2, state=bad)
    assert raised.value.field == "offset"




def test_a_stratified_mixture_s_part_served_past_its_share_is_refused() -> None:
    """Stratified by documents, a part more than one document ahead of its weight's share is
    never chosen: a ``served`` edited from [6, 3] to [0, 3] (weights 2/3, 1/3) was taken, and
    the parts came in another order."""
    state = json.loads(json.dumps(GOLDEN["mixture"]))
    state["config"]["by"] = "documents"
    state["served"] = [2, 7]  # (each at most its part's documents: web 2, js 7)
    with pytest.raises(StateError, match=r"served: \[2, 7\]: a part more than one document") as e:
        parse(state)
    assert e.value.field == "served"
    state["served"] = [2, 3]  # within one of 0.5 x 5
    parse(state)
