"""Red team of resharding states in different epochs and best-fit batches of a mixture
(commits 41f3c97, 4d572c2, 8ae4261): one test per defect found (each fails on the main it
was written against, its docstring says what is expected), then a few attacks that held."""

from __future__ import annotations

import collections
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, Mixture, StateError, reshard
from tables_support import sample_texts, write_jsonl, write_parquet
from test_reshard_search import concat_trial, mixture_of


@pytest.fixture(scope="module")
def js(tmp_path_factory: pytest.TempPathFactory) -> str:
    """30 JSON lines: over 4 ranks under drop, shares of 7 (2 left out each epoch)."""
    folder = tmp_path_factory.mktemp("red") / "js"
    write_jsonl(folder / "a.jsonl", sample_texts(30, seed=2))
    return str(folder)


def _opts(rank: int, world: int, rule: str | None, **extra: Any) -> dict[str, Any]:
    return {"workers": 0, "seed": 3, "rank": rank, "world_size": world, "even": rule,
            "epochs": None, **extra}  # fmt: skip


def _read(corpus: str, state: Any, n: int | None, **opts: Any) -> tuple[list[tuple[int, str]],
                                                                   Any, Any]:  # fmt: skip
    """``(epoch, name)`` of up to ``n`` documents, the state after them, the stats."""
    got: list[tuple[int, str]] = []
    with Loader(corpus, **opts).iter(state=state) as it:
        for document in it if n != 0 else ():
            got.append((it.state_dict()["position"]["epoch"], document.name))
            if n is not None and len(got) >= n:
                break
        return got, json.loads(json.dumps(it.state_dict())), it.stats


def test_drop_counts_every_resharded_epoch_s_left_out_documents(js: str) -> None:
    """4 ranks under drop in epochs 0, 1 and 2 (rank 1 and 2 ahead), resharded to 3: the
    rests of epochs 0, 1 and 2 each leave documents out (said in the log, per epoch), and
    ``stats.dropped_documents`` of the last new rank must count all of them (every document
    of each epoch is old ranks' + new ranks' or counted as dropped: also what the old shares'
    drop left out, which the old last rank, in none of the epochs' end, did not count). On main
    it counted only the last rest's: ``Stream._rest_documents`` set
    ``dropped_documents=rest.dropped_here`` in place of adding it (and the same for every part
    of a mixture)."""
    old, states = [], []
    for rank, stop in enumerate((3, 10, 17, 1)):
        got, state, _ = _read(js, None, stop, **_opts(rank, 4, "drop"))
        old += got
        states.append(state)
    assert sorted(s["position"]["epoch"] for s in states) == [0, 0, 1, 2]
    new, dropped = [], 0
    for rank, state in enumerate(reshard(states, 3)):
        got, after, stats = _read(js, state, None, **_opts(rank, 3, "drop", epochs=3))
        assert after["position"]["epoch"] == 3
        new += got
        dropped += stats.dropped_documents
    missing = 0  # against the corpus: what the old shares' drop left out counts too
    for epoch in range(3):  # (old rank 3, the last, had finished none: counted by the rests)
        want = collections.Counter(name for _, name in _read(
            js, None, None, **_opts(0, 1, "drop", epoch=epoch, epochs=1))[0])  # fmt: skip
        got = collections.Counter(name for e, name in old + new if e == epoch)
        assert not got - want, epoch  # nothing twice
        missing += sum((want - got).values())
    assert missing == 8 and dropped == missing, (missing, dropped)


def test_a_concat_cut_in_the_next_epoch_s_first_document_goes_on_after_a_reshard(
    js: str,
) -> None:
    """One rank's concat batches stopped inside the first document of epoch 1: its documents'
    state is still at the end of epoch 0 (all 30 handed out), the cut (``offset``) is in the
    next epoch's first document. Resharded 1 -> 1, the batches must be those of the state
    resumed (the document goes on from its first id not yet a target, as at every other
    stop). On main the cut is put on epoch 0's rest, where that rank has nothing left, and
    dropped: epoch 1 starts again from its first id, its ids already targets are targets
    again (the same in every world size, e.g. a rank of 4 whose small part's epoch ends)."""
    opts: dict[str, Any] = {"workers": 0, "seed": 1, "tokenizer": "bytes", "epochs": None,
                            "even": None}  # fmt: skip
    loader = Loader(js, **opts)

    def batches(state: Any, n: int) -> tuple[list[list[int]], Any]:
        with loader.batches(64, 1, state=state) as it:
            out = [next(it)[0].tolist() for _ in range(n)]
            return out, json.loads(json.dumps(it.state_dict()))

    with loader.batches(64, 1) as it:
        for _ in range(400):
            next(it)
            state = json.loads(json.dumps(it.state_dict()))
            documents = state["documents"]
            if documents["counters"].get("epoch_documents") == 30 and state["offset"] > 1:
                assert documents["position"]["epoch"] == 0
                break
        else:
            raise AssertionError("no stop inside epoch 1's first document")
    resumed, _ = batches(state, 4)
    (new,) = reshard([state], 1)
    assert batches(new, 4)[0] == resumed, state["batches"]


