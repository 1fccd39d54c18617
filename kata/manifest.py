"""Reads and checks ``exercises.toml``, the one list of the kata's exercises.

Each entry names an exercise's stub and solution (``module``), tests, points, hints (per
function, from a nudge to nearly the answer) and figures (by recipe). :func:`load_manifest`
returns typed, frozen records and raises :class:`ManifestError`, naming the entry and the
problem, for anything it does not expect.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

MANIFEST_PATH = Path(__file__).with_name("exercises.toml")
IMPLEMENTATIONS = ("exercises", "solutions")
MAX_HINT_LEVELS = 4


class ManifestError(ValueError):
    """``kata/exercises.toml`` says something the kata cannot use; the message says what."""


@dataclass(frozen=True)
class Figure:
    recipe: str  # the drawing function's name in kata/drawings/<exercise id>.py
    file: str  # written into the folder given to `grader.py figures DIR`
    caption: str
    # "what you should see", per model: {"gpt2": ..., "smollm2": ..., "tiny-gpt2": ...}
    expect: tuple[tuple[str, str], ...] = ()

    def expectation(self, model_name: str) -> str:
        """What the figure should show when drawn with ``model_name`` ("" when not stated)."""
        return dict(self.expect).get(model_name, "")


@dataclass(frozen=True)
class FunctionHints:
    function: str
    levels: tuple[str, ...]  # from a nudge to nearly the answer


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    module: str
    tests: str
    points: int
    post: str
    functions: tuple[str, ...]
    hints: tuple[FunctionHints, ...] = ()
    figures: tuple[Figure, ...] = ()
    bonus: bool = False
    # whether the maintainers' variants check runs its trained-model tests for every variant
    # (false where each variant would redo a long SmolLM2 computation the tiny-model tests pin)
    variants_on_trained_models: bool = True

    @property
    def number(self) -> int:
        return int(self.id.removeprefix("ex"))

    def source(self, impl: str = "exercises") -> str:
        """The file a learner edits (or its solution): ``exercises/ex1_hidden_states.py``."""
        return f"{impl}/{self.module}.py"

    def hints_for(self, function: str) -> tuple[str, ...]:
        """The hint levels for one of the exercise's functions (empty if it has none)."""
        return next((h.levels for h in self.hints if h.function == function), ())


_FIELDS = {"id": str, "title": str, "module": str, "tests": str, "points": int, "post": str,
           "functions": list, "hints": dict, "figures": list, "bonus": bool, "expect": dict,
           "variants_on_trained_models": bool}
_REQUIRED = ("id", "title", "module", "tests", "points", "post", "functions")
_FIGURE_FIELDS = ("recipe", "file", "caption")


def _problem(where: str, message: str) -> ManifestError:
    return ManifestError(f"{where}: {message}")


