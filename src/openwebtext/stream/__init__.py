"""The running stream: blocks, epochs, state, ``Stream``, counting for even sharding, and
packed ``Batches``, made ahead on a thread (``ahead``).

Rule: imports the leaves, ``source``, ``index`` and ``engine``; never ``prepare`` (its
sibling).
"""

from __future__ import annotations

from openwebtext.plan import Rule
from openwebtext.stream.batches import (
    Batches,
    BatchIterator,
    batch_ids,
    batches_start,
    check_packing,
    packing_window,
)
from openwebtext.stream.blocks import gather
from openwebtext.stream.counters import Counters
from openwebtext.stream.counts import count_documents, ensure_counts
from openwebtext.stream.epochs import check_in_run, members_in_run
from openwebtext.stream.mixbatches import MixtureBatches
from openwebtext.stream.mixed import MixedStream
from openwebtext.stream.mixreshard import reshard
from openwebtext.stream.mixschema import MixMark, MixRun, MixtureStats
from openwebtext.stream.mixture import Mixture
from openwebtext.stream.packed import PackedBatch, cu_seqlens
from openwebtext.stream.packing import WINDOW, BestFitBatches
from openwebtext.stream.readahead import Ahead, Stateful, ahead
from openwebtext.stream.schema import (
    BatchesState,
    DocumentState,
    MixtureState,
    Packing,
    Position,
    kind_of,
)
from openwebtext.stream.shapes import Schedule, check_sizes, schedule_of
from openwebtext.stream.source import DocumentSource, Running, RunParts, TokenRun, WindowAhead
from openwebtext.stream.state import (
    Mark,
    Stats,
    check_state,
    config_of,
    load_state,
    resume_options,
)
from openwebtext.stream.stream import Stream
from openwebtext.stream.turns import InsideNext, closed

__all__ = [
    "WINDOW",
    "Ahead",
    "BatchIterator",
    "Batches",
    "BatchesState",
    "BestFitBatches",
    "Counters",
    "DocumentSource",
    "DocumentState",
    "InsideNext",
    "Mark",
    "MixMark",
    "MixRun",
    "MixedStream",
    "Mixture",
    "MixtureBatches",
    "MixtureState",
    "MixtureStats",
    "PackedBatch",
    "Packing",
    "Position",
    "Rule",
    "RunParts",
    "Running",
    "Schedule",
    "Stateful",
    "Stats",
    "Stream",
    "TokenRun",
    "WindowAhead",
    "ahead",
    "batch_ids",
    "batches_start",
    "check_in_run",
    "check_packing",
    "check_sizes",
    "check_state",
    "closed",
    "config_of",
    "count_documents",
    "cu_seqlens",
    "ensure_counts",
    "gather",
    "kind_of",
    "load_state",
    "members_in_run",
    "packing_window",
    "reshard",
    "resume_options",
    "schedule_of",
]
