"""Stream OpenWebText, and corpora packed like it, into language-model training.

New code::

    from openwebtext import Loader
    with Loader("data/", workers=2, seed=0).iter() as docs:
        for doc in docs:
            ...

The reference API (``OpenWebTextLoader``, ``shuffle``, ``take``) keeps working.
"""

from openwebtext.compat import OpenWebTextLoader, shuffle, take
from openwebtext.errors import (
    CorpusError,
    CorruptDocument,
    CorruptMember,
    MemberTooLarge,
    OutputError,
    OWTError,
    StateError,
    TooManyErrors,
    TruncatedMember,
    UnknownFormat,
    WorkerError,
)
from openwebtext.index import Corpus, Counts
from openwebtext.loader import (
    Ahead,
    Batches,
    BatchIterator,
    BestFitBatches,
    Document,
    DocumentIterator,
    Loader,
    PackedBatch,
    Stats,
    TokenDocument,
    ahead,
)
from openwebtext.options import Options
from openwebtext.records import Unit
from openwebtext.stream import Mark, reshard
from openwebtext.tokenfiles import TokenFileError
from openwebtext.tokenizer import Tokenizer, TokenizerError, load_tokenizer

__version__ = "0.1.0"

__all__ = [
    "Ahead",
    "BatchIterator",
    "Batches",
    "BestFitBatches",
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
    "OutputError",
    "PackedBatch",
    "StateError",
    "Stats",
    "TokenDocument",
    "TokenFileError",
    "Tokenizer",
    "TokenizerError",
    "TooManyErrors",
    "TruncatedMember",
    "Unit",
    "UnknownFormat",
    "WorkerError",
    "ahead",
    "load_tokenizer",
    "reshard",
    "shuffle",
    "take",
]
