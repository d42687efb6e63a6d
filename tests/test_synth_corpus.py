"""Tests of the synthetic corpus on disk (openwebtext.synth): layout, golden bytes, writing
safely, the default corpus. The documents themselves: test_synth_text.py."""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import re
import signal
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from openwebtext import synth
from openwebtext.errors import WorkerError
from openwebtext.synth import builtin
from support import child_pids

TAR_RE = re.compile(r"^urlsf_subset(\d{2})\.tar$")
MEMBER_RE = re.compile(r"^openwebtext/urlsf_subset(\d{2})-(\d+)_data\.xz$")
DOC_RE = re.compile(r"^(\d{7})-([0-9a-f]{32})\.txt$")
XZ_MAGIC = b"\xfd7zXZ\x00"
GNU_MAGIC = b"ustar  \x00"  # bytes 257..265 of a GNU-format tar header

# sha256 of the first document of the seed-0 corpus (subset 0, member 1, document 0).
# Changing the generator changes this and every saved golden: bump
# synth.GENERATOR_VERSION (the default corpus' cache folder name) when it does.
GOLDEN_FIRST_DOC_SHA256 = "cc961a34cb6882487460b5a46089c30f697531dac0e88de299e391b4192d6fd3"
# sha256 of the (decompressed) inner tar of member 1 of the 2 x 3 x 20 seed-0 corpus:
# names, tar headers and texts, independent of the liblzma version.
GOLDEN_INNER_TAR_SHA256 = "fdb42611f06e7741c53d9e1f120c2f8845d662efc3c971302194d36e10d21897"
# Every member of the 2 x 3 x 20 seed-0 corpus, computed with the generator as it was
# before it was made faster (commit c3d3b59): {member: (sha256 of the xz bytes, sha256 of
# the inner tar)}. The inner tars pin names, headers and texts whatever the liblzma. The xz
# bytes pin the compression too, but only for one encoder: xz(1) warns that its output may
# change between liblzma versions and builds (these are from liblzma 5.4.1); a member that
# is not ``lzma.compress(inner tar, preset 6)`` on this machine fails whatever the version.
# Outer tars: the members with their tar headers.
GOLDEN_MEMBERS = {
    "openwebtext/urlsf_subset00-1_data.xz": (
        "3a75b86431d0403861d09290cf8c310a34e5908ea1185d3634850738e8a7e379",
        "fdb42611f06e7741c53d9e1f120c2f8845d662efc3c971302194d36e10d21897",
    ),
    "openwebtext/urlsf_subset00-2_data.xz": (
        "ae3e837af0ddd7a86f06a6240b59d06e08e80a17d6332400e13645cba958e6d6",
        "b43f80c8dbaa9f6fdf4f36c1df0c529eec634bdb31334ac439113c8cc346045d",
    ),
    "openwebtext/urlsf_subset00-3_data.xz": (
        "d118c03dfd0996ea1f3b9d88df30dde4786f7c814820ef55043e1e334a9daf49",
        "d1e653745a02b2b1f258c139d882b7ba10633004932f418c2fa99349d53d1b86",
    ),
    "openwebtext/urlsf_subset01-1_data.xz": (
        "b12f8c8730809b662f2b75b3bdce65f9c23c6efc4ca8ef9edd5081cb7bc54506",
        "ddb27adcb5cac2a57c1489803edb3e59b6786cd2d9b23c563d75e0e0a55c11a5",
    ),
    "openwebtext/urlsf_subset01-2_data.xz": (
        "abc5db8b7fad1938a62db5d975b3206c5123038a309a54c9edea91495172b2e8",
        "4982b6095b42d47f80e9cef03c37561ddf7f33244bad53693e0c2b5834ec9a60",
    ),
    "openwebtext/urlsf_subset01-3_data.xz": (
        "dba673f1daacd13237c013469bb1a507d958464012822f9bac23595d8ca1dd7a",
        "00697e7ad53f2f19d3c250b4bfb9cab64af65d4d50436007bc99a3cbb6d9c09a",
    ),
}
GOLDEN_OUTER_TARS = {
    "urlsf_subset00.tar": "bdc78af54eca878ecada1dc58198b48f01210391dc55c9df7c963c5eac57fe55",
    "urlsf_subset01.tar": "5a3090f573935a94a2abc82ad52931aac4768a59945472e5ad1265fae673429e",
}


