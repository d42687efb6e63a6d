"""Behaviour that seeded bugs of round 10 (docs/testing.md) changed with no test failing: each
test here pins one, and was run against its mutant (named by its ID: M ``owt tokenize``'s
runs, slices, merges and formats, S the stream's reshards and counts, X the index's checks, P
its paths, C the command line)."""

from __future__ import annotations

import copy
import gzip
import json
import lzma
import random
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Schedule, StateError, reshard
from openwebtext.prepare import PrepareError, PrepareOptions, merge, prepare, write_format
from openwebtext.records import Unit
from openwebtext.synth import write_corpus
from support import Owt, bestfit_doc_names, inner_tar, outer_tar, read_varint, varint

EOT = 50256  # gpt2's end of text


def _corpus(folder: Path, members: int, docs: int, subsets: int = 1) -> Corpus:
    write_corpus(folder, subsets=subsets, members=members, docs=docs, seed=0, workers=1)
    return Corpus.open(folder)


def _bytes_options(rule: str = "hash", **more: Any) -> PrepareOptions:
    return PrepareOptions(split_rule=rule, tokenizer="bytes", workers=0, **more)  # type: ignore[arg-type]


def _slices(corpus: Corpus, root: Path, count: int, rule: str = "nanogpt") -> list[Path]:
    """The ``count`` slices of ``corpus`` (``prepare(..., shard=(i, count))``) under ``root``."""
    folders = [root / f"s{i}" for i in range(count)]
    for i, folder in enumerate(folders):
        prepare(corpus, folder, _bytes_options(rule), shard=(i, count))
    return folders


def _one_bad_document(folder: Path, name: str, subset: int, docs: int, bad: int | None) -> None:
    """An outer tar of one xz member of ``docs`` documents, document ``bad`` not UTF-8."""
    texts = {f"{subset}00000{k}-x.txt": f"document {subset} number {k}\n".encode()
             for k in range(docs)}  # fmt: skip
    if bad is not None:
        texts[f"{subset}00000{bad}-x.txt"] = b"bad \xff\xfe utf-8"
    member = (f"urlsf_subset0{subset}-1_data.xz", lzma.compress(inner_tar(texts)))
    outer_tar(folder / name, [member])


# -- merges of slices ---------------------------------------------------------------------------


def test_merge_names_a_missing_slice_of_one_unit(tmp_path: Path) -> None:
    """M02: slices 0 and 2 of 3 over 3 units (a gap of one unit) were merged as the whole run."""
    corpus = _corpus(tmp_path / "c", members=3, docs=5)
    assert len(corpus.units) == 3
    s0, _, s2 = _slices(corpus, tmp_path, 3)
    with pytest.raises(PrepareError, match=r"missing.*shard 1/3|shard 1/3.*missing"):
        merge([s0, s2], tmp_path / "m")


def test_merge_without_verify_refuses_a_slice_file_longer_than_its_meta(tmp_path: Path) -> None:
    """M07: under ``verify=False`` only a file shorter than its ``meta.json`` said was refused:
    one with bytes appended was merged (sizes are checked either way)."""
    corpus = _corpus(tmp_path / "c", members=2, docs=5)
    s0, s1 = _slices(corpus, tmp_path, 2)
    with open(s1 / "tokens.bin", "ab") as f:
        f.write(b"\0\0\0\0")
    with pytest.raises(PrepareError, match="not the"):
        merge([s0, s1], tmp_path / "m", verify=False)


