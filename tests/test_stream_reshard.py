"""Resuming on another world size (issue 21): ``openwebtext.reshard`` turns the states of W
ranks, each taken at its own point, into states of W' ranks that together hand out the rest of
the epoch exactly once (minus what ``drop`` leaves out, plus what ``pad`` repeats, both
counted), with equal counts per new rank; then the new world's own epochs. Documents and
packed batches (a document cut across the checkpoint goes on from its offset)."""

from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, StateError, reshard
from openwebtext.plan import advance
from openwebtext.stream import count_documents
from openwebtext.stream.schema import BATCHES_FORMAT
from openwebtext.stream.spans import cut_share
from resumable import check_save_load

#: Where each of the 4 old ranks stops (documents, or batches), all different.
POINTS = (0, 3, 7, 11)
BATCH_POINTS = (0, 1, 3, 2)
S, B = 16, 2


@pytest.fixture(scope="module")
def varied(tmp_path_factory: pytest.TempPathFactory, small_corpus: Path) -> Path:
    """The small corpus, counted for a ``train`` split that keeps a different number of
    documents of every member (so ranks' shards and blocks differ)."""
    path = Path(shutil.copytree(small_corpus, tmp_path_factory.mktemp("varied") / "c"))
    corpus = Corpus.open(path)
    corpus.save_counts(count_documents(corpus, workers=1, splits=((0.0005, 2357), (0.2, 7))))
    return path


def options(rule: str, world: int, rank: int, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        seed=3, shuffle_buffer=30, split="train", val_fraction=0.2, val_seed=7, workers=0,
        rank=rank, world_size=world, even=rule,
    )  # fmt: skip  # even on one rank too: a reshard keeps the run's rule
    return {**base, **extra}


def read(
    corpus: Path, state: dict[str, Any] | None, n: int | None = None, **opts: Any
) -> tuple[list[str], dict[str, Any], Any]:
    """Names of up to ``n`` documents, the state after them (through JSON), the stats."""
    with Loader(corpus, **opts).iter(state=state) as it:
        names = []
        for doc in it if n != 0 else ():
            names.append(doc.name)
            if n is not None and len(names) >= n:
                break
        return names, json.loads(json.dumps(it.state_dict())), it.stats


def old_world(corpus: Path, rule: str) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """The epoch's documents over 4 ranks, those handed out before the ranks stop at
    ``POINTS``, and the 4 states."""
    epoch = [name for r in range(4) for name in read(corpus, None, **options(rule, 4, r))[0]]
    delivered, states = [], []
    for r, point in enumerate(POINTS):
        names, state, _ = read(corpus, None, point, **options(rule, 4, r))
        delivered += names
        states.append(state)
    return epoch, delivered, states


@pytest.mark.parametrize("rule", ["drop", "pad"])
def test_documents_exactly_once_on_3_6_and_1_ranks(rule: str, varied: Path) -> None:
    epoch, delivered, states = old_world(varied, rule)
    evened = 0  # documents left out or repeated to keep the new ranks even
    for new_world in (3, 6, 1):
        new = reshard(list(reversed(states)), new_world)  # any order
        shares, dropped, repeated = [], 0, 0
        for r in range(new_world):
            names, _, stats = read(varied, new[r], **options(rule, new_world, r))
            shares.append(names)
            dropped += stats.dropped_documents
            repeated += stats.repeated_documents
        assert len({len(share) for share in shares}) == 1, [len(s) for s in shares]
        got = collections.Counter(delivered + [n for share in shares for n in share])
        want = collections.Counter(epoch)
        assert sum((want - got).values()) == dropped  # left out by drop, counted
        assert sum((got - want).values()) == repeated  # repeated by pad, counted
        assert (repeated if rule == "drop" else dropped) == 0
        evened += dropped + repeated
    assert evened > 0


