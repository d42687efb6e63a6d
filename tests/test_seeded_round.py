"""What the seeded-bug round of issue 39 found unpinned (benchmarks/seeded_bugs.py): each
test here fails with the mutant it names (docs/testing.md has the round's table)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus
from openwebtext.errors import CorpusError
from openwebtext.tokenfiles import TokenFileError, llmc_header, read_llmc_header
from tables_support import sample_texts

TEXTS = sample_texts(12, seed=21)


def _parquet(path: Path, **options: object) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": TEXTS}), path, **options)
    return path


def test_a_footer_length_past_the_file_is_said_so(tmp_path: Path) -> None:
    """P2: a footer length that leaves no room for the leading PAR1 (size - 11 bytes)."""
    path = _parquet(tmp_path / "x.parquet")
    data = bytearray(path.read_bytes())
    data[-8:-4] = (len(data) - 11).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match="passes the file's size") as caught:
        Corpus.open(path)
    assert caught.value.path == str(path)


def test_the_llmc_header_alone_checks_the_file_size(tmp_path: Path) -> None:
    """K2: ``read_llmc_header`` (public) says a shard whose ids are fewer than announced."""
    ids = np.array([1, 2, 3, 9], "<u2")
    path = tmp_path / "s_000000.bin"
    path.write_bytes(llmc_header(len(ids)) + ids.tobytes())
    assert read_llmc_header(path) == 4
    path.write_bytes(llmc_header(len(ids) + 1) + ids.tobytes())
    with pytest.raises(TokenFileError, match="not the header and 5 uint16 ids"):
        read_llmc_header(path)


@pytest.mark.parametrize("short", [1, 4, 7, 8])
def test_a_footer_just_past_the_first_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short: int
) -> None:
    """P3: the first read of a file's end holds the footer's length but not all of the footer
    and its 8-byte trailer (``short`` bytes of it missing)."""
    from openwebtext import Loader
    from openwebtext.index import parquet

    path = _parquet(tmp_path / "x.parquet", row_group_size=5)
    length = int.from_bytes(path.read_bytes()[-8:-4], "little")
    monkeypatch.setattr(parquet, "FOOTER_GUESS", length + 8 - short)
    corpus = Corpus.open(path)
    assert len(corpus.units) == 3
    assert [d.text for d in Loader(corpus, workers=0, shuffle=False)] == TEXTS


def test_a_column_chunk_overlapping_the_footer_is_refused_at_index_time(tmp_path: Path) -> None:
    """P5: the last row group's text chunk ends one byte into the footer (a byte of data cut
    out before it: the footer's offsets still say where the chunk was)."""
    pq = pytest.importorskip("pyarrow.parquet")
    path = _parquet(tmp_path / "x.parquet", row_group_size=6)
    chunk = pq.read_metadata(path).row_group(1).column(0)
    start = min(chunk.data_page_offset, chunk.dictionary_page_offset or chunk.data_page_offset)
    end = start + chunk.total_compressed_size
    data = path.read_bytes()
    assert data[end:].startswith(data[-8 - int.from_bytes(data[-8:-4], "little") : -8][:16])
    path.write_bytes(data[: end - 1] + data[end:])
    with pytest.raises(CorpusError, match=r"row group 1's column 'text' lies outside"):
        Corpus.open(path)


def test_megatron_document_indices_that_stop_short_are_refused(tmp_path: Path) -> None:
    """K7: document indices that end before the last sequence would leave its documents out."""
    from openwebtext.tokenfiles import megatron_index, read_megatron_index

    ends = np.array([3, 5, 9], np.int64)
    body = bytearray(megatron_index(ends, np.dtype("<u2")))
    assert read_megatron_index(tmp_path / "x.idx", bytes(body))[1].tolist() == [3, 5, 9]
    body[-8:] = (2).to_bytes(8, "little")  # indices 0, 1, 2, 2: the last sequence left out
    with pytest.raises(TokenFileError, match="document indices do not run from 0 to 3"):
        read_megatron_index(tmp_path / "x.idx", bytes(body))


