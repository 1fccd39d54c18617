"""Every exercise is complete: each public function it scores has all of its pieces.

An exercise is its manifest entry in ``kata/exercises.toml`` (id, title, module, tests, points,
functions, hints, figures) and these files, found from the entry:

* ``solutions/<module>.py`` and its generated stub ``exercises/<module>.py``;
* ``tests/test_<...>.py`` (the entry's ``tests``): tests that reach every public function, and
  at least one secret check per function (``@secret_check``, ``tests/secret.py``);
* ``tests/mistakes/<id>.py`` and ``tests/variants/<id>.py``: at least one catalogued mistake
  and one correct variant defining every function;
* hints for every function, in the manifest entry;
* drawing code for every figure (``kata/drawings/<id>.py``, a function named after the
  recipe);
* ``notebooks/src/<module>.py`` and the notebook built from it.

A missing piece fails here with the exercise and the function named.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kata.drawings import drawing
from kata.manifest import declared_checks, load_manifest
from tests.maintainer.planting import catalogue, defined_functions
from tests.maintainer.test_contract import ReachMap

pytestmark = pytest.mark.maintainer

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = load_manifest()


def covered(entries, exercise_id: str) -> set[str]:
    """The functions that the catalogue's entries for one exercise define between them."""
    return set().union(*[defined_functions(e.code) for e in entries if e.exercise == exercise_id])


def missing_pieces(exercise, root: Path, mistakes, variants) -> list[str]:
    """What ``exercise`` lacks, one sentence per piece, each naming the exercise (and function)."""
    where = exercise.id
    files = {"solution": exercise.source("solutions"), "stub": exercise.source("exercises"),
             "test file": exercise.tests, "notebook source": f"notebooks/src/{exercise.module}.py",
             "notebook": f"notebooks/{exercise.module}.ipynb"}
    problems = [f"{where}: no {what} {path}" for what, path in files.items()
                if not (root / path).is_file()]
    reach = ReachMap(root / exercise.tests) if (root / exercise.tests).is_file() else None
    checks = declared_checks(exercise, root)
    with_mistake, with_variant = covered(mistakes, exercise.id), covered(variants, exercise.id)
    for function in exercise.functions:
        named = f"{where} {function}"
        if reach is not None and not reach.tests_for(function):
            problems.append(f"{named}: no test in {exercise.tests} reaches ex.{function}")
        if not checks.get(function):
            problems.append(f"{named}: no secret check (@secret_check({function!r}) in "
                            f"{exercise.tests})")
        if function not in with_mistake:
            problems.append(f"{named}: no catalogued mistake (tests/mistakes/{exercise.id}.py)")
        if function not in with_variant:
            problems.append(f"{named}: no correct variant (tests/variants/{exercise.id}.py)")
        if not exercise.hints_for(function):
            problems.append(f"{named}: no hints ([exercise.hints] in kata/exercises.toml)")
    problems += [f"{where}: figure {figure.file} has no drawing code: a function "
                 f"{figure.recipe}(f, inputs) in kata/drawings/{exercise.id}.py"
                 for figure in exercise.figures if drawing(exercise.id, figure.recipe) is None]
    return problems


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.id for e in EXERCISES])
def test_every_exercise_has_every_piece(exercise):
    problems = missing_pieces(exercise, ROOT, catalogue("mistakes", "MISTAKES"),
                              catalogue("variants", "VARIANTS"))
    assert not problems, "\n".join(problems)


def test_a_new_exercise_is_told_what_it_lacks(tmp_path):
    """An eighth exercise with only its manifest entry, a solution and one test: every missing
    piece is named."""
    from dataclasses import replace

    from kata.manifest import Figure

    root = tmp_path / "kata"
    shutil.copytree(ROOT / "tests", root / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "maintainer"))
    (root / "solutions").mkdir()
    (root / "solutions" / "ex8_scratch.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "tests" / "test_ex8_scratch.py").write_text(
        "def test_double(ex):\n    assert ex.double(2) == 4\n")
    sixth = replace(EXERCISES[0], id="ex8", module="ex8_scratch",
                    tests="tests/test_ex8_scratch.py", functions=("double", "halve"), hints=(),
                    figures=(Figure("fig99", "fig99.png", "a figure"),))
    problems = "\n".join(missing_pieces(sixth, root, [], []))
    for piece in ("no stub exercises/ex8_scratch.py", "no notebook source",
                  "ex8 halve: no test in tests/test_ex8_scratch.py reaches ex.halve",
                  "ex8 double: no secret check", "ex8 double: no catalogued mistake",
                  "ex8 halve: no correct variant", "ex8 double: no hints",
                  "fig99(f, inputs) in kata/drawings/ex8.py"):
        assert piece in problems, f"{piece!r} not in:\n{problems}"
    assert "ex8 double: no test" not in problems