@pytest.mark.parametrize("rule", ["drop", "pad"])
def test_what_the_old_shares_left_out_or_repeated_is_counted_once(rule: str, varied: Path) -> None:
    """Against the corpus, not the old shares: what the old ranks' evened-out shares left out
    (``drop``) or read twice (``pad``) is counted once, by the old rank that finished its
    epoch (``None``: read past its end) or else by the new ranks' last, as an unresharded run
    counts it; also a share stopped at its last document (``all``: not yet past the epoch's
    end), and a reshard again before the last new rank began its rest."""
    corpus = collections.Counter(read(varied, None, **options(None, 1, 0))[0])  # type: ignore
    for world, new_world, stops in [(3, 2, (2, None, 4)), (4, 3, (0, "all", 1, None)),
                                    (3, 3, (None, None, "all"))]:  # fmt: skip
        got: collections.Counter[str] = collections.Counter()
        counted = collections.Counter[str]()
        states = []
        for r, stop in enumerate(stops):
            share = len(read(varied, None, **options(rule, world, r))[0])
            n = share if stop == "all" else stop  # (None: to the epoch's end, past it)
            names, state, stats = read(varied, None, n, **options(rule, world, r))
            got.update(names)
            states.append(state)
            counted.update(dropped=stats.dropped_documents, repeated=stats.repeated_documents)
        middle = reshard(states, new_world)
        again = []
        for r, state in enumerate(middle):  # the first new rank goes some way, then again
            first = 3 if r == 0 else 0
            names, later, stats = read(varied, state, first, **options(rule, new_world, r))
            got.update(names)
            again.append(later)
            counted.update(dropped=stats.dropped_documents, repeated=stats.repeated_documents)
        for r, state in enumerate(reshard(again, 2)):
            names, _, stats = read(varied, state, **options(rule, 2, r))
            got.update(names)
            counted.update(dropped=stats.dropped_documents, repeated=stats.repeated_documents)
        assert sum((corpus - got).values()) == counted["dropped"], (world, new_world, stops)
        assert sum((got - corpus).values()) == counted["repeated"], (world, new_world, stops)
        assert counted["repeated" if rule == "drop" else "dropped"] == 0


def test_documents_with_worker_processes(varied: Path) -> None:
    """2 worker processes (old and new ranks) hand out what 0 do."""
    _, _, states = old_world(varied, "drop")
    for r, state in enumerate(reshard(states, 3)):
        inline = read(varied, state, **options("drop", 3, r))[0]
        assert read(varied, state, **options("drop", 3, r, workers=2))[0] == inline


def test_the_next_epochs_are_the_new_world_s_own(varied: Path) -> None:
    _, _, states = old_world(varied, "drop")
    for r, state in enumerate(reshard(states, 3)):
        rest_epoch = read(varied, state, **options("drop", 3, r))[0]
        both = read(varied, state, **options("drop", 3, r, epochs=2))[0]
        fresh = read(varied, None, **options("drop", 3, r, epoch=1))[0]
        assert both == rest_epoch + fresh


def test_a_resharded_epoch_resharded_again(varied: Path) -> None:
    """4 ranks -> 3 (each runs to its own point) -> 2: still the epoch once."""
    epoch, delivered, states = old_world(varied, "drop")
    middle = reshard(states, 3)
    again = []
    for r, (point, state) in enumerate(zip((5, 0, 9), middle, strict=True)):
        names, later, _ = read(varied, state, point, **options("drop", 3, r))
        delivered += names
        again.append(later)
    shares, dropped = [], 0
    for r, state in enumerate(reshard(again, 2)):
        names, _, stats = read(varied, state, **options("drop", 2, r))
        shares.append(names)
        dropped += stats.dropped_documents
    assert len(shares[0]) == len(shares[1])
    got = collections.Counter(delivered + shares[0] + shares[1])
    assert not got - collections.Counter(epoch)  # nothing twice
    first_drops = sum(read(varied, s, **options("drop", 3, r))[2].dropped_documents
                      for r, s in enumerate(middle))  # fmt: skip
    assert sum((collections.Counter(epoch) - got).values()) == dropped + first_drops


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resharded_state_resumes_exactly(workers: int, varied: Path) -> None:
    _, _, states = old_world(varied, "pad")
    state = reshard(states, 3)[1]

    def start(saved: dict[str, Any] | None, epochs: int) -> Any:
        opts = options("pad", 3, 1, workers=workers, epochs=epochs)
        return Loader(varied, **opts).iter(state=state if saved is None else saved)

    check_save_load(start, key=lambda doc: doc.name)


