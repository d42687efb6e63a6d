"""The fast tar walk agrees with tarfile, and refuses what it cannot read."""

from __future__ import annotations

import io
import tarfile
from typing import NamedTuple

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from openwebtext.tarwalk import TarFormatError, walk
from support import inner_tar


def tarfile_entries(buf: bytes) -> list[tuple[str, int, int]]:
    """The files tarfile reads: regular ones, and those of a type it does not know
    (``extractfile`` reads them as regular files)."""
    with tarfile.open(fileobj=io.BytesIO(buf)) as tar:
        return [
            (m.name, m.offset_data, m.size)
            for m in tar
            if m.isreg() or m.type not in tarfile.SUPPORTED_TYPES
        ]


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


# -- every format, long names anywhere, base-256 sizes (issue 14) -------------------------

FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


class Entry(NamedTuple):
    """One entry of a generated archive, written in its own format."""

    kind: str  # "file", "dir", "symlink" or "unknown" (a type tar does not define: a file)
    name: str
    data: bytes
    fmt: str  # a key of FORMATS
    pax_size: bool  # with pax: an explicit "size" record
    base256: bool  # the size field in GNU base-256 (binary), not octal


def base256(value: int, width: int = 12) -> bytes:
    """``value`` as a GNU base-256 number field: 0x80, then big-endian bytes."""
    return b"\x80" + value.to_bytes(width - 1, "big")


def with_checksum(header: bytes) -> bytes:
    """``header`` (one 512-byte block) with its checksum field recomputed."""
    block = bytearray(header)
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def entry_bytes(e: Entry) -> bytes:
    """The header blocks (with any GNU long-name or pax blocks) and padded data of ``e``."""
    info = tarfile.TarInfo(e.name)
    info.mtime = 1555000000
    if e.kind == "unknown":
        info.type = b"Z"
        info.size = len(e.data)
    elif e.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif e.kind == "symlink":
        info.type = tarfile.SYMTYPE
        # As long as the name (a GNU ``K`` entry, a pax linkpath); ustar cannot hold that.
        info.linkname = "target" if e.fmt == "ustar" else e.name + "-target"
    else:
        info.size = len(e.data)
        if e.pax_size and e.fmt == "pax":
            info.pax_headers = {"size": str(len(e.data))}
    try:
        head = info.tobuf(FORMATS[e.fmt], "utf-8", "surrogateescape")
    except ValueError:  # a name ustar cannot hold: this entry is GNU
        head = info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
    if e.base256 and e.kind == "file":
        last = head[-512:]
        head = head[:-512] + with_checksum(last[:124] + base256(len(e.data)) + last[136:])
    data = e.data if e.kind in ("file", "unknown") else b""
    return head + data + bytes(-len(data) % 512)


def _ustar_holds(e: Entry) -> bool:
    try:
        tarfile.TarInfo(e.name).tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")
    except ValueError:
        return False
    return True


def archive(entries: list[Entry], global_header: bool) -> bytes:
    """A tar whose entries each use their own format (as appending tools produce); an entry
    ustar cannot hold is written in GNU format."""
    out = b""
    if global_header and entries:  # a pax global header first, as ``git archive`` writes
        out = tarfile.TarInfo.create_pax_global_header({"comment": "c0ffee"})
    return out + b"".join(entry_bytes(e) for e in entries) + bytes(1024)


