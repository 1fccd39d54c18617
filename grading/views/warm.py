"""``python grader.py watch --warm``: one long-lived process that re-runs an exercise's tests
each time you save it. The imports (torch, transformers) and the models are loaded once, so
feedback takes about as long as the tests themselves; the price is that your code runs inside
the watcher, without the time limit of ``python grader.py`` (an endless loop needs Ctrl-C).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grading.core.declarations import Exercise

from grading.views import learner, reports
from grading.views.learner import hint_levels, snapshot
from grading.core.records import SubmissionResult, TestRecord
from grading.core.results import ExerciseResult, exercise_status


def rerun(root: Path, exercise: Exercise, impl: str, quiet: bool = False,
          record: Path | None = None) -> tuple[int, float]:
    """Run ``exercise``'s tests in this process on the latest ``<impl>/<module>.py``.

    Returns pytest's exit code and the wall time in seconds. With ``record``, the grader's
    recorder writes every test's outcome there, as in a graded run.
    """
    sys.modules.pop(exercise.import_name(impl), None)  # so the saved file is imported afresh
    started = time.perf_counter()
    arguments = [str(Path(root) / exercise.tests), "--impl", impl, "-p", "no:cacheprovider",
                 "--rootdir", str(root), "-q" if not quiet else "-qq",
                 # the second run meets the modules the first imported: pytest cannot rewrite
                 # their asserts again, and would say so in every run
                 "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if record is not None:
        arguments += ["-p", "grading.core.recorder", "--kata-record", str(record)]
    code = pytest.main(arguments)
    if code == pytest.ExitCode.INTERRUPTED:  # pytest caught the learner's Ctrl-C: pass it on
        raise KeyboardInterrupt
    return int(code), time.perf_counter() - started


def recorded_result(exercise: Exercise, record: Path) -> SubmissionResult:
    """The graded result of one exercise from the recorder's file, as the grader builds it."""
    tests = []
    for line in record.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("event") == "result":
            tests.append(TestRecord.from_json(event))
    status, message = exercise_status(tests)
    return SubmissionResult("", (ExerciseResult(exercise, status, tuple(tests), message),), {})


def rerun_and_summarize(root: Path, exercise: Exercise, impl: str) -> tuple[int, float]:
    """:func:`rerun`, then the grader's own summary of that exercise (status, next step, hint)."""
    with tempfile.TemporaryDirectory(prefix="kata-warm-") as folder:
        record = Path(folder) / "record.jsonl"
        code, seconds = rerun(root, exercise, impl, record=record)
        if record.exists():
            print()
            print(reports.exercise_summary(recorded_result(exercise, record),
                                           hint_levels(root), impl))
    return code, seconds


def watch(root: Path, exercises: list[Exercise], impl: str) -> int:
    """Re-run the tests of the exercise saved last, then of each one saved; Ctrl-C stops."""
    times = snapshot(root, exercises, impl)
    latest = max(exercises, key=lambda exercise: times[exercise.id])

    def rerun_each(changed: list[Exercise]) -> int:
        for exercise in changed:
            code, seconds = rerun_and_summarize(root, exercise, impl)
            print(f"\n{exercise.id}: tests ran in {seconds:.1f} s. Watching {impl}/ (warm): save "
                  "a file to re-run its tests, Ctrl-C to stop.", flush=True)
        return 0 if code == 0 else 1

    return learner.watch(root, exercises, impl, rerun_each, [latest])