def sha256(path: Path) -> str:
    return sha256_bytes(path.read_bytes())


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_corpus(path: Path) -> dict[str, list[tuple[str, list[tuple[tarfile.TarInfo, bytes]]]]]:
    """{outer tar name: [(member name, [(inner TarInfo, document bytes), ...]), ...]}."""
    corpus: dict[str, list[tuple[str, list[tuple[tarfile.TarInfo, bytes]]]]] = {}
    for tar_path in sorted(path.glob("*.tar")):
        members = []
        with tarfile.open(tar_path) as outer:
            for info in outer.getmembers():
                fh = outer.extractfile(info)
                assert fh is not None
                data = fh.read()
                assert data.startswith(XZ_MAGIC), info.name
                inner_bytes = lzma.decompress(data, format=lzma.FORMAT_XZ)
                assert inner_bytes[257:265] == GNU_MAGIC
                docs = []
                with tarfile.open(fileobj=io.BytesIO(inner_bytes)) as inner:
                    for doc in inner.getmembers():
                        dfh = inner.extractfile(doc)
                        assert dfh is not None
                        docs.append((doc, dfh.read()))
                members.append((info.name, docs))
        corpus[tar_path.name] = members
    return corpus


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, synth.SynthReport]:
    out = tmp_path_factory.mktemp("tiny") / "corpus"
    report = synth.write_corpus(out, subsets=2, members=3, docs=20, seed=0, workers=1)
    return out, report


def test_layout_and_names(tiny: tuple[Path, synth.SynthReport]) -> None:
    out, report = tiny
    assert sorted(p.name for p in out.iterdir()) == [
        synth.COMPLETE_MARKER,
        "urlsf_subset00.tar",
        "urlsf_subset01.tar",
    ]
    corpus = read_corpus(out)
    numbers: list[int] = []
    text_bytes = compressed_bytes = 0
    for subset, (tar_name, members) in enumerate(sorted(corpus.items())):
        m = TAR_RE.match(tar_name)
        assert m is not None and int(m.group(1)) == subset
        assert (out / tar_name).read_bytes()[257:265] == GNU_MAGIC
        assert len(members) == 3
        for k, (member, docs) in enumerate(members, start=1):
            mm = MEMBER_RE.match(member)
            assert mm is not None, member
            assert (int(mm.group(1)), int(mm.group(2))) == (subset, k)
            assert len(docs) == 20
            for info, data in docs:
                dm = DOC_RE.match(info.name)
                assert dm is not None, info.name
                assert info.isreg()
                assert dm.group(2) == hashlib.md5(data).hexdigest()
                numbers.append(int(dm.group(1)))
                text_bytes += len(data)
                data.decode("utf-8")  # valid UTF-8
    with tarfile.open(out / "urlsf_subset01.tar") as outer:
        infos = outer.getmembers()
        compressed_bytes = sum(i.size for i in infos)
        for i in infos:
            assert (i.mtime, i.mode, i.uid, i.gid, i.uname, i.gname) == (
                synth.TAR_MTIME,
                0o644,
                0,
                0,
                "",
                "",
            )
    with tarfile.open(out / "urlsf_subset00.tar") as outer:
        compressed_bytes += sum(i.size for i in outer.getmembers())
    assert numbers == list(range(120))  # running number over the whole corpus
    assert report == synth.SynthReport(
        path=out,
        subsets=2,
        members=3,
        documents=120,
        text_bytes=text_bytes,
        compressed_bytes=compressed_bytes,
        seconds=report.seconds,
    )
    assert 2.0 < report.ratio < 4.0


