"""The exception contract of the public doors (session 36's red team): what each door takes is
either taken whole (numpy's ``np.str_`` wherever a ``str`` is) or refused at the call with the
documented error naming it; never an error from inside later (a checkpoint that cannot be
written), nor a value whose meaning changes between processes (a set's order)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import (
    Corpus,
    CorpusError,
    Loader,
    Mixture,
    StateError,
    TokenizerError,
    load_tokenizer,
    reshard,
)
from openwebtext.prepare import PrepareOptions, prepare
from openwebtext.synth import write_corpus


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("doors") / "b"
    write_corpus(path, subsets=1, members=2, docs=10, seed=1, workers=1)
    return path


@pytest.mark.parametrize(
    "options",
    [{"split": "train"}, {"even": "pad", "world_size": 2}, {"decode_errors": "replace"},
     {"on_error": "skip"}, {"tokenizer": "bytes"}],
    ids=lambda o: next(iter(o)),
)  # fmt: skip
def test_numpy_str_options_give_a_state_that_resumes(
    indexed: Path, options: dict[str, Any]
) -> None:
    """An option given as ``np.str_`` was taken, then ``state_dict()`` raised msgspec's
    "Encoding objects of type numpy.str_ is unsupported": the checkpoint died."""
    given = {k: np.str_(v) if isinstance(v, str) else v for k, v in options.items()}
    loader = Loader(indexed, workers=0, seed=1, **given)
    with loader.iter() as docs:
        next(docs)
        state = docs.state_dict()
        following = next(docs).name
    assert isinstance(state["config"]["corpus"], str)
    with Loader(indexed, workers=0, seed=1, **options).iter(state=state) as again:
        assert next(again).name == following


def test_a_numpy_str_mixture_and_reshard(other: Path, tmp_path: Path) -> None:
    write_corpus(tmp_path / "a", subsets=1, members=2, docs=10, seed=2, workers=1)
    mixture = Mixture({np.str_("a"): tmp_path / "a", "b": other}, {"a": 0.5, "b": 0.5},
                      sampling=np.str_("random"))  # fmt: skip
    states = []
    for rank in (0, 1):
        with Loader(mixture, workers=0, seed=1, world_size=2, rank=rank).iter() as docs:
            next(docs)
            states.append(docs.state_dict())
    assert reshard(states, 1, even=np.str_("pad"))  # (the even rule: of a reshard)


def test_a_numpy_str_split_rule_prepares(small_corpus: Path, tmp_path: Path) -> None:
    options = PrepareOptions(tokenizer="bytes", workers=0, split_rule=np.str_("hash"),
                             on_error=np.str_("skip"))  # fmt: skip
    prepare(Corpus.open(small_corpus), tmp_path / "out", options)
    assert (tmp_path / "out" / "meta.json").exists()


def test_a_numpy_str_folder_is_read(small_corpus: Path) -> None:
    """``os.listdir`` of an ``np.str_`` gives bytes: a bare TypeError naming nothing."""
    given = Corpus.open(np.str_(str(small_corpus)))
    assert len(given.units) == len(Corpus.open(small_corpus).units)


def test_a_path_like_of_bytes_is_refused_naming_it(small_corpus: Path) -> None:
    class Bytes(os.PathLike):  # type: ignore[type-arg]
        def __fspath__(self) -> bytes:
            return os.fsencode(str(small_corpus))

    with pytest.raises(TypeError, match=r"os\.fspath is bytes"):
        Corpus.open(Bytes())


def test_a_set_of_paths_is_refused(small_corpus: Path, other: Path) -> None:
    """A set's order is another in each process (``PYTHONHASHSEED``): so were the corpus's
    units, its fingerprint and its order, and a state saved in one refused in the next."""
    with pytest.raises(TypeError, match="a set has no order"):
        Loader({str(small_corpus), str(other)})
    with pytest.raises(TypeError, match="a set has no order"):
        Corpus.open(frozenset([str(small_corpus)]))
    assert Corpus.open(sorted([str(small_corpus), str(other)]))


@pytest.mark.parametrize("path", ["/tmp/\ud800", "/tmp/a\0b"], ids=["surrogate", "nul"])
def test_a_path_no_file_system_holds_is_an_error_naming_it(path: str, tmp_path: Path) -> None:
    for door in (Corpus.open, Loader, lambda p: Mixture({"a": p})):
        with pytest.raises(CorpusError, match="not a path: it holds a NUL or an unpaired"):
            door(path)
    with pytest.raises(TokenizerError, match="hf:"):
        load_tokenizer(f"hf:{path}")
    (tmp_path / "c.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(ValueError, match="out is not a path"):
        prepare(Corpus.open(tmp_path / "c.jsonl"), path, PrepareOptions(tokenizer="bytes"))


def test_a_state_whose_format_nests_deeply_is_a_state_error(small_corpus: Path) -> None:
    """The message said the value with ``repr``: ``RecursionError`` at 10,000 levels."""
    deep: Any = 0
    for _ in range(10_000):
        deep = [deep]
    loader = Loader(small_corpus, workers=0)
    for state in ({"format": deep}, {"format": deep, "config": {}}):
        with pytest.raises(StateError) as caught:
            loader.iter(state=state)
        assert caught.value.field == "format"
        with pytest.raises(StateError):
            reshard([state], 1)


def test_a_mark_of_another_kind_is_a_type_error(small_corpus: Path, other: Path) -> None:
    mixture = Mixture({"a": small_corpus, "b": other}, {"a": 0.5, "b": 0.5})
    with Loader(small_corpus, workers=0).iter() as docs, Loader(mixture, workers=0).iter() as mix:
        next(docs), next(mix)
        for it, mark in ((docs, "x"), (docs, mix.mark()), (mix, docs.mark()), (mix, None)):
            if mark is None:
                continue
            with pytest.raises(TypeError, match="mark must be a mark"):
                it.state_dict(mark)


@pytest.mark.parametrize("spec", ["gpt2", "bytes"])
def test_a_tokenizer_s_methods_refuse_what_is_not_theirs(spec: str) -> None:
    tokenizer = load_tokenizer(spec)
    for ids in ([-1], [tokenizer.n_vocab], [2**70], [True]):
        with pytest.raises(ValueError, match="is no id of this tokenizer"):
            tokenizer.decode(ids)
    assert tokenizer.decode(np.array(tokenizer.encode("hi"), np.uint32)) == "hi"
    for text in (None, b"x"):
        with pytest.raises(TypeError, match="text must be a str"):
            tokenizer.encode(text)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not one str"):
        tokenizer.encode_batch("abc")


def test_random_sampling_seeds_apart_by_2_64_draw_apart(small_corpus: Path, other: Path) -> None:
    """The draws kept a seed's low 64 bits only: seeds 0 and 2**64 mixed alike."""
    mixture = Mixture({"a": small_corpus, "b": other}, {"a": 0.5, "b": 0.5}, sampling="random")

    def parts(seed: int) -> list[str]:
        with Loader(mixture, workers=0, seed=seed, shuffle=False).iter() as docs:
            return [d.name.split("/")[0] for _, d in zip(range(40), docs, strict=False)]

    assert parts(0) != parts(2**64)
    assert parts(2**64) == parts(2**64)


