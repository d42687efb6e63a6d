"""Shuffle blocks on their own: grouping, left-out documents, compaction, kept slots."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Loader
from openwebtext.engine import Loaded
from openwebtext.records import Names, Unit
from openwebtext.stream import blocks, gather
from openwebtext.stream.blocks import Block
from openwebtext.synth import write_corpus

UNITS = tuple(
    Unit(f"/c/s{u // 4}.tar", f"s{u // 4}-{u}_data.xz", 0, 1, "xz", f"s{u // 4}", u % 4)
    for u in range(40)
)


class Slots:
    """A pool's slots, as a block sees them: which tickets were given back, in order."""

    def __init__(self) -> None:
        self.released: list[int] = []

    def release(self, ticket: int) -> None:
        assert ticket not in self.released, f"slot {ticket} given back twice"
        self.released.append(ticket)


def unit(
    u: int, docs: Sequence[bytes], *, ticket: int = -1, left_out: Sequence[int] = ()
) -> Loaded:
    """Unit ``u`` holding ``docs`` back to back; a ticket >= 0 means it sits in a slot."""
    data = b"".join(docs)
    offsets = [sum(map(len, docs[:j])) for j in range(len(docs))]
    for j in left_out:
        offsets[j] = -1
    view = memoryview(bytearray(data)) if ticket >= 0 else data
    names = [f"{u}-{j}.txt" for j in range(len(docs))]
    return Loaded(u, view, names, offsets, [len(d) for d in docs], [], 0, ticket)


def _names(block: Block) -> list[str]:
    return [block.name(k) for k in range(len(block))]


def texts(block: Block) -> list[str]:
    return [
        str(block.sources[k][0][block.offsets[k] : block.offsets[k] + block.sizes[k]], "utf-8")
        for k in range(len(block))
    ]


def feed(loaded: list[Loaded]) -> Generator[Loaded, None, None]:
    yield from loaded


def docs(u: int, n: int, size: int = 5) -> list[bytes]:
    return [f"{u:02d}:{j:0{size - 3}d}".encode() for j in range(n)]


def test_units_are_grouped_into_blocks_of_at_least_size_documents() -> None:
    units = [unit(u, docs(u, n)) for u, n in enumerate([3, 4, 1, 6, 2])]
    got = [
        (first, end, texts(block))
        for first, end, block in gather(feed(units), Slots(), units=UNITS, start=10, size=5)
    ]
    every = [t for u, n in enumerate([3, 4, 1, 6, 2]) for t in (d.decode() for d in docs(u, n))]
    assert [(first, end) for first, end, _ in got] == [(10, 12), (12, 14), (14, 15)]
    assert [t for _, _, block_texts in got for t in block_texts] == every
    assert [len(t) for _, _, t in got] == [7, 7, 2]  # the last block may be short


def test_left_out_documents_are_not_in_the_block_and_keep_their_index() -> None:
    loaded = unit(3, docs(3, 5), left_out=[0, 3])
    ((_, _, block),) = gather(feed([loaded]), Slots(), units=UNITS, start=0, size=10)
    assert texts(block) == ["03:01", "03:02", "03:04"]
    assert block.js == [1, 2, 4]
    assert [block.name(k) for k in range(len(block))] == ["3-1.txt", "3-2.txt", "3-4.txt"]
    _, subset, member, member_index, errors = block.sources[0]
    assert (subset, member, member_index, errors) == ("s0", "s0-3_data.xz", 3, "strict")


def test_a_unit_s_names_stay_made_when_asked_with_documents_left_out() -> None:
    """A unit with documents left out (a held-out split, a bad line) kept its names as a
    list of those kept, each made then: a ``records.Names`` of a table's or token unit's
    lost its point under ``split="train"``. The block keeps the unit's own and reads one by
    the document's index in it."""
    loaded = unit(3, docs(3, 5), left_out=[0, 3])._replace(names=Names("a.jsonl", range(5), "@"))
    ((_, _, block),) = gather(feed([loaded]), Slots(), units=UNITS, start=0, size=10)
    assert block.name_parts == [loaded.names] and isinstance(block.name_parts[0], Names)
    assert _names(block) == ["a.jsonl@1", "a.jsonl@2", "a.jsonl@4"]


def test_a_unit_with_nothing_kept_gives_its_slot_back_at_once() -> None:
    slots = Slots()
    units = [unit(0, docs(0, 2), ticket=7, left_out=[0, 1]), unit(1, docs(1, 2), ticket=8)]
    gathered = gather(feed(units), slots, units=UNITS, start=0, size=1)
    _, end, block = next(gathered)
    assert (end, texts(block), slots.released) == (2, ["01:00", "01:01"], [7])
    gathered.close()
    assert slots.released == [7, 8]


def test_a_sparse_unit_is_copied_out_compactly_and_its_slot_given_back() -> None:
    slots = Slots()
    many = docs(5, 20, size=10)
    loaded = unit(5, many, ticket=3, left_out=[j for j in range(20) if j not in (4, 11)])
    gathered = gather(feed([loaded]), slots, units=UNITS, start=0, size=100)
    (_, _, block) = next(gathered)
    assert slots.released == [3]  # before the block is handed out
    assert block.spans == []
    assert texts(block) == [many[4].decode(), many[11].decode()]
    assert block.sources[0][0].nbytes == len(many[4]) + len(many[11])
    # A quarter of the bytes or more stays in the slot.
    dense = unit(6, many, ticket=4, left_out=range(15))
    ((_, _, block),) = gather(feed([dense]), slots, units=UNITS, start=0, size=100)
    assert slots.released == [3, 4]  # at the end only