def test_a_damaged_local_copy_of_a_remote_slice_is_fetched_again(tmp_path: Path) -> None:
    """M30: ``outputs.fetch(..., verify=False)`` (a merge of slices given by URL under
    ``--no-verify``) took a local copy whose file had lost bytes since it was made."""
    fsspec = pytest.importorskip("fsspec")
    from openwebtext.prepare import outputs

    corpus = _corpus(tmp_path / "c", members=2, docs=5)
    s0 = tmp_path / "s0"
    prepare(corpus, s0, _bytes_options("nanogpt"), shard=(0, 2))
    fs, url = fsspec.filesystem("memory"), f"memory://r10-{tmp_path.name}/s0"
    meta = json.loads((s0 / "meta.json").read_text())
    want = meta["files"]["tokens.bin"]["bytes"]
    try:
        for p in s0.iterdir():
            fs.pipe(f"{url}/{p.name}", p.read_bytes())
        local = outputs.fetch(url, meta, verify=False)
        damaged = local / "tokens.bin"
        damaged.write_bytes(damaged.read_bytes()[:-8])
        again = outputs.fetch(url, meta, verify=False)
        assert (again / "tokens.bin").stat().st_size == want
    finally:
        shutil.rmtree(outputs.staging(url, "fetch"), ignore_errors=True)
        fs.rm(url.removesuffix("/s0"), recursive=True)


def test_owt_merge_no_verify_takes_a_slice_changed_at_its_size(tmp_path: Path, owt: Owt) -> None:
    """C05: ``owt merge --no-verify`` passed ``verify=True`` on: a slice file changed in place
    (the documented skip: sizes only) was refused by its sha256."""
    corpus = _corpus(tmp_path / "c", members=2, docs=5)
    s0, s1 = _slices(corpus, tmp_path, 2, rule="hash")
    path = s1 / "train.bin"
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    refused = owt("merge", str(s0), str(s1), "--out", str(tmp_path / "v"), "-q")
    assert refused.returncode != 0 and "sha256" in refused.stderr
    ran = owt("merge", str(s0), str(s1), "--out", str(tmp_path / "m"), "--no-verify", "-q")
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "m" / "meta.json").is_file()


# -- runs of owt tokenize -------------------------------------------------------------------------


def test_a_hash_run_does_not_count_a_skipped_document_as_written(tmp_path: Path) -> None:
    """M14: a document skipped as not UTF-8 (``on_error="skip"``) was counted in
    ``meta.json``'s documents of a hash run, one more than the end-of-text ids written."""
    (tmp_path / "c").mkdir()
    _one_bad_document(tmp_path / "c", "urlsf_subset00.tar", 0, docs=6, bad=3)
    options = PrepareOptions(split_rule="hash", tokenizer="gpt2", workers=0, on_error="skip")
    counts = prepare(Corpus.open(tmp_path / "c"), tmp_path / "out", options).meta["counts"]
    eots = sum(int((np.fromfile(tmp_path / "out" / f"{s}.bin", "<u2") == EOT).sum())
               for s in ("train", "val"))  # fmt: skip
    assert counts["skipped_documents"] == 1
    assert sum(counts["documents"].values()) == eots == 5


@pytest.mark.parametrize("rule", ["hash", "nanogpt"])
def test_take_writes_exactly_that_many_documents(tmp_path: Path, rule: str) -> None:
    """M15 (hash), M16 (nanogpt): ``take=N`` wrote N + 1 documents."""
    corpus = _corpus(tmp_path / "c", members=2, docs=5)
    for take in (3, 7):
        meta = prepare(corpus, tmp_path / f"t{take}", _bytes_options(rule, take=take)).meta
        assert sum(meta["counts"]["documents"].values()) == take


def test_a_finished_run_whose_train_bin_lost_bytes_runs_again(tmp_path: Path) -> None:
    """M19: a finished run was "already finished" whatever its files' sizes: a train.bin cut
    short stayed so."""
    corpus = _corpus(tmp_path / "c", members=2, docs=5)
    first = prepare(corpus, tmp_path / "out", _bytes_options())
    path = tmp_path / "out" / "train.bin"
    path.write_bytes(path.read_bytes()[:-10])
    again = prepare(corpus, tmp_path / "out", _bytes_options())
    assert not again.already
    assert path.stat().st_size == first.meta["files"]["train.bin"]["bytes"]


# -- slices ----------------------------------------------------------------------------------------


