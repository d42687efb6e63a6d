"""The library's exception tree.

Every failure the loader reports is one of these; nothing from deep inside
``tarfile``, ``lzma`` or ``multiprocessing`` escapes unwrapped. Where a
lower-level exception caused it, it is chained (``raise ... from exc``)::

    OWTError
    ├── CorpusError            no corpus at a path, unreadable file, bad outer tar
    │   ├── UnknownFormat      a file or member whose magic bytes are not ours
    │   ├── TokenFileError     a token file whose header, index or size is not its format's
    │   │                      (defined in ``tokenfiles``)
    │   ├── Unsupported        a file this installation cannot read (an extra not installed,
    │   │                      a codec pyarrow lacks): never skipped, whatever ``on_error``
    │   ├── WrongTokenizer     a token corpus read without the tokenizer its ids were written
    │   │                      with: never skipped, whatever ``on_error`` (the options' fault)
    │   └── CorruptMember      an inner member that fails to decompress or parse
    │       ├── Unreadable         its bytes could not be read (a disk's, a network's error)
    │       ├── MemberTooLarge     decompressed past ``max_member_bytes``
    │       ├── TruncatedMember    cut short (an interrupted download); what precedes the cut
    │       │                      is kept
    │       └── CorruptDocument    one document: invalid UTF-8, over ``max_document_bytes``
    ├── WorkerError            a worker died, hung, or could not be started
    │   ├── UnexpectedError    an exception the library did not make (a bug, a missing extra)
    │   │                      while a unit was read: never skipped, whatever ``on_error``
    │   └── OutOfResources     the machine ran out of file descriptors or memory reading a
    │                          unit: never skipped, whatever ``on_error`` (not the data's fault)
    ├── StateError             a state dict that does not fit this loader
    ├── OutputError            a path an output may not be written to (device, FIFO, folder)
    ├── TooManyErrors          more skips than ``max_errors`` allows
    ├── TokenizerError         an unknown tokenizer spec, a missing extra or file
    │                          (defined in ``tokenizer``, with what it guards)
    └── PrepareError           owt tokenize / merge: another run's progress, a bad slice
                               (defined in ``workdir``)

``CorpusError`` and its subclasses carry ``path`` (the file) and ``member``
(the inner member name, or ``None``); ``CorruptDocument`` adds ``document``;
in a mixture, ``part`` names the part whose corpus it is (its message says it).
They are plain picklable values so they cross process boundaries intact. An error raised in
a worker process (the pool's, ``owt synth``'s) is raised from its traceback there, as text
(``WorkerTraceback``, its ``__cause__``).
"""

from __future__ import annotations

import errno
import json
from typing import Any, ClassVar, TypeVar

__all__ = [
    "SHORTAGES",
    "CorpusError",
    "CorruptDocument",
    "CorruptMember",
    "MemberTooLarge",
    "OWTError",
    "OutOfResources",
    "OutputError",
    "StateError",
    "TooManyErrors",
    "TruncatedMember",
    "UnexpectedError",
    "UnknownFormat",
    "Unreadable",
    "Unsupported",
    "WorkerError",
    "WorkerTraceback",
    "WrongTokenizer",
    "carry",
    "in_part",
    "install_hint",
    "one_line",
    "ran_out",
    "read_error",
]


def one_line(text: str, *, name: bool = False) -> str:
    """``text`` as one printable line: what every error and warning says is (a library's
    message quoted in one, pyarrow's with newlines, made one skip several WARNING lines, and
    raw bytes on a terminal). A message's newline or tab becomes a space; a name's (a file's,
    a member's, a document's: ``name``) is escaped as Python writes it (``\\n``), since a
    space would show another name. Other characters that do not print are escaped alike."""
    return "".join(c if c.isprintable() else " " if c in "\n\t" and not name
                   else repr(c)[1:-1] for c in (text if name else text.strip()))  # fmt: skip


class OWTError(Exception):
    """Base class of every error raised by openwebtext."""

    #: Whether ``on_error="skip"`` may count it as a skip (``policy.SkipPolicy``). False for a
    #: fault that is not the data's (the machine's, the options'): a skip would be kept as a
    #: fact of the corpus, and every unit read so would be skipped for it.
    skippable: ClassVar[bool] = True