def test_a_block_keeps_at_most_hold_units_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "HOLD_UNITS", 3)
    slots = Slots()
    units = [unit(u, docs(u, 2), ticket=100 + u) for u in range(5)]
    gathered = gather(feed(units), slots, units=UNITS, start=0, size=10)
    (_, _, block) = next(gathered)
    # Units 0 and 1 were copied out of their slots when units 3 and 4 came.
    assert slots.released == [100, 101]
    assert [ticket for ticket, *_ in block.spans] == [102, 103, 104]
    assert texts(block) == [d.decode() for u in range(5) for d in docs(u, 2)]
    assert isinstance(block.sources[0][0].obj, bytes)  # a copy, not the slot's memory
    gathered.close()
    assert sorted(slots.released) == [100, 101, 102, 103, 104]


def test_slots_are_given_back_when_the_next_block_is_asked_for() -> None:
    slots = Slots()
    units = [unit(u, docs(u, 2), ticket=u) for u in range(4)]
    gathered = gather(feed(units), slots, units=UNITS, start=0, size=4)
    next(gathered)
    assert slots.released == []
    next(gathered)
    assert slots.released == [0, 1]
    with pytest.raises(StopIteration):
        next(gathered)
    assert slots.released == [0, 1, 2, 3]


def test_an_error_while_counting_a_unit_lets_every_slot_go() -> None:
    slots = Slots()
    units = [unit(0, docs(0, 2), ticket=0), unit(1, docs(1, 2), ticket=1)]
    closed = []

    def source() -> Generator[Loaded, None, None]:
        try:
            yield from units
        finally:
            closed.append(True)

    def on_unit(loaded: Loaded, kept: Loaded) -> None:
        if loaded.unit == 1:
            raise RuntimeError("policy says stop")

    gathered = gather(source(), slots, units=UNITS, start=0, size=10, on_unit=on_unit)
    with pytest.raises(RuntimeError, match="policy says stop"):
        next(gathered)
    assert sorted(slots.released) == [0, 1]
    assert closed == [True]


def test_token_ids_are_kept_by_their_dtype() -> None:
    dtype = np.dtype(np.uint16)
    ids = [np.arange(k, k + n, dtype=dtype) for k, n in ((1, 3), (10, 2), (20, 4))]
    data = b"".join(a.tobytes() for a in ids)
    offsets = [0, 6, 10]
    loaded = Loaded(2, data, ["a", "b", "c"], offsets, [3, 2, 4], [], 0, -1, [3, 2, 4])
    ((_, _, block),) = gather(feed([loaded]), Slots(), units=UNITS, start=0, size=5, dtype=dtype)
    assert block.counts == [3, 2, 4]
    assert block.sources[0][4] == dtype
    for k, want in enumerate(ids):
        got = np.frombuffer(block.sources[k][0], dtype, block.counts[k], block.offsets[k])
        assert got.tolist() == want.tolist()


def test_a_yielded_block_s_lists_never_change() -> None:
    """The rule a ``Mark`` relies on: it holds a block's lists by reference."""
    units = [unit(u, docs(u, 3), ticket=u) for u in range(6)]
    gathered = gather(feed(units), Slots(), units=UNITS, start=0, size=3)
    seen = []
    for _, _, block in gathered:
        seen.append((block, list(block.sizes), list(block.offsets), _names(block)))
    assert len({id(block) for block, *_ in seen}) == 6  # a new Block each time
    for block, sizes, offsets, names in seen:
        assert (block.sizes, block.offsets, _names(block)) == (sizes, offsets, names)


@pytest.mark.parametrize("workers", [0, 2])
def test_more_units_than_a_block_holds_documents_are_each_read_once(
    tmp_path: Path, workers: int
) -> None:
    """Ten members of 3 documents, blocks of 5: the plan's units past the first block were
    fed as ``order[p % documents in the block]`` (a generator reading a rebound name), so
    units 0..5 came round again and 21 of the 30 documents never did (issue 30)."""
    write_corpus(tmp_path / "c", subsets=1, members=10, docs=3, seed=0, workers=1)
    for shuffle in (False, True):
        names = [d.name for d in Loader(tmp_path / "c", workers=workers, shuffle=shuffle,
                                        shuffle_buffer=5)]  # fmt: skip
        assert len(names) == len(set(names)) == 30


def test_a_ctrl_c_while_a_unit_is_added_lets_every_slot_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C between a unit's slot being kept and its documents being listed (CI caught it
    in ``os.path.basename``): giving the slots back read the unit's sources, which were not
    there (``IndexError``, and ``owt`` exited 1 with a traceback instead of 130)."""
    slots = Slots()
    units = [unit(0, docs(0, 2), ticket=0), unit(1, docs(1, 2), ticket=1)]
    real = blocks.os.path.basename

    def interrupted(path: str) -> str:
        if path.startswith("s0-1"):
            raise KeyboardInterrupt
        return real(path)

    monkeypatch.setattr(blocks.os.path, "basename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        next(gather(feed(units), slots, units=UNITS, start=0, size=10))
    assert slots.released == [0, 1]
    with pytest.raises(ValueError, match="released memoryview"):
        len(units[1].data)  # its view let go too
