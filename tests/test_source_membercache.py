"""The member cache: a second epoch from disk, its cap, LRU eviction, a killed writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus
from openwebtext.source import configure
from openwebtext.source.membercache import CHECKSUM_BYTES, FOLDER, MemberCache, parse_size
from remote_servers import RangeServer, local_stream
from support import texts

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote

http = remote_servers.http  # fixtures
isolated_storage = remote_servers.isolated_storage


# -- the member cache -------------------------------------------------------------


def test_second_epoch_reads_from_the_member_cache(
    small_corpus: Path, http: RangeServer, tmp_path: Path
) -> None:
    corpus = Corpus.open(http.url + "/", cache_dir=tmp_path / "members")
    first = texts(corpus, seed=4, workers=2)
    http.reset_counts()
    second = texts(corpus, seed=4, workers=2)
    assert http.gets == 0
    assert first == second == local_stream(small_corpus, seed=4)
    assert len(list((tmp_path / "members" / FOLDER).glob("*/*"))) == len(corpus.units)


def test_member_cache_respects_its_cap(http: RangeServer, tmp_path: Path) -> None:
    corpus = Corpus.open(http.url + "/")
    sizes = sorted(u.size for u in corpus.units)
    cap = sizes[-1] + sizes[-2]  # room for two members, never three
    configure(None, cache_dir=tmp_path / "members", cache_size=cap)
    texts(corpus, seed=4, workers=2)
    held = [p.stat().st_size for p in (tmp_path / "members" / FOLDER).glob("*/*")]
    assert 1 <= len(held) <= 2 and sum(held) <= cap


def test_member_cache_evicts_the_least_recently_used(tmp_path: Path) -> None:
    cache = MemberCache(tmp_path, cap=250)
    for k in range(2):
        cache.put(f"k{k}", bytes(100))
        os.utime(cache._path(f"k{k}"), (1000 + k, 1000 + k))
    # k0 is the older, but used last: k1 goes when k2 passes the cap.
    assert cache.get("k0", 100) == bytes(100)
    cache.put("k2", bytes(100))
    assert sorted(p.name for p in tmp_path.glob("*/*")) == ["k0", "k2"]
    assert cache.get("k0", 99) is None  # a wrong length is never data


def test_the_cap_counts_what_each_entry_takes_on_disk(tmp_path: Path) -> None:
    """An entry takes its checksum too: two entries of 16 bytes (24 on disk) were counted 16
    and 40 and kept past a cap of 40; one of 36 (44) was stored past the cap, evicting every
    other entry, then itself."""
    cache = MemberCache(tmp_path, cap=40)
    for k in range(2):
        cache.put(f"k{k}", bytes(16))
        os.utime(cache._path(f"k{k}"), (1000 + k, 1000 + k))
    held = {p.name: p.stat().st_size for p in tmp_path.glob("*/*")}
    assert held == {"k1": CHECKSUM_BYTES + 16}  # (the older evicted)
    cache.put("big", bytes(40 - CHECKSUM_BYTES + 1))
    assert sorted(p.name for p in tmp_path.glob("*/*")) == ["k1"]
    cache.put("fits", bytes(40 - CHECKSUM_BYTES - 24))
    assert sum(p.stat().st_size for p in tmp_path.glob("*/*")) <= 40


@pytest.mark.timeout(30)
def test_a_cache_entry_that_is_no_file_is_a_miss(tmp_path: Path) -> None:
    """An entry is read as a regular file only, at most its size (session 28: a FIFO in an
    entry's place made the read wait forever, a link to ``/dev/zero`` read until memory ran
    out)."""
    cache = MemberCache(tmp_path)
    for key, put in [("fifo", os.mkfifo), ("zero", lambda p: p.symlink_to("/dev/zero"))]:
        cache.put(key, bytes(100))
        path = cache._path(key)
        path.unlink()
        put(path)
        assert cache.get(key, 100) is None
    cache.put("big", bytes(200))
    assert cache.get("big", 100) is None and cache.get("big", 200) == bytes(200)


def test_member_cache_survives_a_process_killed_mid_write(tmp_path: Path) -> None:
    child = f"""
import os, sys, time
from openwebtext.source.membercache import MemberCache
def stall(*args):
    print("writing", flush=True)
    time.sleep(60)
os.replace = stall
MemberCache({str(tmp_path)!r}).put("kk1", b"x" * 100000)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, "-c", child], env=env, stdout=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
        finally:
            proc.kill()
    cache = MemberCache(tmp_path, cap=10**6)
    assert cache.get("kk1", 100000) is None and not cache.contains("kk1")
    left = list(tmp_path.glob("*/.*.tmp"))
    assert len(left) == 1  # counted towards the cap until it is stale
    on_disk = 100000 + CHECKSUM_BYTES  # each entry starts with its checksum
    assert cache.evict() == on_disk
    cache.put("kk1", b"y" * 100000)
    assert cache.get("kk1", 100000) == b"y" * 100000
    os.utime(left[0], (1, 1))
    assert cache.evict() == on_disk and not left[0].exists()


