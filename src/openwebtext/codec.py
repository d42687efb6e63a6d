"""The one codec of every record this project persists: stream, batches and mixture states;
``owt tokenize``'s config, progress and ``meta.json`` (and the part of it a token file's reader
reads), a format pass's marker and record; the counts file and the remote index cache.

A record is a frozen ``msgspec.Struct`` subclassing ``Record``. Its fields' annotations are
the whole schema: ``decode`` checks a tagged record's format first (the one format check of
stream states and ``owt tokenize``'s files alike), then every field at every depth by them
(an ``int`` never takes a ``bool``; ``Literal``, ``X | None``, tuples, nested records,
``Annotated`` bounds such as ``Count``), refuses a missing or an unknown key, then runs each
record's own ``check`` (what its fields must say of each other). The first wrong field is
one ``StateError`` whose ``field`` is its dotted path (``reshard.ranks[1].handed``).
``encode`` is the inverse: JSON objects and lists only, ``decode(encode(r), type(r)) == r``.

msgspec, not a converter of our own: strict by default, frozen structs, tagged unions, error
paths, no dependencies, ~20 ms to import (measured: ``python -X importtime``).
"""

from __future__ import annotations

import errno
import functools
import json
import operator
import os
import re
import reprlib
import stat
from collections.abc import Mapping
from typing import Annotated, Any, BinaryIO, ClassVar, Literal, TypeVar

import msgspec

from openwebtext.errors import StateError
from openwebtext.options import MOST_INT

__all__ = [
    "MOST_FILE_BYTES",
    "Count",
    "Disagree",
    "Fingerprint",
    "Fraction",
    "Positive",
    "Record",
    "Seed",
    "check_key",
    "decode",
    "differing",
    "encode",
    "open_regular",
    "parse",
    "pread_all",
    "read_at_most",
    "read_file",
    "replace",
    "whose",
]

#: An int >= 0 (a count, an index), at most ``MOST_INT``: what numpy's int64, in which the
#: code counts, holds (a state with more would overflow there, not be refused here).
Count = Annotated[int, msgspec.Meta(ge=0, le=MOST_INT)]
#: An int >= 1 (a size, a world size), at most ``MOST_INT``.
Positive = Annotated[int, msgspec.Meta(ge=1, le=MOST_INT)]
#: A seed or a key: any int >= 0 (``Options.seed``: numpy's generators take any; a
#: ``val_seed``, 8 bytes, is checked by its record: msgspec bounds no int past int64's).
Seed = Annotated[int, msgspec.Meta(ge=0)]
#: A float strictly between 0 and 1.
Fraction = Annotated[float, msgspec.Meta(gt=0, lt=1)]
#: A corpus's fingerprint: 16 hex digits (``Corpus.fingerprint``, ``content_fingerprint``).
Fingerprint = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{16}$")]

R = TypeVar("R", bound="Record")


class Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A persisted record: frozen, every field checked by its annotation when decoded.

    A subclass overrides ``check`` to test its fields against each other; it runs when the
    record is built, by ``decode`` or by code, so a record that exists is a valid one.
    ``from_json`` and ``to_json`` are ``decode`` and ``encode`` of the record's class.
    """

    what: ClassVar[str] = "state"
    """What the record is called in a ``StateError``'s message (``bad state: …``)."""

    def __post_init__(self) -> None:
        for name, default in _defaults(type(self)):  # (msgspec omits a default by identity)
            value = getattr(self, name)
            if value is not default and _same(value, default):
                msgspec.structs.force_setattr(self, name, default)
        self.check()

    def check(self) -> None:
        """Raise ``Disagree`` naming the field that disagrees with the others (none here)."""

    @classmethod
    def from_json(cls: type[R], value: Any) -> R:
        """``value`` (JSON, as ``json.loads`` gives) as this record; a record of this class is
        taken as it is (it was checked when it was built).

        Raises:
            StateError: as ``decode``.
        """
        return value if isinstance(value, cls) else decode(value, cls, cls.what)

    def to_json(self) -> dict[str, Any]:
        """``encode(self)``: the JSON-safe dict of this record."""
        return encode(self)

    def plus(self: R, **more: int) -> R:
        """A copy with ``more`` added to those fields (counts): ``plus(units=1)``."""
        return replace(self, **{name: getattr(self, name) + n for name, n in more.items()})


