"""Arguments of the public API that a red team found taken and misused, or failing later from
deep inside (numpy, mmap, a worker, a KeyError): each is now a clear error at the call that
takes it, naming the argument and what it may be."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import (
    Corpus,
    Loader,
    Mixture,
    Options,
    Schedule,
    StateError,
    reshard,
    shuffle,
    take,
)
from support import Ran
from tables_support import sample_texts, write_jsonl


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("args") / "a.jsonl"
    write_jsonl(path, sample_texts(12, seed=5))
    return path


def _hf_shard(shard: object, count: object) -> Any:
    from openwebtext.hf import shard_options

    return shard_options(Options(), shard, count)  # type: ignore[arg-type]


CALLS: list[tuple[str, Callable[[Path], Any], type[Exception], str]] = [
    ("a number as the corpus", lambda p: Loader(5), TypeError, "the corpus is a path"),  # type: ignore[arg-type]
    ("None as the corpus", lambda p: Loader(None), TypeError, "the corpus is a path"),  # type: ignore[arg-type]
    ("bytes as the corpus", lambda p: Loader(bytes(p)), TypeError, "the corpus is a path"),  # type: ignore[arg-type]
    ("a dict as the options", lambda p: Loader(p, {"workers": 0}), TypeError,  # type: ignore[arg-type]
     "options must be an Options, or keyword arguments, not dict"),
    ("an unknown on_error", lambda p: Corpus.open(p, on_error="bogus"), ValueError,
     "on_error must be 'raise', 'skip' or 'warn'"),
    ("a number as the text column", lambda p: Corpus.open(p, text_column=5), ValueError,  # type: ignore[arg-type]
     "text_column must be a column's name"),
    ("an empty mixture weights", lambda p: Mixture({"a": str(p)}, weights={}), ValueError,
     "at least one weight must be positive"),
    ("an infinite weight", lambda p: Mixture({"a": str(p)}, {"a": float("inf")}), ValueError,
     r"weights: a weight must be a finite number >= 0, not inf \(part 'a'\)"),  # (no part said)
    ("a part named with a dot", lambda p: Mixture({"a.b": str(p)}), ValueError,
     r"a part's name must be .* without = : \. .*not 'a.b'"),  # (parts.a.b.position: whose?)
    ("a part named with a newline", lambda p: Mixture({"a\n": str(p)}), ValueError,
     "a part's name must be a non-empty str of printable characters"),
    ("a part's seed of -1", lambda p: Mixture({"a": str(p)}, options={"a": {"seed": -1}}),
     ValueError, "options for 'a': seed must be an int >= 0"),  # (at the first run, no part)
    ("a schedule out of order", lambda p: Mixture({"a": str(p)}, schedule=[(9, {"a": 1}),
     (3, {"a": 1})]), ValueError, r"positions must increase .* not \[9, 3\]"),
    ("take of a negative size", lambda p: take(iter(()), -1), ValueError,
     "size must be an int >= 0"),
    ("a shuffle buffer of 2.5", lambda p: shuffle(iter(()), 2.5), ValueError,  # type: ignore[arg-type]
     "buffer_size must be an int >= 1"),
    # session 28: islice's own words
    ("take of 2**63", lambda p: take(iter(()), 2**63), ValueError, "size must be an int >= 0 "
     "and at most"),
    ("a shuffle buffer of 2**63", lambda p: shuffle(iter(()), 2**63), ValueError,
     "buffer_size must be an int >= 1 and at most"),
    ("shard True of hf's", lambda p: _hf_shard(True, 2), ValueError, "shard must be an int in "
     r"0\.\.1, not True"),
    ("shard 0.5 of hf's", lambda p: _hf_shard(0.5, 2), ValueError, "shard must be an int in"),
    ("shard '1' of hf's", lambda p: _hf_shard("1", 2), ValueError, "shard must be an int in"),
    ("num_shards 0 of hf's", lambda p: _hf_shard(0, 0), ValueError, "num_shards must be an int"),
    ("a batch of 2**40 ids", lambda p: Loader(p, tokenizer="bytes", workers=0).batches(
     2**40, 1, packing="bestfit"), ValueError, "more than the 2147483648 a batch holds"),
    ("a schedule of 2**32 ids a batch", lambda p: Schedule([(0, 2**20, 2**12)]), ValueError,
     "more than the 2147483648 a batch holds"),  # (taken, then the run grew without end)
    ("a warm-up of 2**62 ids a batch", lambda p: Schedule.warmup(16, 64, tokens=2**62,
     batches=4), ValueError, "tokens must be at most 2147483648"),
    ("reshard to 2**63 ranks", lambda p: reshard([{}], 2**63), ValueError,
     "world_size must be an int >= 1 and at most 9223372036854775807"),  # (built without end)
    ("pad_id with concat packing", lambda p: Loader(p, tokenizer="bytes", workers=0).batches(
     64, 2, pad_id=0), ValueError, "pad_id pads best fit's rows; concat never pads"),
    ("a cache_size without a cache_dir", lambda p: Corpus.open(p, cache_size=1 << 20),
     ValueError, "cache_size caps the member cache of cache_dir"),
    ("reshard of None", lambda p: reshard(None, 2), TypeError,  # type: ignore[arg-type]
     "states must be a list of every rank's state_dict"),
    ("a schedule of None", lambda p: Schedule(None), ValueError, "a schedule is a list of"),  # type: ignore[arg-type]
    ("a schedule of 5", lambda p: Schedule(5), ValueError, "a schedule is a list of"),  # type: ignore[arg-type]
]  # fmt: skip


@pytest.mark.parametrize(("call", "kind", "said"), [c[1:] for c in CALLS],
                         ids=[c[0] for c in CALLS])  # fmt: skip
def test_a_bad_argument_is_refused_at_the_call(
    jsonl: Path, call: Callable[[Path], Any], kind: type[Exception], said: str
) -> None:
    with pytest.raises(kind, match=said):
        call(jsonl)


def test_reshard_reads_a_generator_of_states_once(jsonl: Path) -> None:
    """It was read by the mixture check, then said to be "states of formats []"."""
    states = []
    for rank in range(2):
        with Loader(jsonl, workers=0, rank=rank, world_size=2).iter() as it:
            next(it)
            states.append(it.state_dict())
    assert reshard(iter(states), 3) == reshard(states, 3)


@pytest.mark.parametrize(
    ("given", "said"),
    [({"unit_tokens": 0}, "unit_tokens must be an int >= 1"),
     ({"unit_tokens": True}, "unit_tokens must be an int >= 1"),
     ({"eot": True}, r"eot must be None or an id \(an int >= 0\), not True"),
     ({"eot": -1}, r"eot must be None or an id"),
     ({"dtype": "float32"}, "dtype must be None or an integer dtype's name")],
)  # fmt: skip
def test_open_tokens_refuses_its_bad_arguments(
    token_run: Path, given: dict[str, Any], said: str
) -> None:
    """They were taken (a unit of 0 ids), or said as damage of the file ("its ids do not end
    with the end-of-text id True")."""
    with pytest.raises(ValueError, match=said):
        Corpus.open_tokens(token_run / "train.bin", **given)


def test_a_file_opened_again_otherwise_is_read_as_asked_the_second_time(tmp_path: Path) -> None:
    """A token file opened a second time in one process with another ``eot`` or ``dtype``
    was read as the first open had read it (a cache by path, size and mtime only)."""
    path = tmp_path / "train.bin"
    np.array([5, 0, 256, 0], dtype="<u2").tofile(path)  # as <u4: [5, 256]

    def documents(**given: Any) -> int:
        counts = Corpus.open_tokens(path, **given).counts
        assert counts is not None
        return sum(counts.documents)

    assert documents(eot=0, dtype="uint16") == 2
    assert documents(eot=256, dtype="uint32") == 1
    assert documents(eot=0, dtype="uint16") == 2
    with pytest.raises(Exception, match="do not end with the end-of-text id 5"):
        Corpus.open_tokens(path, eot=5, dtype="uint16")


def test_the_torch_doors_check_their_arguments(jsonl: Path) -> None:
    pytest.importorskip("torch")
    from openwebtext.torch import (
        OpenWebTextDataset,
        PackedBatchDataset,
        loader_dataset_states,
        reshard_loader_states,
    )

    with pytest.raises(TypeError, match="options must be an Options"):
        OpenWebTextDataset(jsonl, {"workers": 0})  # type: ignore[arg-type]
    for workers in (-1, True, 2.5):  # (taken as 1; 2.5 said as "world_size … not 5.0")
        with pytest.raises(ValueError, match=r"num_workers must be an int >= 0 \(the new"):
            reshard_loader_states([], 2, workers)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="times num_workers, at most 9223372036854775807"):
        reshard_loader_states([], 2**62, 2)  # (2**63 shares: reshard built them without end)
    with pytest.raises(StateError, match="not a StatefulDataLoader's state_dict"):
        loader_dataset_states({"something": 1})  # (a bare KeyError)
    dataset = OpenWebTextDataset(jsonl, workers=0)
    with pytest.raises(StateError, match="no resharded states"):
        dataset.load_resharded([])  # (the next pass started the epoch again)
    # Checked in the main process, at the constructor, not at the first batch in a worker:
    bad: list[tuple[dict[str, Any], str]] = [
        ({"packing": "fifo"}, "packing must be one of"),
        ({"packing": "bestfit", "window": 0}, "window must be an int >= 1"),
        ({"window": 8}, "window is best fit's"),  # (concat's: refused, not ignored)
        ({"dtype": np.uint8}, "dtype must be an integer dtype that holds every id"),
        ({"dtype": None}, "holds every id .*, not None"),  # (session 28: "not 'float64'")
        ({"packing": "bestfit", "dtype": np.uint8}, "holds every id"),
        ({"packing": "bestfit", "pad_id": "x"}, "pad_id must be an int"),
        ({"segments": "no"}, "segments must be True or False"),
    ]
    for given, said in bad:
        with pytest.raises(ValueError, match=said):
            PackedBatchDataset(jsonl, 8, 2, tokenizer="gpt2", workers=0, **given)
    with pytest.raises(Exception, match="nope"):
        PackedBatchDataset(jsonl, 8, 2, tokenizer="nope", workers=0)
    assert json.dumps(PackedBatchDataset(jsonl, 8, 2, tokenizer="gpt2").state_dict()) == "{}"


