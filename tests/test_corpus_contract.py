"""The corpus contract: what every input kind guarantees, read locally or over HTTP (a
``remote_servers.RangeServer`` on 127.0.0.1): the same units and order wherever it lies, a
seeded order pinned by golden values and the same for any worker count, exact resume, even
shares under both rules, reshard, ``owt tokenize`` (every document, the same bins from either
place) and the text column. Kind-specific behaviour (units, damage) stays in each kind's file:
test_loader.py and test_stream_*.py (tars), test_parquet.py, test_jsonl.py, test_token_corpus.py.
"""

from __future__ import annotations

import collections
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import remote_servers
from openwebtext import Corpus, Loader, reshard
from openwebtext.index import jsonl
from remote_servers import RangeServer
from resumable import check_save_load
from support import Owt, names
from tables_support import sample_texts, write_jsonl, write_parquet

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

isolated_storage = remote_servers.isolated_storage  # autouse: a fresh cache folder each test

PARQUET_TEXTS = sample_texts(150, seed=1)
JSONL_TEXTS = sample_texts(120, seed=2)
UNIT_TOKENS = 3_000  # ids a unit of a token corpus holds: ~20 units of the small corpus's


@dataclass(frozen=True)
class Kind:
    """One input kind: how its test corpus is made, opened and read, and its golden order."""

    name: str
    #: Writes the corpus into an empty folder; returns what to open, relative to it.
    write: Callable[[Path], str]
    #: Options of every ``Loader`` over it.
    options: dict[str, Any] = field(default_factory=dict)
    #: (seed, shuffle buffer) -> the first names; changing them breaks every saved state.
    golden: tuple[int, int, list[str]] | None = None
    #: The first document's member under the golden options, when pinned.
    golden_member: str | None = None
    #: The source texts in corpus order (text kinds), for what tokenize writes.
    texts: list[str] | None = None
    #: Writes a file whose text is in the column (field) "body"; returns its name.
    write_body: Callable[[Path, list[str]], str] | None = None

    def open(self, where: str) -> Corpus:
        if self.name == "tokens":
            return Corpus.open_tokens(where, unit_tokens=UNIT_TOKENS)
        return Corpus.open(where)

    def loader(self, corpus: Corpus, **options: Any) -> Loader:
        return Loader(corpus, **{**self.options, **options})


def _tar(small_corpus: Path) -> Callable[[Path], str]:
    def write(root: Path) -> str:
        shutil.copytree(small_corpus, root, dirs_exist_ok=True)
        return ""

    return write


def _parquet(root: Path) -> str:
    """a.parquet (100 rows, row groups of 17: 6) and b.parquet (50 rows: 3). (No README:
    a local folder leaves one out, test_parquet.py; a listing over HTTP does not.)"""
    write_parquet(root / "a.parquet", PARQUET_TEXTS[:100])
    write_parquet(root / "b.parquet", PARQUET_TEXTS[100:], compression="zstd")
    return ""


def _parquet_body(root: Path, texts: list[str]) -> str:
    write_parquet(root / "body.parquet", texts, column="body")
    return "body.parquet"


def _jsonl_plain(root: Path) -> str:
    """One plain file, cut at lines into units of about 4 KB (``chunks`` below)."""
    write_jsonl(root / "g.jsonl", JSONL_TEXTS)
    return "g.jsonl"


def _jsonl_compressed(suffix: str) -> Callable[[Path], str]:
    def write(root: Path) -> str:
        """Two files of one compression, 80 and 40 documents: a unit each."""
        write_jsonl(root / f"part-0{suffix}", JSONL_TEXTS[:80])
        write_jsonl(root / f"part-1{suffix}", JSONL_TEXTS[80:])
        return ""

    return write


def _jsonl_body(root: Path, texts: list[str]) -> str:
    write_jsonl(root / "b.jsonl.gz", texts, field="body")
    return "b.jsonl.gz"


def _tokens(token_run: Path) -> Callable[[Path], str]:
    def write(root: Path) -> str:
        """train.bin with its megatron index beside it."""
        for name in ("train.bin", "train.idx"):
            shutil.copy(token_run / name, root / name)
        return "train.bin"

    return write


