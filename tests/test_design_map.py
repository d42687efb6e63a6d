"""docs/design.md stays true: every module its map names exists where the map puts it, and
every code name it quotes (a class, function, method, field or constant) is defined in src/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "openwebtext"
DESIGN = (ROOT / "docs" / "design.md").read_text()

#: Names the design quotes that are values, other projects' names or prose, not our code.
NOT_CODE = {
    "drop", "pad", "concat", "bestfit", "hash", "nanogpt", "all", "train", "val", "raise",
    "skip", "warn", "strict", "replace", "tokens", "xz", "gzip", "bzip2", "zstd", "tar",
    "bytes", "gpt2", "owt", "openwebtext", "fork", "flock", "isascii", "bool", "int", "str",
    "Annotated", "Literal", "Generator", "SeedSequence", "random", "concurrent", "HfFileSystem",
    "hf_hub_url", "get_hf_file_metadata", "StatefulDataLoader", "mtime_ns", "__cause__",
    "StopIteration", "yield",
    "layers", "Range", "S", "_private", "datasets", "lzma", "msgspec", "tarfile", "ray.data",
    "TYPE_CHECKING", "depth", "typing", "format",
}  # fmt: skip
FILES = (".py", ".json", ".toml", ".md", ".bin", ".idx")


def _names_of(node: ast.AST) -> set[str]:
    """The names a statement defines: a function, a class, a field or a constant."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    return set()


def _defined() -> tuple[set[str], dict[str, set[str]]]:
    """Every name a module of src/ defines, and each class's own names."""
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names |= _names_of(node)
            if isinstance(node, ast.ClassDef):
                own = members.setdefault(node.name, set())
                for item in node.body:
                    own |= _names_of(item)
    return names, members


def _map_rows() -> list[tuple[str, str]]:
    """``(folder, module)`` of each row of the map ("" for a leaf of the package root)."""
    section = DESIGN.split("### Every module on the map", 1)[1].split("\n## ", 1)[0]
    rows, folder = [], ""
    for line in section.splitlines():
        head = re.match(r"\| \*\*(\w+)/\*\* \|", line)
        if head:
            folder = head[1]
        elif line.startswith("| **"):
            folder = ""
        found = re.match(r"\| `(\w+(?:\.py|/))` \|", line)
        if found:
            rows.append((folder, found[1]))
    return rows


def test_every_module_on_the_map_exists() -> None:
    rows = _map_rows()
    assert len(rows) > 60, rows  # the table was read
    missing = [
        f"{folder}/{module}"
        for folder, module in rows
        if not (SRC / folder / module.rstrip("/")).exists()
        and not (SRC / module.rstrip("/")).exists()  # a facade row: a module of the root
    ]
    assert not missing, f"docs/design.md maps modules that do not exist: {missing}"


def _known(name: str, defined: set[str], members: dict[str, set[str]]) -> bool:
    parts = name.split(".")
    if name.endswith(FILES) or parts[0] in NOT_CODE or ".".join(parts[:2]) in NOT_CODE:
        return True
    if len(parts) == 2 and parts[0] in members:  # ``Class.member``: the class has it
        return parts[1] in members[parts[0]]
    return parts[-1] in defined


def test_every_code_name_the_design_quotes_is_defined() -> None:
    defined, members = _defined()
    defined |= {p.stem for p in SRC.rglob("*.py")} | {p.name for p in SRC.iterdir()}
    quoted = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)(?:\(\))?`", DESIGN))
    unknown = sorted(name for name in quoted if not _known(name, defined, members))
    assert not unknown, f"docs/design.md quotes names src/ does not define: {unknown}"
