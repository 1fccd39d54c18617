"""Every exercise is complete: each public function it scores has all of its pieces.

An exercise is its folder, ``course/<module>/``, found from its name:

* ``exercise.toml``: title, points, functions, hint levels after the first, figures;
* ``solution.py`` (each function's docstring holds its first hint) and its generated stub
  ``exercises/<module>.py``;
* test code (``test_*.py`` and the helpers beside them) that reaches every public function, and
  at least one secret check per function (``@secret_check``, ``course/shared/secret.py``);
* ``mistakes.py`` and ``variants.py``: at least one catalogued mistake and one correct variant
  defining every function;
* hints for every function;
* ``drawing.py`` for every figure (a function named after the recipe);
* ``notebook.py`` and the notebook generated from it.

A missing piece fails here with the exercise and the function named.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from course.shared.catalogue import load

from course.shared.inputs import drawing
from grading.core.declarations import declared_checks, load_exercises
from tests.course.planting import defined_functions
from tests.course.test_contract import ReachMap, exercise_test_code


ROOT = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()


def covered(entries, exercise_id: str) -> set[str]:
    """The functions that the catalogue's entries for one exercise define between them."""
    return set().union(*[defined_functions(e.code) for e in entries if e.exercise == exercise_id])


def missing_pieces(exercise, root: Path, mistakes, variants) -> list[str]:
    """What ``exercise`` lacks, one sentence per piece, each naming the exercise (and function)."""
    where = exercise.id
    files = {"solution": exercise.source("solutions"), "stub": exercise.source("exercises"),
             "notebook source": f"{exercise.folder}/notebook.py",
             "notebook": f"notebooks/{exercise.module}.ipynb"}
    problems = [f"{where}: no {what} {path}" for what, path in files.items()
                if not (root / path).is_file()]
    code = exercise_test_code(root / exercise.folder)
    if not any(p.name.startswith("test_") for p in code):
        problems.append(f"{where}: no test file {exercise.folder}/test_*.py")
    reach = ReachMap(code) if code else None
    checks = declared_checks(exercise, root)
    with_mistake, with_variant = covered(mistakes, exercise.id), covered(variants, exercise.id)
    for function in exercise.functions:
        named = f"{where} {function}"
        if reach is not None and not reach.tests_for(function):
            problems.append(f"{named}: no test in {exercise.folder} reaches ex.{function}")
        if not checks.get(function):
            problems.append(f"{named}: no secret check (@secret_check({function!r}) in "
                            f"{exercise.folder})")
        if function not in with_mistake:
            problems.append(f"{named}: no catalogued mistake ({exercise.folder}/mistakes.py)")
        if function not in with_variant:
            problems.append(f"{named}: no correct variant ({exercise.folder}/variants.py)")
        if not exercise.hints_for(function):
            problems.append(f"{named}: no hints (a Hint: in its docstring, more levels in "
                            f"{exercise.folder}/exercise.toml)")
    problems += [f"{where}: figure {figure.file} has no drawing code: a function "
                 f"{figure.recipe}(f, inputs) in {exercise.folder}/drawing.py"
                 for figure in exercise.figures if drawing(exercise, figure.recipe) is None]
    return problems


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.id for e in EXERCISES])
def test_every_exercise_has_every_piece(exercise):
    problems = missing_pieces(exercise, ROOT, load("mistakes"),
                              load("variants"))
    assert not problems, "\n".join(problems)


def test_a_new_exercise_is_told_what_it_lacks(tmp_path):
    """A ninth exercise with only its folder's declaration, a solution and one test: every
    missing piece is named."""
    from dataclasses import replace

    from grading.core.declarations import Figure

    root = tmp_path / "kata"
    folder = root / "course" / "ex9_scratch"
    folder.mkdir(parents=True)
    (folder / "solution.py").write_text("def double(x):\n    return 2 * x\n")
    (folder / "test_public.py").write_text("def test_double(ex):\n    assert ex.double(2) == 4\n")
    ninth = replace(EXERCISES[0], id="ex9", module="ex9_scratch", functions=("double", "halve"),
                    hints=(), figures=(Figure("fig99", "fig99.png", "a figure"),))
    problems = "\n".join(missing_pieces(ninth, root, [], []))
    for piece in ("no stub exercises/ex9_scratch.py", "no notebook source",
                  "ex9 halve: no test in course/ex9_scratch reaches ex.halve",
                  "ex9 double: no secret check", "ex9 double: no catalogued mistake",
                  "ex9 halve: no correct variant", "ex9 double: no hints",
                  "fig99(f, inputs) in course/ex9_scratch/drawing.py"):
        assert piece in problems, f"{piece!r} not in:\n{problems}"
    assert "ex9 double: no test" not in problems
