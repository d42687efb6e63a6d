"""The pages of a parquet column chunk, read from their Thrift headers alone: what they
decompress to and how their values are encoded (``chunk_pages``), so that what a chunk decodes
to is bounded by its pages, never by the footer alone: the codec holds each page to the size
its header says, so a footer that understates its chunk, or says it has no dictionary, gets no
more past ``max_member_bytes`` than an honest one (``tables.parquet_records``)."""

from __future__ import annotations

from openwebtext.thrift import read_struct

__all__ = ["chunk_pages"]

#: Data page encodings whose values are no larger decoded than in their page (PLAIN,
#: DELTA_LENGTH_BYTE_ARRAY); a dictionary's, or DELTA_BYTE_ARRAY's prefixes, repeat values.
_PLAIN_ENCODINGS = (0, 6)


def chunk_pages(raw: bytes, values: int) -> tuple[int, bool, int]:
    """The most bytes a column chunk's pages decompress to, whether they are plain (no
    dictionary page, every data page's values in ``_PLAIN_ENCODINGS``: none decodes to more
    than its page), and the most one value may decode to: the largest page a value is read
    from (a dictionary's), or all of them where values build on others (``DELTA_BYTE_ARRAY``'s
    prefixes, an unknown encoding). The pages are walked as pyarrow reads them: a Thrift
    ``PageHeader``, then its ``compressed_page_size`` bytes, until the footer's count of
    ``values`` is read (data pages count theirs) or the chunk's bytes end. A page decompresses
    to the size its header says (the codec fails otherwise), or, stored uncompressed, is its
    bytes.

    Raises:
        ValueError: a page header that does not parse.
    """
    size, plain, seen, at, widest, built = 0, True, 0, 0, 1, False
    try:
        while at < len(raw) and seen < values:
            page = at
            header, at = read_struct(raw, at)
            kind, unpacked, packed = (header.get(k, -1) for k in (1, 2, 3))
            if not all(isinstance(v, int) for v in (kind, unpacked, packed)) or packed < 0:
                raise ValueError(f"page type {kind}, sizes {unpacked} and {packed}")
            size, at = size + max(unpacked, packed), at + packed
            widest = max(widest, unpacked, packed)
            data = header.get({0: 5, 3: 8}.get(kind, 0))  # DATA_PAGE's, DATA_PAGE_V2's header
            if isinstance(data, dict):
                seen += data[1] if isinstance(data.get(1), int) else 0
                encoding = data.get(2 if kind == 0 else 4)
                plain = plain and encoding in _PLAIN_ENCODINGS
                built = built or encoding not in (*_PLAIN_ENCODINGS, 2, 8)  # (2, 8: a dictionary's)
            elif kind != 1:  # (an INDEX_PAGE: skipped by pyarrow)
                plain = False  # a DICTIONARY_PAGE, or a data page without its header
                built = built or kind != 2
    except IndexError:
        raise ValueError(f"the page header at byte {page} of the chunk is cut short") from None
    except ValueError as exc:
        raise ValueError(f"a damaged page header at byte {page} of the chunk: {exc}") from None
    return size, plain, size if built else widest