def test_refused_states_say_what_is_wrong(varied: Path) -> None:
    _, _, states = old_world(varied, "drop")
    with pytest.raises(StateError, match=r"ranks missing: \[2\] of world_size 4"):
        reshard([states[0], states[1], states[3]], 2)
    with pytest.raises(StateError, match="two states of rank 1"):
        reshard([*states, states[1]], 2)
    other = read(varied, None, 2, **options("drop", 4, 2, seed=4))[1]
    said = r"different runs \(state 2, of rank 2, differs from rank 0's\): seed: rank 0 3, rank 2 4"
    with pytest.raises(StateError, match=said) as caught:
        reshard([states[0], states[1], other, states[3]], 2)
    assert caught.value.field == "config.seed"
    later = read(varied, None, 2, **options("drop", 4, 2, epoch=1))[1]
    packed_later = []  # best fit is resharded only from states of one epoch
    for r in range(4):
        opts = options("drop", 4, r, tokenizer="bytes", epoch=int(r == 2), epochs=None)
        with Loader(varied, **opts).batches(S, B, packing="bestfit", window=8) as batches:
            next(batches)
            packed_later.append(batches.state_dict())
    # (its documents' state, before its window, says none handed out: as an empty share's,
    # which a finite run passes epochs with; its window's rows are of epoch 1)
    with pytest.raises(StateError, match=r"different epochs \(rank: epoch \{0: 0, 1: 0, 2: 1"):
        reshard(packed_later, 2)
    packed_later[2]["documents"]["counters"]["documents"] = 50  # (as if it had read epoch 0)
    with pytest.raises(StateError, match=r"different epochs \(rank: epoch \{0: 0, 1: 0, 2: 1"):
        reshard(packed_later, 2)
    with pytest.raises(StateError, match=r"old rank 2 is at epoch 1, 1 past .* 0 documents"):
        reshard([states[0], states[1], later, states[3]], 2)  # (none handed out before epoch 1)
    later["counters"]["documents"] += 50  # (as if it had read epoch 0)
    again = reshard([states[0], states[1], later, states[3]], 2)  # accepted (its own test)
    with pytest.raises(StateError, match=r"states of different reshards .* in epoch 0"):
        reshard([again[0], reshard(states, 2)[1]], 3)
    with pytest.raises(StateError, match="formats"):
        reshard([states[0], {"format": BATCHES_FORMAT}], 2)
    with pytest.raises(ValueError, match="world_size"):
        reshard(states, 0)
    packed = []
    for r, packing in enumerate(("bestfit", "concat", "bestfit", "bestfit")):
        with Loader(varied, **options("drop", 4, r, tokenizer="bytes")).batches(
            S, B, packing=packing
        ) as batches:
            packed.append(batches.state_dict())
    with pytest.raises(StateError, match=r"different \(packing, window\)"):
        reshard(packed, 2)
    broken = reshard(states, 2)[0]
    broken["reshard"]["ranks"] = [[1, 2]]
    with pytest.raises(StateError, match=r"reshard\.ranks\[0\]"):
        Loader(varied, **options("drop", 2, 0)).iter(state=broken)


def test_the_state_stays_small(varied: Path) -> None:
    """O(old ranks) integers: for the full corpus (20,610 members) at W = 1,024, under 128 KB
    per new rank's state, whatever the corpus size (format 2 names every old rank's fields:
    ~99 KB here, where format 1's positional lists took ~50 KB)."""
    state = read(varied, None, 1, **options("drop", 4, 0))[1]
    states = []
    for r in range(1024):
        fake = json.loads(json.dumps(state))
        fake["config"].update(rank=r, world_size=1024, units=20_610)
        fake["position"].update(block=19, in_block=4095)
        fake["counters"].update(epoch_documents=7_999, documents=7_999)  # agreeing fields
        states.append(fake)
    size = len(json.dumps(reshard(states, 1000)[999]))
    assert size < 128 * 1024, size
    # Best-fit batches: a window begun by every old rank adds three integers each.
    fit = [
        {"format": BATCHES_FORMAT, "seq_len": 1024, "batch_size": 8, "documents": st,
         "offset": 0, "batches": 5_000, "packing": "bestfit", "window": 4096,
         "window_number": 2, "window_epoch": 0, "row": 311}
        for st in states
    ]  # fmt: skip
    size = len(json.dumps(reshard(fit, 1000)[999]))
    assert size < 128 * 1024, size


