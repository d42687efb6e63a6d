"""What a new user and a hostile user hand the corpus: folders as found, odd paths, damaged
counts, truncated downloads (issue 10: corpus, index, counts and read)."""

from __future__ import annotations

import itertools
import json
import logging
import lzma
import os
import shutil
import threading
from pathlib import Path

import pytest

from openwebtext import Corpus, CorpusError, CorruptMember, Loader, UnknownFormat
from openwebtext.stream import count_documents
from support import (
    docs_before_cut,
    inner_tar,
    member_offset,
    names,
    outer_tar,
    read_members,
    sample_docs,
)

Docs = dict[str, str]


@pytest.fixture
def corpus_copy(tmp_path: Path, small_corpus: Path) -> Path:
    """A private copy of the small corpus (2 files x 3 members x 20 documents)."""
    # Without the counts that other tests (even sharding counts on first use) leave beside it.
    ignore = shutil.ignore_patterns(".owt-counts-*")
    return Path(shutil.copytree(small_corpus, tmp_path / "c", ignore=ignore))


def index(path: Path) -> Path:
    """Write the counts file of ``path`` as `owt index` does; return the file."""
    corpus = Corpus.open(path)
    return corpus.save_counts(count_documents(corpus, workers=0))


def xz_member(docs: dict[str, bytes]) -> bytes:
    return lzma.compress(inner_tar(docs), preset=0)


# -- 1. counts: keyed on what changes, validated, checked against what is read ------------


