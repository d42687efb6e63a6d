"""Ray engine: ``owt tokenize --engine ray`` and ``read_openwebtext`` (the ``ray`` extra).

Ray schedules; this package only cuts the work. Both entry points start from the same unit
index as the local engine (``Corpus.open``):

- ``tokenize`` (``ray.slices``) cuts ``prepare.unit_order`` into slices of
  ``units_per_task`` units, runs ``prepare.prepare(..., shard=(i, n))`` for each slice as
  one Ray task (one CPU, no worker pool of its own) into ``OUT/.owt-ray/i-of-n``, then
  ``prepare.merge`` joins them into exactly the files the local engine writes. A slice
  already finished is kept, a slice cut short goes on from its checkpoint: run the same
  command again after an interruption. ``OUT`` may be a URL (``s3://bucket/prefix/``): each
  task then builds its slice on its own node's disk and uploads it when it is finished,
  ``meta.json`` last; the merge, on the driver, downloads the slices and uploads the files.
- ``read_openwebtext`` (``ray.dataset``) returns a ``ray.data.Dataset`` of documents. It is
  built with ``ray.data.from_items`` (one item per group of units) and ``map_batches``,
  both public, stable API, rather than a ``Datasource``/``ReadTask``, which Ray marks
  DeveloperAPI.

Without an address, a private local Ray instance is started (``ray.cluster``: no
dashboard, its files in a temporary folder removed at the end, nothing under ``~``) and
stopped when the work ends. On a cluster, the corpus must be where every node can read it
(object storage or a shared file system), and ``OUT`` a URL or a folder on a file system
every node shares.

Users call what ``__all__`` names; ``local_ray`` (the private instance ``tokenize`` starts)
and ``SLICES`` (where a run keeps its slices) are re-exported for the tests and benchmarks.
"""

from __future__ import annotations

from openwebtext.ray.cluster import EngineError, library_errors
from openwebtext.ray.cluster import local_ray as local_ray
from openwebtext.ray.dataset import SkipLog, read_openwebtext
from openwebtext.ray.slices import SLICES as SLICES
from openwebtext.ray.slices import tokenize

__all__ = ["EngineError", "SkipLog", "library_errors", "read_openwebtext", "tokenize"]
