"""A token corpus pickled to a process that was not forked from the one that opened it (a
spawned process, a DataLoader's spawned worker, a Ray task) reads its files as the corpus
indexed them. Such a process inherits no document ends: it opened each file again with the
reader's defaults, so a corpus of its own eot was refused ("do not end with the end-of-text
id 256"), one of a signed dtype read as uint16 (an id the corpus leaves out, read as another),
a remote one refused ("a remote token file's index was not read in this process"), and a file
changed since the open read at its new cut, silently (a pickled storage carried no local
identity). Now the storage carries how each file was indexed (``Storage.tokens``) and, to a
process of the same host, the identities noted at the open: the file is indexed again there
the same way, once, and a change since is said to be, naming the file."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, CorruptMember, Loader
from openwebtext.source import CHANGED, FileInfo, Storage
from openwebtext.tokenfiles import megatron_index
from remote_servers import RangeServer
from support import rewrite_later

isolated_storage = remote_servers.isolated_storage  # fixture (autouse): fresh cache, storage

T = TypeVar("T")

#: Seconds a spawned process gets to read (a hung one is terminated and the test fails).
DEADLINE = 120.0
pytestmark = pytest.mark.timeout(2 * DEADLINE)

#: Documents ended by 9, not the bytes tokenizer's end-of-text id (256).
OWN_EOT = 9
OWN_DOCS = [[1, 2, OWN_EOT], [3, 4, 5, OWN_EOT], [6, OWN_EOT], [7, 8, 10, 11, OWN_EOT]]
#: Twelve ids, cut into 3, 3 and 6 by the index as first written, into 1, 7 and 4 after.
IDS = np.arange(1, 13, dtype="<u2")
FIRST_CUT, SECOND_CUT = [3, 6, 12], [1, 8, 12]
FIRST_DOCS = [[1, 2, 3], [4, 5, 6], [7, 8, 9, 10, 11, 12]]
#: int16 ids for GPT-2 (a datatrove ``.ds``): -20000 is outside its vocabulary (left out
#: under ``skip``), but 45536 < 50257 as uint16, which a reader's default would read.
SIGNED = np.array([1, 2, 3, -20000, 4, 5], "<i2")
SIGNED_ENDS = np.array([2, 4, 6], "<u8")
SIGNED_KEPT = [[1, 2], [4, 5]]


def _in_a_spawned_process(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a process started by multiprocessing's "spawn" (its arguments
    pickled to it), within ``DEADLINE``: the process is terminated on the way out, done or not.
    A bare process and a pipe, not a ``Pool``: a spawn context's pool keeps named semaphores in
    /dev/shm while it lives, which the leak guards of tests running beside it would see."""
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe(duplex=False)
    process = context.Process(target=_send_result, args=(there, function, args), daemon=True)
    process.start()
    there.close()
    try:
        if not here.poll(DEADLINE):
            raise TimeoutError(f"the spawned process did not answer in {DEADLINE} s")
        done, value = here.recv()
    finally:
        here.close()
        process.terminate()
        process.join(DEADLINE)
    if not done:
        raise value
    return cast(T, value)


def _send_result(there: Any, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Run in the spawned process: send ``(True, result)`` or ``(False, the exception)``."""
    try:
        there.send((True, function(*args)))
    except Exception as exc:  # (the library's errors pickle whole: ``errors.__reduce__``)
        there.send((False, exc))
    finally:
        there.close()


def _documents(loader: Loader) -> list[list[int]]:
    """Every document's ids (run in the spawned process too)."""
    with loader.iter() as it:
        return [d.tokens.tolist() for d in it]


def _own_eot(folder: Path) -> Path:
    path = folder / "train.bin"
    np.array([i for doc in OWN_DOCS for i in doc], "<u2").tofile(path)
    return path


def _megatron(folder: Path) -> Path:
    path = folder / "train.bin"
    IDS.tofile(path)
    (folder / "train.idx").write_bytes(megatron_index(np.array(FIRST_CUT), np.dtype("<u2")))
    return path


def _signed(folder: Path) -> Path:
    path = folder / "train.ds"
    SIGNED.tofile(path)
    (folder / "train.ds.index").write_bytes(SIGNED_ENDS.tobytes())
    return path


def test_a_corpus_of_its_own_eot_is_read_there_as_here(tmp_path: Path) -> None:
    """Was: CorruptMember "its 16 ids do not end with the end-of-text id 256" (the file
    opened again with the tokenizer's eot)."""
    corpus = Corpus.open_tokens(_own_eot(tmp_path), eot=OWN_EOT, unit_tokens=4)
    assert len(corpus.units) > 1
    loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False)
    assert _documents(loader) == OWN_DOCS
    assert _in_a_spawned_process(_documents, loader) == OWN_DOCS