def _exercise(entry, where: str) -> Exercise:
    if not isinstance(entry, dict):
        raise _problem(where, "each [[exercise]] must be a table")
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise _problem(where, f"unknown key(s) {', '.join(unknown)} (known: {', '.join(_FIELDS)})")
    for key in _REQUIRED:
        if key not in entry:
            raise _problem(where, f"missing key {key!r}")
    for key, value in entry.items():
        kind = _FIELDS[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _problem(where, f"{key} must be a {kind.__name__}, got {value!r}")
    if not re.fullmatch(r"ex[1-9][0-9]*", entry["id"]):
        raise _problem(where, f"id {entry['id']!r} must look like 'ex1'")
    if not entry["module"].isidentifier():
        raise _problem(where, f"module {entry['module']!r} must be a Python module name")
    if entry["points"] <= 0:
        raise _problem(where, "points must be positive")
    functions = entry["functions"]
    if not functions or not all(isinstance(f, str) and f.isidentifier() for f in functions):
        raise _problem(where, "functions must list the names of the functions learners write")
    if len(set(functions)) != len(functions):
        raise _problem(where, "functions lists a name twice")
    hints = []
    for function, levels in entry.get("hints", {}).items():
        if function not in functions:
            raise _problem(where, f"hints for unknown function {function!r} (the exercise's "
                                  f"functions: {', '.join(functions)})")
        if (not isinstance(levels, list) or not 1 <= len(levels) <= MAX_HINT_LEVELS
                or not all(isinstance(h, str) and h.strip() for h in levels)):
            raise _problem(where, f"hints.{function} must be a list of 1 to {MAX_HINT_LEVELS} "
                                  "non-empty strings, from a nudge to nearly the answer")
        hints.append(FunctionHints(function, tuple(levels)))
    figures = []
    for k, figure in enumerate(entry.get("figures", [])):
        if not isinstance(figure, dict):
            raise _problem(where, f"figures[{k}] must be a table {{recipe, file, caption}}")
        missing = [f for f in _FIGURE_FIELDS if not isinstance(figure.get(f), str) or not figure[f]]
        extra = sorted(set(figure) - set(_FIGURE_FIELDS))
        if missing or extra:
            raise _problem(where, f"figures[{k}] needs {', '.join(_FIGURE_FIELDS)} (strings)"
                                  + (f"; missing {', '.join(missing)}" if missing else "")
                                  + (f"; unknown {', '.join(extra)}" if extra else ""))
        if Path(figure["file"]).name != figure["file"]:
            raise _problem(where, f"figures[{k}].file {figure['file']!r} must be a file name, "
                                  "not a path")
        figures.append(Figure(figure["recipe"], figure["file"], figure["caption"]))
    figures = _with_expectations(where, figures, entry.pop("expect", {}))
    return Exercise(**{**entry, "functions": tuple(functions), "hints": tuple(hints),
                       "figures": tuple(figures)})


EXPECTATION_MODELS = ("gpt2", "smollm2", "tiny-gpt2")


def _with_expectations(where: str, figures: list[Figure], expect) -> list[Figure]:
    """Attach ``[exercise.expect.<recipe>]`` tables (model -> what you should see) to figures."""
    if not isinstance(expect, dict):
        raise _problem(where, "expect must be a table of [exercise.expect.<recipe>] tables")
    recipes = {f.recipe for f in figures}
    for recipe, per_model in expect.items():
        if recipe not in recipes:
            raise _problem(where, f"expect.{recipe} names no figure of this exercise")
        if (not isinstance(per_model, dict) or not per_model
                or not set(per_model) <= set(EXPECTATION_MODELS)
                or not all(isinstance(t, str) and t.strip() for t in per_model.values())):
            raise _problem(where, f"expect.{recipe} must map some of {', '.join(EXPECTATION_MODELS)} "
                                  "to non-empty text")
    return [replace(f, expect=tuple(sorted(expect.get(f.recipe, {}).items()))) for f in figures]


def parse_manifest(data: dict, name: str = "exercises.toml") -> list[Exercise]:
    """Typed, checked exercises from the manifest's parsed TOML."""
    entries = data.get("exercise") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ManifestError(f"{name}: no [[exercise]] entries")
    exercises = [_exercise(entry, f"{name}, exercise {entry.get('id', k + 1)!s}"
                           if isinstance(entry, dict) else f"{name}, exercise {k + 1}")
                 for k, entry in enumerate(entries)]
    for key in ("id", "module", "tests"):
        values = [getattr(e, key) for e in exercises]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ManifestError(f"{name}: {key} {', '.join(twice)} appears in several exercises")
    files = [f.file for e in exercises for f in e.figures]
    recipes = [f.recipe for e in exercises for f in e.figures]
    for label, values in (("figure file", files), ("figure recipe", recipes)):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ManifestError(f"{name}: {label} {', '.join(twice)} appears twice")
    return exercises


def load_manifest(path: Path = MANIFEST_PATH) -> list[Exercise]:
    """The exercises ``path`` lists, in order. Parsed once per version of the file: the
    pytest plugin and the grader's recorder ask for it for every test (a parse took 20 ms)."""
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except tomllib.TOMLDecodeError as error:
            raise ManifestError(f"{Path(path).name}: not valid TOML: {error}") from None
        if len(_PARSED) >= 8:  # older versions, other copies of the kata: not asked for again
            _PARSED.clear()
        _PARSED[key] = tuple(parse_manifest(data, Path(path).name))
    return list(_PARSED[key])


#: (real path, modification time, size) -> the parsed exercises (frozen records)
_PARSED: dict[tuple, tuple[Exercise, ...]] = {}


def check_recipes(exercises: Iterable[Exercise], known: Iterable[str]) -> None:
    """Raise :class:`ManifestError` for a figure whose recipe has no drawing code."""
    known = set(known)
    for exercise in exercises:
        for figure in exercise.figures:
            if figure.recipe not in known:
                raise ManifestError(
                    f"exercises.toml, exercise {exercise.id}: figure {figure.file} names recipe "
                    f"{figure.recipe!r}, which kata/drawings/{exercise.id}.py does not draw "
                    f"(known: {', '.join(sorted(known))})")


def declared_checks(exercise: Exercise, root: Path) -> dict[str, list[str]]:
    """The secret checks in the exercise's test file, read without importing it: for each
    public function, the tests decorated ``@secret_check(...)`` with its name."""
    import ast

    checks: dict[str, list[str]] = {f: [] for f in exercise.functions}
    try:
        tree = ast.parse((Path(root) / exercise.tests).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return checks
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name)
                    and decorator.func.id == "secret_check"):
                for argument in decorator.args:
                    if isinstance(argument, ast.Constant) and argument.value in checks:
                        checks[argument.value].append(node.name)
    return checks