def test_inner_tar_metadata(tiny: tuple[Path, synth.SynthReport]) -> None:
    out, _ = tiny
    (_, docs) = read_corpus(out)["urlsf_subset00.tar"][0]
    for info, _data in docs:
        assert (info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname) == (
            1555000000,
            0o644,
            0,
            0,
            "",
            "",
        )


def test_documents_are_the_member_streams(tiny: tuple[Path, synth.SynthReport]) -> None:
    out, _ = tiny
    _, docs = read_corpus(out)["urlsf_subset01.tar"][1]  # subset 1, member K=2
    texts = [data.decode() for _, data in docs]
    assert texts == synth.member_documents(0, 1, 2, 20)
    # Each member is its own stream: fewer documents give a prefix of the same texts.
    assert synth.member_documents(0, 1, 2, 3) == texts[:3]


def test_golden_first_document(tiny: tuple[Path, synth.SynthReport]) -> None:
    out, _ = tiny
    info, data = read_corpus(out)["urlsf_subset00.tar"][0][1][0]
    assert info.name.startswith("0000000-")
    assert hashlib.sha256(data).hexdigest() == GOLDEN_FIRST_DOC_SHA256
    with tarfile.open(out / "urlsf_subset00.tar") as outer:
        fh = outer.extractfile(outer.getmembers()[0])
        assert fh is not None
        inner = lzma.decompress(fh.read())
    assert hashlib.sha256(inner).hexdigest() == GOLDEN_INNER_TAR_SHA256


def test_golden_every_member(tiny: tuple[Path, synth.SynthReport]) -> None:
    """The corpus bytes are the ones the original (slow) generator wrote, member by member."""
    out, _ = tiny
    members: dict[str, tuple[str, str]] = {}
    for name in GOLDEN_OUTER_TARS:
        with tarfile.open(out / name) as outer:
            for info in outer.getmembers():
                fh = outer.extractfile(info)
                assert fh is not None
                xz = fh.read()
                inner = lzma.decompress(xz, format=lzma.FORMAT_XZ)
                assert xz == lzma.compress(inner, format=lzma.FORMAT_XZ, preset=6), info.name
                members[info.name] = (sha256_bytes(xz), sha256_bytes(inner))
    assert {k: v[1] for k, v in members.items()} == {k: v[1] for k, v in GOLDEN_MEMBERS.items()}
    assert members == GOLDEN_MEMBERS, "same texts, other xz bytes: another liblzma encoder?"
    assert {name: sha256(out / name) for name in GOLDEN_OUTER_TARS} == GOLDEN_OUTER_TARS


def test_same_seed_same_bytes_whatever_the_workers(
    tiny: tuple[Path, synth.SynthReport], tmp_path: Path
) -> None:
    out, _ = tiny
    again = synth.write_corpus(tmp_path / "again", 2, 3, 20, seed=0, workers=2).path
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert sha256(out / name) == sha256(again / name), name
    other = synth.write_corpus(tmp_path / "other", 2, 3, 20, seed=1, workers=2).path
    for name in ("urlsf_subset00.tar", "urlsf_subset01.tar"):
        assert sha256(out / name) != sha256(other / name)



@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_worker_processes_are_gone_afterwards(tmp_path: Path) -> None:
    report = synth.write_corpus(tmp_path / "c", 1, 4, 3, workers=2)
    assert report.documents == 12
    assert child_pids() == []  # (multiprocessing's resource tracker aside: not ours)


#: A member's result large enough that a worker sends it over many writes (a pipe holds 64 KiB).
_BIG = b"x" * (48 << 20)