def test_owt_says_how_to_resume_with_its_own_flags(
    jsonl: Path, tmp_path: Path, owt: Callable[..., Ran]
) -> None:
    """``owt stream --resume`` with another shaping flag said "pass seed=0" (a keyword of the
    library); the command takes the state's when the flag is left out, and says so."""
    saved = tmp_path / "state.json"
    assert owt("stream", str(jsonl), "-j", "0", "--take", "3", "--state-out", str(saved),
               "-q", "--jsonl").returncode == 0  # fmt: skip
    ran = owt("stream", str(jsonl), "-j", "0", "--seed", "3", "--shuffle-buffer", "7",
              "--resume", str(saved), "-q", "--jsonl")  # fmt: skip
    assert ran.returncode == 1
    assert "seed: saved 0, now 3" in ran.stderr and "pass seed=" not in ran.stderr
    assert "(to resume it, leave out --seed, --shuffle-buffer: --resume takes the state's)" in (
        ran.stderr
    ), ran.stderr
    ran = owt("stream", str(jsonl), "-j", "0", "--no-shuffle", "--resume", str(saved), "-q")
    assert ran.returncode == 1 and "pass shuffle=" not in ran.stderr
    assert "(to resume it, leave out --no-shuffle: --resume takes the state's)" in ran.stderr


