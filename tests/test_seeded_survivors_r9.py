"""Behaviour that seeded bugs of round 9 (docs/testing.md) changed with no test failing: each
test here pins one, and was run against its mutant (named by its ID: G ranged reads, W the tar
walk, DS the torch datasets, R the engine's reader, E its member, MC the member cache, LD the
loader, I interrupts, X the tokenizer's checks, C the codec)."""

from __future__ import annotations

import contextlib
import io
import json
import lzma
import os
import signal
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, Loader, StateError
from openwebtext.codec import Record, Seed
from openwebtext.errors import CorruptMember
from openwebtext.source.membercache import FOLDER
from remote_servers import RangeServer
from support import outer_tar, xz_member

isolated_storage = remote_servers.isolated_storage  # fixture: a fresh cache, quick retries


def _remote() -> None:
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def _tar_bytes(files: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# -- ranged reads of remote files -----------------------------------------------------------


def _letters_tar(path: Path, letters: str) -> None:
    """An outer tar of one xz member per letter, 3 documents of that letter each: other
    letters give other bytes at the same member offsets and sizes."""
    members = []
    for i, letter in enumerate(letters):
        inner = [(f"doc{k}.txt", f"{letter * 50} {k}".encode()) for k in range(3)]
        data = lzma.compress(_tar_bytes(inner))
        members.append((f"openwebtext/urlsf_subset00-{i}_data.xz", data))
    path.write_bytes(_tar_bytes(members))


def test_a_member_of_a_file_with_no_identity_is_never_cached(tmp_path: Path) -> None:
    """G2: a server that sends neither ETag nor Last-Modified gives no identity to key a member
    by; the mutant cached it anyway and served the old bytes once the file was replaced."""
    _remote()
    root = tmp_path / "served"
    root.mkdir()
    tar = root / "urlsf_subset00.tar"
    _letters_tar(tar, "ab")
    members = tmp_path / "members"
    with RangeServer(root) as server:
        server.misbehave.validators = False
        corpus = Corpus.open(server.url + "/urlsf_subset00.tar", cache_dir=members)
        loader = Loader(corpus, workers=0, shuffle=False)
        assert [d.text[0] for d in loader] == list("aaabbb")
        assert not list((members / FOLDER).glob("*/*"))
        before = tar.stat().st_size
        _letters_tar(tar, "cd")  # other bytes, the same layout
        assert tar.stat().st_size == before
        assert [d.text[0] for d in loader] == list("cccddd")


def test_a_remote_tar_cut_inside_its_last_member_reads_as_a_local_copy(tmp_path: Path) -> None:
    """G3: a span past the end of the file was asked for whole: the server's shorter answer
    failed every retry and the cut member was skipped whole, not read up to the cut."""
    _remote()
    root = tmp_path / "served"
    root.mkdir()
    tar = root / "urlsf_subset00.tar"
    docs = {
        letter: {f"{letter}{k:02d}.txt": (letter * 2000 + str(k)).encode() for k in range(40)}
        for letter in "ab"
    }
    outer_tar(tar, [(f"openwebtext/urlsf_subset00-{x}_data.xz", xz_member(d))
                    for x, d in docs.items()])  # fmt: skip
    with tarfile.open(tar) as t:
        last = t.getmembers()[1]
    tar.write_bytes(tar.read_bytes()[: last.offset_data + last.size // 2])

    def stream(path: str) -> tuple[list[str], list[str]]:
        loader = Loader(path, workers=0, shuffle=False, on_error="skip")
        with loader.iter() as it:
            names = [d.name for d in it]
            return names, list(it.stats.skipped)

    local, local_skipped = stream(str(tar))
    cut_short = sum(n.startswith("b") for n in local)  # the documents before the cut
    assert sum(n.startswith("a") for n in local) == 40 and 0 < cut_short < 40
    assert "partial" in local_skipped[0]
    with RangeServer(root) as server:
        remote, remote_skipped = stream(server.url + "/urlsf_subset00.tar")
    assert remote == local
    assert len(remote_skipped) == 1 and "partial" in remote_skipped[0]


def test_spans_far_apart_are_fetched_apart(tmp_path: Path) -> None:
    """G4: spans more than MAX_GAP apart were merged into one request of every byte between."""
    _remote()
    from openwebtext.source.ranges import MAX_GAP, RangeReader, Span

    root = tmp_path / "served"
    root.mkdir()
    (root / "f.bin").write_bytes(bytes(range(256)) * ((3 * MAX_GAP) // 256))
    with RangeServer(root) as server:
        url = server.url + "/f.bin"
        spans = [Span(url, 0, 100, "a"), Span(url, 2 * MAX_GAP, 100, "b")]
        reader = RangeReader()
        try:
            reader.prefetch(spans)
            got = [reader.read(s) for s in spans]
        finally:
            reader.close()
        assert got == [bytes(range(100)), bytes(range(100))]
        assert (reader.requests, reader.bytes) == (2, 200)
        assert server.bytes_sent == 200


# -- the tar walk -----------------------------------------------------------------------------


def test_a_partial_walk_lists_an_entry_ending_exactly_at_the_cut() -> None:
    """W1: an entry whose data ends at the very byte the buffer is cut at was left out."""
    from openwebtext.tarwalk import walk

    raw = _tar_bytes([("a.txt", b"x" * 100), ("b.txt", b"y" * 512)])
    cut = raw[: 4 * 512]  # header a, a's block, header b, b's 512 bytes of data
    entries = walk(cut, partial=True)
    assert entries.names == ["a.txt", "b.txt"]
    assert entries.sizes == [100, 512]


def test_a_header_checksummed_as_signed_bytes_is_read_as_tarfile_reads_it() -> None:
    """W5: an old tar's checksum summed over signed bytes (a non-ASCII name) was refused."""
    from openwebtext.tarwalk import walk

    raw = bytearray(_tar_bytes([("caf\u00e9.txt", b"abc")]))
    header = bytes(raw[:148]) + b" " * 8 + bytes(raw[156:512])
    signed = sum(b - 256 if b > 127 else b for b in header)
    assert signed != sum(header)  # (the name's é is two bytes past 127)
    raw[148:156] = b"%06o\x00 " % signed
    with tarfile.open(fileobj=io.BytesIO(bytes(raw))) as tar:
        assert tar.getnames() == ["caf\u00e9.txt"]
    entries = walk(bytes(raw))
    assert entries.names == ["caf\u00e9.txt"]
    assert entries.sizes == [3]


# -- the engine's reader ----------------------------------------------------------------------


def test_a_compressed_outer_tar_is_refused_with_a_hint(small_corpus: Path, tmp_path: Path) -> None:
    """R3: an ``.xz`` of a whole subset tar had its xz members read as documents (bad UTF-8)."""
    path = tmp_path / "urlsf_subset00.tar.xz"
    path.write_bytes(lzma.compress((small_corpus / "urlsf_subset00.tar").read_bytes(), preset=0))
    with (
        pytest.raises(CorruptMember, match="is this a compressed outer tar"),
        Loader(path, workers=0, on_error="raise").iter() as it,
    ):
        next(it)


def _split_skips(path: Path, **options: object) -> dict[str, tuple[int, int]]:
    """(documents, skipped documents) of each split of ``path``, half of it held out."""
    said = {}
    for split in ("train", "val", "all"):
        loader = Loader(path, workers=0, shuffle=False, split=split, val_fraction=0.5,
                        on_error="skip", **options)  # type: ignore[arg-type]  # fmt: skip
        with loader.iter() as it:
            said[split] = (sum(1 for _ in it), it.stats.skipped_documents)
    return said


def test_lines_that_are_not_json_are_skipped_by_their_own_split_only(tmp_path: Path) -> None:
    """E1: a line that is no JSON in the train split was counted as skipped by ``val`` too."""
    path = tmp_path / "a.jsonl"
    rows = ["{not json" if i % 5 == 1 else json.dumps({"text": f"doc {i}"}) for i in range(40)]
    path.write_text("\n".join(rows) + "\n")
    said = _split_skips(path)
    assert said["all"] == (32, 8)
    train, val = said["train"], said["val"]
    assert 0 < val[1] < 8 and 0 < train[1] < 8
    assert (train[0] + val[0], train[1] + val[1]) == said["all"]


def test_too_large_documents_are_skipped_by_their_own_split_only(tmp_path: Path) -> None:
    """R2: a document past max_document_bytes in another split was counted as skipped."""
    path = _jsonl(tmp_path / "a.jsonl", [f"doc {i} " + "x" * (i * 10) for i in range(40)])
    said = _split_skips(path, max_document_bytes=200)
    assert said["all"] == (20, 20)
    train, val = said["train"], said["val"]
    assert 0 < val[1] < 20 and 0 < train[1] < 20
    assert (train[0] + val[0], train[1] + val[1]) == said["all"]


def test_a_json_line_not_utf8_is_kept_when_decode_errors_is_none(tmp_path: Path) -> None:
    """R4: ``Reader(decode_errors=None)`` (no check) dropped a JSON line that is not UTF-8: a
    JSON line is text, always decoded (replacing what is not UTF-8)."""
    from openwebtext.engine import Reader

    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    (unit,) = Corpus.open(path).units
    member = Reader(1 << 20, 1 << 20, decode_errors=None).read(unit)
    assert member.offsets == [0, 4]
    assert member.dropped == []


# -- the member cache ---------------------------------------------------------------------------


def test_a_cache_entry_of_another_length_is_a_miss(tmp_path: Path) -> None:
    """MC1: an entry of 5 bytes was handed out for a member of 6."""
    from openwebtext.source.membercache import MemberCache

    cache = MemberCache(tmp_path)
    key = cache.key("u", "id", 0, 5)
    cache.put(key, b"abcde")
    assert cache.get(key, 6) is None
    assert cache.dropped == 0 and cache.contains(key)  # a miss, not a damaged entry
    assert cache.get(key, 5) == b"abcde"


def test_entries_filling_the_cap_exactly_are_all_kept(tmp_path: Path) -> None:
    """MC4: ``evict`` removed one more entry when the cache held exactly its cap."""
    from openwebtext.source.membercache import CHECKSUM_BYTES, MemberCache

    cache = MemberCache(tmp_path, cap=2 * (CHECKSUM_BYTES + 100))
    keys = [cache.key("u", "id", 100 * i, 100) for i in range(2)]
    for i, key in enumerate(keys):
        cache.put(key, bytes([i]) * 100)
        os.utime(cache._path(key), (time.time() - 100 + i,) * 2)
    assert all(cache.contains(k) for k in keys)
    assert cache.evict() == 2 * (CHECKSUM_BYTES + 100)
    assert [cache.get(k, 100) for k in keys] == [bytes([0]) * 100, bytes([1]) * 100]


# -- the loader -----------------------------------------------------------------------------------


def test_runs_cannot_follow_documents_taken_one_by_one(tmp_path: Path) -> None:
    """LD2: ``next_run`` after ``next()`` was allowed (documents taken twice or lost)."""
    path = _jsonl(tmp_path / "a.jsonl", [f"doc {i}" for i in range(10)])
    with Loader(path, tokenizer="bytes", workers=0).iter() as it:
        next(it)
        with pytest.raises(ValueError, match="documents were taken one by one"):
            it.next_run()


def test_resumed_batches_under_take_read_take_documents(tmp_path: Path) -> None:
    """LD3: a state taken where a batch ended on a document's end (offset 0) was counted as
    inside a document: the resumed run under ``take`` read one document more."""
    # Documents of 7 ids (6 bytes and the end of text): every batch of 7 new ids ends one.
    path = _jsonl(tmp_path / "a.jsonl", [f"doc{i:03d}" for i in range(30)])

    def run(take: int, state: Any = None) -> tuple[list[Any], list[dict[str, Any]]]:
        loader = Loader(path, tokenizer="bytes", workers=0, shuffle=False, take=take, epochs=1)
        out: list[Any] = []
        states: list[dict[str, Any]] = []
        with loader.batches(7, 1, state=state) as batches:
            for batch in batches:
                out.append(batch.copy())
                states.append(batches.state_dict())
        return out, states

    _, states = run(10)
    assert states[2]["offset"] == 0
    rest, _ = run(10, states[2])
    longer, _ = run(13)  # the 3 documents of the first 3 batches, then 10
    assert len(rest) == len(longer) - 3
    assert all(np.array_equal(a, b) for a, b in zip(rest, longer[3:], strict=True))


# -- the torch datasets -------------------------------------------------------------------------


def test_one_rank_s_dataloader_workers_read_every_document_once(tmp_path: Path) -> None:
    """DS2: one training rank's DataLoader workers were evened (``even="drop"``) as if they were
    ranks: documents of the longer worker's share were left out of the epoch."""
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from openwebtext.torch import OpenWebTextDataset

    folder = tmp_path / "c"
    folder.mkdir()
    for name, n in (("a", 6), ("b", 2), ("c", 3), ("d", 4)):
        _jsonl(folder / f"{name}.jsonl", [f"{name} {i}" for i in range(n)])
    dataset = OpenWebTextDataset(folder, seed=3, workers=0, even="drop")
    got = [d.text for d in DataLoader(dataset, batch_size=None, num_workers=2)]
    assert sorted(got) == sorted(d.text for d in Loader(folder, workers=0))
    assert len(got) == 15


def test_a_state_dict_before_any_pass_loads_as_the_epoch_s_start(tmp_path: Path) -> None:
    """DS4: ``load_state_dict({})`` (what ``state_dict()`` says before any pass) was refused."""
    pytest.importorskip("torch")
    from openwebtext.torch import OpenWebTextDataset

    path = _jsonl(tmp_path / "a.jsonl", [f"doc {i}" for i in range(12)])
    dataset = OpenWebTextDataset(path, workers=0, seed=0)
    state = dataset.state_dict()
    assert state == {}
    dataset.load_state_dict(state)
    assert sorted(d.text for d in dataset) == sorted(f"doc {i}" for i in range(12))


# -- interrupts ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _sigint(handler: Any) -> Iterator[None]:
    """SIGINT set to ``handler`` (a run started in the background has it ignored) while the
    block runs; then SIGINT, SIGALRM and the real-time timer (pytest-timeout's, which a held
    signal's grace takes over) are put back."""
    before, alarm = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGALRM)
    timer = signal.getitimer(signal.ITIMER_REAL)
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, *timer)


def test_a_second_signal_in_a_deferred_section_interrupts_at_once() -> None:
    """I1: a second SIGINT inside ``deferred`` was held too: the section ran to its end."""
    from openwebtext.interrupts import Interrupted, deferred, interruptible

    went_on = False
    with (
        _sigint(signal.default_int_handler),
        pytest.raises(Interrupted),
        interruptible(),
        deferred,
    ):
        signal.raise_signal(signal.SIGINT)  # held
        signal.raise_signal(signal.SIGINT)  # interrupts now
        went_on = True
    assert not went_on


def test_a_held_signal_does_not_replace_an_error_on_its_way_out() -> None:
    """I2: an OSError leaving a deferred section that held a SIGINT became ``Interrupted``."""
    from openwebtext.interrupts import deferred, interruptible

    caught: BaseException | None = None
    with _sigint(signal.default_int_handler), interruptible():
        try:
            with deferred:
                signal.raise_signal(signal.SIGINT)  # held
                raise OSError("disk full")
        except BaseException as exc:
            caught = exc
    assert type(caught) is OSError and str(caught) == "disk full"


def test_a_sigint_ignored_before_stays_ignored() -> None:
    """I3: a SIGINT ignored by whoever started the process (``nohup``) interrupted it."""
    from openwebtext.interrupts import Interrupted, interruptible

    interrupted = False
    with _sigint(signal.SIG_IGN):
        try:
            with interruptible():
                signal.raise_signal(signal.SIGINT)
                time.sleep(0.05)
                assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        except Interrupted:
            interrupted = True
    assert not interrupted


# -- the tokenizer's checks -------------------------------------------------------------------


def test_a_ctrl_c_during_the_exactness_check_is_raised() -> None:
    """X2: a KeyboardInterrupt inside the fast backend was reported as a difference."""
    from openwebtext.tokenizer.exactness import first_difference
    from openwebtext.tokenizer.spec import Backend

    def ctrl_c(text: str) -> list[int]:
        raise KeyboardInterrupt

    reference = Backend("ref", lambda t: [len(t)], lambda ids: "", None)
    with pytest.raises(KeyboardInterrupt):
        first_difference(Backend("fast", ctrl_c, lambda ids: "", None), reference)


def test_a_braced_hex_escape_keeps_its_quantifier() -> None:
    """X3: in ``\\x{41}+`` the ``{41}`` was read as a counted quantifier, and the ``+`` after it
    as making that possessive: dropped."""
    from openwebtext.tokenizer.fast import greedy_pattern

    assert greedy_pattern(r"\x{41}+b") == r"\x{41}+b"
    assert greedy_pattern(r"\x{41}++b") == r"\x{41}+b"
    assert greedy_pattern(r"\p{L}++") == r"\p{L}+"


# -- the codec -------------------------------------------------------------------------------


class _Seeded(Record, frozen=True):
    seed: Seed


class _Keyed(Record, frozen=True):
    d: dict[str, int]


def test_a_split_key_of_two_to_the_64_is_refused() -> None:
    """C1: ``check_key(2**64)`` (a key of 9 bytes) was taken."""
    from openwebtext.codec import Disagree, check_key

    check_key(2**64 - 1)
    with pytest.raises(Disagree, match=r"not < 2\*\*64"):
        check_key(2**64)


def test_a_file_one_byte_past_the_most_is_refused(tmp_path: Path) -> None:
    """C3: ``read_file(p, most=10)`` read a file of 11 bytes."""
    from openwebtext.codec import read_file

    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_file(path, most=10) == b"x" * 10
    path.write_bytes(b"x" * 11)
    with pytest.raises(OSError, match="more than 10 bytes"):
        read_file(path, most=10)


def test_a_huge_negative_seed_stays_negative_and_is_refused() -> None:
    """C4: a JSON integer of 5,000 digits with a minus sign was parsed as a huge positive one:
    a seed out of bounds below was taken as one far above."""
    from openwebtext.codec import decode, parse

    value = parse('{"seed": -' + "9" * 5000 + "}")
    assert value["seed"] < 0
    assert decode(parse('{"seed": ' + "9" * 5000 + "}"), _Seeded).seed > 0
    with pytest.raises(StateError) as caught:
        decode(value, _Seeded)
    assert caught.value.field == "seed"


def test_a_lone_surrogate_in_a_dict_key_is_refused() -> None:
    """C5: a key holding a lone surrogate (no text, cannot be written) was taken."""
    from openwebtext.codec import decode

    assert decode({"d": {"a": 1}}, _Keyed).d == {"a": 1}
    with pytest.raises(StateError, match="lone surrogate") as caught:
        decode({"d": {"a\udcff": 1}}, _Keyed)
    assert caught.value.field == r"d.a\udcff"  # (said escaped)


def test_a_device_is_not_a_file_to_read() -> None:
    """C6: ``read_file("/dev/null")`` read a character device as an empty file."""
    from openwebtext.codec import read_file

    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    with pytest.raises(OSError, match="not a regular file"):
        read_file("/dev/null")