def test_advance_matches_the_stream_and_shares_are_even() -> None:
    counts = [7, 3, 1, 5, 2, 0]  # documents per plan position of a share
    assert advance(counts, 4, (0, 0, 0), 0, None) == (0, 0)
    assert advance(counts, 4, (0, 0, 0), 7, None) == (1, 0)  # block [0, 1): 7 docs
    assert advance(counts, 4, (0, 0, 0), 9, None) == (1, 2)  # block [1, 4): 9 docs
    spans = [(0, 5, False), (9, 12, False)]
    assert cut_share(spans, 1, 3, "drop") == ([(2, 4, False)], 2)
    assert cut_share(spans, 2, 3, "pad") == ([(10, 12, False), (0, 1, True)], 0)
    assert cut_share(spans, 0, 3, None) == ([(0, 3, False)], 0)


# -- packed batches ---------------------------------------------------------------------


def token_stream(corpus: Path, state: dict[str, Any] | None, lengths: dict[str, int],
                 **opts: Any) -> list[tuple[str, int, int]]:  # fmt: skip
    """``(document, index in the document, id)`` of every id the batches of ``state`` pack."""
    out = []
    with Loader(corpus, tokenizer="bytes", **opts).iter(state=state) as it:
        for doc in it:
            whole = lengths.setdefault(doc.name, len(doc.tokens))
            cut = whole - len(doc.tokens)
            out += [(doc.name, cut + j, int(t)) for j, t in enumerate(doc.tokens)]
    return out


def batch_targets(
    corpus: Path, state: dict[str, Any] | None, stream: list[tuple[str, int, int]],
    n: int | None, **opts: Any,
) -> tuple[list[tuple[str, int]], dict[str, Any]]:  # fmt: skip
    """The ``(document, index)`` of every target of up to ``n`` batches (checked against the
    ids of ``stream``), and the batches state after them."""
    targets: list[tuple[str, int]] = []
    with Loader(corpus, tokenizer="bytes", **opts).batches(S, B, state=state) as batches:
        for k, batch in enumerate(batches if n != 0 else ()):
            window = stream[k * S * B : (k + 1) * S * B + 1]
            assert batch[:, 0].tolist() == [t for _, _, t in window[:-1:S]]
            assert batch[:, 1:].reshape(-1).tolist() == [t for _, _, t in window[1:]]
            targets += [(name, j) for name, j, _ in window[1:]]
            if n is not None and k + 1 >= n:
                break
        return targets, json.loads(json.dumps(batches.state_dict()))


@pytest.mark.parametrize(
    ("rule", "workers"),
    # drop with workers (~20 s): the rule is drop-0's, workers resuming a resharded state
    # test_a_resharded_state_resumes_exactly[2]'s and the best-fit one's [drop-2].
    [("drop", 0), ("pad", 0), pytest.param("drop", 2, marks=pytest.mark.slow)],
)
def test_batches_no_token_twice_or_lost(rule: str, workers: int, varied: Path) -> None:
    lengths: dict[str, int] = {}
    every: set[tuple[str, int]] = set()
    old_targets: list[tuple[str, int]] = []
    states = []
    for r, point in enumerate(BATCH_POINTS):
        opts = options(rule, 4, r, workers=workers)
        stream = token_stream(varied, None, lengths, **opts)
        every |= {(name, j) for name, j, _ in stream}
        targets, state = batch_targets(varied, None, stream, point, **opts)
        old_targets += targets
        states.append(state)
    for new_world in (3, 6, 1):
        targets = list(old_targets)
        firsts_and_tails = len(BATCH_POINTS)  # each old rank's first id is no target
        for r, state in enumerate(reshard(states, new_world)):
            opts = options(rule, new_world, r, workers=workers)
            stream = token_stream(varied, state["documents"], lengths, **opts)
            got, _ = batch_targets(varied, state, stream, None, **opts)
            targets += got
            firsts_and_tails += len(stream) - len(got)  # its first id, and the last ids
        counted = collections.Counter(targets)
        twice = {t for t, n in counted.items() if n > 1}
        missing = every - set(counted)
        if rule == "drop":
            assert twice == set()
            dropped = {name for name, j in missing if j == 0}  # whole documents left out
            left_out = {(name, j) for name, j in missing if name in dropped}
            assert len(missing - left_out) <= firsts_and_tails
        else:  # pad repeats documents (by design); nothing is lost
            assert len(missing) <= firsts_and_tails