def test_a_loader_state_of_other_workers_says_to_reshard(jsonl: Path) -> None:
    """A ``StatefulDataLoader`` state of 2 workers loaded into one of 1 said "pass
    world_size=2", which would make the dataset two ranks."""
    pytest.importorskip("torch")
    from torchdata.stateful_dataloader import StatefulDataLoader

    from openwebtext.torch import OpenWebTextDataset

    def loader(workers: int) -> Any:
        dataset = OpenWebTextDataset(jsonl, seed=0, workers=0)
        return StatefulDataLoader(dataset, batch_size=None, num_workers=workers)

    old = loader(2)
    running = iter(old)
    next(running)
    state = old.state_dict()
    del running
    new = loader(1)
    new.load_state_dict(state)
    with pytest.raises(Exception, match="another num_workers or world size") as raised:
        next(iter(new))
    assert "pass world_size" not in str(raised.value)
    assert "reshard_loader_states" in str(raised.value)


@pytest.mark.parametrize(
    "flags", [["--split", "all", "--val-fraction", "0.1"], ["--world-size", "1", "--even", "pad"]]
)
def test_owt_stream_takes_the_flags_a_launch_script_gives_every_run(
    jsonl: Path, owt: Callable[..., Ran], flags: list[str]
) -> None:
    """``--split "$S" --val-fraction F`` with S=all, ``--world-size "$W" --even pad`` with W=1:
    the flag they shape is given, whatever its value; taken as the library takes them."""
    ran = owt("stream", str(jsonl), "-q", "-j", "0", "--take", "2", *flags)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [(["--seq-len", "64"], "--seq-len shapes --pack: give --pack, or leave --seq-len out"),
     (["--batch-size", "3"], "--batch-size shapes --pack"),
     (["--window", "3"], "--window shapes --pack bestfit"),
     (["--pack", "concat", "--tokenizer", "bytes", "--window", "3"], "--window shapes --pack "),
     (["--mix-by", "tokens"], "--mix-by shapes --mix"),
     (["--max-errors", "3"], "--max-errors shapes --on-error skip or warn"),
     (["--cache-size", "1G"], "cache_size caps the member cache of cache_dir"),
     # session 28 (red team): each ran with the flag ignored
     (["--val-fraction", "0.5"], "--val-fraction shapes --split train or val: give one"),
     (["--val-seed", "7"], "--val-seed shapes --split train or val"),
     (["--even", "pad"], "--even shapes the shares of --world-size > 1"),
     (["--even", "off"], "--even shapes the shares of --world-size > 1"),
     (["--mix", "a=x:1", "--mix-by", "tokens"], "--mix-by tokens weighs the parts by their ids: "
      "give --tokenizer"),  # (it said "needs the loader's tokenizer", the library's words)
     (["--mix", "a=x:inf"], "(a finite weight >= 0)"),  # (refused later, in other words)
     (["--mix", "a=x:1e309"], "(a finite weight >= 0)")],
)  # fmt: skip
def test_owt_stream_refuses_a_flag_that_would_do_nothing(
    jsonl: Path, owt: Callable[..., Ran], flags: list[str], said: str
) -> None:
    """Each ran to the end with the flag ignored (exit 0)."""
    ran = owt("stream", str(jsonl), "-q", "-j", "0", "--take", "2", *flags)
    assert ran.returncode == 2 and said in ran.stderr, ran.stderr


