"""The running stream: blocks, epochs, state, ``Stream``, counting for even sharding, and
packed ``Batches``.

Rule: imports the leaves, ``source``, ``index`` and ``engine``; never ``prepare`` (its
sibling).
"""

from __future__ import annotations

from openwebtext.stream.batches import Batches, batches_start
from openwebtext.stream.blocks import Block, gather
from openwebtext.stream.counts import count_documents, ensure_counts
from openwebtext.stream.reshard import reshard
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
    "Batches",
    "Block",
    "Mark",
    "Stats",
    "Stream",
    "batches_start",
    "check_state",
    "config_of",
    "count_documents",
    "ensure_counts",
    "gather",
    "load_state",
    "reshard",
    "resume_options",
]
