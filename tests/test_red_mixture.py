"""A red team of ``openwebtext.Mixture`` (issue 39's promise on the newest input kind): bad
input in a part is an error naming its file (or part), or a counted skip under an explicit
skip policy; never a silent loss, a hang or a deep traceback. The tests after "Defects found
here" each failed before its fix (in the mixture's files, landed with them)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, CorpusError, Loader, Mixture, StateError, TooManyErrors, ahead
from support import corrupt_member, outer_tar, run_owt, sample_docs, xz_member
from tables_support import jsonl_bytes, sample_texts, write_jsonl, write_parquet

LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize 123456\n" % (b"0" * 64)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """js: 30 JSON lines; lfs: a parquet folder whose second file is a Git LFS pointer (20
    rows beside it); zst: 20 JSON lines beside a ``.jsonl.zst`` cut in half."""
    zstandard = pytest.importorskip("zstandard")
    root = tmp_path_factory.mktemp("red-mix")
    write_jsonl(root / "js" / "a.jsonl", sample_texts(30, seed=2))
    write_parquet(root / "lfs" / "train-00000-of-00002.parquet", sample_texts(20, seed=3))
    (root / "lfs" / "train-00001-of-00002.parquet").write_bytes(LFS)
    write_jsonl(root / "zst" / "a.jsonl", sample_texts(20, seed=4))
    whole = zstandard.ZstdCompressor().compress(jsonl_bytes(sample_texts(40, seed=5)))
    (root / "zst" / "b.jsonl.zst").write_bytes(whole[: len(whole) // 2])
    return {name: root / name for name in ("js", "lfs", "zst")}


def read(mixture: Mixture, **options: Any) -> tuple[list[Any], Any]:
    with Loader(mixture, **{"workers": 0, "seed": 0, **options}).iter() as it:
        return list(it), it.stats


# What holds -----------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_truncated_zstd_part_is_named_or_counted_in_its_part(
    parts: dict[str, Path], workers: int
) -> None:
    from openwebtext import TruncatedMember

    mixture = Mixture({"cut": str(parts["zst"]), "js": str(parts["js"])})
    with pytest.raises(TruncatedMember) as raised:
        read(mixture, workers=workers)
    assert raised.value.path == str(parts["zst"] / "b.jsonl.zst")
    documents, stats = read(mixture, workers=workers, on_error="skip")
    assert stats.parts["cut"].partial_members >= 1 and stats.parts["js"].partial_members == 0
    assert stats.partial_members == stats.parts["cut"].partial_members
    assert len({d.name for d in documents if d.source == "js"}) == 30


def test_a_token_part_and_a_text_part_mix_by_tokens(parts: dict[str, Path], tmp_path: Path) -> None:
    """A token corpus (ids as written, never tokenized again) beside a text corpus tokenized
    as it is read: each document from its part, with its own ids."""
    ids = np.array([1, 2, 256, 3, 256, 4, 5, 6, 256], "<u2")
    ids.tofile(tmp_path / "train.bin")
    tokens = Corpus.open_tokens(tmp_path / "train.bin", eot=256)
    mixture = Mixture({"tok": tokens, "js": str(parts["js"])}, by="tokens")
    with Loader(mixture, workers=0, seed=0, tokenizer="bytes", take=40).iter() as it:
        documents = list(it)
    mine = sorted(d.tokens.tolist() for d in documents if d.source == "tok")
    assert {tuple(t) for t in mine} <= {(1, 2, 256), (3, 256), (4, 5, 6, 256)}
    assert len(mine) >= 3
    texts = [d for d in documents if d.source == "js"]
    assert texts and all(int(d.tokens[-1]) == 256 for d in texts)


@pytest.mark.parametrize("how", ["symlink", "hard link", "folder symlink", "train.ds"])
def test_one_file_reached_by_two_names_is_refused(
    parts: dict[str, Path], tmp_path: Path, how: str
) -> None:
    js = parts["js"] / "a.jsonl"
    if how == "symlink":
        (tmp_path / "b.jsonl").symlink_to(js)
        other: Any = str(tmp_path / "b.jsonl")
    elif how == "hard link":
        os.link(js, tmp_path / "b.jsonl")
        other = str(tmp_path / "b.jsonl")
    elif how == "folder symlink":
        (tmp_path / "d").symlink_to(parts["js"])
        other = str(tmp_path / "d")
    else:  # the .ds of a datatrove format is a hard link to train.bin
        ids = np.array([1, 2, 256, 3, 256], "<u2")
        ids.tofile(tmp_path / "train.bin")
        os.link(tmp_path / "train.bin", tmp_path / "train.ds")
        from openwebtext.tokenfiles import datatrove_index

        (tmp_path / "train.ds.index").write_bytes(datatrove_index(np.array([3, 5])))
        js = tmp_path / "train.bin"
        mixture_of = {
            "a": Corpus.open_tokens(js, eot=256),
            "b": Corpus.open_tokens(tmp_path / "train.ds", eot=256),
        }
        with pytest.raises(ValueError, match="in two parts of the mixture"):
            Mixture(mixture_of)
        return
    with pytest.raises(ValueError, match="in two parts of the mixture"):
        Mixture({"a": str(js), "b": other})


def test_a_state_of_a_mixture_and_of_a_corpus_are_not_taken_for_each_other(
    parts: dict[str, Path],
) -> None:
    mixture = Mixture({"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")})
    with Loader(mixture, workers=0, seed=0).iter() as it:
        next(it)
        mixed = it.state_dict()
    with Loader(parts["js"], workers=0, seed=0).iter() as it:
        next(it)
        single = it.state_dict()
    with pytest.raises(StateError, match="openwebtext-mixture/2"):
        Loader(parts["js"], workers=0, seed=0).iter(state=mixed)
    with pytest.raises(StateError, match=r"mixture state: format: not 'openwebtext-mixture/2'"):
        Loader(mixture, workers=0, seed=0).iter(state=single)
    other = Mixture({"js": str(parts["js"]), "b": str(parts["zst"] / "a.jsonl")})
    with pytest.raises(StateError, match=r"parts: saved \('js', 'zst'\), now \('js', 'b'\)"):
        Loader(other, workers=0, seed=0).iter(state=mixed)
    swapped = {**mixed, "parts": {"js": mixed["parts"]["zst"], "zst": mixed["parts"]["js"]}}
    with pytest.raises(StateError, match=r"served: \[1, 0\] counts more than its parts handed"):
        Loader(mixture, workers=0, seed=0).iter(state=swapped)  # (its turns say so first)
    swapped["served"] = [0, 1]  # (turns that agree: the parts' corpora say it)
    with pytest.raises(StateError, match=r"part 'js'.*corpus"):
        Loader(mixture, workers=0, seed=0).iter(state=swapped)


@pytest.mark.parametrize("split", ["val", "train"])
def test_a_part_with_no_document_in_its_split_is_named(tmp_path: Path, split: str) -> None:
    """A part read endlessly whose split keeps no document would wait forever: the error
    says which part, and not that the user asked for an endless run (they did not)."""
    write_jsonl(tmp_path / "one" / "a.jsonl", sample_texts(1, seed=9))
    write_jsonl(tmp_path / "js" / "a.jsonl", sample_texts(5, seed=2))
    fraction = 0.0001 if split == "val" else 0.9999
    mixture = Mixture(
        {"one": str(tmp_path / "one"), "js": str(tmp_path / "js")},
        options={"one": {"split": split, "val_fraction": fraction}},
    )
    with pytest.raises(CorpusError, match=r"^part 'one': .*: epoch 0 yielded no") as e:
        read(mixture)
    assert "epochs=None" not in str(e.value)
    # weight 0: never read, so never an error
    documents, _ = read(Mixture(mixture.corpora, {"js": 1.0}, options=mixture.options))
    assert {d.source for d in documents} == {"js"}


def test_what_a_running_mixture_refuses_leaves_it_as_it_was(parts: dict[str, Path]) -> None:
    """set_weights with a name that is no part, no positive weight or a NaN is a ValueError
    naming the call, and records nothing (the state is as before); a mixture by tokens without
    a tokenizer and epochs=0 are refused before anything is read."""
    mixture = Mixture({"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")})
    with Loader(mixture, workers=0, seed=0, epochs=None).iter() as it:
        next(it)
        before = it.state_dict()
        for weights, message in [
            ({"web": 1.0}, r"set_weights: \['web'\] are not parts"),
            ({"js": 0.0, "zst": 0.0}, "set_weights: at least one weight must be positive"),
            ({"js": float("nan")}, "set_weights: a weight must be a finite number"),
        ]:
            with pytest.raises(ValueError, match=message):
                it.set_weights(weights)
        assert it.state_dict() == before
    by_tokens = Mixture(mixture.corpora, by="tokens")
    with pytest.raises(ValueError, match="a mixture by tokens needs the loader's tokenizer"):
        Loader(by_tokens, workers=0).iter()
    with pytest.raises(ValueError, match=r"epochs must be None or >= 1 and at most \d+, not 0"):
        Loader(mixture, workers=0, epochs=0)


# Defects found here (fixed in the mixture's files) -------------------------------------------


def test_a_bad_file_of_a_part_given_by_path_is_a_counted_skip_under_skip(
    parts: dict[str, Path],
) -> None:
    mixture = Mixture({"bad": str(parts["lfs"]), "js": str(parts["js"])})
    documents, stats = read(mixture, on_error="skip")
    assert stats.parts["bad"].skipped_files == 1
    assert len({d.name for d in documents if d.source == "bad"}) == 20


def test_a_part_opened_under_skip_is_an_error_under_raise(parts: dict[str, Path]) -> None:
    bad = Corpus.open(parts["lfs"], on_error="skip")
    with pytest.raises(CorpusError) as raised:
        list(Loader(bad, workers=0))
    assert raised.value.path == str(parts["lfs"] / "train-00001-of-00002.parquet")
    with pytest.raises(CorpusError) as raised:
        read(Mixture({"bad": bad, "js": str(parts["js"])}))
    assert raised.value.path == str(parts["lfs"] / "train-00001-of-00002.parquet")
    assert str(raised.value).startswith(f"part 'bad': {raised.value.path}: ")
    with pytest.raises(CorpusError) as raised:  # the corpus's own error, unchanged by the mixture's
        list(Loader(bad, workers=0))
    assert raised.value.part is None and str(raised.value).startswith(f"{raised.value.path}: ")


def test_a_part_that_cannot_be_opened_is_named(parts: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "nothing.tar").write_bytes(b"not a tar")
    for where in (tmp_path / "nothing.tar", tmp_path / "absent"):
        with pytest.raises(CorpusError, match=f"^part 'bad': {where}: "):
            Mixture({"js": str(parts["js"]), "bad": str(where)})


def _two_damaged_parts(tmp_path: Path) -> Mixture:
    files = {}
    for name in ("x", "y"):
        files[name] = str(outer_tar(tmp_path / f"urlsf_subset0{len(files) + 1}.tar", [
            (f"openwebtext/{name}-1_data.xz", xz_member(sample_docs(f"{name}a", 5))),
            (f"openwebtext/{name}-2_data.xz", corrupt_member(sample_docs(f"{name}b", 5))),
        ]))  # fmt: skip
    return Mixture(files)


def test_owt_stream_says_what_each_part_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary line of each part says its skips (the run's line said their sum only), and
    each skip named says its part."""
    _two_damaged_parts(tmp_path)
    mix = [f"--mix={name}={tmp_path}/urlsf_subset0{k}.tar:1" for k, name in ((1, "x"), (2, "y"))]
    ran = run_owt(capsys, "stream", *mix, "-q", "--no-shuffle", "--on-error", "skip")
    assert ran.returncode == 0, ran.stderr
    for name in ("x", "y"):  # (a part repeated while the other finishes its epoch: again)
        assert re.search(rf"^  {name}: .*; skipped [12] members?, 0 documents, 0 members cut "
                         "short$", ran.stderr, re.MULTILINE), ran.stderr  # fmt: skip
        named = rf"^  skipped: part '{name}': .*{name}-2_data.xz"
        assert re.search(named, ran.stderr, re.MULTILINE), ran.stderr