def test_a_corpus_of_its_own_dtype_is_read_there_as_here(tmp_path: Path) -> None:
    """int16 ids: the document holding -20000 is left out here; there it was read as uint16,
    its id 45536 (a GPT-2 id), and kept."""
    corpus = Corpus.open_tokens(_signed(tmp_path), dtype="int16")
    loader = Loader(corpus, tokenizer="gpt2", workers=0, shuffle=False, on_error="skip")
    assert _documents(loader) == SIGNED_KEPT
    assert _in_a_spawned_process(_documents, loader) == SIGNED_KEPT


def test_the_ends_do_not_travel(tmp_path: Path) -> None:
    """What travels is how each file was indexed, not its ends (8 bytes a document): they
    are read again where the corpus lands."""
    path = tmp_path / "train.bin"
    np.tile(np.array([1, OWN_EOT], "<u2"), 100_000).tofile(path)
    corpus = Corpus.open_tokens(path, eot=OWN_EOT, unit_tokens=1 << 20)
    assert len(pickle.dumps(corpus)) < 10_000  # (the ends: 800,000 bytes)
    eot, dtype, *_ = corpus.storage.tokens[str(path)]
    assert (eot, dtype) == (OWN_EOT, "uint16")


def test_a_torch_dataloader_s_spawned_worker_reads_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from openwebtext.torch import OpenWebTextDataset

    corpus = Corpus.open_tokens(_own_eot(tmp_path), eot=OWN_EOT, unit_tokens=4)
    dataset = OpenWebTextDataset(corpus, tokenizer="bytes", shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1,
                                         multiprocessing_context="spawn",
                                         timeout=DEADLINE)  # fmt: skip
    assert [d.tokens.tolist() for d in loader] == OWN_DOCS


@pytest.mark.remote
@pytest.mark.parametrize(
    ("make", "name", "tokenizer", "want"),
    [(_megatron, "train.bin", "bytes", FIRST_DOCS), (_signed, "train.ds", "gpt2", SIGNED_KEPT)],
)
def test_a_remote_corpus_is_read_there_as_here(
    tmp_path: Path, make: Callable[[Path], Path], name: str, tokenizer: str, want: Any
) -> None:
    """Was: CorruptMember "a remote token file's index was not read in this process"."""
    pytest.importorskip("aiohttp")
    make(tmp_path)
    with RangeServer(tmp_path) as server:
        dtype = "int16" if name.endswith(".ds") else None
        corpus = Corpus.open_tokens(f"{server.url}/{name}", dtype=dtype)
        loader = Loader(corpus, tokenizer=tokenizer, workers=0, shuffle=False, on_error="skip")
        assert _documents(loader) == want
        assert _in_a_spawned_process(_documents, loader) == want


@pytest.mark.remote
def test_a_remote_run_is_read_there_with_its_meta_json_as_recorded(
    token_run: Path, tmp_path: Path
) -> None:
    """An ``owt tokenize`` run's files served with their ``meta.json``: what it recorded
    (the tokenizer the ids were written with) travels, checked against the reader's there."""
    pytest.importorskip("aiohttp")
    for name in ("train.bin", "train.idx", "meta.json"):
        shutil.copy(token_run / name, tmp_path / name)
    with RangeServer(tmp_path) as server:
        corpus = Corpus.open_tokens(f"{server.url}/train.bin", unit_tokens=1 << 12)
        assert corpus.storage.tokens[f"{server.url}/train.bin"].tokenizer is not None
        loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False)
        want = _documents(loader)
        assert len(want) > 1 and len(corpus.units) > 1
        assert _in_a_spawned_process(_documents, loader) == want


# -- changed since the open: refused, naming the file -------------------------------------------


@pytest.mark.parametrize("changed", ["train.bin", "train.idx"])
def test_a_file_changed_since_the_open_is_refused_there(tmp_path: Path, changed: str) -> None:
    """The ``.bin`` rewritten with another cut (eot 256: a reader's default would open it as
    it is now), or its ``.idx``: both were read at their new cut, silently."""
    if changed == "train.bin":
        path = tmp_path / "train.bin"
        np.array([1, 2, 3, 256, 4, 5, 256], "<u2").tofile(path)
        corpus = Corpus.open_tokens(path, eot=256)
        rewrite_later(path, np.array([7, 256, 8, 9, 10, 11, 256], "<u2").tobytes())  # another cut
    else:
        path = _megatron(tmp_path)
        corpus = Corpus.open_tokens(path)
        rewrite_later(tmp_path / changed, megatron_index(np.array(SECOND_CUT), np.dtype("<u2")))
    loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False)
    with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
        _in_a_spawned_process(_documents, loader)
    assert caught.value.path == str(path) and caught.value.member == corpus.units[0].member


