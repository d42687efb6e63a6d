"""Code lines of Python files, by their tokens and AST: a line holding code, not blank, not
only a comment, not part of a docstring (any bare string statement: a module's, a class's, a
function's or an attribute's).

    python tests/code_lines.py src/openwebtext/prepare/state.py
    git show REV:path.py | python tests/code_lines.py -
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENDMARKER, tokenize.ENCODING}  # fmt: skip


def code_lines(source: str) -> int:
    """How many lines of ``source`` hold code."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(getattr(node.value, "value", None), str):
            docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        print(f"{code_lines(text):6d} {name}")
