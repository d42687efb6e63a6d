"""What the units are: inputs (dataset folders, patterns), the outer-tar walk, local and
remote indexing, parquet and JSON lines files, and ``Corpus`` with its counts file.

Rule: imports the leaves and ``openwebtext.source``; nothing above.
"""

from __future__ import annotations

from openwebtext.index.corpus import Corpus, Counts, NoColumn, split_key, split_of
from openwebtext.index.inputs import refuse_corpus_folder
from openwebtext.index.jsonl import split_jsonl_kind
from openwebtext.index.outer import json_hint
from openwebtext.index.parquet import TEXT_COLUMN, footer_of, parse_footer
from openwebtext.index.paths import file_key
from openwebtext.index.tokens import as_indexed

__all__ = [
    "TEXT_COLUMN",
    "Corpus",
    "Counts",
    "NoColumn",
    "as_indexed",
    "file_key",
    "footer_of",
    "json_hint",
    "parse_footer",
    "refuse_corpus_folder",
    "split_jsonl_kind",
    "split_key",
    "split_of",
]