def test_positions_go_on_in_a_document_cut_across_the_checkpoint(varied: Path) -> None:
    """``segments=True`` after a reshard: a document cut across the checkpoint goes on at its
    position in the document, not at 0."""
    lengths: dict[str, int] = {}
    states = []
    for r, point in enumerate(BATCH_POINTS):
        opts = options("drop", 4, r)
        stream = token_stream(varied, None, lengths, **opts)
        states.append(batch_targets(varied, None, stream, point, **opts)[1])
    continued = 0
    for r, state in enumerate(reshard(states, 3)):
        opts = options("drop", 3, r)
        stream = token_stream(varied, state["documents"], lengths, **opts)
        continued += sum(j > 0 and (k == 0 or stream[k - 1][0] != name)
                         for k, (name, j, _) in enumerate(stream))  # fmt: skip
        with Loader(varied, tokenizer="bytes", **opts).batches(
            S, B, state=state, segments=True
        ) as batches:
            for k, batch in enumerate(batches):
                window = stream[k * S * B : (k + 1) * S * B + 1]
                for row in range(B):
                    ids = window[row * S : row * S + S + 1]
                    assert batch.positions[row].tolist() == [j for _, j, _ in ids]
    assert continued, "no document goes on from inside: the test shows nothing"


def test_batches_of_a_resharded_state_resume_exactly(varied: Path) -> None:
    states = []
    for r, point in enumerate(BATCH_POINTS):
        opts = options("drop", 4, r, tokenizer="bytes")
        with Loader(varied, **opts).batches(S, B) as batches:
            for _ in zip(range(point), batches, strict=False):
                pass
            states.append(json.loads(json.dumps(batches.state_dict())))
    state = reshard(states, 3)[2]

    def start(saved: dict[str, Any] | None, epochs: int) -> Any:
        opts = options("drop", 3, 2, tokenizer="bytes", epochs=epochs)
        return Loader(varied, **opts).batches(S, B, state=state if saved is None else saved)

    check_save_load(start, key=lambda batch: batch.tolist())


def test_without_even_sharding_the_shares_differ_by_one_at_most(varied: Path) -> None:
    def opts(rank: int, world: int) -> dict[str, Any]:
        return options("drop", world, rank, even=None)

    epoch = [name for r in range(4) for name in read(varied, None, **opts(r, 4))[0]]
    delivered, states = [], []
    for r, point in enumerate(POINTS):
        names, state, _ = read(varied, None, point, **opts(r, 4))
        delivered += names
        states.append(state)
    for new_world in (3, 1):
        new = reshard(states, new_world, even=None)
        shares = [read(varied, new[r], **opts(r, new_world))[0] for r in range(new_world)]
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        got = delivered + [name for share in shares for name in share]
        assert collections.Counter(got) == collections.Counter(epoch)


# -- best-fit batches: the windows old ranks had begun are packed again on the new ranks ------

FIT_S, FIT_B, FIT_WINDOW = 127, 2, 5  # small windows: old ranks stop inside one


def fit_pieces(corpus: Path, rule: str, world: int) -> dict[tuple[int, bytes], tuple[str, int]]:
    """Every row-sized piece of every document of the epoch over ``world`` ranks, by its
    (position, ids): the ``(document, position)`` it is."""
    pieces = {}
    cap = FIT_S + 1
    for r in range(world):
        with Loader(corpus, tokenizer="bytes", **options(rule, world, r)).iter() as docs:
            for doc in docs:
                for p in range(0, len(doc.tokens), cap):
                    key = (p, doc.tokens[p : p + cap].tobytes())
                    seen = pieces.setdefault(key, (doc.name, p))  # pad: repeats alike
                    assert seen == (doc.name, p), "two pieces alike: the check cannot tell them"
    return pieces


