"""A mixture's state where a part stopped at an epoch's end (the run's end, or a part that did
its epochs while another goes on) resumed: its stats are the stats the state was taken with.

The part's stream had counted what reaching the end costs (``drop``'s left-out documents,
``pad``'s repeats, the skips of its last members) and the stats said them, but the state was
taken before (``_Part.mark``: the mark before the epoch end was read), so the resumed run
counted them again: a life of resumes counted the last epoch's drop twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader, Mixture

FIELDS = ("documents", "dropped_documents", "repeated_documents", "skipped_documents",
          "skipped_members")  # fmt: skip


def _part(root: Path, name: str, files: list[list[str | None]]) -> Corpus:
    """A JSON lines corpus of ``files`` (None: a damaged line)."""
    root.mkdir(parents=True)
    for k, docs in enumerate(files):
        lines = ['{"text": 5}' if d is None else json.dumps({"text": d}) for d in docs]
        (root / f"{name}{k:02d}.jsonl").write_text("\n".join(lines) + "\n")
    return Corpus.open(root, on_error="skip")


def _mixture(tmp_path: Path, tail: list[str | None]) -> Mixture:
    a = _part(tmp_path / "a", "a", [[f"a{i}" for i in range(5)], tail])
    b = _part(tmp_path / "b", "b", [[f"b{i}" for i in range(4)]])
    return Mixture({"a": a, "b": b}, {"a": 0.5, "b": 0.5})


def _counts(stats: Any) -> dict[str, Any]:
    each = {p: {f: getattr(s, f) for f in FIELDS} for p, s in stats.parts.items()}
    return {"sum": {f: getattr(stats, f) for f in FIELDS}, "parts": each}


def _json(state: Any) -> Any:
    return json.loads(json.dumps(state))


@pytest.mark.parametrize("even", ["drop", "pad"])
def test_a_finished_mixture_resumed_counts_its_last_epoch_s_losses_once(
    tmp_path: Path, even: str
) -> None:
    """Part a has 7 documents: 2 ranks leave one out (drop) or read one twice (pad) each
    epoch; the rank that counts it, run to its end, then resumed from its final state."""
    mixture = _mixture(tmp_path, ["a5", "a6"])
    for rank in (0, 1):
        loader = Loader(mixture, rank=rank, world_size=2, even=even, epochs=2, seed=3,
                        workers=0, on_error="skip")  # fmt: skip
        with loader.iter() as it:
            out = [d.text for d in it]
            ended, state = _counts(it.stats), _json(it.state_dict())
        with loader.iter(state=state) as it:
            assert _counts(it.stats) == ended
            assert list(it) == []
            assert _counts(it.stats) == ended
        assert len(out) == ended["sum"]["documents"] > 0


def test_the_skips_of_a_part_s_last_member_are_counted_once(tmp_path: Path) -> None:
    """Part a's last member holds a damaged line only: reaching its epoch's end reads it (a
    skip), at the run's end and where part a did its epochs before b (a state taken then)."""
    mixture = _mixture(tmp_path, [None])
    loader = Loader(mixture, epochs=1, shuffle=False, workers=0, on_error="skip")
    states, counts = [], []
    with loader.iter() as it:
        for _ in it:
            states.append(_json(it.state_dict()))
            counts.append(_counts(it.stats))
        states.append(_json(it.state_dict()))
        counts.append(_counts(it.stats))
    assert counts[-1]["parts"]["a"]["skipped_documents"] == 1
    assert len(states) == 10
    for k, (state, said) in enumerate(zip(states, counts, strict=True)):
        with loader.iter(state=state) as it:
            assert _counts(it.stats) == said, k
            rest = sum(1 for _ in it)
            assert _counts(it.stats) == counts[-1], k
        assert said["sum"]["documents"] + rest == counts[-1]["sum"]["documents"] == 9