def _pq_js(tmp_path: Path) -> Loader:
    """Concat batches' loader of 50 parquet rows and 30 JSON lines at equal weights."""
    pq, js = tmp_path / "pq", tmp_path / "js"
    write_parquet(pq / "a.parquet", sample_texts(50, seed=1))
    write_jsonl(js / "a.jsonl", sample_texts(30, seed=2))
    m = Mixture({"pq": str(pq), "js": str(js)})
    return Loader(m, workers=0, seed=1, tokenizer="bytes", epochs=None, even=None)


def _marker(loader: Loader) -> Callable[[Any, int], list[tuple[str, int]]]:
    """``marked(state, n)``: ``(part:document:epoch, index)`` of the first ``n`` ids of
    ``state``'s documents (a document's ids counted from its first, wherever it is cut)."""
    lengths: dict[str, int] = {}

    def marked(state: Any, n: int) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        with loader.iter(state=state) as it:
            while len(out) < n:
                doc = next(it)
                key = f"{doc.source}:{doc.name}:{it.stats.epochs[doc.source]}"
                cut = lengths.setdefault(key, len(doc.tokens)) - len(doc.tokens)
                out += [(key, cut + j) for j in range(len(doc.tokens))]
        return out[:n]

    return marked


def test_a_mixture_s_concat_cut_in_a_part_s_next_epoch_goes_on_after_a_reshard(
    tmp_path: Path,
) -> None:
    """The same in a mixture (its concat batches' usual case: a small part's epoch ends on
    every rank): 50 parquet rows and 30 JSON lines at equal weights, stopped inside the first
    document of the JSON part's epoch 1 (its state at the end of epoch 0), resharded 1 -> 1:
    no id of that document already a target is a target again (on main: 31 are)."""
    loader = _pq_js(tmp_path)
    marked = _marker(loader)

    whole = marked(None, 64 * 400)
    with loader.batches(64, 1) as it:
        for _ in range(400):
            next(it)
            state = json.loads(json.dumps(it.state_dict()))
            part = state["documents"]["parts"]["js"]
            if (state["documents"].get("next") == 1 and state["offset"] > 1
                    and part["counters"].get("epoch_documents") == 30):  # fmt: skip
                assert part["position"]["epoch"] == 0
                break
        else:
            raise AssertionError("no stop inside the JSON part's epoch 1's first document")
    (new,) = reshard([state], 1)
    targets = set(whole[1 : state["batches"] * 64 + 1])
    again = set(marked(new["documents"], 4000)[1:]) & targets
    assert not again, sorted(again)[:3]


def _holds(tokens: Any, at: int, ids: Any) -> bool:
    """Whether a document's ``tokens`` hold ``ids`` at position ``at``."""
    return len(tokens) >= at + len(ids) and bool((tokens[at : at + len(ids)] == ids).all())


def test_a_best_fit_window_of_the_next_epoch_begun_at_the_epoch_s_end(js: str) -> None:
    """Best fit over 4 ranks (rows of 128, 1 a batch, windows of 5): rank 2's share of
    epoch 0 is 7 documents (windows 0 and 1); its 14th batch is the second row of epoch 1's
    window 0 while its documents' state is still at the end of epoch 0 (``window_epoch`` 1,
    ``position.epoch`` 0). Resharded to 3, either refused with a StateError (as a window begun
    in the next epoch is) or those 2 rows not handed out again: over epochs 0 and 1 no id is
    handed out more than twice. On main it is accepted as a window of epoch 0, where the
    rank has nothing left, and lost: the new world's epoch 1 hands its 2 rows out again."""
    np = pytest.importorskip("numpy")
    with Loader(js, workers=0, tokenizer="bytes").iter() as it:
        docs = {d.name: np.asarray(d.tokens) for d in it}
    cover = {name: np.zeros(len(ids), int) for name, ids in docs.items()}

    def run(state: Any, rank: int, world: int, n: int | None, **extra: Any) -> Any:
        opts = _opts(rank, world, None, seed=5, tokenizer="bytes", **extra)
        with Loader(js, **opts).batches(127, 1, packing="bestfit", window=5, segments=True,
                                        state=state) as it:  # fmt: skip
            for k, batch in enumerate(it, 1):
                for tokens, seg, pos in zip(*batch[:3], strict=True):
                    for s in set(seg[seg > 0].tolist()):
                        at = np.flatnonzero(seg == s)
                        p, ids = int(pos[at[0]]), tokens[at]
                        (name,) = [n for n, t in docs.items() if _holds(t, p, ids)]
                        cover[name][p : p + len(ids)] += 1
                if n is not None and k >= n:
                    break
            return json.loads(json.dumps(it.state_dict()))

    states = [run(None, rank, 4, stop) for rank, stop in enumerate((1, 2, 14, 3))]
    at = states[2]
    assert (at["window_epoch"], at["documents"]["position"]["epoch"], at["row"]) == (1, 0, 2)
    try:
        new = reshard(states, 3)
    except StateError:
        return  # refused: what is expected
    for rank, state in enumerate(new):
        run(state, rank, 3, None, epochs=2)
    assert max(int(c.max()) for c in cover.values()) <= 2