#: The note (PEP 678) ``carry`` adds to an error: torch rebuilds an error raised in a
#: ``DataLoader`` worker from its type and the text of its traceback alone (``exc_type(text)``,
#: pytorch/pytorch#34130), which holds its notes; the error's constructor reads it back.
_CARRIED = "openwebtext error: "
#: What a note may carry: each attribute, of a type JSON keeps.
_ATTRIBUTES = {"message": str, "path": str, "member": str, "part": str, "document": str,
               "field": str, "resume_with": list, "mismatch": bool}  # fmt: skip


def carry(error: BaseException) -> None:
    """Note ``error``'s message and attributes in it, once, for torch to carry to the main
    process in the text it rebuilds the error from (``DataLoader`` workers; Python 3.11+)."""
    if not isinstance(error, _Located | StateError) or not hasattr(error, "add_note"):
        return
    if any(str(n).startswith(_CARRIED) for n in getattr(error, "__notes__", ())):
        return
    said = {k: v for k, v in vars(error).items() if k in _ATTRIBUTES and v not in (None, (), False)}
    error.add_note(_CARRIED + json.dumps({"message": str(error), **said}))


def _note(error: BaseException, note: str) -> None:
    """Add ``note`` to ``error`` (Python 3.11+; on 3.10 nothing carries one)."""
    if hasattr(error, "add_note"):
        error.add_note(note)


def _carried(text: str) -> dict[str, Any] | None:
    """What ``carry`` noted in ``text`` (torch's text of an error raised in a worker), each of
    its attribute's type; None: no such note."""
    at = text.rfind("\n" + _CARRIED)  # (torch's text: "Caught …", the note its last line)
    if at < 0 or not text.startswith("Caught ") or "\n" in text[at + 1 :].rstrip("\n"):
        return None
    try:
        said = json.loads(text[at + 1 + len(_CARRIED) :])
    except ValueError:
        return None
    if not isinstance(said, dict) or not isinstance(said.get("message"), str) or any(
        k not in _ATTRIBUTES or not isinstance(v, _ATTRIBUTES[k]) for k, v in said.items()
    ):  # fmt: skip
        return None
    worker = text[:at].strip()  # (its traceback there: a note of the error rebuilt)
    return {**said, "resume_with": tuple(said.get("resume_with", ())), "worker": worker}


class _Located(OWTError):
    """An error about a file and, maybe, one of its members; picklable as such."""

    def __init__(self, message: str, path: str | None = None, member: str | None = None) -> None:
        said = _carried(message) if path is None and member is None else None
        if said is not None:  # rebuilt by torch from a worker's text (``carry``)
            message, path, member = said["message"], said.get("path"), said.get("member")
        super().__init__(message)
        self.message = message
        self.path = path
        self.member = member
        self.part: str | None = None if said is None else said.get("part")
        """The mixture's part whose corpus it is (None: not a mixture's)."""
        if said is not None:
            if "document" in said:
                self.document = said["document"]
            _note(self, said["worker"])

    def __reduce__(self) -> tuple[object, ...]:  # (its whole state: its notes too)
        return (type(self), (self.message, self.path, self.member), dict(self.__dict__))

    def in_part(self, name: str | None) -> None:
        """Say the error is of the mixture's part ``name`` (a part's stream tags what it
        raises or skips; the first tag holds)."""
        if self.part is None:
            self.part = name

    def _of_part(self, said: str) -> str:
        return said if self.part is None else f"part {self.part!r}: {said}"


class CorpusError(_Located):
    """A problem with the input: a path, a file or one of its members.

    Attributes:
        path: The file (or folder) concerned.
        member: The inner member's name inside ``path``, if any.
    """

    def __str__(self) -> str:
        where = one_line(self.path or "", name=True)
        if self.member:
            member = one_line(self.member, name=True)
            where = f"{where}[{member}]" if where else member
        return self._of_part(f"{where}: {one_line(self.message)}" if where else
                             one_line(self.message))  # fmt: skip


