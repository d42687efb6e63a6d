"""Behaviours a second mutation-testing round found unpinned: each test kills one seeded
single-point bug that survived the suite (named in its docstring by its id and its edit).

Mixtures (set_weights and schedules under resume and reshard, best fit's dealt windows,
epochs, runs, stats), batch shapes and schedules, the best-fit packer's per-part sources, the
HTTP range reader's ``If-Match`` and whole-file answers, prepare's staging folders and work
folder, the PyTorch dataset's loaded states, and the halt a nested ``Halt.watching`` restores.
Every corpus is a few small JSON-lines parts."""

from __future__ import annotations

import collections
import json
import os
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, CorpusError, CorruptMember, Loader, StateError, reshard
from openwebtext.engine import Halt, Halted, check_halt
from openwebtext.loader import Mixture
from openwebtext.stream import Schedule, check_sizes
from openwebtext.stream.mixed import RUN
from openwebtext.stream.shapes import MOST_IDS
from remote_servers import RangeServer

isolated_storage = remote_servers.isolated_storage  # autouse: a fresh cache folder each test

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
WORDS += ["eta", "theta", "iota", "kappa", "lambda", "mu"]
WEIGHTS = {"web": 0.5, "pq": 0.3, "js": 0.2}


def _texts(n: int, seed: int, lo: int = 20, hi: int = 200) -> list[str]:
    """``n`` documents of ``lo`` to ``hi`` characters, each named first (``doc<seed>-<k>``)."""
    rnd = random.Random(seed)
    out = []
    for k in range(n):
        size = rnd.randint(lo, hi)
        text = f"doc{seed}-{k} "
        while len(text) < size:
            text += rnd.choice(WORDS) + " "
        out.append(text[:size])
    return out


