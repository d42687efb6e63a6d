"""The token files other trainers read: their layouts, built and parsed in one place.

Every format holds the same ids: each document's ids, then the end-of-text id, laid end to
end (nanoGPT's ``train.bin``). What differs is where the document boundaries are kept:

- ``nanogpt``: ``NAME.bin``, the ids alone (uint16 for GPT-2). Boundaries: every
  end-of-text id (the tokenizers encode a special token's text as text, so it is nowhere
  else), or a Megatron ``NAME.idx`` beside it.
- ``megatron``: the same ``NAME.bin`` and ``NAME.idx``, megatron-core's ``IndexedDataset``
  index: ``MMIDIDX\\x00\\x00``, uint64 version 1, uint8 dtype code (of integers: its float
  codes are refused), uint64 sequence count, uint64 document count (sequences + 1), int32
  sizes, int64 byte pointers, int64 document indices (one sequence per document here). uint32
  ids are written under code 4 (int32): the same bytes for every id below 2**31, and
  megatron-core has no uint32.
- ``llmc``: llm.c / modded-nanogpt shards ``NAME_000000.bin`` …: a 256-int32 header (magic
  20240520, version 1, token count), then the uint16 ids. Each shard holds whole documents,
  at most ``LLMC_SHARD_TOKENS`` ids unless one document is longer. Boundaries: end-of-text.
- ``datatrove``: ``NAME.ds``, the ids (2 or 4 bytes each), and ``NAME.ds.index``, each
  document's end in ids as uint64, datatrove's ``DatatroveFileDataset`` layout.

Document boundaries are ``ends``: an int64 array, the id count up to and including each
document. A damaged header, index or size is one :class:`TokenFileError` naming the file.
"""

from __future__ import annotations

from openwebtext.tokenfiles.common import (
    FORMATS,
    INT_DTYPE,
    LLMC_SHARD,
    PREPARE_FORMAT,
    TOKENS,
    IntDtype,
    TokenFile,
    TokenFileError,
    TokenFormat,
    Vocabulary,
    beside,
    document_names,
    document_range,
    eot_ends,
    markers,
    recorded,
    unit_member,
)
from openwebtext.tokenfiles.datatrove import datatrove_index, read_datatrove_index
from openwebtext.tokenfiles.llmc import (
    LLMC_HEADER_BYTES,
    LLMC_MAGIC,
    LLMC_SHARD_TOKENS,
    LLMC_VERSION,
    llmc_cuts,
    llmc_header,
    read_llmc_header,
)
from openwebtext.tokenfiles.megatron import (
    MEGATRON_DTYPES,
    MEGATRON_MAGIC,
    megatron_code,
    megatron_index,
    read_megatron_index,
)
from openwebtext.tokenfiles.opening import (
    IndexedAs,
    companions,
    indexed,
    kept,
    open_token_file,
    opened,
    remember,
)

__all__ = [
    "FORMATS",
    "INT_DTYPE",
    "LLMC_HEADER_BYTES",
    "LLMC_MAGIC",
    "LLMC_SHARD",
    "LLMC_SHARD_TOKENS",
    "LLMC_VERSION",
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "PREPARE_FORMAT",
    "TOKENS",
    "IndexedAs",
    "IntDtype",
    "TokenFile",
    "TokenFileError",
    "TokenFormat",
    "Vocabulary",
    "beside",
    "companions",
    "datatrove_index",
    "document_names",
    "document_range",
    "eot_ends",
    "indexed",
    "kept",
    "llmc_cuts",
    "llmc_header",
    "markers",
    "megatron_code",
    "megatron_index",
    "open_token_file",
    "opened",
    "read_datatrove_index",
    "read_llmc_header",
    "read_megatron_index",
    "recorded",
    "remember",
    "unit_member",
]