@functools.cache
def _defaults(cls: type[Record]) -> tuple[tuple[str, Any], ...]:
    """The fields of a record that leaves out its defaults (``omit_defaults=True``) whose
    default is not the only object equal to it (a tuple, a string, a float, a record), with it:
    a record holding an equal value holds the default itself, so that it is left out as the
    default is, whatever object made it (an empty tuple built by Python 3.10 is not ``()``)."""
    if not cls.__struct_config__.omit_defaults:
        return ()
    return tuple((f.name, f.default) for f in msgspec.structs.fields(cls)
                 if isinstance(f.default, tuple | str | float | msgspec.Struct))  # fmt: skip


def _same(value: Any, default: Any) -> bool:
    """Whether ``value`` is ``default`` as JSON says it (a list of equal items: a tuple's)."""
    if isinstance(default, tuple) and isinstance(value, list):
        value = tuple(value)
    return type(value) is type(default) and bool(value == default)


class Disagree(ValueError):
    """What a record's ``check`` raises: ``field`` (of that record) disagrees with the others."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"field `{field}` {why}")


def check_key(value: int, field: str = "val_seed") -> None:
    """Raise ``Disagree`` if a split's key is past 8 bytes (``Options``' bound)."""
    if value >= 2**64:
        raise Disagree(field, f"is {value}, not < 2**64 (the split's 8-byte key)")


_AT = re.compile(r"^(?P<says>.*?)(?: - at (?P<key>`key` in )?`\$(?P<at>[^`]*)`)?$", re.DOTALL)
_KEY = re.compile(r"^(?:Object (?:missing required|contains unknown) )?field `(?P<key>[^`]*)`")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")


def decode(value: Any, cls: type[R], what: str = "state") -> R:
    """``value`` (JSON objects, lists and scalars, as ``json.loads`` gives) as record ``cls``.

    A record whose class is tagged (``tag_field="format", tag=FORMAT``: the records a file or
    a state begins with) first has its format checked, so that what another record, another
    version or another program wrote is said as such, not as its first odd field.

    Raises:
        StateError: not of ``cls``'s format (``field`` is its tag field, the message says
            what was found); else the first field that is missing, unknown, of the wrong type
            or out of its bounds, or a record whose ``check`` failed; ``field`` is its dotted
            path, a dict's key named as a field (``parts.web.position``).
    """
    if isinstance(value, Record) and not isinstance(value, cls):  # (said as its JSON is)
        value = encode(value)
    if isinstance(value, Mapping) and not isinstance(value, dict):  # (a mappingproxy: as given)
        value = dict(value)
    if not isinstance(value, Record | dict | list | str | int | float | bool | None):
        # (a numpy array or scalar: msgspec's IndexError, not its error)
        what_is = type(value).__name__
        raise StateError(f"bad {what}: the record: an object as JSON's, not a {what_is}")
    config = cls.__struct_config__
    if config.tag_field is not None and isinstance(value, dict):
        key, found = config.tag_field, value.get(config.tag_field)
        if found != config.tag:
            raise StateError(f"bad {what}: {key}: not {config.tag!r} (found "
                             f"{reprlib.repr(found)})", field=key)  # fmt: skip
    try:
        try:
            at = _surrogate(value)  # (JSON's "\udcff", which json.loads takes: text in no field)
        except RecursionError:  # (no record nests so deep: msgspec names the field first)
            at = None
        if at is None:
            return msgspec.convert(value, cls)
    except msgspec.ValidationError as exc:
        raise _state_error(value, cls, str(exc), what) from None
    except RecursionError:
        raise StateError(f"bad {what}: the record: nested too deeply") from None
    raise StateError(f"bad {what}: {at or 'the record'}: a string that is not text (a lone "
                     "surrogate)", field=at or None)  # fmt: skip


def _surrogate(value: Any, at: str = "") -> str | None:
    """The dotted path of the first string in ``value`` (a value, or a key: its path) that
    UTF-8 cannot encode, or None; a key on the path said with its odd characters escaped."""
    if isinstance(value, str):
        return None if _encodes(value) else at.lstrip(".")
    if isinstance(value, Mapping):
        steps = [(str(key), item) for key, item in value.items()]
    elif isinstance(value, list | tuple):
        steps = [(f"[{k}]", item) for k, item in enumerate(value)]
    else:
        return None
    for key, item in steps:
        path = at + (key if key.startswith("[") else "." + key.encode("utf-8", "backslashreplace")
                     .decode())  # fmt: skip
        if not _encodes(key):
            return path.lstrip(".")
        found = _surrogate(item, path)
        if found is not None:
            return found
    return None


def _encodes(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def whose(value: Any, cls: type[Record]) -> Literal["this", "version", "other"]:
    """Whose record ``value`` says it is, by the tag of ``cls``'s format (``format``), read
    before it is decoded: ``this`` version's; another ``version`` of the same format (the same
    tag up to its last ``/``); or an ``other``'s (not an object, no tag, another record's or
    another program's). A cache takes another version's as absent; a record that says how to
    read a file refuses it (``decode`` says what was found)."""
    key, tag = cls.__struct_config__.tag_field, cls.__struct_config__.tag
    assert key is not None and isinstance(tag, str), f"{cls.__name__} has no format tag"
    found = value.get(key) if isinstance(value, Mapping) else None
    if found == tag:
        return "this"
    family = tag.rsplit("/", 1)[0] + "/"
    return "version" if isinstance(found, str) and found.startswith(family) else "other"


def _state_error(value: Any, cls: type[Any], message: str, what: str) -> StateError:
    match = _AT.match(message)
    assert match is not None  # the pattern matches any text
    at = (match["at"] or "") + ("[...]" if match["key"] else "")  # a dict's key: which one
    says, path = match["says"], _path(value, cls, message, at)
    key = _KEY.match(says)
    if key is not None:
        path = f"{path}.{key['key']}"
        if says.startswith("field"):  # a record's check: what it says after the name
            says = says[key.end() :].strip()
    path = path.lstrip(".")
    return StateError(f"bad {what}: {path or 'the record'}: {says}", field=path or None)


def _path(value: Any, cls: type[Any], message: str, at: str) -> str:
    """msgspec's path ``at`` with the key of each dict on it (``[...]`` in msgspec's) named: the
    key whose entry alone (the dict narrowed to it) fails with the same ``message``."""
    out, keys = "", []
    for step in _STEP.finditer(at):
        if step[0] != "[...]":
            out += step[0]
            keys.append(step[1] or int(step[2]))
            continue
        try:
            entries = functools.reduce(operator.getitem, keys, value)
            key = next(k for k in entries if _fails(_narrowed(value, keys, k), cls) == message)
        except (LookupError, TypeError, StopIteration):
            return out + at[step.start() :]  # the rest as msgspec says it
        out, value = out + f".{key}", _narrowed(value, keys, key)
        keys.append(key)
    return out


def _narrowed(node: Any, keys: list[Any], key: Any) -> Any:
    """A copy of ``node`` with the dict at ``keys`` narrowed to its entry ``key``."""
    if not keys:
        return {key: node[key]}
    copy = dict(node) if isinstance(node, Mapping) else list(node)
    copy[keys[0]] = _narrowed(node[keys[0]], keys[1:], key)
    return copy


def _fails(value: Any, cls: type[Any]) -> str | None:
    try:
        msgspec.convert(value, cls)
    except msgspec.ValidationError as exc:
        return str(exc)
    return None


#: The most bytes of a file read whole (``read_file``): a record file, a cache, a tokenizer's.
MOST_FILE_BYTES = 256 << 20


def open_regular(path: str | os.PathLike[str], *, folder: bool = False) -> int:
    """A descriptor of ``path`` open to read, a regular file's (a folder's too, with
    ``folder``): opened without waiting (a FIFO's open would wait for a writer forever), then
    checked, then blocking.

    Raises:
        OSError: it cannot be opened, or is a FIFO, a socket or a device (or a folder).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except ValueError as exc:  # (a NUL, an unpaired surrogate: no file system's name)
        raise OSError(errno.EINVAL, f"not a path ({exc})", os.fspath(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or (folder and stat.S_ISDIR(mode))):
            said = "a FIFO, socket or device" + ("" if folder else " or folder")
            raise OSError(errno.EINVAL, f"not a regular file ({said})", os.fspath(path))
        os.set_blocking(fd, True)  # (a FUSE or network filesystem is told of the flag)
    except BaseException:  # (an interrupt too: a host's handler raising on our thread)
        os.close(fd)
        raise
    return fd


def read_at_most(f: BinaryIO, most: int) -> bytes:
    """At most ``most + 1`` bytes of ``f`` (one more than ``most`` says it holds more): what
    its size says and one byte, then reads of at most 64 KiB (a FIFO's, a file that grew). One
    read of ``most + 1`` asks for that much memory first (256 MiB for a counts file of 300
    bytes), whatever the file holds."""
    size = os.fstat(f.fileno()).st_size
    chunks, got, step = [], 0, min(size, most) + 1
    while got <= most and (chunk := f.read(min(step, most + 1 - got))):
        step = 1 << 16
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


#: The most one ``pread`` returns on Linux (0x7ffff000 bytes), and the largest file offset.
_ONE_READ, _LAST_OFFSET = 0x7FFFF000, 2**63 - 1


def pread_all(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes of ``fd`` from ``offset``: fewer only at the file's end (one ``pread``
    returns at most ~2 GiB, a network or FUSE file system's fewer; an offset no file reaches,
    from a damaged header, reads nothing)."""
    parts: list[bytes] = []
    if n <= _ONE_READ and 0 <= offset <= _LAST_OFFSET - n:
        first = os.pread(fd, n, offset)  # (the one read almost every unit takes)
        if len(first) == n or not first:
            return first
        parts.append(first)
        n, offset = n - len(first), offset + len(first)
    while n > 0 and offset < _LAST_OFFSET:
        part = os.pread(fd, min(n, _ONE_READ, _LAST_OFFSET - offset), offset)
        if not part:
            break
        parts.append(part)
        n, offset = n - len(part), offset + len(part)
    return b"".join(parts)


def read_file(path: str | os.PathLike[str], most: int = MOST_FILE_BYTES) -> bytes:
    """The bytes of a file the library reads whole (a record file: a ``meta.json``, a counts
    or index cache, a run's progress; a tokenizer's file), a regular file's only: a FIFO put in
    its place would make the read wait for a writer forever, a device (``/dev/zero``) never end.

    Raises:
        OSError: missing (``FileNotFoundError``), unreadable, not a regular file (a FIFO, a
            socket, a device, a folder), or more than ``most`` bytes; its ``strerror`` says it.
    """
    with os.fdopen(open_regular(path), "rb") as f:
        data = read_at_most(f, most)
    if len(data) > most:
        raise OSError(errno.EFBIG, f"more than {most:,} bytes: not a file the library writes")
    return data


def parse(text: str | bytes) -> Any:
    """JSON ``text`` as ``json.loads`` gives it: what every reader of a file of records (a
    state, a progress record, a ``meta.json``, a cache) parses it with.

    Raises:
        ValueError: not JSON, not UTF-8, or nested too deeply to parse (Python's
            ``RecursionError``, which a reader catching ``ValueError`` missed).
    """
    try:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise
        except ValueError:  # (an integer of more digits than Python converts, 4,300)
            return json.loads(text, parse_int=_int)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None


def _int(digits: str) -> int:
    """A JSON integer, one of 4,000 digits or more as ``2**128`` of its sign: past every
    record's bounds, so said as the field's, not as text that is no JSON."""
    if len(digits) < 4000:
        return int(digits)
    return -(2**128) if digits.startswith("-") else 2**128


def encode(record: Record) -> dict[str, Any]:
    """The JSON-safe dict of ``record`` (objects and lists; a record declared with
    ``omit_defaults=True`` leaves out its fields at their default)."""
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(record, enc_hook=_plain))
    return out


def _plain(value: Any) -> Any:
    """A value msgspec does not encode as the JSON it is: a ``str`` subclass (numpy's
    ``np.str_``, an option given from an array) as its ``str``."""
    if isinstance(value, str):
        return str(value)
    raise NotImplementedError(f"{type(value).__name__} is not JSON")


def differing(one: R, other: R) -> list[str]:
    """The fields whose values differ between two records of one class, in their order (a
    state's config and the stream's, two ranks' configs): each caller says them its way."""
    return [name for name in one.__struct_fields__ if getattr(one, name) != getattr(other, name)]


def replace(record: R, **changes: Any) -> R:
    """A copy of ``record`` with ``changes`` (checked as a new record is)."""
    return msgspec.structs.replace(record, **changes)
