"""Untouched exercises, graded once per batch.

An exercise file that is, byte for byte, the stub its solution gives runs nothing but the kata's
own code: its server process imports that one file (:mod:`kata.serve.server`), and the tests,
their inputs (the batch's secret seed included) and the models are the batch's. So every
submission that hands in the untouched stub earns exactly what the stub earns. A batch grades
the stubs once, the first time a submission needs them, in a sandbox like any submission's, and
gives each untouched exercise the stubs' records instead of running it again; a submission whose
every file is untouched (or missing) starts no sandbox at all. Only the stubs that at least two
submissions hand in untouched are run so. In a class, most untouched files are bonus exercises
nobody began, and the learners who hand in nothing yet.

Only the stubs' own run decides: an exercise whose stub run did not end cleanly (a time-out, a
crash, the machine) is not copied, but run for each submission as before.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Callable

from grading.core.declarations import Exercise

from grading.core.records import Status
from grading.core.results import exercise_status
from grading.box.runner import RunResult

#: The statuses a stub run's exercise may be copied with: the tests ran and said something
#: about the code (never a time-out, a crash or the machine).
GRADED = (Status.NOT_STARTED, Status.FAILING, Status.IN_PROGRESS, Status.DONE)


def stub_sources(instructor_root: Path, exercises: list[Exercise]) -> dict[str, bytes]:
    """``{module: the untouched stub's bytes}``, generated from the instructor's solutions (an
    exercise whose stub cannot be generated is left out: it is always run)."""
    from grading.core import stubs

    sources = {}
    for exercise in exercises:
        try:
            sources[exercise.module] = stubs.stub_text(exercise, instructor_root).encode("utf-8")
        except (OSError, ValueError, SyntaxError):
            continue
    return sources


def untouched_modules(files: dict[str, bytes], stubs: dict[str, bytes]) -> set[str]:
    """The modules whose submitted file ({module: source}) is exactly its stub."""
    return {module for module, source in files.items() if stubs.get(module) == source}


def worth_a_run(stubs: dict[str, bytes], submissions: Iterable[dict[str, bytes]]
                ) -> dict[str, bytes]:
    """The stubs that at least two of the batch's ``submissions`` ({module: source} each) hand
    in untouched: only for those does one run of the stub cost less than running each copy (a
    single submission, as Gradescope grades, never pays for a run of the stubs)."""
    counts = Counter(module for files in submissions
                     for module in untouched_modules(files, stubs))
    return {module: source for module, source in stubs.items() if counts[module] >= 2}


def cleanly_graded(run: RunResult, exercise_id: str) -> bool:
    """Whether ``run`` recorded every test of the exercise and they ended in a graded status."""
    tests = [t for t in run.tests if t.exercise == exercise_id]
    complete = tests and all(t.nodeid in run.results for t in tests)
    if not complete or exercise_id in run.problems:
        return False
    status, _ = exercise_status([run.results[t.nodeid] for t in tests])
    return status in GRADED


def copy_exercises(template: RunResult, ids: list[str], into: RunResult) -> None:
    """Add the template's tests and records of the exercises ``ids`` to ``into``."""
    for test in template.tests:
        if test.exercise in ids:
            into.tests.append(test)
            into.results[test.nodeid] = template.results[test.nodeid]
    if not into.environment:
        into.environment = dict(template.environment)


class StubRun:
    """The batch's one run of the stubs: computed by ``grade_stubs`` the first time an untouched
    exercise asks for it (the batch's lanes wait for the one run), then shared."""

    def __init__(self, sources: dict[str, bytes],
                 grade_stubs: Callable[[dict[str, bytes]], RunResult]):
        self.sources = sources
        self._grade_stubs = grade_stubs
        self._lock = threading.Lock()
        self._run: RunResult | None = None

    def result(self) -> RunResult:
        with self._lock:
            if self._run is None:
                try:
                    self._run = self._grade_stubs(self.sources)
                except Exception:  # noqa: BLE001 - a grader fault: copy nothing, run them all
                    self._run = RunResult()
            return self._run

    def split(self, files: dict[str, bytes], exercises: list[Exercise]
              ) -> tuple[list[Exercise], RunResult | None, list[str]]:
        """``(the exercises to run, the stub run, the ids taken from it)`` for one submission's
        ``files``: the untouched exercises the stub run graded cleanly are taken from it."""
        modules = untouched_modules(files, self.sources)
        ids = [e.id for e in exercises if e.module in modules]
        if not ids:
            return exercises, None, []
        template = self.result()
        taken = [i for i in ids if cleanly_graded(template, i)]
        return [e for e in exercises if e.id not in taken], template, taken