def test_counts_are_stale_when_a_file_changes_with_the_same_size(corpus_copy: Path) -> None:
    index(corpus_copy)
    assert Corpus.open(corpus_copy).counts is not None
    tar = corpus_copy / "urlsf_subset00.tar"
    st = tar.stat()
    os.utime(tar, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same size, new mtime
    assert Corpus.open(corpus_copy).counts is None


def _edit_counts(path: Path, documents: list[int]) -> None:
    """Counts that agree with each other (the total too) but not with the members."""
    body = json.loads(path.read_text())
    body["documents"], body["total"] = documents, sum(documents)
    path.write_text(json.dumps(body))


def test_a_count_that_does_not_match_the_member_fails_and_says_what_to_run(
    corpus_copy: Path,
) -> None:
    """A member replaced in place (mtime kept) or a hand-edited file: never pad with repeats."""
    counts_file = index(corpus_copy)
    _edit_counts(counts_file, [19] + [20] * 5)
    loader = Loader(corpus_copy, workers=0, rank=0, world_size=2, shuffle=False)
    with pytest.raises(CorpusError, match=r"counts file says 19.*run `owt index --force`"):
        list(itertools.islice(loader, 200))


def test_counts_claiming_a_trillion_documents_do_not_make_an_endless_stream(
    corpus_copy: Path,
) -> None:
    counts_file = index(corpus_copy)
    _edit_counts(counts_file, [10**12] * 6)
    loader = Loader(corpus_copy, workers=0, rank=0, world_size=2, shuffle=False)
    with pytest.raises(CorpusError, match="counts file says"):
        list(itertools.islice(loader, 200))  # 60 documents are this rank's: more is a repeat


@pytest.mark.parametrize(
    "body",
    ["[]", '"x"', "{}", '{"format": "openwebtext-counts/2", "documents": "abc"}', "{bad json"],
)
def test_a_damaged_counts_cache_is_treated_as_absent_and_rewritten(
    corpus_copy: Path, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = Corpus.open(corpus_copy)
    counts_file = corpus.counts_paths()[0]
    counts_file.write_text(body)
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        reopened = Corpus.open(corpus_copy)
        assert reopened.counts is None
        assert len(names(Loader(reopened, workers=0))) == 120  # a plain stream works
        ranks = [names(Loader(reopened, workers=0, rank=r, world_size=2)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 60
    assert str(counts_file) in caplog.text and "damaged" in caplog.text
    assert Corpus.open(corpus_copy).counts is not None  # rewritten


def test_counts_with_wrong_types_or_lengths_are_refused(corpus_copy: Path) -> None:
    counts_file = index(corpus_copy)
    good = json.loads(counts_file.read_text())
    for documents in ([20] * 5, [20] * 5 + [-1], [20] * 5 + ["20"], [20] * 5 + [True]):
        counts_file.write_text(json.dumps({**good, "documents": documents}))
        assert Corpus.open(corpus_copy).counts is None, documents
    counts_file.write_text(json.dumps({**good, "val": {"0.0005/2357": [30] * 6}}))
    assert Corpus.open(corpus_copy).counts is None  # more held out than there are
    for field, value in [("total", good["total"] + 1), ("units", 7), ("units", True)]:
        counts_file.write_text(json.dumps({**good, field: value}))
        assert Corpus.open(corpus_copy).counts is None, (field, value)
    counts_file.write_text(json.dumps(good))
    assert Corpus.open(corpus_copy).counts is not None


def test_a_member_skipped_under_even_drop_is_not_padded_silently(
    corpus_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    index(corpus_copy)
    tar = corpus_copy / "urlsf_subset00.tar"
    offset, size = member_offset(tar, "openwebtext/urlsf_subset00-1_data.xz")
    st = tar.stat()
    with open(tar, "r+b") as f:  # a bit flip
        f.seek(offset + size // 2)
        byte = f.read(1)[0]
        f.seek(offset + size // 2)
        f.write(bytes([byte ^ 0x10]))
    os.utime(tar, ns=(st.st_atime_ns, st.st_mtime_ns))  # as if the counts were made after it
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        loader = Loader(corpus_copy, workers=0, rank=0, world_size=2, shuffle=False,
                        on_error="skip")  # fmt: skip
        with loader.iter() as it:
            got = [d.name for d in it]
            stats = it.stats
    assert stats.skipped_members >= 1  # read again when the rank wraps around
    assert len(got) == 60  # ranks stay even...
    assert stats.repeated_documents == len(got) - len(set(got))
    assert stats.repeated_documents > 0
    assert [r.getMessage() for r in caplog.records if "repeat" in r.getMessage()]  # said once
    assert len([r for r in caplog.records if "repeat" in r.getMessage()]) == 1


# -- 2. an endless run over passes that yield nothing ends with an error ------------------


@pytest.mark.timeout(30)
def test_endless_run_over_an_empty_split_is_an_error(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=0, epochs=None, split="val", val_fraction=1e-9)
    with pytest.raises(CorpusError, match="yielded no document") as info:
        next(iter(loader))
    assert info.value.path == str(small_corpus)  # (the folder its files share)


@pytest.mark.timeout(30)
def test_endless_run_when_every_member_is_skipped_is_an_error(tmp_path: Path) -> None:
    tar = outer_tar(tmp_path / "t.tar", [("a_data.xz", b"\xfd7zXZ\x00 not really xz" * 30)])
    loader = Loader(tar, workers=0, epochs=None, on_error="skip")
    with pytest.raises(CorpusError, match="yielded no document") as info:
        next(iter(loader))
    assert info.value.path == str(tar)  # (the file, not its folder: red team, session 27)


@pytest.mark.timeout(30)
def test_endless_even_run_with_nothing_for_the_rank_is_an_error(corpus_copy: Path) -> None:
    index(corpus_copy)  # 120 documents over 121 ranks under drop: every rank's target is 0
    loader = Loader(corpus_copy, workers=0, epochs=None, rank=0, world_size=121)
    with pytest.raises(CorpusError, match="yielded no document"):
        next(iter(loader))


# -- 3. paths that cannot be read, odd paths, the same file twice, names, empty tars ------


def test_a_dangling_symlink_in_a_folder_is_an_error_or_a_counted_skip(
    corpus_copy: Path,
) -> None:
    (corpus_copy / "urlsf_subset02.tar").symlink_to(corpus_copy / "gone.tar")
    with pytest.raises(CorpusError, match="dangling symlink") as info:
        Corpus.open(corpus_copy)
    assert info.value.path == str(corpus_copy / "urlsf_subset02.tar")
    with Loader(corpus_copy, workers=0, on_error="skip").iter() as it:
        assert len(list(it)) == 120
        stats = it.stats
    assert stats.skipped_files == 1
    assert any("urlsf_subset02.tar" in s and "dangling" in s for s in stats.skipped)


def test_a_dangling_symlink_in_a_glob_is_an_error(corpus_copy: Path) -> None:
    (corpus_copy / "urlsf_subset02.tar").symlink_to(corpus_copy / "gone.tar")
    with pytest.raises(CorpusError, match="dangling symlink"):
        Corpus.open(str(corpus_copy / "*.tar"))


def test_an_unreadable_file_in_a_folder_is_an_error(corpus_copy: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    os.chmod(corpus_copy / "urlsf_subset01.tar", 0)
    with pytest.raises(CorpusError, match="cannot read"):
        Corpus.open(corpus_copy)


def test_a_fifo_or_a_symlink_loop_is_named_for_what_it_is(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(CorpusError, match="is a FIFO"):
        Corpus.open(fifo)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(CorpusError, match="symlink loop"):
        Corpus.open(loop)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(CorpusError, match="dangling symlink"):
        Corpus.open(dangling)
    with pytest.raises(CorpusError, match="no such file or folder"):
        Corpus.open(tmp_path / "nowhere")


def test_a_fifo_in_a_folder_is_left_out_not_opened(corpus_copy: Path) -> None:
    os.mkfifo(corpus_copy / "pipe")
    assert len(Corpus.open(corpus_copy).units) == 6  # and no hang on open()


def test_a_fifo_named_as_a_corpus_file_in_a_folder_is_an_error_or_a_counted_skip(
    corpus_copy: Path,
) -> None:
    """As a dangling symlink of that name is (red team, session 29: left out as "not a corpus
    file", a whole subset gone under raise)."""
    os.mkfifo(corpus_copy / "urlsf_subset02.tar")
    with pytest.raises(CorpusError, match="is a FIFO, not a file") as info:
        Corpus.open(corpus_copy)
    assert info.value.path == str(corpus_copy / "urlsf_subset02.tar")
    with Loader(corpus_copy, workers=0, on_error="skip").iter() as it:
        assert len(list(it)) == 120
        assert it.stats.skipped_files == 1


@pytest.mark.parametrize("kind", ["tar", "jsonl", "parquet", "tokens"])
def test_a_file_replaced_by_a_fifo_after_the_open_is_an_error_not_a_hang(
    kind: str, corpus_copy: Path, tmp_path: Path
) -> None:
    """Read without worker processes (no watchdog): the read is a ``CorruptMember`` naming
    the file, where opening the FIFO waited for a writer forever."""
    path = corpus_copy / "urlsf_subset00.tar"
    if kind == "jsonl":
        path = tmp_path / "a.jsonl"
        path.write_text("".join(json.dumps({"text": f"d{k}"}) + "\n" for k in range(5)))
    if kind == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        path = tmp_path / "a.parquet"
        pq.write_table(pa.table({"text": [f"d{k}" for k in range(5)]}), path)
    given: dict[str, str] = {}
    if kind == "tokens":
        path, given = tmp_path / "train.bin", {"tokenizer": "gpt2"}
        path.write_bytes(bytes.fromhex("0100 0200 50c4 0300 50c4"))  # 2 documents, uint16
    corpus = Corpus.open_tokens(path) if kind == "tokens" else Corpus.open(path)
    path.unlink()
    os.mkfifo(path)
    got: list[BaseException | None] = []

    def read() -> None:
        try:
            list(Loader(corpus, workers=0, **given))
            got.append(None)
        except BaseException as exc:  # (what the read raised, checked below)
            got.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    if reader.is_alive():  # let the waiting open go (a writer comes and goes), then fail
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(60)
        pytest.fail("the read waited on the FIFO for a writer")
    assert isinstance(got[0], CorruptMember), got
    assert str(path) in str(got[0]) and "not a regular file" in str(got[0])


def test_the_same_file_given_twice_is_refused(corpus_copy: Path, tmp_path: Path) -> None:
    tar = corpus_copy / "urlsf_subset00.tar"
    link = tmp_path / "link.tar"
    link.symlink_to(tar)
    for paths in ([tar, tar], [corpus_copy, tar], [tar, link], [str(corpus_copy / "*.tar"), tar]):
        with pytest.raises(CorpusError, match="given twice"):
            Corpus.open(paths)


def test_names_that_are_not_utf8(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    docs = sample_docs("n", 3)
    bad_file = os.fsdecode(b"urlsf_subset\xff.tar")
    bad_member = os.fsdecode(b"m\xfe_data.xz")
    outer_tar(folder / bad_file, [(bad_member, xz_member(docs))])
    corpus = Corpus.open(folder)
    assert corpus.units[0].member == bad_member
    assert len(corpus.fingerprint()) == 16
    corpus.save_counts(count_documents(corpus, workers=0))
    assert Corpus.open(folder).counts is not None
    loader = Loader(folder, workers=0, rank=0, world_size=1)
    assert sorted(names(loader)) == sorted(docs)
    state = loader.iter().state_dict()
    json.dumps(state)


def test_an_empty_tar_is_called_empty(tmp_path: Path) -> None:
    empty = outer_tar(tmp_path / "empty.tar", [])
    with pytest.raises(CorpusError, match="empty tar") as info:
        Corpus.open(empty)
    assert not isinstance(info.value, UnknownFormat)
    zero = tmp_path / "zero.tar"
    zero.write_bytes(b"")
    with pytest.raises(CorpusError, match="empty file"):
        Corpus.open(zero)


# -- 4. a folder is a corpus folder ---------------------------------------------------------


def test_a_dataset_folder_reads_its_corpus_files_and_mentions_the_rest(
    corpus_copy: Path, small_docs: Docs, caplog: pytest.LogCaptureFixture
) -> None:
    (corpus_copy / "README.md").write_text("# OpenWebText\n")
    (corpus_copy / ".gitattributes").write_text("*.tar filter=lfs\n")
    (corpus_copy / "SHA256SUMS").write_text("abc  urlsf_subset00.tar\n")
    (corpus_copy / "manifest.json").write_text("{}")
    (corpus_copy / "sub").mkdir()
    for policy in ("raise", "skip"):
        with caplog.at_level(logging.WARNING, logger="openwebtext"):
            caplog.clear()
            got = {d.name: d.text for d in Loader(corpus_copy, workers=0, on_error=policy)}
        assert got == small_docs
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1, lines
        assert all(n in lines[0] for n in ("README.md", "SHA256SUMS", "manifest.json", "sub/"))
        assert ".gitattributes" not in lines[0]
    with pytest.raises(UnknownFormat):
        Corpus.open(corpus_copy / "README.md")  # named explicitly: still an error


def test_openwebtext_names_stay_corpus_files_even_when_damaged(corpus_copy: Path) -> None:
    (corpus_copy / "urlsf_subset09.tar").write_bytes(b"not a tar at all\n" * 64)
    with pytest.raises(UnknownFormat) as info:
        Corpus.open(corpus_copy)
    assert info.value.path == str(corpus_copy / "urlsf_subset09.tar")


# -- 5. on_error="skip" covers whole files ----------------------------------------------------


@pytest.mark.parametrize(
    "content", [b"garbage" * 100, b"", "broken"], ids=["garbage", "empty", "broken"]
)
def test_a_bad_file_is_skipped_and_counted_under_skip(
    corpus_copy: Path, small_docs: Docs, content: bytes | str
) -> None:
    """A file that is not a tar is skipped whole; a tar with a damaged header keeps the
    members before it."""
    bad = corpus_copy / "urlsf_subset02.tar"
    if content == "broken":  # a tar whose second header is damaged
        shutil.copy(corpus_copy / "urlsf_subset00.tar", bad)
        first = member_offset(bad, "openwebtext/urlsf_subset00-2_data.xz")[0] - 512
        with open(bad, "r+b") as f:
            f.seek(first + 10)
            f.write(b"\xff")
        kept = 20  # its first member, before the damaged header, is read again
    else:
        bad.write_bytes(content)  # type: ignore[arg-type]
        kept = 0
    with pytest.raises(CorpusError) as info:
        Loader(corpus_copy, workers=0)
    assert info.value.path == str(bad)
    with Loader(corpus_copy, workers=0, on_error="skip", shuffle=False).iter() as it:
        got = [(d.name, d.text) for d in it]
        stats = it.stats
    assert dict(got) == small_docs
    assert len(got) == 120 + kept
    assert stats.skipped_files == 1
    assert [s for s in stats.skipped if str(bad) in s]


def test_skipped_files_count_against_max_errors(corpus_copy: Path) -> None:
    from openwebtext import TooManyErrors

    (corpus_copy / "urlsf_subset02.tar").write_bytes(b"garbage" * 100)
    with pytest.raises(TooManyErrors):
        list(Loader(corpus_copy, workers=0, on_error="skip", max_errors=0))


# -- 6. a member cut short keeps what came before the cut -------------------------------------


@pytest.mark.parametrize("where", ["outer-file-cut", "member-cut"])
def test_a_member_cut_short_keeps_what_came_before_the_cut(
    tmp_path: Path, corpus_copy: Path, where: str
) -> None:
    pristine = read_members(sorted(corpus_copy.glob("*.tar")))
    tar = corpus_copy / "urlsf_subset01.tar"
    member = "openwebtext/urlsf_subset01-3_data.xz"
    offset, size = member_offset(tar, member)
    cut = int(size * 0.7)
    if where == "outer-file-cut":  # an interrupted download
        os.truncate(tar, offset + cut)
        kept = docs_before_cut(tar.read_bytes()[offset:])
        paths = [corpus_copy]
    else:  # a member whose own xz stream is cut short, inside a whole outer tar
        raw = tar.read_bytes()[offset : offset + cut]
        other = outer_tar(tmp_path / "t.tar", [("cut_data.xz", raw)])
        kept = docs_before_cut(raw)
        paths = [other]
        member = "cut_data.xz"
    assert 0 < len(kept) < 20
    with pytest.raises(CorpusError) as info:
        list(Loader(paths, workers=0))
    assert info.value.member == member
    with Loader(paths, workers=1, on_error="skip").iter() as it:
        got = {d.name: d.text for d in it}
        stats = it.stats
    expected = (
        {}
        if where == "member-cut"
        else {n: t for (f, m), docs in pristine.items() if m != member for n, t in docs.items()}
    )
    assert got == {**expected, **kept}
    assert stats.partial_members == 1
    assert stats.skipped_members == 0
    assert any(member in s and "partial" in s for s in stats.skipped)


# -- 7. even sharding needs no manual step ---------------------------------------------------


def test_even_sharding_counts_on_first_use_and_caches(
    corpus_copy: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert Corpus.open(corpus_copy).counts is None
    ranks = [names(Loader(corpus_copy, workers=0, rank=r, world_size=4)) for r in range(4)]
    assert len({len(r) for r in ranks}) == 1
    assert Corpus.open(corpus_copy).counts is not None
    assert capfd.readouterr().err == ""  # not interactive: no progress bar


def test_a_split_count_that_does_not_match_fails(corpus_copy: Path) -> None:
    corpus = Corpus.open(corpus_copy)
    counts_file = corpus.save_counts(count_documents(corpus, workers=0, splits=((0.2, 7),)))
    body = json.loads(counts_file.read_text())
    held = body["val"]["0.2/7"]
    body["val"]["0.2/7"] = [held[0] + 1 if held[0] < 20 else held[0] - 1, *held[1:]]
    counts_file.write_text(json.dumps(body))
    loader = Loader(corpus_copy, workers=0, rank=0, world_size=2, shuffle=False, split="val",
                    val_fraction=0.2, val_seed=7)  # fmt: skip
    with pytest.raises(CorpusError, match=r"documents in split 'val' but the counts file says"):
        list(itertools.islice(loader, 200))


def test_counting_shows_a_progress_bar_when_interactive(
    corpus_copy: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from openwebtext.stream import counts

    monkeypatch.setattr(counts, "_interactive", lambda: True)
    assert len(names(Loader(corpus_copy, workers=0, rank=1, world_size=2))) == 60
    err = capfd.readouterr().err
    assert "counting documents (once)" in err and "/6 " in err


def test_a_folder_of_folders_says_they_are_not_read(tmp_path: Path) -> None:
    """Red team, session 27: a folder's folders are not read, and nothing said so (a Hub
    layout's ``train/`` left out in silence); now the warning names them, and a folder of
    folders only is an error naming one to give."""
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "train" / "part-0.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(CorpusError, match=r"holds no corpus file \(its folders are not read: "
                       r"name one, e\.g\. .*train/?\)"):  # fmt: skip
        Corpus.open(tmp_path / "data")
    assert len(Corpus.open(tmp_path / "data" / "train").units) == 1