@pytest.mark.remote
def test_a_remote_index_changed_since_the_open_is_refused_there(tmp_path: Path) -> None:
    """The ``.idx`` beside a remote ``.bin`` rewritten (the ``.bin`` as it was): the index
    fetched again is not the one indexed."""
    pytest.importorskip("aiohttp")
    _megatron(tmp_path)
    with RangeServer(tmp_path) as server:
        corpus = Corpus.open_tokens(f"{server.url}/train.bin")
        rewrite_later(tmp_path / "train.idx", megatron_index(np.array(SECOND_CUT), np.dtype("<u2")))
        loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False)
        with pytest.raises(CorruptMember, match="the file changed since it was indexed") as caught:
            _in_a_spawned_process(_documents, loader)
    assert caught.value.path == f"{server.url}/train.bin"
    assert CHANGED in str(caught.value) and "train.idx" in str(caught.value)


# -- local identities travel to a process of the same host only --------------------------------


def test_local_identities_travel_to_the_same_host_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of the files on another host has other mtimes and inodes: there, only the
    URLs' identities are kept (the file is still indexed again with the corpus's eot)."""
    corpus = Corpus.open_tokens(_own_eot(tmp_path), eot=OWN_EOT)
    corpus.storage.remember("https://h.invalid/x.bin", FileInfo(3, "etag:3"))
    sent = pickle.dumps(corpus.storage)
    here: Storage = pickle.loads(sent)
    assert here.identities == corpus.storage.identities and here.tokens == corpus.storage.tokens
    monkeypatch.setattr(socket, "gethostname", lambda: "another-host.invalid")
    there: Storage = pickle.loads(sent)
    assert there.identities == {"https://h.invalid/x.bin": FileInfo(3, "etag:3")}
    assert there.tokens == corpus.storage.tokens


def test_local_identities_do_not_travel_to_another_mount_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container sharing the host's name and boot (``--net=host``) sees other files at the
    same paths (a bind-mounted copy: other inodes): its mount namespace tells it apart, and a
    corpus pickled to it reads its copy, as on another host (was: refused as changed)."""
    if not os.path.exists("/proc/self/ns/mnt"):
        pytest.skip("no mount namespaces here (not Linux)")
    corpus = Corpus.open_tokens(_own_eot(tmp_path), eot=OWN_EOT)
    sent = pickle.dumps(corpus.storage)
    readlink = os.readlink

    def elsewhere(path: Any, *args: Any, **kwargs: Any) -> Any:
        return "mnt:[1]" if str(path) == "/proc/self/ns/mnt" else readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", elsewhere)
    there: Storage = pickle.loads(sent)
    assert corpus.storage.identities and not there.identities


def test_a_detached_storage_notes_its_own(tmp_path: Path) -> None:
    """``Storage.detached`` (what ``read_openwebtext`` sends) is a storage of its own: what is
    noted in it is not noted in the corpus's (they shared their tables)."""
    corpus = Corpus.open_tokens(_own_eot(tmp_path), eot=OWN_EOT)
    before = (dict(corpus.storage.identities), dict(corpus.storage.tokens))
    copy = corpus.storage.detached()
    copy.remember("https://h.invalid/y.bin", FileInfo(3, "etag:3"))
    copy.tokens["elsewhere.bin"] = copy.tokens[str(tmp_path / "train.bin")]
    assert (corpus.storage.identities, corpus.storage.tokens) == before


@pytest.mark.remote
def test_a_remote_index_is_fetched_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each copy of a corpus unpickled in one process (a task's, a worker's) indexes its remote
    files again from the index the first copy fetched there: one fetch, not one per copy
    (~20 bytes a document: 160 MB for OpenWebText's)."""
    pytest.importorskip("aiohttp")
    from openwebtext.index import tokens as index_tokens

    fetched: list[str] = []
    whole = index_tokens._whole
    def counted(*args: Any, **kwargs: Any) -> Any:
        fetched.append(args[0])
        return whole(*args, **kwargs)

    monkeypatch.setattr(index_tokens, "_whole", counted)
    _megatron(tmp_path)
    with RangeServer(tmp_path) as server:
        corpus = Corpus.open_tokens(f"{server.url}/train.bin")
        opened = len(fetched)
        for _ in range(3):
            copy = pickle.loads(pickle.dumps(corpus))
            loader = Loader(copy, tokenizer="bytes", workers=0, shuffle=False)
            assert _documents(loader) == FIRST_DOCS
    assert len(fetched) == opened + 1, fetched
