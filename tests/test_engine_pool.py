"""The worker pools on their own, against the ``Pool`` protocol (``workers.open_pool``).

Dispatch and reorder, a killed worker, a hung worker, abandoned runs, errors raised in a
worker arriving with the worker's traceback as their cause, and consumers that pause longer
than ``timeout`` while the workers have nothing to do (issue 14). Faults are injected by
the ``worker_fault`` fixture (``support.fault_on``), which patches ``Reader.read`` before the
pool forks: the workers inherit the patch.

Every test that waits on workers has its own short deadline: a bug that hangs the pool fails
the test in seconds, with pytest-timeout naming it.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from openwebtext import Corpus, CorruptMember, Loader, WorkerError
from openwebtext.engine import Loaded, Pool, PoolOptions, Reader, State, open_pool
from openwebtext.engine.inline import InlinePool
from openwebtext.engine.member import Member
from openwebtext.engine.parent import WorkerPool
from openwebtext.errors import WorkerTraceback
from openwebtext.records import Unit
from openwebtext.tokenizer import Tokenizer, load_tokenizer
from support import child_pids, damage, member_offset, read_members

UnitDocs = dict[str, str]  # one unit's documents: name -> text


@pytest.fixture(scope="module")
def units(small_corpus: Path) -> tuple[Unit, ...]:
    return tuple(Corpus.open(small_corpus).units)


@pytest.fixture(scope="module")
def pristine(small_corpus: Path, units: tuple[Unit, ...]) -> list[UnitDocs]:
    """Each unit's documents, by the independent reference reader, in unit order."""
    members = read_members(sorted(small_corpus.glob("*.tar")))
    return [members[(os.path.basename(u.path), u.member)] for u in units]


def docs(loaded: Loaded) -> UnitDocs:
    """A unit's documents as the pool hands them out (read before asking for the next)."""
    data = loaded.data
    return {
        name: bytes(data[offset : offset + size]).decode()
        for name, offset, size in zip(loaded.names, loaded.offsets, loaded.sizes, strict=True)
    }


def collect(pool: Pool, order: Iterable[int]) -> list[tuple[int, UnitDocs, list[Exception]]]:
    """``(unit, documents, errors)`` of every unit ``pool.run(order)`` yields."""
    return [(loaded.unit, docs(loaded), list(loaded.errors)) for loaded in pool.run(order)]


def logging_reads(log: Path, slow: str | None = None) -> object:
    """A ``Reader.read`` that appends ``pid member`` to ``log`` once it has read a unit;
    ``slow`` takes 0.3 s longer."""
    real = Reader.read

    def read(self: Reader, unit: Unit) -> Member:
        if unit.member == slow:
            time.sleep(0.3)
        member = real(self, unit)
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {unit.member}\n")
        return member

    return read


def where(unit: Unit) -> str:
    return re.escape(f"{unit.path}[{unit.member}]")


# -- dispatch and reorder ------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_units_come_back_in_the_order_asked_whatever_finishes_first(
    workers: int,
    units: tuple[Unit, ...],
    pristine: list[UnitDocs],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order = [4, 1, 5, 0, 3, 2, 4]  # a unit may come twice (even sharding's pad does that)
    log = tmp_path / "reads"
    monkeypatch.setattr(Reader, "read", logging_reads(log, slow=units[order[0]].member))
    with open_pool(units, PoolOptions(workers=workers, prefetch=2)) as pool:
        assert isinstance(pool, InlinePool if workers == 0 else WorkerPool)
        got = collect(pool, order)
    assert [unit for unit, _, _ in got] == order
    assert [d for _, d, _ in got] == [pristine[u] for u in order]
    assert not any(errors for _, _, errors in got)
    reads = [line.split() for line in log.read_text().splitlines()]
    members = [units[u].member for u in order]
    assert sorted(m for _, m in reads) == sorted(members)  # each request read exactly once
    for pid in {pid for pid, _ in reads}:  # each worker reads its requests in plan order
        mine = [m for p, m in reads if p == pid]
        it = iter(members)
        assert all(m in it for m in mine), (mine, members)
    if workers == 2:  # the slow first unit finished after others, and still came first
        assert reads[0][1] != members[0]


