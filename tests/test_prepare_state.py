"""``prepare.state`` (format ``openwebtext-prepare/2``): every record round-trips through the
codec (Hypothesis), this code writes the golden records of ``tests/data/prepare-2.json`` (a
meta.json of each kind of run, a progress record of each phase: changing them breaks every
folder a run left behind), and any damaged field at any depth of a config, a meta.json or a
progress record is one ``StateError`` naming its path."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext import Corpus, StateError, codec
from openwebtext.codec import Disagree
from openwebtext.plan import shard_range
from openwebtext.prepare import PrepareOptions, Progress, merge, prepare
from openwebtext.prepare.state import (
    FORMAT,
    LENGTH,
    Counts,
    FileInfo,
    FormatPass,
    Marker,
    Meta,
    PerFile,
    Phase,
    Piece,
    ProgressRecord,
    RunConfig,
    Shard,
    Slice,
)
from openwebtext.prepare.workdir import PROGRESS, SEAL, Workdir
from records import changed, check_one_error, mutants

HERE = Path(__file__).parent
GOLDEN_PATH = HERE / "data" / "prepare-2.json"
GOLDEN: dict[str, dict[str, Any]] = json.loads(GOLDEN_PATH.read_text())
METAS = sorted(k for k in GOLDEN if k.startswith("meta"))
PROGRESSES = sorted(k for k in GOLDEN if k.startswith("progress"))
#: Configs of every shape: a whole run, a shard, a merge's (with the slices it reads).
CONFIGS = {"hash": GOLDEN["meta_hash"]["config"],
           "nanogpt_slice": GOLDEN["meta_nanogpt_slice"]["config"],
           "merge": GOLDEN["progress_merge_permute"]["config"]}  # fmt: skip


def parse(kind: str, body: Any) -> Any:
    """``body`` as the record of golden ``kind`` (``config_…`` entries: a bare config)."""
    if kind.startswith("meta"):
        return Meta.from_json(body)
    if kind.startswith("progress"):
        return ProgressRecord.from_json(body)
    return codec.decode(body, RunConfig, "config")


# -- the golden records of format 2 --------------------------------------------------------


class _Stop(KeyboardInterrupt):
    pass


def _stop_at(phase: str, done: int = 0) -> Any:
    def progress(event: Progress) -> None:
        if event.phase == phase and event.done > done:
            raise _Stop

    return progress


def _options(rule: str) -> PrepareOptions:
    return PrepareOptions(split_rule=rule, tokenizer="gpt2", workers=0, val_fraction=0.25)  # type: ignore[arg-type]


def _record(folder: Path) -> dict[str, Any]:
    """A progress record's fields (its seal, a hash of them, left out: it is of the folders
    of a merge's slices, which are made anew each time)."""
    body: dict[str, Any] = json.loads((folder / PROGRESS).read_text())
    body.pop(SEAL)
    return body


