"""The running stream: blocks, epochs, state, ``Stream``, counting for even sharding, and
packed ``Batches``.

Rule: imports the leaves, ``source``, ``index`` and ``engine``; never ``prepare`` (its
sibling).
"""

from __future__ import annotations

from openwebtext.stream.batches import Batches, batches_start, check_sizes
from openwebtext.stream.blocks import Block, gather
from openwebtext.stream.counters import Counters
from openwebtext.stream.counts import count_documents, ensure_counts
from openwebtext.stream.epochs import members_in_run
from openwebtext.stream.packing import (
    PACKING,
    WINDOW,
    BestFitBatches,
    PackedBatch,
    best_fit,
    cu_seqlens,
)
from openwebtext.stream.reshard import KEEP, reshard
from openwebtext.stream.schema import BatchesState, DocumentState, Position, Reshard
from openwebtext.stream.state import (
    Mark,
    Stats,
    check_state,
    config_of,
    load_state,
    resume_options,
)
from openwebtext.stream.stream import Stream

__all__ = [
    "KEEP",
    "PACKING",
    "WINDOW",
    "Batches",
    "BatchesState",
    "BestFitBatches",
    "Block",
    "Counters",
    "DocumentState",
    "Mark",
    "PackedBatch",
    "Position",
    "Reshard",
    "Stats",
    "Stream",
    "batches_start",
    "best_fit",
    "check_sizes",
    "check_state",
    "config_of",
    "count_documents",
    "cu_seqlens",
    "ensure_counts",
    "gather",
    "load_state",
    "members_in_run",
    "reshard",
    "resume_options",
]
