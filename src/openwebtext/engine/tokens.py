"""The token reader: a unit of a token file (``kind="tokens"``, member ``docs FIRST-STOP``)
→ its documents' ids as they lie in the file, no decoding, no tar.

Each document's place comes from the file's ends as its corpus indexed them
(``index.as_indexed`` with the corpus's storage: a forked worker has them from the main
process's index, a process the corpus was pickled to indexes the file again with the
corpus's eot and dtype); its names are document indices. The file, or a file read beside it
(its index, the ``meta.json``: ``tokenfiles.companions``), changed since the corpus indexed
it (one put there, or gone), is said to have changed (``source.CHANGED``), never read as
another cut nor blamed on the file's ids. A document holding an id outside the tokenizer's
vocabulary (at or past its size, or below 0: a signed dtype's, such as megatron-core's int32)
is left out as a ``CorruptDocument`` (never handed to a model's embedding). Beside ``read``'s
text reader, which hands it the token units.
"""

from __future__ import annotations

import os

import numpy as np

from openwebtext.engine.member import Member, Split, leave_out_split
from openwebtext.engine.raw import UnitBytes
from openwebtext.errors import CorruptDocument, CorruptMember, WrongTokenizer, read_error
from openwebtext.index import as_indexed
from openwebtext.records import Unit
from openwebtext.source import Storage, is_url, local_identity, resolve, unchanged
from openwebtext.tokenfiles import TokenFileError, companions, document_names, document_range

__all__ = ["TokenReader"]


class TokenReader:
    """Reads token units from ``raw``: ``eot`` is the tokenizer's end-of-text id (for a file
    its storage did not index: ``index.as_indexed``), ``vocab`` its vocabulary size (None:
    ids not checked)."""

    def __init__(
        self,
        raw: UnitBytes,
        split: Split | None = None,
        eot: int | None = None,
        vocab: int | None = None,
    ):
        self.raw = raw
        self.split = split
        self.eot = eot
        self.vocab = vocab

    def read(self, unit: Unit) -> Member:
        """The unit's ids and where each of its documents lies in them.

        Raises:
            CorruptMember: the file cannot be read or indexed, is cut short, or it or a file
                read beside it changed since its corpus indexed it.
        """
        storage = resolve(self.raw.storage)
        try:
            data = self.raw.read(unit)  # (the file as indexed, or CHANGED: ``engine.raw``)
            if not is_url(unit.path):
                _unchanged_beside(unit.path, storage)
            token_file = as_indexed(unit.path, storage, self.eot)
        except TokenFileError as exc:
            raise CorruptMember(exc.message, unit.path, unit.member) from exc
        except OSError as exc:
            raise read_error(exc, unit.path, unit.member) from exc
        first, stop = document_range(unit.member)
        ends, itemsize = token_file.ends, token_file.ids.dtype.itemsize
        if len(data) != unit.size:
            why = f"file is truncated: {len(data)} of {unit.size} bytes"
            raise CorruptMember(why, unit.path, unit.member)
        start = int(ends[first - 1]) if first < len(ends) and first else 0
        if stop > len(ends) or int(ends[stop - 1] - start) * itemsize != unit.size:
            why = (f"the file changed since the corpus was opened: its index ({len(ends)} "
                   f"documents) no longer puts documents {first}..{stop - 1} in the unit's "
                   f"{unit.size} bytes")  # fmt: skip
            raise CorruptMember(why, unit.path, unit.member)
        bounds = (ends[first:stop] - start) * itemsize
        offsets = [0, *bounds[:-1].tolist()]
        counts = np.diff(ends[first:stop], prepend=start)  # ids per document, as one array
        sizes = (counts * itemsize).tolist()
        names = document_names(unit.member, first, stop)
        leave_out_split(self.split, names, offsets)
        dropped: list[CorruptMember] = []
        ids = np.frombuffer(data, dtype=token_file.ids.dtype)
        run = token_file.tokenizer  # (the run's meta.json: each document ends with its eot)
        held = np.iinfo(ids.dtype)  # (an eot the ids cannot hold: a record of no run's ends)
        if run is not None and held.min <= run.eot <= held.max and stop > first:
            # (a document of none: its "last" id would be the one before it, or none)
            last = ids[np.maximum(ends[first:stop] - start - 1, 0)] if ids.size else counts
            wrong = (counts <= 0) | (last != run.eot)
            if wrong.any():
                k = int(np.flatnonzero(wrong)[0])
                says = "holds no id, not even" if counts[k] <= 0 else "does not end with"
                why = (f"document {names[k]} {says} the end-of-text id {run.eot} its run's "
                       "meta.json records: the file's index puts its end elsewhere")
                raise CorruptMember(why, unit.path, unit.member)
        # One reduction over the ids, not a mask of them; outside the vocabulary is rare.
        if self.vocab is not None and ids.size and _outside(ids, self.vocab):
            past = np.flatnonzero((ids < 0) | (ids >= self.vocab))
            # The documents that hold them, found by their ends.
            of = np.searchsorted(ends[first:stop] - start, past, "right")
            holding = [k for k in sorted(set(of.tolist())) if offsets[k] >= 0]
            said = f"ids outside the tokenizer's vocabulary of {self.vocab} (e.g. {ids[past[0]]})"
            # Most documents past the vocabulary (never below 0: no tokenizer's ids are), three
            # at least, are a larger vocabulary's ids: no damage is so wide.
            # Judged over the unit's documents, whatever the split keeps of them (a property of
            # the file: a split or a unit of few documents must not make two a majority).
            above = set(of[ids[past] > 0].tolist())
            if len(above) >= 3 and 2 * len(above) > stop - first:
                raise WrongTokenizer(
                    f"{len(above)} of its {stop - first} documents hold {said}: ids of another "
                    "tokenizer: read them with the one they were written with",
                    unit.path, unit.member,
                )  # fmt: skip
            for k in holding:
                offsets[k] = -1
                dropped.append(CorruptDocument(
                    f"holds {said}: ids of another tokenizer, or a damaged file",
                    unit.path, unit.member, names[k],
                ))  # fmt: skip
        if offsets and min(offsets) < 0:  # outside the split, or left out: no ids
            counts[np.asarray(offsets) < 0] = 0
        return Member(data, names, offsets, sizes, dropped, 0, counts=counts.tolist())


def _unchanged_beside(path: str, storage: Storage) -> None:
    """Check that each file read beside the local token file ``path`` (``companions``) is as
    its corpus noted it (``index.tokens``). Two ``stat`` calls.

    Raises:
        OSError: ``CHANGED``, one that did (or is gone), named: the unit's error is its
            file's, and its file did not change.
    """
    for other in companions(path):
        try:
            unchanged(storage, other, local_identity(other))
        except OSError as exc:
            said = f"{os.path.basename(other)} beside it: {exc.strerror or exc}"
            raise (OSError(said) if exc.errno is None else OSError(exc.errno, said)) from exc


def _outside(ids: np.ndarray, vocab: int) -> bool:
    """Whether an id lies outside ``[0, vocab)``: one reduction, whatever the integer dtype."""
    if ids.dtype.kind == "u":
        return int(ids.max()) >= vocab
    if vocab <= 1 << (8 * ids.dtype.itemsize - 1):  # as unsigned, a negative id is past vocab
        return int(ids.view(ids.dtype.str.replace("i", "u")).max()) >= vocab
    return int(ids.min()) < 0  # every id from 0 up fits below vocab (int16 ids of GPT-2)
