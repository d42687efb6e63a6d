"""The public surface: each documented door's ``__all__``, exactly, and every name in it
documented on the API pages (docs/api/, rendered by mkdocstrings from the docstrings).

A name added to or taken from a door is a change of the public API: this list changes with
it, on purpose. Everything else is reached by the library's own layers only.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the repository (its docs), whatever src is tested
ERRORS = [
    "CorpusError", "CorruptDocument", "CorruptMember", "MemberTooLarge", "OWTError",
    "OutOfResources", "OutputError", "StateError", "TokenFileError", "TokenizerError",
    "TooManyErrors", "TruncatedMember", "UnexpectedError", "UnknownFormat", "Unreadable",
    "Unsupported", "WorkerError", "WrongTokenizer",
]  # fmt: skip
DOORS = {
    "openwebtext": sorted([
        *ERRORS, "Ahead", "BatchIterator", "Corpus", "Document", "DocumentIterator", "Loader",
        "Mixture", "MixtureBatches", "MixtureIterator", "OpenWebTextLoader", "Options",
        "PackedBatch", "Schedule", "Stats", "TokenDocument", "Tokenizer",
        "ahead", "load_tokenizer", "reshard", "shuffle", "take",
    ]),
    "openwebtext.synth": [
        "SynthReport", "bench_corpus", "bench_corpus_path", "default_corpus",
        "default_corpus_path", "write_corpus",
    ],
    "openwebtext.prepare": [
        "PrepareError", "PrepareOptions", "Progress", "Report", "merge", "prepare",
        "slice_folders", "write_format",
    ],
    "openwebtext.ray": ["EngineError", "SkipLog", "library_errors", "read_openwebtext", "tokenize"],
    "openwebtext.torch": [
        "DeviceBatches", "OpenWebTextDataset", "PackedBatchDataset", "Varlen",
        "document_block_mask", "document_cu_seqlens", "document_mask", "loader_dataset_states",
        "reshard_loader_states", "same_steps", "to_device", "varlen",
    ],
    "openwebtext.hf": ["iterable_dataset", "shard_options"],
}  # fmt: skip
#: About sixty names in all (issue 35): what a user of the library calls, and no more (then
#: mixtures, issue 36, and shape schedules, issue 38, each a few; and every error the docs tell
#: a user to expect, which a user catches by its name: session 40's four).
MAX_NAMES = 72


def _door(name: str) -> object:
    if name == "openwebtext.torch":  # openwebtext.ray and .hf import without their extras
        pytest.importorskip("torch")
    return importlib.import_module(name)


def test_the_surface_is_about_sixty_names() -> None:
    assert sum(len(names) for names in DOORS.values()) <= MAX_NAMES


@pytest.mark.parametrize("door", sorted(DOORS))
def test_each_door_exports_exactly_its_names_sorted(door: str) -> None:
    module = _door(door)
    exported = list(module.__all__)  # type: ignore[attr-defined]
    assert exported == sorted(exported)
    assert exported == DOORS[door]
    assert [name for name in exported if not hasattr(module, name)] == []


def _definition(module: object, name: str) -> tuple[Path, str]:
    """The source file that defines ``module.name`` (following ``from X import name``)."""
    obj = getattr(module, name)
    home = getattr(obj, "__module__", None)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert home is not None
        return Path(inspect.getfile(importlib.import_module(home))), obj.__name__
    source = Path(inspect.getfile(module))  # type: ignore[arg-type]
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _definition(importlib.import_module(node.module), alias.name)
    return source, name


def _shadowed(door: object, name: str) -> bool:
    """Whether ``from pkg import name`` somewhere on the way to ``name``'s definition names a
    package that also has a submodule ``name``: griffe then documents the module, not it."""
    source = Path(inspect.getfile(door))  # type: ignore[arg-type]
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    package = importlib.import_module(node.module)
                    where = Path(inspect.getfile(package))
                    if where.name == "__init__.py" and (where.parent / f"{alias.name}.py").exists():
                        return True
                    return _shadowed(package, alias.name)
    return False


def _docstring(path: Path, name: str) -> str | None:
    """What griffe reads as ``name``'s docstring: a def's or class's, or the string right
    after a module-level assignment."""
    body = ast.parse(path.read_text()).body
    defined = [node for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                          ast.ClassDef)) and node.name == name]
    if defined:  # (the last: an overloaded function's implementation, as griffe reads it)
        return ast.get_docstring(defined[-1])
    for node, after in zip(body, [*body[1:], None], strict=True):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                return str(after.value.value)
            return None
    raise AssertionError(f"{name} is not defined in {path}")


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_exported_name_is_documented_on_the_api_pages(door: str) -> None:
    page = ROOT / "docs" / "api" / ("index.md" if door == "openwebtext" else
                                    f"{door.rpartition('.')[2]}.md")
    assert f"::: {door}\n" in page.read_text(), f"{page} does not render {door}"
    assert f"api/{page.name}" in (ROOT / "mkdocs.yml").read_text()
    module = _door(door)
    undocumented = [
        name for name in module.__all__  # type: ignore[attr-defined]
        if not (_docstring(*_definition(module, name)) or "").strip()
    ]
    assert undocumented == []
    assert [name for name in module.__all__ if _shadowed(module, name)] == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_door_defines_no_public_name_it_does_not_export(door: str) -> None:
    """mkdocstrings renders every documented public name a door's own module defines, in
    ``__all__`` or not: a helper defined there would be on the API page as if it were public."""
    module = _door(door)
    path = Path(inspect.getfile(module))  # type: ignore[arg-type]
    defined = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
    shown = {name for name in defined if not name.startswith("_") and _docstring(path, name)}
    assert sorted(shown - set(module.__all__)) == []  # type: ignore[attr-defined]