def test_positions_past_int32_are_refused() -> None:
    from openwebtext.stream.batches import _marked

    with pytest.raises(ValueError, match="more than 2\\*\\*31-1 ids"):
        _marked(np.array([4]), 2**31 - 2)
    _, positions = _marked(np.array([4]), 2**31 - 5)
    assert positions.tolist() == [2**31 - 5 + k for k in range(4)]


def test_a_mixture_part_given_as_bytes_is_named_so(tmp_path: Path) -> None:
    """Bytes are a sequence of ints: the message said "not int"."""
    with pytest.raises(ValueError, match="not bytes"):
        Mixture({"a": os.fsencode(str(tmp_path))})


def test_the_reference_api_refuses_at_the_call(small_corpus: Path) -> None:
    """``shuffle(5, 2)`` failed at its first ``next()``; a set of subsets or a list of ints
    was taken and failed (or ordered otherwise per process) later; an array's ``prefetch``
    raised numpy's "truth value of an array is ambiguous"."""
    from openwebtext import OpenWebTextLoader, shuffle

    with pytest.raises(TypeError, match="must be iterable"):
        shuffle(5, 2)  # type: ignore[arg-type]
    for subsets in ({str(small_corpus)}, [5], {str(small_corpus): 1}):
        with pytest.raises(TypeError, match="subsets are paths"):
            OpenWebTextLoader(subsets)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefetch buffer"):
        OpenWebTextLoader(str(small_corpus), prefetch=np.array([2, 3]))  # type: ignore[arg-type]
