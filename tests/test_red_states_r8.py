"""What a red team (session 31) found in saved states: a resharded mixture's turns edited far
ahead hung the run; an old rank that had begun a document but handed none out was let run
epochs ahead (batches lost, or ``reshard`` never returned); a field nested too deeply and an
integer of more digits than Python converts were said as no field, or as text that is no
JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, Mixture, StateError, reshard
from openwebtext.stream import load_state
from tables_support import sample_texts, write_jsonl


@pytest.fixture
def js(tmp_path: Path) -> str:
    write_jsonl(tmp_path / "js" / "a.jsonl", sample_texts(30, seed=2))
    return str(tmp_path / "js")


def _opts(rank: int = 0, world: int = 1, **extra: Any) -> dict[str, Any]:
    return {"workers": 0, "seed": 3, "rank": rank, "world_size": world, "epochs": 1, **extra}


def test_a_resharded_mixture_s_turns_far_ahead_are_refused(js: str, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "b" / "b.jsonl", sample_texts(12, seed=5))
    mixture = Mixture({"a": js, "b": str(tmp_path / "b")}, weights={"a": 0.6, "b": 0.4})
    old = []
    for r, n in enumerate([3, 6, 2]):
        with Loader(mixture, **_opts(r, 3)).iter() as it:
            for _ in range(n):
                next(it)
            old.append(json.loads(json.dumps(it.state_dict())))
    new = reshard(old, 2)
    assert len(list(Loader(mixture, **_opts(0, 2)).iter(state=new[0]))) > 0
    for served in (1000, 2**62):  # (part a never chosen again: the run never ended)
        edited = {**new[0], "served": [served, new[0]["served"][1]]}
        with pytest.raises(StateError, match=r"a part more than one document ahead of its "
                           r"weight's share") as info:  # fmt: skip
            Loader(mixture, **_opts(0, 2)).iter(state=edited)
        assert info.value.field == "served"


def test_an_old_rank_that_began_a_document_is_not_taken_as_an_empty_share(js: str) -> None:
    """A concat batches state inside its first document (no whole document out) was exempt
    from the bound on epochs ahead, as a rank of empty shares is: at epoch 1, batches were
    lost; at 2**62, ``reshard`` never returned."""
    old = []
    for r in range(3):
        with Loader(js, tokenizer="bytes", **_opts(r, 3)).batches(seq_len=8, batch_size=1) as b:
            next(b)
            old.append(json.loads(json.dumps(b.state_dict())))
    assert "documents" not in old[1]["documents"]["counters"] and old[1]["offset"] > 0  # (0)
    assert len(reshard(old, 2)) == 2
    for epoch in (1, 2**62):
        old[1]["documents"]["position"]["epoch"] = epoch
        began = time.monotonic()
        with pytest.raises(StateError, match=r"old rank 1 is at epoch \d+, \d+ past the "
                           r"earliest rank's") as info:  # fmt: skip
            reshard(old, 2)
        assert info.value.field == "documents.position.epoch"
        assert time.monotonic() - began < 5


def test_a_rank_of_nothing_handed_out_far_ahead_is_refused_at_once(js: str) -> None:
    old = [json.loads(json.dumps(Loader(js, **_opts(r, 2)).iter().state_dict()))
           for r in range(2)]  # fmt: skip
    old[1]["position"]["epoch"] = 2**62
    began = time.monotonic()
    with pytest.raises(StateError, match=r"old rank 1 is at epoch 4611686018427387904") as info:
        reshard(old, 3)
    assert info.value.field == "position.epoch" and time.monotonic() - began < 5


def test_a_field_nested_too_deeply_and_a_long_integer_are_named(js: str, tmp_path: Path) -> None:
    state = json.loads(json.dumps(Loader(js, workers=0).iter().state_dict()))
    deep: Any = {}
    for _ in range(100_000):
        deep = {"x": deep}
    with pytest.raises(StateError) as info:
        Loader(js, workers=0).iter(state={**state, "counters": deep})
    assert info.value.field == "counters.x"  # (was None: "the record: nested too deeply")
    path = tmp_path / "s.json"
    path.write_text(json.dumps(state).replace('"in_block": 0', '"in_block": ' + "9" * 5000))
    with pytest.raises(StateError, match=r"bad state: position\.in_block: Expected `int` <=") as e:
        load_state(path)
    assert e.value.field == "position.in_block"  # (was "not a JSON state file")


def test_a_resharded_best_fit_window_far_off_is_refused(js: str) -> None:
    """``window_number`` or ``window_epoch`` of a resharded state edited to 10**6 was taken
    (its checks were skipped for resharded states): documents were lost or repeated."""
    kw: dict[str, Any] = {"seq_len": 16, "batch_size": 2, "packing": "bestfit", "window": 4}
    old = []
    for r, n in enumerate([1, 3, 2]):
        with Loader(js, tokenizer="bytes", **_opts(r, 3)).batches(**kw) as batches:
            for _ in range(n):
                next(batches)
            old.append(json.loads(json.dumps(batches.state_dict())))
    new = reshard(old, 2)
    loader = Loader(js, tokenizer="bytes", **_opts(0, 2))
    assert sum(1 for _ in loader.batches(state=new[0], **kw)) > 0  # (as made: taken)
    for field in ("window_number", "window_epoch"):
        with pytest.raises(StateError, match=rf"bad batches state: {field}: 1000000") as info:
            loader.batches(state={**new[0], field: 10**6}, **kw)
        assert info.value.field == field


@pytest.fixture
def five(tmp_path: Path) -> str:
    """5 documents: most ranks of 7 or 8 hold an empty share."""
    write_jsonl(tmp_path / "five" / "a.jsonl", sample_texts(5, seed=4))
    return str(tmp_path / "five")


def test_a_best_fit_state_of_an_empty_share_resumes(five: str) -> None:
    """The review of this session's checks: a rank of an empty share packs no window, so its
    ``window_epoch`` stays behind its documents' epoch; its own end-of-run state (resharded or
    not) was refused on resume."""
    kw: dict[str, Any] = {"seq_len": 64, "batch_size": 2, "packing": "bestfit", "window": 3}

    def loader(rank: int, world: int, epochs: int) -> Loader:
        return Loader(five, seed=7, tokenizer="bytes", rank=rank, world_size=world,
                      epochs=epochs, even=None, workers=0)  # fmt: skip

    with loader(0, 7, 3).batches(**kw) as batches:
        assert sum(1 for _ in batches) == 0
        state = json.loads(json.dumps(batches.state_dict()))
    assert (state["window_epoch"], state["documents"]["position"]["epoch"]) == (0, 3)
    assert sum(1 for _ in loader(0, 7, 3).batches(state=state, **kw)) == 0  # (was refused)
    with loader(0, 1, 2).batches(**kw) as batches:
        next(batches)
        one = json.loads(json.dumps(batches.state_dict()))
    for rank, new in enumerate(reshard([one], 8, even=None)):
        with loader(rank, 8, 2).batches(state=new, **kw) as batches:
            for _ in batches:
                pass
            end = json.loads(json.dumps(batches.state_dict()))
        assert sum(1 for _ in loader(rank, 8, 2).batches(state=end, **kw)) == 0, rank


def test_ranks_of_empty_shares_many_epochs_ahead_are_resharded(five: str) -> None:
    """A finite run of 1,500 epochs: ranks of empty shares end it at once, 1,498 epochs past
    the others (this session's first bound, 1,024, refused them)."""
    states = []
    for rank in range(8):
        with Loader(five, seed=7, rank=rank, world_size=8, epochs=1500, even=None,
                    workers=0).iter() as documents:  # fmt: skip
            for _ in zip(range(3), documents, strict=False):
                pass
            states.append(json.loads(json.dumps(documents.state_dict())))
    assert max(s["position"]["epoch"] for s in states) == 1500
    assert len(reshard(states, 2)) == 2
