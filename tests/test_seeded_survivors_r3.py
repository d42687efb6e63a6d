"""Behaviours a third mutation-testing round found unpinned: each test kills one or more seeded
single-point bugs that survived the suite (named in its docstring by their ids and edits).

A local file's identity (its size, an in-place rewrite keeping mtime and inode; the descriptor's
``fstat``, a rename over the path meanwhile; a token file's own identity at open), the default
storage's ``place`` after ``configure``, one token file opened as two corpora, a remote token
file remembered from two endpoints, a mixture's served counts, prepare's progress records and
their ``meta``, and a state's ``position.pass_end`` (the pass through a share repeating documents
after skips): edited, at the wrong place, or in a resharded rest."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, CorpusError, CorruptDocument, CorruptMember, Loader, StateError

isolated_storage = remote_servers.isolated_storage  # autouse: a fresh cache folder each test

DATA = Path(__file__).parent / "data"


def _line(text: str) -> str:
    return json.dumps({"text": text}) + "\n"


# --- a local file's identity -------------------------------------------------------------------


def test_an_in_place_rewrite_of_another_size_is_a_changed_file(tmp_path: Path) -> None:
    """A local file rewritten in place after it was indexed (another size, its mtime put back,
    its inode the same) is "the file changed since it was indexed" (a ``CorruptMember``), not
    a ``CorruptDocument`` blaming the data: its size is part of its identity.

    Kills S3 (``FileInfo.of_local`` noting size 0)."""
    path = tmp_path / "a.jsonl"
    path.write_text(_line("hello world") + _line("second"))
    corpus = Corpus.open(str(path))
    st = os.stat(path)
    with open(path, "r+") as f:
        f.seek(0)
        f.write(_line("HELLO there, world!!") + _line("2nd"))
        f.truncate()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert now.st_size != st.st_size
    with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
        list(Loader(corpus, workers=0, shuffle=False))
    assert not isinstance(caught.value, CorruptDocument)


def test_a_file_renamed_over_while_it_is_indexed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The identity ``Corpus.open`` notes for a local file is the one of the file it opened
    (its descriptor's ``fstat``): another file renamed over the path right after the open is
    "the file changed while it was indexed", not taken (and read as data it never indexed).

    Kills L2 (the identity from ``os.stat(path)`` instead of the descriptor's)."""
    import openwebtext.index.local as local

    path = tmp_path / "a.jsonl"
    path.write_text(_line("hello world"))
    real = local.os

    class Os:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def fstat(self, fd: int) -> os.stat_result:
            got = real.fstat(fd)
            new = tmp_path / "a.new"
            new.write_text(_line("NEW CONTENT, LONGER!"))
            real.replace(new, path)
            monkeypatch.setattr(local, "os", real)  # once
            return got

    monkeypatch.setattr(local, "os", Os())
    with pytest.raises(CorpusError, match="changed while it was indexed"):
        corpus = Corpus.open(str(path))
        list(Loader(corpus, workers=0, shuffle=False))