def make_parts(root: Path, sizes: dict[str, int], files: int = 1) -> dict[str, str]:
    """A folder of ``files`` JSON-lines files per part, the part's documents split among them."""
    out = {}
    for k, (name, n) in enumerate(sizes.items()):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        texts = _texts(n, seed=k + 1)
        per = -(-n // files)
        for f in range(files):
            lines = "".join(json.dumps({"text": t}) + "\n" for t in texts[f * per : (f + 1) * per])
            (folder / f"{f}.jsonl").write_text(lines)
        out[name] = str(folder)
    return out


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """web 120, pq 50, js 30 documents, four files each."""
    return make_parts(tmp_path_factory.mktemp("three"), {"web": 120, "pq": 50, "js": 30}, 4)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """a and b, 60 documents each, one file each."""
    return make_parts(tmp_path_factory.mktemp("two"), {"a": 60, "b": 60})


def ranked(parts: dict[str, str], rank: int, world: int, **kw: Any) -> Any:
    """An endless mixture of ``parts`` (WEIGHTS) read by ``rank`` of ``world``."""
    return Loader(
        Mixture(parts, WEIGHTS, **kw), workers=0, seed=3, tokenizer="bytes", epochs=None,
        rank=rank, world_size=world, even=None,
    )  # fmt: skip


def bestfit_states(
    parts: dict[str, str], batches: list[int], schedule: Any = None
) -> list[dict[str, Any]]:
    """Each rank's state (through JSON) after ``batches[rank]`` best-fit batches (128 x 2, a
    window of 3)."""
    states = []
    kw = {} if schedule is None else {"schedule": schedule}
    for rank, n in enumerate(batches):
        with ranked(parts, rank, len(batches), **kw).batches(
            128, 2, packing="bestfit", window=3
        ) as it:
            for _ in range(n):
                next(it)
            states.append(json.loads(json.dumps(it.state_dict())))
    return states


# -- mixtures: reshard of best-fit states ------------------------------------------------


def test_set_weights_inside_a_best_fit_window_survives_a_reshard(three: dict[str, str]) -> None:
    """Old rank 0 inside a window calls set_weights: the change is due at the window's end,
    where the resharded rank's own turns start, so the new state still holds it (seeded MT6:
    ``_after_window`` keeps ``c.at >= end`` -> ``c.at > end``, which dropped it)."""
    states = []
    for rank in range(2):
        with ranked(three, rank, 2).batches(128, 2, packing="bestfit", window=3) as it:
            for _ in range(3):
                next(it)
            if rank == 0:
                assert it.state_dict()["row"] > 0  # inside a window
                it.set_weights({"web": 0.0, "pq": 0.0, "js": 1.0})
            states.append(json.loads(json.dumps(it.state_dict())))
    end = states[0]["documents"]["changes"][0]["at"]
    (new,) = reshard(states, 1)
    documents = new["documents"]
    assert documents["handed"] == end == 6
    assert documents.get("changes") == [{"at": 6, "weights": [0.0, 0.0, 1.0]}]


def test_a_schedule_step_where_rank_0_s_window_begins_is_in_force_after_a_reshard(
    three: dict[str, str],
) -> None:
    """A schedule step at exactly old rank 0's ``handed`` (the start of the window it is
    inside) is in force for that window and after: the resharded state's weights are the
    step's (seeded MT4: ``handed <= c.at < end`` -> ``handed < c.at < end``)."""
    states = bestfit_states(three, [2, 2], schedule=[(3, {"js": 1.0})])
    assert states[0]["documents"]["handed"] == 3 and states[0]["row"] > 0
    assert states[0]["documents"]["weights"] == [0.5, 0.3, 0.2]
    (new,) = reshard(states, 1)
    assert new["documents"]["handed"] == 6
    assert new["documents"]["weights"] == [0.0, 0.0, 1.0]


def test_a_best_fit_reshard_does_not_depend_on_the_order_of_the_states(
    three: dict[str, str],
) -> None:
    """Best fit's windows are dealt in old-rank order whatever order the states come in
    (seeded MT11: ``order = sorted(range(len(batches)), key=ranks.__getitem__)`` ->
    ``list(range(len(batches)))``)."""
    states = bestfit_states(three, [3, 5])
    forward = reshard(states, 1)
    backward = reshard(states[::-1], 1)
    assert forward == backward
    assert forward[0]["documents"]["handed"] == 6


def test_set_weights_inside_a_dealt_window_applies_after_the_dealt_windows(
    three: dict[str, str],
) -> None:
    """After a best-fit reshard the rank first replays the windows old ranks began; a
    set_weights made inside such a dealt window applies from the rank's first own document,
    as one made before any of its rows: the batches are the same (seeded MB2:
    ``elif saved.row and not documents.replays`` -> ``elif saved.row``)."""
    (state,) = reshard(bestfit_states(three, [3, 4]), 1)

    def run(change_at: int) -> list[bytes]:
        out = []
        with ranked(three, 0, 1).batches(128, 2, packing="bestfit", window=3, state=state) as it:
            for k in range(40):
                if k == change_at:
                    if k:  # inside a dealt window, with one left to replay
                        now = it.state_dict()
                        assert now["row"] > 0 and now["documents"].get("replays")
                    it.set_weights({"web": 0.0, "pq": 1.0, "js": 0.0})
                out.append(next(it).tobytes())
        return out

    assert run(1) == run(0)


# -- mixtures: set_weights on batches ------------------------------------------------------


def test_set_weights_in_a_resumed_take_keeps_the_take_from_the_state_on(
    two: dict[str, str],
) -> None:
    """A run of ``take=40`` resumed from a state reads about 40 documents from the state on,
    set_weights or not: the documents before the state do not count against it (seeded MB4:
    ``read = _counted_from(saved) - self._first`` -> ``read = _counted_from(saved)``)."""

    def loader() -> Any:
        mixture = Mixture(two, {"a": 0.5, "b": 0.5})
        return Loader(mixture, workers=0, seed=1, tokenizer="bytes", take=40)

    with loader().batches(64, 2) as it:
        for _ in range(6):
            next(it)
        state = it.state_dict()
    at: int = state["documents"]["handed"]
    assert at > 5

    def resumed(change: bool) -> int:
        with loader().batches(64, 2, state=state) as it:
            for n, _ in enumerate(it, 1):
                if n == 3 and change:
                    it.set_weights({"a": 0.0, "b": 1.0})
            handed: int = it.state_dict()["documents"]["handed"]
        return handed - at

    unchanged, changed = resumed(False), resumed(True)
    assert unchanged >= 39
    assert abs(changed - unchanged) <= 1 and changed >= 39


def test_set_weights_with_a_state_after_close_lets_the_batches_run_again(
    two: dict[str, str],
) -> None:
    """Closed batches go on from ``set_weights(..., state=s)``; they run again, so a later
    set_weights without a state is taken (seeded MB9: ``self._batches, self._closed =
    batches, False`` -> ``self._batches = batches``)."""
    mixture = Mixture(two, {"a": 0.5, "b": 0.5})
    it: Any = Loader(mixture, workers=0, seed=1, tokenizer="bytes", epochs=None).batches(64, 2)
    try:
        next(it)
        next(it)
        state = it.state_dict()
        it.close()
        it.set_weights({"a": 0.2, "b": 0.8}, state=state)
        next(it)
        it.set_weights({"a": 0.5, "b": 0.5})  # (the mutant: ValueError, "were closed")
        assert next(it).shape == (2, 65)
    finally:
        it.close()


def test_set_weights_refuses_a_state_of_batches_of_another_shape(two: dict[str, str]) -> None:
    """set_weights(state=s) checks s is a state of these batches: one of seq_len=32 batches
    given to seq_len=64 batches is a StateError (seeded L11: ``MixtureBatches(..., parse=
    checked)`` -> no ``parse``, which took it and handed out batches)."""
    loader: Any = Loader(Mixture(two), workers=0, seed=1, tokenizer="bytes", epochs=None)
    with loader.batches(32, 2) as other:
        next(other)
        foreign = other.state_dict()
    with loader.batches(64, 2) as it:
        next(it)
        with pytest.raises(StateError, match="seq_len=32"):
            it.set_weights({"a": 1.0}, state=foreign)


# -- mixtures: the running stream ------------------------------------------------------------


def test_a_mixture_s_runs_hold_at_most_run_documents(tmp_path: Path) -> None:
    """``next_run`` hands out at most ``RUN`` (256) documents at once (seeded MX10:
    ``len(documents) >= RUN`` -> ``> RUN``, which made runs of 257)."""
    parts = make_parts(tmp_path, {"a": 400, "b": 400})
    sizes = []
    with Loader(Mixture(parts), workers=0, seed=1, tokenizer="bytes", epochs=1).iter() as it:
        while True:
            try:
                sizes.append(len(it.next_run().lengths))
            except StopIteration:
                break
    assert RUN == 256
    assert max(sizes) == RUN
    assert sum(sizes) >= 799


def test_a_mixture_from_a_later_epoch_hands_out_one_epoch_of_every_part(tmp_path: Path) -> None:
    """``epoch=2, epochs=1`` reads one epoch of each part, as ``epoch=0, epochs=1`` does
    (seeded MX12: the last epoch ``options.epoch + options.epochs`` -> ``options.epochs``,
    which handed out nothing)."""
    parts = make_parts(tmp_path, {"a": 30, "b": 20})
    counts = {}
    for epoch in (0, 2):
        with Loader(Mixture(parts), workers=0, seed=1, epoch=epoch, epochs=1).iter() as it:
            counts[epoch] = collections.Counter(d.source for d in it)
    assert counts[0]["a"] == 30 and counts[0]["b"] >= 19
    assert counts[2] == counts[0]


def test_a_mixture_by_tokens_ends_after_every_part_s_epoch(tmp_path: Path) -> None:
    """By tokens, as by documents, ``epochs=1`` ends when every part of positive weight has
    handed out its epoch: part a's 40 documents all come (seeded MX15: ``all(p.seen >= last
    ...)`` -> ``any(...)``, which ended at the small part's epoch)."""
    parts = make_parts(tmp_path, {"a": 40, "b": 10})
    for by in ("documents", "tokens"):
        mixture = Mixture(parts, {"a": 0.5, "b": 0.5}, by=by)
        with Loader(mixture, workers=0, seed=1, epochs=1, tokenizer="bytes").iter() as it:
            counts = collections.Counter(d.source for d in it)
        assert counts["a"] == 40, (by, counts)
        assert counts["b"] >= 10, (by, counts)


def test_a_mixture_s_stats_count_the_files_its_parts_skipped(tmp_path: Path) -> None:
    """The summed stats of a mixture count ``skipped_files`` as its parts' do (seeded MX13:
    ``skipped_files`` left out of the fields summed)."""
    parts = make_parts(tmp_path, {"a": 30, "b": 20})
    Path(parts["a"], "bad.jsonl.gz").write_bytes(b"garbage: not gzip")  # skipped at open
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mixture = Mixture(parts)
        with Loader(mixture, workers=0, seed=1, epochs=1, on_error="skip").iter() as it:
            for _ in it:
                pass
            stats: Any = it.stats
    assert stats.parts["a"].skipped_files == 1
    assert stats.skipped_files == 1


def test_a_mixture_part_s_unopenable_file_raises_under_on_error_raise(tmp_path: Path) -> None:
    """A part's file that cannot be opened is a CorpusError under ``on_error="raise"`` (the
    default), as for a single corpus (seeded L3: the ``raise skipped[0]`` of a mixture's
    parts removed, which read the other files silently)."""
    parts = make_parts(tmp_path, {"a": 30, "b": 20})
    Path(parts["a"], "bad.jsonl.gz").write_bytes(b"garbage: not gzip")
    mixture = Mixture(parts)

    def read() -> int:
        with Loader(mixture, workers=0, seed=1, epochs=1).iter() as it:
            return sum(1 for _ in it)

    with pytest.raises(CorpusError, match=r"part 'a': .*bad\.jsonl\.gz"):
        read()


def test_a_schedule_with_two_steps_at_one_position_is_refused(tmp_path: Path) -> None:
    """A mixture's schedule takes one step a position (seeded MT1: ``b <= a`` -> ``b < a``,
    which took two steps at position 5)."""
    parts = make_parts(tmp_path, {"a": 10, "b": 10})
    with pytest.raises(ValueError, match="positions must increase"):
        Mixture(parts, schedule=[(5, {"a": 1.0}), (5, {"b": 1.0})])
    assert len(Mixture(parts, schedule=[(5, {"a": 1.0}), (6, {"b": 1.0})]).schedule) == 2


# -- batch shapes, schedules, best fit ---------------------------------------------------------


def test_a_warmup_begins_at_its_start_and_ends_at_its_end() -> None:
    """Only the lengths between are rounded to a multiple of 64 (seeded SH4: the line that
    keeps ``start`` and ``end`` exact removed: the warm-up began at 128)."""
    steps = Schedule.warmup(100, 1000, tokens=8192, batches=30, stages=4).steps
    assert steps[0][:2] == (0, 100)
    assert steps[-1][1] == 1000
    assert steps[0][2] == 8192 // 100


def test_a_batch_of_exactly_most_ids_is_allowed() -> None:
    """A batch holds at most ``MOST_IDS`` (2**31) ids: exactly that many is allowed, one row
    more is not (seeded SH8: ``> MOST_IDS`` -> ``>= MOST_IDS``). Sizes only: nothing is
    allocated."""
    assert MOST_IDS == 1 << 31
    check_sizes(1 << 21, 1 << 10)
    assert Schedule([(0, 1 << 30, 2)]).steps == ((0, 1 << 30, 2),)
    with pytest.raises(ValueError, match="at most"):
        check_sizes(1 << 21, (1 << 10) + 1)


def test_a_state_resumed_with_another_batch_size_names_batch_size(tmp_path: Path) -> None:
    """Another batch_size (the same seq_len) is a StateError whose field is ``batch_size``,
    as another seq_len's is ``seq_len`` (seeded SH10: the ``batch_size`` field dropped, named
    ``schedule``)."""
    parts = make_parts(tmp_path, {"a": 30})
    loader = Loader(Corpus.open(parts["a"]), workers=0, seed=1, tokenizer="bytes", epochs=None)
    with loader.batches(64, 2) as it:
        next(it)
        state = it.state_dict()
    fields = {}
    for seq_len, batch_size in ((32, 2), (64, 4)):
        with pytest.raises(StateError) as info:
            loader.batches(seq_len, batch_size, state=state).close()
        fields[seq_len, batch_size] = info.value.field
    assert fields == {(32, 2): "seq_len", (64, 4): "batch_size"}


def test_best_fit_sources_follow_a_seq_len_grown_inside_a_window(tmp_path: Path) -> None:
    """A mixture's best-fit batches with segments under a schedule whose seq_len grows inside
    a window: the rows packed again at the new length carry sources of the new length, -1
    exactly at the padding (seeded F15: the ``labels`` row of the new length not made: the
    batches failed with a reshape error)."""
    parts = make_parts(tmp_path, {"a": 60, "b": 60}, files=2)
    loader = Loader(Mixture(parts), workers=0, seed=1, tokenizer="bytes", epochs=1)
    shapes = []
    with loader.batches(
        schedule=[(0, 63, 2), (3, 255, 2)], packing="bestfit", window=16, segments=True
    ) as it:
        for k, batch in enumerate(it):
            if k >= 6:
                break
            assert batch.sources is not None and batch.segment_ids is not None
            assert batch.sources.shape == batch.tokens.shape
            assert np.array_equal(batch.sources == -1, batch.segment_ids == 0)
            shapes.append(batch.tokens.shape)
    assert shapes == [(2, 64)] * 3 + [(2, 256)] * 3


def test_best_fit_pads_with_the_pad_id_given(tmp_path: Path) -> None:
    """``pad_id=7`` is the id at every padding position, not the tokenizer's end of text
    (seeded L6: ``pad_id=...eot if pad_id is None else pad_id`` -> ``pad_id=...eot``)."""
    parts = make_parts(tmp_path, {"a": 30})
    loader = Loader(Corpus.open(parts["a"]), workers=0, seed=1, tokenizer="bytes", epochs=1)
    pads: set[int] = set()
    with loader.batches(255, 2, packing="bestfit", segments=True, pad_id=7) as it:
        for batch in it:
            assert batch.segment_ids is not None
            pads |= set(np.unique(batch.tokens[batch.segment_ids == 0]).tolist())
    assert pads == {7}


# -- the HTTP range reader ---------------------------------------------------------------------


def test_an_http_range_read_sends_if_match_and_a_replaced_file_is_an_error(
    tmp_path: Path,
) -> None:
    """A range read of a file indexed with a strong ETag sends ``If-Match``: a server that
    honours it answers 412 for a file replaced since (same size, no validators with the
    body), and the read is a CorruptMember, never the new bytes (seeded FE8: the
    ``If-Match`` header not sent)."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from openwebtext.source.fetching import fetch
    from openwebtext.source.settings import FileInfo, Storage

    data = bytes(range(256)) * 8
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    st = path.stat()
    with RangeServer(tmp_path) as server:
        server.misbehave.validators = False  # only If-Match can tell another content
        url = f"{server.url}/f.bin"
        store = Storage()
        store.remember(url, FileInfo(len(data), f"ETag:{st.st_size:x}-{st.st_mtime_ns:x}"))
        assert fetch(url, 10, 20, storage=store) == data[10:20]
        assert server.refused_if_match == 0
        path.write_bytes(bytes(reversed(data)))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        with pytest.raises(CorruptMember, match="changed since it was indexed"):
            fetch(url, 10, 20, storage=store)
        assert server.refused_if_match >= 1


def test_a_whole_indexed_file_answered_200_is_read(tmp_path: Path) -> None:
    """A request for a whole indexed file answered with 200 (the whole file, what was asked)
    is a normal answer, above ``WHOLE_FILE_BYTES`` too (seeded FE4: ``whole = start == 0 and
    known is not None and end == known.size`` -> ``whole = False``: "the server ignores byte
    ranges")."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from openwebtext.source.fetching import WHOLE_FILE_BYTES, fetch
    from openwebtext.source.settings import FileInfo, Storage

    data = bytes(range(256)) * ((WHOLE_FILE_BYTES + (1 << 20)) // 256)
    (tmp_path / "big.bin").write_bytes(data)
    with RangeServer(tmp_path) as server:
        server.misbehave.ignore_range = True
        server.misbehave.validators = False
        url = f"{server.url}/big.bin"
        store = Storage()
        store.remember(url, FileInfo(len(data), "Last-Modified:x"))
        assert fetch(url, 0, len(data), storage=store) == data


# -- prepare: staging folders, the work folder, slices ------------------------------------------


def test_tidy_keeps_a_staging_folder_holding_a_progress_record(tmp_path: Path) -> None:
    """A staging folder holding the published run's finished files AND a progress record
    (another run's, to go on from) stays; one with no progress goes (seeded P7: ``published
    is None or (folder / PROGRESS).exists()`` -> ``published is None``)."""
    from openwebtext.prepare import PrepareOptions, prepare
    from openwebtext.prepare.config import run_config
    from openwebtext.prepare.run import tidy
    from openwebtext.prepare.workdir import PROGRESS
    from openwebtext.tokenizer import load_tokenizer

    corpus = Corpus.open(make_parts(tmp_path / "in", {"a": 20}, files=2)["a"])
    options = PrepareOptions(tokenizer="bytes", workers=0)
    config = run_config(corpus, options, load_tokenizer("bytes"))
    kept, gone = tmp_path / "kept", tmp_path / "gone"
    for folder in (kept, gone):
        prepare(corpus, folder, options)
    (kept / PROGRESS).write_text("{ another run's progress (damaged: kept by sweep) ")
    tidy(kept, config)
    tidy(gone, config)
    assert kept.is_dir(), "tidy removed a staging folder holding a progress record"
    assert sorted(p.name for p in kept.iterdir()) == sorted(
        [PROGRESS, "meta.json", "train.bin", "val.bin"]
    )
    assert not gone.exists()


def test_sweep_keeps_the_parts_beside_a_damaged_progress_record(tmp_path: Path) -> None:
    """A damaged progress record keeps the parts, for the run to refuse it by name (seeded
    W3: ``goes_on = damaged or (...)`` -> ``goes_on = (...)``, which removed the part)."""
    from openwebtext.prepare.workdir import PROGRESS, Workdir

    (tmp_path / ".train.bin.part").write_bytes(b"x" * 100)
    (tmp_path / PROGRESS).write_text("{ not a record")
    Workdir(tmp_path).sweep()
    assert sorted(os.listdir(tmp_path)) == sorted([PROGRESS, ".train.bin.part"])


def test_a_folder_holding_the_lock_file_is_untidy(tmp_path: Path) -> None:
    """Finished files and the lock file a killed run left: untidy (a run that finds its work
    done takes the lock and sweeps it) (seeded W8: ``name in (PROGRESS, LOCK)`` -> ``name in
    (PROGRESS,)``)."""
    from openwebtext.prepare.workdir import LOCK, untidy

    (tmp_path / "train.bin").write_bytes(b"")
    (tmp_path / "meta.json").write_text("{}")
    assert not untidy(tmp_path)
    (tmp_path / LOCK).write_text("")
    assert untidy(tmp_path)


def test_an_empty_slice_is_prepared(tmp_path: Path) -> None:
    """More shards than units: ``shard=(0, 4)`` of a corpus of 2 files is an empty slice,
    prepared as one (empty files, no document); the four slices hold every document once
    (seeded P1: ``0 <= start <= stop`` -> ``0 <= start < stop``: a ValueError)."""
    from openwebtext.prepare import PrepareOptions, prepare

    corpus = Corpus.open(make_parts(tmp_path / "in", {"a": 20}, files=2)["a"])
    options = PrepareOptions(tokenizer="bytes", workers=0)
    documents = []
    for k in range(4):
        out = tmp_path / f"slice{k}"
        report = prepare(corpus, out, options, shard=(k, 4))
        documents.append(sum(report.meta["counts"]["documents"].values()))
        if k == 0:
            assert (out / "train.bin").stat().st_size == 0
    assert documents[0] == 0 and sum(documents) == 20


# -- the PyTorch dataset's states ----------------------------------------------------------------


def test_a_state_loaded_after_load_resharded_goes_on_in_the_share_s_place(tmp_path: Path) -> None:
    """load_resharded, then load_state_dict(s): state_dict() is s, and the next pass starts
    after s, not at the resharded share (seeded T8: ``self._started()`` removed from
    load_state_dict)."""
    pytest.importorskip("torch")
    from openwebtext.torch import OpenWebTextDataset

    corpus = Corpus.open(make_parts(tmp_path, {"a": 30})["a"])

    def dataset() -> Any:
        return OpenWebTextDataset(corpus, workers=0, seed=1, epochs=None)

    it = iter(dataset())
    texts = [next(it).text for _ in range(6)]  # the documents in order
    it.close()
    ds = dataset()
    run = iter(ds)
    next(run)
    after_1 = ds.state_dict()
    for _ in range(3):
        next(run)
    after_4 = ds.state_dict()
    run.close()
    fresh = dataset()
    fresh.load_resharded([after_1])
    fresh.load_state_dict(after_4)
    assert fresh.state_dict() == after_4
    assert next(iter(fresh)).text == texts[4]


def test_a_state_loaded_while_a_pass_runs_is_the_state_dict(tmp_path: Path) -> None:
    """load_state_dict(s) while a pass is still running: state_dict() is s, where the next
    pass starts (seeded T7: ``self._running = None`` removed from load_state_dict)."""
    pytest.importorskip("torch")
    from openwebtext.torch import OpenWebTextDataset

    corpus = Corpus.open(make_parts(tmp_path, {"a": 30})["a"])
    ds = OpenWebTextDataset(corpus, workers=0, seed=1, epochs=None)
    it: Any = iter(ds)
    try:
        texts = [next(it).text for _ in range(3)]
        early = ds.state_dict()
        texts += [next(it).text for _ in range(2)]
        ds.load_state_dict(early)
        assert ds.state_dict() == early
        again: Any = iter(ds)  # (the first pass goes on meanwhile)
        try:
            assert next(again).text == texts[3]
        finally:
            again.close()
    finally:
        it.close()


# -- halts ---------------------------------------------------------------------------------------


def test_a_nested_halt_watching_gives_the_outer_halt_back() -> None:
    """After an inner ``Halt.watching`` block ends, the thread watches the outer halt again:
    setting it makes ``check_halt`` raise (seeded H3: ``_here.halt = before`` ->
    ``_here.halt = None``)."""
    outer, inner = Halt(), Halt()
    with outer.watching():
        with inner.watching():
            check_halt()
        outer.set()
        with pytest.raises(Halted):
            check_halt()
    check_halt()  # nothing watched any more
