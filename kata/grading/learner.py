"""The learner's loop: hints one level at a time, and re-grading when an exercise file changes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from kata.manifest import Exercise

HINTS_FILE = ".kata-hints.json"  # in the kata's root; gitignored
WATCH_POLL_SECONDS = 1.0


# --------------------------------------------------------------------------- hints


def hint_levels(root: Path) -> dict[str, int]:
    """How many hints the learner has seen per exercise: ``{"ex1": 2}``."""
    try:
        levels = json.loads((Path(root) / HINTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: int(v) for k, v in levels.items()} if isinstance(levels, dict) else {}


def find_exercise(exercises: list[Exercise], wanted: str) -> Exercise:
    """``"2"``, ``"ex2"`` or a module name -> the exercise; a clear error otherwise."""
    for exercise in exercises:
        if wanted in (exercise.id, str(exercise.number), exercise.module):
            return exercise
    choices = ", ".join(str(e.number) for e in exercises)
    raise SystemExit(f"grader.py: no exercise {wanted!r}; choose one of {choices}")


def reveal_next_hint(root: Path, exercise: Exercise) -> str:
    """Show one more hint than last time (all of them once every one has been shown)."""
    levels = hint_levels(root)
    level = min(levels.get(exercise.id, 0) + 1, len(exercise.hints))
    levels[exercise.id] = level
    (Path(root) / HINTS_FILE).write_text(json.dumps(levels, indent=1) + "\n", encoding="utf-8")
    lines = [f"{exercise.id} {exercise.title} ({exercise.source()})", f"post: {exercise.post}", ""]
    for number, hint in enumerate(exercise.hints[:level], start=1):
        lines.append(f"hint {number} of {len(exercise.hints)}: {hint}")
    if level < len(exercise.hints):
        lines.append(f"\nStill stuck? Run `python grader.py --hint {exercise.number}` again for "
                     f"hint {level + 1}.")
    else:
        lines.append("\nThat was the last hint: it is nearly the answer. The solution is in "
                     f"{exercise.source('solutions')} once you have tried.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- watching


def snapshot(root: Path, exercises: list[Exercise], impl: str) -> dict[str, float]:
    """Modification times of the exercise files (a missing file counts as a change too)."""
    times = {}
    for exercise in exercises:
        path = Path(root) / exercise.source(impl)
        times[str(path)] = path.stat().st_mtime if path.exists() else -1.0
    return times


def watch(root: Path, exercises: list[Exercise], impl: str, grade: Callable[[], int]) -> int:
    """Grade now, then again every time an exercise file changes; Ctrl-C stops.

    Polls modification times once a second, so it needs no extra dependency and works on every
    platform. Returns the exit status of the last grading.
    """
    seen = snapshot(root, exercises, impl)
    status = grade()
    print("\nWatching the exercise files; save a file to re-grade, Ctrl-C to stop.", flush=True)
    try:
        while True:
            time.sleep(WATCH_POLL_SECONDS)
            now = snapshot(root, exercises, impl)
            if now != seen:
                seen = now
                print("\033[2J\033[H", end="")  # clear the terminal
                status = grade()
                print("\nWatching the exercise files; save a file to re-grade, Ctrl-C to stop.",
                      flush=True)
    except KeyboardInterrupt:
        print()
    return status