@pytest.mark.parametrize("extra", [b"\0\0\0", (3).to_bytes(8, "little")])
def test_a_megatron_index_with_bytes_past_its_end_is_refused(tmp_path: Path, extra: bytes) -> None:
    """K8: bytes after the document indices (3 of them; or one more index, equal to the
    sequences' count: an empty document more) are not the index's."""
    from openwebtext.tokenfiles import megatron_index, read_megatron_index

    body = megatron_index(np.array([3, 5, 9], np.int64), np.dtype("<u2")) + extra
    with pytest.raises(TokenFileError, match="bytes, not the"):
        read_megatron_index(tmp_path / "x.idx", body)


def test_a_parquet_file_of_no_row_group_holds_no_document(tmp_path: Path) -> None:
    """P9: a parquet file without row groups (a writer opened and closed; Spark's empty
    partition) beside a good one. Session 30 reversed this round's choice (it was refused as
    "without row groups"): its footer says it holds no row, which is no damage, and a
    folder of Spark's output could not be read; it is taken as the JSON lines file of no
    line is. A file with no footer at all is still an error (``test_parquet``)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    _parquet(tmp_path / "a.parquet")
    with pq.ParquetWriter(tmp_path / "b.parquet", pa.schema([("text", pa.string())])):
        pass
    assert pq.read_metadata(tmp_path / "b.parquet").num_row_groups == 0
    corpus = Corpus.open(tmp_path)
    assert {Path(u.path).name for u in corpus.units} == {"a.parquet"}
    assert corpus.skipped_files == ()


def test_a_megatron_bin_longer_than_its_index_is_refused(tmp_path: Path) -> None:
    """K11: ids past what the .idx says (another run's .bin beside this .idx) are not left
    out without a word."""
    from openwebtext.tokenfiles import megatron_index, open_token_file

    ids = np.array([1, 2, 9, 3, 9], "<u2")
    (tmp_path / "m.idx").write_bytes(megatron_index(np.array([3, 5]), ids.dtype))
    (tmp_path / "m.bin").write_bytes(ids.tobytes())
    assert open_token_file(tmp_path / "m.bin").ends.tolist() == [3, 5]
    (tmp_path / "m.bin").write_bytes(np.concatenate([ids, ids]).tobytes())
    with pytest.raises(TokenFileError, match=r"10 ids, not the 5 of its m\.idx"):
        open_token_file(tmp_path / "m.bin")


def test_plain_parquet_values_are_bounded_at_the_byte(tmp_path: Path) -> None:
    """T1: a row group of plain values whose text chunk is one byte past max_member_bytes
    uncompressed is too large; at the limit it is read."""
    from openwebtext import Loader
    from openwebtext.errors import MemberTooLarge

    pq = pytest.importorskip("pyarrow.parquet")
    path = _parquet(tmp_path / "p.parquet", use_dictionary=False, compression="zstd")
    size = pq.read_metadata(path).row_group(0).column(0).total_uncompressed_size
    with pytest.raises(MemberTooLarge, match="past max_member_bytes") as raised:
        list(Loader(path, workers=0, max_member_bytes=size - 1))
    assert raised.value.path == str(path)
    assert [d.text for d in Loader(path, workers=0, shuffle=False, max_member_bytes=size)] == TEXTS


def test_a_cut_compressed_jsonl_is_one_partial_member_and_no_bad_document(tmp_path: Path) -> None:
    """J1: the line the cut went through is not read (it would be a bad document more)."""
    from openwebtext import Loader
    from tables_support import write_jsonl

    path = write_jsonl(tmp_path / "t.jsonl.gz", TEXTS)
    path.write_bytes(path.read_bytes()[:-60])
    with Loader(path, workers=0, on_error="skip", shuffle=False).iter() as it:
        got = [d.text for d in it]
        assert (it.stats.partial_members, it.stats.skipped_documents) == (1, 0)
    assert 0 < len(got) < len(TEXTS) and got == TEXTS[: len(got)]


def test_crlf_json_lines_with_blank_lines_read_whole(tmp_path: Path) -> None:
    """J2: a file written with CRLF line ends; its blank lines (\\r\\n) are no documents, as
    empty lines are, not bad ones."""
    import json

    from openwebtext import Loader

    lines = [json.dumps({"text": t}) for t in TEXTS[:3]]
    path = tmp_path / "w.jsonl"
    path.write_bytes("\r\n".join([lines[0], "", lines[1], lines[2], "", ""]).encode())
    with Loader(path, workers=0, shuffle=False).iter() as it:
        assert [d.text for d in it] == TEXTS[:3]
        assert it.stats.skipped_documents == 0


def test_a_plain_jsonl_cut_in_chunks_names_documents_by_their_byte_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """J5: a document of a later chunk is named by where its line starts in the file, not in
    its chunk (names must stay distinct: the held-out split hashes them)."""
    import json

    from openwebtext import Loader
    from openwebtext.index import jsonl

    monkeypatch.setattr(jsonl, "CHUNK_BYTES", 256)
    lines = [json.dumps({"text": t[:80]}).encode() + b"\n" for t in TEXTS]
    path = tmp_path / "w.jsonl"
    path.write_bytes(b"".join(lines))
    starts = np.concatenate([[0], np.cumsum([len(line) for line in lines])[:-1]]).tolist()
    corpus = Corpus.open(path)
    assert len(corpus.units) > 2
    names = [d.name for d in Loader(corpus, workers=0, shuffle=False)]
    assert names == [f"w.jsonl@{s}" for s in starts]


def test_a_token_unit_takes_a_document_that_ends_at_its_bound(tmp_path: Path) -> None:
    """X5: units of ``unit_tokens`` ids hold every document that ends within the bound (one
    ending at it included): the units, and so the seeded order, are the format's."""
    ids = np.array([1, 9, 2, 9, 3, 9, 4, 9], "<u2")
    path = tmp_path / "train.bin"
    path.write_bytes(ids.tobytes())
    corpus = Corpus.open_tokens(path, eot=9, unit_tokens=4)
    assert [u.member for u in corpus.units] == ["docs 0-2", "docs 2-4"]


def test_a_finished_run_whose_file_changed_size_is_run_again(
    small_corpus: Path, tmp_path: Path
) -> None:
    """R4: a folder's meta.json says the run finished, but a file is no longer its size (cut
    by a copy that failed): the run is not 'already finished', it writes the files again."""
    from openwebtext.prepare import PrepareOptions, prepare

    options = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1)
    corpus, out = Corpus.open(small_corpus), tmp_path / "out"
    prepare(corpus, out, options)
    whole = (out / "train.bin").read_bytes()
    assert prepare(corpus, out, options).already
    (out / "train.bin").write_bytes(whole[:-2])
    again = prepare(corpus, out, options)
    assert not again.already and (out / "train.bin").read_bytes() == whole


