"""The only place that knows processes: reading one unit (``Reader``), the worker protocol
(``tasks``), and the pools (``open_pool``, ``PoolOptions``).

Rule: imports the leaves, ``openwebtext.source`` and ``openwebtext.index``.
"""

from __future__ import annotations

from openwebtext.engine.pool import (
    InlinePool,
    Loaded,
    Pool,
    PoolOptions,
    WorkerPool,
    cpu_count,
    open_pool,
)
from openwebtext.engine.read import Member, Reader, encode_member, nanogpt_text
from openwebtext.engine.tasks import Done, Failed, Request, State, Tasks, WorkerTraceback, failed

__all__ = [
    "Done",
    "Failed",
    "InlinePool",
    "Loaded",
    "Member",
    "Pool",
    "PoolOptions",
    "Reader",
    "Request",
    "State",
    "Tasks",
    "WorkerPool",
    "WorkerTraceback",
    "cpu_count",
    "encode_member",
    "failed",
    "nanogpt_text",
    "open_pool",
]
