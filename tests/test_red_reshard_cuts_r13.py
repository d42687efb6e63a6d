"""Concat batches resharded again and again: every id is a target at most once per epoch
(even=None), and one run's states are never refused as "states of different reshards".

Each life: a tiny JSON lines corpus whose every document is one byte repeated (so under
tokenizer="bytes" an id names its document), one damaged line (skipped, holding its slot),
ranks that each take a seeded number of batches, then a reshard to a seeded world size, again
and again; the last phase runs every rank to the end of the run (3 epochs).

- seed 1, 5 phases: a document cut across a checkpoint in the next epoch's first document
  (carried) was handed out by a share that did not lead its rank's stream (it had handed out
  the epoch before's share first); resharded again, its cut was read as if it had led, one id
  targeted twice (``Reshard.follows``, ``Level.follows``).
- seed 2, 8 phases: the document the next batch began in lay after the slot of a skipped
  document; its cut was keyed to that slot and dropped, 32 ids targeted twice
  (``BatchesState.cut_slots``/``cut_next``, ``OldRank.gap``, ``Level.gaps``).
- seed 16: the states of one run refused (a level that only carries cuts into the next epoch,
  which the ranks still in the epoch before do not know).
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader, reshard

EPOCHS = 3
SIZES = (1, 2, 3, 5, 7)


def _corpus(root: Path, seed: int) -> dict[str, str]:
    """6 files of 3..8 documents, each one ASCII byte repeated 3..60 times; one damaged line."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    docs: dict[str, str] = {}
    files = []
    c = 40
    for _ in range(6):
        lines = []
        for _ in range(rng.randint(3, 8)):
            text = chr(c) * rng.randint(3, 60)
            c += 1
            docs[text[0]] = text
            lines.append(json.dumps({"text": text}))
        files.append(lines)
    f = rng.randrange(len(files))
    k = rng.randrange(len(files[f]))
    docs.pop(json.loads(files[f][k])["text"][0], None)
    files[f][k] = '{"text": 5}'
    for f, lines in enumerate(files):
        (root / f"a{f:02d}.jsonl").write_text("\n".join(lines) + "\n")
    return docs


def _life(
    root: Path, seed: int, phases: int, even: str | None = None
) -> dict[str, tuple[int, int]]:
    """Run the life (to its end: a refusal raises); the ids targeted more often than their
    document's length times the epochs, by document (under ``pad``/``drop``: repeats too)."""
    rng = random.Random(seed)
    docs = _corpus(root / "A", seed)
    corpus = Corpus.open(root / "A", on_error="skip")
    targets: collections.Counter[int] = collections.Counter()
    world = rng.choice(SIZES)
    states: list = [None] * world
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
                for _, b in zip(range(steps), it, strict=False):
                    targets.update(b.tokens[:, 1:][b.segment_ids[:, 1:] > 0].tolist())
                new_states.append(json.loads(json.dumps(it.state_dict())))
        if final:
            break
        world = rng.choice(SIZES)
        states = reshard(new_states, world, even=even)
    return {
        d: (targets[ord(d)], EPOCHS * len(t))
        for d, t in docs.items()
        if targets[ord(d)] > EPOCHS * len(t)
    }


@pytest.mark.parametrize(("seed", "phases"), [(1, 5), (2, 8), (16, 25)])
def test_concat_cuts_resharded_again_target_each_id_once(
    tmp_path: Path, seed: int, phases: int
) -> None:
    assert _life(tmp_path, seed, phases) == {}


@pytest.mark.parametrize(
    ("seed", "phases", "even"), [(9, 5, "drop"), (10, 4, "drop"), (2, 25, "pad")]
)
def test_concat_cut_in_a_repeat_is_not_carried_into_the_next_epoch(
    tmp_path: Path, seed: int, phases: int, even: str
) -> None:
    """Under ``drop``/``pad`` a share its skips left short goes round again, repeating its
    documents; a rank whose next batch had begun such a repeat (all its slots passed, the state
    not saying the document is in the next epoch) had its cut carried into the next epoch's
    first document, which a new rank refused mid-run ("a cut of N ids lies past the end of the
    document it is in") or trimmed of ids never targets. The life now runs to its end."""
    _life(tmp_path, seed, phases, even)


def test_a_state_s_cut_slots_are_checked_where_its_document_is_read(small_corpus: Path) -> None:
    """Only a reshard reads ``cut_slots``/``cut_next`` (where the document a batch starts in
    lies past skipped slots); a state saying otherwise than its documents is refused on resume,
    as ``offset`` is, not cut elsewhere later by a reshard."""
    from openwebtext import StateError

    loader = Loader(small_corpus, workers=0, seed=0, tokenizer="bytes")
    with loader.batches(seq_len=64, batch_size=2) as batches:
        for _ in range(3):
            next(batches)
        state = json.loads(json.dumps(batches.state_dict()))
    assert state["offset"] and "cut_slots" not in state
    with loader.batches(seq_len=64, batch_size=2, state=state) as again:
        next(again)
    bad = {**state, "cut_slots": 2}
    with (
        pytest.raises(StateError) as said,
        loader.batches(seq_len=64, batch_size=2, state=bad) as it,
    ):
        next(it)
    assert said.value.field == "cut_slots"
