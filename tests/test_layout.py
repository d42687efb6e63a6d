"""The package's shape (docs/design.md, "The layers"): what the layout promises, checked.

Read from the source with ``ast``, so imports inside functions count, and so do those under
``TYPE_CHECKING`` (a type one module names of another is a dependency all the same). The
layers themselves are import-linter's contract in pyproject.toml; the last test shows that
contract fails when a lower layer imports a higher one.
"""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import openwebtext

PACKAGE = Path(openwebtext.__file__).parent
ROOT = Path(__file__).resolve().parents[1]  # the repository (its pyproject.toml, docs)

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 120
MAX_CLASS_LINES = 300
MAX_TOP_LEVEL_MODULES = 17  # the leaves (one concept each: codec, mixing, plan, …) and the facades
MIN_SUBPACKAGES = 5


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _exports(package: str) -> tuple[str, ...]:
    if package not in MODULES or not _is_package(package):
        return ()
    return tuple(getattr(importlib.import_module(package), "__all__", ()))


def _imports(name: str) -> Iterator[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import, wherever it is:
    inside a function, or under ``TYPE_CHECKING`` (a dependency all the same)."""
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if _is_package(name) else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # ``from openwebtext.source import redact`` takes the function the package
                # exports, not its module of the same name.
                if f"{target}.{alias.name}" in MODULES and alias.name not in _exports(target):
                    yield f"{target}.{alias.name}", None, node.lineno
                else:
                    yield target, alias.name, node.lineno


def _owner(module: str) -> str | None:
    """The package's module that ``module`` names (itself, or its closest parent)."""
    while module and module not in MODULES:
        module = module.rpartition(".")[0]
    return module or None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for target, _, _ in _imports(name):
            owner = _owner(target) if target.startswith("openwebtext") else None
            if owner and owner != name:
                graph[name].add(owner)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_counting_imports_in_functions_and_under_type_checking() -> None:
    # Importing a package runs its __init__: a module importing its own package's __init__
    # (which imports the module back) is not a cycle of the design, so edges into a
    # package's own __init__ from inside it are left out.
    graph = _graph()
    for name, targets in graph.items():
        graph[name] = {
            t for t in targets
            if t == "openwebtext" or not (name.startswith(t + ".") and _is_package(t))
        }
    assert _cycles(graph) == []


def test_no_private_name_crosses_modules() -> None:
    crossing = []
    for name in MODULES:
        for target, imported, line in _imports(name):
            if not target.startswith("openwebtext") or _owner(target) == name:
                continue
            leaf = imported if imported is not None else target.rpartition(".")[2]
            if leaf.startswith("_") and not leaf.startswith("__"):
                crossing.append(f"{name}:{line} imports {target}.{leaf}")
    assert crossing == []


#: A NamedTuple's public methods, underscored so they never clash with a field.
NAMEDTUPLE_API = {"_asdict", "_field_defaults", "_fields", "_make", "_replace"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API


def _defined_privates(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, and attributes it assigns
    (a ``Protocol``'s stubs define nothing: they describe another module's object)."""
    names: set[str] = set()
    protocols = [
        node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).endswith("Protocol") for base in node.bases)
    ]
    stubs = {id(inner) for proto in protocols for inner in ast.walk(proto) if inner is not proto}
    for node in ast.walk(tree):
        if id(node) in stubs:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if _private(n)}


#: Private names of other libraries' objects that have no public spelling, each said why.
FOREIGN_PRIVATES = {
    # Documented public API despite its underscore (exit without cleanup in a forked child).
    ("openwebtext.engine.child", "os._exit"),
    # The type add_subparsers() returns: argparse (and typeshed) name it only so.
    ("openwebtext.bench.cli", "argparse._SubParsersAction"),
    # multiprocessing's registry of a process's children, which its exit handler terminates:
    # a fork forgets the parent's workers there (there is no public way to).
    ("openwebtext.engine.parent", "multiprocessing.process._children"),
}


def test_no_private_name_of_another_modules_object_is_read() -> None:
    """``obj._name`` where ``obj`` is not ``self``/``cls`` and ``_name`` is not this module's
    own, or ``from m import _name``: a private name taken from elsewhere (STYLE.md)."""
    reads = set()
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        own = _defined_privates(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                reads |= {(name, f"from {node.module} import {alias.name}")
                          for alias in node.names if _private(alias.name)}
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr not in own:
                reads.add((name, ast.unparse(node)))
    assert sorted(reads - FOREIGN_PRIVATES) == []
    assert sorted(FOREIGN_PRIVATES - reads) == []  # an exception that is gone leaves the list


def test_across_subpackages_only_through_their_exports() -> None:
    """``openwebtext.engine.pool`` is the engine's own business: others import ``engine``."""
    reaching_in = []
    for name in MODULES:
        for target, _, line in _imports(name):
            parts = target.split(".")
            if parts[0] != "openwebtext" or len(parts) < 3 or not _is_package(".".join(parts[:2])):
                continue
            if name == ".".join(parts[:2]) or name.startswith(".".join(parts[:2]) + "."):
                continue
            reaching_in.append(f"{name}:{line} imports {target}")
    assert reaching_in == []


def _sizes() -> Iterator[tuple[str, str, int]]:
    for name, path in MODULES.items():
        source = path.read_text()
        yield "module", name, len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield "function", f"{name}.{node.name}", node.end_lineno - node.lineno + 1  # type: ignore[operator]
            elif isinstance(node, ast.ClassDef):
                yield "class", f"{name}.{node.name}", node.end_lineno - node.lineno + 1  # type: ignore[operator]


#: Where a limit is a guide the code does not bend to (docs/design.md says why): the best-fit
#: packer is one concept (its windows, the windows old ranks dealt, re-packing at a change of
#: shape, its state and counts share every attribute); cut by line count, its invariants would
#: be read across two classes (its counts per mixture part, the window's parts a reshard
#: deals, a window read whole under ``take`` and one cut by the run's end are more of those).
#: ``Stream`` is the stream's position and the loop that moves it: the position is set
#: between a document made and its ``yield``, in each of the three ways a block goes out,
#: so that a Ctrl-C anywhere leaves it exact (between blocks and epochs: its steady mark);
#: that loop is read whole, not across classes.
#: Past their limit, each for the reason docs/design.md gives ("A size limit that is a guide").
LONGER = {"openwebtext.stream.packing.BestFitBatches": 385, "openwebtext.stream.stream.Stream": 325,
          "openwebtext.stream.schema": 530}  # fmt: skip


def test_modules_functions_and_classes_stay_readable() -> None:
    limits = {"module": MAX_MODULE_LINES, "function": MAX_FUNCTION_LINES, "class": MAX_CLASS_LINES}
    too_long = [f"{kind} {name}: {lines} lines" for kind, name, lines in _sizes()
                if lines > LONGER.get(name, limits[kind])]
    assert too_long == []


def test_the_top_level_holds_few_modules_and_the_rest_is_in_subpackages() -> None:
    top = [p.name for p in PACKAGE.glob("*.py")]
    subpackages = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, sorted(top)
    assert len(subpackages) >= MIN_SUBPACKAGES, sorted(subpackages)


@pytest.mark.parametrize(
    "package", sorted(name for name in MODULES if _is_package(name)), ids=lambda n: n
)
def test_every_package_exports_the_names_it_has(package: str) -> None:
    if package == "openwebtext.torch":
        pytest.importorskip("torch")  # (the torch extra: CI's Python 3.10 step has none)
    module = __import__(package, fromlist=["__all__"])
    exported = getattr(module, "__all__", None)
    if exported is None:  # a package that exports nothing says so by having no __all__
        assert package in {"openwebtext.bench", "openwebtext.cli"}, f"{package} has no __all__"
        return
    assert len(set(exported)) == len(exported)  # the order is ruff's (RUF022)
    assert [name for name in exported if not hasattr(module, name)] == []


def _lint_imports(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    script = "import sys; from importlinter.cli import lint_imports_command as run; run()"
    return subprocess.run(
        [sys.executable, "-c", script, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=src.parent, env=env, capture_output=True, text=True, timeout=120,
    )


def test_the_layers_contract_holds() -> None:
    pytest.importorskip("importlinter")
    result = _lint_imports(PACKAGE.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_layers_contract_fails_when_a_lower_layer_imports_a_higher_one(tmp_path: Path) -> None:
    pytest.importorskip("importlinter")
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "openwebtext", ignore=shutil.ignore_patterns("__pycache__"))
    broken = src / "openwebtext" / "source" / "__init__.py"
    broken.write_text(broken.read_text() + "\nfrom openwebtext.stream import Stream  # noqa\n")
    result = _lint_imports(src)
    assert result.returncode != 0
    assert "openwebtext.source" in result.stdout and "openwebtext.stream" in result.stdout
    assert "BROKEN" in result.stdout


def test_nanogpts_split_is_written_once() -> None:
    """0.0005 and 2357 are ``options.NANOGPT_SPLIT``: every default and help text reads it."""
    from openwebtext.options import NANOGPT_SPLIT

    typed = [
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and type(node.value) in (int, float)
        and node.value in tuple(NANOGPT_SPLIT)
    ]
    lines = MODULES["openwebtext.options"].read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.startswith("NANOGPT_SPLIT ="))
    assert typed == [f"openwebtext.options:{line}"] * 2
