"""The ``owt`` command: parses arguments, calls the library, prints. No logic of its own.

One module per command (``stream``, ``index``, ``tokenize``, ``merge``, ``synth``; ``bench``
registers its own from ``openwebtext.bench``), each with its ``add_parser`` and ``run``;
``args`` holds the argument types and flags they share, ``jsonl`` the ``--jsonl`` sink,
``prepared`` the progress and summary of tokenize and merge, ``standard`` the standard
streams at start, and ``command`` the parser assembled from them and :func:`main`.
"""

from openwebtext.cli.command import build_parser, main
from openwebtext.interrupts import EXIT_INTERRUPTED as EXIT_INTERRUPTED

__all__ = ["build_parser", "main"]
