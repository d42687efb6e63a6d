"""A resharded epoch's states resharded again before the last new rank counted what
``even="drop"`` left out of its rest (red team, session 26): those documents were lost
uncounted (``stats.dropped_documents`` 0 over the whole run).

The last share of a rest counts ``drop``'s documents (``stats.dropped_documents``) when it
begins handing its rest out (``resthandout._rest_documents``, ``Reshard.counted``). A state
taken before that (a rank that handed out nothing yet; a concat state whose first document is
cut by its first batch; a best-fit state inside its first window, which is at that window's
start) says ``counted: false`` and counters without them. Resharding such states again made
that reshard one more level of the rest (``resharding._epoch_section``: a ``Level``, which
recorded no ``counted``), and ``rest.Rest`` cut each level's shares dropping the same
documents but threw the count away. Now ``Level.counted`` says it, and the last share of the
new rest counts the drops of the levels whose last share had not. Documents states (no skip),
concat batches and best-fit batches after skips alike."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, Loader, reshard
from openwebtext.index import Counts

#: Files and their documents (one unit each): 33 documents, each named by its first word.
LINES = {"a": 6, "b": 5, "c": 7, "d": 4, "e": 6, "f": 5}


def _corpus(root: Path, bad: frozenset[str] = frozenset()) -> Corpus:
    for name, n in LINES.items():
        texts = [f"{name}{k} " + "x" * ((7 * k + 5 * ord(name)) % 18 + 4) for k in range(n)]
        lines = [b'{"text": 5}' if t.split()[0] in bad else json.dumps({"text": t}).encode()
                 for t in texts]  # fmt: skip
        (root / f"{name}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    corpus = Corpus.open(root, on_error="skip")
    names = [Path(u.path).name.split(".")[0] for u in corpus.units]
    return corpus.with_counts(Counts(tuple(LINES[n] for n in names)))


def _loader(corpus: Corpus, rank: int, world: int, tokenizer: str | None) -> Loader:
    return Loader(corpus, rank=rank, world_size=world, even="drop", shuffle=False, seed=3,
                  workers=0, on_error="skip", tokenizer=tokenizer)  # fmt: skip


def _docs(loader: Loader, state: Any, at: int | None
          ) -> tuple[list[str], Any, int]:  # fmt: skip
    """Documents to the end (or ``at``), the state after them, the dropped documents counted."""
    out = []
    with loader.iter(state=state) as it:
        if at == 0:
            return out, json.loads(json.dumps(it.state_dict())), 0
        for doc in it:
            out.append(doc.text.split()[0])
            if len(out) == at:
                break
        return out, json.loads(json.dumps(it.state_dict())), it.stats.dropped_documents


def _names(batch: Any) -> list[str]:
    """The documents that begin in ``batch`` (a piece of one cut before begins with x's)."""
    out = []
    for row in range(batch.tokens.shape[0]):
        seg, ids = batch.segment_ids[row], batch.tokens[row]
        for s in sorted(set(seg.tolist()) - {0}):
            words = bytes(int(i) for i in ids[seg == s] if i < 256).split()
            if words and words[0][:1] != b"x":
                out.append(words[0].decode())
    return out


def _batches(loader: Loader, state: Any, at: int | None, packing: str
             ) -> tuple[list[str], Any, int]:  # fmt: skip
    kw: dict[str, Any] = {"seq_len": 24, "batch_size": 1, "segments": True, "packing": packing}
    if packing == "bestfit":
        kw["window"] = 3
    out, n = [], 0
    with loader.batches(state=state, **kw) as it:
        if at != 0:
            for batch in it:
                out += _names(batch)
                n += 1
                if n == at:
                    break
        return out, json.loads(json.dumps(it.state_dict())), it.stats.dropped_documents


def _three_worlds(corpus: Corpus, run: Any, tokenizer: str | None, worlds: tuple[int, int, int],
                  firsts: list[int], middles: int
                  ) -> tuple[collections.Counter[str], int]:  # fmt: skip
    """Old ranks run ``firsts`` items each, resharded; the middle world's ranks ``middles``
    each, resharded again; the last world to the end: every document handed out, and the
    dropped ones counted (the middle world's as its states say: none yet, taken before)."""
    old, mid, last = worlds
    got: collections.Counter[str] = collections.Counter()
    states = []
    for r, stop in enumerate(firsts):
        out, state, _ = run(_loader(corpus, r, old, tokenizer), None, stop)
        got.update(out)
        states.append(state)
    news, dropped = [], 0
    for r, state in enumerate(reshard(states, mid, even="drop")):
        out, state, _ = run(_loader(corpus, r, mid, tokenizer), state, middles)
        got.update(out)
        news.append(state)
        documents = state.get("documents", state)
        dropped += documents["counters"].get("dropped_documents", 0)
    # (the case: the middle world's last share had not counted its drop yet)
    assert documents["reshard"].get("counted") is False, documents["reshard"]
    for r, state in enumerate(reshard(news, last, even="drop")):
        out, _, lost = run(_loader(corpus, r, last, tokenizer), state, None)
        got.update(out)
        dropped += lost
    return got, dropped


def _check(got: collections.Counter[str], dropped: int, epoch: set[str]) -> None:
    assert set(got) <= epoch and max(got.values()) == 1, got  # none twice (nothing repeated)
    missing = sorted(epoch - set(got))
    assert len(missing) == dropped, (missing, dropped)  # each one left out counted


@pytest.mark.parametrize("last", [1, 2])
def test_documents_resharded_again_at_once_count_the_drop(tmp_path: Path, last: int) -> None:
    """Documents states, no skip: 3 ranks (11 documents each) at 5 each -> 4 ranks (18 left:
    2 dropped) resharded again at once -> ``last``: the 2 left out are counted."""
    corpus = _corpus(tmp_path)
    epoch = {f"{name}{k}" for name, n in LINES.items() for k in range(n)}
    got, dropped = _three_worlds(corpus, _docs, None, (3, 4, last), [5, 5, 5], 0)
    _check(got, dropped, epoch)
    assert dropped == 2  # (now 0 when last == 1: f3 and f4 lost uncounted)


def test_concat_batches_resharded_again_at_once_count_the_drop(tmp_path: Path) -> None:
    """Concat batches: the same, the middle world's states taken before any batch (what its
    rows hold is not read here: a document's pieces may be cut anywhere; the counts are)."""
    corpus = _corpus(tmp_path)
    _, dropped = _three_worlds(corpus, lambda ld, s, at: _batches(ld, s, at, "concat"), "bytes",
                                 (3, 4, 1), [2, 2, 2], 0)  # fmt: skip
    assert dropped == 2  # as documents states (was 0)


def test_bestfit_after_skips_resharded_again_inside_first_windows(tmp_path: Path) -> None:
    """The red team's case: best fit (window 3), a0 and c5 skipped, 2 ranks (old rank 0 at
    its start, old rank 1 after 12 batches, inside a window that ran into its repeating pass)
    -> 3 ranks, each one batch (inside its first window: ``counted: false``) -> 1 rank. The
    3-rank rest's last share left c4 out; it is lost, counted by no rank. And f4: what the
    old world's drop left out (33 slots over 2 ranks), its last rank stopped before its
    epoch's end (which counts it): counted by the last rank of the rest (session 29)."""
    bad = frozenset({"a0", "c5"})
    corpus = _corpus(tmp_path, bad)
    epoch = {f"{name}{k}" for name, n in LINES.items() for k in range(n)} - bad
    run = lambda ld, s, at: _batches(ld, s, at, "bestfit")  # noqa: E731
    got, dropped = _three_worlds(corpus, run, "bytes", (2, 3, 1), [0, 12], 1)
    # c6: the old window's overrun and its repeat (counted by the middle rank 0, handed out
    # again once): as counted; the epoch's 30 kept documents even over 2 ranks drop none.
    assert got["c6"] == 2
    got["c6"] = 1
    _check(got, dropped, epoch)
    assert "c4" not in got and "f4" not in got and dropped == 2