KIND_NAMES = ["tar", "parquet", "jsonl", "jsonl.gz", "jsonl.zst", "tokens"]
TEXT_KINDS = KIND_NAMES[:-1]


@pytest.fixture
def chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain JSON lines cut into units of about 4 KB (set before the workers fork)."""
    monkeypatch.setattr(jsonl, "CHUNK_BYTES", 4096)


@pytest.fixture
def kinds(
    small_corpus: Path, small_docs: dict[str, str], token_run: Path, chunks: None
) -> dict[str, Kind]:
    return {
        # Golden values of the tar corpus: changing them changes every seeded stream and
        # breaks every saved state: bump the plan, then update them here on purpose.
        "tar": Kind(
            "tar", _tar(small_corpus), {"workers": 2},
            golden=(0, 30, [
                "0000056-dfc5dce62c81a202bdaa0b830e285a65.txt",
                "0000073-5bd5bec4e6484d59aca59cc6c32a0323.txt",
                "0000071-b06f087c8e9bc10bb2d71b6fd68a1ac7.txt",
                "0000074-df0a4b6cfb487bf4383c34ad15b984b1.txt",
            ]),
            golden_member="urlsf_subset00-3_data.xz",
            texts=list(small_docs.values()),
        ),
        # Golden: changing them breaks every saved checkpoint of a parquet corpus.
        "parquet": Kind(
            "parquet", _parquet, {"workers": 0},
            golden=(3, 40, ["b.parquet#23", "b.parquet#21", "a.parquet#71", "a.parquet#83"]),
            texts=PARQUET_TEXTS, write_body=_parquet_body,
        ),
        # Golden: changing them breaks every saved checkpoint of a JSON lines corpus.
        "jsonl": Kind(
            "jsonl", _jsonl_plain, {"workers": 0},
            golden=(0, 40, ["g.jsonl@7583", "g.jsonl@8649", "g.jsonl@38865"]),
            texts=JSONL_TEXTS, write_body=_jsonl_body,
        ),
        "jsonl.gz": Kind("jsonl.gz", _jsonl_compressed(".jsonl.gz"), {"workers": 0},
                         texts=JSONL_TEXTS),
        "jsonl.zst": Kind("jsonl.zst", _jsonl_compressed(".jsonl.zst"), {"workers": 0},
                          texts=JSONL_TEXTS),
        # Golden: seed 5's first documents. Changing it breaks every saved state of a token
        # corpus.
        "tokens": Kind(
            "tokens", _tokens(token_run), {"tokenizer": "bytes", "workers": 0},
            golden=(5, 40, ["4", "6", "5", "59", "44", "7"]),
        ),
    }  # fmt: skip


@contextmanager
def placed(root: Path, place: str) -> Iterator[str]:
    """Where ``root`` is read from: itself, or the URL of a range server of it."""
    if place == "local":
        yield str(root)
        return
    with RangeServer(root) as server:
        yield server.url


@dataclass
class Case:
    """A kind's corpus written in ``root``, read from ``where`` (``root`` itself, or a range
    server's URL of it)."""

    kind: Kind
    root: Path
    target: str  # what to open, relative to the folder ("": the folder)
    base: str  # the folder's path or URL

    @property
    def where(self) -> str:
        return (
            f"{self.base}/{self.target}"
            if self.target or self.base.startswith("http")
            else (self.base)
        )

    @property
    def local_where(self) -> str:
        return str(self.root / self.target) if self.target else str(self.root)

    def open(self) -> Corpus:
        return self.kind.open(self.where)

    def loader(self, **options: Any) -> Loader:
        return self.kind.loader(self.open(), **options)

    def local(self) -> Corpus:
        return self.kind.open(self.local_where)


REMOTE = pytest.mark.remote  # reading over HTTP: the remote group (-m remote)


