"""Prepare nanoGPT-style token files (``owt tokenize``, ``owt merge``): resumable, shardable.

A run writes ``OUT/train.bin`` and ``OUT/val.bin`` (every document's ids, then the
end-of-text id, as flat arrays of the tokenizer's dtype: uint16 for GPT-2) and
``OUT/meta.json`` (the options, the counts, and each file's size and sha256).

Two split rules (``PrepareOptions.split_rule``, ``owt tokenize --split``):

- ``hash`` (the default): a document is held out when a keyed hash of its name falls below
  ``val_fraction`` (``plan.in_validation``, the same rule as ``Options(split="val")``).
  Units are taken in the order of ``plan.plan`` (shuffled by ``seed`` unless ``shuffle`` is
  False), documents in archive order within a unit. One pass, no temporary copy.
- ``nanogpt``: byte-identical to nanoGPT's ``data/openwebtext/prepare.py`` reading the same
  archives through the Hugging Face ``openwebtext`` loading script. Documents in corpus
  order (files sorted by name, members and documents in archive order), each text
  ``engine.nanogpt_text(text)``; ``n_val = ceil(val_fraction * n)``,
  ``perm = numpy.random.default_rng(val_seed).permutation(n)``, val.bin holds documents
  ``perm[:n_val]`` and train.bin ``perm[n_val:]``, each in permutation order. Two passes:
  tokenize in corpus order into ``.tokens.bin.part`` (recording each document's length),
  then copy in permutation order. Memory: 24 bytes per document; temporary disk: the size
  of the output plus 8 bytes per document.

Both survive interruption (``workdir``): run again with the same arguments and the run goes
on from its last checkpoint; the files are the same as an uninterrupted run's.

Slices: ``prepare(..., start=, stop=)`` (or ``shard=(i, n)``) does positions
``[start, stop)`` of ``unit_order`` only, into a folder of its own (``hash``: its train.bin
and val.bin; ``nanogpt``: ``tokens.bin`` and ``lengths.bin`` in corpus order, since the
permutation needs every document). ``merge`` joins slices that tile every position into
exactly the files one run would have written.

The modules: ``config`` (options, the run's config, the unit order), ``state`` (the typed
records of the JSON a run reads back: config, counts, ``meta.json``, progress record, phase),
``run`` (``prepare``), ``record`` (one run's checkpoints and skips, and ``drive``, the one
phase driver of prepare and merge), ``writers`` (pass 1, the split writers), ``permute``
(pass 2 of ``nanogpt``), ``merging`` (``merge``: joining slices), ``meta`` (``meta.json``,
and whether a run is already finished), ``slices`` (what an engine running slices elsewhere
needs), ``workdir`` (the folder's parts and commit step), ``outputs`` (a folder or a URL) and
``convert`` (``write_format``: a finished run's files again as Megatron, llm.c or datatrove's).

Users call what ``__all__`` names; what the Ray engine and the command line need besides
(``finished_report``, ``lock_output``, ``remove_folder``, ``slice_sizes``, ``Location``…) is
re-exported here (``import X as X``), outside ``__all__``: nothing outside a folder reaches
into it.
"""

from __future__ import annotations

from openwebtext.prepare.config import PrepareOptions, Progress, Report
from openwebtext.prepare.convert import format_files as format_files
from openwebtext.prepare.convert import write_format
from openwebtext.prepare.merging import merge
from openwebtext.prepare.outputs import Location as Location
from openwebtext.prepare.run import prepare
from openwebtext.prepare.slices import finished_report as finished_report
from openwebtext.prepare.slices import lock_output as lock_output
from openwebtext.prepare.slices import remove_folder as remove_folder
from openwebtext.prepare.slices import slice_folders
from openwebtext.prepare.slices import slice_sizes as slice_sizes
from openwebtext.prepare.workdir import PrepareError

__all__ = [
    "PrepareError",
    "PrepareOptions",
    "Progress",
    "Report",
    "merge",
    "prepare",
    "slice_folders",
    "write_format",
]
