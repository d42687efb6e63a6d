"""Behaviours a fifth mutation-testing round (session 28: shape schedules, best fit, mixtures,
the read-ahead and device stages, attention masks; 39 mutants, 9 survived) found unpinned. Each
test kills one observable survivor, named in its docstring by its id and edit; the other four
were shown equivalent (docs/testing.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, Schedule
from openwebtext.loader import Mixture
from openwebtext.stream.packing import best_fit


def test_a_warmup_s_steps_stay_within_its_start_and_end() -> None:
    """A middle stage's length rounded to ``multiple`` may round past ``end``; it is held at
    ``end`` (S7: ``min(end, …)`` dropped gave a step of 128 for ``end=100``), and merged
    into the last, since ``end`` begins at ``batches`` (session 34: it began at 5)."""
    schedule = Schedule.warmup(96, 100, tokens=128, batches=10, stages=3, multiple=64)
    assert schedule.steps == ((0, 96, 1), (10, 100, 1))
    for end in (100, 130, 200):
        steps = Schedule.warmup(96, end, tokens=4 * end, batches=40, stages=5, multiple=64).steps
        assert all(96 <= seq_len <= end for _, seq_len, _ in steps), steps


def test_best_fit_puts_an_empty_item_into_the_open_row_with_least_room() -> None:
    """A row of exactly the capacity is full, not open (F1: ``lengths >= capacity`` ->
    ``>``); a row the loop filled is no longer open (F3: ``if left > 0`` -> ``>= 0``)."""
    assert best_fit([4, 3, 0], 4) == [[0], [1, 2]]
    assert best_fit([3, 1, 3, 0], 4) == [[0, 1], [2, 3]]


def test_a_mixture_s_take_counts_across_set_weights_at_a_document_s_end(tmp_path: Path) -> None:
    """A batch that ends exactly at a document's end (state offset 0), then ``set_weights``:
    the run still reads its ``take`` documents (B3: ``handed + (offset > 0)`` -> ``>= 0``
    counted one of the next batch as read already, and the run ended a document early)."""
    parts = {}
    for name, letter in (("a", "x"), ("b", "y")):
        (tmp_path / name).mkdir()
        lines = "".join(json.dumps({"text": f"{letter}{k:05d}"}) + "\n" for k in range(60))
        (tmp_path / name / "0.jsonl").write_text(lines)  # 6 bytes: 7 ids with the eot
        parts[name] = str(tmp_path / name)

    def run(change_at: int | None) -> tuple[int, int, list[int]]:
        loader = Loader(Mixture(parts, {"a": 0.5, "b": 0.5}), workers=0, seed=1,
                        tokenizer="bytes", take=20, shuffle=False)  # fmt: skip
        offsets, n = [], 0
        with loader.batches(7, 1) as it:  # 7 ids predicted a batch: one document each
            for n, _ in enumerate(it, 1):
                offsets.append(it.state_dict()["offset"])
                if n == change_at:
                    it.set_weights({"a": 0.25, "b": 0.75})
            handed: int = it.state_dict()["documents"]["handed"]
        return n, handed, offsets

    plain = run(None)
    assert plain[:2] == (19, 19) and not any(plain[2])  # (every batch ends at a document's end)
    assert run(3)[:2] == plain[:2]


torch = pytest.importorskip("torch")


def test_a_device_torch_cannot_read_is_said_as_a_value_error() -> None:
    """``to_device(batches, 1.5)``: torch's ``TypeError`` is the documented ``ValueError``
    naming the device (T2: ``TypeError`` dropped from the ``except``)."""
    from openwebtext.torch import to_device

    class Source:
        def __iter__(self) -> Any:
            return iter([np.zeros((2, 3), np.int64)])

        def state_dict(self) -> dict[str, Any]:
            return {}

    for device in (1.5, ["cpu"]):
        said = re.escape(f"device {device!r} is not one torch can copy")
        with pytest.raises(ValueError, match=said):
            to_device(Source(), device)  # type: ignore[arg-type]


def test_varlen_of_one_sequence_says_its_length() -> None:
    """A batch that is one sequence (one row, one document, or padding only): ``max_seqlen``
    is its length, as ``cu_seqlens`` says (K4: ``len(starts) > 1`` -> ``> 2`` gave 0)."""
    from openwebtext.torch import varlen

    for ids, cuts, longest in [([[1] * 8], [0, 8], 8), ([[0] * 4], [0, 4], 4),
                               ([[1, 1, 1, 2, 2, 2, 2, 2]], [0, 3, 8], 5)]:  # fmt: skip
        got = varlen(torch.tensor(ids))
        assert (got.cu_seqlens.tolist(), got.max_seqlen) == (cuts, longest), ids
