"""A state refused where it enters (``Loader.iter(state=…)``, ``Loader.batches(state=…)``) is
one ``StateError`` whose ``field`` is a path of the state given: not only when its decoding
fails, but when it disagrees with the stream (another config, schedule or packing), with the
corpus (a position its counters do not reach, an old rank's share), or with the rows it packs
again. Before, those said their field in the message only (``field`` None), and a nested
state's error named a path of the record inside it (``position``, not ``documents.position``
nor ``documents.parts.web.position``).

Every golden state of ``tests/data/states-2.json``, each of its fields left out, and each of
its integers edited within their type (+1, −1, ×2, 0, 10**6, 2**63: past numpy's int64, which a
count a state gives the packers is held in) or a bool flipped, is fed to the entry it was taken
from, which reads a document or a batch from it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, StateError, reshard
from records import DELETE, changed, get, paths
from test_stream_schema import GOLDEN, SCHEDULE
from test_stream_schema import _mixture as golden_mixture

#: The loader options each golden state was taken with (``test_stream_schema.written_now``).
DOCUMENTS: dict[str, dict[str, Any]] = {
    "documents": {},
    "documents_rank": {"rank": 1, "world_size": 3},
    "documents_pad": {"rank": 0, "world_size": 2, "even": "pad"},
    "resharded": {"rank": 1, "world_size": 2},
    "resharded_epochs": {"rank": 1, "world_size": 3, "epochs": None},
    "passed_rests": {"rank": 1, "world_size": 3, "epochs": None},
}
#: The batches' packing, loader options and whether under the schedule.
BATCHES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "batches_concat": ("concat", {"rank": 1, "world_size": 2}, False),
    "batches_bestfit": ("bestfit", {"rank": 0, "world_size": 2}, False),
    "resharded_bestfit": ("bestfit", {"rank": 2, "world_size": 3}, False),
    "resharded_twice": ("concat", {"rank": 0, "world_size": 2}, False),
    "batches_scheduled": ("bestfit", {}, True),
    "batches_mixture": ("concat", {}, False),
    "batches_mixture_bestfit": ("bestfit", {"rank": 1, "world_size": 2}, False),
    "resharded_mixture_bestfit": ("bestfit", {}, False),
}
_STEP = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")


def names_a_field_of(state: dict[str, Any], field: str) -> bool:
    """``field`` is a dotted path of ``state``: every step there, but a last one a record
    leaves out at its default."""
    node: Any = state
    steps = _STEP.findall(field)
    for k, (name, index) in enumerate(steps):
        try:
            node = node[int(index) if index else name]
        except (KeyError, IndexError, TypeError):
            return k == len(steps) - 1 and isinstance(node, dict)
    return bool(steps)


def edits(state: dict[str, Any]) -> list[tuple[str, tuple[Any, ...], Any]]:
    """``(what, keys, value)``: each field left out, each int edited within its type, each
    bool flipped."""
    out: list[tuple[str, tuple[Any, ...], Any]] = []
    for path, keys in paths(state):
        value = get(state, keys)
        if isinstance(keys[-1], str) and keys[-1] != "format":
            out.append((f"{path} left out", keys, DELETE))
        if isinstance(value, bool):
            out.append((f"{path}={not value}", keys, not value))
        elif isinstance(value, int):  # (2**63: past numpy's int64, which the code counts in)
            wrong = {value + 1, value - 1, value * 2, 0, 10**6, 2**63} - {value}
            out += [(f"{path}={w}", keys, w) for w in sorted(wrong) if w >= 0]
    return out


def entry(kind: str, corpus: Path, js: Path) -> Callable[[dict[str, Any]], None]:
    """Resume the stream ``kind``'s golden state was taken from, and read one item of it."""
    if kind == "mixture":
        mixture = golden_mixture(corpus, js)

        def mixed(state: dict[str, Any]) -> None:
            with Loader(mixture, workers=0, seed=3, tokenizer="bytes").iter(state=state) as it:
                next(it, None)

        return mixed
    if kind in DOCUMENTS:

        def documents(state: dict[str, Any]) -> None:
            loader = Loader(corpus, workers=0, seed=3, shuffle_buffer=30, **DOCUMENTS[kind])
            with loader.iter(state=state) as it:
                next(it, None)

        return documents
    packing, options, scheduled = BATCHES[kind]
    source = golden_mixture(corpus, js) if "mixture" in kind else corpus
    shape: dict[str, Any] = {"packing": packing} | ({"window": 8} if packing == "bestfit" else {})
    fixed = {"seq_len": 32, "batch_size": 2}
    shape |= {"schedule": SCHEDULE} if scheduled else fixed

    def batches(state: dict[str, Any]) -> None:
        loader = Loader(source, workers=0, seed=3, shuffle_buffer=30, tokenizer="bytes", **options)
        with loader.batches(state=state, **shape) as b:
            next(b, None)

    return batches


@pytest.mark.parametrize("kind", sorted([*DOCUMENTS, *BATCHES, "mixture"]))
def test_a_state_refused_where_it_enters_names_a_field_of_it(
    indexed: Path, tmp_path: Path, kind: str
) -> None:
    state, resume = GOLDEN[kind], entry(kind, indexed, tmp_path)
    resume(state)  # (the golden state itself resumes)
    unnamed, refused = [], 0
    for what, keys, value in edits(state):
        try:
            resume(changed(state, keys, value))
        except StateError as exc:
            refused += 1
            if exc.field is None or not names_a_field_of(state, exc.field):
                unnamed.append((what, exc.field, str(exc)[:200]))
    assert not unnamed, unnamed
    assert refused > 10  # (the edits are refused, not only read)


@pytest.mark.parametrize(
    ("kind", "keys", "path"),
    [
        ("documents_rank", ("counters", "documents"), "counters.documents"),
        ("batches_concat", ("documents", "position", "in_block"), "documents.position.in_block"),
        ("mixture", ("parts", "js", "position", "in_block"), "parts.js.position.in_block"),
    ],
)
def test_reshard_says_which_state_it_refuses(kind: str, keys: tuple[str, ...], path: str) -> None:
    """``reshard`` of every rank's state: a damaged one is said by its place in the list (the
    error said the field only, not which of the states held it)."""
    states = [GOLDEN[kind], changed(GOLDEN[kind], keys, True)]
    with pytest.raises(StateError, match=rf"^state 1: bad .*{re.escape(path)}: Expected `int`"):
        reshard(states, 2)