def test_max_errors_bounds_the_skips_of_the_whole_mixture(tmp_path: Path) -> None:
    mixture = _two_damaged_parts(tmp_path)  # in order: each part's damaged member read once
    try:
        _, stats = read(mixture, on_error="skip", max_errors=1, shuffle=False)
    except TooManyErrors:
        return
    assert stats.skipped_members <= 1, stats.skipped


def test_set_weights_from_a_training_loop_keeps_the_state_small(parts: dict[str, Path]) -> None:
    mixture = Mixture({"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")})
    with Loader(mixture, workers=0, seed=0, epochs=None).iter() as it:
        next(it)
        it.set_weights({"js": 1, "zst": 2})
        next(it)
        one = len(json.dumps(it.state_dict()))
        for k in range(500):
            next(it)
            it.set_weights({"js": 1 + k % 3, "zst": 1})
        many = len(json.dumps(it.state_dict()))
    assert many <= one + 200, (one, many)


@pytest.mark.parametrize("kind", [np.float32, np.int64])
def test_weights_computed_with_numpy_are_taken(parts: dict[str, Path], kind: Any) -> None:
    mixture = Mixture({"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")})
    assert Mixture(mixture.corpora, {"js": kind(1), "zst": kind(3)}).weights == (0.25, 0.75)


