"""Stream OpenWebText, and corpora packed like it, into language-model training.

New code::

    from openwebtext import Loader
    with Loader("data/", workers=2, seed=0).iter() as docs:
        for doc in docs:
            ...

The reference API (``OpenWebTextLoader``, ``shuffle``, ``take``) keeps working.
"""

from .compat import OpenWebTextLoader, shuffle, take
from .corpus import Corpus, Counts
from .errors import (
    CorpusError,
    CorruptDocument,
    CorruptMember,
    MemberTooLarge,
    OWTError,
    StateError,
    TooManyErrors,
    TruncatedMember,
    UnknownFormat,
    WorkerError,
)
from .index import Unit
from .loader import Batches, Document, DocumentIterator, Loader, Stats, TokenDocument
from .options import Options
from .stream import Mark
from .tokenizer import Tokenizer, TokenizerError, load_tokenizer

__version__ = "0.1.0"

__all__ = [
    "Batches",
    "Corpus",
    "CorpusError",
    "CorruptDocument",
    "CorruptMember",
    "Counts",
    "Document",
    "DocumentIterator",
    "Loader",
    "Mark",
    "MemberTooLarge",
    "OWTError",
    "OpenWebTextLoader",
    "Options",
    "StateError",
    "Stats",
    "TokenDocument",
    "Tokenizer",
    "TokenizerError",
    "TooManyErrors",
    "TruncatedMember",
    "Unit",
    "UnknownFormat",
    "WorkerError",
    "load_tokenizer",
    "shuffle",
    "take",
]
