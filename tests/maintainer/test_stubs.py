"""The stubs in exercises/ are generated from solutions/ by `python grader.py stubs`, never by hand."""

import ast
from pathlib import Path

import pytest

from kata import stubs
from kata.grading import cli
from kata.manifest import load_manifest

pytestmark = pytest.mark.maintainer

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = load_manifest()


def _functions(source: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}


def test_the_committed_stubs_are_generated_from_the_solutions():
    stale = stubs.stale(ROOT)
    assert not stale, (f"{', '.join(p.name for p in stale)} out of date with solutions/: run "
                       "`python grader.py stubs` (and never edit exercises/ by hand)")


def test_every_manifest_exercise_has_a_generated_stub():
    names = {p.name for p in stubs.solution_files(ROOT)}
    assert {f"{e.module}.py" for e in EXERCISES} <= names


def test_check_exits_nonzero_naming_a_stale_stub(tmp_path, capsys):
    for folder in ("solutions", "exercises"):
        (tmp_path / folder).mkdir()
    (tmp_path / "solutions" / "ex1_toy.py").write_text('"""Toy."""\n\n\ndef f():\n    return 1\n')
    assert cli.main(["stubs", "--check"], root=tmp_path) == 1
    assert "stale: exercises/ex1_toy.py" in capsys.readouterr().out
    assert cli.main(["stubs"], root=tmp_path) == 0
    assert "wrote exercises/ex1_toy.py" in capsys.readouterr().out
    assert cli.main(["stubs", "--check"], root=tmp_path) == 0
    assert capsys.readouterr().out == "the stubs are up to date (1)\n"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_generated_stub_keeps_the_public_api_and_drops_the_answers(exercise):
    solution = (ROOT / exercise.source("solutions")).read_text()
    stub = stubs.stub_source(solution, exercise.source("solutions"))
    mine, theirs = _functions(stub), _functions(solution)
    solution_tree, stub_tree = ast.parse(solution), ast.parse(stub)
    assert ast.get_docstring(stub_tree) == ast.get_docstring(solution_tree)
    assert stub.startswith("# Your exercise file") and "python grader.py stubs" in stub
    for name, node in theirs.items():
        if not name.startswith("_"):
            assert name in mine, f"public {name} missing from the stub"
            assert ast.dump(mine[name].args) == ast.dump(node.args), f"{name}: signature changed"
            assert ast.get_docstring(mine[name]) == ast.get_docstring(node)
            body = [s for s in mine[name].body if not stubs._is_docstring(s)]
            assert len(body) == 1 and isinstance(body[0], ast.Raise), name
    for name in exercise.functions:
        assert name in mine
    for name in mine:
        if name.startswith("_"):  # a private helper in a stub is there because it is given
            line = stubs._first_line(mine[name])
            assert stub.splitlines()[line - 2].startswith(stubs.GIVEN), name
            assert ast.dump(mine[name]) != "" and name in theirs
    solution_imports = [ast.dump(n) for n in solution_tree.body
                        if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [ast.dump(n) for n in stub_tree.body
            if isinstance(n, (ast.Import, ast.ImportFrom))] == solution_imports


def test_private_helpers_are_dropped_unless_given():
    source = '''"""Doc."""

import os  # for f

LIMIT = 3


# ---- section


def f(x: int) -> int:
    """Public."""
    return _helper(x) + _given(x)


def _helper(x):
    return x


# Given: you may call this.
def _given(x):
    return x * LIMIT


if __name__ == "__main__":
    print(f(1))
'''
    stub = stubs.stub_source(source, "solutions/ex9_toy.py")
    functions = _functions(stub)
    assert set(functions) == {"f", "_given"}
    assert "return _helper" not in stub and "return x * LIMIT" in stub
    assert "LIMIT = 3" in stub and "# ---- section" in stub and "__main__" not in stub
    assert "import os  # noqa: F401 - for f" in stub
    assert "\n\n\n\n" not in stub
    compile(stub, "stub", "exec")