class UnknownFormat(CorpusError):
    """A file or member that is neither a tar nor xz, gzip, bzip2 or zstd data."""


class Unsupported(CorpusError):
    """A file this installation cannot read: an extra not installed (the message says how to
    install it), a protocol no installed library knows, a codec pyarrow lacks. Not the data's
    fault, so never counted as a skip under ``on_error="skip"``."""

    skippable = False


class WrongTokenizer(CorpusError):
    """A corpus its tokenizer cannot read: a token corpus read without the tokenizer its ids
    were written with (none, one of another width, another than its ``meta.json`` records,
    most ids past its vocabulary), or a tokenizer that wrote its end-of-text id inside a
    document. The options' fault, not the data's, so never counted as a skip under
    ``on_error="skip"``: every unit would be."""

    skippable = False


class CorruptMember(CorpusError):
    """An inner member that cannot be decompressed or parsed as a tar of documents."""


class Unreadable(CorruptMember):
    """A member whose bytes could not be read: a disk's or a network's error (after its
    retries). No verdict on the bytes: skipped under ``skip``, but never kept in a count."""


class MemberTooLarge(CorruptMember):
    """A member whose decompressed size passes ``max_member_bytes`` (e.g. a bomb)."""


class TruncatedMember(CorruptMember):
    """A member cut short (its file, or its compressed stream, ends early), with no sign of
    corruption before the cut: under ``skip`` the documents wholly before the cut are
    delivered and the member is counted as partial."""


class CorruptDocument(CorruptMember):
    """A single document that cannot be delivered (invalid UTF-8, too large).

    Attributes:
        document: The document's name inside the member.
    """

    def __init__(
        self,
        message: str,
        path: str | None = None,
        member: str | None = None,
        document: str | None = None,
    ) -> None:
        super().__init__(message, path, member)
        self.document = document if document is not None else getattr(self, "document", None)

    def __reduce__(self) -> tuple[object, ...]:
        args = (self.message, self.path, self.member, self.document)
        return (type(self), args, dict(self.__dict__))

    def __str__(self) -> str:
        base = super().__str__()
        named = one_line(self.document or "", name=True)
        return f"{base} (document {named})" if named else base


class WorkerError(_Located):
    """A worker process died, stopped answering, or could not be started.

    Attributes:
        path: The file of the member the worker was reading, if any.
        member: That member's name, if any (both are in the message too).
    """

    def __str__(self) -> str:
        return self._of_part(self.message)


class UnexpectedError(WorkerError):
    """An exception the library did not make while a unit was read: a bug, a tokenizer's own
    error, a module an extra installs missing (its message says which). Never counted as a
    skip under ``on_error="skip"``: a skip would hide it, and keep it as a fact of the corpus
    (a count's failed member, a finished run's ``meta.json``)."""

    skippable = False


class OutOfResources(WorkerError):
    """The machine ran out of something while a unit was read: file descriptors (EMFILE,
    ENFILE) or memory (ENOMEM, ``MemoryError``). Not the data's fault, so never counted as a
    skip under ``on_error="skip"``: a skip would be kept as a fact of the corpus (its counts
    cached, a finished run's ``meta.json``) though a run with room reads the unit whole."""

    skippable = False

    @classmethod
    def reading(cls, path: str, member: str | None, why: str) -> OutOfResources:
        """The error of ``path`` (``[member]``) that could not be read for ``why``, names
        escaped (``one_line``), with what to do."""
        file, inner = one_line(path, name=True), one_line(member or "", name=True)
        where = f"{file}[{inner}]" if inner else file
        return cls(f"{where}: cannot read: {why} (the machine ran out: raise the limit, or use "
                   "fewer workers)", path, member)  # fmt: skip