BAD_ARGUMENTS = {
    "a schedule as a dict": (lambda p: Mixture(p, schedule={10: {"js": 1}}), "schedule"),
    "positions of two types": (
        lambda p: Mixture(p, schedule=[("5", {"js": 1}), (3, {"js": 1})]),
        "positions",
    ),
    # today: "weights: [0.5] are not parts of the mixture" (a list's values taken for names)
    "weights as a list": (lambda p: Mixture(p, [0.5, 0.5]), "(?i)mapping|dict"),
    "a part that is None": (lambda p: Mixture({**p, "none": None}), "'none'"),
    "a mixture as a part": (lambda p: Mixture({**p, "mix": Mixture(p)}), "'mix'"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_bad_arguments_are_value_errors_naming_what(parts: dict[str, Path], case: str) -> None:
    make, names = BAD_ARGUMENTS[case]
    corpora = {"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")}
    with pytest.raises(ValueError, match=names):
        make(corpora)


def test_equal_weights_too_large_to_sum_are_equal_weights(parts: dict[str, Path]) -> None:
    corpora = {"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")}
    assert Mixture(corpora, {"js": 1e308, "zst": 1e308}).weights == (0.5, 0.5)


def test_a_file_as_a_path_and_as_a_file_url_is_not_in_two_parts(parts: dict[str, Path]) -> None:
    js = str(parts["js"] / "a.jsonl")
    with pytest.raises(ValueError, match="in two parts"):
        Mixture({"a": js, "b": f"file://{js}"})


