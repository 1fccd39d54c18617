"""The exercises, as each one's folder declares it: ``course/exN_<name>/exercise.toml``.

An exercise is one folder of ``course/``; its name gives the exercise's id and number
(``ex5_logit_lens``: id ``ex5``, number 5) and the name of the learner's file
(``exercises/ex5_logit_lens.py``, generated from the folder's ``solution.py``). Its
``exercise.toml`` declares the rest, once: title, points, the post's demo it follows, the
functions learners write (in order), hints, figures and what each figure should show.

Hints go from a nudge to nearly the answer. Level 1 of each function is the ``Hint:`` paragraph of
its docstring in ``solution.py`` (where the learner reads it first); ``exercise.toml`` holds the
levels after it. :func:`load_exercises` returns typed, frozen records and raises
:class:`DeclarationError`, naming the folder and the problem, for anything it does not expect.
"""

from __future__ import annotations

import ast
import os
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COURSE = "course"
#: The two implementations an exercise's tests can check: the learner's files, or the answers.
IMPLEMENTATIONS = ("exercises", "solutions")
MAX_HINT_LEVELS = 4
EXPECTATION_MODELS = ("gpt2", "smollm2", "tiny-gpt2")
_FOLDER = re.compile(r"ex([1-9][0-9]*)_[a-z0-9_]+")


class DeclarationError(ValueError):
    """An ``exercise.toml`` says something the kata cannot use; the message says what."""


@dataclass(frozen=True)
class Figure:
    recipe: str  # the drawing function's name in the exercise's drawing.py
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
    id: str  # "ex5"
    module: str  # "ex5_logit_lens": the folder's name, and the learner's file's
    title: str
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

    @property
    def folder(self) -> str:
        """Everything about the exercise: ``course/ex5_logit_lens``."""
        return f"{COURSE}/{self.module}"

    @property
    def tests(self) -> str:
        """What a learner runs for this exercise: ``pytest course/ex5_logit_lens``."""
        return self.folder

    def source(self, impl: str = "exercises") -> str:
        """The file a learner edits (``exercises/ex5_logit_lens.py``), or its solution."""
        answer = impl == "solutions"
        return f"{self.folder}/solution.py" if answer else f"exercises/{self.module}.py"

    def import_name(self, impl: str = "exercises") -> str:
        """The module to import for ``impl``: ``exercises.ex5_logit_lens`` or
        ``course.ex5_logit_lens.solution``."""
        return self.source(impl).removesuffix(".py").replace("/", ".")

    def hints_for(self, function: str) -> tuple[str, ...]:
        """The hint levels for one of the exercise's functions (empty if it has none)."""
        return next((h.levels for h in self.hints if h.function == function), ())


_FIELDS = {"title": str, "points": int, "post": str, "functions": list, "hints": dict,
           "figures": list, "bonus": bool, "expect": dict, "variants_on_trained_models": bool}
_REQUIRED = ("title", "points", "post", "functions")
_FIGURE_FIELDS = ("recipe", "file", "caption")


def _problem(where: str, message: str) -> DeclarationError:
    return DeclarationError(f"{where}: {message}")