@pytest.mark.parametrize("cut", [-1, True, "3"])
def test_an_old_ranks_cut_below_zero_or_not_a_count_is_refused(cut: object) -> None:
    """S2: a resharded state whose old rank's ``cut`` (concat batches: ids of its next
    document already handed out, plus one) is negative names that field."""
    import copy
    import json

    from openwebtext import StateError
    from openwebtext.stream import DocumentState

    golden = json.loads((Path(__file__).parent / "data" / "states-2.json").read_text())
    state = copy.deepcopy(golden["resharded"])
    state["reshard"]["ranks"][1]["cut"] = 2
    DocumentState.from_json(state)  # a count: read
    state["reshard"]["ranks"][1]["cut"] = cut
    with pytest.raises(StateError, match=r"reshard\.ranks\[1\]\.cut") as raised:
        DocumentState.from_json(state)
    assert raised.value.field == "reshard.ranks[1].cut"


def test_an_empty_jsonl_file_is_said(tmp_path: Path) -> None:
    """J13: an empty ``.jsonl`` beside a good one (a download that failed) is an error naming
    it, or a counted skip: not a file of nothing left out without a word."""
    from tables_support import write_jsonl

    write_jsonl(tmp_path / "a.jsonl", TEXTS)
    (tmp_path / "b.jsonl").write_bytes(b"")
    with pytest.raises(CorpusError, match="empty file") as raised:
        Corpus.open(tmp_path)
    assert raised.value.path == str(tmp_path / "b.jsonl")
    assert len(Corpus.open(tmp_path, on_error="skip").skipped_files) == 1


