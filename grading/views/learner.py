"""The learner's loop: hints one level at a time per function, restoring a stub, and re-grading
when an exercise file changes."""

from __future__ import annotations

import ast
import json
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from grading.views.commands import grader_command
from grading.core.declarations import Exercise
from grading.core.records import Status

HINTS_FILE = ".kata-hints.json"  # in the kata's root; gitignored
BACKUP_DIR = "exercises/.backup"  # where `grader.py reset N` keeps the learner's file; gitignored
WATCH_POLL_SECONDS = 1.0


class UsageError(SystemExit):
    """Bad input on the command line: the CLI prints it as a one-line error."""


# --------------------------------------------------------------------------- hints


@dataclass
class HintState:
    """What ``.kata-hints.json`` remembers between commands.

    ``levels``: hints seen per exercise and function, ``{"ex1": {"tokenize": 2}}``.
    ``first_failing``: per exercise, the function of the first failing test at the last
    ``grader.py`` run, which ``grader.py hint N`` helps with.
    """

    levels: dict[str, dict[str, int]] = field(default_factory=dict)
    first_failing: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path) -> HintState:
        try:
            data = json.loads((Path(root) / HINTS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        levels = data.get("levels") if isinstance(data.get("levels"), dict) else {}
        failing = data.get("first_failing") if isinstance(data.get("first_failing"), dict) else {}
        return cls(
            {ex: {f: int(n) for f, n in per.items() if isinstance(n, int)}
             for ex, per in levels.items() if isinstance(per, dict)},
            {ex: f for ex, f in failing.items() if isinstance(f, str)})

    def save(self, root: Path) -> None:
        data = {"levels": self.levels, "first_failing": self.first_failing}
        (Path(root) / HINTS_FILE).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def hint_levels(root: Path) -> dict[str, dict[str, int]]:
    """How many hints the learner has seen per exercise and function: ``{"ex1": {"tokenize": 2}}``."""
    return HintState.load(root).levels


def find_exercise(exercises: list[Exercise], wanted: str) -> Exercise:
    """``"2"``, ``"ex2"`` or a module name -> the exercise; a clear error otherwise."""
    for exercise in exercises:
        if wanted in (exercise.id, str(exercise.number), exercise.module):
            return exercise
    choices = ", ".join(str(e.number) for e in exercises)
    raise UsageError(f"grader.py: no exercise {wanted!r}; choose one of {choices}")


def function_of(exercise: Exercise, test_name: str, stub: str | None = None) -> str | None:
    """The exercise function a test is about: the stub it reached, else the longest function
    name in the test's name (``test_tokenize_rejects_empty`` -> ``tokenize``)."""
    if stub in exercise.functions:
        return stub
    named = [f for f in exercise.functions if f in test_name]
    return max(named, key=len) if named else None


def remember_first_failures(root: Path, result) -> None:
    """After a grading, note each unfinished exercise's first failing function for ``hint N``."""
    state = HintState.load(root)
    for row in result.exercises:
        failure = row.first_failure()
        function = function_of(row.exercise, failure.name, failure.function) if failure else None
        if function:
            state.first_failing[row.exercise.id] = function
        else:
            state.first_failing.pop(row.exercise.id, None)
    state.save(root)


def still_stubs(path: Path, exercise: Exercise) -> list[str]:
    """The exercise's functions whose body in ``path`` is still only ``raise NotImplementedError``."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    stubs = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = [s for s in node.body if not (isinstance(s, ast.Expr)
                                                 and isinstance(s.value, ast.Constant))]
            raised = body[0].exc if len(body) == 1 and isinstance(body[0], ast.Raise) else None
            if getattr(getattr(raised, "func", raised), "id", None) == "NotImplementedError":
                stubs.add(node.name)
    return [f for f in exercise.functions if f in stubs]


def function_to_hint(root: Path, exercise: Exercise, impl: str = "exercises") -> str:
    """The function ``hint N`` helps with: the first failing one at the last grading, else the
    first one still a stub in the learner's file, else the first one."""
    remembered = HintState.load(root).first_failing.get(exercise.id)
    if remembered in exercise.functions:
        return remembered
    unwritten = still_stubs(Path(root) / exercise.source(impl), exercise)
    return unwritten[0] if unwritten else exercise.functions[0]


def reveal_next_hint(root: Path, exercise: Exercise, function: str | None = None,
                     impl: str = "exercises") -> str:
    """Show one more hint for ``function`` than last time (all of them once all are shown)."""
    if function is None:
        function = function_to_hint(root, exercise, impl)
    elif function not in exercise.functions:
        raise UsageError(f"grader.py: {exercise.id} has no function {function!r}; choose one of "
                         f"{', '.join(exercise.functions)}")
    hints = exercise.hints_for(function)
    lines = [f"{exercise.id} {exercise.title} ({exercise.source()})", f"post: {exercise.post}", ""]
    if not hints:
        return "\n".join(lines + [f"No hints for {function}(): its docstring says what to do."])
    state = HintState.load(root)
    seen = state.levels.setdefault(exercise.id, {})
    level = min(seen.get(function, 0) + 1, len(hints))
    seen[function] = level
    state.save(root)
    for number, hint in enumerate(hints[:level], start=1):
        lines.append(f"{function}() hint {number} of {len(hints)}: {hint}")
    if level < len(hints):
        lines.append(f"\nStill stuck? Run `{grader_command(f'hint {exercise.number} {function}')}` "
                     f"again for hint {level + 1}.")
    else:
        lines.append("\nThat was the last hint: it is nearly the answer. The solution is in "
                     f"{exercise.source('solutions')} once you have tried.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- reset


def is_untouched(root: Path, exercise: Exercise) -> bool:
    """Whether the learner's file is exactly the stub its solution gives (False if unknown)."""
    from grading.core import stubs

    root = Path(root)
    try:
        submitted = (root / exercise.source()).read_text(encoding="utf-8")
        return submitted == stubs.stub_text(exercise, root)
    except (OSError, ValueError, SyntaxError):
        return False


def changed_last(root: Path, result, impl: str = "exercises") -> str | None:
    """The exercise the learner is working on: of those begun and not done, the one whose file
    was modified last (None when there is none)."""
    root = Path(root)
    latest, when = None, None
    for row in result.exercises:
        if row.done or row.status in (Status.NOT_STARTED, Status.MISSING):
            continue
        try:
            modified = (root / row.exercise.source(impl)).stat().st_mtime_ns
        except OSError:
            continue
        if when is None or modified > when:
            latest, when = row.exercise.id, modified
    return latest


def restore_stub(root: Path, exercise: Exercise) -> tuple[Path, Path | None]:
    """Write the untouched stub of ``exercise`` (generated from its solution) over the learner's
    file, keeping that file in ``exercises/.backup/``; resets the exercise's hint levels.

    Returns the stub's path and the backup's (None when there was nothing to keep).
    """
    from grading.core import stubs

    root = Path(root)
    if not (root / exercise.source("solutions")).is_file():
        raise UsageError(f"grader.py: cannot restore {exercise.source()}: its source "
                         f"{exercise.source('solutions')} is missing")
    stub = stubs.stub_text(exercise, root)
    target = root / exercise.source()
    backup = None
    if target.is_file() and target.read_text(encoding="utf-8") != stub:
        folder = root / BACKUP_DIR
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        backup = folder / f"{exercise.module}-{stamp}.py"
        n = 1
        while backup.exists():
            n += 1
            backup = folder / f"{exercise.module}-{stamp}-{n}.py"
        shutil.copy2(target, backup)
    target.write_text(stub, encoding="utf-8")
    state = HintState.load(root)
    state.levels.pop(exercise.id, None)
    state.first_failing.pop(exercise.id, None)
    state.save(root)
    return target, backup


# --------------------------------------------------------------------------- watching


def snapshot(root: Path, exercises: list[Exercise], impl: str) -> dict[str, float]:
    """Modification times of the exercise files by exercise id (-1 for a missing file)."""
    paths = {exercise.id: Path(root) / exercise.source(impl) for exercise in exercises}
    return {id_: path.stat().st_mtime if path.exists() else -1.0 for id_, path in paths.items()}


def watch(root: Path, exercises: list[Exercise], impl: str,
          grade: Callable[[list[Exercise]], int], first: list[Exercise] | None = None) -> int:
    """``grade(first)`` now (default: every exercise), then ``grade(changed)`` each time some
    exercise files change, on a cleared terminal; Ctrl-C stops. Returns the last status.

    Polls modification times once a second: no extra dependency, and every platform.
    """
    seen = snapshot(root, exercises, impl)
    status = grade(first or exercises)
    try:
        while True:
            time.sleep(WATCH_POLL_SECONDS)
            now = snapshot(root, exercises, impl)
            changed = [exercise for exercise in exercises if now[exercise.id] != seen[exercise.id]]
            seen = now
            if changed:
                print("\033[2J\033[H", end="")  # clear the terminal
                status = grade(changed)
    except KeyboardInterrupt:
        print()
    return status
