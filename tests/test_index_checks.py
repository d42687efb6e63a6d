"""A corpus is known by its members' content, not only their sizes (issue 31): a member
rewritten with other text at the same compressed size changes ``content_fingerprint()``, the
fingerprint a prepared run's files are of, so ``owt tokenize`` does not take the old run
for finished and ``owt merge`` refuses a slice of each. Its checks are the xz checks read at
each member's end (every block's, every stream's index); other members are hashed whole."""

from __future__ import annotations

import io
import json
import lzma
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.index.checks import member_check
from openwebtext.prepare import PrepareError, PrepareOptions, merge, prepare
from openwebtext.records import Unit
from support import Owt, damage, member_offset, varint, xz_zeros

OPTIONS = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1)


class _Bytes:
    """``outer.Readable`` over bytes in memory."""

    def __init__(self, data: bytes) -> None:
        self.data, self.size = data, len(data)

    def pread(self, n: int, offset: int) -> bytes:
        return self.data[offset : offset + n]


def _check(data: bytes, kind: str = "xz") -> bytes:
    return member_check(_Bytes(data), Unit("f", "m", 0, len(data), kind, "s", 0))


def _same_size_rewrite(member: bytes) -> bytes:
    """``member`` (an xz inner tar) with one letter of one document changed, compressed
    again (preset 6, as the corpus) to exactly the same size."""
    inner = lzma.decompress(member)
    with tarfile.open(fileobj=io.BytesIO(inner)) as tar:
        info = next(m for m in tar.getmembers() if m.isfile() and m.size > 100)
    start = info.offset_data
    for at in range(start, start + info.size):
        for letter in b"qxzjk":
            if inner[at] == letter or not chr(inner[at]).isalpha():
                continue
            changed = inner[:at] + bytes([letter]) + inner[at + 1 :]
            again = lzma.compress(changed, preset=6)
            if len(again) == len(member):
                return again
    raise AssertionError("no rewrite of the same size found")


