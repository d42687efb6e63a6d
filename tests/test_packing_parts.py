"""What packing did per part of a mixture (issue 37): the cut documents and pieces of each part in
``stats.parts[name]`` and in the batches state (``packed_parts``), summing to the rank's, equal
to what the batches' ``sources``, segments and positions say, carried on by a run resumed
anywhere (0 and 2 workers, fixed shapes and a shape schedule) to the uninterrupted run's
figures, and said per part by ``owt stream --pack --mix``. Padding belongs to no part: it is
counted per rank only."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture, reshard
from openwebtext.errors import StateError
from openwebtext.stream.schema import BatchesState
from openwebtext.tokenfiles import megatron_index
from support import Owt

EOT = 256
#: Rows of 11, then 7 (at batch 5), then 15 ids (at batch 12).
SCHEDULE = [(0, 10, 4), (5, 6, 6), (12, 14, 2)]
#: Short documents (never cut by best fit: at most a row), long ones, and some of each.
LENGTHS = {"short": (1, 11, 300), "long": (5, 60, 150), "mid": (1, 30, 200)}


def _tokens(folder: Path, seed: int, low: int, high: int, n: int) -> Corpus:
    """``n`` documents of ``low`` to ``high - 1`` ids, each ending with end-of-text."""
    folder.mkdir()
    ends = np.cumsum(np.random.default_rng(seed).integers(low, high, size=n))
    ids = np.random.default_rng(seed + 1).integers(0, EOT, size=int(ends[-1])).astype("<u2")
    ids[ends - 1] = EOT
    ids.tofile(folder / "train.bin")
    (folder / "train.idx").write_bytes(megatron_index(ends, ids.dtype))
    return Corpus.open_tokens(folder / "train.bin", eot=EOT, unit_tokens=600)


@pytest.fixture(scope="module")
def mixture(tmp_path_factory: pytest.TempPathFactory) -> Mixture:
    folder = tmp_path_factory.mktemp("parts")
    parts = {
        name: _tokens(folder / name, 2 * k + 1, *LENGTHS[name])
        for k, name in enumerate(LENGTHS)
    }
    return Mixture(parts, {"short": 0.4, "long": 0.3, "mid": 0.3})


def _batches(
    mixture: Mixture, packing: str, *, workers: int = 0, schedule: bool = False, state: Any = None
) -> Any:
    loader = Loader(mixture, tokenizer="bytes", workers=workers, seed=1, shuffle_buffer=40,
                    epochs=1)  # fmt: skip
    options: dict[str, Any] = {"packing": "bestfit", "window": 50} if packing == "bestfit" else {}
    shape = {"schedule": SCHEDULE} if schedule else {"seq_len": 10, "batch_size": 4}
    return loader.batches(segments=True, state=state, **shape, **options)


def _per_part(stats: Any) -> dict[str, tuple[int, int, int]]:
    return {name: (s.padding_ids, s.cut_documents, s.pieces) for name, s in stats.parts.items()}


def _oracle(batches: list[Any], names: tuple[str, ...], packing: str) -> dict[str, list[int]]:
    """Each part's ``[cut documents, pieces]`` from the batches alone. Best fit: a run of one
    document in a row is a piece unless it holds the whole document (position 0 to its
    end-of-text), the first piece at position 0. Concat: a row starting at position p > 0 of a
    document cuts it, its first cut when p is at most the length of the row before (two
    pieces; else one more)."""
    counted = {name: [0, 0] for name in names}
    if packing == "bestfit":
        for batch in batches:
            for tokens, segments, positions, sources in zip(*batch, strict=True):
                starts = np.flatnonzero(np.diff(segments, prepend=-1))
                last = np.append(starts[1:], len(segments)) - 1
                for a, z in zip(starts.tolist(), last.tolist(), strict=True):
                    whole = positions[a] == 0 and tokens[z] == EOT
                    if segments[a] == 0 or whole:
                        continue
                    part = counted[names[sources[a]]]
                    part[0] += int(positions[a] == 0)
                    part[1] += 1
        return counted
    rows = [
        (int(p), int(s), len(t) - 1)
        for b in batches
        for t, p, s in zip(b.tokens, b.positions[:, 0], b.sources[:, 0], strict=True)
    ]
    for (_, _, before), (p, source, _) in itertools.pairwise(rows):
        if p > 0:
            part = counted[names[source]]
            first = p <= before
            part[0] += first
            part[1] += 1 + first
    return counted


@pytest.mark.parametrize("schedule", [False, True], ids=["fixed", "scheduled"])
@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_per_part_counts_sum_to_the_ranks_and_agree_with_the_batches(
    mixture: Mixture, packing: str, schedule: bool
) -> None:
    with _batches(mixture, packing, schedule=schedule) as batches:
        got = list(batches)
        stats = batches.stats
        state = BatchesState.from_json(batches.state_dict())
    parts = _per_part(stats)
    assert [padding for padding, _, _ in parts.values()] == [0, 0, 0]  # padding: no part's
    assert sum(cut for _, cut, _ in parts.values()) == stats.cut_documents
    assert sum(pieces for _, _, pieces in parts.values()) == stats.pieces
    oracle = _oracle(got, mixture.names, packing)
    assert {name: [c, p] for name, (_, c, p) in parts.items()} == oracle
    assert sum(1 for _, cut, _ in parts.values() if cut) >= 2  # more than one part cut
    if packing == "bestfit" and not schedule:  # one of at most a row is never cut by best fit
        assert parts["short"] == (0, 0, 0) and stats.padding_ids > 0
    # The state says the same, the parts with nothing cut left out.
    assert isinstance(state.packed_parts, dict)
    saved = {name: (c.cut_documents, c.pieces) for name, c in state.packed_parts.items()}
    assert saved == {name: (c, p) for name, (_, c, p) in parts.items() if c or p}


@pytest.mark.parametrize(
    ("packing", "workers", "schedule"),
    [("concat", 0, False), ("bestfit", 0, False), ("bestfit", 2, False),
     ("concat", 2, True), ("concat", 0, True), ("bestfit", 0, True)],
)  # fmt: skip
def test_a_run_resumed_anywhere_ends_with_the_uninterrupted_runs_per_part_counts(
    mixture: Mixture, packing: str, workers: int, schedule: bool
) -> None:
    with _batches(mixture, packing, schedule=schedule) as batches:
        whole = len(list(batches))
        final = _per_part(batches.stats)
        last = batches.state_dict()
    assert whole > 12 and any(pieces for _, _, pieces in final.values())
    stops = (3, 5, 6, 12, 13, whole - 1) if schedule else (1, whole // 3, whole - 1)
    for stop in stops:
        with _batches(mixture, packing, workers=workers, schedule=schedule) as batches:
            for _ in range(stop):
                next(batches)
            state = json.loads(json.dumps(batches.state_dict()))
        with _batches(mixture, packing, workers=workers, schedule=schedule, state=state) as it:
            assert len(list(it)) == whole - stop
            assert _per_part(it.stats) == final, f"resumed after batch {stop}"
            assert it.state_dict()["packed_parts"] == last["packed_parts"]


def test_a_corpus_state_has_no_per_part_counts_and_a_wrong_part_name_is_refused(
    mixture: Mixture,
) -> None:
    corpus = mixture.corpora["long"]
    with Loader(corpus, tokenizer="bytes", workers=0).batches(10, 4) as batches:
        next(batches)
        assert "packed_parts" not in batches.state_dict()
        assert not hasattr(batches.stats, "parts")
    with _batches(mixture, "concat") as batches:
        for _ in range(5):
            next(batches)
        state = batches.state_dict()
    assert state["packed_parts"]
    state["packed_parts"] = {"nowhere": {"pieces": 2}}
    with pytest.raises(StateError, match=r"packed_parts: name \['nowhere'\], not the mixture"):
        BatchesState.from_json(state)


def test_owt_stream_pack_mix_says_each_parts_cut_documents(
    small_corpus: Path, owt: Owt, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    owt("synth", str(other), "--subsets", "1", "--members", "1", "--docs", "9", "--seed", "1")
    shape = ("--tokenizer", "bytes", "--seq-len", "64", "--batch-size", "2", "--seed", "4")
    mix = ("--mix", f"a={small_corpus}:0.7", "--mix", f"b={other}:0.3")
    ran = owt("stream", *mix, "--pack", "bestfit", "--window", "16", *shape, "-q")
    assert ran.returncode == 0, ran.stderr
    loader = Loader(Mixture({"a": str(small_corpus), "b": str(other)}, {"a": 0.7, "b": 0.3}),
                    workers=0, seed=4, tokenizer="bytes")  # fmt: skip
    with loader.batches(64, 2, packing="bestfit", window=16) as batches:
        for _ in batches:
            pass
        stats = batches.stats
    for name in ("a", "b"):
        part = stats.parts[name]
        said = re.search(rf"^  {name}: .*; ([\d,]+) documents? cut into ([\d,]+) pieces?$",
                         ran.stderr, re.M)  # fmt: skip
        assert said, ran.stderr
        assert tuple(int(g.replace(",", "")) for g in said.groups()) == (
            part.cut_documents, part.pieces
        )  # fmt: skip
    assert stats.parts["a"].pieces > 0


def test_a_resharded_states_per_part_counts_start_at_zero(mixture: Mixture) -> None:
    """As the rank's (``PackingCounts``): a new rank counts what it packs from the reshard on."""
    states = []
    for rank in range(2):
        loader = Loader(mixture, tokenizer="bytes", workers=0, seed=1, rank=rank, world_size=2,
                        even=None, epochs=None)  # fmt: skip
        with loader.batches(10, 4) as batches:
            for _ in range(6):
                next(batches)
            states.append(json.loads(json.dumps(batches.state_dict())))
    assert all(state["packed_parts"] for state in states)
    for rank, state in enumerate(reshard(states, 1)):
        assert "packed_parts" not in state
        loader = Loader(mixture, tokenizer="bytes", workers=0, seed=1, rank=rank, world_size=1,
                        epochs=None)  # fmt: skip
        with loader.batches(10, 4, state=state) as batches:
            assert _per_part(batches.stats) == dict.fromkeys(mixture.names, (0, 0, 0))
            for _ in range(3):
                next(batches)
            stats = batches.stats
        assert sum(s.pieces for s in stats.parts.values()) == stats.pieces > 0
