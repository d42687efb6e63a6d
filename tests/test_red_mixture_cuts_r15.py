"""Concat batches resharded again and again (``_life`` of test_red_mixture_cuts_r14, and a
corpus's alone): a document cut across a checkpoint goes on from the id after its last target.

- a mixture's part's share of an epoch that held no document led its rank's stream into its
  next epoch's first document, cut (``Rest.lead``, ``following``); the next reshard carried that
  rank's cut into that epoch (``rest.next_section``) and did not say its share led there
  (``Level.led``, ``Carry.led``): the ids it had left out were counted one too many, and the
  share of the reshard after that led with it lost one id (no damaged document: seed 124).
- a share whose first slots held documents skipped for their content, which no state names
  (an old rank's last ones, or the whole share of the epoch before), before a document cut
  across the checkpoint: that document was the first the rank handed out, yet it went on from
  the id after its last target, which no row then targeted (one id lost), a corpus's as a
  mixture's part's (``RestHandOut._leads_with``); resharded again inside it, its share's
  state said the slots skipped before it (``cut_slots``) and the reshard counted its ids left
  out as if it had not led (``dealing.applied_trim``): one id lost again.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader, reshard
from test_red_mixture_cuts_r14 import EPOCHS, SIZES, _corpus, _life, _Pieces


def _corpus_life(root: Path, seed: int, phases: int, bad: int, even: str | None = None
                 ) -> list[tuple[str, int, list[int]]]:  # fmt: skip
    """``_life`` of part A alone, a corpus: the pieces that did not go on where cut."""
    rng = random.Random(seed)
    _corpus(root / "A", "a", 6, seed, bad, 3, 8, 40)
    corpus = Corpus.open(root / "A", on_error="skip")
    pieces = _Pieces()
    world = rng.choice(SIZES)
    states: list = [None] * world
    for phase in range(phases + 1):
        final = phase == phases
        new_states = []
        for r in range(world):
            steps = 10**9 if final else rng.randint(0, 6)
            loader = Loader(corpus, rank=r, world_size=world, even=even, seed=seed,
                            epochs=EPOCHS, on_error="skip", workers=0, tokenizer="bytes")
            with loader.batches(seq_len=32, batch_size=1, segments=True, packing="concat",
                                state=states[r]) as it:  # fmt: skip
                for _, b in zip(range(steps), it, strict=False):
                    pieces.row(b.tokens[0].tolist(), b.segment_ids[0].tolist(),
                               b.positions[0].tolist())  # fmt: skip
                new_states.append(json.loads(json.dumps(it.state_dict())))
        if final:
            break
        world = rng.choice(SIZES)
        states = reshard(new_states, world, even=even)
    return pieces.gone


def test_a_cut_carried_from_an_empty_share_that_led_goes_on_where_it_was_cut(
    tmp_path: Path,
) -> None:
    assert _life(tmp_path, 124, 9, 0, "drop") == []


@pytest.mark.parametrize(
    ("seed", "phases", "bad", "even", "schedule"),
    [
        (119, 3, 2, None, False),  # an old rank's last slot, skipped, before '>' (cut)
        (147, 1, 1, "pad", True),
    ],
)
def test_a_part_s_cut_document_after_skipped_slots_leads(
    tmp_path: Path, seed: int, phases: int, bad: int, even: str | None, schedule: bool
) -> None:
    assert _life(tmp_path, seed, phases, bad, even, schedule) == []


@pytest.mark.parametrize(
    ("seed", "phases", "bad", "even"),
    [
        (101, 1, 3, None),  # an old rank's last slot, skipped, before '4' (cut)
        (105, 1, 2, "drop"),
        (101, 2, 3, None),  # resharded again inside '4': its cut_slots say it led (applied_trim)
        (153, 3, 2, None),
        (123, 7, 3, None),  # the skipped slots and '/' in spans apart
    ],
)
def test_a_corpus_s_cut_document_after_skipped_slots_leads(
    tmp_path: Path, seed: int, phases: int, bad: int, even: str | None
) -> None:
    assert _corpus_life(tmp_path, seed, phases, bad, even) == []