@pytest.fixture
def rewritten(small_corpus: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The small corpus (A) and a copy (B) of which one member holds other text at the same
    compressed size (and the file keeps its size)."""
    copy = Path(shutil.copytree(small_corpus, tmp_path / "b"))
    path = sorted(copy.glob("*.tar"))[0]
    with tarfile.open(path) as tar:
        name = [m.name for m in tar.getmembers() if m.isfile()][1]
    offset, size = member_offset(path, name)
    old = path.read_bytes()[offset : offset + size]
    damage(path, offset, _same_size_rewrite(old))
    return small_corpus, copy


def test_a_same_size_rewrite_changes_the_content_fingerprint(
    rewritten: tuple[Path, Path],
) -> None:
    a, b = (Corpus.open(p) for p in rewritten)
    assert [u[1:] for u in a.units] == [u[1:] for u in b.units]  # names, offsets, sizes
    assert a.fingerprint() == b.fingerprint()  # the stream's: names, sizes, formats
    assert a.content_fingerprint() != b.content_fingerprint()
    again = Corpus.open(rewritten[0])
    assert again.content_fingerprint() == a.content_fingerprint()  # stable, and not the mtime's


def test_a_copy_elsewhere_has_the_same_content_fingerprint(
    small_corpus: Path, tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(small_corpus, tmp_path / "copy", copy_function=shutil.copy))
    assert (
        Corpus.open(copy).content_fingerprint() == Corpus.open(small_corpus).content_fingerprint()
    )


def test_tokenize_and_merge_do_not_trust_a_same_size_rewrite(
    rewritten: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = (Corpus.open(p) for p in rewritten)
    out = tmp_path / "out"
    first = prepare(a, out, OPTIONS)
    redone = prepare(b, out, OPTIONS)  # out holds A's finished files, not B's: redone
    assert not redone.already and redone.meta["files"] != first.meta["files"]
    assert redone.meta == prepare(b, tmp_path / "fresh", OPTIONS).meta
    prepare(a, tmp_path / "a0", OPTIONS, shard=(0, 2))
    prepare(b, tmp_path / "b1", OPTIONS, shard=(1, 2))
    with pytest.raises(PrepareError, match=r"different runs.*different corpus"):
        merge([tmp_path / "a0", tmp_path / "b1"], tmp_path / "merged")


def test_owt_tokenize_of_a_rewritten_corpus_is_not_nothing_to_do(
    owt: Owt, rewritten: tuple[Path, Path], tmp_path: Path
) -> None:
    tokenize = ["tokenize", "-j", "0", "--tokenizer", "bytes", "--out", str(tmp_path / "out")]
    assert owt(*tokenize, str(rewritten[0]), "-q").returncode == 0
    a_meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    result = owt(*tokenize, str(rewritten[1]))
    assert result.returncode == 0, result.stderr
    assert "nothing to do" not in result.stdout + result.stderr
    b_meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert b_meta["config"]["corpus"] != a_meta["config"]["corpus"]
    assert b_meta["files"] != a_meta["files"]


def _xz_blocks(data: bytes) -> bytes:
    """``data`` as one xz stream of 4 KiB blocks (the ``xz`` command)."""
    made = subprocess.run(["xz", "-c", "--block-size=4096", "-6"], input=data,
                          capture_output=True, check=True, timeout=60)  # fmt: skip
    return made.stdout


def test_every_block_and_stream_of_an_xz_member_is_checked() -> None:
    if shutil.which("xz") is None:
        pytest.skip("no xz command to make blocks with")
    text = b"".join(b"line %06d of the member\n" % k for k in range(2000))  # 50 KB: 13 blocks
    blocks = _xz_blocks(text)
    changed = next(  # one line of the third block changed, at the same compressed size
        made
        for k in range(700, 900)
        if len(made := _xz_blocks(text.replace(b"line %06d" % k, b"line %06d" % (k + 1))))
        == len(blocks)
    )
    one = lzma.compress(b"a" * 5000, check=lzma.CHECK_CRC64)
    two = lzma.compress(b"b" * 5000, check=lzma.CHECK_SHA256)
    other = lzma.compress(b"c" * 5000, check=lzma.CHECK_CRC64)
    assert len(other) == len(one)
    member = blocks + bytes(8) + one + two + bytes(4)  # streams, and stream padding
    assert lzma.decompress(blocks) == text and lzma.decompress(changed) != text
    check = _check(member)
    assert check.startswith(b"xz:")
    assert _check(changed + bytes(8) + one + two + bytes(4)) != check  # a middle block
    assert _check(blocks + bytes(8) + other + two + bytes(4)) != check  # a middle stream
    assert _check(xz_zeros(3, 1 << 16)) != _check(xz_zeros(4, 1 << 16))
    assert varint(300) == b"\xac\x02"  # the index's integers are xz's multibyte ones


def test_a_member_without_checks_is_hashed_whole() -> None:
    plain = lzma.compress(b"text" * 100, check=lzma.CHECK_NONE)
    assert _check(plain).startswith(b"blake2b:")
    assert _check(plain) != _check(lzma.compress(b"TEXT" * 100, check=lzma.CHECK_NONE))
    assert _check(b"not xz at all", "gzip").startswith(b"blake2b:")
    assert _check(b"\xfd7zXZ\x00 broken", "xz").startswith(b"blake2b:")  # fails when read


@pytest.mark.remote
def test_a_remote_file_without_validators_is_known_by_its_members_checks(
    rewritten: tuple[Path, Path],
) -> None:
    """A server that sends neither ETag nor Last-Modified: nothing tells a rewrite apart but
    the content. Read by range, the same corpus has the local fingerprint."""
    pytest.importorskip("aiohttp")
    from remote_servers import RangeServer

    found = []
    for root in rewritten:
        with RangeServer(root) as server:
            server.misbehave.validators = False
            remote = Corpus.open(server.url + "/")
            found.append(remote.content_fingerprint())
            gets = server.gets
    assert found[0] == Corpus.open(rewritten[0]).content_fingerprint()
    assert found[1] == Corpus.open(rewritten[1]).content_fingerprint() != found[0]
    assert gets > 0


def test_the_content_fingerprint_is_worked_out_once_and_kept_when_pickled(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray tasks get the corpus pickled: they must not read every member's end again."""
    import pickle

    from openwebtext.index import corpus as corpus_module

    corpus = Corpus.open(small_corpus)
    first = corpus.content_fingerprint()
    monkeypatch.setattr(corpus_module, "member_check", lambda *a: pytest.fail("read again"))
    assert corpus.content_fingerprint() == first
    assert pickle.loads(pickle.dumps(corpus)).content_fingerprint() == first


def test_ctrl_c_while_a_remote_member_check_stalls_ends_at_once(tmp_path: Path) -> None:
    """The content fingerprint's range reads (``owt tokenize`` of a URL) run on daemon
    threads: Ctrl-C while the server stalls is raised at once, not after the stalled
    request's deadline (an executor's exit joined its threads)."""
    import _thread
    import threading
    import time

    from remote_servers import RangeServer

    (tmp_path / "a.jsonl").write_text(
        "".join(json.dumps({"text": f"document {k} " + "word " * 40}) + "\n" for k in range(500))
    )
    with RangeServer(tmp_path) as server:
        corpus = Corpus.open(server.url + "/a.jsonl")
        server.misbehave.stall = 600.0  # every GET from now on, until the server closes
        threading.Timer(1.0, _thread.interrupt_main).start()
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            corpus.content_fingerprint()
        assert time.monotonic() - began < 10, "the interrupt waited for the stalled request"
