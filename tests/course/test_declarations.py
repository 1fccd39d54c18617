"""Each exercise is declared once, in its folder: its ``exercise.toml`` must match its files."""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from course.shared.impl import import_implementation
from grading.core.declarations import (
    DeclarationError,
    Figure,
    FunctionHints,
    docstring_hints,
    load_exercises,
    parse_exercise,
    test_files,
)

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()


def test_exercise_ids_are_unique_and_numbered_in_order():
    assert [e.number for e in EXERCISES] == list(range(1, len(EXERCISES) + 1))


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_declaration_matches_its_files(exercise):
    assert test_files(exercise, ROOT), f"{exercise.folder} has no test_*.py"
    for name in exercise.functions:
        assert 2 <= len(exercise.hints_for(name)) <= 4, (
            f"{exercise.id}.{name}: give a docstring Hint: and one to three more levels in "
            "exercise.toml, from a nudge to nearly the answer")
    assert exercise.points > 0
    stub = import_implementation(exercise, "exercises")
    solution = import_implementation(exercise, "solutions")
    for name in exercise.functions:
        assert hasattr(stub, name) and hasattr(solution, name), f"{exercise.id}.{name} missing"
        assert inspect.signature(getattr(stub, name)) == inspect.signature(getattr(solution, name)), (
            f"{exercise.id}.{name}: the stub's signature differs from the solution's"
        )
        assert getattr(stub, name).__doc__, f"the stub {exercise.id}.{name} has no docstring"
    # The stubs are generated from the solutions: tests/course/test_generated.py checks they are fresh.


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_hint_level_one_is_the_docstrings_hint(exercise):
    """Level 1 is read from the solution's docstring, never written again in exercise.toml."""
    first = docstring_hints(ROOT / exercise.source("solutions"))
    for name in exercise.functions:
        assert name in first, f"{exercise.id}.{name}: its docstring has no Hint: paragraph"
        assert exercise.hints_for(name)[0] == first[name]
        assert first[name] not in (ROOT / exercise.folder / "exercise.toml").read_text(), (
            f"{exercise.id}.{name}: the docstring's hint is written again in exercise.toml")


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
    for path in sorted((ROOT / exercise.folder).glob("*.py")):
        if path.name in ("solution.py", "mistakes.py", "variants.py", "notebook.py"):
            continue
        source = path.read_text()
        for forbidden in ("import solution", "from .solution", "solution import",
                          "import exercises", "from exercises"):
            assert forbidden not in source, (
                f"{path.relative_to(ROOT)} must get the code under test via `ex`")


# --------------------------------------------------------------------------- checking a declaration

def _entry(**changes):
    entry = {"title": "T", "points": 10, "post": "P", "functions": ["f", "g"],
             "hints": {"f": ["method", "answer"]},
             "figures": [{"recipe": "fig06", "file": "a.png", "caption": "c"}]}
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


@pytest.mark.parametrize("changes, words", [
    ({"hints": {"h": ["x"]}}, "hints for unknown function 'h'"),
    ({"hints": {"f": ["ok", ""]}}, "hints.f must be a list"),
    ({"hints": {"f": ["a", "b", "c", "d"]}}, "f has 5 hint levels"),
    ({"figures": [{"file": "a.png", "caption": "c"}]}, "missing recipe"),
    ({"figures": [{"recipe": "fig06", "file": "a.png", "caption": "c", "x": 1}]}, "unknown x"),
    ({"figures": [{"recipe": "fig06", "file": "out/a.png", "caption": "c"}]}, "not a path"),
    ({"points": "ten"}, "points must be a int"),
    ({"title": None}, "missing key 'title'"),
    ({"colour": "red"}, "unknown key(s) colour"),
    ({"functions": ["f", "f"]}, "lists a name twice"),
    ({"expect": {"fig99": {"gpt2": "x"}}}, "expect.fig99 names no figure"),
    ({"expect": {"fig06": {"llama": "x"}}}, "expect.fig06 must map"),
    ({"expect": {"fig06": {"gpt2": " "}}}, "expect.fig06 must map"),
])
def test_a_broken_declaration_is_named_with_its_problem(changes, words):
    with pytest.raises(DeclarationError) as caught:
        parse_exercise("ex1_x", _entry(**changes), {"f": "nudge"})
    assert words in str(caught.value) and "course/ex1_x/exercise.toml" in str(caught.value)


def test_a_folder_not_named_like_an_exercise_is_refused():
    with pytest.raises(DeclarationError, match="must be named like ex1_hidden_states"):
        parse_exercise("hidden_states", _entry(), {})


def test_a_declaration_parses_into_typed_records():
    exercise = parse_exercise("ex3_x", _entry(), {"f": "nudge", "g": "look"})
    assert (exercise.id, exercise.number, exercise.folder) == ("ex3", 3, "course/ex3_x")
    assert exercise.source() == "exercises/ex3_x.py"
    assert exercise.source("solutions") == "course/ex3_x/solution.py"
    assert exercise.hints == (FunctionHints("f", ("nudge", "method", "answer")),
                              FunctionHints("g", ("look",)))
    assert exercise.figures == (Figure("fig06", "a.png", "c"),)


def test_duplicates_across_exercises_are_refused(tmp_path):
    for name in ("ex1_a", "ex2_b"):
        (tmp_path / "course" / name).mkdir(parents=True)
        (tmp_path / "course" / name / "exercise.toml").write_text(
            'title = "T"\npoints = 1\npost = "P"\nfunctions = ["f"]\n'
            'figures = [{ recipe = "fig06", file = "a.png", caption = "c" }]\n')
    with pytest.raises(DeclarationError, match="figure file a.png appears twice"):
        load_exercises(tmp_path)


def test_every_declared_figure_has_drawing_code_and_the_reverse():
    """Every recipe is drawn by its exercise's drawing.py, and every drawing function there is a
    figure of that exercise."""
    from grading.views.figures import drawings, planned_figures

    assert sorted(f.recipe for _, f in planned_figures()) == sorted(drawings())
    for exercise in load_exercises():
        try:
            module = importlib.import_module(f"course.{exercise.module}.drawing")
        except ModuleNotFoundError:
            assert not exercise.figures, f"{exercise.id} has figures but no drawing.py"
            continue
        defined = {name for name, value in vars(module).items()
                   if callable(value) and getattr(value, "__module__", "") == module.__name__}
        assert defined == {f.recipe for f in exercise.figures}, (
            f"{exercise.folder}/drawing.py draws {sorted(defined)}, exercise.toml lists "
            f"{sorted(f.recipe for f in exercise.figures)}")