# -- a killed worker -------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_killed_worker_blames_only_its_unit_and_sends_the_rest_again(
    units: tuple[Unit, ...],
    pristine: list[UnitDocs],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    worker_fault: Callable[..., Path],
) -> None:
    # One worker with 3 requests queued: when it dies on unit 1, units 2 and 3 are waiting
    # in its pipe, unread. They go to the fresh worker without blame.
    log = tmp_path / "reads"
    logged = logging_reads(log)
    monkeypatch.setattr(Reader, "read", logged)
    worker_fault(units[1].member, "kill")
    with open_pool(units, PoolOptions(workers=1, prefetch=3)) as pool:
        got = collect(pool, range(6))
        assert len(child_pids()) == 1  # replaced, not one more
    assert [unit for unit, _, _ in got] == list(range(6))
    (error,) = got[1][2]
    assert isinstance(error, WorkerError)
    assert re.fullmatch(
        rf"worker 0 \(pid \d+\) exited with code -9 while reading {where(units[1])}", str(error)
    )
    assert (error.path, error.member) == (units[1].path, units[1].member)
    assert got[1][1] == {}
    for unit in (0, 2, 3, 4, 5):
        assert got[unit][1:] == (pristine[unit], [])
    pids = {member: pid for pid, member in (ln.split() for ln in log.read_text().splitlines())}
    assert pids[units[0].member] != pids[units[2].member] == pids[units[3].member]
    assert child_pids() == []


@pytest.mark.timeout(30)
def test_killed_worker_unit_is_retried_on_a_fresh_worker(
    units: tuple[Unit, ...],
    pristine: list[UnitDocs],
    worker_fault: Callable[..., Path],
) -> None:
    marker = worker_fault(units[2].member, "kill", times=1)  # killed once
    with open_pool(units, PoolOptions(workers=2, retries=1)) as pool:
        got = collect(pool, range(6))
    assert marker.exists()
    assert got == [(u, pristine[u], []) for u in range(6)]


# -- a hung worker ---------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_hung_worker_is_killed_and_its_unit_blamed(
    units: tuple[Unit, ...],
    pristine: list[UnitDocs],
    worker_fault: Callable[..., Path],
) -> None:
    worker_fault(units[2].member, "hang")
    start = time.monotonic()
    with open_pool(units, PoolOptions(workers=2, timeout=0.5)) as pool:
        got = collect(pool, range(6))
        hung_for = time.monotonic() - start
        assert len(child_pids()) == 2  # the hung one was killed and replaced
    assert hung_for < 20  # a bound against waiting for the hang, not a speed check
    (error,) = got[2][2]
    assert isinstance(error, WorkerError)
    assert re.fullmatch(
        rf"worker \d \(pid \d+\) sent nothing for 0.5 s while reading {where(units[2])}",
        str(error),
    )
    assert (error.path, error.member) == (units[2].path, units[2].member)
    for unit in (0, 1, 3, 4, 5):
        assert got[unit] == (unit, pristine[unit], [])
    assert child_pids() == []


# -- abandoned runs --------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_close_mid_run_leaves_no_worker(units: tuple[Unit, ...]) -> None:
    pool = WorkerPool(units, PoolOptions(workers=2))
    run = pool.run(range(6))
    next(run)
    assert len(child_pids()) == 2
    pool.close()
    assert child_pids() == []
    run.close()  # the run, left after its pool, ends quietly
    with pytest.raises(WorkerError, match="closed"):
        next(pool.run(range(6)))