#: The errnos of a machine that ran out (``OutOfResources``), not of a file that is bad.
SHORTAGES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def ran_out(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error it was raised from (a library's wrapping one), is the
    machine's running out (``SHORTAGES``, a ``MemoryError``)."""
    for _ in range(8):  # (a chain of wrappers: a few deep at most)
        if exc is None:
            return False
        if isinstance(exc, MemoryError) or getattr(exc, "errno", None) in SHORTAGES:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def read_error(
    exc: OSError, path: str, member: str | None = None, kind: type[CorpusError] = Unreadable,
    what: str = "cannot read",
) -> CorpusError | OutOfResources:  # fmt: skip
    """The error of a file or unit that could not be read (``exc``): a ``kind`` saying
    ``what`` failed, or ``OutOfResources`` when the machine ran out (``SHORTAGES``): not a
    ``CorpusError``, so no ``on_error="skip"`` leaves the file or unit out for it."""
    if exc.errno in SHORTAGES:
        return OutOfResources.reading(path, member, exc.strerror or str(exc))
    return kind(f"{what}: {exc.strerror or exc}", path, member)


class WorkerTraceback(Exception):
    """The traceback of an error raised in a worker, as text: the ``__cause__`` of that error.

    Shown above the consumer's own traceback, it points at the worker's line.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


class OutputError(OWTError):
    """A path an output must not or cannot be written to: a device, a FIFO, a folder, or a
    file in a folder that is missing or not writable."""


class StateError(OWTError):
    """A saved state or record that cannot be read, or cannot resume this loader (other
    corpus, seed, options). ``field`` is the dotted path of the first wrong field of a record
    (``reshard.ranks[1].handed``), or None when the record as a whole does not fit;
    ``mismatch``, whether the state is sound but was saved for another run (corpus, options,
    mixture, packing or schedule: ``field`` names the first that differs), never a damaged one;
    ``resume_with``, the options whose saved values would resume it (a state of another
    seed: ``("seed",)``), for a caller to say how it takes them (``owt``: its flags)."""

    def __init__(
        self,
        message: str,
        field: str | None = None,
        resume_with: tuple[str, ...] = (),
        mismatch: bool = False,
    ) -> None:
        said = _carried(message) if field is None and not resume_with and not mismatch else None
        if said is not None:  # rebuilt by torch from a worker's text (``carry``)
            message, field, resume_with = said["message"], said.get("field"), said["resume_with"]
            mismatch = said.get("mismatch", False)
        super().__init__(message)
        self.field = field
        self.resume_with = resume_with
        self.mismatch = mismatch or bool(resume_with)
        if said is not None:
            _note(self, said["worker"])

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.field, self.resume_with, self.mismatch),
                dict(self.__dict__))  # fmt: skip

    def within(self, path: str, says: str = "") -> StateError:
        """This error as one of the record at ``path`` inside the record entered (a batches
        state's ``documents``, a mixture's ``parts.web``): its field under ``path`` (or
        ``path`` itself, for an error of that record as a whole), its message after ``says``."""
        return self.retold(f"{says}{self}", f"{path}.{self.field}" if self.field else path)

    def retold(self, message: str, field: str | None = None) -> StateError:
        """This error said as ``message`` (of ``field``, if given), what else it says kept."""
        return StateError(message, field or self.field, self.resume_with, self.mismatch)

    def reason(self) -> str:
        """The message without its hint of the options to pass (``resume_with``), for a
        caller that says how to resume in its own terms."""
        text = str(self)
        cut = text.rfind(" (to resume it, pass ")
        return text[:cut] if self.resume_with and cut >= 0 else text


class TooManyErrors(OWTError):
    """The skip policy skipped more than ``max_errors`` members or documents."""


E = TypeVar("E", bound=BaseException)


def in_part(error: E, part: str | None) -> E:
    """``error``, said to be of the mixture's ``part`` (its message names it) if it names a
    file: a ``CorpusError`` or ``WorkerError`` (``_Located.in_part``)."""
    if part is not None and isinstance(error, _Located):
        error.in_part(part)
    return error


def install_hint(extra: str) -> str:
    """How to install one of the package's extras: the one spelling of every "this needs the X
    extra" message. The package is not on PyPI yet: from the clone, ``pip install -e '.[X]'``."""
    return f"from the clone: pip install -e '.[{extra}]'"