def test_slice_sizes_follow_the_run_s_shuffled_unit_order(tmp_path: Path) -> None:
    """M21: each slice's size summed the units at its positions in the corpus's order, not
    those of the run's shuffled order that the slice holds."""
    from openwebtext.plan import shard_range
    from openwebtext.prepare.config import unit_order
    from openwebtext.prepare.slices import slice_sizes

    corpus = _corpus(tmp_path / "c", members=4, docs=3, subsets=2)
    options = _bytes_options(seed=3)
    order = list(unit_order(corpus, options))
    assert order != sorted(order)
    want = [sum(corpus.units[u].size for u in order[slice(*shard_range(len(order), i, 3))])
            for i in range(3)]  # fmt: skip
    assert slice_sizes(corpus, options, 3) == want


def test_slice_folders_refuse_an_absolute_folder(tmp_path: Path) -> None:
    """M22: ``under="/etc/x"`` was taken: the slices would be written outside ``out``."""
    from openwebtext.prepare.slices import slice_folders

    assert len(slice_folders(tmp_path / "out", "x", 2)) == 2
    with pytest.raises(ValueError):
        slice_folders(tmp_path / "out", "/etc/x", 2)


# -- formats ---------------------------------------------------------------------------------------


@pytest.fixture
def gpt2_run(tmp_path: Path) -> Path:
    """A hash run of 40 documents, gpt2 ids: two llm.c shards of train at 5,000 ids."""
    out = tmp_path / "out"
    options = PrepareOptions(split_rule="hash", tokenizer="gpt2", workers=0)
    prepare(_corpus(tmp_path / "c", members=2, docs=20), out, options)
    return out


def test_llmc_is_refused_for_a_run_of_uint32_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M23: llm.c shards (uint16 ids) were written of a cl100k_base run: its ids cut."""
    pytest.importorskip("splintr")
    from tokenizer_support import cl100k_cache

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cl100k_cache(tmp_path / "tiktoken")))
    options = PrepareOptions(split_rule="hash", tokenizer="tiktoken:cl100k_base", workers=0)
    meta = prepare(_corpus(tmp_path / "c", members=1, docs=5), tmp_path / "out", options).meta
    assert meta["config"]["dtype"] == "uint32"
    with pytest.raises(ValueError, match=r"llm\.c shards hold uint16 ids"):
        write_format(tmp_path / "out", "llmc")
    assert not list((tmp_path / "out").glob("train_*.bin"))


def test_a_shard_cut_short_after_an_interrupted_format_pass_is_rewritten(gpt2_run: Path) -> None:
    """M24: a pass going on from a killed one kept a shard the killed pass had recorded
    although it was no longer its recorded size."""

    class Stop(Exception):
        pass

    def stop(_: object) -> None:
        raise Stop

    with pytest.raises(Stop):
        write_format(gpt2_run, "llmc", shard_tokens=5000, progress=stop)
    shard = gpt2_run / "train_000000.bin"
    whole = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-100])
    marker = write_format(gpt2_run, "llmc", shard_tokens=5000)
    assert marker is not None
    assert shard.stat().st_size == whole == marker["files"][shard.name]["bytes"]


def test_a_stray_shard_beside_a_finished_llmc_format_is_removed(gpt2_run: Path) -> None:
    """M26: a finished format was returned as it stood, a ``train_000099.bin`` copied in beside
    it left for a trainer's glob."""
    write_format(gpt2_run, "llmc", shard_tokens=5000)
    stray = gpt2_run / "train_000099.bin"
    shutil.copy(gpt2_run / "train_000000.bin", stray)
    write_format(gpt2_run, "llmc", shard_tokens=5000)
    assert not stray.exists()


def test_a_finished_format_whose_shard_lost_bytes_is_written_again(gpt2_run: Path) -> None:
    """M27: a format's marker was taken as finished whatever its shards' sizes."""
    marker = write_format(gpt2_run, "llmc", shard_tokens=5000)
    assert marker is not None
    shard = gpt2_run / "train_000001.bin"
    shard.write_bytes(shard.read_bytes()[:-100])
    write_format(gpt2_run, "llmc", shard_tokens=5000)
    assert shard.stat().st_size == marker["files"][shard.name]["bytes"]