# -- attacks that held ------------------------------------------------------------------


@pytest.mark.parametrize("rule", [None, "pad"])
def test_held_a_state_in_a_later_epoch_s_rest_resumes_exactly(js: str, rule: str | None) -> None:
    """4 ranks in epochs 0, 1 and 2 resharded to 3: a new rank's state taken after any
    document (in epoch 0's rest, in epoch 1's or 2's rest that ``Reshard.following`` opens,
    or in the new world's own epoch 3) resumes to the documents of the uninterrupted run."""
    states = [_read(js, None, stop, **_opts(rank, 4, rule))[1]
              for rank, stop in enumerate((3, 10, 17, 1))]  # fmt: skip
    assert sorted(s["position"]["epoch"] for s in states) == [0, 0, 1, 2]
    state = reshard(states, 3)[1]
    opts = _opts(1, 3, rule, epochs=4)
    whole, _, _ = _read(js, state, None, **opts)
    assert {e for e, _ in whole} == {0, 1, 2, 3}
    for cut in range(1, len(whole)):
        first, saved, _ = _read(js, state, cut, **opts)
        assert first + _read(js, saved, None, **opts)[0] == whole, cut


def test_held_a_mixture_resharded_three_times_across_epochs(
    tmp_path: Path, small_corpus: Path
) -> None:
    """A mixture of the small tar corpus and 7 JSON lines (at half the turns: every rank
    runs through epochs of it at its own pace), 3 ranks -> 5 -> 2 -> 4, each stopping at its
    own point: per part, every epoch an old rank had begun is each document once."""
    write_jsonl(tmp_path / "js7" / "a.jsonl", sample_texts(7, seed=4))
    web = shutil.copytree(small_corpus, tmp_path / "web")
    m = Mixture({"web": str(web), "js7": str(tmp_path / "js7")}, {"web": 0.5, "js7": 0.5})
    sizes = {"web": 120, "js7": 7}

    def run(state: Any, rank: int, world: int, n: int | None,
            until: dict[str, int] | None = None) -> tuple[list[Any], Any]:  # fmt: skip
        got = []
        with Loader(m, workers=0, seed=6, rank=rank, world_size=world, even=None,
                    epochs=None).iter(state=state) as it:  # fmt: skip
            while n is None or len(got) < n:
                document = next(it)
                epochs = it.stats.epochs
                got.append((document.source, epochs[document.source], document.name))
                if until is not None and all(epochs[p] > e for p, e in until.items()):
                    break
            return got, json.loads(json.dumps(it.state_dict()))

    delivered: list[Any] = []
    states: list[Any] = [None] * 3
    for stops, world in (((9, 30, 2), 5), ((4, 0, 21, 7, 13), 2), ((11, 3), 4)):
        stopped = []
        for rank, stop in enumerate(stops):
            got, state = run(states[rank], rank, len(stops), stop)
            delivered += got
            stopped.append(state)
        states = reshard(stopped, world)
    last = {p: max(e for s, e, _ in delivered if s == p) for p in sizes}
    assert last["js7"] >= 2
    for rank, state in enumerate(states):
        delivered += run(state, rank, 4, None, until=last)[0]
    counted = collections.Counter(delivered)
    for part, size in sizes.items():
        for epoch in range(last[part] + 1):
            names = {n: c for (p, e, n), c in counted.items() if p == part and e == epoch}
            assert len(names) == size and set(names.values()) == {1}, (part, epoch)