def _big_member(*job: int) -> tuple[bytes, int]:
    return _BIG, 0


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_a_stop_while_workers_send_their_results_ends_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C of ``owt synth -j 2`` stops the workers at once (SIGKILL): one killed while it
    wrote its result left half a message that the executor's reading thread waited on for
    ever, and ``close()`` joined that thread (the run hung after Ctrl-C)."""
    monkeypatch.setattr(synth.pack, "_make_member", _big_member)  # (forked: the workers' too)
    results = synth.pack._InOrder([(0, 0, k, 1, 0, 0) for k in range(12)], workers=2)
    assert len(next(results)[0]) == len(_BIG)
    time.sleep(0.5)  # (the workers are in the middle of sending the next ones)
    closing = threading.Thread(target=results.close, daemon=True)
    closing.start()
    closing.join(30)
    assert not closing.is_alive(), "close() hung on a result half sent"
    assert child_pids() == []


_MAKE_MEMBER = synth.pack._make_member


def _failing_member(*job: int) -> tuple[bytes, int]:
    if job[2] == 3:
        raise ValueError("no member 3 today")
    return _MAKE_MEMBER(*job)


def _killed_member(*job: int) -> tuple[bytes, int]:
    if job[2] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return _MAKE_MEMBER(*job)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
@pytest.mark.parametrize(
    ("member", "error", "says"),
    [(_failing_member, ValueError, "no member 3 today"),
     (_killed_member, WorkerError, "a worker process ended without its result")],
)  # fmt: skip
def test_a_worker_s_error_or_death_is_raised_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, member: Any, error: type, says: str
) -> None:
    monkeypatch.setattr(synth.pack, "_make_member", member)
    with pytest.raises(error, match=says):
        synth.write_corpus(tmp_path / "corpus", 1, 6, 2, workers=2)
    assert list(tmp_path.iterdir()) == []
    assert child_pids() == []


def test_a_worker_s_error_carries_the_worker_s_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error a worker raised is raised from its traceback in the worker (the line that
    raised it), as ``concurrent.futures`` shows one: not only its message."""
    monkeypatch.setattr(synth.pack, "_make_member", _failing_member)
    with pytest.raises(ValueError, match="no member 3 today") as caught:
        synth.write_corpus(tmp_path / "corpus", 1, 6, 2, workers=2)
    cause = str(caught.value.__cause__)
    assert "in _failing_member" in cause
    assert 'raise ValueError("no member 3 today")' in cause


