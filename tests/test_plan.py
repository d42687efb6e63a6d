"""The plan's arithmetic on its own: shares cut at documents, pass ends, block stops, and the
rest of a resharded epoch against a plain list-based model (no decompression anywhere)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext.options import Options
from openwebtext.plan import (
    EpochShares,
    Share,
    advance,
    block_stop,
    pass_end,
    permutation,
    plan,
    share_bounds,
    share_losses,
)
from openwebtext.stream.rest import Rest
from openwebtext.stream.sections import OldRank, Reshard
from openwebtext.stream.spans import cut_share

RULES = st.sampled_from([None, "drop", "pad"])


@given(
    n_units=st.integers(0, 60),
    world_size=st.integers(1, 9),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
    shuffle=st.booleans(),
)
def test_plan_ranks_are_disjoint_and_cover(
    n_units: int, world_size: int, seed: int, epoch: int, shuffle: bool
) -> None:
    shards = [
        plan(n_units, shuffle=shuffle, seed=seed, epoch=epoch, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    flat = [u for shard in shards for u in shard]
    assert sorted(flat) == list(range(n_units))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def segments(share: Share) -> list[tuple[int, int, int]]:
    """``(unit, lo, hi)``: the documents of each unit the share takes."""
    assert share.counts is not None
    out = []
    for p, (unit, n) in enumerate(zip(share.units, share.counts, strict=True)):
        lo, hi = share.trims.get(p, (0, n))
        assert hi - lo == n
        out.append((unit, lo, hi))
    return out


def check_shares(counts: Sequence[int], world: int, rule: str | None, seed: int) -> None:
    """Every share of an epoch of ``counts`` against what the issue promises."""
    order = permutation(len(counts), seed, 0, 0)
    epoch = EpochShares(order, counts)
    total = sum(counts)
    shares = [epoch.share(r, world, rule) for r in range(world)]  # type: ignore[arg-type]
    sizes = [s.documents for s in shares]
    taken: dict[int, list[tuple[int, int]]] = {}
    for share in shares:
        for p, (unit, lo, hi) in enumerate(segments(share)):
            assert 0 <= lo < hi <= counts[unit] or (lo == hi == 0 and counts[unit] == 0)
            if 0 < p < len(share.units) - 1:
                assert (lo, hi) == (0, counts[unit])  # only the ends are cut
            taken.setdefault(unit, []).append((lo, hi))
    # At most the units on the shares' boundaries are read twice.
    assert sum(len(share.units) for share in shares) <= len(counts) + world - 1
    per_unit_read = sum(hi - lo for spans in taken.values() for lo, hi in spans)
    assert per_unit_read == sum(sizes)
    if rule is None:
        assert sum(sizes) == total
        assert max(sizes) - min(sizes) <= 1
        for unit, spans in taken.items():  # each document of each unit exactly once
            spans.sort()
            at = 0
            for lo, hi in spans:
                assert lo == at
                at = hi
            assert at == counts[unit]
    else:
        assert len(set(sizes)) == 1  # equal counts
        lost, again = total - sum(sizes), sum(sizes) - total
        assert (lost if rule == "drop" else again) <= world - 1
        assert (lost if rule == "drop" else again) >= 0
        losses = [share_losses(total, r, world, rule) for r in range(world)]  # type: ignore[arg-type]
        assert sum(d for d, _ in losses) == max(0, lost)
        assert sum(r for _, r in losses) == max(0, again)
        if rule == "pad":  # what is read twice is the next share's start, nothing else
            for unit, spans in taken.items():
                covered = set()
                for lo, hi in spans:
                    covered |= set(range(lo, hi))
                assert covered == set(range(counts[unit])) or total == 0


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    members=st.integers(1, 20_000),
    world=st.integers(1, 4_096),
    rule=RULES,
    seed=st.integers(0, 2**32),
)
def test_shares_cut_at_documents_cover_every_document_at_any_scale(
    data: st.DataObject, members: int, world: int, rule: str | None, seed: int
) -> None:
    """The issue's property: member sizes 1..1,000, up to 20,000 members, 1..4,096 shares."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32)))
    counts = rng.integers(1, 1_001, size=members).tolist()
    check_shares(counts, world, rule, seed)


