"""Behaviour that seeded bugs of round 14 (docs/testing.md) changed with no test failing: each
test here pins one, and was run against its mutant (named by its ID). Round 14 took the code
session 37 changed: a mark's config, the early signals of ``owt``, ``mixing.check_weights``, and
the cut of a mixture's concat batches resharded (``stream/carried.py``, ``stream/rest.py``,
``stream/dealing.py``, ``stream/batches.py``, ``stream/mixbatches.py``, ``stream/mixture.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader, Mixture, reshard


def _skipping(root: Path, first: str | None = "Y" * 5) -> Path:
    """``first`` (a file of its own, if any), then a file of one damaged line (a block of none
    but a skipped slot), then X (40 bytes) and Z; unshuffled, X lies one slot past the mark
    before the skipped one."""
    a = root / "A"
    a.mkdir(parents=True)
    if first is not None:
        (a / "a0.jsonl").write_text(json.dumps({"text": first}) + "\n")
    (a / "a1.jsonl").write_text('{"text": 5}\n')
    (a / "a2.jsonl").write_text(
        "".join(json.dumps({"text": c}) + "\n" for c in ("X" * 40, "ZZZZZ"))
    )
    return a


def _loader(corpus: Any, **options: Any) -> Loader:
    return Loader(corpus, seed=0, shuffle=False, on_error="skip", workers=0, tokenizer="bytes",
                  **{"epochs": 1, **options})  # fmt: skip


def _said(state: dict[str, Any]) -> dict[str, Any]:
    return {k: state.get(k) for k in ("offset", "batches", "cut_slots", "cut_next")}


# -- stream/carried.py ---------------------------------------------------------------------------


def test_a_cut_in_the_next_epoch_past_skipped_slots_says_both(tmp_path: Path) -> None:
    """C5: ``cut_slot`` took the slots of the mark before from those of a document in the next
    epoch (counted from that epoch's start): a state inside X of epoch 1, one slot past the
    skipped one that begins the epoch, said ``cut_next`` but no ``cut_slots`` (a reshard then
    cut the skipped slot)."""
    corpus = Corpus.open(_skipping(tmp_path, first=None), on_error="skip")
    said = []
    with _loader(corpus, epochs=2).batches(seq_len=8, batch_size=1) as it:
        for _ in range(7):
            next(it)
            said.append(_said(json.loads(json.dumps(it.state_dict()))))
    assert said[0] == {"offset": 8, "batches": 1, "cut_slots": 1, "cut_next": None}
    assert said[5] == {"offset": 1, "batches": 6, "cut_slots": 1, "cut_next": 1}  # (epoch 1's X)
    assert said[6] == {"offset": 9, "batches": 7, "cut_slots": 1, "cut_next": 1}


# -- stream/batches.py ---------------------------------------------------------------------------


def test_a_resharded_run_s_state_before_its_first_batch_keeps_its_cut(tmp_path: Path) -> None:
    """B10: the fields of the start state kept by a state taken before any batch were left
    out for a state of a resharded run (``_cut_where``): a run resumed inside X, in a resharded
    epoch's rest, said no ``cut_slots`` before its first batch."""
    loader = _loader(Corpus.open(_skipping(tmp_path), on_error="skip"))
    with loader.batches(seq_len=8, batch_size=1) as it:
        (resharded,) = reshard([json.loads(json.dumps(it.state_dict()))], 1)
    with loader.batches(seq_len=8, batch_size=1, state=resharded) as it:
        for _ in range(2):
            next(it)
        state = json.loads(json.dumps(it.state_dict()))
    assert state["documents"].get("reshard") and _said(state)["cut_slots"] == 1
    with loader.batches(seq_len=8, batch_size=1, state=state) as again:
        assert json.loads(json.dumps(again.state_dict())) == state
        next(again)


# -- stream/rest.py ------------------------------------------------------------------------------


def _xs(b: Any, letter: str) -> list[int]:
    """The positions in ``letter``'s document of the ids the batch's row targets."""
    return [int(p) for t, p in zip(b.tokens[0, 1:], b.positions[0, 1:], strict=True)
            if t == ord(letter)]  # fmt: skip


def _x_before(loader: Loader, batches: int) -> tuple[list[int], dict[str, Any]]:
    """The positions in X's document of the ids the first ``batches`` rows targeted, and the
    state after them (as JSON carries it)."""
    targets = []
    with loader.batches(seq_len=8, batch_size=1, segments=True) as it:
        for _ in range(batches):
            targets += _xs(next(it), "X")
        return targets, json.loads(json.dumps(it.state_dict()))


def _targets_of(loader: Loader, state: Any, letter: str) -> list[int]:
    """The positions in ``letter``'s document of the ids rows targeted (from ``state`` on)."""
    out = []
    with loader.batches(seq_len=8, batch_size=1, segments=True, state=state) as it:
        for b in it:
            out += _xs(b, letter)
    return out


def test_a_share_that_begins_with_the_slot_skipped_before_its_cut_goes_on(tmp_path: Path) -> None:
    """R3: the slots of documents skipped before a cut's document, where a share begins with
    them, were not said (``Rest.gapped``): resharded to one rank from inside X (one slot past
    the skipped one), X went on one id late (its id 10, awaited, never a target)."""
    corpus = Corpus.open(_skipping(tmp_path), on_error="skip")
    loader = _loader(corpus)
    targets, state = _x_before(loader, 2)
    assert _said(state) == {"offset": 10, "batches": 2, "cut_slots": 1, "cut_next": None}
    (again,) = reshard([state], 1, even=None)
    assert sorted(targets + _targets_of(loader, again, "X")) == list(range(40))


# -- defects these mutants showed, fixed in session 37 (each fails against main before) ------


def test_a_state_before_the_first_batch_at_offset_0_keeps_its_cut_slots(tmp_path: Path) -> None:
    """B5 (a defect it showed): the first batch ends on X's first id (a target), one slot past the
    skipped one: its state says offset 0 and ``cut_slots`` 1; a run resumed from it says
    the same state before its first batch (as r14 promises at any offset)."""
    loader = _loader(Corpus.open(_skipping(tmp_path, first="Y" * 7), on_error="skip"))
    with loader.batches(seq_len=8, batch_size=1) as it:
        next(it)
        state = json.loads(json.dumps(it.state_dict()))
    assert _said(state) == {"offset": 0, "batches": 1, "cut_slots": 1, "cut_next": None}
    with loader.batches(seq_len=8, batch_size=1, state=state) as again:
        assert json.loads(json.dumps(again.state_dict())) == state


@pytest.mark.parametrize("take", [3, 5])
def test_set_weights_on_a_document_s_first_id_under_take_ends_where_it_would(
    tmp_path: Path, take: int
) -> None:
    """M2, M3 (a defect they showed): each batch of 8 ids ends on the next document's first id;
    ``set_weights`` to the same weights after the first batch hands out the same batches, up
    to the same end under ``take``."""
    for part, letters in (("A", "ABCDEFGH"), ("B", "bcdefghi")):
        (tmp_path / part).mkdir()
        (tmp_path / part / "x.jsonl").write_text(
            "".join(json.dumps({"text": c * 7}) + "\n" for c in letters)
        )
    mixture = Mixture({p: Corpus.open(tmp_path / p) for p in "AB"}, {"A": 0.5, "B": 0.5})

    def rows(at: int) -> list[list[int]]:
        out = []
        with _loader(mixture, take=take).batches(seq_len=8, batch_size=1) as it:
            for i in range(100):
                if i == at:
                    it.set_weights({"A": 0.5, "B": 0.5})
                b = next(it, None)
                if b is None:
                    break
                out.append(b[0].tolist())
        return out

    assert rows(1) == rows(-1)


def test_a_part_s_share_that_begins_with_the_slot_skipped_before_its_cut_leads(
    tmp_path: Path,
) -> None:
    """R3, R6: a mixture's part A whose new share begins with the slot skipped before X's (the
    document its next batch starts in, ``cut_slots`` 1) leads the mixture (``Rest.lead``
    looks past those slots, ``Rest.gapped``/``heads``): resharded to one rank, X goes on
    from the id after its last target (it went on one id late: that one never a target)."""
    a = _skipping(tmp_path)
    b = tmp_path / "B"
    b.mkdir()
    (b / "b.jsonl").write_text("".join(json.dumps({"text": c * 10}) + "\n" for c in "bcdefgh"))
    mixture = Mixture({"A": Corpus.open(a, on_error="skip"), "B": Corpus.open(b, on_error="skip")},
                      {"A": 0.5, "B": 0.5})  # fmt: skip
    loader = _loader(mixture)
    before, state = _x_before(loader, 3)
    assert state["documents"]["next"] == 0 and _said(state)["cut_slots"] == 1  # (inside X)
    (again,) = reshard([state], 1, even=None)
    after = _targets_of(loader, again, "X")
    assert before == list(range(max(before) + 1))
    assert after[: 40 - len(before)] == list(range(len(before), 40))


def _resharded_again(tmp_path: Path, mixed: bool, takes: tuple[int, ...]) -> list[int]:
    """The positions of X's targets in order: a run resharded to one rank at its start, then
    for each of ``takes`` resumed for that many batches and resharded to one rank again, then
    run to its end (part A of a mixture with B if ``mixed``)."""
    corpus: Any = Corpus.open(_skipping(tmp_path), on_error="skip")
    if mixed:
        b = tmp_path / "B"
        b.mkdir()
        (b / "b.jsonl").write_text("".join(json.dumps({"text": c * 10}) + "\n" for c in "bcdefgh"))
        corpus = Mixture({"A": corpus, "B": Corpus.open(b, on_error="skip")}, {"A": 0.5, "B": 0.5})
    loader = _loader(corpus)
    with loader.batches(seq_len=8, batch_size=1, segments=True) as it:
        (state,) = reshard([json.loads(json.dumps(it.state_dict()))], 1, even=None)
    got: list[int] = []
    for n in takes:
        with loader.batches(seq_len=8, batch_size=1, segments=True, state=state) as it:
            for _ in range(n):
                b = next(it)
                got += _xs(b, "X")
            said = json.loads(json.dumps(it.state_dict()))
        assert said["offset"] and said.get("cut_slots") == 1  # (inside X, past the skipped slot)
        (state,) = reshard([said], 1, even=None)
    return got + _targets_of(loader, state, "X")


@pytest.mark.parametrize(("mixed", "takes"), [(False, (2,)), (True, (3,)), (False, (2, 1)),
                                              (True, (3, 1))])  # fmt: skip
def test_a_cut_past_skipped_slots_goes_on_resharded_again(
    tmp_path: Path, mixed: bool, takes: tuple[int, ...]
) -> None:
    """R15 (twice), R13 and D1 (thrice): resharded again, a level's share that begins with the
    slot skipped before its cut's document says so (``Rest.gapped`` of ``_levels``), and the
    ids of that document its rank left out are counted from it (``applied_trim``, ``heads``):
    X went on one id late (one id never a target)."""
    assert _resharded_again(tmp_path, mixed, takes)[:40] == list(range(40))


def test_two_ranks_cut_documents_resharded_into_one_share_go_on_once(tmp_path: Path) -> None:
    """D5: ``heads`` took a slot no cut's skipped slots precede as heading any share that
    begins before it: two ranks each inside a document, resharded to one rank (one share of
    both rests), the second rank's document's awaited id was targeted twice."""
    a = tmp_path / "A"
    a.mkdir()
    for f in range(4):
        (a / f"a{f}.jsonl").write_text(
            "".join(json.dumps({"text": chr(65 + 4 * f + k) * 30}) + "\n" for k in range(4))
        )
    targets: dict[tuple[int, int], int] = {}

    def add(b: Any) -> None:
        for t, p in zip(b.tokens[0, 1:].tolist(), b.positions[0, 1:].tolist(), strict=True):
            if t != 256:
                targets[t, p] = targets.get((t, p), 0) + 1

    states = []
    for r in range(2):
        loader = _loader(Corpus.open(a), rank=r, world_size=2, even=None)
        with loader.batches(seq_len=8, batch_size=1, segments=True) as it:
            for _ in range(6):
                add(next(it))
            states.append(json.loads(json.dumps(it.state_dict())))
    assert all(s["offset"] for s in states)  # (each inside a document)
    (state,) = reshard(states, 1, even=None)
    with _loader(Corpus.open(a), even=None).batches(seq_len=8, batch_size=1, segments=True,
                                                    state=state) as it:  # fmt: skip
        for b in it:
            add(b)
    assert [k for k, n in targets.items() if n > 1] == []


# -- mixing.check_weights, interrupts ------------------------------------------------------------


def test_a_signalling_nan_weight_is_said_with_its_part() -> None:
    """W5: ``float`` of ``Decimal('sNaN')`` raises ValueError, not OverflowError: it was said
    as numpy's bare "cannot convert signaling NaN to float", not as a weight of its part."""
    from decimal import Decimal

    from openwebtext.mixing import check_weights

    with pytest.raises(ValueError, match=r"finite number >= 0, not Decimal\('sNaN'\) \(part 'a'\)"):
        check_weights([Decimal("sNaN"), 1.0], 2, ["a", "b"])


def test_a_signal_that_came_early_ends_one_command_only(small_corpus: Path) -> None:
    """I2: the signal noted while ``owt`` loaded was raised and kept (``raise_early`` did not
    take it): every later command in the process (``cli.main`` in-process) ended as
    interrupted at once."""
    import signal

    from openwebtext import cli, interrupts

    interrupts.came_early(signal.SIGTERM)
    try:
        assert cli.main(["stream", str(small_corpus), "-q", "--take", "1"]) == 143
        assert cli.main(["stream", str(small_corpus), "-q", "--take", "1"]) == 0
    finally:
        interrupts._early.clear()


def test_sigint_and_sigterm_both_while_owt_loads_end_it_as_terminated(small_corpus: Path) -> None:
    """O1: of SIGINT and SIGTERM both held while the package loaded, the first (SIGINT) was
    handed on, not SIGTERM: 130 and "interrupted" where ``openwebtext_cli`` says 143."""
    import signal
    import subprocess
    import time

    from test_cli_hostile import kill_group, start
    from test_cli_interrupt_early import ENTRY, _loading

    proc = start([*ENTRY, "stream", str(small_corpus), "--epochs", "0", "-q"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _loading(proc.pid, "_multiarray_umath") and proc.poll() is None:
            assert time.monotonic() < deadline, "numpy never loaded"
            time.sleep(0.002)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    text = err.decode(errors="replace")
    assert proc.returncode == 143 and "terminated" in text and "Traceback" not in text, text


def test_a_state_before_any_batch_resumes_where_its_first_document_follows_a_skip(
    tmp_path: Path,
) -> None:
    """B9: a state's cut was checked at offset 0 too (no document begun): a state taken before
    any batch, of a run whose first document lies past a skipped slot, was refused
    (``cut_slots``: "the state says {}")."""
    loader = _loader(Corpus.open(_skipping(tmp_path, first=None), on_error="skip"))
    with loader.batches(seq_len=8, batch_size=1) as it:
        state = json.loads(json.dumps(it.state_dict()))
    with loader.batches(seq_len=8, batch_size=1, state=state) as it:
        assert next(it).tolist() == [[88] * 9]
