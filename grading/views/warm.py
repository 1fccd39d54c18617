"""Fast feedback: one long-lived process that re-runs an exercise's tests each time you save it.

A fresh ``pytest`` pays about 3.7 s of imports (torch, transformers) and the model loads before
its first test. ``python grader.py watch --warm`` pays them once: the models stay loaded, and
each save re-runs only that exercise's tests, in the same process, so feedback takes about as
long as the tests themselves. The price: your code runs inside the watcher, so an endless loop
needs Ctrl-C. (``python grader.py`` without ``--warm`` runs each grading in a fresh, time-limited
process.)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grading.core.declarations import Exercise

from grading.views import reports
from grading.views.learner import WATCH_POLL_SECONDS, hint_levels, snapshot
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
    """Re-run the tests of whichever exercise file changes; Ctrl-C stops."""
    root = Path(root)
    seen = snapshot(root, exercises, impl)
    latest = max(exercises, key=lambda e: seen[str(root / e.source(impl))])
    code, seconds = rerun_and_summarize(root, latest, impl)
    print(f"\n{latest.id}: tests ran in {seconds:.1f} s. Watching {impl}/ (warm): save a file "
          "to re-run its tests, Ctrl-C to stop.", flush=True)
    try:
        while True:
            time.sleep(WATCH_POLL_SECONDS)
            now = snapshot(root, exercises, impl)
            changed = [e for e in exercises
                       if now[str(root / e.source(impl))] != seen[str(root / e.source(impl))]]
            seen = now
            if changed:
                print("\033[2J\033[H", end="")  # clear the terminal
            for exercise in changed:
                code, seconds = rerun_and_summarize(root, exercise, impl)
                print(f"\n{exercise.id}: tests ran in {seconds:.1f} s. Watching {impl}/ (warm).",
                      flush=True)
    except KeyboardInterrupt:
        print()
    return 0 if code == 0 else 1