@pytest.fixture(params=["local", pytest.param("http", marks=REMOTE)])
def place(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _case(kind: Kind, place: str, tmp_path: Path) -> Iterator[Case]:
    root = tmp_path / "corpus"
    root.mkdir()
    target = kind.write(root)
    with placed(root, place) as base:
        yield Case(kind, root, target, base)


@pytest.fixture(params=KIND_NAMES)
def case(
    request: pytest.FixtureRequest, kinds: dict[str, Kind], place: str, tmp_path: Path
) -> Iterator[Case]:
    """Each kind's corpus, in a private folder (counting may cache beside it), in each place."""
    yield from _case(kinds[request.param], place, tmp_path)


@pytest.fixture(params=KIND_NAMES)
def local_case(
    request: pytest.FixtureRequest, kinds: dict[str, Kind], tmp_path: Path
) -> Iterator[Case]:
    """Each kind's corpus, read locally: what follows from its units and the plan (the same
    over HTTP, whose units ``test_http_reads_the_local_units_in_the_local_order`` checks)."""
    yield from _case(kinds[request.param], "local", tmp_path)


@pytest.fixture(params=[pytest.param(name, marks=REMOTE) for name in KIND_NAMES])
def http_case(
    request: pytest.FixtureRequest, kinds: dict[str, Kind], tmp_path: Path
) -> Iterator[Case]:
    """Each kind's corpus, read over HTTP."""
    yield from _case(kinds[request.param], "http", tmp_path)


@pytest.fixture(params=TEXT_KINDS)
def text_case(
    request: pytest.FixtureRequest, kinds: dict[str, Kind], place: str, tmp_path: Path
) -> Iterator[Case]:
    """Each kind's corpus that holds texts (all but token files), in each place."""
    yield from _case(kinds[request.param], place, tmp_path)


# -- the contract ---------------------------------------------------------------------


def test_http_reads_the_local_units_in_the_local_order(http_case: Case) -> None:
    case = http_case
    remote, local = case.open(), case.local()
    assert [u[1:] for u in remote.units] == [u[1:] for u in local.units]
    # A state names the objects it read (a remote file's validator included): a state of the
    # local copy does not resume on the remote one.
    assert remote.fingerprint() != local.fingerprint()
    assert case.open().units == remote.units  # opened again: from the index cache
    loader, reference = case.kind.loader(remote), case.kind.loader(local, workers=0)
    assert names(loader.replace(shuffle=False)) == names(reference.replace(shuffle=False))
    for workers in (0, 2):
        assert names(loader.replace(seed=4, workers=workers)) == names(reference.replace(seed=4))


def test_seeded_order_is_pinned_and_the_same_for_any_worker_count(local_case: Case) -> None:
    case = local_case
    corpus = case.open()
    every = names(case.kind.loader(corpus, shuffle=False))
    seed, buffer, first = case.kind.golden or (4, 30, [])
    docs = list(case.kind.loader(corpus, seed=seed, shuffle_buffer=buffer, workers=0))
    got = names(docs)
    assert got[: len(first)] == first
    if case.kind.golden_member is not None:
        assert docs[0].member == case.kind.golden_member
    assert got == names(case.kind.loader(corpus, seed=seed, shuffle_buffer=buffer, workers=2))
    assert sorted(got) == sorted(every) and len(set(every)) == len(every)  # each once
    assert got != names(case.kind.loader(corpus, seed=seed + 1, shuffle_buffer=buffer))


def _key(doc: Any) -> Any:
    tokens = getattr(doc, "tokens", None)
    return doc.name if tokens is None else (doc.name, tokens.tolist())


def test_resume_exactly(local_case: Case) -> None:
    """Cut anywhere (``check_save_load``), resumed with another worker count."""
    loader = local_case.loader(seed=1, shuffle_buffer=25, workers=0)

    def start(loader: Loader) -> Any:
        return lambda state, epochs: loader.replace(epochs=epochs).iter(state=state)

    check_save_load(start(loader), key=_key, resumed=start(loader.replace(workers=2)))


def test_resume_over_http(http_case: Case) -> None:
    """Cut once, in the middle of a unit, with the workers fetching ranges ahead."""
    loader = http_case.loader(seed=11, workers=2, shuffle_buffer=20)
    # The whole run read locally in-process: the same units in the same order as over HTTP
    # (``test_http_reads_the_local_units_in_the_local_order``).
    local = http_case.kind.loader(http_case.local(), seed=11, workers=0, shuffle_buffer=20)
    whole = [_key(d) for d in local]
    with loader.iter() as it:
        head = [_key(next(it)) for _ in range(37)]
        state = it.state_dict()
    with loader.iter(state) as it:
        assert head + [_key(d) for d in it] == whole


@pytest.mark.parametrize(
    ("place", "rule"),
    [("local", "drop"), ("local", "pad"), pytest.param("http", "drop", marks=REMOTE)],
    indirect=["place"],
)
def test_even_shares(case: Case, rule: str) -> None:
    corpus = case.open()
    every = names(case.kind.loader(corpus, shuffle=False))
    n, world = len(every), 4
    shares = [names(case.kind.loader(corpus, rank=r, world_size=world, seed=2, even=rule,
                                     workers=2 if r == 0 else 0))
              for r in range(world)]  # fmt: skip
    assert [len(s) for s in shares] == [n // world if rule == "drop" else -(-n // world)] * world
    got = collections.Counter(name for share in shares for name in share)
    assert set(got) <= set(every)
    if rule == "drop":  # cut at documents: nothing twice, fewer than a rank's worth left out
        assert len(got) == world * (n // world) and max(got.values()) == 1
    else:  # every document, and fewer than a rank's worth repeated
        assert len(got) == n


@pytest.mark.parametrize("rule", ["drop", "pad"])
def test_reshard_hands_out_the_rest_once(local_case: Case, rule: str) -> None:
    case = local_case
    corpus = case.open()
    every = names(case.kind.loader(corpus, shuffle=False))
    opts: dict[str, Any] = {"seed": 3, "shuffle_buffer": 20, "even": rule}
    epoch = [d.name for r in range(4) for d in case.kind.loader(corpus, rank=r, world_size=4,
                                                                  **opts)]  # fmt: skip
    delivered, states = [], []
    for rank, point in enumerate((0, 3, 7, 11)):
        with case.kind.loader(corpus, rank=rank, world_size=4, **opts).iter() as it:
            delivered += [next(it).name for _ in range(point)]
            states.append(json.loads(json.dumps(it.state_dict())))
    rest, dropped = [], 0
    for rank, state in enumerate(reshard(states, 3)):
        loader = case.kind.loader(corpus, rank=rank, world_size=3, **opts)
        with loader.iter(state=state) as it:
            rest += [d.name for d in it]
            dropped += it.stats.dropped_documents
    got = collections.Counter(delivered + rest)
    if rule == "drop":  # (what the old shares left out too: their last rank had not counted it)
        assert not got - collections.Counter(epoch)  # nothing twice
        assert sum((collections.Counter(every) - got).values()) == dropped
    else:
        assert set(got) == set(every)
        assert sum(got.values()) - len(every) <= 3 + 2  # pads < 4 on the old ranks, < 3 new


def test_tokenize_writes_every_document_and_the_local_bins(
    owt: Owt, text_case: Case, tmp_path: Path
) -> None:
    texts = text_case.kind.texts
    assert texts is not None
    bins = []
    for source in dict.fromkeys([text_case.where, text_case.local_where]):
        out = tmp_path / f"bins{len(bins)}"
        result = owt("tokenize", source, "--out", str(out), "--tokenizer", "bytes",
                     "--val-fraction", "0.2", "-j", "2", "-q")  # fmt: skip
        assert result.returncode == 0, result.stderr
        meta = json.loads((out / "meta.json").read_text())
        assert sum(meta["counts"]["documents"].values()) == len(texts)
        assert sum(meta["counts"]["tokens"].values()) == sum(len(t.encode()) + 1 for t in texts)
        bins.append([(out / n).read_bytes() for n in ("train.bin", "val.bin")])
    assert all(b == bins[0] for b in bins)


@pytest.mark.parametrize("name", ["parquet", "jsonl"])
def test_text_column_names_another_column(
    owt: Owt, kinds: dict[str, Kind], name: str, place: str, tmp_path: Path
) -> None:
    write_body = kinds[name].write_body
    assert write_body is not None
    texts = (kinds[name].texts or [])[:30]
    target = write_body(tmp_path / "body", texts)
    with placed(tmp_path / "body", place) as base:
        where = f"{base}/{target}"
        corpus = Corpus.open(where, text_column="body")
        assert corpus.units[0].kind in ("parquet", "jsonl.gz:body")
        assert [d.text for d in Loader(corpus, shuffle=False, workers=0)] == texts
        result = owt("stream", where, "--text-column", "body", "--no-shuffle", "--jsonl", "-q")
        assert result.returncode == 0, result.stderr
        assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == texts
