"""The fast tar walk agrees with tarfile, and refuses what it cannot read."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext.tarwalk import TarFormatError, walk
from support import inner_tar


def tarfile_entries(buf: bytes) -> list[tuple[str, int, int]]:
    with tarfile.open(fileobj=io.BytesIO(buf)) as tar:
        return [(m.name, m.offset_data, m.size) for m in tar if m.isreg()]


def walked(buf: bytes) -> list[tuple[str, int, int]]:
    return list(zip(*walk(buf), strict=True))


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_agrees_with_tarfile(fmt: int) -> None:
    docs = {f"dir/{k:07d}-doc.txt": b"x" * (k * 97) for k in range(30)}
    docs["long/" + "n" * 90 + "/name-longer-than-100-bytes.txt"] = b"long name"
    if fmt != tarfile.USTAR_FORMAT:
        docs["ünïcode-" + "é" * 120 + ".txt"] = b"non-ascii name"
    buf = inner_tar(docs, fmt)
    assert walked(buf) == tarfile_entries(buf)
    assert [name for name, _, _ in walked(buf)] == list(docs)


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(
        st.text(st.characters(codec="utf-8", exclude_characters="\0/"), min_size=1, max_size=150),
        st.binary(max_size=3000),
        max_size=8,
    )
)
def test_agrees_with_tarfile_on_any_names_and_sizes(docs: dict[str, bytes]) -> None:
    buf = inner_tar(docs, tarfile.PAX_FORMAT)
    assert walked(buf) == tarfile_entries(buf)


def test_links_directories_and_fifos_are_skipped() -> None:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind in [
            ("d", tarfile.DIRTYPE),
            ("s", tarfile.SYMTYPE),
            ("h", tarfile.LNKTYPE),
            ("f", tarfile.FIFOTYPE),
            ("c", tarfile.CHRTYPE),
        ]:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "../../etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            tar.addfile(info)
        info = tarfile.TarInfo("real.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"text"))
    names, offsets, sizes = walk(bio.getvalue())
    assert names == ["real.txt"]
    assert bio.getvalue()[offsets[0] : offsets[0] + sizes[0]] == b"text"


def test_bad_checksum_is_refused() -> None:
    buf = bytearray(inner_tar({"a.txt": b"hello", "b.txt": b"world"}))
    buf[512 + 512 + 3] ^= 0x20  # a byte of the second header's name
    with pytest.raises(TarFormatError, match="checksum at byte 1024"):
        walk(bytes(buf))


@pytest.mark.parametrize("cut", [100, 700, 1030])
def test_truncated_tar_is_refused(cut: int) -> None:
    buf = inner_tar({"a.txt": b"h" * 600, "b.txt": b"world"})
    with pytest.raises(TarFormatError, match=r"truncated|past the end"):
        walk(buf[:cut])


def test_not_a_tar_is_refused() -> None:
    with pytest.raises(TarFormatError):
        walk(b"plain text that is not a tar at all " * 30)


def test_empty_tar_has_no_entries() -> None:
    assert walk(inner_tar({})) == ([], [], [])
    assert walk(b"") == ([], [], [])


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(0, 20_000), fmt=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
def test_partial_walk_lists_exactly_the_entries_before_a_cut(cut: int, fmt: int) -> None:
    """partial=True (data known to be cut short): every entry that ends before the cut, and
    no other; a strict walk refuses the same bytes."""
    docs = {f"{k:03d}-" + "n" * (k * 9) + ".txt": b"y" * (k * 131) for k in range(25)}
    buf = inner_tar(docs, fmt)
    cut = min(cut, len(buf) - 1)
    head = buf[:cut]
    whole = walked(buf)
    expected = [(name, offset, size) for name, offset, size in whole if offset + size <= cut]
    assert list(zip(*walk(head, partial=True), strict=True)) == expected
    if any(offset - 512 < cut < offset + size for _, offset, size in whole):  # inside one
        with pytest.raises(TarFormatError):
            walk(head)


def test_partial_walk_still_verifies_headers_before_the_cut() -> None:
    buf = bytearray(inner_tar({"a.txt": b"a" * 600, "b.txt": b"b" * 600}))
    buf[10] ^= 0x01  # inside the first header's name
    with pytest.raises(TarFormatError, match="checksum"):
        walk(bytes(buf[:2000]), partial=True)