@pytest.mark.parametrize(
    "spellings",
    [
        ["{js}", "file://{js}"],  # a path and its file:// URL
        ["file://{js}", "file://{js}"],  # one URL twice
        ["file://{folder}", "file://{js}"],  # a folder's URL and a file in it
        ["{js}", "file://{other}", "{js}"],  # a path on both sides of a URL
    ],
)
def test_a_file_reached_twice_through_a_url_is_refused(
    parts: dict[str, Path], tmp_path: Path, spellings: list[str]
) -> None:
    """``Corpus.open`` refuses a file named twice by any spelling: through URLs too (they are
    indexed apart from the local paths, so ``find_files`` never saw both)."""
    write_jsonl(tmp_path / "other.jsonl", sample_texts(3, seed=7))
    where = {
        "js": parts["js"] / "a.jsonl",
        "folder": parts["js"],
        "other": tmp_path / "other.jsonl",
    }
    paths = [s.format(**where) for s in spellings]
    with pytest.raises(CorpusError, match="the same file is given twice") as raised:
        Corpus.open(paths)
    assert raised.value.path is not None and raised.value.path.endswith("a.jsonl")
    assert len(Corpus.open(paths[:1]).units) == 1


def test_random_sampling_by_tokens_mixes_ids_or_is_refused(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "short.jsonl", ["ab"] * 100)  # 3 ids with the end of text
    write_jsonl(tmp_path / "long.jsonl", ["x" * 299] * 100)  # 300 ids
    corpora = {"s": str(tmp_path / "short.jsonl"), "l": str(tmp_path / "long.jsonl")}
    try:
        mixture = Mixture(corpora, by="tokens", sampling="random")
    except ValueError:
        return  # refused: as good as honoured
    ids = {"s": 0, "l": 0}
    with Loader(mixture, workers=0, seed=0, tokenizer="bytes", take=1000).iter() as it:
        for document in it:
            ids[document.source] += len(document.tokens)
    assert 0.4 <= ids["s"] / sum(ids.values()) <= 0.6, ids


