"""A token corpus: files of ids (any of ``tokenfiles``' four formats) cut into units that
are runs of whole documents, their counts known at once (no counting pass).

A unit is ``Unit(path, member="DOCS FIRST-STOP", offset, size, kind=TOKENS, ...)``: the
byte range of documents ``[FIRST, STOP)`` of its file, about ``unit_tokens`` ids of whole
documents. A worker reads those bytes (``engine.read``) and finds the documents in them
from the file's ends (``tokenfiles.opened``: opened here, in the main process, so forked
workers inherit them); each document's name is its index in the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from openwebtext.errors import CorpusError
from openwebtext.records import Unit
from openwebtext.source import is_url
from openwebtext.tokenfiles import TOKENS, opened, unit_member

__all__ = ["UNIT_TOKENS", "token_units"]

#: Ids a unit holds, about (whole documents): ~2 MB of uint16, like a text member's text.
UNIT_TOKENS = 1 << 20


def _run_meta(path: Path) -> dict[str, object]:
    """The ``meta.json`` of the run beside ``path``, if there is one (its eot and dtype)."""
    try:
        body = json.loads((path.parent / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def token_units(
    paths: Sequence[str | os.PathLike[str]],
    *,
    eot: int | None = None,
    dtype: str | None = None,
    unit_tokens: int = UNIT_TOKENS,
) -> tuple[list[Unit], list[int]]:
    """The units of token files, and the documents of each.

    ``eot`` and ``dtype`` default to those of a ``meta.json`` beside the file (an ``owt
    tokenize`` run), else GPT-2's (50256, uint16); a Megatron index gives its own dtype.

    Raises:
        CorpusError: a URL (token corpora are local for now), a file missing.
        TokenFileError: a damaged header or index.
    """
    units: list[Unit] = []
    counts: list[int] = []
    for given in paths:
        name = os.fspath(given)
        if is_url(name):
            raise CorpusError("token corpora are read from local files only (for now)", name)
        if not os.path.isfile(name):
            raise CorpusError("no such token file", name)
        meta = _run_meta(Path(name))
        known_eot, known_dtype = meta.get("eot"), meta.get("dtype")
        file_eot = eot if eot is not None else known_eot if isinstance(known_eot, int) else 50256
        file_dtype = dtype or (known_dtype if isinstance(known_dtype, str) else "uint16")
        token_file = opened(name, eot=file_eot, dtype=file_dtype)
        base = int(getattr(token_file.ids, "offset", 0))  # an llm.c shard's header
        itemsize = token_file.ids.dtype.itemsize
        ends = token_file.ends
        subset = Path(name).name.split(".")[0]
        first, index = 0, 0
        while first < len(ends):
            start = int(ends[first - 1]) if first else 0
            stop = max(int(np.searchsorted(ends, start + unit_tokens, side="right")), first + 1)
            end = int(ends[stop - 1])
            member = unit_member(first, stop)
            offset, size = base + start * itemsize, (end - start) * itemsize
            units.append(Unit(name, member, offset, size, TOKENS, subset, index))
            index += 1
            counts.append(stop - first)
            first = stop
    return units, counts