def test_a_jsonl_zst_of_plain_bytes_is_refused_at_index_time(tmp_path: Path) -> None:
    """J10: a file named ``.jsonl.zst`` whose bytes are plain JSON lines (not zstd) is an
    error naming it when the corpus is opened, not a member that fails later."""
    from tables_support import jsonl_bytes

    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(jsonl_bytes(TEXTS, "text"))
    with pytest.raises(CorpusError, match="named zstd JSON lines, but its bytes are not") as raised:
        Corpus.open(path)
    assert raised.value.path == str(path)


def test_a_meta_whose_counts_are_of_another_kind_of_run_is_refused() -> None:
    """R8: a hash-split run's meta.json counting the splits of a slice (``all``) names
    ``counts``: the counts must be of the run's own splits."""
    import copy
    import json

    from openwebtext import StateError
    from openwebtext.prepare.state import Meta

    golden = json.loads((Path(__file__).parent / "data" / "prepare-2.json").read_text())
    meta = copy.deepcopy(golden["meta_hash"])
    Meta.from_json(meta)
    for key in ("documents", "tokens"):
        counts = meta["counts"][key]
        meta["counts"][key] = {"all": counts["train"], "val": counts["val"]}
    with pytest.raises(StateError, match="counts") as raised:
        Meta.from_json(meta)
    assert raised.value.field is not None and raised.value.field.startswith("counts")


def test_slices_overlapping_by_one_unit_are_not_merged(small_corpus: Path, tmp_path: Path) -> None:
    """R3: slices of different counts that overlap by exactly one unit (shard 0/2 holds units
    [0, 3), shard 1/3 [2, 4)): that unit's documents would be in the run twice."""
    from openwebtext.prepare import PrepareError, PrepareOptions, merge, prepare

    corpus = Corpus.open(small_corpus)
    assert len(corpus.units) == 6
    options = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1)
    shards = [(0, 2), (1, 3), (2, 3)]
    for i, n in shards:
        prepare(corpus, tmp_path / f"s{i}-{n}", options, shard=(i, n))
    with pytest.raises(PrepareError, match="overlaps"):
        merge([tmp_path / f"s{i}-{n}" for i, n in shards], tmp_path / "m")


def test_a_jsonl_field_other_than_text_is_read_and_known(tmp_path: Path) -> None:
    """J11: the field is part of how the bytes are read (the units' kind): a corpus read by
    another field reads that field, and is another corpus (its fingerprint)."""
    import json

    from openwebtext import Loader

    path = tmp_path / "b.jsonl"
    rows = [{"text": "not this", "body": t} for t in TEXTS]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = Corpus.open(path, text_column="body")
    assert [d.text for d in Loader(corpus, workers=0, shuffle=False)] == TEXTS
    assert corpus.fingerprint() != Corpus.open(path).fingerprint()


