"""The shapes of the JSON a run reads back, checked before any field of it is used: a
slice's or a run's ``meta.json`` (``check_meta``) and the progress record
(``check_record``). Each check raises ``ValueError`` saying which field is wrong; the
caller names the file (``PrepareError``), so a damaged file is one clear line, never a
``KeyError`` deep inside a merge."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from openwebtext.options import int_at_least
from openwebtext.plan import shard_range
from openwebtext.policy import MEMBER_COUNTERS
from openwebtext.prepare.config import LENGTH

__all__ = ["check_meta", "check_record"]

_SHA256 = re.compile("[0-9a-f]{64}")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _count(value: object, what: str) -> int:
    if not int_at_least(value, 0):
        raise ValueError(f"{what} must be an int >= 0, not {value!r}")
    return value


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, not {type(value).__name__}")
    return value


def _counts(body: Mapping[str, Any], keys: list[str] | None) -> None:
    """``documents`` and ``tokens`` (int per split: ``keys`` when given), the skip counters."""
    for part in ("documents", "tokens"):
        per = _mapping(body.get(part), part)
        if keys is not None and sorted(per) != sorted(keys):
            raise ValueError(f"{part} must have {' and '.join(keys)}, not {sorted(per)}")
        for key, value in per.items():
            _count(value, f"{part}.{key}")
    for key in MEMBER_COUNTERS:
        _count(body.get(key), key)
    _count(body.get("skipped_files", 0), "skipped_files")  # not in older meta.json


def _files(value: object, needed: list[str] | None) -> None:
    files = _mapping(value, "files")
    if needed is not None and sorted(files) != sorted(needed):
        raise ValueError(f"files must be {' and '.join(needed)}, not {sorted(files)}")
    for name, info in files.items():
        if not _FILE_NAME.fullmatch(name):
            raise ValueError(f"files: {name!r} is not a file name")
        entry = _mapping(info, f"files.{name}")
        _count(entry.get("bytes"), f"files.{name}.bytes")
        sha = entry.get("sha256")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise ValueError(f"files.{name}.sha256 must be 64 hex digits, not {sha!r}")


def _config(body: Mapping[str, Any]) -> int:
    """The fields of a run's config that a reader uses; the unit count."""
    if body.get("split") not in ("hash", "nanogpt"):
        raise ValueError(f"split must be 'hash' or 'nanogpt', not {body.get('split')!r}")
    units = _count(body.get("units"), "units")
    if not isinstance(body.get("corpus"), str):
        raise ValueError(f"corpus must be a fingerprint, not {body.get('corpus')!r}")
    dtype = body.get("dtype")
    try:
        ok = isinstance(dtype, str) and np.dtype(dtype).kind in "ui"
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"dtype must name an integer dtype, not {dtype!r}")
    fraction = body.get("val_fraction")
    if not (isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
            and 0 < fraction < 1):  # fmt: skip
        raise ValueError(f"val_fraction must be between 0 and 1, not {fraction!r}")
    _count(body.get("val_seed"), "val_seed")
    return units


def _slice(value: object, units: int) -> None:
    piece = _mapping(value, "slice")
    start, stop = _count(piece.get("start"), "slice.start"), _count(piece.get("stop"), "slice.stop")
    if not start <= stop <= units:
        raise ValueError(f"slice [{start}, {stop}) is not within the {units} units")
    shard = piece.get("shard")
    if shard is None:
        return
    if not (isinstance(shard, list) and len(shard) == 2):
        raise ValueError(f"slice.shard must be [i, n], not {shard!r}")
    index, count = _count(shard[0], "slice.shard[0]"), _count(shard[1], "slice.shard[1]")
    if not index < count:
        raise ValueError(f"slice.shard must be [i, n] with 0 <= i < n, not {shard!r}")
    if shard_range(units, index, count) != (start, stop):
        first, end = shard_range(units, index, count)
        raise ValueError(
            f"slice [{start}, {stop}) is not shard {index}/{count} of the {units} units "
            f"([{first}, {end}))"
        )


def _bytes_per_count(meta: Mapping[str, Any]) -> dict[str, tuple[str, str, int]]:
    """For each file of ``meta``'s kind: the count it holds one item per, and the item's
    size (a file's bytes are its tokens times the dtype's size, or its documents' lengths)."""
    itemsize = np.dtype(meta["dtype"]).itemsize
    if "slice" in meta and meta["split"] == "nanogpt":
        return {"tokens.bin": ("tokens", "all", itemsize),
                "lengths.bin": ("documents", "all", LENGTH.itemsize)}  # fmt: skip
    return {f"{split}.bin": ("tokens", split, itemsize) for split in ("train", "val")}


def _sizes_agree(meta: Mapping[str, Any]) -> None:
    """Each file's ``bytes`` are what its count makes them (a hand-edited meta.json whose
    sha256 was made to fit an odd-sized file is refused: numpy could not map it)."""
    for name, (part, key, size) in _bytes_per_count(meta).items():
        count, found = meta[part][key], meta["files"][name]["bytes"]
        if found != count * size:
            raise ValueError(
                f"files.{name}.bytes is {found}, not the {count} {part}.{key} times "
                f"{size} bytes ({count * size})"
            )


def check_meta(meta: Mapping[str, Any]) -> None:
    """Check a ``meta.json`` (a whole run's, or a slice's when it has ``slice``) field by
    field: the config a reader uses, the counts, and ``files`` (each ``bytes`` and
    ``sha256``; the very files the run's kind writes; their bytes the counts' items).

    Raises:
        ValueError: naming the first wrong field.
    """
    units = _config(meta)
    names = ["train.bin", "val.bin"]
    keys = ["train", "val"]
    if "slice" in meta:
        _slice(meta["slice"], units)
        if meta["split"] == "nanogpt":
            names, keys = ["tokens.bin", "lengths.bin"], ["all"]
    _counts(meta, keys)
    _files(meta.get("files"), names)
    _sizes_agree(meta)


def check_record(record: Mapping[str, Any]) -> None:
    """Check a progress record field by field: its config, phase, position, the parts'
    sizes, the counts, and (phase ``commit``) the ``meta`` to publish.

    Raises:
        ValueError: naming the first wrong field.
    """
    _mapping(record.get("config"), "config")
    if record.get("phase") not in ("tokenize", "permute", "commit"):
        raise ValueError(f"phase must be tokenize, permute or commit, not {record.get('phase')!r}")
    if record["phase"] == "commit":
        check_meta(_mapping(record.get("meta"), "meta"))
        return
    _count(record.get("position"), "position")
    for name, size in _mapping(record.get("sizes"), "sizes").items():
        _count(size, f"sizes.{name}")
    _counts(_mapping(record.get("counts"), "counts"), None)