@given(
    counts=st.lists(st.integers(0, 12), min_size=1, max_size=40),
    world=st.integers(1, 60),
    rule=RULES,
    seed=st.integers(0, 100),
)
def test_shares_of_small_epochs_with_empty_members(
    counts: list[int], world: int, rule: str | None, seed: int
) -> None:
    check_shares(counts, world, rule, seed)


def test_openwebtext_sized_epoch_loses_at_most_shares_minus_one() -> None:
    """The issue's simulation: 20,610 members of ~390 documents lost 2-23% at 64-4,096 shares
    when shares were whole members; cut at documents, drop leaves out fewer than S."""
    rng = np.random.default_rng(0)
    counts = rng.integers(200, 600, size=20_610).tolist()
    total = sum(counts)
    epoch = EpochShares(permutation(len(counts), 0, 0, 0), counts)
    for world in (8, 64, 512, 4_096):
        kept = sum(epoch.share(r, world, "drop").documents for r in range(world))
        assert total - kept == total % world < world


@given(total=st.integers(0, 10_000), world=st.integers(1, 300), rule=RULES)
def test_share_bounds_start_where_the_shares_are_cut(
    total: int, world: int, rule: str | None
) -> None:
    bounds = [share_bounds(total, r, world, rule) for r in range(world)]  # type: ignore[arg-type]
    assert bounds[0][0] == 0
    assert all(0 <= a <= b <= total for a, b in bounds)
    if rule is None:
        assert bounds[-1][1] == total
        assert all(bounds[r][1] == bounds[r + 1][0] for r in range(world - 1))
    if rule == "pad":
        assert bounds[-1][1] == total  # the last share ends at the end: nothing wraps round


def test_one_share_is_the_whole_epoch_unit_for_unit() -> None:
    """An unsharded run's order may not change: one share is every unit, whole, in order."""
    order = permutation(7, 5, 0, 0)
    for counts in (None, [3, 0, 4, 1, 9, 2, 2]):
        share = EpochShares(order, counts).share(0, 1, "drop")
        assert share.units == order and share.trims == {}


def test_shares_of_a_known_epoch() -> None:
    """Golden: 3 units of 4 documents cut into 5 shares."""
    epoch = EpochShares([2, 0, 1], [4, 4, 4])
    got = [segments(epoch.share(r, 5, None)) for r in range(5)]
    assert got == [
        [(2, 0, 2)],
        [(2, 2, 4)],
        [(0, 0, 3)],
        [(0, 3, 4), (1, 0, 1)],
        [(1, 1, 4)],
    ]
    assert [segments(epoch.share(r, 5, "drop")) for r in range(5)][3] == [(0, 3, 4), (1, 0, 1)]
    assert [segments(epoch.share(r, 5, "pad")) for r in range(5)][4] == [(1, 1, 4)]
    assert share_losses(12, 4, 5, "drop") == (2, 0)
    assert [share_losses(12, r, 5, "pad")[1] for r in range(5)] == [1, 1, 0, 1, 0]


# -- passes ------------------------------------------------------------------------------------

shards = st.lists(st.integers(0, 6), min_size=1, max_size=12)


def documents(counts: list[int], start: int, end: int) -> int:
    """Documents at plan positions start..end, wrapping around the share."""
    return sum(counts[p % len(counts)] for p in range(start, end))