def _stopped_member(*job: int) -> tuple[bytes, int]:
    if job[2] == 3:
        os.kill(os.getpid(), signal.SIGSTOP)
    return _MAKE_MEMBER(*job)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_a_stopped_worker_is_an_error_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker stopped (SIGSTOP) made ``owt synth -j 2`` wait for ever on its result. It is
    a ``WorkerError`` once it has sent nothing for its deadline, and the stopped worker is
    killed with the others."""
    monkeypatch.setattr(synth.pack, "_make_member", _stopped_member)
    monkeypatch.setattr(synth.pack._InOrder, "_PATIENCE", 2.0)
    monkeypatch.setattr(synth.pack._InOrder, "_PER_DOCUMENT", 0.0)
    with pytest.raises(WorkerError, match=r"a worker sent nothing for 2 s \(stopped, or stuck"):
        synth.write_corpus(tmp_path / "corpus", 1, 6, 2, workers=2)
    assert list(tmp_path.iterdir()) == []
    assert child_pids() == []


# --------------------------------------------------------------------------------------
# Writing safely
# --------------------------------------------------------------------------------------


def test_non_empty_out_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        synth.write_corpus(out, 1, 1, 2, workers=1)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # no temp folder left
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(FileExistsError):
        synth.write_corpus(a_file, 1, 1, 2, workers=1)


def test_empty_out_folder_is_used_and_no_temp_is_left(tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    out.mkdir()
    report = synth.write_corpus(out, 1, 2, 3, workers=1)
    assert report.documents == 6
    assert (out / "urlsf_subset00.tar").is_file()
    assert (out / synth.COMPLETE_MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_interrupted_run_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = synth.pack._make_member
    calls: list[int] = []

    def failing(*args: Any) -> tuple[bytes, int]:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(synth.pack, "_make_member", failing)
    with pytest.raises(KeyboardInterrupt):
        synth.write_corpus(tmp_path / "corpus", 2, 2, 2, workers=1)
    assert len(calls) == 3
    assert list(tmp_path.iterdir()) == []


def test_lost_rename_race_raises_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "corpus"
    real_make = synth.pack._make_member

    def other_process_wins(*args: Any) -> tuple[bytes, int]:
        if not out.exists():  # someone else completes `out` while we generate
            out.mkdir()
            (out / "theirs.txt").write_text("theirs")
        return real_make(*args)

    monkeypatch.setattr(synth.pack, "_make_member", other_process_wins)
    with pytest.raises(FileExistsError, match="someone else"):
        synth.write_corpus(out, 1, 2, 2, workers=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]


def test_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synth.write_corpus(tmp_path / "quiet", 1, 2, 2, workers=1)
    assert capsys.readouterr().err == ""
    synth.write_corpus(tmp_path / "loud", 1, 2, 2, workers=1, progress=True)
    err = capsys.readouterr().err
    assert "2/2" in err and "member" in err


def test_bad_parameters(tmp_path: Path) -> None:
    for kwargs in (
        {"subsets": 0},
        {"subsets": 101},
        {"members": 0},
        {"docs": 0},
        {"seed": -1},
        {"preset": 10},
        {"subsets": 100, "members": 1000, "docs": 101},  # more than 10**7 documents
        # session 28 (red team): taken (a bool), or failed deep inside numpy or lzma
        {"subsets": True},
        {"seed": 1.5},
        {"docs": 2.0},
        {"preset": 9.0},
    ):
        with pytest.raises(ValueError, match=f"{next(iter(kwargs))} must be an int|at most"):
            synth.write_corpus(tmp_path / "c", **kwargs)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_numpy_integers_are_taken_as_ints(tmp_path: Path) -> None:
    """They failed in the JSON of the marker, after the whole corpus was written."""
    import json

    import numpy as np

    report = synth.write_corpus(tmp_path / "c", np.int64(1), np.int64(1), np.int64(2),
                                np.int64(3), workers=1, preset=np.int64(1))  # fmt: skip
    assert report.subsets == 1 and type(report.subsets) is int
    assert json.loads((tmp_path / "c" / synth.COMPLETE_MARKER).read_text())["seed"] == 3


# --------------------------------------------------------------------------------------
# The default corpus
# --------------------------------------------------------------------------------------


def test_default_corpus_name() -> None:
    assert synth.corpus_dirname(3, 60, 390, 0) == (
        f"synth-v{synth.GENERATOR_VERSION}-s3-m60-d390-seed0"
    )
    assert builtin._BENCH_SHAPE == (3, 60, 390, 0)
    assert builtin._DEFAULT_SHAPE == (1, 30, 390, 0)  # the first run: well under a minute
    # Announced before generating as the size every other place gives: 335 MB of text.
    assert f"{3 * 60 * 390 * builtin._MEAN_DOC_BYTES / 1e6:.0f} MB" == "335 MB"
    assert f"{builtin._TEXT_BYTES[builtin._DEFAULT_SHAPE] / 1e6:.0f} MB" == "55 MB"
    assert f"{builtin._TEXT_BYTES[builtin._BENCH_SHAPE] / 1e6:.0f} MB" == "335 MB"


def test_default_corpus_generates_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(builtin, "_DEFAULT_SHAPE", (1, 2, 5, 0))
    calls: list[Path] = []
    real = synth.write_corpus

    def counting(out: Path, *args: Any, **kwargs: Any) -> synth.SynthReport:
        calls.append(out)
        return real(out, *args, **kwargs)

    monkeypatch.setattr(builtin, "write_corpus", counting)
    path = synth.default_corpus(tmp_path, progress=False)
    assert path == tmp_path / f"synth-v{synth.GENERATOR_VERSION}-s1-m2-d5-seed0"
    assert calls == [path]
    assert "generating the default corpus" in capsys.readouterr().err
    assert (path / synth.COMPLETE_MARKER).is_file()
    assert len(read_corpus(path)["urlsf_subset00.tar"]) == 2
    before = {p.name: sha256(p) for p in path.iterdir()}

    again = synth.default_corpus(tmp_path, progress=False)
    assert again == path
    assert calls == [path]  # not regenerated
    assert capsys.readouterr().err == ""
    assert {p.name: sha256(p) for p in path.iterdir()} == before


def test_default_corpus_path_is_where_it_goes_and_generates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert synth.default_corpus_path(tmp_path) == tmp_path / synth.corpus_dirname(1, 30, 390, 0)
    assert synth.bench_corpus_path(tmp_path) == tmp_path / synth.corpus_dirname(3, 60, 390, 0)
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    assert synth.default_corpus_path() == tmp_path / "cache" / synth.corpus_dirname(1, 30, 390, 0)
    assert list(tmp_path.iterdir()) == []  # nothing made, not even the cache folder
    monkeypatch.setattr(builtin, "_DEFAULT_SHAPE", (1, 1, 2, 0))
    assert synth.default_corpus(progress=False) == synth.default_corpus_path()
    assert "default_corpus_path" in synth.__all__


def test_the_default_corpus_is_the_bench_corpus_first_members(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member's bytes depend only on its place: the small corpus a first run makes is the
    start of the one benchmarks measure (shapes made small here)."""
    monkeypatch.setattr(builtin, "_DEFAULT_SHAPE", (1, 2, 5, 0))
    monkeypatch.setattr(builtin, "_BENCH_SHAPE", (2, 3, 5, 0))
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path))
    small, big = synth.paths_or_default([]), synth.paths_or_default([], bench=True)
    assert small == [str(synth.default_corpus_path())] and big == [str(synth.bench_corpus_path())]

    def members(folder: str) -> list[tuple[str, bytes]]:
        with tarfile.open(Path(folder) / "urlsf_subset00.tar") as outer:
            return [(m.name, outer.extractfile(m).read()) for m in outer]  # type: ignore[union-attr]

    assert len(members(small[0])) == 2
    assert members(small[0]) == members(big[0])[:2]  # the xz bytes themselves
    assert len(list(Path(big[0]).glob("*.tar"))) == 2


def test_default_corpus_cache_dir_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builtin, "_DEFAULT_SHAPE", (1, 1, 2, 0))
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    path = synth.default_corpus(progress=False)
    assert path.parent == tmp_path / "cache"
    assert (path / "urlsf_subset00.tar").is_file()


def test_default_corpus_uses_the_one_another_process_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builtin, "_DEFAULT_SHAPE", (1, 1, 2, 0))
    real = synth.write_corpus

    def racing(out: Path, *args: Any, **kwargs: Any) -> synth.SynthReport:
        real(out, *args, **kwargs)  # "the other process" finishes first ...
        return real(out, *args, **kwargs)  # ... so our own rename fails

    monkeypatch.setattr(builtin, "write_corpus", racing)
    path = synth.default_corpus(tmp_path, progress=False)
    assert (path / synth.COMPLETE_MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [path.name]


def test_default_corpus_refuses_a_foreign_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builtin, "_DEFAULT_SHAPE", (1, 1, 2, 0))
    path = tmp_path / synth.corpus_dirname(1, 1, 2, 0)
    path.mkdir()
    (path / "urlsf_subset00.tar").write_bytes(b"half")
    with pytest.raises(FileExistsError, match="not a complete"):
        synth.default_corpus(tmp_path, progress=False)
