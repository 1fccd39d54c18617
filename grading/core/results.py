"""From recorded test outcomes to what a learner or instructor reads: statuses and points.

Statuses (:class:`~grading.core.records.Status`), in the order they take precedence:

===============  ============================================================================
missing          the submission has no file for this exercise (instructor mode)
error            nothing could be graded: no test was collected or recorded (the message says
                 why), the batch was interrupted, or the grader itself failed
does not import  the exercise file does not import (the message gives the line and the error);
                 never "not started": the learner may have done the work
timed out        a call ran past its deadline, or the tests past the exercise's time limit
crashed          a call ended the process running it (segfault, os._exit, killed)
out of memory    a call ran out of the memory allowed
done             every test passed
not started      no test passed and every failure reached an untouched stub
in progress      some tests pass
failing          no test passes, and not only because of stubs
===============  ============================================================================

Across the trust boundary a call that times out, crashes or runs out of memory costs only its
own function's tests (:mod:`grading.core.faults`): the status names the fault and the function,
and the exercise's other functions still earn their points.

Points: each exercise's points (from its declaration) are awarded in proportion to the tests that
pass. Tests that skip (GPT-2 not in the local cache) count neither for nor against: the
proportion is taken over the tests that ran. Bonus exercises (``bonus = true`` in the manifest)
earn bonus points, shown apart from the main part, whose maximum they do not raise; "all done"
(exit status 0) only asks for the exercises that are not bonus.
"""

from __future__ import annotations

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


#: Test outcomes that decide the whole exercise's status, in the order they take precedence.
_FATAL_OUTCOMES = {Outcome.TIMED_OUT: Status.TIMED_OUT, Outcome.CRASHED: Status.CRASHED}


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
    for outcome, status in _FATAL_OUTCOMES.items():
        hit = next((t for t in counted if t.outcome is outcome), None)
        if hit:  # a call that ended its process names its function: the sentence says it all
            return status, hit.message if hit.function else _why(hit)
    hit = next((t for t in counted if t.memory), None)
    if hit:
        return Status.OUT_OF_MEMORY, hit.message if hit.function else _why(hit)
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
    """The failure that names the exercise's root mistake, or None when no failure names one.

    When several tests of one exercise fail, the first one often reports a symptom: a hook that
    returns nothing first fails a test that checks the scaled values. The root is the diagnosis
    that explains the most failures: among the specific diagnoses (not :func:`is_symptom`), the
    one the most failing tests name, a tie going to the one met first; symptoms only when no
    failure names anything more specific. This returns the first failing test that names it.
    Untouched stubs, import errors and tests that never ran are not mistakes and never count.
    """
    named = [(diagnosis_id(t.diagnosis), t) for t in row.counted
             if not t.passed and t.diagnosis and not t.stub and not t.import_error
             and t.outcome is not Outcome.NOT_RUN]
    if not named:
        return None
    specific = [(d, t) for d, t in named if not is_symptom(d)]
    named = specific or named
    counts: dict[str, int] = {}
    for diagnosis, _ in named:
        counts[diagnosis] = counts.get(diagnosis, 0) + 1
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
        if exercise.id in missing:
            results.append(ExerciseResult(exercise, Status.MISSING, (), missing[exercise.id]))
            continue
        tests = [run.results[t.nodeid] for t in run.tests
                 if t.exercise == exercise.id and t.nodeid in run.results]
        if not tests and exercise.id in run.problems:
            status, message = run.problems[exercise.id]
            results.append(ExerciseResult(exercise, status, (), message))
            continue
        status, message = exercise_status(tests)
        results.append(ExerciseResult(exercise, status, tests, message))
    return SubmissionResult(name, tuple(results), dict(run.environment), seconds)