def test_one_block_of_train_tokens_is_not_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    """C06: a train.bin of exactly 1,024 tokens (one block) was warned of as less than one."""
    from openwebtext.cli.prepared import _warn_small_splits

    def said(train: int) -> str:
        meta = {"counts": {"tokens": {"train": train, "val": 4096},
                           "documents": {"train": 3, "val": 9}},
                "config": {"take": None, "split_rule": "hash", "val_fraction": 0.5}}  # fmt: skip
        _warn_small_splits(meta)
        return capsys.readouterr().err

    assert "train.bin holds only 1,023 tokens" in said(1023)
    assert said(1024) == ""


# -- the stream's reshards -------------------------------------------------------------------------


def test_a_state_edited_into_a_best_fit_window_is_refused_when_resharded(tmp_path: Path) -> None:
    """S02: a middle state of best fit 3 -> 2 -> 3 under ``pad`` whose position was moved one
    document into the window it was in was resharded with that window dropped."""
    from test_red_bestfit_reshard_skips import _layout
    from test_red_bestfit_reshard_twice import TWICE, _hand_out, _twice

    case, stops, world = TWICE[1]
    layout = _layout(tmp_path, case)
    middles, _, _, _ = _twice(layout, case, stops, world)
    edited = copy.deepcopy(middles)
    edited[0]["documents"]["position"]["in_block"] += 1
    with pytest.raises(StateError, match="inside a best-fit window"):
        _hand_out(layout, case, reshard(edited, world, even=cast(Any, case.even)))


def test_a_window_into_its_lap_is_refused_before_a_batch_of_it(tmp_path: Path) -> None:
    """S04: 2 -> 3 -> 2 best fit under ``drop``, a window new rank 2 began ran into the lap
    repeating its share: the rank it is dealt to handed out a batch before refusing it."""
    from test_red_bestfit_reshard_skips import Case, _layout, _loader
    from test_red_bestfit_reshard_twice import INTO_LAP, _twice
    from test_red_overrun_resume import _kw

    case = Case(2, 3, "share-end", False, "drop", 0, 3, 1, 24, 8)
    layout = _layout(tmp_path, case)
    middles, _, _, _ = _twice(layout, case, ((3, 1), (1, 6, 2)), 2)
    refusals = []
    for r, state in enumerate(reshard(middles, 2, even=cast(Any, case.even))):
        out: list[list[str]] = []
        try:
            with _loader(layout, case, r, 2).batches(state=state, **_kw(case)) as it:
                for batch in it:
                    out.append(bestfit_doc_names(batch))
        except StateError as exc:
            assert INTO_LAP in str(exc)
            refusals.append((r, out))
    assert refusals and all(out == [] for _, out in refusals), refusals


def test_resharded_scheduled_ranks_go_on_from_the_furthest_batch(tmp_path: Path) -> None:
    """S08: ranks of a warm-up schedule stopped at batches 3 and 6, resharded, went on from
    batch 3 (the least advanced) of the schedule, not 6."""
    from openwebtext.stream.counts import count_documents

    warmup = Schedule.warmup(64, 1024, tokens=1024, batches=8, stages=3, ramp="geometric")
    corpus = _corpus(tmp_path / "c", members=4, docs=20)
    corpus.save_counts(count_documents(corpus, workers=0))

    def state_after(rank: int, batches: int) -> Any:
        loader = Loader(tmp_path / "c", workers=0, seed=0, tokenizer="bytes", rank=rank,
                        world_size=2, even="drop")  # fmt: skip
        with loader.batches(schedule=warmup) as it:
            for n, _ in enumerate(it, 1):
                if n == batches:
                    break
            return json.loads(json.dumps(it.state_dict()))

    states = [state_after(0, 3), state_after(1, 6)]
    assert [s["schedule"]["at"] for s in states] == [3, 6]
    assert [s["schedule"]["at"] for s in reshard(states, 2)] == [6, 6]


