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

from pathlib import Path

import pytest

from test_red_mixture_cuts_r14 import _life


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
    assert _life(tmp_path, seed, phases, bad, even, alone=True) == []
