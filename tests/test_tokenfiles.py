"""The token-file layouts (``openwebtext.tokenfiles``): the exact bytes of each header and
index, the boundaries read back, and every damage one ``TokenFileError`` naming the file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from openwebtext.errors import CorpusError
from openwebtext.tokenfiles import (
    LLMC_HEADER_BYTES,
    TokenFileError,
    datatrove_index,
    eot_ends,
    llmc_cuts,
    llmc_header,
    megatron_code,
    megatron_index,
    open_token_file,
    read_datatrove_index,
    read_llmc_header,
    read_megatron_index,
)

EOT = 9
#: Three documents (the second empty but for its end-of-text).
IDS = np.array([1, 2, 3, EOT, EOT, 4, 5, EOT], dtype="<u2")
ENDS = np.array([4, 5, 8])


def test_megatron_index_bytes_are_megatron_cores_layout() -> None:
    # Golden: megatron-core's _IndexWriter writes exactly these bytes for sizes [4, 1, 3]
    # (one sequence per document), uint16 (code 8). Changing it breaks every written .idx.
    body = megatron_index(ENDS, np.dtype("<u2"))
    assert body[:9] == b"MMIDIDX\x00\x00"
    assert body[9:17] == (1).to_bytes(8, "little") and body[17] == 8
    assert body[18:26] == (3).to_bytes(8, "little") and body[26:34] == (4).to_bytes(8, "little")
    assert np.frombuffer(body[34:46], "<i4").tolist() == [4, 1, 3]
    assert np.frombuffer(body[46:70], "<i8").tolist() == [0, 8, 10]
    assert np.frombuffer(body[70:], "<i8").tolist() == [0, 1, 2, 3]
    assert len(body) == 102 and hashlib.sha256(body).hexdigest()[:16] == "bf870be7cb832042"


def test_uint32_ids_are_written_as_int32() -> None:
    assert megatron_code(np.dtype("<u4")) == 4
    assert megatron_code(np.dtype("<u2")) == 8


def test_llmc_header_and_cuts() -> None:
    header = np.frombuffer(llmc_header(123), "<i4")
    assert header.size == 256 and header[:3].tolist() == [20240520, 1, 123]
    assert not header[3:].any()
    # Whole documents, at most 5 ids a shard unless one document alone is longer.
    assert llmc_cuts(np.array([4, 5, 8, 20, 21]), 5) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert llmc_cuts(np.array([], dtype=np.int64), 5) == [(0, 0)]


def test_datatrove_index_is_uint64_ends() -> None:
    assert np.frombuffer(datatrove_index(ENDS), "<u8").tolist() == [4, 5, 8]


def test_eot_ends_and_a_cut_file() -> None:
    assert eot_ends(IDS, EOT, "x").tolist() == ENDS.tolist()
    assert eot_ends(IDS[:0], EOT, "x").tolist() == []
    with pytest.raises(TokenFileError, match="x: its 7 ids do not end with the end-of-text id 9"):
        eot_ends(IDS[:-1], EOT, "x")


def _write_all(folder: Path) -> dict[str, Path]:
    """One file of each format holding IDS."""
    (folder / "n.bin").write_bytes(IDS.tobytes())
    (folder / "m.bin").write_bytes(IDS.tobytes())
    (folder / "m.idx").write_bytes(megatron_index(ENDS, IDS.dtype))
    (folder / "l_000000.bin").write_bytes(llmc_header(len(IDS)) + IDS.tobytes())
    (folder / "d.ds").write_bytes(IDS.tobytes())
    (folder / "d.ds.index").write_bytes(datatrove_index(ENDS))
    return {
        "nanogpt": folder / "n.bin",
        "megatron": folder / "m.bin",
        "llmc": folder / "l_000000.bin",
        "datatrove": folder / "d.ds",
    }


@pytest.mark.parametrize("fmt", ["nanogpt", "megatron", "llmc", "datatrove"])
def test_every_format_opens_to_the_same_documents(tmp_path: Path, fmt: str) -> None:
    opened = open_token_file(_write_all(tmp_path)[fmt], eot=EOT)
    assert opened.ids.tolist() == IDS.tolist()
    assert opened.ends.tolist() == ENDS.tolist()


def _damaged(path: Path, at: int, data: bytes) -> None:
    body = bytearray(path.read_bytes())
    body[at : at + len(data)] = data
    path.write_bytes(bytes(body))


DAMAGES = {
    "megatron magic": ("m.idx", lambda p: _damaged(p, 0, b"XX"), "not a megatron index"),
    "megatron version": ("m.idx", lambda p: _damaged(p, 9, b"\x02"), "version 2, not 1"),
    "megatron dtype": ("m.idx", lambda p: _damaged(p, 17, b"\x63"), "unknown megatron dtype"),
    "megatron count": ("m.idx", lambda p: _damaged(p, 18, b"\x07"), "not the"),
    "megatron cut": ("m.idx", lambda p: p.write_bytes(p.read_bytes()[:50]), "not the"),
    "megatron short": ("m.idx", lambda p: p.write_bytes(b"MMID"), "shorter than"),
    "megatron pointers": ("m.idx", lambda p: _damaged(p, 54, b"\x05"), "pointers"),
    "megatron documents": ("m.idx", lambda p: _damaged(p, 78, b"\x05"), "document indices"),
    "megatron bin cut": ("m.bin", lambda p: p.write_bytes(IDS[:5].tobytes()), "5 ids, not the 8"),
    "llmc version": ("l_000000.bin", lambda p: _damaged(p, 4, b"\x07"), "version 7"),
    "llmc count": ("l_000000.bin", lambda p: _damaged(p, 8, b"\x63"), "announces"),
    "llmc cut": ("l_000000.bin", lambda p: p.write_bytes(p.read_bytes()[:-2]), "announces"),
    "datatrove index": ("d.ds.index", lambda p: _damaged(p, 8, b"\x09"), "do not rise"),
    "datatrove odd": ("d.ds.index", lambda p: p.write_bytes(p.read_bytes()[:-1]), "uint64"),
    "datatrove ds": ("d.ds", lambda p: p.write_bytes(p.read_bytes()[:-3]), "whole number"),
    "nanogpt cut": ("n.bin", lambda p: p.write_bytes(IDS[:-1].tobytes()), "end-of-text"),
}

OPENED = {"m": "m.bin", "l": "l_000000.bin", "d": "d.ds", "n": "n.bin"}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_file_is_one_clear_error_naming_it(tmp_path: Path, damage: str) -> None:
    name, change, words = DAMAGES[damage]
    _write_all(tmp_path)
    change(tmp_path / name)
    with pytest.raises(TokenFileError, match=words) as caught:
        open_token_file(tmp_path / OPENED[name[0]], eot=EOT)
    assert isinstance(caught.value, CorpusError)
    assert caught.value.path is not None and Path(caught.value.path).parent == tmp_path
    assert str(caught.value).startswith(str(tmp_path)) and str(tmp_path) not in caught.value.message


def test_the_readers_alone_check_the_same(tmp_path: Path) -> None:
    files = _write_all(tmp_path)
    assert read_megatron_index(tmp_path / "m.idx")[1].tolist() == ENDS.tolist()
    assert read_llmc_header(files["llmc"]) == len(IDS)
    assert read_datatrove_index(tmp_path / "d.ds.index", len(IDS)).tolist() == ENDS.tolist()
    with pytest.raises(TokenFileError, match="rise to the 9 ids"):
        read_datatrove_index(tmp_path / "d.ds.index", 9)
    assert LLMC_HEADER_BYTES == 1024


def test_eot_is_needed_where_boundaries_are_end_of_text(tmp_path: Path) -> None:
    files = _write_all(tmp_path)
    with pytest.raises(ValueError, match="give eot="):
        open_token_file(files["nanogpt"])
    assert open_token_file(files["megatron"]).ends.tolist() == ENDS.tolist()