_component = st.text(
    st.characters(codec="utf-8", exclude_characters="\0/"), min_size=25, max_size=40
)
_short_name = st.text(
    st.characters(codec="ascii", exclude_characters="\0/"), min_size=1, max_size=8
)
#: Names long enough to need a ustar prefix, a GNU ``L`` entry or a pax ``path`` record.
_long_name = st.lists(_component, min_size=4, max_size=8).map("/".join)  # > 100 bytes
_entry = st.builds(
    Entry,
    kind=st.sampled_from(["file", "file", "file", "dir", "symlink", "unknown"]),
    name=st.one_of(_short_name, _long_name),
    data=st.binary(max_size=1100),
    fmt=st.sampled_from(list(FORMATS)),
    pax_size=st.booleans(),
    base256=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(entries=st.lists(_entry, max_size=10), global_header=st.booleans())
def test_agrees_with_tarfile_in_every_format_with_long_names_anywhere(
    entries: list[Entry], global_header: bool
) -> None:
    """Entries in ustar, GNU and pax mixed in one archive, long names before short ones,
    directories and symlinks between files, pax size records and base-256 sizes: the walk
    finds what tarfile finds, and every file keeps its own name (a GNU long name or a pax
    path never lends itself to the next entry)."""
    buf = archive(entries, global_header)
    if any(e.fmt == "ustar" and len(e.name.encode()) > 100 and _ustar_holds(e) for e in entries):
        event("a long name in a ustar prefix")
    assert walked(buf) == tarfile_entries(buf)
    assert walk(buf).names == [e.name for e in entries if e.kind in ("file", "unknown")]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_long_name_is_not_lent_to_the_next_entry(fmt: str) -> None:
    """The example the issue names, in every format: one long-named entry, then short ones."""
    entries = [
        Entry("file", "long/" + "n" * 120 + "/first.txt", b"first", fmt, False, False),
        Entry("file", "second.txt", b"second", fmt, False, False),
        Entry("dir", "d" * 70 + "/" + "d" * 60, b"", fmt, False, False),
        Entry("file", "third.txt", b"third", fmt, False, False),
        Entry("symlink", "s" * 70 + "/" + "s" * 60, b"", fmt, False, False),
        Entry("file", "fourth.txt", b"fourth", fmt, False, False),
    ]
    buf = archive(entries, global_header=False)
    first = "long/" + "n" * 120 + "/first.txt"
    assert walk(buf).names == [first, "second.txt", "third.txt", "fourth.txt"]
    assert walked(buf) == tarfile_entries(buf)


def test_pax_size_record_is_not_lent_to_the_next_entry() -> None:
    entries = [
        Entry("file", "a.txt", b"a" * 700, "pax", True, False),
        Entry("file", "b.txt", b"b" * 3, "pax", False, False),
        Entry("file", "c.txt", b"c" * 1300, "ustar", False, False),
    ]
    buf = archive(entries, global_header=False)
    assert walk(buf).sizes == [700, 3, 1300]
    assert walked(buf) == tarfile_entries(buf)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("size", [0, 1, 511, 512, 1000])
def test_base256_size_is_read(fmt: str, size: int) -> None:
    """A small size written in base-256 (tarfile writes it only past 8 GiB, in GNU format),
    with a correct checksum: tarfile and the walk both read it."""
    entries = [
        Entry("file", "before.txt", b"b" * 10, fmt, False, False),
        Entry("file", "binary-size.txt", bytes(range(256)) * 4 + b"x" * size, fmt, False, True),
        Entry("file", "after.txt", b"after", fmt, False, False),
    ]
    buf = archive(entries, global_header=False)
    header = buf[1024 : 1024 + 512]
    assert header[124] == 0x80 and header[125:136] == (1024 + size).to_bytes(11, "big")
    assert walked(buf) == tarfile_entries(buf)
    names, offsets, sizes = walk(buf)
    assert names == ["before.txt", "binary-size.txt", "after.txt"]
    assert sizes == [10, 1024 + size, 5]
    assert buf[offsets[1] : offsets[1] + sizes[1]] == entries[1].data


def test_base256_size_past_the_data_is_refused_not_wrapped() -> None:
    """A base-256 size using its high bytes (2**64 + 5) is read whole: past the end of the
    data, so refused (a walk reading only the low 8 bytes would take it as 5)."""
    header = tarfile.TarInfo("huge.txt").tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
    header = with_checksum(header[:124] + base256(2**64 + 5) + header[136:])
    buf = header + b"hello" + bytes(507) + bytes(1024)
    with pytest.raises(TarFormatError, match="at byte 0 runs past the end"):
        walk(buf)
    with (
        pytest.raises((tarfile.ReadError, OverflowError)),  # tarfile cannot read it either
        tarfile.open(fileobj=io.BytesIO(buf)) as tar,
    ):
        tar.getmembers()


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_unknown_type_is_a_file_with_its_whole_name(fmt: str) -> None:
    """An entry of a type tar does not define is read as a file, as tarfile does, under its
    whole name: its GNU long name, pax path or ustar prefix (not the header's first 100 bytes),
    and it does not lend that name to the next entry."""
    long = "dir/" + "x" * 120 + "/doc.txt"
    entries = [
        Entry("unknown", long, b"hello", fmt, False, False),
        Entry("file", "next.txt", b"next", fmt, False, False),
    ]
    buf = archive(entries, global_header=False)
    assert walk(buf).names == [long, "next.txt"]
    assert walked(buf) == tarfile_entries(buf)


def _header(name: str, size: int, size_field: bytes, checksum_digits: int) -> bytes:
    """A ustar header with the size field and checksum written as given."""
    head = bytearray(tarfile.TarInfo(name).tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))
    head[124:136] = size_field
    head[148:156] = b" " * 8
    total = sum(head)
    head[148:156] = (b"%0*o" % (checksum_digits, total) + b"\0 ")[:8]
    return bytes(head)


@pytest.mark.parametrize(
    ("size_field", "checksum_digits"),
    [
        (b"%011o\0" % 1000, 6),  # what tarfile and GNU tar write
        (b"%011o " % 1000, 6),  # space-terminated
        (b"%012o" % 1000, 6),  # all twelve digits, no terminator (tarfile and GNU tar read it)
        (b"%011o\0" % 1000, 7),  # a seven-digit checksum
        (b"%012o" % 1000, 7),
    ],
    ids=["11-nul", "11-space", "12-digits", "checksum-7", "12-digits-checksum-7"],
)
def test_number_fields_of_every_width_tarfile_reads(
    size_field: bytes, checksum_digits: int
) -> None:
    """Octal fields that fill their whole width are read whole, as tarfile reads them, not
    cut to the usual width (a size read as 125 instead of 1000 would cut a document)."""
    data = bytes(range(256)) * 3 + b"e" * 232
    buf = _header("a.txt", 1000, size_field, checksum_digits) + data + bytes(24) + bytes(1024)
    assert tarfile_entries(buf) == [("a.txt", 512, 1000)]
    assert walked(buf) == tarfile_entries(buf)
