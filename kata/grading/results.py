"""From recorded test outcomes to what a learner or instructor reads: statuses and points.

Statuses, in the order they take precedence:

=============  ==============================================================================
missing        the submission has no file for this exercise (instructor mode)
error          the exercise file does not import (the message gives the line and the error)
timed out      its tests ran longer than the time limit (an endless loop?)
crashed        the test process died in one of its tests (segfault, os._exit, killed)
out of memory  a test ran out of the memory allowed
done           every test passed
not started    no test passed and every failure reached an untouched stub
in progress    some tests pass
failing        no test passes, and not only because of stubs
=============  ==============================================================================

Points: each exercise's points (from the manifest) are awarded in proportion to the tests that
pass. Tests that skip (GPT-2 not in the local cache) count neither for nor against: the
proportion is taken over the tests that ran. Bonus exercises (``bonus = true`` in the manifest)
add their points to the score as extra credit, but not to the maximum, and "all done" (exit
status 0) only asks for the exercises that are not bonus.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kata.manifest import Exercise

PASSED = "passed"


@dataclass
class ExerciseResult:
    exercise: Exercise
    status: str
    tests: list[dict] = field(default_factory=list)  # one result record per test, in order
    message: str = ""  # why it is not done (for in progress / failing: the first failure)

    @property
    def counted(self) -> list[dict]:
        """The tests that count: every test except the skipped ones."""
        return [t for t in self.tests if t["outcome"] != "skipped"]

    @property
    def passed(self) -> int:
        return sum(t["outcome"] == PASSED for t in self.counted)

    @property
    def total(self) -> int:
        return len(self.counted)

    @property
    def skipped(self) -> int:
        return len(self.tests) - len(self.counted)

    @property
    def max_points(self) -> float:
        return float(self.exercise.points)

    @property
    def points(self) -> float:
        if not self.total:
            return 0.0
        return round(self.exercise.points * self.passed / self.total, 2)

    @property
    def done(self) -> bool:
        return self.status == "done"

    def first_failure(self) -> dict | None:
        return next((t for t in self.counted if t["outcome"] != PASSED), None)


@dataclass
class SubmissionResult:
    name: str
    exercises: list[ExerciseResult]
    environment: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def core(self) -> list[ExerciseResult]:
        return [r for r in self.exercises if not r.exercise.bonus]

    @property
    def points(self) -> float:
        """Every point earned, bonus points included."""
        return round(sum(r.points for r in self.exercises), 2)

    @property
    def max_points(self) -> float:
        """The maximum without bonus exercises (their points are extra credit)."""
        return sum(r.max_points for r in self.core)

    @property
    def all_done(self) -> bool:
        return all(r.done for r in self.core)

    def first_unfinished(self) -> ExerciseResult | None:
        return next((r for r in self.exercises if not r.done), None)


def exercise_status(tests: list[dict]) -> tuple[str, str]:
    """The status of one exercise from its tests' result records, and the message explaining it."""
    counted = [t for t in tests if t["outcome"] != "skipped"]
    if not tests:
        return "error", "no tests were recorded"
    hit = next((t for t in counted if t.get("import_error")), None)
    if hit:
        return "error", hit["message"]
    for outcome in ("timed out", "crashed"):
        hit = next((t for t in counted if t["outcome"] == outcome), None)
        if hit:
            return outcome, f"{hit['name']}: {hit['message']}"
    hit = next((t for t in counted if t.get("memory")), None)
    if hit:
        return "out of memory", f"{hit['name']}: {hit['message']}"
    passed = sum(t["outcome"] == PASSED for t in counted)
    if not counted:
        return "done", "every test was skipped here"
    if passed == len(counted):
        return "done", ""
    if passed == 0 and all(t.get("stub") for t in counted):
        return "not started", ""
    failure = next(t for t in counted if t["outcome"] != PASSED)
    return ("in progress" if passed else "failing"), f"{failure['name']}: {failure['message']}"


def summarize(exercises: list[Exercise], run, missing: dict[str, str] | None = None,
              name: str = "", seconds: float = 0.0) -> SubmissionResult:
    """Group a :class:`~kata.grading.runner.RunResult` by exercise and decide each status.

    ``missing`` maps exercise ids to why they were not run (file not in the submission).
    """
    missing = missing or {}
    results = []
    for exercise in exercises:
        if exercise.id in missing:
            results.append(ExerciseResult(exercise, "missing", [], missing[exercise.id]))
            continue
        tests = [run.results[t["nodeid"]] for t in run.tests
                 if t["exercise"] == exercise.id and t["nodeid"] in run.results]
        if not tests and exercise.id in run.problems:
            status, message = run.problems[exercise.id]
            results.append(ExerciseResult(exercise, status, [], message))
            continue
        status, message = exercise_status(tests)
        results.append(ExerciseResult(exercise, status, tests, message))
    return SubmissionResult(name, results, dict(run.environment), seconds)