@pytest.mark.timeout(30)
def test_close_interrupted_goes_on_when_called_again(
    units: tuple[Unit, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C inside ``close`` (in its first join): a second ``close`` stops and reaps the
    workers left, and closes their pipes (before, it returned at once: zombies and open
    descriptors stayed)."""
    import multiprocessing.process as mpp

    pool = WorkerPool(units, PoolOptions(workers=2))
    run = pool.run(range(6))
    next(run)
    fds = len(os.listdir("/proc/self/fd"))
    real, armed = mpp.BaseProcess.join, [True]

    def join(self: mpp.BaseProcess, timeout: float | None = None) -> None:
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt
        real(self, timeout)

    monkeypatch.setattr(mpp.BaseProcess, "join", join)
    with pytest.raises(KeyboardInterrupt):
        pool.close()
    pool.close()
    run.close()
    assert [p for p, *_ in _zombies()] == [] and child_pids() == []
    assert len(os.listdir("/proc/self/fd")) < fds


@pytest.mark.timeout(30)
def test_a_pool_closed_in_a_forked_child_leaves_its_parent_s_workers(
    units: tuple[Unit, ...],
) -> None:
    """A process forked with a running pool (a DataLoader worker forked from a process whose
    dataset held one) closes its copy without touching the workers, which are its parent's
    (before: ``AssertionError: can only test a child process``, the child killed)."""
    pool = WorkerPool(units, PoolOptions(workers=2))
    run = pool.run(range(6))
    next(run)
    workers = child_pids()
    pid = os.fork()
    if pid == 0:  # the child: its exit status says how the close went
        try:
            pool.close()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_pids() == workers  # (the parent's workers, untouched)
    assert len(list(run)) == 5  # and they go on serving it
    pool.close()
    assert child_pids() == []


def _zombies() -> list[tuple[int, str]]:
    out = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == os.getpid() and fields[0] == "Z":
            out.append((int(name), fields[0]))
    return out


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("hold", [0, 3])
def test_runs_left_early_lose_nothing_and_leak_no_slot(
    workers: int, hold: int, units: tuple[Unit, ...], pristine: list[UnitDocs]
) -> None:
    """Runs left after one unit, their other units still in flight: their late results are
    dropped, never handed to a later run, and their slots come back."""
    options = PoolOptions(workers=workers, prefetch=2, hold=hold)
    with open_pool(units, options) as pool:
        for k in range(8):  # more runs than the pool has slots
            run = pool.run([(k + j) % 6 for j in range(6)])
            loaded = next(run)
            assert (loaded.unit, docs(loaded)) == (k % 6, pristine[k % 6])
            run.close()
            pool.release(loaded.ticket)
        order = [5, 4, 3, 2, 1, 0]
        got = []
        for loaded in pool.run(order):
            got.append((loaded.unit, docs(loaded), list(loaded.errors)))
            pool.release(loaded.ticket)
        assert got == [(u, pristine[u], []) for u in order]
        if isinstance(pool, WorkerPool):  # what still holds a slot awaits a late result
            assert set(pool.tasks.states().values()) <= {State.ABANDONED}
    assert child_pids() == []


# -- errors raised in a worker ---------------------------------------------------------------


def _reader_blows_up() -> None:
    raise ValueError("boom in the worker")  # the line the consumer's traceback must show


def _chain(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [0, 2])
def test_unexpected_worker_error_is_a_worker_error_with_the_worker_traceback(
    workers: int,
    units: tuple[Unit, ...],
    pristine: list[UnitDocs],
    worker_fault: Callable[..., Path],
) -> None:
    worker_fault({u.member for u in units if u.member.endswith("-2_data.xz")}, _reader_blows_up)
    with open_pool(units, PoolOptions(workers=workers)) as pool:
        got = collect(pool, range(6))
    bad = [u for u in range(6) if units[u].member.endswith("-2_data.xz")]
    assert len(bad) == 2
    for unit, found, errors in got:
        if unit not in bad:
            assert (found, errors) == (pristine[unit], [])
            continue
        (error,) = errors
        assert isinstance(error, WorkerError)
        assert (error.path, error.member) == (units[unit].path, units[unit].member)
        assert str(error) == (
            f"unexpected ValueError reading {units[unit].path}[{units[unit].member}]: "
            "boom in the worker"
        )
        chain = _chain(error)
        assert "in _reader_blows_up" in chain
        assert 'raise ValueError("boom in the worker")' in chain
        if workers:
            assert isinstance(error.__cause__, WorkerTraceback)
        else:
            assert isinstance(error.__cause__, ValueError)


def _encode_batch_blows_up(self: Tokenizer, texts: object) -> list[list[int]]:
    raise RuntimeError("the tokenizer failed")  # the line the consumer's traceback must show


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [0, 1])
def test_tokenizer_error_in_a_worker_shows_its_line(
    workers: int, units: tuple[Unit, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Tokenizer, "encode_batch", _encode_batch_blows_up)
    with open_pool(units, PoolOptions(workers=workers, tokenizer=load_tokenizer("bytes"))) as pool:
        got = collect(pool, [3])
    ((_, _, (error,)),) = got
    assert isinstance(error, WorkerError)
    assert (error.path, error.member) == (units[3].path, units[3].member)
    chain = _chain(error)
    assert "in _encode_batch_blows_up" in chain
    assert 'raise RuntimeError("the tokenizer failed")' in chain
    assert "in encode_member" in chain  # where the worker called it


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [0, 2])
def test_library_error_keeps_its_type_and_gains_the_worker_traceback(
    workers: int, small_corpus: Path, pristine: list[UnitDocs], tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus, corpus)
    units = Corpus.open(corpus).units
    offset, size = member_offset(Path(units[4].path), units[4].member)
    damage(Path(units[4].path), offset + size // 2, b"\xff" * 64)
    units = Corpus.open(corpus).units  # (as damaged: else "changed since it was indexed")
    with open_pool(units, PoolOptions(workers=workers)) as pool:
        got = collect(pool, range(6))
    (error,) = got[4][2]
    assert type(error) is CorruptMember
    assert (error.path, error.member) == (units[4].path, units[4].member)
    chain = _chain(error)
    assert "LZMAError" in chain  # what the worker caught
    assert re.search(r'read\.py", line \d+, in read\n', chain)  # where it raised ours
    assert [found for unit, found, _ in got if unit != 4] == pristine[:4] + pristine[5:]


# -- idle workers and the hang timeout (issue 14) ------------------------------------------


PAUSE = 1.0  # twice the timeout below


@pytest.mark.timeout(30)
def test_pause_after_the_last_unit_was_dispatched_is_not_a_hang(
    units: tuple[Unit, ...], pristine: list[UnitDocs]
) -> None:
    """Every unit is sent at once (2 workers x 3); the consumer pauses with results waiting."""
    with WorkerPool(units, PoolOptions(workers=2, prefetch=3, timeout=0.5)) as pool:
        got = []
        for k, loaded in enumerate(pool.run(range(6))):
            if k == 0:
                workers = set(child_pids())
                time.sleep(PAUSE)
            got.append((loaded.unit, docs(loaded), list(loaded.errors)))
        assert set(child_pids()) == workers  # none was killed
    assert got == [(u, pristine[u], []) for u in range(6)]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("left_early", [False, True])
def test_pause_between_runs_is_not_a_hang(
    left_early: bool, units: tuple[Unit, ...], pristine: list[UnitDocs]
) -> None:
    """An epoch boundary: the consumer pauses (an evaluation pass) with the workers idle, or
    with the results of a run it left early waiting; then the next run starts."""
    with WorkerPool(units, PoolOptions(workers=2, prefetch=2, timeout=0.5)) as pool:
        if left_early:
            run = pool.run(range(6))
            next(run)
            run.close()
        else:
            assert collect(pool, range(6)) == [(u, pristine[u], []) for u in range(6)]
        workers = set(child_pids())
        time.sleep(PAUSE)
        assert collect(pool, range(6)) == [(u, pristine[u], []) for u in range(6)]
        time.sleep(PAUSE)
        # One unit: one worker gets it, the other waits idle while the consumer waits.
        assert collect(pool, [5]) == [(5, pristine[5], [])]
        assert set(child_pids()) == workers  # none was killed


# -- through the loader ------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [0, 2])
def test_loader_error_shows_the_worker_line(
    workers: int, small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Tokenizer, "encode_batch", _encode_batch_blows_up)
    expected = r"unexpected RuntimeError reading .*: the tokenizer failed"
    with pytest.raises(WorkerError, match=expected) as info:
        list(Loader(small_corpus, workers=workers, tokenizer="bytes"))
    assert child_pids() == []
    assert 'raise RuntimeError("the tokenizer failed")' in _chain(info.value)
