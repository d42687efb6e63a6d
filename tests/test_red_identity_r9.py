"""What a red team of corpus identity (session 32) found: a ``nanogpt`` run reads its files
sorted by name, then path, so the same files in other folders can be read in another order
and make other files; a prepared run is known by its corpus's content in the order that
decides its files (``prepare.config.corpus_identity``), not in the order it was given."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, merge, prepare
from openwebtext.synth import write_corpus

_OPTS = PrepareOptions(split_rule="nanogpt", tokenizer="bytes", workers=0, val_fraction=0.1)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two corpora of one subset each, both ``urlsf_subset00.tar``, of other documents."""
    root = tmp_path_factory.mktemp("two")
    for name, seed in (("x", 0), ("y", 1)):
        write_corpus(root / name, subsets=1, members=2, docs=10, seed=seed, workers=1)
    return root / "x" / "urlsf_subset00.tar", root / "y" / "urlsf_subset00.tar"


def _placed(root: Path, pairs: dict[str, Path]) -> list[Path]:
    """Each file copied into ``root/<folder>/`` under its own name, in the order given."""
    placed = []
    for folder, source in pairs.items():
        (root / folder).mkdir(parents=True)
        placed.append(Path(shutil.copy(source, root / folder / source.name)))
    return placed


def test_files_of_one_name_read_in_another_order_are_another_run(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    """X in p/ and Y in q/ are read X, Y; the same two in s/ and r/, given in the same order,
    are read Y, X (nanogpt sorts by path after the name): other files. Their slices were
    merged as one run's (one file's documents twice, the other's lost), and a folder finished
    from one said "nothing to do" for the other."""
    x, y = two
    first = _placed(tmp_path / "m1", {"p": x, "q": y})
    second = _placed(tmp_path / "m2", {"s": x, "r": y})
    prepare(Corpus.open(first), tmp_path / "s0", _OPTS, shard=(0, 2))
    prepare(Corpus.open(second), tmp_path / "s1", _OPTS, shard=(1, 2))
    with pytest.raises(PrepareError, match="different corpus"):
        merge([tmp_path / "s0", tmp_path / "s1"], tmp_path / "merged")
    prepare(Corpus.open(first), tmp_path / "whole", _OPTS)
    again = prepare(Corpus.open(second), tmp_path / "whole", _OPTS)
    assert not again.already
    prepare(Corpus.open(second), tmp_path / "fresh", _OPTS)
    for name in ("train.bin", "val.bin"):
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes()


def test_files_given_in_another_order_that_nanogpt_sorts_are_one_run(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    """Files of other names given in another order are read in one order (sorted): the
    same files, so their slices merge into the whole run's (they were refused as of a
    different corpus), and a finished folder is finished for both."""
    x, y = two
    (tmp_path / "c").mkdir()
    a = Path(shutil.copy(x, tmp_path / "c" / "urlsf_subset00.tar"))
    b = Path(shutil.copy(y, tmp_path / "c" / "urlsf_subset01.tar"))
    prepare(Corpus.open([a, b]), tmp_path / "s0", _OPTS, shard=(0, 2))
    prepare(Corpus.open([b, a]), tmp_path / "s1", _OPTS, shard=(1, 2))
    merge([tmp_path / "s0", tmp_path / "s1"], tmp_path / "merged")
    whole = prepare(Corpus.open([a, b]), tmp_path / "whole", _OPTS)
    assert prepare(Corpus.open([b, a]), tmp_path / "whole", _OPTS).already
    for name in ("train.bin", "val.bin"):
        merged = (tmp_path / "merged" / name).read_bytes()
        assert merged == (Path(whole.out) / name).read_bytes()


def test_a_hash_run_of_files_given_in_another_order_is_another_run(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    """``hash`` permutes the files as given (by its seed): another order is another run."""
    x, y = two
    (tmp_path / "c").mkdir()
    a = Path(shutil.copy(x, tmp_path / "c" / "urlsf_subset00.tar"))
    b = Path(shutil.copy(y, tmp_path / "c" / "urlsf_subset01.tar"))
    hashed = PrepareOptions(split_rule="hash", tokenizer="bytes", workers=0)
    prepare(Corpus.open([a, b]), tmp_path / "whole", hashed)
    assert not prepare(Corpus.open([b, a]), tmp_path / "whole", hashed).already


def test_an_order_that_is_not_of_the_units_is_refused(two: tuple[Path, Path]) -> None:
    corpus = Corpus.open([two[0]])
    with pytest.raises(ValueError, match="each position"):
        corpus.content_fingerprint([0, 0])
    assert corpus.content_fingerprint([0, 1]) == corpus.content_fingerprint()
    assert corpus.content_fingerprint([1, 0]) != corpus.content_fingerprint()


@pytest.mark.parametrize(
    ("name", "index"), [("train.bin", "train.idx"), ("train.ds", "train.ds.index")]
)
def test_a_remote_token_file_whose_index_was_replaced_is_another_corpus(
    token_run: Path, tmp_path: Path, name: str, index: str
) -> None:
    """The index beside a remote token file replaced by one of the same size, one document's
    end moved (another program's files: no ``meta.json`` to check an end-of-text against):
    the same units, other documents. A state of the old corpus resumed on it, since its
    fingerprint held the ``.bin``'s validators only; it is now another corpus."""
    from openwebtext import Loader
    from openwebtext.errors import StateError
    from openwebtext.tokenfiles.datatrove import datatrove_index, read_datatrove_index
    from openwebtext.tokenfiles.megatron import megatron_index, read_megatron_index
    from remote_servers import RangeServer

    root = tmp_path / "served"
    root.mkdir()
    for each in (name, index):
        shutil.copy(token_run / each, root / each)
    if index.endswith(".idx"):
        dtype, ends = read_megatron_index(root / index)
    else:
        dtype = np.dtype("<u2")
        ends = read_datatrove_index(root / index, (root / name).stat().st_size // 2)
    moved = ends.copy()
    moved[2] += 1  # the third document one id longer, the fourth one shorter
    body = megatron_index(moved, dtype) if index.endswith(".idx") else datatrove_index(moved)
    assert len(body) == (root / index).stat().st_size
    with RangeServer(root) as server:
        before = Corpus.open_tokens(f"{server.url}/{name}")
        with Loader(before, workers=0, shuffle=False, tokenizer="bytes").iter() as it:
            next(it)
            state = it.state_dict()
        (root / index).write_bytes(body)
        after = Corpus.open_tokens(f"{server.url}/{name}")
        assert [u.size for u in after.units] == [u.size for u in before.units]
        with pytest.raises(StateError, match="another stream; corpus"):
            Loader(after, workers=0, shuffle=False, tokenizer="bytes").iter(state=state).close()


def test_a_file_read_by_url_has_the_name_it_has_on_disk(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    """A server's folder page quotes its links (``%C3%A9_subset00.tar``): the file was known
    by the quoted name, sorted by it among the others, so a corpus read by URL was not the
    same files as its local copy (``content_fingerprint``, nanogpt's order), nor the same file
    given as ``é`` and as ``%C3%A9``."""
    from remote_servers import RangeServer

    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(two[0], served / "é_subset00.tar")
    shutil.copy(two[1], served / "a_subset01.tar")
    local = Corpus.open(served)
    with RangeServer(served) as server:
        folder = Corpus.open(server.url + "/")
        assert [Path(u.path).name for u in local.units] == [
            u.path.rsplit("/", 1)[1].replace("%C3%A9", "é") for u in folder.units
        ]
        assert folder.content_fingerprint() == local.content_fingerprint()
        quoted = Corpus.open(server.url + "/%C3%A9_subset00.tar")
        plain = Corpus.open(server.url + "/é_subset00.tar")
        assert quoted.content_fingerprint() == plain.content_fingerprint()
        remote = prepare(folder, tmp_path / "remote", _OPTS)
    assert remote.meta == prepare(local, tmp_path / "local", _OPTS).meta


def test_a_records_file_read_by_url_names_its_documents_as_on_disk(tmp_path: Path) -> None:
    """A JSON lines file ``é.jsonl`` read by URL was indexed under its quoted name: its
    documents were named ``%C3%A9.jsonl@…`` (the held-out split hashes names: other documents
    held out than from the local copy), and its content fingerprint was not the local one's."""
    from openwebtext import Loader
    from remote_servers import RangeServer

    served = tmp_path / "served"
    served.mkdir()
    lines = [json.dumps({"text": f"document {k} " * 5}) + "\n" for k in range(200)]
    (served / "é.jsonl").write_text("".join(lines), encoding="utf-8")
    local = Corpus.open(served)
    options = {"workers": 0, "shuffle": False, "split": "val", "val_fraction": 0.1}
    with RangeServer(served) as server:
        remote = Corpus.open(server.url + "/")
        assert remote.content_fingerprint() == local.content_fingerprint()
        held = [d.name for d in Loader(remote, **options)]  # type: ignore[arg-type]
    assert held == [d.name for d in Loader(local, **options)]  # type: ignore[arg-type]
    assert held and held[0].startswith("é.jsonl")


def test_nanogpt_orders_files_of_one_name_by_their_decoded_folders(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    """``aé/`` sorts after ``az/`` on disk, but its quoted URL ``a%C3%A9/`` sorted before:
    the same files read by URL were read in another order (another run's identity)."""
    from openwebtext.prepare.config import corpus_identity
    from remote_servers import RangeServer

    served = tmp_path / "served"
    for folder, source in (("aé", two[0]), ("az", two[1])):
        (served / folder).mkdir(parents=True)
        shutil.copy(source, served / folder / source.name)
    local = Corpus.open([served / "aé" / two[0].name, served / "az" / two[1].name])
    with RangeServer(served) as server:
        remote = Corpus.open([f"{server.url}/a%C3%A9/{two[0].name}",
                              f"{server.url}/az/{two[1].name}"])  # fmt: skip
        assert corpus_identity(remote, _OPTS) == corpus_identity(local, _OPTS)


def test_one_url_spelled_two_ways_is_one_file_given_twice(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    """``é`` and ``%C3%A9`` are one file: given both ways, its documents were read twice."""
    from openwebtext.errors import CorpusError
    from remote_servers import RangeServer

    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(two[0], served / "é_subset00.tar")
    with RangeServer(served) as server:
        plain, quoted = server.url + "/é_subset00.tar", server.url + "/%C3%A9_subset00.tar"
        for given in ([server.url + "/", plain], [quoted, plain]):
            with pytest.raises(CorpusError, match="the same file is given twice"):
                Corpus.open(given)
