"""A synthetic corpus packed exactly like OpenWebText, with text that behaves like web text.

The parts: ``draw`` (uniform-only sampling), ``words`` (the fixed vocabulary), ``text``
(documents), ``pack`` (tars, :func:`write_corpus`) and ``builtin``: the two built-in corpora,
each generated once into the cache folder: the default corpus (:func:`default_corpus`: what
a command given no path reads, small enough to make in well under a minute on two cores)
and the bench corpus (:func:`bench_corpus`: what
``owt bench`` and ``benchmarks/`` measure on). The default corpus is the bench corpus's first
30 members, byte for byte: a member's bytes depend only on its place and the seed. The
same ``(subsets, members, docs, seed, preset)`` gives byte-identical files whatever the
number of workers.

Users call what ``__all__`` names; the rest (``corpus_dirname``, ``COMPLETE_MARKER``, the
``DEFAULT_*`` shape, ``paths_or_default``…) is for the command line, the benchmarks and the
tests, re-exported here (``import X as X``) because nothing outside a folder reaches into it.
"""

from __future__ import annotations

from openwebtext.synth.builtin import DEFAULT_DOCS as DEFAULT_DOCS
from openwebtext.synth.builtin import DEFAULT_MEMBERS as DEFAULT_MEMBERS
from openwebtext.synth.builtin import DEFAULT_SEED as DEFAULT_SEED
from openwebtext.synth.builtin import DEFAULT_SUBSETS as DEFAULT_SUBSETS
from openwebtext.synth.builtin import (
    bench_corpus,
    bench_corpus_path,
    default_corpus,
    default_corpus_path,
)
from openwebtext.synth.builtin import corpus_dirname as corpus_dirname
from openwebtext.synth.builtin import paths_or_default as paths_or_default
from openwebtext.synth.draw import FloatArray as FloatArray
from openwebtext.synth.draw import IntArray as IntArray
from openwebtext.synth.pack import COMPLETE_MARKER as COMPLETE_MARKER
from openwebtext.synth.pack import GENERATOR_VERSION as GENERATOR_VERSION
from openwebtext.synth.pack import TAR_MODE as TAR_MODE
from openwebtext.synth.pack import TAR_MTIME as TAR_MTIME
from openwebtext.synth.pack import SynthReport, write_corpus
from openwebtext.synth.pack import member_name as member_name
from openwebtext.synth.pack import subset_tar_name as subset_tar_name
from openwebtext.synth.text import generate_document as generate_document
from openwebtext.synth.text import member_documents as member_documents

__all__ = [
    "SynthReport",
    "bench_corpus",
    "bench_corpus_path",
    "default_corpus",
    "default_corpus_path",
    "write_corpus",
]