def fit_delivered(
    corpus: Path,
    state: dict[str, Any] | None,
    n: int | None,
    pieces: dict[Any, Any],
    window: int = FIT_WINDOW,
    **opts: Any,
) -> tuple[list[tuple[str, int]], dict[str, Any], int]:
    """The pieces ``(document, position)`` of up to ``n`` best-fit batches, the state after
    them, and the batches read."""
    got, k = [], 0
    with Loader(corpus, tokenizer="bytes", **opts).batches(
        FIT_S, FIT_B, state=state, segments=True, packing="bestfit", window=window
    ) as batches:
        for k, batch in enumerate(batches if n != 0 else (), 1):
            for tokens, seg, pos in zip(*batch[:3], strict=True):
                for s in range(1, int(seg.max()) + 1):
                    at = np.flatnonzero(seg == s)
                    got.append(pieces[(int(pos[at[0]]), tokens[at].astype(np.uint16).tobytes())])
            if n is not None and k >= n:
                break
        return got, json.loads(json.dumps(batches.state_dict())), k


@pytest.mark.parametrize(("rule", "workers"), [("drop", 0), ("pad", 0), ("drop", 2)])
def test_bestfit_batches_no_piece_twice_or_lost(rule: str, workers: int, varied: Path) -> None:
    """W = 4 best-fit ranks stopped inside windows, resharded to 3, 6 and 1: every piece of
    every document once (pad: repeats allowed; drop: what it leaves out), but for the rows of
    the last batch each new rank cannot fill."""
    pieces = fit_pieces(varied, rule, 4)
    lengths = {where: len(ids) // 2 for (_, ids), where in pieces.items()}
    old, states = [], []
    for r, point in enumerate((1, 2, 0, 3)):
        opts = options(rule, 4, r, workers=workers)
        got, state, _ = fit_delivered(varied, None, point, pieces, **opts)
        old += got
        states.append(state)
    assert any(s["row"] > 0 for s in states), "no old rank stopped inside a window"
    for new_world in (3, 6, 1):
        new = reshard(states, new_world)
        delivered = list(old)
        for r in range(new_world):
            opts = options(rule, new_world, r, workers=workers)
            got, _, _ = fit_delivered(varied, new[r], None, pieces, **opts)
            delivered += got
        counted = collections.Counter(delivered)
        missing = set(pieces.values()) - set(counted)
        if rule == "drop":
            assert [p for p, n in counted.items() if n > 1] == []
            dropped = {name for name, p in missing if p == 0}  # whole documents left out
            missing = {(name, p) for name, p in missing if name not in dropped}
        # Lost: at most the rows of the one batch each new rank cannot fill at its end.
        lost = sum(lengths[piece] for piece in missing)
        assert lost <= new_world * (FIT_B - 1) * (FIT_S + 1), (new_world, sorted(missing))


def test_bestfit_resharded_state_resumes_and_reshards_again(varied: Path) -> None:
    pieces = fit_pieces(varied, "drop", 4)
    old, states = [], []
    for r, point in enumerate((1, 2, 0, 3)):
        got, state, _ = fit_delivered(varied, None, point, pieces, **options("drop", 4, r))
        old += got
        states.append(state)
    three = reshard(states, 3)

    def start(saved: dict[str, Any] | None, epochs: int) -> Any:
        opts = options("drop", 3, 1, tokenizer="bytes", epochs=epochs)
        return Loader(varied, **opts).batches(
            FIT_S, FIT_B, state=three[1] if saved is None else saved, packing="bestfit",
            window=FIT_WINDOW,
        )  # fmt: skip

    check_save_load(start, key=lambda batch: batch.tolist())
    # Each of the 3 runs a little (inside an old rank's window, or past the windows it was
    # dealt, inside its own), then 2 take over.
    lengths = {where: len(ids) // 2 for (_, ids), where in pieces.items()}
    own = []  # per share: the first batch after which it is inside a window of its own
    for r in range(3):
        opts = options("drop", 3, r, tokenizer="bytes")
        with Loader(varied, **opts).iter(state=three[r]["documents"]) as docs:
            dealt = sum(ahead[0] for ahead in docs.windows_ahead())
        with Loader(varied, **opts).batches(
            FIT_S, FIT_B, state=three[r], packing="bestfit", window=FIT_WINDOW
        ) as batches:
            for k, _ in enumerate(batches, 1):
                state = batches.state_dict()
                handed = state["documents"]["counters"].get("epoch_documents", 0)
                if handed >= dealt and state["row"]:
                    own.append(k)
                    break
    assert len(own) == 3, "a share never got past the windows it was dealt"
    for points in ((1, 0, 2), tuple(own), (own[0] + 1, own[1], own[2] + 2)):
        delivered, again = list(old), []
        for r, point in enumerate(points):
            opts = options("drop", 3, r)
            got, state, _ = fit_delivered(varied, three[r], point, pieces, **opts)
            delivered += got
            again.append(state)
        for r, state in enumerate(reshard(again, 2)):
            delivered += fit_delivered(varied, state, None, pieces, **options("drop", 2, r))[0]
        counted = collections.Counter(delivered)
        assert [p for p, n in counted.items() if n > 1] == [], points
        missing = set(pieces.values()) - set(counted)
        whole = {name for name, p in missing if p == 0}  # what drop leaves out
        lost = sum(lengths[piece] for piece in missing if piece[0] not in whole)
        assert lost <= 2 * (FIT_B - 1) * (FIT_S + 1), points


def test_bestfit_next_epoch_is_the_new_world_s_own(varied: Path) -> None:
    """After the resharded epoch, the rows are those of a run started on the new world size
    at the next epoch (windows are numbered within their epoch)."""
    states = []
    for r, point in enumerate((1, 2, 0, 3)):
        with Loader(varied, tokenizer="bytes", **options("drop", 4, r)).batches(
            FIT_S, FIT_B, packing="bestfit", window=FIT_WINDOW
        ) as batches:
            for _ in zip(range(point), batches, strict=False):
                pass
            states.append(json.loads(json.dumps(batches.state_dict())))
    state = reshard(states, 2)[1]

    def rows(loader: Loader, state: dict[str, Any] | None) -> list[bytes]:
        with loader.batches(FIT_S, FIT_B, state=state, packing="bestfit", window=FIT_WINDOW) as b:
            return [row.tobytes() for batch in b for row in batch]

    opts = options("drop", 2, 1, tokenizer="bytes")
    resharded = rows(Loader(varied, **opts, epochs=2), state)
    fresh = rows(Loader(varied, **opts, epoch=1), None)
    n = len(fresh) - FIT_B  # a row of the epoch before may equal one of this epoch's: match all
    assert any(resharded[k : k + n] == fresh[:n] for k in range(len(resharded) - n + 1))


@pytest.mark.parametrize("new_world", [3, 1])
def test_bestfit_state_inside_the_last_short_window_reshards(new_world: int, varied: Path) -> None:
    """Every old rank stops at its last batch, inside its epoch's last window (windows of 7:
    25 documents end in one of 4): resharded, no piece twice, none lost but the last rows."""
    window = 7
    pieces = fit_pieces(varied, "drop", 4)
    lengths = {where: len(ids) // 2 for (_, ids), where in pieces.items()}
    old, states = [], []
    for r in range(4):
        _, _, total = fit_delivered(varied, None, None, pieces, window, **options("drop", 4, r))
        got, state, _ = fit_delivered(
            varied, None, total - 1, pieces, window, **options("drop", 4, r)
        )
        old += got
        states.append(state)
    shares = [len(read(varied, None, **options("drop", 4, r))[0]) for r in range(4)]
    inside = [
        s["row"] > 0 and s["documents"]["counters"]["epoch_documents"] > n - window
        for s, n in zip(states, shares, strict=True)
    ]
    assert any(inside) and any(n % window for n in shares), (inside, shares)
    delivered = list(old)
    for r, state in enumerate(reshard(states, new_world)):
        delivered += fit_delivered(
            varied, state, None, pieces, window, **options("drop", new_world, r)
        )[0]
    counted = collections.Counter(delivered)
    assert [p for p, n in counted.items() if n > 1] == []
    missing = set(pieces.values()) - set(counted)
    lost = sum(lengths[piece] for piece in missing)
    assert lost <= (4 + new_world) * (FIT_B - 1) * (FIT_S + 1), sorted(missing)


@pytest.mark.parametrize("worlds", [(3,), (1,), (3, 2)])
def test_ranks_in_different_epochs_reshard_each_epochs_rest(
    varied: Path, worlds: tuple[int, ...]
) -> None:
    """Ranks stopped in different epochs (as a mixture's small part leaves them): a rank past
    an epoch had finished it, a rank before one had not begun it. Every epoch up to the last
    one begun is then the old ranks' documents of it and the new ranks' once each; the epochs
    after it are the new world's own (each once too). (3, 2): the 3 new ranks stopped in
    different epochs of those rests and of their own, resharded again to 2."""
    shares = [read(varied, None, **options(None, 4, r))[0] for r in range(4)]
    everything = collections.Counter(name for share in shares for name in share)
    stops = (len(shares[0]) // 2, len(shares[1]) + 2, 2 * len(shares[2]) + 1, len(shares[3]))
    seen: dict[int, list[str]] = collections.defaultdict(list)
    last = 4

    def take(state: dict[str, Any] | None, opts: dict[str, Any], n: int | None,
             at: tuple[int, int] | None = None) -> Any:  # fmt: skip
        """Read ``n`` documents (None: to past epoch ``last``), or up to ``at``: (epoch,
        documents handed out in it)."""
        with Loader(varied, **opts, epochs=None).iter(state=state) as it:
            while (n is None or n > 0) and (at is None or not (
                it.state_dict()["position"]["epoch"] == at[0]
                and it.stats.epoch_documents >= at[1]
            )):  # fmt: skip
                doc = next(it)
                epoch = it.state_dict()["position"]["epoch"]
                if epoch > last:
                    break
                seen[epoch].append(doc.name)
                n = None if n is None else n - 1
            return it.state_dict()

    states = [take(None, options(None, 4, r), stop) for r, stop in enumerate(stops)]
    assert [s["position"]["epoch"] for s in states] == [0, 1, 2, 0]
    *middle, world = worlds
    new_states = reshard(states, worlds[0])
    for mid in middle:  # stopped in epochs 0, 2 and 3 (3: the middle world's own)
        ends = ((0, 1), (2, 3), (3, 5))
        new_states = [take(state, options(None, mid, rank), None, ends[rank])
                      for rank, state in enumerate(new_states)]  # fmt: skip
        assert [s["position"]["epoch"] for s in new_states] == [0, 2, 3]
        new_states = reshard(new_states, world)
    for rank, state in enumerate(new_states):
        take(state, options(None, world, rank), None)
    for epoch in range(last + 1):  # rests of epochs old ranks had begun, then the new world's
        assert collections.Counter(seen[epoch]) == everything, epoch
    if worlds == (3,):  # a state saved in any of those rests resumes exactly (workers 0 and 2)
        for workers in (0, 2):

            def start(saved: dict[str, Any] | None, epochs: int, workers: int = workers) -> Any:
                opts = options(None, 3, 1, workers=workers, epochs=epochs)
                return Loader(varied, **opts).iter(state=new_states[1] if saved is None else saved)

            check_save_load(start, key=lambda doc: doc.name)


def test_a_one_rank_run_resharded_with_every_default_resumes_with_every_default(
    varied: Path,
) -> None:
    """One rank has no rule in force (one share is even by itself): ``reshard``'s ``keep``
    gives its new ranks ``Loader``'s default, so the common scale-up (1 rank to N, all
    defaults) resumes; a ``Loader`` told otherwise is refused naming the argument."""
    plain = dict(seed=3, split="train", val_fraction=0.2, val_seed=7, workers=0)
    names, state, _ = read(varied, None, 5, **plain)
    new = reshard([state], 2)
    ranks = [read(varied, new[r], **plain, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0][0]) == len(ranks[1][0])  # evened out by drop
    got = collections.Counter(names + ranks[0][0] + ranks[1][0])
    want = collections.Counter(read(varied, None, **plain)[0])
    assert not got - want and sum((want - got).values()) == ranks[1][2].dropped_documents == 1
    with pytest.raises(StateError, match=r"pass even='drop'.*is reshard's even="):
        read(varied, new[0], **plain, rank=0, world_size=2, even=None)
