"""Skips counted once, whatever state a run resumes from (red team of the repeating-pass state):

- the state after a run ended (at the next epoch's start), its epoch's last block cut by the even
  target, counted fewer skipped documents than the run had: the block's skips were taken as read
  again on resume, which never reads it (a resumed second epoch said 9 of 10);
- a batches state whose documents were mid-block counted that block's skips, and the resume
  read the block again and counted them twice (3 for 2);
- ``split="val"`` with ``even`` and ``skip`` on a corpus counted as the run went refused a member
  as "changed since it was counted": a bad line of the other split was counted as this split's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from openwebtext import Corpus, Loader, Mixture
from openwebtext.index import Counts


def _corpus(folder: Path, lines: dict[str, int], bad: set[str], counted: bool = True) -> Corpus:
    """JSON lines files (file ``u`` holds documents ``u0``, ``u1``, …); those in ``bad`` are not
    JSON (skipped)."""
    folder.mkdir()
    for u, k in lines.items():
        (folder / f"{u}.jsonl").write_text("".join(
            "{not json\n" if f"{u}{i}" in bad else json.dumps({"text": f"{u}{i}"}) + "\n"
            for i in range(k)))  # fmt: skip
    corpus = Corpus.open(folder, on_error="skip")
    if not counted:
        return corpus
    return corpus.with_counts(Counts(tuple(lines[Path(u.path).stem] for u in corpus.units)))


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def test_the_state_of_an_ended_epoch_cut_by_its_target_keeps_its_skips(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "a", {"a": 4, "b": 4, "c": 3, "d": 4},
                     {"a1", "a3", "b0", "c0", "d0", "d1"})  # fmt: skip
    options = dict(rank=0, world_size=2, even="pad", shuffle=True, shuffle_buffer=2, seed=21,
                   workers=0, on_error="skip")  # fmt: skip
    with Loader(corpus, **options, epochs=1).iter() as it:
        list(it)
        ended, stats = _json(it.state_dict()), it.stats
    assert ended["position"] == {"epoch": 1, "block": 0, "in_block": 0}
    assert ended["counters"]["skipped_documents"] == stats.skipped_documents == 6
    with Loader(corpus, **options, epochs=2).iter(state=ended) as it:
        list(it)
        resumed = it.stats
    with Loader(corpus, **options, epochs=2).iter() as it:
        list(it)
        whole = it.stats
    counted = ("documents", "skipped_documents", "repeated_documents", "dropped_documents")
    assert [getattr(resumed, k) for k in counted] == [getattr(whole, k) for k in counted]
    assert whole.skipped_documents == 10


def test_a_mixture_part_s_state_past_its_epoch_end_keeps_its_skips(tmp_path: Path) -> None:
    a = _corpus(tmp_path / "a", {"a": 4, "b": 4, "c": 3, "d": 4},
                {"a1", "a3", "b0", "c0", "d0", "d1"})  # fmt: skip
    b = _corpus(tmp_path / "b", {"k": 4, "l": 2, "m": 2}, set())
    loader = Loader(Mixture({"a": a, "b": b}, {"a": 0.3, "b": 0.5},
                            options={"a": {"shuffle_buffer": 2}}),
                    rank=0, world_size=2, even="pad", shuffle=True, seed=21, workers=0,
                    on_error="skip", epochs=2)  # fmt: skip

    def run(state: Any = None) -> tuple[list[Any], list[Any], int]:
        with loader.iter(state=state) as it:
            out, states = [], [_json(it.state_dict())]
            for doc in it:
                out.append((doc.source, doc.text))
                states.append(_json(it.state_dict()))
            return out, states, it.stats.parts["a"].skipped_documents

    full, states, skipped = run()
    for at, state in enumerate(states):
        rest, _, resumed = run(state)
        assert rest == full[at:] and resumed == skipped, (at, state["parts"]["a"]["position"])


def test_batches_resumed_mid_block_count_its_skips_once(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "a", {"a": 3, "b": 3, "c": 2, "d": 4, "e": 3, "f": 1},
                     {"b2", "e0", "f0"})  # fmt: skip
    loader = Loader(corpus, rank=2, world_size=3, even="drop", shuffle=True, shuffle_buffer=5,
                    seed=50, workers=0, on_error="skip", epochs=1, tokenizer="bytes")  # fmt: skip

    def run(state: Any = None) -> tuple[list[Any], list[Any], int]:
        with loader.batches(8, 1, state=state) as batches:
            out, states = [], [_json(batches.state_dict())]
            for batch in batches:
                out.append(np.asarray(batch).tolist())
                states.append(_json(batches.state_dict()))
            return out, states, batches.stats.skipped_documents

    full, states, skipped = run()
    assert skipped and any(s["documents"]["position"]["in_block"] for s in states)
    for at, state in enumerate(states):
        rest, _, resumed = run(state)
        assert rest == full[at:] and resumed == skipped, (at, state["documents"]["position"])


def test_another_split_s_bad_line_is_not_this_split_s(tmp_path: Path) -> None:
    """Counted as the run goes (no counts file): each member read is checked against the
    counts; the val run counted a bad line of train as one of its own, and stopped."""
    corpus = _corpus(tmp_path / "a", {"a": 8, "b": 4, "c": 5, "d": 3}, {"a3", "a6"},
                     counted=False)  # fmt: skip
    options = dict(world_size=2, even="pad", val_fraction=0.3, on_error="skip", workers=0,
                   seed=0)  # fmt: skip
    names = {}
    for split in ("val", "train"):
        names[split] = []
        for rank in range(2):
            with Loader(corpus, rank=rank, split=split, **options).iter() as it:
                names[split] += [doc.text for doc in it]
                assert it.stats.skipped_documents <= 2
    assert not set(names["val"]) & set(names["train"])
    assert set(names["val"]) | set(names["train"]) == {
        f"{u}{i}" for u, k in {"a": 8, "b": 4, "c": 5, "d": 3}.items() for i in range(k)
    } - {"a3", "a6"}


def test_a_position_edited_to_its_block_s_end_is_a_bad_state(tmp_path: Path) -> None:
    """A state is never at a block's end (``Mark.position`` writes the next block's start):
    ``in_block`` edited there (or the epoch edited, the block now of that many documents) was
    taken, and the rank said it "read no document in a whole pass over its shard", blaming the
    corpus."""
    from openwebtext import StateError

    corpus = _corpus(tmp_path / "a", {"a": 1, "b": 3, "c": 5, "d": 8, "e": 5, "f": 3, "g": 1},
                     {"c0", "c1", "c2", "c3", "c4", "d0", "d4", "e2", "f1", "g0"})  # fmt: skip
    loader = Loader(corpus, rank=3, world_size=4, even="drop", shuffle=True, shuffle_buffer=3,
                    seed=29, workers=0, on_error="skip", epochs=2)  # fmt: skip
    with loader.iter() as it:
        states = [_json(it.state_dict())]
        states += [_json(it.state_dict()) for _ in it]
    for field, value in (("in_block", 2), ("epoch", 1)):
        edited = _json(states[3])
        assert edited["position"]["in_block"] == 1 and edited["position"]["epoch"] == 0
        edited["position"][field] = value
        try:
            with loader.iter(state=edited) as it:
                list(it)
        except StateError as exc:
            assert exc.field == "position.in_block", str(exc)
        else:
            raise AssertionError(f"{field}={value} taken")
