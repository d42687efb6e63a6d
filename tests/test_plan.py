"""The plan's arithmetic on its own: shards, even targets, pass ends, block stops."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from openwebtext.plan import block_stop, epoch_target, pass_end, plan


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


@given(counts=st.lists(st.integers(0, 50), min_size=1, max_size=30), world_size=st.integers(1, 6))
def test_epoch_target_is_min_or_max_of_rank_totals(counts: list[int], world_size: int) -> None:
    totals = []
    for r in range(world_size):
        shard = plan(len(counts), shuffle=True, seed=3, epoch=1, rank=r, world_size=world_size)
        totals.append(sum(counts[u] for u in shard))
    kw = {"shuffle": True, "seed": 3, "epoch": 1, "world_size": world_size}
    assert epoch_target(counts, rule="drop", **kw) == min(totals)  # type: ignore[arg-type]
    assert epoch_target(counts, rule="pad", **kw) == max(totals)  # type: ignore[arg-type]


shards = st.lists(st.integers(0, 9), min_size=1, max_size=12).flatmap(
    lambda order: st.tuples(
        st.just(order),
        st.lists(st.integers(0, 6), min_size=max(order) + 1, max_size=max(order) + 3),
    )
)


def documents(order: list[int], counts: list[int], start: int, end: int) -> int:
    """Documents at plan positions start..end, wrapping around the shard."""
    return sum(counts[order[p % len(order)]] for p in range(start, end))


@given(shard=shards, start=st.integers(0, 40), need=st.integers(-3, 80))
def test_a_pass_ends_once_it_has_enough_documents_or_at_the_lap_s_end(
    shard: tuple[list[int], list[int]], start: int, need: int
) -> None:
    order, counts = shard
    end = pass_end(order, counts, start, need)
    lap_end = (start // len(order) + 1) * len(order)
    assert start <= end <= lap_end
    if need <= 0:
        assert end == start
    elif end < lap_end:
        assert documents(order, counts, start, end) >= need
    if end > start:  # no unit more than needed
        assert documents(order, counts, start, end - 1) < need


@given(shard=shards, start=st.integers(0, 40), need=st.integers(1, 80), data=st.data())
def test_a_pass_resumed_mid_way_ends_where_the_whole_pass_ends(
    shard: tuple[list[int], list[int]], start: int, need: int, data: st.DataObject
) -> None:
    """What makes a resumed evened-out run cut its blocks where an uninterrupted one does."""
    order, counts = shard
    end = pass_end(order, counts, start, need)
    if end == start:
        return
    middle = data.draw(st.integers(start, end - 1))
    rest = need - documents(order, counts, start, middle)
    assert pass_end(order, counts, middle, rest) == end


@given(shard=shards, target=st.integers(0, 120))
def test_passes_meet_an_even_target_lap_by_lap(
    shard: tuple[list[int], list[int]], target: int
) -> None:
    order, counts = shard
    if documents(order, counts, 0, len(order)) == 0:
        return  # the stream refuses a shard with no document at all
    start, got = 0, 0
    while got < target:
        end = pass_end(order, counts, start, target - got)
        assert end // len(order) == start // len(order) or end % len(order) == 0  # one lap
        got += documents(order, counts, start, end)
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