def written_now(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The records of ``tests/data/prepare-2.json``, made the same way with this code, on the
    corpus of ``tests/fixtures/prepare-2``."""
    corpus = Corpus.open(shutil.copytree(HERE / "fixtures" / "prepare-2" / "corpus", tmp / "c"))
    out: dict[str, Any] = {}
    for rule in ("hash", "nanogpt"):
        out[f"meta_{rule}"] = prepare(corpus, tmp / rule, _options(rule)).meta
        piece = prepare(corpus, tmp / f"{rule}-slice", _options(rule), shard=(1, 2))
        out[f"meta_{rule}_slice"] = piece.meta
    with pytest.raises(_Stop):  # after the first unit's checkpoint
        prepare(corpus, tmp / "t", _options("hash"), progress=_stop_at("tokenize"),
                checkpoint_seconds=0)  # fmt: skip
    out["progress_hash_tokenize"] = _record(tmp / "t")
    with pytest.raises(_Stop):  # the val documents copied
        prepare(corpus, tmp / "p", _options("nanogpt"), progress=_stop_at("permute"))
    out["progress_nanogpt_permute"] = _record(tmp / "p")
    slices = [tmp / "s0", tmp / "s1"]
    for i, folder in enumerate(slices):
        prepare(corpus, folder, _options("nanogpt"), shard=(i, 2))
    with pytest.raises(_Stop):
        merge(slices, tmp / "m", progress=_stop_at("permute"))
    out["progress_merge_permute"] = json.loads(
        json.dumps(_record(tmp / "m")).replace(str(tmp.resolve()), "{SLICES}")
    )
    write_json = Workdir.write_json

    def cut_before_meta(self: Workdir, name: str, body: dict[str, Any]) -> None:
        if name == "meta.json":
            raise _Stop
        write_json(self, name, body)

    monkeypatch.setattr(Workdir, "write_json", cut_before_meta)
    with pytest.raises(_Stop):
        prepare(corpus, tmp / "c2", _options("nanogpt"))
    out["progress_nanogpt_commit"] = _record(tmp / "c2")
    return out


def test_this_code_writes_the_golden_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OWT_WRITE_GOLDEN=1`` writes them anew: only with a new prepare format."""
    now = written_now(tmp_path, monkeypatch)
    if os.environ.get("OWT_WRITE_GOLDEN") == "1":
        GOLDEN_PATH.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    assert now == GOLDEN


def test_the_golden_records_are_of_every_kind() -> None:
    assert [GOLDEN[k]["phase"] for k in PROGRESSES] == ["tokenize", "permute", "commit", "permute"]
    assert GOLDEN["progress_nanogpt_commit"]["meta"] == GOLDEN["meta_nanogpt"]
    assert sorted(GOLDEN["meta_nanogpt_slice"]["files"]) == ["lengths.bin", "tokens.bin"]
    assert {GOLDEN[k]["format"] for k in GOLDEN} == {FORMAT}


@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_a_golden_record_round_trips(kind: str) -> None:
    body = GOLDEN[kind]
    assert codec.encode(parse(kind, body)) == body


# -- every record round-trips -----------------------------------------------------------------

counts_ = st.integers(0, 2**40)
sha256s = st.text("0123456789abcdef", min_size=64, max_size=64)
file_infos = st.builds(FileInfo, counts_, sha256s)
NAMES = ("train.bin", "val.bin", "tokens.bin", "lengths.bin")


def per_file(values: st.SearchStrategy[Any]) -> st.SearchStrategy[PerFile[Any]]:
    return st.dictionaries(st.sampled_from(NAMES), values)


@st.composite
def slices(draw: st.DrawFn, units: int) -> Slice:
    if draw(st.booleans()):
        count = draw(st.integers(1, 64))
        index = draw(st.integers(0, count - 1))
        return Slice(*shard_range(units, index, count), Shard(index, count))
    start = draw(st.integers(0, units))
    return Slice(start, draw(st.integers(start, units)))


@st.composite
def configs(draw: st.DrawFn, kind: str | None = None) -> RunConfig:
    """Any config; ``kind``: "whole" (no slice), "slice", or None (either, or a merge's)."""
    rule = draw(st.sampled_from(["hash", "nanogpt"]))
    units = draw(st.integers(0, 30_000))
    piece = None
    if kind == "slice" or (kind is None and draw(st.booleans())):
        piece = draw(slices(units))
    hashed = rule == "hash"
    merge_of = None
    if kind is None and draw(st.booleans()):
        pieces = st.builds(Piece, st.text(max_size=20), per_file(file_infos))
        merge_of = tuple(draw(st.lists(pieces, max_size=3)))
    n_vocab = draw(st.integers(1, 2**20))
    return RunConfig(
        split_rule=rule,  # type: ignore[arg-type]
        corpus=draw(st.text("0123456789abcdef", min_size=16, max_size=16)),
        units=units,
        tokenizer=draw(st.sampled_from(["gpt2", "bytes", "hf:gpt2", "tiktoken:cl100k_base"])),
        fingerprint=draw(st.text(max_size=16)),
        dtype=draw(st.sampled_from(["uint16", "uint32", "int32", "int64"])),
        eot=draw(st.integers(0, n_vocab - 1)),
        n_vocab=n_vocab,
        val_fraction=draw(st.floats(0, 1, exclude_min=True, exclude_max=True)),
        val_seed=draw(counts_),
        on_error=draw(st.sampled_from(["raise", "skip", "warn"])),  # type: ignore[arg-type]
        take=draw(st.none() | counts_),
        seed=draw(counts_) if hashed else None,
        shuffle=draw(st.booleans()) if hashed else None,
        slice=piece,
        merge_of=merge_of,
    )


def _counts(draw: st.DrawFn, splits: tuple[str, ...], config: RunConfig) -> Counts:
    """Counts of ``splits``: each split's documents at most its ids (one each at least), no
    skip under ``on_error="raise"``."""
    documents = draw(st.fixed_dictionaries(dict.fromkeys(splits, counts_)))
    tokens = {k: n + draw(counts_) for k, n in documents.items()}
    skips = st.just(0) if config.on_error == "raise" else counts_
    return Counts(*(draw(skips) for _ in range(4)), documents, tokens)


@st.composite
def metas(draw: st.DrawFn) -> Meta:
    """A meta.json as a run writes it: its kind's files, their bytes its counts' items."""
    config = draw(configs(kind=draw(st.sampled_from(["whole", "slice"]))))
    counts = _counts(draw, config.splits(), config)
    tokens, documents = counts.tokens, counts.documents
    itemsize = np.dtype(config.dtype).itemsize
    if config.splits() == ("all",):
        sizes = {"tokens.bin": tokens["all"] * itemsize,
                 "lengths.bin": documents["all"] * LENGTH.itemsize}  # fmt: skip
    else:
        sizes = {f"{s}.bin": tokens[s] * itemsize for s in ("train", "val")}
    return Meta(
        config, counts, {n: FileInfo(b, draw(sha256s)) for n, b in sizes.items()}
    )


@st.composite
def records(draw: st.DrawFn) -> ProgressRecord:
    phase = draw(st.sampled_from(get_args(Phase)))
    meta = draw(st.none() | metas()) if phase != "commit" else draw(metas())
    splits = draw(st.sampled_from([("train", "val"), ("all",), ("train",)]))
    config = draw(configs())
    counts = _counts(draw, splits, config)
    if meta is not None:  # (what the commit publishes: the record's config and counts)
        config, counts = meta.config, meta.counts
    position = draw(counts_)  # tokenize: a unit position of the run; permute: a document's
    if phase == "tokenize":
        last = config.units if config.slice is None else config.slice.stop
        position = draw(st.integers(config.first, last))
    elif phase == "permute":
        position = draw(st.integers(0, sum(counts.documents.values())))
    return ProgressRecord(config, phase, counts, position, draw(per_file(counts_)), meta)


def _through_json(record: Any) -> Any:
    return json.loads(json.dumps(codec.encode(record), indent=1, sort_keys=True))


@given(configs())
def test_a_config_round_trips(config: RunConfig) -> None:
    assert codec.decode(_through_json(config), RunConfig) == config


@given(metas())
def test_a_meta_round_trips(meta: Meta) -> None:
    body = _through_json(meta)
    assert Meta.from_json(body) == meta
    assert codec.encode(Meta.from_json(body)) == body  # its JSON is stable


@given(records())
def test_a_progress_record_round_trips(record: ProgressRecord) -> None:
    body = _through_json(record)
    assert ProgressRecord.from_json(body) == record
    assert codec.encode(ProgressRecord.from_json(body)) == body


# -- a damaged field, at any depth, is one error naming its path ---------------------------


@pytest.mark.parametrize("kind", sorted(CONFIGS))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_damaged_config_field_is_one_error_naming_it(kind: str, data: Any) -> None:
    check_one_error(lambda body: parse("config", body), data.draw(mutants(CONFIGS[kind])))


@pytest.mark.parametrize("kind", METAS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_damaged_meta_json_field_is_one_error_naming_it(kind: str, data: Any) -> None:
    check_one_error(lambda body: parse(kind, body), data.draw(mutants(GOLDEN[kind])))


@pytest.mark.parametrize("kind", PROGRESSES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_damaged_progress_field_is_one_error_naming_it(kind: str, data: Any) -> None:
    check_one_error(lambda body: parse(kind, body), data.draw(mutants(GOLDEN[kind])))


#: A format pass's marker (``llmc.json``) as ``write_format`` writes it.
MARKER = {
    "format": "llmc",
    "source": {"train.bin": "a" * 64, "val.bin": "b" * 64, "shard_tokens": 100_000_000},
    "files": {"train_000000.bin": {"bytes": 1024, "sha256": "c" * 64}},
}


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_damaged_marker_field_is_one_error_naming_it(data: Any) -> None:
    """A marker's and a pass's record's ``source`` is a record too: each file's sha256 and the
    shard size checked (it was a dict of any strings and ints: ``shard_tokens`` a string or
    -1, a file's sha256 a number, an unknown key, were all taken)."""
    check_one_error(Marker.from_json, data.draw(mutants(MARKER)))
    record = {key: value for key, value in MARKER.items() if key != "format"}
    check_one_error(FormatPass.from_json, data.draw(mutants(record)))


@pytest.mark.parametrize(
    ("kind", "keys", "value", "message"),
    [
        ("meta_hash", ("config", "seed"), None, r"config\.seed: is needed by the hash rule"),
        ("meta_nanogpt", ("config", "seed"), 0, r"config\.seed: is hash's only"),
        ("meta_hash", ("config", "eot"), 50257, r"config\.eot: is 50257, not below n_vocab"),
        ("meta_hash_slice", ("config", "slice", "stop"), 9, r"config\.slice: \[2, 9\) is not wi"),
        ("meta_hash_slice", ("config", "slice", "start"), 1, r"slice: \[1, 4\) is not shard 1/2"),
        ("meta_hash_slice", ("config", "slice", "start"), 5, r"slice\.stop: is 4, before start 5"),
        ("meta_hash_slice", ("config", "slice", "shard", "index"), 2, r"shard\.index: is 2, not"),
        ("meta_hash", ("files", "val.bin", "bytes"), 2, r"files\.val\.bin\.bytes: is 2, not"),
        ("meta_hash", ("counts", "documents", "all"), 2, r"counts\.tokens: must count the same"),
        ("meta_nanogpt", ("files", "tokens.bin"), GOLDEN["meta_hash"]["files"]["val.bin"],
         r"files: must be train\.bin and val\.bin, not \['train\.bin', 'val\.bin', 'tokens"),
        ("meta_nanogpt", ("config", "merge_of"), [], r"config\.merge_of: is a merge's progress"),
        ("progress_nanogpt_commit", ("meta",), None, r"meta: is needed in phase commit"),
        ("progress_hash_tokenize", ("format",), "openwebtext-prepare/1", r"format: not 'openw"),
    ],
)  # fmt: skip
def test_fields_that_disagree_are_named(
    kind: str, keys: tuple[str, ...], value: Any, message: str
) -> None:
    with pytest.raises(StateError, match=message) as caught:
        parse(kind, changed(GOLDEN[kind], keys, value))
    assert caught.value.field is not None and caught.value.field in str(caught.value)


def test_a_record_built_by_code_is_checked_too() -> None:
    meta = parse("meta_hash", GOLDEN["meta_hash"])
    with pytest.raises(Disagree, match=r"files\.train\.bin\.bytes"):
        codec.replace(meta, counts=meta.counts.add("train", 0, 1))
    with pytest.raises(Disagree, match="meta"):
        ProgressRecord(meta.config, "commit", meta.counts)


def test_counts_are_replaced_never_changed() -> None:
    counts = Counts.new(("train", "val"), files=2)
    more = counts.add("val", 3, 40).plus(partial_members=1)
    assert counts == Counts.new(("train", "val"), files=2)  # as it was
    assert more.documents == {"train": 0, "val": 3} and more.tokens["val"] == 40
    assert (more.skips, more.partial_members) == (3, 1)
    with pytest.raises(AttributeError):
        more.skipped_files = 0  # type: ignore[misc]


def test_what_is_not_a_record_is_said() -> None:
    with pytest.raises(StateError, match=r"the record: Expected `object`, got `array`"):
        ProgressRecord.from_json([])
    with pytest.raises(StateError, match=r"^bad meta.json: format: not 'openwebtext-prepare/2'"):
        Meta.from_json({"format": "openwebtext-prepare/1"})


@pytest.mark.parametrize(
    ("kind", "edit", "message"),
    [
        ("progress_nanogpt_commit", lambda r: r["meta"]["config"].update(eot=5), "meta: must say"),
        ("progress_nanogpt_commit", lambda r: r["meta"]["config"].update(val_seed=0), "meta: must"),
        ("progress_nanogpt_commit", lambda r: r["meta"]["counts"].update(skipped_documents=1),
         "counts: say 1 skips"),  # (the meta's own counts say a skip under raise)
        ("progress_hash_tokenize", lambda r: r["counts"].update(skipped_members=1),
         "counts: say 1 skips, under on_error='raise'"),
        ("meta_hash", lambda r: r["counts"].update(partial_members=2), "counts: say 2 skips"),
    ],
)  # fmt: skip
def test_an_edited_record_is_refused_before_it_is_published(
    kind: str, edit: Any, message: str
) -> None:
    """A commit-phase record's ``meta`` edited (its ``eot``, ``val_seed``) was published as the
    run's ``meta.json``; skips counted under ``on_error="raise"`` (which skips nothing) were
    taken into it."""
    record = json.loads(json.dumps(GOLDEN[kind]))
    edit(record)
    with pytest.raises(StateError, match=message):
        codec.decode(record, ProgressRecord if kind.startswith("progress") else Meta)


def test_a_record_at_its_first_unit_with_documents_counted_is_refused() -> None:
    """``position`` edited back to the run's first unit: the run tokenized its units again,
    and ``train.bin`` held them twice."""
    record = json.loads(json.dumps(GOLDEN["progress_hash_tokenize"]))
    record["position"] = 0
    parsed = codec.decode(record, ProgressRecord)
    with pytest.raises(StateError, match="position: is 0, the run's first unit") as caught:
        parsed.check_parts()
    assert caught.value.field == "position"