@pytest.mark.parametrize("rule", [None, "pad"])
def test_a_concat_cut_in_the_next_epoch_s_first_document_after_a_second_reshard(
    js: str, rule: str | None
) -> None:
    """The carried cut of a level: a state in the rest of a resharded epoch whose share is all
    handed out while its concat batch is inside the next epoch's first document (documents'
    state at the rest's end), resharded again 1 -> 1: the batches must be those of the state
    resumed. Before, the cut was put on the level's share, where nothing was left, and lost:
    the next epoch's first document started again from its first id."""
    opts: dict[str, Any] = {"workers": 0, "seed": 1, "tokenizer": "bytes", "epochs": None,
                            "even": rule}  # fmt: skip
    loader = Loader(js, **opts)

    def batches(state: Any, n: int) -> tuple[list[list[int]], Any]:
        with loader.batches(64, 1, state=state) as it:
            out = [next(it)[0].tolist() for _ in range(n)]
            return out, json.loads(json.dumps(it.state_dict()))

    _, first = batches(None, 5)
    (rest,) = reshard([first], 1)
    handed = first["documents"]["counters"]["epoch_documents"]
    with loader.batches(64, 1, state=rest) as it:
        for _ in range(400):
            next(it)
            state = json.loads(json.dumps(it.state_dict()))
            documents = state["documents"]
            if (documents["counters"].get("epoch_documents") == 30 - handed
                    and state["offset"] > 1):  # fmt: skip
                assert documents["position"]["epoch"] == 0 and "reshard" in documents
                break
        else:
            raise AssertionError("no stop inside epoch 1's first document")
    resumed, _ = batches(state, 4)
    (again,) = reshard([state], 1)
    assert again["documents"]["reshard"]["levels"]
    assert batches(again, 4)[0] == resumed, state["batches"]


def test_a_mixture_s_carried_cut_after_a_second_reshard(tmp_path: Path) -> None:
    """A mixture's concat batches resharded 1 -> 1 mid-epoch, then stopped inside the first
    document of the JSON part's epoch 1 with that part's share of the rest all handed out, and
    resharded 1 -> 1 again: no id already a target (before either reshard) is a target again."""
    loader = _pq_js(tmp_path)
    marked = _marker(loader)

    def stop(state: Any, when: Any) -> Any:
        with loader.batches(64, 1, state=state) as it:
            for _ in range(400):
                next(it)
                saved = json.loads(json.dumps(it.state_dict()))
                if when(saved):
                    return saved
        raise AssertionError("no such stop")

    marked(None, 64 * 400)  # every document's length
    first = stop(None, lambda s: s["batches"] == 5)
    (rest,) = reshard([first], 1)
    left = 30 - first["documents"]["parts"]["js"]["counters"].get("epoch_documents", 0)

    def at_end(s: Any) -> bool:
        part = s["documents"]["parts"]["js"]
        return (s["documents"].get("next") == 1 and s["offset"] > 1
                and part["counters"].get("epoch_documents") == left
                and part["position"]["epoch"] == 0)  # fmt: skip

    state = stop(rest, at_end)
    (again,) = reshard([state], 1)
    assert again["documents"]["parts"]["js"]["reshard"]["levels"]
    targets = set(marked(None, 5 * 64 + 1)[1:])
    targets |= set(marked(rest["documents"], state["batches"] * 64 + 1)[1:])
    repeated = set(marked(again["documents"], 4000)[1:]) & targets
    assert not repeated, sorted(repeated)[:3]