@pytest.mark.parametrize(
    "argv",
    [["stream", "J", "--take", "2", "--state-out", ""], ["stream", "J", "--resume", ""],
     ["stream", "J", "--resume", " "], ["merge", "J", "--out", ""], ["merge", "", "--out", "m"],
     ["synth", ""], ["bench", "--out", "", "J"],
     # session 28 (red team): the corpus's paths said "no such file or folder", exit 1
     ["stream", ""], ["stream", "J", ""], ["index", ""], ["tokenize", "", "--out", "t"],
     ["bench", "", "--out", "b"]],
)  # fmt: skip
def test_an_empty_path_is_refused_naming_its_argument(
    jsonl: Path, tmp_path: Path, owt: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:  # fmt: skip
    """An unset variable in ``--resume "$STATE"`` ran from the start (exit 0), in
    ``--state-out "$STATE"`` wrote no state; ``merge --out ''`` wrote train.bin, val.bin and
    meta.json into the current folder. Each path argument is refused empty, before any run."""
    monkeypatch.chdir(tmp_path)
    ran = owt(*(str(jsonl) if a == "J" else a for a in argv), "-q")
    assert ran.returncode == 2, ran.stderr
    assert re.search(r"argument [-\w]+: must name a (file|folder|path)", ran.stderr), ran.stderr
    assert not list(tmp_path.iterdir())


def test_owt_tokenize_refuses_an_empty_out_and_ray_s_flags_without_ray(
    jsonl: Path, tmp_path: Path, owt: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out '' wrote the run into the current folder (here a temporary one, so that the code
    before does no harm); --address ran the local engine."""
    monkeypatch.chdir(tmp_path)
    base = ["tokenize", str(jsonl), "-q", "-j", "0", "--tokenizer", "bytes"]
    ran = owt(*base, "--out", "")
    assert ran.returncode == 2 and "argument --out: must name a folder or a URL" in ran.stderr
    assert not list(tmp_path.glob("*.bin"))
    for order in (["--seed", "3"], ["--no-shuffle"]):  # (hash's: nanogpt ran, ignoring them)
        ran = owt(*base, "--split", "nanogpt", *order, "--out", str(tmp_path / "n"))
        assert ran.returncode == 2 and f"leave {order[0]} out" in ran.stderr, ran.stderr
    ran = owt(*base, "--out", str(jsonl.parent))  # (its files then read with the corpus's)
    assert ran.returncode == 2 and "is a folder of the corpus's files" in ran.stderr
    assert not list(jsonl.parent.glob("*.bin"))
    ran = owt(*base, "--out", str(tmp_path / "a"), "--address", "x:1")
    assert ran.returncode == 2 and "--address is --engine ray's" in ran.stderr
    assert owt(*base, "--out", str(tmp_path / "a"), "--units-per-task", "0").returncode == 2


@pytest.mark.parametrize("spec", ["", "nonsense", "gpt2@foo", "bytes@splintr", "tiktoken:"])
@pytest.mark.parametrize("command", ["stream", "tokenize"])
def test_a_tokenizer_spec_that_does_not_parse_is_refused_by_the_parser(
    jsonl: Path, tmp_path: Path, owt: Callable[..., Ran], command: str, spec: str
) -> None:
    """A flag's value refused is exit 2 (session 28: an unknown spec was an error of the run,
    exit 1, after the corpus was opened); an encoding or file is loaded by the run."""
    out = ["--out", str(tmp_path / "t")] if command == "tokenize" else []
    ran = owt(command, str(jsonl), "-q", "-j", "0", "--tokenizer", spec, *out)
    assert ran.returncode == 2, ran.stderr
    assert "argument --tokenizer: " in ran.stderr and "tokenizer spec" in ran.stderr
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("limit", "value"),
    [("max_member_bytes", "64M"), ("max_member_bytes", -1), ("max_document_bytes", 0),
     ("max_document_bytes", True)],
)  # fmt: skip
def test_ray_reads_refuse_a_limit_as_a_loader_does(jsonl: Path, limit: str, value: object) -> None:
    """Red team, session 28: ``read_openwebtext`` took them, and every task failed (a
    ``TypeError`` deep in the engine, or every member "too large"). Refused at the call, before
    Ray is asked, with the loader's message."""
    from openwebtext.ray import read_openwebtext

    with pytest.raises(ValueError, match=f"{limit} must be") as raised:
        read_openwebtext(str(jsonl), **{limit: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError) as loader:
        Options(**{limit: value})  # type: ignore[arg-type]
    assert str(raised.value) == str(loader.value)


def test_a_text_column_for_a_corpus_of_tars_is_refused(
    small_corpus: Path, owt: Callable[..., Ran]
) -> None:
    """A tar's documents are files, with no column: ``--text-column body`` was taken and
    ignored, a run reading the files' text while saying it read ``body``."""
    with pytest.raises(ValueError, match="text_column='body' names the text of parquet files"):
        Corpus.open(small_corpus, text_column="body")
    for command in ("stream", "index"):
        result = owt(command, str(small_corpus), "--text-column", "body")
        assert result.returncode == 2, result.stderr
        assert "holds neither (its documents are files in tars)" in result.stderr
    assert len(Corpus.open(small_corpus, text_column="text").units) > 0  # the default's name