def unchecked_functions(exercise: Exercise, root: Path) -> list[str]:
    """The exercise's public functions that no secret check names."""
    return [f for f, tests in declared_checks(exercise, root).items() if not tests]


def exercise_for_test_file(path: str | Path, root: Path) -> Exercise | None:
    """The exercise whose tests live in ``path`` (None for tests that belong to no exercise)."""
    try:
        relative = Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # not under the kata's root
        return None
    for exercise in load_manifest():
        if exercise.tests == relative:
            return exercise
    return None


# --------------------------------------------------------------------------- the README's table

#: The README's table sits between these two lines; ``python grader.py readme-table`` rewrites
#: it (and the first line, which may still name the command of before).
README_TABLE_START = ("<!-- exercises-table: generated from kata/exercises.toml by "
                     "`python grader.py readme-table` -->")
README_TABLE_END = "<!-- end exercises-table -->"
_README_TABLE_MARK = "<!-- exercises-table"


def readme_table(exercises: list[Exercise] | None = None) -> str:
    """The README's exercise table, made from the manifest."""
    rows = ["| # | exercise | you write | post | points |", "|---|---|---|---|---|"]
    for e in exercises or load_manifest():
        points = f"{e.points} (bonus)" if e.bonus else str(e.points)
        rows.append(f"| {e.number} | {e.title} (`{e.source()}`) | {len(e.functions)} function{'s' if len(e.functions) > 1 else ''} "
                    f"| {e.post} | {points} |")
    return "\n".join(rows)


def update_readme(readme: Path, check_only: bool = False) -> bool:
    """Rewrite ``readme``'s exercise table from the manifest (with ``check_only``, write
    nothing); True when it was (or would be) changed."""
    text = readme.read_text(encoding="utf-8")
    start, end = text.index(_README_TABLE_MARK), text.index(README_TABLE_END)
    wanted = f"{text[:start]}{README_TABLE_START}\n{readme_table()}\n{text[end:]}"
    if wanted == text:
        return False
    if not check_only:
        readme.write_text(wanted, encoding="utf-8")
    return True


if __name__ == "__main__":  # the old form of `python grader.py readme-table`
    import sys

    from kata.grading.cli import run_old_form

    sys.exit(run_old_form("kata.manifest"))
