"""What is generated from ``course/`` (the stubs in exercises/, the notebooks, the tables in the docs)
is written by ``python grader.py generate``, never by hand, and is never stale."""

import ast
from pathlib import Path

import pytest

from grading.core import stubs
from grading.core.declarations import load_exercises
from grading.views import cli, generate


ROOT = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()


def _functions(source: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}


def test_every_generated_file_is_up_to_date():
    stale = generate.generate(ROOT, check_only=True)
    assert not stale, (f"{', '.join(p.relative_to(ROOT).as_posix() for p in stale)} out of date "
                       "with course/: run `python grader.py generate` (and never edit them by hand)")


def test_every_exercise_has_a_generated_stub_and_notebook():
    wanted = set(generate.wanted_files(ROOT))
    for exercise in EXERCISES:
        assert ROOT / exercise.source() in wanted
        assert ROOT / "notebooks" / f"{exercise.module}.ipynb" in wanted


def test_check_exits_nonzero_naming_a_stale_stub(tmp_path, capsys):
    folder = tmp_path / "course" / "ex1_toy"
    folder.mkdir(parents=True)
    (tmp_path / "exercises").mkdir()
    (tmp_path / "course" / "shared").mkdir()
    (tmp_path / "course" / "shared" / "notebook_setup.py").write_text(
        '# %% tags=["setup"]\nprint("set up")\n')
    (folder / "exercise.toml").write_text('title = "T"\npoints = 1\npost = "P"\nfunctions = ["f"]\n')
    (folder / "solution.py").write_text('"""Toy."""\n\n\ndef f():\n    """F.\n\n    Hint: one.\n    """\n'
                                        '    return 1\n')
    (folder / "notebook.py").write_text('# %% tags=["setup"]\n'
                                        '# (set-up: course/shared/notebook_setup.py)\n\n# %%\nprint(1)\n')
    assert cli.main(["generate", "--check"], root=tmp_path) == 1
    assert "stale: exercises/ex1_toy.py" in capsys.readouterr().out
    assert cli.main(["generate"], root=tmp_path) == 0
    out = capsys.readouterr().out
    assert "wrote exercises/ex1_toy.py" in out and "wrote notebooks/ex1_toy.ipynb" in out
    assert cli.main(["generate", "--check"], root=tmp_path) == 0
    assert capsys.readouterr().out == "every generated file is up to date\n"


def test_a_table_region_is_rewritten_from_the_declarations():
    text = "intro\n<!-- generated: points -->\nold words\n<!-- end points -->\nmore\n"
    new = generate.with_tables(text, EXERCISES)
    main = sum(e.points for e in EXERCISES if not e.bonus)
    assert f"**{main} points**" in new and "old words" not in new and new.endswith("more\n")
    with pytest.raises(generate.GenerateError, match="no table named 'nothing'"):
        generate.with_tables("<!-- generated: nothing -->\nx\n<!-- end nothing -->", EXERCISES)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_generated_stub_keeps_the_public_api_and_drops_the_answers(exercise):
    solution = (ROOT / exercise.source("solutions")).read_text()
    stub = stubs.stub_source(solution, exercise.source("solutions"))
    mine, theirs = _functions(stub), _functions(solution)
    solution_tree, stub_tree = ast.parse(solution), ast.parse(stub)
    assert ast.get_docstring(stub_tree) == ast.get_docstring(solution_tree)
    assert stub.startswith("# Your exercise file") and "python grader.py generate" in stub
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
    stub = stubs.stub_source(source, "course/ex9_toy/solution.py")
    functions = _functions(stub)
    assert set(functions) == {"f", "_given"}
    assert "return _helper" not in stub and "return x * LIMIT" in stub
    assert "LIMIT = 3" in stub and "# ---- section" in stub and "__main__" not in stub
    assert "import os  # noqa: F401 - for f" in stub
    assert "\n\n\n\n" not in stub
    compile(stub, "stub", "exec")


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_every_notebook_gets_the_one_setup_cell(exercise):
    import nbformat

    source = ROOT / exercise.folder / "notebook.py"
    marked = generate.parse_percent(source.read_text(encoding="utf-8"))[1]
    assert generate.SETUP_TAG in marked["tags"] and marked["source"] == generate.SETUP_MARKER, \
        f"{source.relative_to(ROOT)}: its second cell is not the set-up marker cell"
    setup = generate.setup_cell()
    built = nbformat.reads(generate.notebook_text(exercise), as_version=4).cells[1]
    assert built.cell_type == "code" and built.source == setup["source"] \
        and built.metadata.get("tags") == setup["tags"], \
        f"the build did not put {generate.SETUP_SOURCE}'s cell into {exercise.module}.ipynb"


def test_the_build_refuses_code_in_a_setup_marker_cell(tmp_path):
    source = tmp_path / "notebook.py"
    source.write_text(f'# %% tags=["setup"]\n{generate.SETUP_MARKER}\nimport os\n', encoding="utf-8")
    with pytest.raises(generate.GenerateError, match="must hold only"):
        generate.source_cells(source, tmp_path)
