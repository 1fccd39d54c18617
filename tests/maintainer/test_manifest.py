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
    for name in exercise.functions:
        assert 2 <= len(exercise.hints_for(name)) <= 3, (
            f"{exercise.id}.{name}: give two or three hints, from a nudge to nearly the answer")
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
        "README.md's exercise table is out of date: run `python grader.py readme-table`"
    )


# --------------------------------------------------------------------------- checking the manifest

def _entry(**changes):
    entry = {"id": "ex1", "title": "T", "module": "ex1_x", "tests": "tests/test_ex1_x.py",
             "points": 10, "post": "P", "functions": ["f", "g"],
             "hints": {"f": ["nudge", "answer"]},
             "figures": [{"recipe": "fig06", "file": "a.png", "caption": "c"}]}
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


@pytest.mark.parametrize("changes, words", [
    ({"hints": {"h": ["x"]}}, "hints for unknown function 'h'"),
    ({"hints": {"f": []}}, "hints.f must be a list"),
    ({"hints": {"f": ["ok", ""]}}, "hints.f must be a list"),
    ({"figures": [{"file": "a.png", "caption": "c"}]}, "missing recipe"),
    ({"figures": [{"recipe": "fig06", "file": "a.png", "caption": "c", "x": 1}]}, "unknown x"),
    ({"figures": [{"recipe": "fig06", "file": "out/a.png", "caption": "c"}]}, "not a path"),
    ({"points": "ten"}, "points must be a int"),
    ({"title": None}, "missing key 'title'"),
    ({"colour": "red"}, "unknown key(s) colour"),
    ({"functions": ["f", "f"]}, "lists a name twice"),
    ({"id": "one"}, "must look like 'ex1'"),
    ({"expect": {"fig99": {"gpt2": "x"}}}, "expect.fig99 names no figure"),
    ({"expect": {"fig06": {"llama": "x"}}}, "expect.fig06 must map"),
    ({"expect": {"fig06": {"gpt2": " "}}}, "expect.fig06 must map"),
])
def test_a_broken_manifest_entry_is_named_with_its_problem(changes, words):
    from kata.manifest import ManifestError, parse_manifest

    with pytest.raises(ManifestError) as caught:
        parse_manifest({"exercise": [_entry(**changes)]})
    assert words in str(caught.value) and "exercise" in str(caught.value)


def test_the_manifest_parses_into_typed_records():
    from kata.manifest import Figure, FunctionHints, parse_manifest

    (exercise,) = parse_manifest({"exercise": [_entry()]})
    assert exercise.hints == (FunctionHints("f", ("nudge", "answer")),)
    assert exercise.hints_for("f") == ("nudge", "answer") and exercise.hints_for("g") == ()
    assert exercise.figures == (Figure("fig06", "a.png", "c"),)


def test_duplicates_across_exercises_and_unknown_recipes_are_refused():
    from kata.manifest import ManifestError, check_recipes, parse_manifest

    twice = [_entry(), _entry(id="ex2", module="ex2_y", tests="tests/test_ex2_y.py")]
    with pytest.raises(ManifestError, match="figure file a.png appears twice"):
        parse_manifest({"exercise": twice})
    with pytest.raises(ManifestError, match="no \\[\\[exercise\\]\\]"):
        parse_manifest({})
    exercises = parse_manifest({"exercise": [_entry()]})
    with pytest.raises(ManifestError, match="recipe 'fig06'.*does not draw"):
        check_recipes(exercises, {"fig07"})


def test_every_figure_recipe_in_the_manifest_has_drawing_code_and_the_reverse():
    """Every recipe is drawn by its exercise's kata/drawings file, and every drawing function
    there is a figure of that exercise."""
    import importlib

    from kata.grading.figures import drawings, planned_figures

    assert sorted(f.recipe for _, f in planned_figures()) == sorted(drawings())
    for exercise in load_manifest():
        try:
            module = importlib.import_module(f"kata.drawings.{exercise.id}")
        except ModuleNotFoundError:
            assert not exercise.figures, f"{exercise.id} has figures but no kata/drawings file"
            continue
        defined = {name for name, value in vars(module).items()
                   if callable(value) and getattr(value, "__module__", "") == module.__name__}
        assert defined == {f.recipe for f in exercise.figures}, (
            f"kata/drawings/{exercise.id}.py draws {sorted(defined)}, the manifest lists "
            f"{sorted(f.recipe for f in exercise.figures)}")
