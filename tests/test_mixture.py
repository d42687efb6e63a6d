"""Weighted mixtures end to end (``Mixture``): three input kinds at once (a tar corpus, a parquet
folder, a JSON-lines folder), every part's epoch every document once, proportions within one
document at every prefix (by documents and by ids), exact resume with 0 and 2 workers, weights
changed by a schedule and by ``set_weights`` (replayed on resume), resharding 4 ranks to 3 and
to 1, one pool whatever the number of parts, and what a mixture refuses. The interleaving's
arithmetic alone is tested in test_mixing.py (Hypothesis, 1 to 64 parts)."""

from __future__ import annotations

import collections
import json
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import CorruptMember, Loader, StateError, ahead, reshard
from openwebtext.loader import Mixture
from support import Owt, child_pids, corrupt_member, names, outer_tar, sample_docs, xz_member
from tables_support import mixture_folders, sample_texts, write_jsonl

WEIGHTS = {"web": 0.5, "pq": 0.3, "js": 0.2}
EOT = 256  # the bytes tokenizer's end-of-text id


@pytest.fixture(scope="module")
def parts(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """web: the small tar corpus (120 documents); pq: 50 parquet rows; js: 30 JSON lines."""
    return mixture_folders(small_corpus, tmp_path_factory.mktemp("mix"))


SIZES = {"web": 120, "pq": 50, "js": 30}


def mixture(parts: dict[str, str], weights: dict[str, float] = WEIGHTS, **kw: Any) -> Mixture:
    return Mixture(parts, weights, **kw)


def with_epochs(iterator: Any) -> list[tuple[Any, int]]:
    """Each document with its part's epoch (``stats.epochs``), read one by one."""
    out = []
    for document in iterator:
        out.append((document, iterator.stats.epochs[document.source]))
    return out


def test_every_part_every_document_once_per_epoch(parts: dict[str, str]) -> None:
    """web at 0.2 ends the run (epochs=1): pq and js repeat epoch after epoch meanwhile, each
    epoch every document once, in a new order."""
    weights = {"web": 0.2, "pq": 0.5, "js": 0.3}
    with Loader(mixture(parts, weights), workers=0, seed=3).iter() as it:
        read = with_epochs(it)
    by_part: dict[str, dict[int, list[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for document, epoch in read:
        by_part[document.source][epoch].append(document.name)
    assert sorted(by_part["web"]) == [0]
    assert len(by_part["web"][0]) == len(set(by_part["web"][0])) == SIZES["web"]
    for name in ("pq", "js"):
        epochs = by_part[name]
        full = [e for e in epochs if len(epochs[e]) == SIZES[name]]
        assert len(full) >= 4, (name, {e: len(v) for e, v in epochs.items()})
        first = set(epochs[0])
        for e in full:
            assert len(set(epochs[e])) == SIZES[name] and set(epochs[e]) == first
        assert len({tuple(epochs[e]) for e in full}) == len(full)  # a new order each epoch
        last = max(epochs)
        assert len(set(epochs[last])) == len(epochs[last])  # the partial one: no repeat
    # every prefix within one document of the weights
    counts = collections.Counter[str]()
    for n, (document, _) in enumerate(read, 1):
        counts[document.source] += 1
        for name, w in weights.items():
            assert abs(counts[name] - w * n) <= 1, (n, name, counts)
    # the run ends right after web's last document (the 120th, within one of 0.2 n)
    assert read[-1][0].source == "web" and 595 <= len(read) <= 605


def test_documents_carry_their_part(parts: dict[str, str]) -> None:
    with Loader(mixture(parts), workers=0, seed=0).iter() as it:
        documents = list(it)
        stats = it.stats
    texts = {name: set(sample_texts(n, seed=s)) for name, n, s in (("pq", 50, 1), ("js", 30, 2))}
    for document in documents:
        if document.source in texts:
            assert document.text in texts[document.source]
        else:
            assert document.source == "web" and document.subset.startswith("urlsf_subset")
    per_part = collections.Counter(d.source for d in documents)
    assert {name: stats.parts[name].documents for name in per_part} == dict(per_part)
    assert stats.documents == len(documents)
    with Loader(parts["js"], workers=0).iter() as single:
        assert next(single).source is None


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_anywhere_equals_the_uninterrupted_run(parts: dict[str, str], workers: int) -> None:
    loader = Loader(mixture(parts), workers=workers, seed=5)
    with loader.iter() as it:
        whole = names(it)
    for stop in (1, 77, 239):
        with loader.iter() as it:
            first = [next(it).name for _ in range(stop)]
            state = json.loads(json.dumps(it.state_dict()))
        with loader.iter(state=state) as it:
            assert first + names(it) == whole, stop


def test_by_tokens_within_one_documents_ids(parts: dict[str, str]) -> None:
    weights = {"web": 0.6, "pq": 0.25, "js": 0.15}
    m = mixture(parts, weights, by="tokens")
    with Loader(m, workers=0, seed=1, tokenizer="bytes").iter() as it:
        documents = list(it)
    ids = collections.Counter[str]()
    total = 0
    longest = max(len(d.tokens) for d in documents)  # the bound: one document's ids
    for document in documents:
        size = len(document.tokens)
        ids[document.source] += size
        total += size
        for name, w in weights.items():
            assert abs(ids[name] - w * total) <= longest, (name, ids, total)
    with pytest.raises(ValueError, match="tokenizer"):
        Loader(m, workers=0).iter()


def test_schedule_and_set_weights_count_from_the_change(parts: dict[str, str]) -> None:
    m = mixture(parts, schedule=[(40, {"web": 0.1, "pq": 0.9})])
    loader = Loader(m, workers=0, seed=2, epochs=None)
    with loader.iter() as it:
        read = [next(it) for _ in range(100)]
        it.set_weights({"js": 1.0})
        read += [next(it) for _ in range(30)]
        assert it.weights == {"web": 0.0, "pq": 0.0, "js": 1.0}
        state = it.state_dict()
        tail = [next(it).name for _ in range(20)]
    assert collections.Counter(d.source for d in read[:40]) == {"web": 20, "pq": 12, "js": 8}
    after = collections.Counter(d.source for d in read[40:100])
    assert after == {"web": 6, "pq": 54}
    assert {d.source for d in read[100:]} == {"js"}
    # applied: in the state's weights and counts, so not kept as a change
    assert state["changes"] == [] and state["weights"] == [0.0, 0.0, 1.0]
    with loader.iter(state=state) as it:
        assert [next(it).name for _ in range(20)] == tail
    with loader.iter() as it:  # a change not yet applied when the state is taken: kept
        read = [next(it) for _ in range(100)]
        it.set_weights({"js": 1.0})
        pending = it.state_dict()
        tail = [next(it).name for _ in range(20)]
    assert pending["changes"] == [{"at": 100, "weights": [0.0, 0.0, 1.0]}]
    with loader.iter(state=pending) as it:  # the set_weights replayed at its position
        assert [next(it).name for _ in range(20)] == tail


def test_random_sampling_is_seeded_and_resumes(parts: dict[str, str]) -> None:
    loader = Loader(mixture(parts, sampling="random"), workers=0, seed=4, take=150)
    with loader.iter() as it:
        whole = [(d.source, d.name) for d in it]
    with loader.iter() as it:
        assert [(d.source, d.name) for d in it] == whole
    counts = collections.Counter(source for source, _ in whole)
    assert counts["web"] > counts["js"] > 0
    with loader.iter() as it:
        first = [(d.source, d.name) for d in (next(it) for _ in range(60))]
        state = it.state_dict()
    with loader.replace(take=90).iter(state=state) as it:  # take: this iterator's documents
        assert first + [(d.source, d.name) for d in it] == whole


@pytest.mark.parametrize(
    ("small", "stops", "ahead"),
    [("pq", (3, 9, 13, 6), 0), ("js", (3, 9, 40, 17), 2)],  # js: rank 2 two epochs ahead
)
def test_reshard_four_ranks_to_three_and_to_one(
    parts: dict[str, str], small: str, stops: tuple[int, ...], ahead: int
) -> None:
    """4 ranks stopped at different steps, their states resharded to 3 and to 1 (even
    sharding off): per part, every epoch an old rank had begun is the old ranks' documents of
    it and the new ranks' once each, and each new rank's proportions are within one document
    from its start. A small part runs through epochs at each rank's pace: the ranks are in
    different epochs of it (``ahead``: the last old rank's furthest)."""
    m = mixture(parts, {"web": 0.5, small: 0.5, ({"pq", "js"} - {small}).pop(): 0.0})
    old: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
    states = []
    for rank, stop in enumerate(stops):
        loader = Loader(m, workers=0, seed=6, rank=rank, world_size=4, even=None, epochs=None)
        with loader.iter() as it:
            for _ in range(stop):
                document = next(it)
                old[document.source, it.stats.epochs[document.source]].append(document.name)
            states.append(it.state_dict())
    last = {name: max(e for (p, e) in old if p == name) for name in ("web", small)}
    assert last == {"web": 0, small: ahead}
    for world in (3, 1):
        new: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        for rank, state in enumerate(reshard(states, world)):
            loader = Loader(m, workers=0, seed=6, rank=rank, world_size=world, even=None,
                            epochs=None)  # fmt: skip
            counts = collections.Counter[str]()
            with loader.iter(state=state) as it:
                for n in range(1, 2000):
                    document = next(it)
                    counts[document.source] += 1
                    assert all(abs(counts[k] - 0.5 * n) <= 1 for k in ("web", small)), counts
                    epochs = it.stats.epochs
                    new[document.source, epochs[document.source]].append(document.name)
                    if all(epochs[k] > last[k] for k in last):
                        break
        for (name, epoch), read in old.items():
            together = read + new[name, epoch]
            assert len(together) == len(set(together)) == SIZES[name], (world, name, epoch)


def test_one_pool_whatever_the_number_of_parts(tmp_path: Path) -> None:
    parts = {}
    for k in range(8):
        folder = tmp_path / f"p{k}"
        folder.mkdir()
        write_jsonl(folder / "a.jsonl", sample_texts(5, seed=k))
        parts[f"p{k}"] = str(folder)
    with Loader(Mixture(parts), workers=2, seed=0).iter() as it:
        documents = [next(it) for _ in range(20)]
        assert len(child_pids()) == 2
        documents += list(it)
    # equal weights: each part's epoch once, and the ones before the last in the last round
    # once more (the run ends at the last part's first turn past its epoch)
    counts = collections.Counter(d.source for d in documents)
    assert set(counts) == set(parts) and set(counts.values()) <= {5, 6}
    assert counts["p7"] == 5


def test_what_a_mixture_refuses(parts: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="in two parts"):
        Mixture({"a": parts["js"], "b": parts["js"]})
    with pytest.raises(ValueError, match="not parts"):
        Mixture(parts, {"code": 1.0})
    with pytest.raises(ValueError, match="positive"):
        Mixture(parts, {"web": 0.0})
    with pytest.raises(ValueError, match="at least one part"):
        Mixture({})
    with pytest.raises(ValueError, match="sets only"):
        Mixture(parts, options={"web": {"workers": 3}})
    loader = Loader(mixture(parts), workers=0, seed=0)
    with loader.iter() as it:
        next(it)
        state = it.state_dict()
    with pytest.raises(ValueError, match="set_weights: the iterator was closed, or ran out"):
        it.set_weights(WEIGHTS)  # (closed: it was taken silently)
    other = Loader(mixture(parts, {"web": 1.0, "pq": 1.0, "js": 1.0}), workers=0, seed=0)
    with pytest.raises(StateError, match="another mixture"):
        other.iter(state=state)
    with pytest.raises(StateError, match=r"part 'web'.*seed: saved 0, now 1") as caught:
        loader.replace(seed=1).iter(state=state)
    assert caught.value.field is None or caught.value.field.startswith("parts.web")
    damaged = json.loads(json.dumps(state))
    damaged["parts"]["js"]["position"]["in_block"] = True
    with pytest.raises(StateError) as caught:
        loader.iter(state=damaged)
    assert caught.value.field is not None and "in_block" in caught.value.field
    assert "js" in caught.value.field
    with pytest.raises(StateError, match="corpus"):
        reshard([state, Loader(parts["js"]).iter().state_dict()], 1)


def summed_up(stderr: str) -> tuple[int, dict[str, int]]:
    """The documents of ``owt stream``'s summary line, and of each part's line."""
    total = re.search(r"^(?:read )?([\d,]+) documents?\b", stderr, re.M)
    assert total, stderr
    each = re.findall(r"^  (\w+): ([\d,]+) documents?,", stderr, re.M)
    return int(total[1].replace(",", "")), {k: int(n.replace(",", "")) for k, n in each}


def test_owt_stream_mix_resumes_and_sums_up_per_part(
    parts: dict[str, str], owt: Owt, tmp_path: Path
) -> None:
    mix = [f"--mix={name}={parts[name]}:{w}" for name, w in WEIGHTS.items()]
    state = tmp_path / "state.json"
    whole = owt("stream", *mix, "-j", "2", "--seed", "7", "--jsonl")
    assert whole.returncode == 0, whole.stderr
    lines = [json.loads(line) for line in whole.stdout.splitlines()]
    with Loader(mixture(parts), workers=0, seed=7).iter() as it:
        assert [(d["source"], d["name"]) for d in lines] == [(d.source, d.name) for d in it]
    first = owt("stream", *mix, "-j", "2", "--seed", "7", "--take", "50",
                "--state-out", str(state), "--jsonl")  # fmt: skip
    rest = owt("stream", *mix, "-j", "2", "--resume", str(state), "--jsonl")
    assert first.stdout + rest.stdout == whole.stdout
    # Each run's lines per part count its own documents: they add up to its documents line,
    # and the two runs' to the whole run's (a resumed run's are not its state's and its own).
    said = [summed_up(run.stderr) for run in (whole, first, rest)]
    assert said[0][1] == {"web": 120, "pq": said[0][1]["pq"], "js": said[0][1]["js"]}
    assert [sum(each.values()) for _, each in said] == [total for total, _ in said]
    assert said[1][0] == 50
    assert collections.Counter(said[1][1]) + collections.Counter(said[2][1]) == said[0][1]
    bad = owt("stream", parts["web"], "--mix", f"js={parts['js']}:1")
    assert bad.returncode == 2 and "either paths or --mix" in bad.stderr
    bad = owt("stream", "--mix", f"js={parts['js']}")
    assert bad.returncode == 2 and "NAME=PATH_OR_URL:WEIGHT" in bad.stderr


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_of_a_mixture_resume_exactly(
    parts: dict[str, str], packing: str, workers: int
) -> None:
    """Packed across parts (a row may hold documents of several): a state after any batch
    resumes to the same batches; the weights' changes come back at their positions."""
    m = mixture(parts, by="tokens", schedule=[(60, {"web": 0.2, "pq": 0.4, "js": 0.4})])
    loader = Loader(m, workers=workers, seed=1, tokenizer="bytes", epochs=None)

    def batches(state: Any = None, n: int = 40) -> tuple[list[Any], Any]:
        kw: Any = {"packing": packing, "segments": True, "state": state}
        if packing == "bestfit":
            kw["window"] = 64  # documents at a time (the default's 4,096 read far ahead)
        with loader.batches(64, 4, **kw) as it:
            out = [next(it).tokens.copy() for _ in range(n)]
            return out, json.loads(json.dumps(it.state_dict()))

    whole, _ = batches()
    for stop in (1, 13, 29):
        first, state = batches(n=stop)
        rest, _ = batches(state, 40 - stop)
        assert all((a == b).all() for a, b in zip(first + rest, whole, strict=True)), stop
    with pytest.raises(StateError, match="mixture"):
        single = Loader(parts["js"], tokenizer="bytes", workers=0)
        window = {"window": 64} if packing == "bestfit" else {}
        single.batches(64, 4, packing=packing, state=state, **window)  # type: ignore[arg-type]


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_the_stats_of_resumed_mixture_batches_are_the_uninterrupted_runs(
    parts: dict[str, str], packing: str
) -> None:
    """The stats of a mixture's batches (documents read ahead included) at a batch are the
    uninterrupted run's whatever state the run resumed from (session 28: a mixture read its
    documents in runs of 256 from where it started, so a resumed run had read further at the
    same batch: 268 documents against 256, an epoch more of a part)."""
    loader = Loader(mixture(parts, by="tokens"), workers=0, seed=1, tokenizer="bytes")
    kw: Any = {"packing": packing, **({"window": 64} if packing == "bestfit" else {})}

    def run(n: int, state: Any = None) -> tuple[Any, Any]:
        with loader.batches(64, 4, state=state, **kw) as it:
            for _ in range(n):
                next(it)
            stats = it.stats
            said = (stats.documents, {k: v.documents for k, v in stats.parts.items()},
                    stats.epochs, stats.tokens)  # fmt: skip (units: a resumed run reads again)
            return json.loads(json.dumps(it.state_dict())), said

    _, whole = run(100)
    for stop in (13, 20, 50):
        state, _ = run(stop)
        assert run(100 - stop, state)[1] == whole, stop


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_batches_of_a_mixture_cut_by_take_resume_to_the_uninterrupted_rows(
    parts: dict[str, str], packing: str
) -> None:
    """A run of ``take`` documents, then one resumed from its state, hand out the rows of
    one run: best fit reads the window the last document is in whole (a window cut short
    resumed into the whole window's rows, some of its ids lost and others doubled)."""
    kw: Any = {"packing": packing, "segments": True}
    if packing == "bestfit":
        kw["window"] = 7

    def rows(state: Any = None, **extra: Any) -> tuple[list[bytes], Any]:
        loader = Loader(mixture(parts), workers=0, seed=3, tokenizer="bytes", epochs=1, **extra)
        with loader.batches(127, 2, state=state, **kw) as it:
            return [row.tobytes() for b in it for row in b.tokens], it.state_dict()

    whole, _ = rows()
    for take in (3, 10, 11, 79):
        first, state = rows(take=take)
        rest, _ = rows(state)
        assert 0 < len(first) < len(whole), take
        assert first + rest == whole, take


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_runs_of_take_of_a_mixture_resumed_from_each_other_go_on(
    parts: dict[str, str], packing: str
) -> None:
    """A resumed run's ``take`` does not count the document (concat) or window (best fit) its
    first batch is inside: runs of ``take=1`` resumed one from another each hand out rows
    (before, each re-read and counted that document and handed out none); concat runs of 4
    and 6 hand out the rows of one run of 10."""
    kw: Any = {"packing": packing, "window": 3} if packing == "bestfit" else {}

    def rows(state: Any = None, **extra: Any) -> tuple[list[bytes], Any]:
        loader = Loader(mixture(parts), workers=0, seed=3, tokenizer="bytes", epochs=1, **extra)
        with loader.batches(127, 2, state=state, **kw) as it:
            return [row.tobytes() for b in it for row in b], it.state_dict()

    whole, _ = rows()
    chain: list[bytes] = []
    state = None
    for _ in range(8):
        more, after = rows(state, take=1)
        assert after != state and more, len(chain)
        chain, state = chain + more, after
    assert chain == whole[: len(chain)]
    if packing == "concat":
        four, after = rows(take=4)
        assert four + rows(after, take=6)[0] == rows(take=10)[0]


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_set_weights_between_batches_is_exact_under_resume_and_ahead(
    parts: dict[str, str], packing: str
) -> None:
    """``set_weights`` on a mixture's batches applies from the next batch's first document:
    a run resumed from a state taken before the change, changed at the same batch, and a run
    made ``ahead``, hand out the batches of one run; under ``take`` the run ends where it
    would have."""
    kw: Any = {"packing": packing, "segments": True}
    if packing == "bestfit":
        kw["window"] = 3
    new = {"web": 0.05, "pq": 0.05, "js": 0.9}

    def run(state: Any = None, first: int = 0, stop: int = 40, at: int = 9,
            made_ahead: bool = False, take: int | None = None
            ) -> tuple[list[bytes], Any]:  # fmt: skip
        loader = Loader(mixture(parts), workers=0, seed=3, tokenizer="bytes", epochs=None,
                        take=take)  # fmt: skip
        batches: Any = loader.batches(512, 2, state=state, **kw)
        out = []
        with ahead(batches, 3) if made_ahead else batches as it:
            for i in range(first, stop):
                if i == at:
                    it.set_weights(new)
                batch = next(it, None)
                if batch is None:
                    break
                out.append(batch.tokens.tobytes() + batch.sources.astype(np.int64).tobytes())
            return out, json.loads(json.dumps(it.state_dict()))

    whole, _ = run()
    unchanged, _ = run(at=-1)
    assert whole[:9] == unchanged[:9] and whole[9:] != unchanged[9:]
    assert run(made_ahead=True)[0] == whole
    for stop in (4, 9, 23):
        first, state = run(stop=stop, at=9 if stop > 9 else -1)
        rest, _ = run(state, first=stop)
        assert first + rest == whole, stop
        assert run(state, first=stop, made_ahead=True)[0] == rest, stop
    cut, state = run(take=30, stop=1000, at=4)
    rest, _ = run(state, first=len(cut), stop=len(cut) + 20, at=-1)
    assert cut + rest == run(at=4, stop=len(cut) + 20)[0]
    loader = Loader(mixture(parts), tokenizer="bytes", workers=0)
    with loader.batches(512, 2, **kw) as it, pytest.raises(ValueError, match="set_weights: "):
        it.set_weights({"nope": 1.0})
    two = Loader(Mixture({"web": parts["web"], "pq": parts["pq"]}), tokenizer="bytes", workers=0)
    with two.batches(512, 2, **kw) as it:
        of_two = it.state_dict()
    with loader.batches(512, 2, **kw) as it:  # (refused: the batches go on as they were)
        first = [next(it).tokens.tobytes()]
        with pytest.raises(StateError, match=r"set_weights: the state is of batches of \('web'"):
            it.set_weights(new, state=of_two)
        first.append(next(it).tokens.tobytes())
    with loader.batches(512, 2, **kw) as it:
        assert first == [next(it).tokens.tobytes() for _ in range(2)]
    closed = loader.batches(512, 2, **kw)
    closed.close()
    assert next(closed, None) is None
    with pytest.raises(ValueError, match="set_weights: the batches were closed"):
        closed.set_weights(new)
    closed.set_weights(new, state=closed.state_dict())  # (goes on from it: Ahead's way)
    with closed:
        assert next(closed) is not None
    made_ahead = ahead(loader.batches(512, 2, **kw))
    made_ahead.close()
    with pytest.raises(ValueError, match="set_weights: the batches made ahead were closed"):
        made_ahead.set_weights(new)
    corpus = Loader(parts["js"], tokenizer="bytes", workers=0).batches(512, 2, **kw)
    with ahead(corpus) as it, pytest.raises(TypeError, match="only a mixture's batches"):
        it.set_weights(new)


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_set_weights_leaves_what_the_batches_began_as_it_was(
    parts: dict[str, str], packing: str
) -> None:
    """A document cut across the next batch (concat) and the best-fit window rows were handed
    out of were chosen by the old weights: they go on as they were, the new weights choose
    from the next document on (a change at the next batch's document chose another there: a
    concat offset past its end, a window packed anew whose rows handed out were lost)."""
    kw: Any = {"packing": packing, "segments": True}
    if packing == "bestfit":
        kw["window"] = 7
    loader = Loader(mixture(parts), workers=0, seed=3, tokenizer="bytes", epochs=None)
    with loader.batches(512, 2, **kw) as it:
        assert (it.seq_len, it.batch_size) == (512, 2)  # (as a corpus's batches say them)
        state = it.state_dict()
        while not (state["offset"] if packing == "concat" else state["row"]):
            next(it)
            state = it.state_dict()

    def batches(change: bool) -> list[tuple[Any, ...]]:
        out = []
        with loader.batches(512, 2, state=state, **kw) as it:
            if change:
                it.set_weights({"web": 0.0, "pq": 1.0, "js": 0.0})
            for _ in range(12):
                batch = next(it)
                out.append((batch.tokens.copy(), batch.sources.copy(), it.state_dict()))
        return out

    changed, unchanged = batches(True), batches(False)
    if packing == "concat":  # the cut document's ids, to its end-of-text, are the same
        ids, same = (np.concatenate([b[0][:, 1:].ravel() for b in x]) for x in (changed, unchanged))
        end = int(np.argmax(same == EOT)) + 1
        assert (ids[:end] == same[:end]).all() and (ids[end:] != same[end:]).any()
    else:  # the window's rows left are the same, then the next window differs
        number = state["window_number"]
        left = next(k for k, b in enumerate(unchanged) if b[2]["window_number"] != number)
        assert left > 0
        for a, b in zip(changed[:left], unchanged[:left], strict=True):
            assert (a[0] == b[0]).all()
        after = zip(changed[left:], unchanged[left:], strict=True)
        assert any((a[0] != b[0]).any() for a, b in after)
    pq = mixture(parts).names.index("pq")
    sources = changed[-1][1]
    assert (sources[sources >= 0] == pq).all()  # (then only the part of weight 1; -1: padding)


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_set_weights_at_the_end_of_a_take_finishes_what_the_batches_began(
    parts: dict[str, str], packing: str
) -> None:
    """A run of ``take=4`` whose batches are inside its 4th document (concat) or the window it
    is in (best fit), weights set: no document is left to choose, so the rest of what was
    begun is handed out, as the run would have (before, the reopened run's ``take`` was 0 and
    it ended there: those rows lost)."""
    kw: Any = {"packing": packing} | ({"window": 3} if packing == "bestfit" else {})
    loader = Loader(mixture(parts), workers=0, seed=3, tokenizer="bytes", take=4)
    with loader.batches(64, 2, **kw) as it:
        whole, counted = [], []  # the documents the state after each batch counts begun
        for batch in it:
            whole.append(batch.tobytes())
            state = it.state_dict()
            inside = state["offset"] > 0 if packing == "concat" else state["row"] > 0
            cut = sum(state.get("window_parts", ())) if packing == "bestfit" else inside
            counted.append(state["documents"]["handed"] + cut)
    # The first state past which no document is begun (best fit read the 4th's window whole).
    stop = next(k for k, n in enumerate(counted) if n >= 4) + 1
    assert stop < len(whole)
    with loader.batches(64, 2, **kw) as it:
        first = [next(it).tobytes() for _ in range(stop)]
        it.set_weights({"web": 0.0, "pq": 0.0, "js": 1.0})
        assert first + [b.tobytes() for b in it] == whole


def test_set_weights_after_a_reshard_leaves_the_dealt_windows_as_they_were(
    parts: dict[str, str],
) -> None:
    """A rank resharded hands out first the best-fit windows old ranks had begun, in their
    turns: ``set_weights`` there leaves them as they were and chooses from the rank's own
    turns after them on."""

    def loader(rank: int, world: int) -> Loader:
        return Loader(mixture(parts), workers=0, seed=3, tokenizer="bytes", epochs=None,
                      rank=rank, world_size=world, even=None)  # fmt: skip

    states = []
    for rank in range(2):
        with loader(rank, 2).batches(128, 2, packing="bestfit", window=3) as it:
            for _ in range(5 + 3 * rank):
                next(it)
            states.append(json.loads(json.dumps(it.state_dict())))
    (state,) = reshard(states, 1)

    def batches(change: bool) -> list[tuple[bytes, int]]:
        out = []
        with loader(0, 1).batches(128, 2, packing="bestfit", window=3, state=state) as it:
            if change:
                it.set_weights({"web": 0.0, "pq": 1.0, "js": 0.0})
            for _ in range(40):
                batch = next(it)
                dealt = len(it.state_dict()["documents"].get("replays") or ())
                out.append((batch.tobytes(), dealt))
        return out

    changed, unchanged = batches(True), batches(False)
    assert unchanged[0][1] > 0  # (windows were dealt)
    last_dealt = max(k for k, (_, dealt) in enumerate(unchanged) if dealt)
    assert [b for b, _ in changed[: last_dealt + 1]] == [b for b, _ in unchanged[: last_dealt + 1]]
    assert changed != unchanged


def test_a_best_fit_window_cut_by_the_run_s_end_resumes_with_more_epochs(
    parts: dict[str, str],
) -> None:
    """A finite run of a mixture ends inside a best-fit window (its parts' epochs end where
    they do, not at a window's end): its state says the window's documents, and a run resumed
    with more epochs packs it from as many again and hands out the rows the finite run had
    left (it packed a whole window anew: ids lost and doubled)."""

    def rows(batch_size: int, state: Any = None, epochs: int = 1) -> tuple[list[bytes], Any]:
        loader = Loader(mixture(parts), workers=0, seed=2, tokenizer="bytes", epochs=epochs)
        with loader.batches(64, batch_size, packing="bestfit", window=5, state=state) as it:
            out = [row.tobytes() for batch in it for row in batch]
            return out, json.loads(json.dumps(it.state_dict()))

    every, _ = rows(1)  # (one row a batch: none left)
    cut, state = rows(2)
    assert state["row"] and state["window_documents"] < 5  # the finite run ended inside it
    assert every[: len(cut)] == cut and len(every) > len(cut)
    rest, _ = rows(2, state, epochs=2)
    assert rest[: len(every) - len(cut)] == every[len(cut) :]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_damaged_member_of_a_part_is_named_or_counted_in_its_part(
    parts: dict[str, str], tmp_path: Path, workers: int
) -> None:
    """Under raise, the error names the part, its file and member; under skip, it is counted
    in that part's stats, named with the part (the other parts read on, whole)."""
    bad = outer_tar(tmp_path / "urlsf_subset09.tar", [
        ("openwebtext/urlsf_subset09-1_data.xz", xz_member(sample_docs("a", 5))),
        ("openwebtext/urlsf_subset09-2_data.xz", corrupt_member(sample_docs("b", 5))),
    ])  # fmt: skip
    m = Mixture({"bad": str(bad), "js": parts["js"]}, {"bad": 0.5, "js": 0.5})
    with pytest.raises(CorruptMember) as caught, Loader(m, workers=workers, seed=0).iter() as it:
        list(it)
    assert caught.value.path == str(bad)
    assert caught.value.member == "openwebtext/urlsf_subset09-2_data.xz"
    said = f"part 'bad': {bad}[openwebtext/urlsf_subset09-2_data.xz]: corrupt xz data"
    assert caught.value.part == "bad" and str(caught.value).startswith(said)
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)
    with Loader(m, workers=workers, seed=0, on_error="skip").iter() as it:
        documents = list(it)
        stats = it.stats
    assert stats.skipped and all(name.startswith(said) for name in stats.skipped)
    # once per epoch of the small part that it read (an endless part reads it again)
    assert 1 <= stats.parts["bad"].skipped_members <= stats.epochs["bad"] + 1
    assert stats.parts["js"].skipped_members == 0
    assert {d.name for d in documents if d.source == "bad"} == set(sample_docs("a", 5))
    assert len({d.name for d in documents if d.source == "js"}) == 30


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_packed_batches_say_the_part_of_every_id(parts: dict[str, str], packing: str) -> None:
    """``PackedBatch.sources``: concat's are the parts of the ids end to end; best fit's are
    constant over each piece of a document, whose ids are that part's document's at its
    positions, and -1 over padding. A corpus's batches have none."""
    m = mixture(parts)
    loader = Loader(m, workers=0, seed=4, tokenizer="bytes", take=120)
    with loader.iter() as it:
        documents = list(it)
    part_of = {name: k for k, name in enumerate(m.names)}
    kw: Any = {"packing": packing, "segments": True}
    if packing == "bestfit":
        kw["window"] = 32
    with loader.replace(take=None, epochs=None).batches(64, 3, **kw) as it:
        batches = [next(it) for _ in range(6)]
    if packing == "concat":
        flat = np.concatenate([np.full(len(d.tokens), part_of[d.source]) for d in documents])
        for k, batch in enumerate(batches):
            for r in range(3):
                at = (k * 3 + r) * 64
                assert (batch.sources[r] == flat[at : at + 65]).all()
    else:
        by_part = collections.defaultdict(list)
        for d in documents:
            by_part[part_of[d.source]].append(d.tokens)
        for batch in batches:
            for row, seg, pos, src in zip(*batch, strict=True):
                assert (src[seg == 0] == -1).all()
                for s in set(seg[seg > 0].tolist()):
                    where = seg == s
                    (label,) = set(src[where].tolist())
                    ids, first = row[where], int(pos[where][0])
                    assert any(
                        len(t) >= first + len(ids) and (t[first : first + len(ids)] == ids).all()
                        for t in by_part[label]
                    )
    with Loader(parts["js"], workers=0, tokenizer="bytes").batches(64, 2, segments=True) as it:
        assert next(it).sources is None


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_a_mixture_under_a_shape_schedule_resumes_at_the_change(
    parts: dict[str, str], packing: str
) -> None:
    """A sequence-length warm-up over a mixture (issue 38): stopped at the change and after
    it, resumed equal to the uninterrupted batches, each id's part said."""
    schedule = [(0, 32, 4), (5, 128, 1)]
    loader = Loader(mixture(parts), workers=0, seed=8, tokenizer="bytes", epochs=None)
    kw: Any = {"packing": packing, "segments": True, "schedule": schedule}
    if packing == "bestfit":
        kw["window"] = 32

    def run(state: Any = None, n: int = 10) -> tuple[list[Any], Any]:
        with loader.batches(state=state, **kw) as it:
            out = [next(it) for _ in range(n)]
            return out, json.loads(json.dumps(it.state_dict()))

    whole, _ = run()
    assert [b.tokens.shape for b in whole] == [(4, 33)] * 5 + [(1, 129)] * 5
    for stop in (5, 6):
        first, state = run(n=stop)
        rest, _ = run(state, 10 - stop)
        for a, b in zip(first + rest, whole, strict=True):
            assert (a.tokens == b.tokens).all() and (a.sources == b.sources).all()


@pytest.mark.parametrize(
    ("small", "weight", "stops", "until"),
    [("pq", 0.4, (3, 7, 1, 5), 1), ("js", 0.9, (3, 7, 1, 150), 3)],  # js: ranks in epochs 0-2
)
def test_concat_batches_of_a_mixture_reshard_with_no_id_twice_or_lost(
    parts: dict[str, str], small: str, weight: float, stops: tuple[int, ...], until: int
) -> None:
    """Concat batches of 4 ranks stopped inside documents, resharded to 3 and to 1: per part,
    every id of its epochs before ``until`` is a target once over the old and new ranks (but
    each rank's first id and last ids, which no batch of its own makes a target), a document
    cut across the checkpoint goes on from its first id not yet a target (in whichever epoch
    of its part the rank was), and each new rank's documents keep the weights within one
    document."""
    m = mixture(parts, {"web": 1 - weight, small: weight})  # the third part at 0: never read
    seq, rows = 32, 2

    def opts(rank: int, world: int) -> dict[str, Any]:
        return {"workers": 0, "seed": 5, "rank": rank, "world_size": world, "even": None,
                "epochs": None, "tokenizer": "bytes"}  # fmt: skip

    lengths: dict[str, int] = {}
    untils = {"web": 1, small: until}  # the epochs checked, per part (web's old ranks: in 0)

    def checked(key: str, epoch: int) -> bool:
        return epoch < untils[key.split(":")[0]]

    def stream(state: Any, rank: int, world: int) -> list[tuple[str, int, int, int]]:
        """``(part:document, index, id, part's epoch)`` of every id the rank's documents
        hold, until each read part has begun its epoch in ``untils``."""
        out: list[tuple[str, int, int, int]] = []
        counts = collections.Counter[str]()
        with Loader(m, **opts(rank, world)).iter(state=state) as it:
            for n, doc in enumerate(it, 1):
                epoch = it.stats.epochs[doc.source]
                counts[doc.source] += 1
                weights = zip(m.names, m.weights, strict=True)
                assert all(abs(counts[k] - w * n) <= 1 for k, w in weights)
                key = f"{doc.source}:{doc.name}"
                cut = lengths.setdefault(key, len(doc.tokens)) - len(doc.tokens)
                out += [(key, cut + j, int(t), epoch) for j, t in enumerate(doc.tokens)]
                if all(it.stats.epochs[k] >= e for k, e in untils.items()):
                    return out

    def targets(state: Any, rank: int, world: int, n: int | None) -> tuple[list[Any], Any]:
        ids = stream(state and state["documents"], rank, world)
        got: list[Any] = []
        with Loader(m, **opts(rank, world)).batches(seq, rows, state=state) as it:
            k = 0
            while (n is None or k < n) and (k + 1) * seq * rows < len(ids):
                batch = next(it)
                window = ids[k * seq * rows : (k + 1) * seq * rows + 1]
                assert batch[:, 1:].reshape(-1).tolist() == [t for _, _, t, _ in window[1:]]
                got += [(d, j, e) for d, j, _, e in window[1:] if checked(d, e)]
                k += 1
            return got, json.loads(json.dumps(it.state_dict())), ids

    every: set[tuple[str, int, int]] = set()
    old: list[Any] = []
    states = []
    for rank, stop in enumerate(stops):
        got, state, ids = targets(None, rank, 4, stop)
        every |= {(d, j, e) for d, j, _, e in ids if checked(d, e)}
        old += got
        states.append(state)
    assert any(s["offset"] for s in states)  # some rank stopped inside a document
    epochs = [s["documents"]["parts"][small]["position"]["epoch"] for s in states]
    assert max(epochs) == until - 1 and min(epochs) == 0, epochs
    for world in (3, 1):
        together = list(old)
        untargeted = 4 + world  # each rank's first id; the new ranks' tails are below
        for rank, state in enumerate(reshard(states, world)):
            got, _, ids = targets(state, rank, world, None)
            together += got
            untargeted += sum(1 for d, _, _, e in ids if checked(d, e)) - len(got)
        counted = collections.Counter(together)
        assert {t for t, c in counted.items() if c > 1} == set(), world
        assert len(every - set(counted)) <= untargeted, world


def test_a_finite_run_ends_without_reading_the_next_epoch(parts: dict[str, str]) -> None:
    """Weighted by their sizes, both parts end their epoch together: the run ends there, and
    no unit of a part's next epoch is read (a part says its epoch's end before reading on)."""
    m = mixture(parts, {"web": SIZES["web"], "pq": SIZES["pq"]})
    with Loader(m, workers=0, seed=2).iter() as it:
        documents = list(it)
        stats = it.stats
    counts = collections.Counter(d.source for d in documents)
    assert counts == {"web": SIZES["web"], "pq": SIZES["pq"]}
    assert stats.epochs == {"web": 0, "pq": 0, "js": 0}
    units = {name: len(Loader(parts[name]).corpus.units) for name in ("web", "pq")}
    assert {name: stats.parts[name].units for name in units} == units


def test_the_state_of_16_parts_stays_under_8_kb(tmp_path: Path) -> None:
    """The issue's bound: a mixture of 16 parts on one rank, with a tokenizer and a change of
    weights, in compact JSON."""
    parts = {}
    for k in range(16):
        folder = tmp_path / f"part{k:02d}"
        folder.mkdir()
        write_jsonl(folder / "a.jsonl", sample_texts(20, seed=k))
        parts[folder.name] = str(folder)
    with Loader(Mixture(parts), workers=0, tokenizer="gpt2").iter() as it:
        for _ in range(40):
            next(it)
        it.set_weights(dict.fromkeys(parts, 1.0))
        state = it.state_dict()
    assert len(state["parts"]) == 16 and len(state["changes"]) == 1
    assert len(json.dumps(state, separators=(",", ":"))) <= 8 * 1024


def _targets(m: Mixture, state: Any, rank: int, world: int, n: int, **kw: Any) -> list[int]:
    """The ids of the targets of ``n`` concat batches (seq 8, 1 row) of rank ``rank``."""
    loader = Loader(m, workers=0, seed=1, tokenizer="bytes", epochs=None, rank=rank,
                    world_size=world, even=None, **kw)  # fmt: skip
    with loader.batches(8, 1, state=state) as it:
        return [t for _ in range(n) for t in next(it)[0, 1:].tolist()]


def test_a_cut_document_goes_on_first_after_a_reshard_and_no_id_is_left_out(
    parts: dict[str, str],
) -> None:
    """One rank stopped at every batch, resharded 1 -> 1: the document a batch had begun
    goes on first, whichever part the turns would pick, from its last id that was a target
    (the new rank's first, which no batch makes a target again), so none of its ids is left
    out. (It went on from its first id not yet a target, which, when it came first, began
    the first row and was lost; when another part came first, as a new document.)"""
    m = mixture(parts, {"pq": 1.0, "js": 1.0})
    opts: dict[str, Any] = {"workers": 0, "seed": 1, "tokenizer": "bytes", "epochs": None,
                            "even": None}  # fmt: skip
    lengths: dict[str, int] = {}

    def marked(state: Any, n: int) -> list[tuple[str, int, int]]:
        """``(document, index, id)`` of the first ``n`` ids the documents of ``state`` hold."""
        out: list[tuple[str, int, int]] = []
        with Loader(m, **opts).iter(state=state) as it:
            while len(out) < n:
                doc = next(it)
                key = f"{doc.source}:{doc.name}"
                cut = lengths.setdefault(key, len(doc.tokens)) - len(doc.tokens)
                out += [(key, cut + j, int(t)) for j, t in enumerate(doc.tokens)]
        return out[:n]

    whole = marked(None, 8 * 60 + 1)
    parts_first = set()
    for stop in range(1, 40):
        with Loader(m, **opts).batches(8, 1) as it:
            for _ in range(stop):
                next(it)
            state = json.loads(json.dumps(it.state_dict()))
        (new,) = reshard([state], 1)
        ids = marked(new["documents"], 4000)
        assert _targets(m, new, 0, 1, 10) == [t for *_, t in ids[1:81]]
        old = {(d, j) for d, j, _ in whole[1 : stop * 8 + 1]}
        again = {(d, j) for d, j, _ in ids[1:]} & old
        assert not again, (stop, sorted(again))
        cut, at = whole[stop * 8][0], whole[stop * 8][1]
        if at + 1 < lengths[cut]:  # (a document that ended there does not go on)
            assert [(d, j) for d, j, _ in ids[:2]] == [(cut, at), (cut, at + 1)], (stop, ids[:2])
            parts_first.add(cut.split(":")[0])
    assert parts_first == {"pq", "js"}  # a cut in each part met


def test_a_resumed_batches_state_saved_again_before_a_batch_is_the_same(
    parts: dict[str, str],
) -> None:
    """A checkpoint taken right after a resume (before any batch) keeps the part of the
    document the next batch begins in, so it reshards as the state it came from."""
    m = mixture(parts, {"pq": 1.0, "js": 1.0})
    loader = Loader(m, workers=0, seed=1, tokenizer="bytes", epochs=None, even=None)
    with loader.batches(8, 1) as it:
        for _ in range(7):
            next(it)
        state = json.loads(json.dumps(it.state_dict()))
    with loader.batches(8, 1, state=state) as it:
        again = json.loads(json.dumps(it.state_dict()))
    assert state["offset"] and state["documents"]["next"] is not None
    assert again == state


def test_batches_resume_inside_a_run_that_begins_at_a_change_of_weights(
    parts: dict[str, str],
) -> None:
    """A run of documents starting at a schedule step: a state inside it is taken under the
    new weights (the step applied once), and resumes to the same batches."""
    m = mixture(parts, {"pq": 1.0, "js": 0.0}, schedule=[(3, {"pq": 0.0, "js": 1.0})])
    whole = _targets(m, None, 0, 1, 40)
    loader = Loader(m, workers=0, seed=1, tokenizer="bytes", epochs=None, even=None)
    for stop in (1, 5, 20, 31):
        with loader.batches(8, 1) as it:
            for _ in range(stop):
                next(it)
            state = json.loads(json.dumps(it.state_dict()))
        assert _targets(m, state, 0, 1, 40 - stop) == whole[stop * 8 :], stop
