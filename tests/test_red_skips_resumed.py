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
    # The share's 3 bad documents, once: the pass repeating the share after them reads them
    # again, not counted again (session 30: 6, each counted twice).
    assert ended["counters"]["skipped_documents"] == stats.skipped_documents == 3
    with Loader(corpus, **options, epochs=2).iter(state=ended) as it:
        list(it)
        resumed = it.stats
    with Loader(corpus, **options, epochs=2).iter() as it:
        list(it)
        whole = it.stats
    counted = ("documents", "skipped_documents", "repeated_documents", "dropped_documents")
    assert [getattr(resumed, k) for k in counted] == [getattr(whole, k) for k in counted]
    assert whole.skipped_documents == 6  # (3 in each epoch)


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


def test_a_part_never_read_again_keeps_the_skips_of_its_block(tmp_path: Path) -> None:
    """Red team, session 27: a mixture's state inside a block of part ``g`` left that block's
    skips out of its counters (to be counted when the block is read again on resume); a weight
    schedule then set ``g`` to 0, so the resumed run never read it again and ended saying g
    skipped 0 of its 3 (27 of 35 states). Now the state says them apart (``block_skips``) and
    the stream counts them until it reads the block again; every resumed run ends as the
    uninterrupted one, and a run resumed and read no further says them too."""
    g = _corpus(tmp_path / "g", {"g": 20}, {f"g{i}" for i in range(3, 20, 6)}, counted=False)
    h = _corpus(tmp_path / "h", {"h": 30}, set(), counted=False)
    mixture = Mixture({"g": g, "h": h}, {"g": 0.5, "h": 0.5},
                      schedule=[(10, {"g": 0.0, "h": 1.0})])  # fmt: skip
    loader = Loader(mixture, workers=0, seed=0, epochs=1, on_error="skip")
    with loader.iter() as it:
        states = [_json(it.state_dict()) for _ in it]
        whole = it.stats
    assert whole.parts["g"].skipped_documents == 3
    for k, state in enumerate(states):
        with loader.iter(state=state) as it:
            at_start = it.stats
            list(it)
            got = it.stats
        assert got.parts["g"].skipped_documents == 3, k
        assert got.skipped_documents == whole.skipped_documents, k
        if "block_skips" in state["parts"]["g"]:  # (said before the block is read again)
            assert at_start.parts["g"].skipped_documents == 3, k
    assert any("block_skips" in s["parts"]["g"] for s in states)


def test_a_state_inside_a_block_read_again_counts_its_skips_once(tmp_path: Path) -> None:
    """A corpus's state inside a block whose units skipped documents: resumed, the stream says
    the block's skips at once and, reading it again, counts them once (the state after says
    them apart again while inside it, as the uninterrupted run's states do)."""
    corpus = _corpus(tmp_path / "c", {"a": 6, "b": 6}, {"a1", "a4", "b2"})
    options = dict(workers=0, on_error="skip", shuffle=True, shuffle_buffer=12, seed=3)
    with Loader(corpus, **options).iter() as it:
        states = [_json(it.state_dict()) for _ in it]
        whole = it.stats
    inside = [s for s in states if "block_skips" in s]
    assert inside and all(s["block_skips"] == {"skipped_documents": 3} for s in inside)
    for state in inside:
        k = states.index(state)
        with Loader(corpus, **options).iter(state=state) as it:
            assert it.stats.skipped_documents == 3
            again = _json(it.state_dict())
            if k + 1 < len(states):
                next(it)  # (units read count the block's again: reads)
                after, want = _json(it.state_dict()), states[k + 1]
                for one in (after, want):
                    one["counters"].pop("units")
                assert after == want
            list(it)
            assert it.stats.skipped_documents == whole.skipped_documents == 3
        assert again == state


def test_take_ending_at_a_block_s_end_reads_no_further(tmp_path: Path) -> None:
    """``take=N`` whose N-th document is a block's last: the iterator ended without reading
    the next block (red team, session 27: it read it, counting its units and skips, and its
    state after the end said another block than the state after the N-th document)."""
    corpus = _corpus(tmp_path / "c", {"a": 4, "b": 3, "c": 4, "d": 3}, {"a1", "b0", "c2", "d1"})
    options = dict(workers=0, on_error="skip", shuffle=True, shuffle_buffer=0, seed=7)
    with Loader(corpus, **options).iter() as it:
        ends = [k + 1 for k, _ in enumerate(it) if _json(it.state_dict())["position"]["in_block"]
                == 0]  # fmt: skip
    assert len(ends) > 1
    for take in ends[:-1]:
        with Loader(corpus, **options, take=take).iter() as it:
            for _ in range(take):
                next(it)
            after, stats = _json(it.state_dict()), it.stats
            assert list(it) == []
            assert _json(it.state_dict()) == after and it.stats == stats, take


def test_a_pass_repeating_a_share_after_skips_counts_them_once(tmp_path: Path) -> None:
    """The pass that repeats a share's documents after skips reads their units again: it
    counted their bad documents again (the share's 3 said 6), the sum over ranks was more than
    the corpus's bad documents, and ``max_errors`` of the share's skips stopped the run."""
    bad = {"a1", "a3", "b0", "c0", "d0", "d1"}
    corpus = _corpus(tmp_path / "a", {"a": 4, "b": 4, "c": 3, "d": 4}, bad)
    said = []
    for rank in range(2):
        options = dict(rank=rank, world_size=2, even="drop", seed=3, workers=0,
                       on_error="skip", max_errors=3)  # fmt: skip
        with Loader(corpus, **options).iter() as it:
            names = [d.name for d in it]
        assert it.stats.repeated_documents > 0  # (a pass repeating after skips: both ranks')
        assert len(it.stats.skipped) == it.stats.skipped_documents == 3
        said.append(it.stats.skipped_documents)
        assert len(names) == 7  # (15 documents, 1 dropped: 7 a rank)
    assert sum(said) == len(bad)
