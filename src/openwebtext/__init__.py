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
    OutOfResources,
    OutputError,
    OWTError,
    StateError,
    TooManyErrors,
    TruncatedMember,
    UnexpectedError,
    UnknownFormat,
    Unreadable,
    Unsupported,
    WorkerError,
    WrongTokenizer,
)
from openwebtext.index import Corpus
from openwebtext.loader import (
    Ahead,
    BatchIterator,
    Document,
    DocumentIterator,
    Loader,
    Mixture,
    MixtureBatches,
    MixtureIterator,
    PackedBatch,
    Schedule,
    Stats,
    TokenDocument,
    ahead,
)
from openwebtext.options import Options
from openwebtext.stream import reshard
from openwebtext.tokenfiles import TokenFileError
from openwebtext.tokenizer import Tokenizer, TokenizerError, load_tokenizer

__version__ = "0.1.0"

__all__ = [
    "Ahead",
    "BatchIterator",
    "Corpus",
    "CorpusError",
    "CorruptDocument",
    "CorruptMember",
    "Document",
    "DocumentIterator",
    "Loader",
    "MemberTooLarge",
    "Mixture",
    "MixtureBatches",
    "MixtureIterator",
    "OWTError",
    "OpenWebTextLoader",
    "Options",
    "OutOfResources",
    "OutputError",
    "PackedBatch",
    "Schedule",
    "StateError",
    "Stats",
    "TokenDocument",
    "TokenFileError",
    "Tokenizer",
    "TokenizerError",
    "TooManyErrors",
    "TruncatedMember",
    "UnexpectedError",
    "UnknownFormat",
    "Unreadable",
    "Unsupported",
    "WorkerError",
    "WrongTokenizer",
    "ahead",
    "load_tokenizer",
    "reshard",
    "shuffle",
    "take",
]
