"""Every promise in a docstring is tested (issue 12, item 5).

The docstrings of ``solutions/exN_*.py`` become the learners' stubs, so each public function's
"Returns ..." and "Raises ..." clauses are a contract. A naming rule, no manifest, maps each
clause to the tests that check it, in the exercise's own test file:

* **Returns**: some test reaches the function: the test, a helper or a module-level table it
  uses (followed through the file) names it, as ``ex.<function>`` or as the string
  ``"<function>"`` (for ``getattr(ex, function)`` in parametrized tests).
* **Raises X** (``Raises ``X```, ``raise a ``X```, a ``Raises:`` section): some test reaches the
  function *and* expects that error: ``pytest.raises(X, ...)`` or the support helper
  ``raises_clearly(X, ...)``.

A clause without such a test fails here, naming the function and the clause.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kata.manifest import load_manifest

pytestmark = pytest.mark.maintainer

EXERCISES = load_manifest()
ROOT = Path(__file__).resolve().parents[2]

_ERROR = r"``?(?P<error>[A-Z]\w*(?:Error|Exception))``?"
_RAISES_SENTENCE = re.compile(rf"\b(?:[Rr]aises?|raising)\s+(?:an?\s+)?{_ERROR}")


def promised_errors(docstring: str) -> set[str]:
    """The exception types a docstring promises to raise."""
    errors = {m.group("error") for m in _RAISES_SENTENCE.finditer(docstring)}
    section = re.search(r"^\s*Raises:\s*\n((?:[ \t]+.*\n?)+)", docstring, flags=re.MULTILINE)
    if section:
        errors |= set(re.findall(r"^\s+([A-Z]\w*(?:Error|Exception)):", section.group(1),
                                 flags=re.MULTILINE))
    return errors


def promises(exercise) -> dict[str, dict]:
    """function -> {"returns": bool, "raises": {error types}} from the solution's docstrings."""
    tree = ast.parse((ROOT / exercise.source("solutions")).read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in exercise.functions:
            doc = ast.get_docstring(node) or ""
            found[node.name] = {"returns": bool(re.search(r"\bReturns?\b", doc)),
                                "raises": promised_errors(doc)}
    return found


class ReachMap:
    """What each test function of a test file reaches, following names through the file."""

    def __init__(self, path: Path):
        self.tree = ast.parse(path.read_text(encoding="utf-8"))
        self.definitions: dict[str, list[ast.AST]] = {}
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                self.definitions.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.definitions.setdefault(target.id, []).append(node)
        self.tests = [node for node in self.tree.body
                      if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]

    def reachable(self, test: ast.FunctionDef) -> list[ast.AST]:
        """The test (with its decorators) and every module-level definition it reaches by name.

        Fixtures count too: a test's argument names the fixture function of the same name.
        """
        seen, queue, nodes = {test.name}, [test], []
        while queue:
            node = queue.pop()
            nodes.append(node)
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if isinstance(node, ast.FunctionDef):
                names |= {a.arg for a in node.args.args}
            for name in names - seen:
                seen.add(name)
                queue += self.definitions.get(name, [])
        return nodes

    @staticmethod
    def names_function(nodes, function: str) -> bool:
        for node in nodes:
            for n in ast.walk(node):
                if (isinstance(n, ast.Attribute) and n.attr == function
                        and isinstance(n.value, ast.Name) and n.value.id == "ex"):
                    return True
                if isinstance(n, ast.Constant) and n.value == function:
                    return True
        return False

    @staticmethod
    def expects_error(nodes, error: str) -> bool:
        for node in nodes:
            for n in ast.walk(node):
                if not (isinstance(n, ast.Call) and n.args):
                    continue
                callee = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                first = n.args[0]
                if callee in ("raises", "raises_clearly") and isinstance(first, ast.Name) \
                        and first.id == error:
                    return True
        return False

    def tests_for(self, function: str, error: str | None = None) -> list[str]:
        found = []
        for test in self.tests:
            nodes = self.reachable(test)
            if self.names_function(nodes, function) and (
                    error is None or self.expects_error(nodes, error)):
                found.append(test.name)
        return found


def contract_map() -> dict[tuple[str, str, str], list[str]]:
    """(exercise, function, clause) -> the tests that check it; clause "Returns" or "Raises X"."""
    mapping = {}
    for exercise in EXERCISES:
        test_file = ReachMap(ROOT / exercise.tests)
        for function, promised in promises(exercise).items():
            if promised["returns"]:
                mapping[(exercise.id, function, "Returns")] = test_file.tests_for(function)
            for error in sorted(promised["raises"]):
                mapping[(exercise.id, function, f"Raises {error}")] = test_file.tests_for(
                    function, error)
    return mapping


def test_the_docstring_parser_reads_both_styles():
    assert promised_errors("Raises ``ValueError`` for an empty text.") == {"ValueError"}
    assert promised_errors("otherwise raise a ``ValueError`` that lists") == {"ValueError"}
    assert promised_errors("Args:\n    x: y\n\nRaises:\n    IndexError: out of range\n") == {
        "IndexError"}
    assert promised_errors("Returns a tensor.") == set()


def test_every_public_function_with_a_docstring_promise_is_found():
    for exercise in EXERCISES:
        found = promises(exercise)
        missing = set(exercise.functions) - set(found)
        assert not missing, f"{exercise.id}: no docstring found for {sorted(missing)}"
    clauses = contract_map()
    assert sum(clause.startswith("Raises") for _, _, clause in clauses) >= 10, clauses


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_every_returns_and_raises_clause_has_a_test(exercise):
    untested = [f"{function}: {clause}" for (exercise_id, function, clause), tests
                in contract_map().items() if exercise_id == exercise.id and not tests]
    assert not untested, (
        f"{exercise.tests} has no test for these docstring promises of "
        f"{exercise.source('solutions')} (a test must reach ex.<function>, and for Raises X use "
        f"pytest.raises(X) or raises_clearly(X, ...)): {untested}")