def test_a_token_file_rewritten_as_it_is_opened_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Corpus.open_tokens`` notes the ``.bin``'s own identity as it read it: the file
    rewritten (its size kept, another mtime) right after it was read at open is "the file
    changed while it was indexed", not read as ids it never indexed.

    Kills T4 (the ``.bin``'s identity not noted)."""
    import openwebtext.index.tokens as itok

    path = tmp_path / "train.bin"
    np.array([1, 2, 50256, 3, 4, 5, 50256], dtype="<u2").tofile(path)
    real = itok.opened

    def opened(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        np.array([9, 9, 9, 9, 50256, 7, 50256], dtype="<u2").tofile(path)
        os.utime(path, ns=(10**18, 10**18))
        return got

    monkeypatch.setattr(itok, "opened", opened)
    with pytest.raises(CorpusError, match="changed while it was indexed"):
        corpus = Corpus.open_tokens(str(path))
        list(Loader(corpus, workers=0, shuffle=False, tokenizer="bytes"))


# --- storage and token files -------------------------------------------------------------------


def test_configure_sets_the_place_of_the_default_storage_and_its_views() -> None:
    """After ``configure(options)``, the default storage and a view of it are placed where the
    new options point (``settings.place(options)``: what the member cache keys URLs by), not
    where the old ones did.

    Kills S11 (``configure`` no longer setting ``place``)."""
    from openwebtext.source import configure, resolve, settings

    options = {"endpoint_url": "http://127.0.0.1:1"}
    configure(options)
    want = settings.place(options)
    assert want != ""
    assert resolve(None).place == want
    assert resolve(None).view().place == want


def test_one_token_file_opened_as_two_corpora_reads_as_each(tmp_path: Path) -> None:
    """One unchanged ``.bin`` opened as two token corpora (uint16 ids ending in 0; uint32 ids
    ending in 4): each keeps its own cut: the first reads its three documents after the second
    was opened, the second holds one document of 4-byte ids.

    Kills O2 (``opened`` ignoring the ends indexed at open) and T3 (the token file not
    indexed at open): the second open's ends were taken for the first's."""
    path = tmp_path / "train.bin"
    np.array([1, 0, 3, 0, 4, 0], dtype="<u2").tofile(path)
    a = Corpus.open_tokens(str(path), eot=0, dtype="uint16")
    b = Corpus.open_tokens(str(path), eot=4, dtype="uint32")  # ids 1, 3, 4
    assert [u.member for u in a.units] == ["docs 0-3"]
    assert [u.member for u in b.units] == ["docs 0-1"]
    with Loader(a, workers=0, shuffle=False, tokenizer="bytes").iter() as it:
        assert [d.tokens.tolist() for d in it] == [[1, 0], [3, 0], [4, 0]]
    with pytest.raises(CorpusError, match="ids of 4 bytes, not the 2"):
        list(Loader(b, workers=0, shuffle=False, tokenizer="bytes"))


def test_a_url_remembered_from_two_endpoints_is_not_opened_without_one() -> None:
    """A remote token file's ends remembered from two endpoints, then ``opened(url)`` with no
    storage: which one is meant is not said, so it is refused ("read from several
    endpoints"), not the last one's taken.

    Kills O8 (the several-endpoints check off by one)."""
    from openwebtext.tokenfiles import TokenFileError, opened, remember
    from openwebtext.tokenfiles.common import TokenFile

    class Placed:  # a source.Storage-like: weakref-able, hashable
        def __init__(self, place: str) -> None:
            self.place = place

    a, b = Placed("endpoint-a"), Placed("endpoint-b")
    url = "https://example.invalid/r3-two-endpoints.bin"
    remember(url, TokenFile(url, np.zeros(4, "<u2"), np.array([2, 4])), a)
    remember(url, TokenFile(url, np.zeros(4, "<u2"), np.array([1, 4])), b)
    with pytest.raises(TokenFileError, match="read from several endpoints"):
        opened(url)


# --- a mixture's served counts ----------------------------------------------------------------


def test_a_part_more_than_one_document_ahead_of_its_share_is_refused() -> None:
    """A mixture state stratified by documents, weights ½ and ½, that served [2, 5]: the second
    part is 1.5 documents ahead of its share (more than the one a stratified draw allows), so
    the state is refused naming ``served``; [2, 4] (one ahead) is taken.

    Kills SC8 (the tolerance one document more)."""
    from openwebtext.stream.schema import MixtureState

    state = json.loads((DATA / "states-2.json").read_text())["mixture"]
    state["config"]["by"] = "documents"
    assert state["weights"] == [0.5, 0.5]
    state["served"] = [2, 4]
    MixtureState.from_json(state)
    state["served"] = [2, 5]
    with pytest.raises(StateError, match="served") as caught:
        MixtureState.from_json(state)
    assert caught.value.field == "served"


# --- prepare's progress records ---------------------------------------------------------------


def _meta() -> Any:
    from openwebtext import codec
    from openwebtext.prepare.state import Meta

    golden = json.loads((DATA / "prepare-2.json").read_text())
    return codec.decode(golden["meta_hash"], Meta)


@pytest.mark.parametrize("phase", ["commit", "permute"])
def test_a_progress_record_whose_meta_says_another_run_is_refused(phase: str) -> None:
    """A progress record carrying a ``meta`` that says other counts, or another seed, than the
    record's own is refused naming ``meta``, in phase ``commit`` and in phase ``permute``
    alike (the meta is what the commit publishes); the meta's own config and counts are taken.

    Kills PR1 (the counts not compared), PR2 (the seed not compared) and PR4 (the meta
    compared in phase commit only)."""
    from openwebtext import codec
    from openwebtext.prepare.state import ProgressRecord

    meta = _meta()
    ProgressRecord(meta.config, phase, meta.counts, meta=meta)
    documents = meta.counts.documents
    counts = codec.replace(meta.counts, documents={**documents, "train": documents["train"] + 1})
    other = codec.replace(meta.config, seed=(meta.config.seed or 0) + 1)
    for config, said in ((meta.config, counts), (other, meta.counts)):
        with pytest.raises(codec.Disagree, match="field `meta` must say the record's config"):
            ProgressRecord(config, phase, said, meta=meta)


def test_a_record_with_bad_skips_and_a_meta_names_its_counts() -> None:
    """A commit record whose counts say skips under ``on_error="raise"`` (so its meta, built
    from good counts, disagrees too) is refused naming ``counts`` (the skips checked first,
    whenever the meta does not say the record), not ``meta``.

    Kills PR3 (the skips checked only when there is no meta)."""
    from openwebtext import codec
    from openwebtext.prepare.state import ProgressRecord

    meta = _meta()
    assert meta.config.on_error == "raise"
    bad = codec.replace(meta.counts, skipped_documents=meta.counts.skipped_documents + 1)
    with pytest.raises(codec.Disagree, match="field `counts` say 1 skips"):
        ProgressRecord(meta.config, "commit", bad, meta=meta)


# --- a state's pass_end -----------------------------------------------------------------------


def _edited(state: Any, in_block: int, pass_end: int | None) -> Any:
    """``state`` with its position's ``in_block`` (its documents handed out moved with it) and
    ``pass_end`` (None: none) edited."""
    out = json.loads(json.dumps(state))
    at, counters = out["position"], out["counters"]
    moved = in_block - at["in_block"]
    at["in_block"] = in_block
    counters["epoch_documents"] = counters.get("epoch_documents", 0) + moved
    counters["documents"] = counters.get("documents", 0) + moved
    if pass_end is None:
        at.pop("pass_end", None)
    else:
        at["pass_end"] = pass_end
    return out


def _outcome(corpus: Corpus, options: dict[str, Any], state: Any) -> str:
    try:
        Loader(corpus, **options).iter(state=state).close()
    except StateError as e:
        return f"refused {e.field}"
    return "taken"


def test_edited_pass_ends_are_refused_or_taken_where_the_share_says(tmp_path: Path) -> None:
    """Rank 0 of 2 (``even="drop"``, not shuffled, its share's first six documents bad, so
    passes repeating its start follow its end, at block 5): each of its states, given another
    ``pass_end`` (its ``in_block`` edited with its documents handed), is refused naming
    ``position.pass_end`` or taken as its share decides. Refused: a pass_end on a state in no
    repeating pass (block 2), one before the earliest end the documents still due allow
    (block 5, in_block 1: 6), one before its position (block 7: 6), one at its block with
    documents handed in it (block 8, in_block 1: 8), and, its target of 24 all handed out
    (block 7, in_block 4), one past its lap's end (11). Taken: the real one (block 7,
    in_block 3: 8) and, the target all handed out, a later one within the lap (9).

    Kills A4 (a pass_end outside a repeating pass taken), A5 (the most one more), A6 (a
    state with all its target handed bounded as one still handing), A8 and A10 (the least end
    not checked, or one less), SC1 (``Position.check`` ignoring ``in_block``) and SC2
    (``Position.check`` removed)."""
    import test_repeat_pass_resume as T

    case = T.Case(2, "drop", False, "start")
    layout = T._layout(tmp_path, case)
    options = {**T._options(case, 0, 2, 1), "shuffle_buffer": 2}
    _, states, _ = T._run(layout, options)

    def got(k: int, in_block: int, pass_end: int) -> str:
        return _outcome(layout.corpus, options, _edited(states[k], in_block, pass_end))

    assert [states[k]["position"] for k in (2, 18, 20, 23, 24)] == [
        {"epoch": 0, "block": 2, "in_block": 0},
        {"epoch": 0, "block": 5, "in_block": 0},
        {"epoch": 0, "block": 7, "in_block": 0, "pass_end": 7},
        {"epoch": 0, "block": 7, "in_block": 3, "pass_end": 8},
        {"epoch": 0, "block": 8, "in_block": 0, "pass_end": 8},
    ]
    refused = "refused position.pass_end"
    assert got(23, 3, 8) == "taken"  # the real one
    assert got(2, 0, 2) == refused  # A4: in no repeating pass
    assert got(23, 4, 11) == refused  # A5: past its lap's end, the target all handed out
    assert got(23, 4, 9) == "taken"  # A6: within its lap, the target all handed out
    assert got(18, 1, 6) == refused  # A8, A10: before the least
    assert got(24, 1, 8) == refused  # SC1: at its block, documents handed in it
    assert got(20, 0, 6) == refused  # SC2: before its position


def test_a_pass_end_cutting_its_block_below_in_block_is_refused() -> None:
    """``check_pass_end``: a pass through plan position 13 of a share of six (documents
    [4, 3, 4, 4, 3, 1], blocks of 5 at least, target 19) ending at 14 cuts the block there to
    the 3 documents of position 13 % 6: a state at in_block 4 in it (16 handed) is refused
    naming ``position.pass_end``; at in_block 3 (15 handed) it is taken. (The state is a
    stand-in holding what the check reads: its position and counters.)

    Kills A13 (the in_block check one more)."""
    from types import SimpleNamespace

    from openwebtext.stream.passes import check_pass_end

    def state(in_block: int, handed: int) -> Any:
        position = SimpleNamespace(epoch=0, block=13, in_block=in_block, pass_end=14)
        counters = SimpleNamespace(epoch_documents=handed, skips=1)
        return SimpleNamespace(position=position, counters=counters)

    counts = [4, 3, 4, 4, 3, 1]
    check_pass_end(counts, 5, 19, state(3, 15))  # type: ignore[arg-type]
    with pytest.raises(StateError, match="cuts the block at block=13 to 3 documents") as caught:
        check_pass_end(counts, 5, 19, state(4, 16))  # type: ignore[arg-type]
    assert caught.value.field == "position.pass_end"


def test_a_pass_end_on_a_state_that_handed_out_nothing_names_it(tmp_path: Path) -> None:
    """A state inside a repeating pass (rank 1 of 2, ``even="drop"``) edited to say it handed
    out no document of its epoch, its ``pass_end`` kept: no pass repeats documents before any
    was handed out, so the record alone is refused naming ``position.pass_end`` (not
    ``position``), and so is the Loader given it.

    Kills SC3 (a pass_end with nothing handed out not checked at the record)."""
    import test_repeat_pass_resume as T
    from openwebtext.stream.schema import DocumentState

    layout, options, states, _ = T._state_inside(tmp_path)
    inside = [s for s in states if T._inside(s) and s["position"]["epoch"] == 0
              and s["position"]["pass_end"] > s["position"]["block"]]  # fmt: skip
    zero = json.loads(json.dumps(inside[0]))
    zero["counters"]["epoch_documents"] = zero["counters"]["documents"] = 0
    with pytest.raises(StateError) as caught:
        DocumentState.from_json(zero)
    assert caught.value.field == "position.pass_end"
    assert T._refused(layout, options, zero).field == "position.pass_end"


def test_a_rest_given_a_pass_end_is_refused_at_entry(tmp_path: Path) -> None:
    """A resharded rest (rank 1 of 2's end and a state of its run, resharded to 2 with
    ``even="drop"``) is read in no repeating pass: each of its later states that handed out
    documents with skips counted, given a ``pass_end``, is refused naming
    ``position.pass_end`` by the record alone and by the Loader at entry (not taken, to fail
    mid-run when a position is written).

    Kills SC5 (a pass_end in a rest not checked at the record)."""
    import test_repeat_pass_resume as T
    from openwebtext import reshard
    from openwebtext.stream.schema import DocumentState

    layout, options, _, _ = T._state_inside(tmp_path)
    first = T._run(layout, {**options, "rank": 0, "epochs": 1})[1]
    own = T._run(layout, {**options, "epochs": 1})[1]
    tried = 0
    for k in range(1, len(own), 3):
        for rank, rest in enumerate(reshard([first[-1], own[k]], 2, even="drop")):
            opts = {**options, "rank": rank, "epochs": 1}
            after = T._run(layout, opts, json.loads(json.dumps(rest)))[1]
            for s in after[1:]:
                c = s["counters"]
                if not (c.get("epoch_documents")
                        and (c.get("skipped_documents") or c.get("skipped_members"))):  # fmt: skip
                    continue
                edited = json.loads(json.dumps(s))
                edited["position"]["pass_end"] = edited["position"]["block"] + 1
                with pytest.raises(StateError) as caught:
                    DocumentState.from_json(edited)
                assert caught.value.field == "position.pass_end"
                assert T._refused(layout, opts, edited).field == "position.pass_end"
                tried += 1
    assert tried >= 5


def test_a_resharded_rest_s_last_block_cut_by_the_target_ends_its_state(tmp_path: Path) -> None:
    """A rest (ranks of 2 at their fourth state, ``even="drop"``, shuffled, bad documents
    mid-share, resharded to 3: rank 1's) whose target is reached in a pass repeating its start:
    its state after the last document is in the block the target cuts, ``in_block`` its
    repeated documents handed out there (where the target cuts the block), and its
    skips those of the units its first documents came from (one JSON-lines file a unit), as
    the run's stats: the pass repeating the share reads them again, not counted again (session
    30; the stats counted the cut block's units' bad documents twice).

    Kills ST6 (the block's length its slots to the stop: the state one slot further, the
    cut block's skip counted)."""
    import test_repeat_pass_resume as T
    from openwebtext import reshard

    case = T.Case(2, "drop", True, "middle")
    layout = T._layout(tmp_path, case)
    runs = [T._run(layout, {**T._options(case, r, 2, 1), "shuffle_buffer": 4})[1]
            for r in range(2)]  # fmt: skip
    rest = reshard([s[min(3, len(s) - 1)] for s in runs], 3, even=case.even)[1]
    options = {**T._options(case, 1, 3, 1), "shuffle_buffer": 4}
    docs, states, stats = T._run(layout, options, json.loads(json.dumps(rest)))
    repeated = stats["repeated_documents"]
    first, again = docs[: len(docs) - repeated], docs[len(docs) - repeated :]
    assert repeated > 0 and set(again) <= set(first)

    def bad_of(names: list[str]) -> int:  # the bad documents of the units of ``names``
        return sum(1 for d in layout.bad if d[0] in {n[0] for n in names})

    assert bad_of(again) > 0  # the cut block holds a bad document
    assert stats["skipped_documents"] == bad_of(first)
    last = states[-1]
    assert last["position"] == {"epoch": 0, "block": 0, "in_block": repeated}
    assert last["counters"]["skipped_documents"] == bad_of(first)
