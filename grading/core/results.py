"""From recorded test outcomes to what a learner or instructor reads: statuses and points.

:func:`exercise_status` decides each exercise's :class:`~grading.core.records.Status` from its
tests' records, in this order of precedence: missing and error (nothing to grade), environment
error, does not import, timed out, crashed, out of memory, then done, not started, in progress
or failing. Across the trust boundary a call that times out, crashes or runs out of memory costs
only its own function's tests (:mod:`grading.core.faults`): the status names the fault and the
function, and the exercise's other functions still earn their points.

Points (:class:`~grading.core.records.ExerciseResult`): each exercise's points in proportion to
the tests that pass, over the tests that ran (a skipped test counts neither for nor against).
Bonus exercises earn bonus points, apart from the main part; "all done" (exit status 0) only
asks for the main exercises.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from grading.core.declarations import Exercise

from grading.core.sanitize import diagnosis_id

from grading.core.records import (ENVIRONMENT_FAULT, ExerciseResult, Outcome, Status,
                                  SubmissionResult, TestRecord)

__all__ = ["ExerciseResult", "SubmissionResult", "exercise_status", "root_failure", "summarize",
           "untouched_result"]


def untouched_result(exercise: Exercise) -> ExerciseResult:
    """The verdict of an exercise whose file is still the stub handed out, given without running
    its tests: "not started", no points (each test fails on a stub: the maintainer suite's
    ``test_stubs_fail.py`` checks that)."""
    return ExerciseResult(exercise, Status.NOT_STARTED, [],
                          "every function is still the stub handed out (it raises "
                          "NotImplementedError)")


#: The faults of a test that decide the whole exercise's status, in order of precedence.
_FAULTS = ((Status.TIMED_OUT, lambda test: test.outcome is Outcome.TIMED_OUT),
           (Status.CRASHED, lambda test: test.outcome is Outcome.CRASHED),
           (Status.OUT_OF_MEMORY, lambda test: test.memory))


def _why(test: TestRecord) -> str:
    return f"{test.name}: {test.message}"


def exercise_status(tests: Sequence[TestRecord]) -> tuple[Status, str]:
    """The status of one exercise from its tests' records, and the message explaining it."""
    counted = [t for t in tests if t.counted]
    if not tests:
        return Status.ERROR, "no tests were recorded"
    hit = next((t for t in counted if t.diagnosis == ENVIRONMENT_FAULT), None)
    if hit:
        return Status.ENVIRONMENT_ERROR, f"the machine, not the code, failed: {_why(hit)}"
    hit = next((t for t in counted if t.import_error), None)
    if hit:
        return Status.NOT_IMPORTED, hit.message
    for status, fault in _FAULTS:
        hit = next((t for t in counted if fault(t)), None)
        if hit:  # a call that ended its process names its function: the sentence says it all
            return status, hit.message if hit.function else _why(hit)
    passed = sum(t.passed for t in counted)
    if not counted:
        return Status.DONE, "every test was skipped here"
    if passed == len(counted):
        return Status.DONE, ""
    if passed == 0 and all(t.stub for t in counted):
        return Status.NOT_STARTED, ""
    failure = next(t for t in counted if not t.passed)
    return (Status.IN_PROGRESS if passed else Status.FAILING), _why(failure)


#: Diagnoses that only say a value came out wrong (``*-wrong``, and these): symptoms, which a
#: more specific diagnosis of the same failures explains.
SYMPTOMS = frozenset({"hook-does-not-scale"})


def is_symptom(diagnosis: str | None) -> bool:
    """Whether a diagnosis id only names a symptom (a wrong value), not a mistake."""
    return bool(diagnosis) and (diagnosis.endswith("-wrong") or diagnosis in SYMPTOMS)


def root_failure(row: ExerciseResult) -> TestRecord | None:
    """The first failing test that names the exercise's root mistake, or None when none names one.

    The first failure often reports a symptom (a hook that returns nothing first fails a test
    that checks the scaled values). The root is the specific diagnosis (not :func:`is_symptom`)
    the most failing tests name, a tie going to the one met first; a symptom only when nothing
    more specific is named. Only tests the code reached count (stubs, import errors and tests
    that never ran are not mistakes).
    """
    named = [(diagnosis_id(t.diagnosis), t) for t in row.failures if t.diagnosis and t.reached]
    if not named:
        return None
    named = [(d, t) for d, t in named if not is_symptom(d)] or named
    counts = Counter(diagnosis for diagnosis, _ in named)
    best = max(counts.values())
    return next(t for diagnosis, t in named if counts[diagnosis] == best)


def summarize(exercises: list[Exercise], run, missing: dict[str, str] | None = None,
              name: str = "", seconds: float = 0.0) -> SubmissionResult:
    """Group a :class:`~grading.box.runner.RunResult` by exercise and decide each status.

    ``missing`` maps exercise ids to why they were not run (file not in the submission).
    """
    missing = missing or {}
    results = []
    for exercise in exercises:
        tests = [run.results[t.nodeid] for t in run.tests
                 if t.exercise == exercise.id and t.nodeid in run.results]
        if exercise.id in missing:
            tests, status, message = [], Status.MISSING, missing[exercise.id]
        elif not tests and exercise.id in run.problems:
            status, message = run.problems[exercise.id]
        else:
            status, message = exercise_status(tests)
        results.append(ExerciseResult(exercise, status, tests, message))
    return SubmissionResult(name, tuple(results), dict(run.environment), seconds)