def test_sizes_parse() -> None:
    assert parse_size("20G") == 20 << 30
    assert parse_size("512M") == 512 << 20
    assert parse_size("1.5K") == 1536
    assert parse_size("1000") == 1000
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def _outer_tar(path: Path, letters: str) -> None:
    """An outer tar of one xz member per letter, each of 3 documents of that letter: other
    letters give other bytes with the same member offsets and sizes."""
    import io
    import lzma
    import tarfile

    def add(t: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime = len(data), 0
        t.addfile(info, io.BytesIO(data))

    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as outer:
        for i, letter in enumerate(letters):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as inner:
                for k in range(3):
                    add(inner, f"doc{k}.txt", f"{letter * 50} {k}".encode())
            add(outer, f"openwebtext/urlsf_subset00-{i}_data.xz", lzma.compress(buf.getvalue()))


def _layout(path: Path) -> list[tuple[int, int]]:
    import tarfile

    with tarfile.open(path) as t:
        return [(m.offset_data, m.size) for m in t.getmembers()]


def test_a_file_replaced_with_the_same_offsets_never_serves_old_cached_members(
    tmp_path: Path,
) -> None:
    import json

    root = tmp_path / "served"
    root.mkdir()
    tar = root / "urlsf_subset00.tar"
    _outer_tar(tar, "ab")
    before = _layout(tar)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    members = tmp_path / "members"

    with RangeServer(root) as server:
        url = server.url + "/urlsf_subset00.tar"

        def stream(jobs: str) -> list[str]:
            run = subprocess.run(
                [sys.executable, "-m", "openwebtext.cli", "stream", url, "--cache-dir",
                 str(members), "--jsonl", "-q", "--no-shuffle", "-j", jobs],
                env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            return [json.loads(line)["text"][0] for line in run.stdout.splitlines()]

        assert stream("0") == list("aaabbb")
        assert any((members / FOLDER).glob("*/*"))
        _outer_tar(tar, "cd")  # other bytes, the same offsets and sizes, a new ETag
        st = tar.stat()
        os.utime(tar, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        assert _layout(tar) == before
        server.reset_counts()
        assert stream("0") == list("cccddd")
        assert server.gets >= 2  # indexed again and the members fetched, not taken from disk
        assert stream("2") == list("cccddd")


def test_a_cached_member_that_fails_to_decode_says_the_remote_copy_is_bad(
    tmp_path: Path,
) -> None:
    """The cache's copy is checksummed and is what the server sent: a member that does not
    decode from it is damaged on the server, and the error says so in words."""
    from openwebtext import Loader
    from support import corrupt_member, outer_tar, sample_docs, xz_member

    root = tmp_path / "served"
    root.mkdir()
    members = [
        ("openwebtext/urlsf_subset00-1_data.xz", xz_member(sample_docs("a", 5))),
        ("openwebtext/urlsf_subset00-2_data.xz", corrupt_member(sample_docs("b", 5))),
    ]
    outer_tar(root / "urlsf_subset00.tar", members)
    with RangeServer(root) as server:
        corpus = Corpus.open(server.url + "/", cache_dir=tmp_path / "members")
        loader = Loader(corpus, workers=0, on_error="skip", shuffle=False)
        for epoch in range(2):
            with loader.iter() as it:
                assert len(list(it)) == 5
                (skipped,) = it.stats.skipped
            said = "the remote file itself is damaged" in skipped
            assert said == (epoch == 1), skipped  # fetched the first time, cached the second


def test_two_writers_keep_the_cap_together(tmp_path: Path) -> None:
    """Two processes writing one cache (a loader's workers): each counted only its own writes
    since it listed the folder, so a third entry that passed the cap evicted nothing (the CI of
    session 38 saw three members held under a cap of two). Their count is one, shared."""
    size = 1000
    cap = 2 * (size + CHECKSUM_BYTES) + size // 2  # room for two entries, never three
    a, b = MemberCache(tmp_path, cap), MemberCache(tmp_path, cap)
    for cache, key in ((a, "a1"), (b, "b1"), (a, "a2"), (b, "b2")):
        cache.put(key, bytes([len(key)]) * size)
        held = [p.stat().st_size for p in tmp_path.glob("*/*")]
        assert sum(held) <= cap, (key, held)
    assert b.get("b2", size) is not None  # (the newest kept)


def test_the_cache_evicts_its_own_files_only(http: RangeServer, tmp_path: Path) -> None:
    """``cache_dir`` pointed at a folder that holds other files (a run's checkpoint, the
    built-in corpora of ``OWT_CACHE_DIR``): the cache counted and evicted every file in its
    subfolders, oldest first, so those went before its own entries. It owns ``FOLDER`` in
    ``cache_dir`` now, and in it counts and removes its own names only."""
    scratch = tmp_path / "scratch"
    keep = scratch / "myrun" / "checkpoint.pt"
    keep.parent.mkdir(parents=True)
    keep.write_bytes(b"x" * 5000)
    os.utime(keep, (1_000_000, 1_000_000))  # (older than any entry: evicted first, before)
    stray = scratch / FOLDER / "ab" / "notes.txt"  # (not an entry's name, in the cache's own)
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"y" * 5000)
    os.utime(stray, (1_000_000, 1_000_000))
    corpus = Corpus.open(http.url + "/")
    sizes = sorted(u.size for u in corpus.units)
    configure(None, cache_dir=scratch, cache_size=sizes[-1] + sizes[-2])
    texts(corpus, seed=4, workers=0)
    assert keep.read_bytes() == b"x" * 5000 and stray.read_bytes() == b"y" * 5000
    entries = [p for p in (scratch / FOLDER).glob("*/*") if p != stray]
    assert 1 <= len(entries) <= 2


def test_an_uncapped_writer_s_entries_count_toward_a_capped_one_s_cap(tmp_path: Path) -> None:
    """One process writing with no cap, one with: the shared count missed the uncapped one's
    writes, and the cache stayed over its cap at rest."""
    capped, uncapped = MemberCache(tmp_path, cap=1000), MemberCache(tmp_path)
    capped.put("aa" * 20, bytes(92))
    for k in range(20):
        uncapped.put(f"{k:02d}" + "b" * 38, bytes(92))
    capped.put("cc" * 20, bytes(92))
    assert sum(p.stat().st_size for p in tmp_path.glob("*/*")) <= 1000


def _unreadable_as_for_a_user(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``path`` made mode 000, its reads refused while it is (as for a user other than root,
    who reads any mode: the tests run as root in CI)."""
    from openwebtext.source import membercache

    path.chmod(0)
    real = membercache.read_file

    def refused(at, limit):  # type: ignore[no-untyped-def]
        if Path(at) == path and not path.stat().st_mode & 0o444:
            raise PermissionError(13, "Permission denied", str(at))
        return real(at, limit)

    monkeypatch.setattr(membercache, "read_file", refused)


def test_an_entry_that_cannot_be_read_is_replaced_by_a_readable_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """A replacement takes the mode of the file it replaces (``files.atomic_file``): an entry
    made unreadable (mode 000) stayed unreadable, a miss on every read. (Its read refused as
    it is for a user other than root, who reads any mode.)"""

    cache = MemberCache(tmp_path)
    cache.put("k1", b"x" * 10)
    entry = tmp_path / "k1" / "k1"
    _unreadable_as_for_a_user(entry, monkeypatch)
    assert cache.get("k1", 10) is None
    cache.put("k1", b"x" * 10)
    assert entry.stat().st_mode & 0o400 and cache.get("k1", 10) == b"x" * 10


@pytest.mark.parametrize("kind", ["link", "folder"])
def test_a_link_or_folder_in_an_entry_s_place_is_never_counted_nor_removed(
    tmp_path: Path, kind: str
) -> None:  # fmt: skip
    """A link named as an entry (to a file outside), a file in a folder not of the cache's
    layout: neither counted toward the cap nor evicted."""
    root, outside = tmp_path / "cache", tmp_path / "precious"
    outside.write_bytes(b"p" * 5000)
    if kind == "link":
        (root / "ab").mkdir(parents=True)
        odd = root / "ab" / ("ab" + "0" * 38)
        odd.symlink_to(outside)
        os.utime(odd, (1_000_000, 1_000_000), follow_symlinks=False)
    else:
        odd = root / "ckpt" / "ckpt"
        odd.parent.mkdir(parents=True)
        odd.write_bytes(b"c" * 5000)
        os.utime(odd, (1_000_000, 1_000_000))
    cache = MemberCache(root, cap=3 * (1000 + CHECKSUM_BYTES))
    for k in range(3):
        cache.put(f"{k:02d}" + "e" * 38, bytes(1000))
    assert os.path.lexists(odd) and outside.read_bytes() == b"p" * 5000
    assert len([p for p in root.glob("??/*") if p != odd]) == 3  # (the odd one not counted)


def test_a_total_that_cannot_be_read_is_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """The shared count made unreadable (mode 000): removed, so the next put writes one that
    is read (else every put listed the folder again, for ever)."""
    from openwebtext.source import membercache

    cache = MemberCache(tmp_path, cap=10**6)
    cache.put("k1", b"x" * 10)
    total = tmp_path / membercache.TOTAL
    _unreadable_as_for_a_user(total, monkeypatch)
    cache.put("k2", b"y" * 10)
    assert total.stat().st_mode & 0o400 and cache._said_total() == 2 * (10 + CHECKSUM_BYTES)


def test_an_uncapped_cache_where_no_lock_is_held_never_lists_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """A file system that cannot lock (or a holder busy past the wait): an uncapped cache has
    no cap to keep and no count to share, so it never lists the folder (each put listed it:
    quadratic in the entries)."""
    import contextlib

    from openwebtext.source import membercache

    monkeypatch.setattr(membercache, "folder_locked",
                        lambda folder: contextlib.nullcontext(False))  # fmt: skip
    cache = MemberCache(tmp_path)
    scans: list[int] = []
    monkeypatch.setattr(cache, "_scan_total", lambda: scans.append(1) or 0)
    for k in range(5):
        cache.put(f"k{k}", b"x" * 10)
    assert scans == [] and cache.get("k4", 10) == b"x" * 10