def test_no_meta_json_when_the_folder_is_lost_after_the_files_are_in_place(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R6: the lock is checked again after the files are renamed into place and before
    meta.json is written: a run that lost the folder meanwhile (another run took its lock)
    leaves no meta.json saying files are finished that another run may have replaced."""
    import importlib

    from openwebtext.prepare import PrepareError, PrepareOptions, prepare

    run = importlib.import_module("openwebtext.prepare.run")
    out = tmp_path / "out"

    def lost_once_files_are_in_place(folder: Path) -> None:
        if (out / "train.bin").exists():
            raise PrepareError(f"{folder}: the lock was replaced by another run's")

    monkeypatch.setattr(run, "confirm", lost_once_files_are_in_place)
    options = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1)
    with pytest.raises(PrepareError, match="replaced by another run"):
        prepare(Corpus.open(small_corpus), out, options)
    assert (out / "train.bin").exists() and not (out / "meta.json").exists()


def test_an_evened_out_pass_never_crosses_its_laps_end() -> None:
    """S4: a pass of a share short of its target wraps to the share's start, but a pass ends
    at the end of the lap it started in (blocks cut where an uninterrupted run cuts them)."""
    from openwebtext.plan import even_end, pass_end

    counts = [2, 2, 2]
    assert pass_end(counts, 2, 10) == 3  # the lap [0, 3) ends: 2 documents, not 10
    assert pass_end(counts, 3, 3) == 5  # the next lap, from its start
    assert even_end(counts, 10) == 5


def test_a_member_cut_short_is_a_skip() -> None:
    """S5: ``skips`` (what max_errors bounds, and whether an old rank skipped nothing when
    resharded) counts members cut short as the skips they are."""
    from openwebtext.stream.counters import Counters

    assert Counters(partial_members=1).skips == 1
    assert Counters(skipped_members=1, skipped_documents=2, partial_members=3).skips == 6


def test_a_format_pass_refuses_more_documents_than_meta_json_counts(
    small_corpus: Path, tmp_path: Path
) -> None:
    """R10: a ``train.bin`` with an end-of-text id written inside a document (what a tokenizer
    that emits one in a text leaves; same size, so meta.json's sizes agree) holds one document
    more than meta.json counts: the format pass refuses it, rather than cut that document in two
    in the trainer's index."""
    from openwebtext.prepare import PrepareError, PrepareOptions, prepare, write_format

    prepare(Corpus.open(small_corpus), tmp_path, PrepareOptions(tokenizer="bytes", workers=0))
    ids = np.fromfile(tmp_path / "train.bin", "<u2")
    first_end = int(np.flatnonzero(ids == 256)[0])
    assert first_end > 2
    ids[first_end // 2] = 256  # the first document now ends twice
    ids.tofile(tmp_path / "train.bin")
    with pytest.raises(PrepareError, match=r"train.bin: \d+ documents end at the end-of-text id"):
        write_format(tmp_path, "megatron")
    assert not (tmp_path / "megatron.json").exists() and not (tmp_path / "train.idx").exists()


def test_an_old_rank_that_skipped_a_document_is_resharded(tmp_path: Path) -> None:
    """S6: an old rank that skipped a document (``on_error="skip"``) stands at a position
    one document past what its count of handed-out documents says; a reshard checks such a
    rank's position by its bounds only, and the new rank hands out the rest of the epoch once."""
    import itertools
    import json
    from typing import Any

    from openwebtext import Loader, reshard
    from support import outer_tar, sample_docs, xz_member

    docs = [sample_docs(f"m{i}", 4) for i in range(4)]
    docs[0]["m0-001.txt"] = b"\xff\xfe not UTF-8"
    path = outer_tar(tmp_path / "c.tar", [(f"m{i}.xz", xz_member(d)) for i, d in enumerate(docs)])
    opts: dict[str, Any] = dict(shuffle=False, workers=0, on_error="skip", world_size=2, even=None)

    def read(rank: int, n: int | None, state: Any = None, **more: Any) -> tuple[list[str], Any]:
        with Loader(path, **{**opts, "rank": rank, **more}).iter(state=state) as it:
            names = [d.name for d in itertools.islice(it, n)]
            return names, json.loads(json.dumps(it.state_dict()))

    epoch = read(0, None)[0] + read(1, None)[0]
    assert len(epoch) == 15 and "m0-001.txt" not in epoch
    first, s0 = read(0, 5)  # past the skipped document
    second, s1 = read(1, 1)
    assert s0["counters"]["skipped_documents"] == 1
    [state] = reshard([s0, s1], 1)
    rest, _ = read(0, None, state, world_size=1)
    assert sorted(first + second + rest) == sorted(epoch)