def test_weights_too_large_to_sum_are_normalised(parts: dict[str, Path]) -> None:
    """Finite weights whose sum overflows are scaled down first, not an OverflowError."""
    corpora = {"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")}
    assert Mixture(corpora, {"js": 1e308, "zst": 3e307}).weights == pytest.approx((10 / 13, 3 / 13))


def test_reshard_of_states_of_different_mixtures_names_what_differs(tmp_path: Path) -> None:
    """It said only "their configs differ", or a part's corpus without naming the part."""
    from openwebtext import reshard

    for name, n in (("a", 20), ("b", 20), ("c", 21)):
        write_jsonl(tmp_path / f"{name}.jsonl", sample_texts(n, seed=len(name) + n))
    a, b, c = (str(tmp_path / f"{name}.jsonl") for name in "abc")

    def state(mixture: Mixture, rank: int) -> Any:
        with Loader(mixture, workers=0, rank=rank, world_size=2, even=None).iter() as it:
            next(it)
            return it.state_dict()

    weighted = [Mixture({"x": a, "y": b}, {"x": w, "y": 10 - w}) for w in (7, 5)]
    with pytest.raises(StateError, match=r"different mixtures: weights: \(0\.7, 0\.3\) and "
                       r"\(0\.5, 0\.5\)"):  # fmt: skip
        reshard([state(weighted[0], 0), state(weighted[1], 1)], 1)
    other = [Mixture({"x": a, "y": b}), Mixture({"x": a, "y": c})]
    said = r"the mixture's part 'y': states of different runs \(state 1, of rank 1, differs"
    with pytest.raises(StateError, match=said + r" from rank 0's\): corpus") as caught:
        reshard([state(other[0], 0), state(other[1], 1)], 1)
    assert caught.value.field == "parts.y.config.corpus"  # (it said none)


def test_set_weights_takes_only_a_state_of_these_batches(parts: dict[str, Path]) -> None:
    """``set_weights(state=…)`` took a state of 32 x 3 concat batches on 64 x 2 best-fit ones
    and went on best fit from it (``Loader.batches(state=…)`` refuses it): now the same
    check. Batches that ran out took ``set_weights`` too, restarted the workers and recorded
    a change (``ahead``'s and the documents' iterators refuse it): now a ValueError."""
    mixture = Mixture({"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")})
    loader = Loader(mixture, workers=0, seed=0, epochs=None, tokenizer="bytes")
    others = []
    for seq_len, batch_size in [(32, 3), (64, 2)]:
        with loader.batches(seq_len, batch_size) as it:
            next(it)
            others.append(it.state_dict())
    with loader.batches(64, 2, packing="bestfit", window=8) as it:
        next(it)
        before = it.state_dict()
        for state, field in zip(others, ["seq_len", "packing"], strict=True):
            with pytest.raises(StateError, match="the state was saved for") as caught:
                it.set_weights({"js": 1.0}, state=state)
            assert caught.value.field == field
        assert it.state_dict() == before
    with Loader(mixture, workers=0, seed=0, tokenizer="bytes", take=5).batches(64, 2) as it:
        assert list(it)
        with pytest.raises(ValueError, match="set_weights: the batches were closed, or ran out"):
            it.set_weights({"js": 1.0})


def test_weights_refused_by_batches_made_ahead_leave_them_going_on(parts: dict[str, Path]) -> None:
    """``ahead(...).set_weights`` with a name that is no part stopped the thread and closed the
    source before the weights were refused: the next ``next()`` waited forever. Now refused
    first, the batches made ahead going on as they were (with a ValueError after the thread
    stopped, as a source's own refusal would be, ``next()`` ends: never a wait)."""
    mixture = Mixture({"js": str(parts["js"]), "zst": str(parts["zst"] / "a.jsonl")})
    loader = Loader(mixture, workers=0, seed=0, tokenizer="bytes", take=12)
    with ahead(loader.batches(32, 2)) as it:
        whole = [b.tobytes() for b in it]
    with ahead(loader.batches(32, 2)) as it:
        first = [next(it).tobytes() for _ in range(2)]
        for weights in ({"jss": 1.0}, {"js": -1.0}):
            with pytest.raises(ValueError, match="set_weights: "):
                it.set_weights(weights)
        assert first + [b.tobytes() for b in it] == whole
