"""Concat batches resharded under ``even="drop"`` / ``even="pad"``: a share its skips left short
goes round again, repeating its documents; a rank whose next batch had begun such a repeat
(all its share's slots passed, the state not saying the document is in the next epoch) had its
cut carried into the next epoch's first document, which a new rank then refused mid-run
("a cut of N ids lies past the end of the document it is in") or trimmed of ids never
targets. The cut is in a repeat: a reshard leaves it out with the repeats still owed.

Each life: a tiny JSON lines corpus whose every document is one byte repeated, one damaged
line (skipped, holding its slot), ranks that each take a seeded number of batches, then a
reshard to a seeded world size, again and again; the last phase runs every rank to the end.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader, reshard

EPOCHS = 3
SIZES = (1, 2, 3, 5, 7)


def _corpus(root: Path, seed: int) -> None:
    """6 files of 3..8 documents, each one ASCII byte repeated 3..60 times; one damaged line."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    files = []
    c = 40
    for _ in range(6):
        lines = []
        for _ in range(rng.randint(3, 8)):
            lines.append(json.dumps({"text": chr(c) * rng.randint(3, 60)}))
            c += 1
        files.append(lines)
    f = rng.randrange(len(files))
    files[f][rng.randrange(len(files[f]))] = '{"text": 5}'
    for f, lines in enumerate(files):
        (root / f"a{f:02d}.jsonl").write_text("\n".join(lines) + "\n")


def _life(root: Path, seed: int, phases: int, even: str) -> int:
    """Run the life to its end; the batches handed out."""
    rng = random.Random(seed)
    _corpus(root / "A", seed)
    corpus = Corpus.open(root / "A", on_error="skip")
    world = rng.choice(SIZES)
    states: list = [None] * world
    out = 0
    for phase in range(phases + 1):
        final = phase == phases
        new_states = []
        for r in range(world):
            steps = 10**9 if final else rng.randint(0, 6)
            loader = Loader(
                corpus,
                rank=r,
                world_size=world,
                even=even,
                seed=seed,
                epochs=EPOCHS,
                on_error="skip",
                workers=0,
                tokenizer="bytes",
            )
            with loader.batches(
                seq_len=32, batch_size=1, segments=True, packing="concat", state=states[r]
            ) as it:
                for _, _b in zip(range(steps), it, strict=False):
                    out += 1
                new_states.append(json.loads(json.dumps(it.state_dict())))
        if final:
            break
        world = rng.choice(SIZES)
        states = reshard(new_states, world, even=even)
    return out


@pytest.mark.parametrize(
    ("seed", "phases", "even"), [(9, 5, "drop"), (10, 4, "drop"), (2, 25, "pad")]
)
def test_concat_cut_in_a_repeat_is_not_carried_into_the_next_epoch(
    tmp_path: Path, seed: int, phases: int, even: str
) -> None:
    assert _life(tmp_path, seed, phases, even) > 0