def test_a_rank_in_the_rest_carried_cuts_make_resharded_again(js: str) -> None:
    """2 ranks of concat batches, rank 0 stopped with its share of epoch 0 all handed out and
    its batch inside its next document (a carried cut), resharded to 2: new rank 0 goes on
    into epoch 1 (the rest the carried cut makes), new rank 1 stays in epoch 0; resharded
    again to 1 and run to the end of epoch 1. Accepted (before: "states of different
    reshards", the rank in epoch 0 did not say epoch 1's rest), and no id is a target twice;
    of epoch 0 only the first ids of the streams are none."""
    lengths: dict[tuple[int, str], int] = {}
    counted: collections.Counter[tuple[int, str, int]] = collections.Counter()

    def run(state: Any, rank: int, world: int, when: Any, epochs: Any = None) -> Any:
        opts = _opts(rank, world, None, tokenizer="bytes", epochs=epochs)
        loader = Loader(js, **opts)
        with loader.batches(64, 1, state=state) as it:
            for _ in it:
                saved = json.loads(json.dumps(it.state_dict()))
                if when(saved):
                    break
            n = saved["batches"]
        ids: list[tuple[int, str, int]] = []
        docs = None if state is None else state["documents"]
        with loader.iter(state=docs) as it:
            for doc in it:
                key = (it.state_dict()["position"]["epoch"], doc.name)
                cut = lengths.setdefault(key, len(doc.tokens)) - len(doc.tokens)
                ids += [(*key, cut + j) for j in range(len(doc.tokens))]
                if len(ids) > n * 64:
                    break
        counted.update(ids[1 : n * 64 + 1])
        return saved

    for epoch in (0, 1):  # every document's length
        with Loader(js, workers=0, seed=3, tokenizer="bytes", epoch=epoch).iter() as it:
            for doc in it:
                lengths[(epoch, doc.name)] = len(doc.tokens)
    carry = run(None, 0, 2, lambda s: s["documents"]["counters"].get("epoch_documents") == 15
                and s["offset"] > 1)  # fmt: skip
    other = run(None, 1, 2, lambda s: s["batches"] == 2)
    new = reshard([carry, other], 2)
    ahead = run(new[0], 0, 2, lambda s: s["documents"]["position"]["epoch"] == 1
                and s["batches"] > 3)  # fmt: skip
    behind = run(new[1], 1, 2, lambda s: s["batches"] == 1)
    (last,) = reshard([ahead, behind], 1)
    run(last, 0, 1, lambda s: False, epochs=2)
    assert max(counted.values()) == 1
    gaps = [(name, k) for (e0, name), n in lengths.items() if e0 == 0 for k in range(n)
            if (0, name, k) not in counted]  # fmt: skip
    # Only first ids of streams are no target: the two first ranks', a new rank's share
    # that starts at a document (new rank 1's here).
    assert len(gaps) == 3 and {k for _, k in gaps} == {0}, gaps


def test_a_rest_that_carried_cuts_made_is_said_by_the_ranks_past_it(tmp_path: Path) -> None:
    """Concat batches of a mixture with a 7-document part, 4 ranks -> 4 -> 2 at the stops a
    random search found: an old rank's cut is carried into the part's epoch 1, so epoch 1 is
    a rest that only the ranks that handed it out know; three new ranks are past it, one is
    before it. Resharded again, epoch 1 must be that rest (``DocumentState.passed``), not the
    world's own epoch: no id is a target twice (before: 67 ids of one document were)."""
    worlds, stops = [4, 4, 2], [[11, 51, 32, 30], [40, 39, 50, 11], [6, 28]]
    counted, stopped = concat_trial(mixture_of(tmp_path, 7), 11, worlds, stops)
    assert stopped[0]["documents"]["parts"]["js"]["passed"]
    twice = [key for key, c in counted.items() if c > 1]
    assert not twice, twice[:3]


def test_a_new_rank_s_state_inside_another_part_s_cut_document_resumes_exactly(
    js: str, tmp_path: Path
) -> None:
    """A mixture's concat batches on 2 ranks, each inside a document of another part near the
    end of the epoch, resharded to 1 rank: that rank's share of part ``js`` begins with a cut
    document, which leads; of part ``pq`` too, which does not (it goes on from its first id
    not yet a target). A state of the new rank taken inside that ``pq`` document let ``pq``
    lead on resume, one id earlier: every batch after it one id off (or refused, naming
    ``offset`` or ``documents.next``). Once the rank has handed a document out, none leads."""
    write_parquet(tmp_path / "pq" / "a.parquet", sample_texts(40, seed=1))
    mixture = Mixture({"js": js, "pq": str(tmp_path / "pq")})
    opts = {"workers": 0, "seed": 3, "tokenizer": "bytes", "epochs": 1}
    states = []
    for rank in range(2):
        with Loader(mixture, **opts, rank=rank, world_size=2, even=None).batches(64, 2) as it:
            for _ in range(53):
                next(it)
            states.append(json.loads(json.dumps(it.state_dict())))
    assert [s["documents"]["next"] for s in states] == [1, 0]  # inside a pq, a js document
    (state,) = reshard(states, 1)
    loader = Loader(mixture, **opts)
    with loader.batches(64, 2, state=state) as it:
        whole, saved = [], []
        for batch in it:
            whole.append(batch.tobytes())
            saved.append(json.loads(json.dumps(it.state_dict())))
    assert saved[0]["documents"]["next"] == 1 and saved[0]["offset"] > 0  # inside the pq one
    for k, state in enumerate(saved):
        with loader.batches(64, 2, state=state) as it:
            assert [batch.tobytes() for batch in it] == whole[k + 1 :], k