def _overrun_case(tmp_path: Path, which: str) -> tuple[Any, Any, Any, list[Any], list[Any]]:
    """(case, the new rank 0's loader, its uninterrupted batches and states) of a best-fit
    reshard whose old rank 0 began a window that ran into the pass repeating its share."""
    from test_red_bestfit_reshard_skips import Case
    from test_red_overrun_resume import Resharded, _every

    if which == "pad":
        case = Case(4, 1, "window-edge", False, "pad", 0, 3, 1, 24, 8)
        made = Resharded(tmp_path, case, (7, 2, 2, 2))
    else:
        case = Case(2, 1, "share-middle", False, "drop", 0, 3, 1, 24, 8)
        made = Resharded(tmp_path, case, (15, 2))
    loader = made.loader(0)
    whole, states, _ = _every(loader, case, made.news[0])
    return case, loader, _every, whole, states


def test_an_old_window_ending_inside_its_share_cannot_hold_an_overrun(tmp_path: Path) -> None:
    """S15: old rank 0's ``block`` one less, its window then ending inside its share with as
    many slots left as it has repeats, was resumed into other batches, not refused."""
    case, loader, every, whole, states = _overrun_case(tmp_path, "pad")
    edited = copy.deepcopy(states[0])
    edited["documents"]["reshard"]["ranks"][0]["block"] -= 1
    with pytest.raises(StateError, match="ends inside its share"):
        every(loader, case, edited, len(whole) + 4)


def test_a_window_s_repeats_past_its_overrun_are_refused(tmp_path: Path) -> None:
    """S16: a window's ``repeats`` raised to 2 where the pass repeating its share holds 1 of it
    was handed out as if it held 2."""
    case, loader, every, whole, states = _overrun_case(tmp_path, "drop")
    edited = copy.deepcopy(states[0])
    edited["documents"]["reshard"]["windows"][0]["repeats"] = 2
    with pytest.raises(StateError, match="the pass repeating its share holds 1 of it"):
        every(loader, case, edited, len(whole) + 4)


def test_a_state_inside_an_overrun_counting_part_of_its_repeats_resumes(tmp_path: Path) -> None:
    """S12: a state taken at an overrun's end, its ``reshard.overrun`` counting 1 of its
    window's 2 repeats (as a state inside the overrun does), was refused."""
    case, loader, every, whole, states = _overrun_case(tmp_path, "drop")
    edited = copy.deepcopy(states[1])
    edited["documents"]["reshard"]["windows"][0]["repeats"] = 2
    got, _, _ = every(loader, case, edited, len(whole) + 3)
    assert got == whole[1:]


# -- the stream's counts ---------------------------------------------------------------------------


def test_an_even_train_stream_over_a_skipped_document_reads_on(tmp_path: Path) -> None:
    """S21: a document skipped as not UTF-8 was left out of its member's count when checked, so
    an even stream of split ``train`` took the member as changed since it was counted."""
    (tmp_path / "c").mkdir()
    _one_bad_document(tmp_path / "c", "urlsf_subset00.tar", 0, docs=8, bad=3)
    _one_bad_document(tmp_path / "c", "urlsf_subset01.tar", 1, docs=8, bad=None)
    options: dict[str, Any] = {"workers": 0, "seed": 0, "split": "train", "val_fraction": 0.2,
                               "val_seed": 7, "on_error": "skip", "epochs": 1}  # fmt: skip
    with Loader(tmp_path / "c", **options).iter() as it:
        train = {d.name for d in it}
    names: list[str] = []
    for rank in range(2):
        loader = Loader(tmp_path / "c", rank=rank, world_size=2, even="drop", **options)
        with loader.iter() as it:
            names += [d.name for d in it]
    assert names and set(names) <= train


