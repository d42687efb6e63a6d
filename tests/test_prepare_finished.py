"""``owt tokenize`` / ``owt merge``: "finished" means this exact run finished (issue 19).

A folder holding another kind of run (a slice, a merge input), or a run of other options,
is never taken for this one's: it is redone, or refused when it holds the progress of
another run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, Progress, merge, outputs, prepare
from support import local_files, s3_objects


def _opts(**overrides: object) -> PrepareOptions:
    base: dict[str, object] = {"tokenizer": "bytes", "workers": 0, "val_fraction": 0.1}
    return PrepareOptions(**{**base, **overrides})  # type: ignore[arg-type]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


class _Stop(KeyboardInterrupt):
    pass


def _stop_after_first_unit(event: Progress) -> None:
    if event.phase == "tokenize" and event.done > 0:
        raise _Stop


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_a_slice_is_not_a_finished_whole_run(
    small_corpus: Path, tmp_path: Path, split: str
) -> None:
    corpus = Corpus.open(small_corpus)
    options = _opts(split_rule=split)
    whole = prepare(corpus, tmp_path / "whole", options)
    prepare(corpus, tmp_path / "x", options, shard=(0, 2))
    report = prepare(corpus, tmp_path / "x", options)
    assert not report.already
    assert report.meta == whole.meta
    assert _files(tmp_path / "x") == _files(tmp_path / "whole")  # no tokens.bin left behind
    # and back: the whole run's folder is not slice 1/2's
    again = prepare(corpus, tmp_path / "x", options, shard=(1, 2))
    assert not again.already and again.meta["config"]["slice"]["shard"] == {"index": 1, "count": 2}


@pytest.mark.parametrize(
    "change", [{"shuffle": False}, {"seed": 7}, {"val_seed": 1}, {"tokenizer": "gpt2"}]
)
def test_a_run_of_other_options_is_neither_finished_nor_resumed(
    small_corpus: Path, tmp_path: Path, change: dict[str, object]
) -> None:
    corpus = Corpus.open(small_corpus)
    prepare(corpus, tmp_path / "x", _opts())
    expected = prepare(corpus, tmp_path / "fresh", _opts(**change))
    report = prepare(corpus, tmp_path / "x", _opts(**change))
    assert not report.already and report.meta == expected.meta
    assert _files(tmp_path / "x") == _files(tmp_path / "fresh")
    # An interrupted run is not resumed under other options: refused, naming the option.
    with pytest.raises(_Stop):
        prepare(corpus, tmp_path / "cut", _opts(), progress=_stop_after_first_unit,
                checkpoint_seconds=0)  # fmt: skip
    with pytest.raises(PrepareError, match=f"different options: {next(iter(change))} "):
        prepare(corpus, tmp_path / "cut", _opts(**change))


def test_merge_into_one_of_its_slices_is_refused(small_corpus: Path, tmp_path: Path) -> None:
    corpus = Corpus.open(small_corpus)
    slices = [tmp_path / f"s{i}" for i in range(2)]
    for i, folder in enumerate(slices):
        prepare(corpus, folder, _opts(), shard=(i, 2))
    before = _files(slices[0])
    with pytest.raises(PrepareError, match="one of the slices being merged"):
        merge(slices, slices[0])
    with pytest.raises(PrepareError, match="one of the slices being merged"):
        merge(slices, tmp_path / "s1" / ".." / "s0")
    assert _files(slices[0]) == before


@pytest.mark.parametrize(
    ("inputs", "out"),
    [
        (["file://{d}/s0", "file://{d}/s1"], "{d}/s1"),
        (["{d}/s0", "{d}/s1"], "file://{d}/s1"),
        (["{d}/s0", "{d}/s1"], "file://{d}/s1/"),
        (["file://s0", "file://s1"], "s0"),  # fsspec: file://NAME is a path relative to cwd
        (["s0", "s1"], "local://s1"),
        (["file://{d}/s0", "file://{d}/s1"], "file://{d}/s2/../s0"),
    ],
)
def test_merge_into_one_of_its_slices_named_as_a_file_url_is_refused(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    inputs: list[str], out: str,
) -> None:  # fmt: skip
    """The refusal compared plain paths only: ``owt merge file://D/s0 file://D/s1 --out D/s1``
    overwrote slice s1 with the whole run (issue 31)."""
    corpus = Corpus.open(small_corpus)
    slices = [tmp_path / f"s{i}" for i in range(2)]
    for i, folder in enumerate(slices):
        prepare(corpus, folder, _opts(), shard=(i, 2))
    before = [_files(folder) for folder in slices]
    monkeypatch.chdir(tmp_path)
    named = [f.format(d=tmp_path) for f in inputs]
    with pytest.raises(PrepareError, match="one of the slices being merged"):
        merge(named, out.format(d=tmp_path))
    assert [_files(folder) for folder in slices] == before


def test_to_s3_a_slice_is_not_a_finished_run_nor_a_merge_target(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    options = _opts()
    url = "s3://owt/finished-x/"
    slices = ["s3://owt/finished-s0/", "s3://owt/finished-s1/"]
    try:
        prepare(corpus, url, options, shard=(0, 2))
        report = prepare(corpus, url, options)
        assert not report.already
        prepare(corpus, tmp_path / "local", options)
        assert s3_objects(s3_endpoint, "finished-x/") == local_files(tmp_path / "local")
        for i, slice_url in enumerate(slices):
            prepare(corpus, slice_url, options, shard=(i, 2))
        before = s3_objects(s3_endpoint, "finished-s0/")
        with pytest.raises(PrepareError, match="one of the slices being merged"):
            merge(slices, "s3://owt/finished-s0", storage=corpus.storage)
        assert s3_objects(s3_endpoint, "finished-s0/") == before
        shard = json.loads(before["meta.json"])["config"]["slice"]["shard"]
        assert shard == {"index": 0, "count": 2}
    finally:
        for u in [url, *slices]:
            outputs.remove(outputs.staging(u))
            outputs.remove(outputs.staging(u, "fetch"))


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_a_merge_refuses_an_unfinished_run_s_progress_but_restart(
    small_corpus: Path, tmp_path: Path, split: str
) -> None:
    """The progress of another run in ``out`` (an interrupted ``prepare`` of other options)
    is refused by a merge as by every run, unless ``restart``: a hash merge threw it away."""
    corpus = Corpus.open(small_corpus)
    options = _opts(split_rule=split)
    slices = [tmp_path / f"s{k}" for k in range(2)]
    for k, folder in enumerate(slices):
        prepare(corpus, folder, options, shard=(k, 2))
    with pytest.raises(_Stop):
        prepare(corpus, tmp_path / "x", _opts(split_rule=split, seed=7), checkpoint_seconds=0,
                progress=_stop_after_first_unit)  # fmt: skip
    before = _files(tmp_path / "x") | {".owt-progress.json": b""}
    with pytest.raises(PrepareError, match="holds the progress of a run of different options"):
        merge(slices, tmp_path / "x")
    assert (tmp_path / "x" / ".owt-progress.json").exists()
    assert set(_files(tmp_path / "x")) >= set(before) - {".owt-progress.json"}
    whole = prepare(corpus, tmp_path / "whole", options)
    assert merge(slices, tmp_path / "x", restart=True).meta == whole.meta
