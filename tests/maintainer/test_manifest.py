"""The manifest is the one list of exercises: every entry must match the files it names."""

import ast
import inspect
from pathlib import Path

import pytest

from kata.impl import import_implementation
from kata.manifest import load_manifest

pytestmark = pytest.mark.maintainer

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = load_manifest()


def test_exercise_ids_are_unique_and_numbered_in_order():
    assert [e.number for e in EXERCISES] == list(range(1, len(EXERCISES) + 1))


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_manifest_entry_matches_its_files(exercise):
    assert (ROOT / exercise.tests).is_file(), f"{exercise.tests} is missing"
    assert 2 <= len(exercise.hints) <= 3, "each exercise has two or three hints"
    assert exercise.points > 0
    stub = import_implementation(exercise, "exercises")
    solution = import_implementation(exercise, "solutions")
    for name in exercise.functions:
        assert hasattr(stub, name) and hasattr(solution, name), f"{exercise.id}.{name} missing"
        assert inspect.signature(getattr(stub, name)) == inspect.signature(getattr(solution, name)), (
            f"{exercise.id}.{name}: the stub's signature differs from the solution's"
        )
        assert getattr(stub, name).__doc__, f"the stub {exercise.id}.{name} has no docstring"
    # The stubs are generated from the solutions: tests/maintainer/test_stubs.py checks they are fresh.


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_stub_functions_only_raise_not_implemented(exercise):
    """Each listed stub's body is its docstring and `raise NotImplementedError`, nothing else."""
    tree = ast.parse((ROOT / exercise.source("exercises")).read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name in exercise.functions:
        body = functions[name].body
        statements = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        assert len(statements) == 1 and isinstance(statements[0], ast.Raise), (
            f"exercises stub {name} should contain only a docstring and raise NotImplementedError"
        )


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_tests_never_import_the_solutions(exercise):
    source = (ROOT / exercise.tests).read_text()
    for forbidden in ("import solutions", "from solutions", "import exercises", "from exercises"):
        assert forbidden not in source, f"{exercise.tests} must get the code under test via `ex`"


def test_readme_table_is_generated_from_the_manifest():
    from kata.manifest import readme_table

    assert readme_table() in (ROOT / "README.md").read_text(), (
        "README.md's exercise table is out of date: run `python -m kata.manifest`"
    )
