"""The only place that knows processes: reading one unit (``Reader``), the worker protocol
(``tasks``), the pool options (``PoolOptions``), and the pools (``open_pool``): the parent side
(``WorkerPool``), the child side (a worker's main loop) and the inline pool (``InlinePool``);
``Halt``: what ends a pool's waits on a thread from another thread (its close).

Rule: imports the leaves, ``openwebtext.source`` and ``openwebtext.index``.
"""

from __future__ import annotations

from openwebtext.engine.encode import encode_member, nanogpt_text
from openwebtext.engine.halting import Halt, Halted, check_halt, forking
from openwebtext.engine.options import Lane, PoolOptions
from openwebtext.engine.pool import LanePool, Pool, cpu_count, daemonic, open_lanes, open_pool
from openwebtext.engine.read import Reader
from openwebtext.engine.receive import recv_within
from openwebtext.engine.tasks import (
    Done,
    Loaded,
    Request,
    State,
    failed,
    failure,
)

__all__ = [
    "Done",
    "Halt",
    "Halted",
    "Lane",
    "LanePool",
    "Loaded",
    "Pool",
    "PoolOptions",
    "Reader",
    "Request",
    "State",
    "check_halt",
    "cpu_count",
    "daemonic",
    "encode_member",
    "failed",
    "failure",
    "forking",
    "nanogpt_text",
    "open_lanes",
    "open_pool",
    "recv_within",
]
