"""The untouched stub of an exercise: what its solution gives, derived, never written by hand.

``exercises/<module>.py`` is generated from ``course/<module>/solution.py``
(``python grader.py generate``): the module docstring, the imports and the module-level
constants are copied (an import the stub no longer uses gets ``# noqa: F401``); every public
function keeps its signature and docstring, and its body becomes ``raise NotImplementedError``;
a private helper (``_name``) is dropped unless the comment line directly above its ``def``
starts with ``# Given:``, and then it is copied whole. Lines are copied as they are; ``ast``
only says where each statement starts and ends. The grader also asks for the stub to tell an
exercise handed in untouched.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GIVEN = "# Given:"
STUB_BODY = "raise NotImplementedError"


def header(solution: str) -> str:
    """The comment on top of every generated stub."""
    return (
        f"# Your exercise file: replace each `{STUB_BODY}` with your code.\n"
        f"# Generated from {solution} by `python grader.py generate`.\n"
        "# (Maintainers: edit the solution and regenerate, not this file.)\n"
    )


class StubError(ValueError):
    """A solution the generator cannot turn into a stub; the message says where."""


def _first_line(node: ast.stmt) -> int:
    """The node's first line, decorators included (1-based)."""
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno] + [d.lineno for d in decorators])


def _attached_comments(lines: list[str], first: int) -> int:
    """The first line of the comment block directly above line ``first`` (no blank between)."""
    start = first
    while start > 1 and lines[start - 2].lstrip().startswith("#"):
        start -= 1
    return start


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def _is_main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _stub_function(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> list[str]:
    """The function's decorators, signature and docstring, then ``raise NotImplementedError``."""
    body = node.body
    if body[0].lineno == node.lineno:
        raise StubError(f"line {node.lineno}: put the body of {node.name}() on its own lines")
    kept_until = body[0].end_lineno if _is_docstring(body[0]) else body[0].lineno - 1
    indent = " " * body[0].col_offset
    return lines[_first_line(node) - 1: kept_until] + [f"{indent}{STUB_BODY}\n"]


def stub_source(source: str, solution: str = "course/exN_name/solution.py") -> str:
    """The stub for a solution's ``source``; ``solution`` is the path named in the header."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    # Each output line with its origin; None marks a line the generator removed.
    out: list[str | None] = list(lines)
    imports: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        first, last = _first_line(node), node.end_lineno
        comments = _attached_comments(lines, first)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if any(lines[i - 1].lstrip().startswith(GIVEN) for i in range(comments, first)):
                continue  # given: copied whole
            if node.name.startswith("_"):
                out[comments - 1: last] = [None] * (last - comments + 1)
            elif isinstance(node, ast.ClassDef):
                raise StubError(f"line {node.lineno}: a public class ({node.name}) can only "
                                f"be copied whole: mark it with a '{GIVEN}' comment")
            else:
                stub = _stub_function(node, lines)
                out[first - 1: last] = stub + [None] * (last - first + 1 - len(stub))
        elif _is_main_guard(node):
            out[comments - 1: last] = [None] * (last - comments + 1)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) \
                and getattr(node, "module", None) != "__future__":
            imports.append(node)
    kept = "".join(line for line in out if line is not None)
    used = {n.id for n in ast.walk(ast.parse(kept)) if isinstance(n, ast.Name)}
    for node in imports:
        bound = [(alias.asname or alias.name).split(".")[0] for alias in node.names]
        if node.lineno != node.end_lineno or any(name in used for name in bound):
            continue
        index = node.lineno - 1
        code, _, comment = out[index].rstrip("\n").partition("  # ")
        comment = re.sub(r"^noqa: F401( - )?", "", comment.strip())
        out[index] = (f"{code}  # noqa: F401"
                      + (f" - {comment.strip()}" if comment.strip() else "") + "\n")
    body = "".join(line for line in out if line is not None)
    body = re.sub(r"\n{4,}", "\n\n\n", body).rstrip("\n") + "\n"
    return header(solution) + body


def stub_text(exercise, root: Path = ROOT) -> str:
    """The untouched stub of ``exercise`` (a :class:`~grading.core.declarations.Exercise`): what
    its solution in ``root`` gives. Raises ``OSError`` when the solution cannot be read,
    ``ValueError`` or ``SyntaxError`` when it cannot be parsed."""
    source = exercise.source("solutions")
    return stub_source((Path(root) / source).read_text(encoding="utf-8"), source)
