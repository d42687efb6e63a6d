"""The worker protocol on its own: the messages, and the life of a task (``tasks.Tasks``).

No process here: the table is driven by hand through each transition its docstring draws.
"""

from __future__ import annotations

import pickle
import traceback

import pytest

from openwebtext import CorruptDocument, CorruptMember, WorkerError
from openwebtext.engine import Done, Request, State, failed
from openwebtext.engine.tasks import Failed, Tasks
from openwebtext.errors import WorkerTraceback
from openwebtext.records import Unit

SENT, QUEUED, DONE, HELD, ABANDONED = State
UNIT = Unit("/data/urlsf_subset00.tar", "urlsf_subset00-7_data.xz", 512, 100, "xz", "s", 6)


def done(seq: int) -> Done:
    return Done(seq, 10, None, ["a.txt"], [0], [10], [], 0, None)


def test_messages_cross_a_pipe_intact() -> None:
    dropped = CorruptDocument("too large", "/f.tar", "m.xz", "d.txt")
    for message in (
        Request(3, 7, None),
        Done(3, 10, b"0123456789", ["a.txt"], [0], [10], [dropped], 1, [4]),
        Failed(3, CorruptMember("corrupt xz data", "/f.tar", "m.xz"), "Traceback ..."),
    ):
        back = pickle.loads(pickle.dumps(message))
        assert type(back) is type(message)
        assert repr(back) == repr(message)
    error = pickle.loads(pickle.dumps(Done(0, 0, None, [], [], [], [dropped], 0, None))).dropped[0]
    assert (error.path, error.member, error.document) == ("/f.tar", "m.xz", "d.txt")


def _raises_in_the_worker() -> None:
    raise KeyError("no such token")


def test_failed_carries_the_worker_traceback_as_the_cause() -> None:
    try:
        _raises_in_the_worker()
    except KeyError as exc:
        message = failed(5, exc, UNIT)
    back = pickle.loads(pickle.dumps(message))  # as it crosses the pipe
    error = back.exception()
    assert isinstance(error, WorkerError)
    assert (error.path, error.member) == (UNIT.path, UNIT.member)
    assert str(error) == f"unexpected KeyError reading {UNIT.path}[{UNIT.member}]: 'no such token'"
    assert isinstance(error.__cause__, WorkerTraceback)
    chain = "".join(traceback.format_exception(error))
    assert "in _raises_in_the_worker" in chain
    assert 'raise KeyError("no such token")' in chain
    assert back.exception() is error and chain == "".join(traceback.format_exception(error))


def test_a_library_error_stays_itself() -> None:
    own = CorruptMember("corrupt xz data", UNIT.path, UNIT.member)
    try:
        raise own
    except CorruptMember as exc:
        message = failed(1, exc, UNIT)
    assert message.error is own
    no_traceback = Failed(2, WorkerError("worker 0 exited"), "")  # made by the consumer
    assert no_traceback.exception().__cause__ is None


def test_a_task_is_sent_done_held_and_released() -> None:
    tasks = Tasks(2)
    a, b = tasks.new(10), tasks.new(11)
    assert (a.seq, b.seq, tasks.next_seq, tasks.free) == (0, 1, 2, 0)
    assert {a.slot, b.slot} == {0, 1}
    assert tasks.states() == {0: SENT, 1: SENT}
    assert tasks.ready(0) is None
    tasks.arrived(done(1))  # out of order: kept until its turn
    assert tasks.ready(1) == done(1) and tasks.ready(0) is None
    tasks.arrived(done(0))
    assert tasks.hand_out(0) is a and tasks.states() == {0: HELD, 1: DONE}
    tasks.release(0)
    tasks.release(0)  # twice, or an unknown ticket: nothing
    tasks.release(-1)
    assert tasks.states() == {1: DONE} and tasks.free == 1
    c = tasks.new(12)
    assert c.slot == a.slot  # the freed slot is reused


def test_a_dead_worker_queue_blames_only_the_first() -> None:
    tasks = Tasks(4)
    first, second, third = tasks.new(1), tasks.new(2), tasks.new(3)
    error = WorkerError("worker 0 exited", UNIT.path, UNIT.member)
    assert tasks.lost(third.seq, blamed=False, retries=0, error=error) is None
    assert tasks.lost(second.seq, blamed=False, retries=0, error=error) is None
    assert tasks.lost(first.seq, blamed=True, retries=0, error=error) is None
    assert tasks.states() == {0: DONE, 1: QUEUED, 2: QUEUED}
    result = tasks.ready(0)
    assert isinstance(result, Failed) and result.exception() is error
    assert tasks.resend() is second  # the lowest seq first, whatever the order they were lost
    assert tasks.resend() is third
    assert tasks.resend() is None
    assert tasks.states() == {0: DONE, 1: SENT, 2: SENT}


def test_a_blamed_task_is_retried_while_it_has_attempts() -> None:
    tasks = Tasks(1)
    task = tasks.new(1)
    error = WorkerError("worker 0 hung")
    assert tasks.lost(0, blamed=True, retries=1, error=error) is task  # send it again now
    assert (task.state, task.attempts) == (SENT, 1)
    assert tasks.lost(0, blamed=True, retries=1, error=error) is None
    assert task.state is DONE


def test_a_run_left_early() -> None:
    tasks = Tasks(5)
    for unit in range(5):
        tasks.new(unit)
    tasks.arrived(done(0))
    tasks.hand_out(0)  # with the consumer
    tasks.arrived(done(1))  # arrived, never handed out
    tasks.lost(2, blamed=False, retries=0, error=WorkerError("x"))  # waiting to be sent again
    tasks.abandon()
    assert tasks.states() == {0: HELD, 3: ABANDONED, 4: ABANDONED}
    assert tasks.resend() is None  # a queued task of a run left is not sent again
    assert tasks.free == 2
    tasks.arrived(done(3))  # a late result: dropped, its slot freed
    tasks.lost(4, blamed=True, retries=1, error=WorkerError("x"))  # its worker died: no retry
    tasks.release(0)
    assert tasks.states() == {} and tasks.free == 5


def test_only_the_drawn_transitions_happen() -> None:
    tasks = Tasks(1)
    tasks.new(0)
    with pytest.raises(AssertionError):
        tasks.hand_out(0)  # SENT cannot be handed out
    tasks.arrived(done(0))
    with pytest.raises(AssertionError):
        tasks.arrived(done(0))  # nor arrive twice