@given(counts=shards, start=st.integers(0, 40), need=st.integers(-3, 80))
def test_a_pass_ends_once_it_has_enough_documents_or_at_the_lap_s_end(
    counts: list[int], start: int, need: int
) -> None:
    end = pass_end(counts, start, need)
    lap_end = (start // len(counts) + 1) * len(counts)
    assert start <= end <= lap_end
    if need <= 0:
        assert end == start
    elif end < lap_end:
        assert documents(counts, start, end) >= need
    if end > start:  # no unit more than needed
        assert documents(counts, start, end - 1) < need


@given(counts=shards, start=st.integers(0, 40), need=st.integers(1, 80), data=st.data())
def test_a_pass_resumed_mid_way_ends_where_the_whole_pass_ends(
    counts: list[int], start: int, need: int, data: st.DataObject
) -> None:
    """What makes a resumed evened-out run cut its blocks where an uninterrupted one does."""
    end = pass_end(counts, start, need)
    if end == start:
        return
    middle = data.draw(st.integers(start, end - 1))
    rest = need - documents(counts, start, middle)
    assert pass_end(counts, middle, rest) == end


@given(counts=shards, target=st.integers(0, 120))
def test_passes_meet_an_even_target_lap_by_lap(counts: list[int], target: int) -> None:
    if sum(counts) == 0:
        return  # the stream refuses a share with no document at all
    start, got = 0, 0
    while got < target:
        end = pass_end(counts, start, target - got)
        assert end // len(counts) == start // len(counts) or end % len(counts) == 0  # one lap
        got += documents(counts, start, end)
        start = end
    assert got - target < max(counts)  # the last unit is the only one cut short


@given(
    n=st.integers(0, 100),
    first=st.integers(0, 100),
    target=st.none() | st.integers(0, 100),
    take=st.none() | st.integers(0, 100),
)
def test_a_block_stops_at_its_end_the_target_or_take(
    n: int, first: int, target: int | None, take: int | None
) -> None:
    stop = block_stop(n, first, target_left=target, take_left=take)
    bounds = [n] + [first + b for b in (target, take) if b is not None]
    assert stop == min(bounds)


# -- the rest of a resharded epoch against a list-based model -----------------------------------


def hand_out(share: Share, size: int) -> tuple[list[tuple[int, int]], list[int]]:
    """The model: a share's documents ``(unit, index)`` in the order it hands them out (blocks
    of >= ``size`` documents of consecutive units, each in its stored order), and where each
    block starts in that list. Blocks are not permuted here: the stream's permutation is a
    function of the block alone, so where a position falls is what the model must get right."""
    docs: list[tuple[int, int]] = []
    starts: list[int] = []
    block: list[tuple[int, int]] = []
    for unit, lo, hi in segments(share):
        block += [(unit, j) for j in range(lo, hi)]
        if len(block) >= size:
            starts.append(len(docs))
            docs += block
            block = []
    if block:
        starts.append(len(docs))
        docs += block
    return docs, starts


def index_of(share: Share, size: int, block: int, in_block: int) -> int:
    """The model's index of plan position ``(block, in_block)`` of ``share``."""
    assert share.counts is not None
    before = sum(share.counts[:block])
    return before + in_block


@settings(max_examples=80, deadline=None)
@given(
    counts=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    old_world=st.integers(1, 9),
    new_world=st.integers(1, 9),
    old_rule=RULES,
    new_rule=RULES,
    size=st.integers(1, 40),
    data=st.data(),
)
def test_the_rest_of_an_epoch_matches_a_list_model(
    counts: list[int],
    old_world: int,
    new_world: int,
    old_rule: str | None,
    new_rule: str | None,
    size: int,
    data: st.DataObject,
) -> None:
    """Old shares hand out some of their documents, then the rest is resharded: the new
    shares' pieces, read through the model, are the old shares' remaining documents once
    each (cut evenly for the new shares as ``cut_share`` says)."""
    options = Options(seed=4, shuffle_buffer=size)
    order = plan(len(counts), shuffle=True, seed=4, epoch=0)
    epoch = EpochShares(order, counts)
    olds = [epoch.share(r, old_world, old_rule) for r in range(old_world)]  # type: ignore[arg-type]
    ranks, rest = [], []
    for share in olds:
        docs, _ = hand_out(share, size)
        handed = data.draw(st.integers(0, len(docs)))
        target = None if old_rule is None else share.documents
        assert share.counts is not None
        block, in_block = advance(share.counts, size, (0, 0, 0), handed, target)
        assert index_of(share, size, block, in_block) == handed
        ranks.append(OldRank(block, in_block, handed))
        rest.append(docs[handed:])
    flat = [d for docs in rest for d in docs]
    got: list[tuple[int, int]] = []
    for j in range(new_world):
        section = Reshard(
            world_size=old_world, epoch=0, even=old_rule, ranks=tuple(ranks),  # type: ignore[arg-type]
            share=(j, new_world), rule=new_rule,  # type: ignore[arg-type]
        )  # fmt: skip
        spans, _ = cut_share([(0, len(flat), False)], j, new_world, new_rule)
        expected = [flat[i % len(flat)] for a, b, _ in spans for i in range(a, b)]
        mine: list[tuple[int, int]] = []
        for piece in Rest(section, counts, options).pieces(0):
            docs, _ = hand_out(piece.share, size)
            k = index_of(piece.share, size, piece.block, piece.in_block)
            mine += docs[k : k + piece.documents]
        assert mine == expected
        got += mine
    if new_rule is None:
        assert sorted(got) == sorted(flat)
