"""A best-fit state at the start of a pass repeating an evened-out share's documents after skips
(red team, session 27): best fit takes its state at a window's start, before its first document;
where that document is the pass's first, the state said the pass's end (``position.pass_end``)
at ``(block, in_block) = (repeats, 0)``, and the state's own check refused it as "inside no pass
repeating documents" (a state the library wrote, refused on resume). The check now takes a
pass's end there too, pinned to where a pass from there ends. Oracle: every state the run wrote
resumes into the batches the uninterrupted run handed out after it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader

#: Each file's lines: ``ok`` a document, ``bad`` a line skipped (its text not a string).
FILES = {"a": ["ok", "bad", "ok", "ok", "ok"], "b": ["bad", "ok", "ok"],
         "c": ["ok", "ok", "bad", "ok", "bad"], "d": ["bad", "bad"], "e": ["ok", "ok", "ok", "bad"]}


def _corpus(folder: Path) -> Corpus:
    folder.mkdir()
    for name, kinds in FILES.items():
        lines = [json.dumps({"text": f"{name}{k} " + "x" * (3 + 2 * k)}) if kind == "ok"
                 else '{"text": 5}' for k, kind in enumerate(kinds)]  # fmt: skip
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return Corpus.open(folder, on_error="skip")


def _run(loader: Loader, window: int, state: Any = None) -> tuple[list[Any], list[Any]]:
    with loader.batches(16, 2, packing="bestfit", window=window, segments=True,
                        state=state) as it:  # fmt: skip
        out, states = [], [json.loads(json.dumps(it.state_dict()))]
        for batch in it:
            out.append(np.asarray(batch.tokens).tolist())
            states.append(json.loads(json.dumps(it.state_dict())))
    return out, states


#: (even, rank, window, seed): each wrote such a state, refused before the fix.
CASES = [("pad", 0, 3, 3), ("pad", 1, 2, 7), ("drop", 0, 2, 4), ("drop", 1, 4, 7)]


@pytest.mark.parametrize(("even", "rank", "window", "seed"), CASES)
def test_every_best_fit_state_at_a_repeating_pass_s_start_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, even: str, rank: int, window: int, seed: int
) -> None:
    caplog.set_level(logging.ERROR, "openwebtext")  # (evening out's warnings; restored after)
    loader = Loader(_corpus(tmp_path / "c"), workers=0, on_error="skip", shuffle=True,
                    shuffle_buffer=0, seed=seed, tokenizer="bytes", rank=rank, world_size=2,
                    even=even, epochs=2)  # type: ignore[arg-type]  # fmt: skip
    full, states = _run(loader, window)
    for k, state in enumerate(states):
        assert _run(loader, window, state)[0] == full[k:], k
    position = [s["documents"]["position"] for s in states]
    assert any("pass_end" in p and p["in_block"] == 0 for p in position)