def docstring_hints(solution: Path) -> dict[str, str]:
    """Each function's first hint: the ``Hint:`` paragraph of its docstring in ``solution``,
    on one line and without the docstring's code marks (a function without one is left out)."""
    try:
        tree = ast.parse(solution.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    hints = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for paragraph in (ast.get_docstring(node) or "").split("\n\n"):
                if paragraph.startswith("Hint:"):
                    text = paragraph.removeprefix("Hint:").replace("``", "")
                    hints[node.name] = " ".join(text.split())
    return hints


def _hints(entry: dict, functions: list, first: dict[str, str], where: str) -> tuple:
    later = entry.get("hints", {})
    for function in later:
        if function not in functions:
            raise _problem(where, f"hints for unknown function {function!r} (the exercise's "
                                  f"functions: {', '.join(functions)})")
    hints = []
    for function in functions:
        levels = later.get(function, [])
        if not isinstance(levels, list) or not all(isinstance(h, str) and h.strip()
                                                   for h in levels):
            raise _problem(where, f"hints.{function} must be a list of non-empty strings")
        levels = ([first[function]] if function in first else []) + levels
        if len(levels) > MAX_HINT_LEVELS:
            raise _problem(where, f"{function} has {len(levels)} hint levels, at most "
                                  f"{MAX_HINT_LEVELS} (the docstring's Hint: is the first)")
        if levels:
            hints.append(FunctionHints(function, tuple(levels)))
    return tuple(hints)


def _figures(entry: dict, where: str) -> list[Figure]:
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
    expect = entry.get("expect", {})
    if not isinstance(expect, dict):
        raise _problem(where, "expect must be a table of [expect.<recipe>] tables")
    recipes = {f.recipe for f in figures}
    for recipe, per_model in expect.items():
        if recipe not in recipes:
            raise _problem(where, f"expect.{recipe} names no figure of this exercise")
        if (not isinstance(per_model, dict) or not per_model
                or not set(per_model) <= set(EXPECTATION_MODELS)
                or not all(isinstance(t, str) and t.strip() for t in per_model.values())):
            raise _problem(where, f"expect.{recipe} must map some of "
                                  f"{', '.join(EXPECTATION_MODELS)} to non-empty text")
    return [replace(f, expect=tuple(sorted(expect.get(f.recipe, {}).items()))) for f in figures]


def parse_exercise(module: str, entry: dict, first_hints: dict[str, str]) -> Exercise:
    """The typed exercise of folder ``module`` from its parsed ``exercise.toml``."""
    where = f"{COURSE}/{module}/exercise.toml"
    match = _FOLDER.fullmatch(module)
    if match is None:
        raise _problem(where, f"the folder {module!r} must be named like ex1_hidden_states")
    if not isinstance(entry, dict):
        raise _problem(where, "not a table")
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
    if entry["points"] <= 0:
        raise _problem(where, "points must be positive")
    functions = entry["functions"]
    if not functions or not all(isinstance(f, str) and f.isidentifier() for f in functions):
        raise _problem(where, "functions must list the names of the functions learners write")
    if len(set(functions)) != len(functions):
        raise _problem(where, "functions lists a name twice")
    return Exercise(id=f"ex{match.group(1)}", module=module, title=entry["title"],
                    points=entry["points"], post=entry["post"], functions=tuple(functions),
                    hints=_hints(entry, functions, first_hints, where),
                    figures=tuple(_figures(entry, where)), bonus=entry.get("bonus", False),
                    variants_on_trained_models=entry.get("variants_on_trained_models", True))


def _folders(root: Path) -> list[Path]:
    """The exercise folders of ``root/course``, in the order of their numbers."""
    found = [p for p in (root / COURSE).glob("ex*") if (p / "exercise.toml").is_file()]
    return sorted(found, key=lambda p: int(_FOLDER.fullmatch(p.name).group(1))
                  if _FOLDER.fullmatch(p.name) else 0)


def load_exercises(root: Path = ROOT) -> list[Exercise]:
    """Every exercise of ``root/course``, in order. Parsed once per version of the files (the
    pytest plugin and the grader's recorder ask for it for every test)."""
    folders = _folders(root)
    key = tuple((str(p), *_stamp(p / "exercise.toml"), *_stamp(p / "solution.py"))
                for p in folders)
    if key not in _PARSED:
        exercises = []
        for folder in folders:
            try:
                entry = tomllib.loads((folder / "exercise.toml").read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as error:
                raise DeclarationError(f"{COURSE}/{folder.name}/exercise.toml: not valid TOML: "
                                       f"{error}") from None
            exercises.append(parse_exercise(folder.name, entry,
                                            docstring_hints(folder / "solution.py")))
        if not exercises:
            raise DeclarationError(f"no exercise folder in {root / COURSE}")
        _check_unique(exercises)
        if len(_PARSED) >= 8:  # older versions, other copies of the kata: not asked for again
            _PARSED.clear()
        _PARSED[key] = tuple(exercises)
    return list(_PARSED[key])


def _stamp(path: Path) -> tuple:
    try:
        stat = os.stat(path)
    except OSError:
        return (0, 0)
    return (stat.st_mtime_ns, stat.st_size)


#: the files' stamps -> the parsed exercises (frozen records)
_PARSED: dict[tuple, tuple[Exercise, ...]] = {}


def _check_unique(exercises: list[Exercise]) -> None:
    for label, values in (("id", [e.id for e in exercises]),
                          ("figure file", [f.file for e in exercises for f in e.figures]),
                          ("figure recipe", [f.recipe for e in exercises for f in e.figures])):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise DeclarationError(f"{COURSE}/: {label} {', '.join(twice)} appears twice")


def exercise_for_test_file(path: str | Path, root: Path = ROOT) -> Exercise | None:
    """The exercise whose folder holds the test file ``path`` (None for other tests)."""
    try:
        relative = Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:  # not under the kata's root
        return None
    parts = relative.parts
    if len(parts) < 3 or parts[0] != COURSE:
        return None
    return next((e for e in load_exercises(root) if e.module == parts[1]), None)


def test_files(exercise: Exercise, root: Path = ROOT) -> list[Path]:
    """The exercise's test files: ``test_*.py`` in its folder."""
    return sorted((Path(root) / exercise.folder).glob("test_*.py"))


test_files.__test__ = False  # a helper, not a test


#: The draws of ``course.shared.secret.SecretInputs`` from a space too large to tabulate (a model
#: of random sizes and weights, a text of random words, random tensors and token ids): every
#: secret check makes at least one, so no table made beforehand holds its answers.
LARGE_DRAWS = ("text", "words", "token_ids", "integers", "tensor", "hidden_states", "gpt2",
               "prompt_pair", "number")


def _secret_checks(exercise: Exercise, root: Path):
    """``(check, the function it names, every def of the exercise's test code by name)``."""
    definitions: dict[str, list] = {}
    checks = []
    for path in sorted((Path(root) / exercise.folder).glob("*.py")):
        if path.name in ("solution.py", "mistakes.py", "variants.py", "notebook.py"):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                definitions.setdefault(node.name, []).append(node)
                for decorator in node.decorator_list:
                    if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name)
                            and decorator.func.id == "secret_check" and path.name.startswith("test_")):
                        named = [a.value for a in decorator.args if isinstance(a, ast.Constant)]
                        checks.append((node, named))
    return checks, definitions


