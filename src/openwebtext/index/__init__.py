"""What the units are: inputs (dataset folders, patterns), the outer-tar walk, local and
remote indexing, and ``Corpus`` with its counts file.

Rule: imports the leaves and ``openwebtext.source``; nothing above.
"""

from __future__ import annotations

from openwebtext.index.corpus import Corpus, Counts, split_key

__all__ = [
    "Corpus",
    "Counts",
    "split_key",
]