# -- the index -------------------------------------------------------------------------------------


class _Bytes:
    """A file as ``member_check`` reads it: its size, ``pread``."""

    def __init__(self, data: bytes) -> None:
        self.data, self.size = data, len(data)

    def pread(self, n: int, offset: int) -> bytes:
        return self.data[offset : offset + n]


def _xz_of_blocks(chunks: list[bytes]) -> bytes:
    """One xz stream (CRC64) holding each of ``chunks`` as a block of its own."""
    blocks, records = [], b""
    for chunk in chunks:
        one = lzma.compress(chunk, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64)
        index = one[-12 - (struct.unpack("<I", one[-8:-4])[0] + 1) * 4 : -12]
        _, pos = read_varint(index, 1)
        unpadded, pos = read_varint(index, pos)
        size, _ = read_varint(index, pos)
        blocks.append(one[12 : -12 - len(index)])
        records += varint(unpadded) + varint(size)
    header, flags = one[:12], one[-4:-2]
    body = b"\x00" + varint(len(chunks)) + records
    body += bytes(-len(body) % 4)
    index = body + struct.pack("<I", zlib.crc32(body))
    backward = struct.pack("<I", len(index) // 4 - 1)
    footer = struct.pack("<I", zlib.crc32(backward + flags)) + backward + flags + b"YZ"
    return header + b"".join(blocks) + index + footer


def test_a_member_check_covers_every_xz_block(tmp_path: Path) -> None:
    """X01: only the first block's check was read: a member whose third block holds other text
    (every block's size, so the stream's index, the same) had the same check."""
    from openwebtext.index.checks import member_check

    text = random.Random(0).randbytes(5 * 4096)  # stored as it is: sizes fixed by lengths
    changed = bytearray(text)
    changed[2 * 4096 + 7] ^= 1
    base, made = (_xz_of_blocks([t[i : i + 4096] for i in range(0, len(t), 4096)])
                  for t in (text, bytes(changed)))  # fmt: skip
    assert lzma.decompress(base) == text and lzma.decompress(made) == bytes(changed)
    assert len(made) == len(base)
    unit = Unit("f", "m", 0, len(base), "xz", "s", 0)
    assert member_check(_Bytes(base), unit) != member_check(_Bytes(made), unit)


def test_a_non_xz_member_s_check_reads_its_own_bytes_only() -> None:
    """X04: a gzip member's check read whole chunks, past its end into the next member."""
    from openwebtext.index.checks import member_check

    member = gzip.compress(b"hello world\n" * 100)
    unit = Unit("f", "m", 0, len(member), "gz", "s", 0)
    a = member_check(_Bytes(member + b"A" * 5000), unit)
    assert a == member_check(_Bytes(member + b"B" * 5000), unit)
    assert a != member_check(_Bytes(bytes([member[0] ^ 1]) + member[1:] + b"A" * 5000), unit)


def test_counts_joined_with_other_documents_drop_stale_held_out_counts() -> None:
    """X06: joined with a count of other documents per unit, the stale held-out counts of the
    old documents were kept."""
    from openwebtext.index import Counts

    joined = Counts((5, 5), {"0.1/7": (1, 1)}).joined(Counts((6, 5), {"0.0005/2357": (0, 0)}))
    assert "0.1/7" not in joined.val


def test_jsonl_files_of_one_name_in_two_folders_get_distinct_members(tmp_path: Path) -> None:
    """P02: ``en/train.jsonl`` and ``de/train.jsonl`` were both member ``train.jsonl``: their
    documents' names collided."""
    from tables_support import sample_texts, write_jsonl

    write_jsonl(tmp_path / "en" / "train.jsonl", sample_texts(3, seed=1))
    write_jsonl(tmp_path / "de" / "train.jsonl", sample_texts(3, seed=2))
    members = [u.member for u in Corpus.open([str(tmp_path / "en"), str(tmp_path / "de")]).units]
    assert len(set(members)) == len(members) == 2