def declared_checks(exercise: Exercise, root: Path = ROOT) -> dict[str, list[str]]:
    """The secret checks in the exercise's test files, read without importing them: for each
    public function, the tests decorated ``@secret_check(...)`` with its name."""
    found: dict[str, list[str]] = {f: [] for f in exercise.functions}
    checks, _ = _secret_checks(exercise, root)
    for node, named in checks:
        for function in named:
            if function in found:
                found[function].append(node.name)
    return found


def _draws_large(node, definitions: dict[str, list]) -> bool:
    """Whether ``node``, or a function of the test code it calls by name, calls
    ``secret.<one of LARGE_DRAWS>(...)``."""
    seen, queue = set(), [node]
    while queue:
        current = queue.pop()
        for n in ast.walk(current):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and isinstance(n.func.value, ast.Name) and n.func.value.id == "secret" \
                    and n.func.attr in LARGE_DRAWS:
                return True
            if isinstance(n, ast.Name) and n.id in definitions and n.id not in seen:
                seen.add(n.id)
                queue += definitions[n.id]
    return False


def weak_checks(exercise: Exercise, root: Path = ROOT) -> list[str]:
    """The exercise's secret checks that draw from no space too large to tabulate
    (:data:`LARGE_DRAWS`), or that name more than one function: a table made beforehand could
    answer the first, and one wrong function would hide a right one in the second."""
    checks, definitions = _secret_checks(exercise, root)
    weak = []
    for node, named in checks:
        if len(named) != 1:
            weak.append(f"{node.name} (names {len(named)} functions; a check confirms one)")
        elif not _draws_large(node, definitions):
            weak.append(f"{node.name} (draws only from small pools)")
    return weak


def unchecked_functions(exercise: Exercise, root: Path = ROOT) -> list[str]:
    """The exercise's public functions that no secret check names."""
    return [f for f, tests in declared_checks(exercise, root).items() if not tests]


# --------------------------------------------------------------------------- what is handed out

#: The parts of the kata a copy for learners or for trusted grading takes: the learner kit, the
#: course, the grader and the files that run them. Never ``tests/`` (the maintainers' checks).
KATA_PARTS = ("kata", "course", "grading", "exercises", "conftest.py", "pyproject.toml",
              "grader.py", "run.sh", ".gitignore")
#: Files of an exercise's folder that never leave the instructor's kata: the answer, the correct
#: variants (answers written otherwise) and the planted mistakes (near answers).
ANSWER_FILES = ("solution.py", "variants.py", "mistakes.py")
_NEVER_COPIED = {"__pycache__", ".pytest_cache", ".ipynb_checkpoints", ".backup"}


def handed_out_files(root: Path = ROOT, parts: tuple[str, ...] = KATA_PARTS) -> list[str]:
    """The files (relative POSIX paths) of ``parts`` that may leave the instructor's kata: no
    answer file of any exercise (:data:`ANSWER_FILES`), no cache, no learner state."""
    root = Path(root)
    found = []
    for part in parts:
        source = root / part
        paths = sorted(source.rglob("*")) if source.is_dir() else [source]
        for path in paths:
            if not path.is_file():
                continue
            relative = path.relative_to(root)
            answer = (relative.parts[0] == COURSE and len(relative.parts) == 3
                      and relative.name in ANSWER_FILES)
            if answer or _NEVER_COPIED & set(relative.parts) or path.suffix == ".pyc" \
                    or path.name.startswith(".kata-hints"):
                continue
            found.append(relative.as_posix())
    return found
