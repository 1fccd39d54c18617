"""The grader's typed records: what a test did, how an exercise stands, what a submission scored.

These are the only shapes that cross the grader's module boundaries. The recorder
(:mod:`grading.core.recorder`) writes :class:`TestRecord` and :class:`CollectedTest` as JSON
lines, the runner reads them back, :mod:`grading.core.results` decides each exercise's
:class:`Status`, and :mod:`grading.views.reports` renders :class:`SubmissionResult` as a table,
CSV, JSON or Gradescope file. Every record round-trips through JSON::

    record == TestRecord.from_json(json.loads(json.dumps(record.to_json())))

Statuses and outcomes are string enums whose values are the words reports print.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum

from grading.core.declarations import Exercise

from grading.core import sanitize


#: The diagnosis id of a test that met a :class:`kata.models.EnvironmentFault`: the machine's
#: fault, never the learner's (the exercise is then an environment error).
ENVIRONMENT_FAULT = "environment-fault"


class Status(StrEnum):
    """How an exercise stands. :func:`grading.core.results.exercise_status` decides it."""

    #: The submission has no file for this exercise (instructor mode).
    MISSING = "missing"
    #: The exercise file does not import (the message gives the line and the error): its own
    #: status, never "not started" (the learner may well have done the work).
    NOT_IMPORTED = "does not import"
    #: Nothing could be graded for another reason: no test was collected or recorded, the
    #: batch was interrupted, the grader itself failed (the message says which).
    ERROR = "error"
    #: Its tests ran longer than the time limit (an endless loop?).
    TIMED_OUT = "timed out"
    #: The test process died in one of its tests (segfault, ``os._exit``, killed).
    CRASHED = "crashed"
    #: A test ran out of the memory allowed.
    OUT_OF_MEMORY = "out of memory"
    #: Every test passed.
    DONE = "done"
    #: No test passed and every failure reached an untouched stub (a file that does not
    #: import is :attr:`NOT_IMPORTED`, never this).
    NOT_STARTED = "not started"
    #: Some tests pass.
    IN_PROGRESS = "in progress"
    #: No test passes, and not only because of stubs.
    FAILING = "failing"
    #: The machine failed (device, model cache, environment) after the batch started: never
    #: graded as the learner's mistake. 0 points until graded again; the message says what failed.
    ENVIRONMENT_ERROR = "environment error"


class Outcome(StrEnum):
    """What happened to one test."""

    PASSED = "passed"
    FAILED = "failed"
    #: The test could not be set up (a fixture failed).
    ERROR = "error"
    #: The test skipped itself (GPT-2 not in the cache): it counts neither for nor against.
    SKIPPED = "skipped"
    #: The test was running when the exercise's time ran out.
    TIMED_OUT = "timed out"
    #: The test was running when the test process died.
    CRASHED = "crashed"
    #: The test never ran (the process died or timed out before it).
    NOT_RUN = "not run"


def _known_fields(cls, data: Mapping) -> dict:
    """The entries of ``data`` that are fields of ``cls`` (a JSON line also has ``event``)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _names(value) -> tuple[str, ...]:
    """A bounded tuple of function names from a record (anything else: none)."""
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(sanitize.bounded(v, 100) for v in value[:50] if isinstance(v, str))


@dataclass(frozen=True)
class CollectedTest:
    """A test pytest collected, before it runs."""

    nodeid: str
    exercise: str | None  # the manifest id whose test file holds it; None for other tests
    name: str
    checks: tuple[str, ...] = ()  # the public functions it is the secret check of

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> CollectedTest:
        values = _known_fields(cls, data)
        return cls(**{**values, "checks": _names(values.get("checks", ()))})


@dataclass(frozen=True)
class TestRecord:
    """One test's outcome, with the short facts the grader needs about its failure: ``message``
    (short, paths relative to the kata), ``where`` (the deepest line of the code under test it
    passed through), ``stub`` (it reached an untouched stub's ``NotImplementedError``, the stub
    ``function``), ``import_error``, ``memory``, and ``diagnosis`` (the id of the mistake the
    test recognised, :mod:`course.shared.diagnosis`).

    A stub is never a mistake: a record with ``stub`` set has no diagnosis, whatever the test
    named (a test that catches ``RuntimeError`` also catches the stub's ``NotImplementedError``).
    """

    __test__ = False  # not a pytest test class, whatever its name

    nodeid: str
    exercise: str | None
    name: str
    outcome: Outcome = Outcome.PASSED
    message: str = ""
    where: str = ""
    stub: bool = False
    import_error: bool = False
    memory: bool = False
    duration: float = 0.0
    diagnosis: str | None = None
    function: str | None = None
    checks: tuple[str, ...] = ()  # the public functions it is the secret check of

    def __post_init__(self):
        """Validate what the record says: it may come from the submission's side of the sandbox,
        which can write any JSON line. Strings are bounded, the diagnosis is an id of the
        catalogue's form or :data:`~grading.core.sanitize.UNKNOWN_DIAGNOSIS`, the duration a
        finite number, the flags booleans, and an unknown outcome a failure."""
        put = object.__setattr__
        put(self, "nodeid", sanitize.bounded(self.nodeid, sanitize.FIELD_LIMIT))
        put(self, "exercise", sanitize.optional(self.exercise, 40))
        put(self, "name", sanitize.bounded(self.name, sanitize.FIELD_LIMIT))
        if not isinstance(self.outcome, Outcome):
            try:
                put(self, "outcome", Outcome(self.outcome))
            except ValueError:
                put(self, "outcome", Outcome.FAILED)
        put(self, "message", sanitize.bounded(self.message))
        put(self, "where", sanitize.bounded(self.where, sanitize.FIELD_LIMIT))
        for flag in ("stub", "import_error", "memory"):
            value = getattr(self, flag)
            if not isinstance(value, bool):
                put(self, flag, isinstance(value, int) and value == 1)
        put(self, "duration", sanitize.number(self.duration))
        diagnosis = sanitize.diagnosis_id(self.diagnosis)
        put(self, "diagnosis", None if self.stub and diagnosis != ENVIRONMENT_FAULT else diagnosis)
        put(self, "function", sanitize.optional(self.function, 100))
        put(self, "checks", _names(self.checks))

    @classmethod
    def placeholder(cls, test: CollectedTest, outcome: Outcome, message: str) -> TestRecord:
        """The record of a test that never reported itself (it timed out, crashed, or never ran)."""
        return cls(test.nodeid, test.exercise, test.name, outcome, message, checks=test.checks)

    @property
    def counted(self) -> bool:
        """Whether it counts for the points: every outcome except skipped."""
        return self.outcome is not Outcome.SKIPPED

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

    @property
    def reached(self) -> bool:
        """Whether the code under test reached this test: it ran (not skipped, not "not run")
        and stopped neither at an untouched stub nor at a file that does not import."""
        return (self.counted and self.outcome is not Outcome.NOT_RUN and not self.stub
                and not self.import_error)

    def to_json(self) -> dict:
        return {**asdict(self), "outcome": self.outcome.value}

    @classmethod
    def from_json(cls, data: Mapping) -> TestRecord:
        values = _known_fields(cls, data)
        return cls(**{**values, "outcome": Outcome(values["outcome"])})

    @classmethod
    def validated(cls, data: Mapping) -> TestRecord:
        """:meth:`from_json` for a line from the submission's side: never raises on a bad
        field (an unknown outcome is a failure, a missing name the node id)."""
        values = _known_fields(cls, data if isinstance(data, Mapping) else {})
        nodeid = values.get("nodeid") or "?"
        return cls(**{"name": nodeid, "exercise": None, **values, "nodeid": nodeid})


@dataclass(frozen=True)
class ExerciseResult:
    """One exercise's status, its tests' records in order, and the points they earn.

    Points: the exercise's points in proportion to the tests that pass (over the tests that
    ran), capped by the share of its public functions whose secret checks, on inputs drawn from
    a seed only the grader knows, all ran and passed (``course/shared/secret.py``): answers
    prepared for the public tests' inputs earn nothing. A test file without secret checks is
    not capped (batch grading refuses one).
    """

    exercise: Exercise
    status: Status
    tests: tuple[TestRecord, ...] = ()
    message: str = ""  # why it is not done (for in progress / failing: the first failure)

    def __post_init__(self):
        object.__setattr__(self, "tests", tuple(self.tests))
        object.__setattr__(self, "message", sanitize.bounded(self.message))

    @property
    def counted(self) -> tuple[TestRecord, ...]:
        """The tests that count: every test except the skipped ones."""
        return tuple(t for t in self.tests if t.counted)

    @property
    def failures(self) -> tuple[TestRecord, ...]:
        """The counted tests that did not pass, in order."""
        return tuple(t for t in self.counted if not t.passed)

    @property
    def passed(self) -> int:
        return sum(t.passed for t in self.counted)

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
    def confirmed(self) -> tuple[str, ...]:
        """The public functions whose secret checks all ran and passed, in manifest order."""
        checked = {f for test in self.tests for f in test.checks}
        failed = {f for test in self.tests if not test.passed for f in test.checks}
        return tuple(f for f in self.exercise.functions if f in checked and f not in failed)

    @property
    def unconfirmed(self) -> tuple[str, ...]:
        """The public functions a secret check did not confirm."""
        return tuple(f for f in self.exercise.functions if f not in self.confirmed)

    @property
    def points(self) -> float:
        if self.capped:
            share = len(self.confirmed) / len(self.exercise.functions)
            return round(self.exercise.points * share, 2)
        return self.uncapped_points

    @property
    def uncapped_points(self) -> float:
        """What the tests passed would earn without the secret checks' cap."""
        if not self.total or self.void:
            return 0.0
        return round(self.exercise.points * (self.passed / self.total), 2)

    def why_unconfirmed(self) -> dict[str, str]:
        """For each public function a secret check did not confirm, why, in one line: the
        secret check that failed (its name and the first line of its message), or that none
        of its secret checks ran."""
        reasons = {}
        for function in self.unconfirmed:
            failed = [t for t in self.tests if function in t.checks and not t.passed]
            if failed:
                first = (failed[0].message or failed[0].outcome.value).strip().splitlines()
                reasons[function] = (f"its secret check {failed[0].name} "
                                     f"{failed[0].outcome.value}: {first[0] if first else ''}")
            else:
                reasons[function] = "no secret check of it ran"
        return reasons

    @property
    def capped(self) -> bool:
        """Whether the secret checks hold the points below the share of tests passed: they
        confirmed a smaller share of the public functions (answers that fit the public inputs
        only). Only a test file with secret checks (a batch's must have them) is capped."""
        return (bool(self.total) and not self.void and any(t.checks for t in self.tests)
                and len(self.confirmed) / len(self.exercise.functions) < self.passed / self.total)

    @property
    def done(self) -> bool:
        return self.status is Status.DONE

    @property
    def void(self) -> bool:
        """Its test results do not count (an environment error: the machine's fault)."""
        return self.status is Status.ENVIRONMENT_ERROR

    def first_failure(self) -> TestRecord | None:
        return next(iter(self.failures), None)

    def to_json(self) -> dict:
        return {"id": self.exercise.id, "title": self.exercise.title, "bonus": self.exercise.bonus,
                "status": self.status.value, "message": self.message, "points": self.points,
                "max_points": self.max_points, "passed": self.passed, "total": self.total,
                "skipped": self.skipped, "confirmed": list(self.confirmed),
                "tests": [t.to_json() for t in self.tests]}

    @classmethod
    def from_json(cls, data: Mapping, exercises: Iterable[Exercise]) -> ExerciseResult:
        """Read back :meth:`to_json`; ``exercises`` (the manifest) supply the exercise by id."""
        exercise = _exercise_by_id(exercises, data["id"])
        return cls(exercise, Status(data["status"]),
                   tuple(TestRecord.from_json(t) for t in data.get("tests", ())),
                   data.get("message", ""))


def _exercise_by_id(exercises: Iterable[Exercise], wanted: str) -> Exercise:
    by_id = {e.id: e for e in exercises}
    if wanted not in by_id:
        raise ValueError(f"the result names exercise {wanted!r}, which the manifest does not "
                         f"list (it lists {', '.join(by_id)})")
    return by_id[wanted]


@dataclass(frozen=True)
class SubmissionResult:
    """Every exercise's result for one submission (or the learner's own folder). The main part
    (:attr:`main_points` out of :attr:`max_points`) and the bonus exercises (:attr:`bonus_points`
    out of :attr:`max_bonus_points`, on top) are kept apart; "all done" asks for the main part."""

    name: str
    exercises: tuple[ExerciseResult, ...]
    environment: dict = field(default_factory=dict)  # torch, transformers, device, models
    seconds: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "exercises", tuple(self.exercises))

    @property
    def core(self) -> tuple[ExerciseResult, ...]:
        """The exercises that are not bonus."""
        return tuple(r for r in self.exercises if not r.exercise.bonus)

    @property
    def bonus(self) -> tuple[ExerciseResult, ...]:
        return tuple(r for r in self.exercises if r.exercise.bonus)

    @property
    def main_points(self) -> float:
        return round(sum(r.points for r in self.core), 2)

    @property
    def max_points(self) -> float:
        """The maximum of the main part (bonus points are extra credit)."""
        return sum(r.max_points for r in self.core)

    @property
    def bonus_points(self) -> float:
        return round(sum(r.points for r in self.bonus), 2)

    @property
    def max_bonus_points(self) -> float:
        return sum(r.max_points for r in self.bonus)

    @property
    def points(self) -> float:
        """Every point earned, bonus points included."""
        return round(self.main_points + self.bonus_points, 2)

    @property
    def interrupted(self) -> bool:
        """Not graded: the batch was stopped before or while it ran."""
        return bool(self.exercises) and all(
            row.message and row.message.startswith("not graded: the batch was interrupted")
            for row in self.exercises)

    @property
    def all_done(self) -> bool:
        return all(r.done for r in self.core)

    def first_unfinished(self) -> ExerciseResult | None:
        """The first main exercise not done, else the first bonus not done, else None."""
        return (next((r for r in self.core if not r.done), None)
                or next((r for r in self.exercises if not r.done), None))

    def to_json(self) -> dict:
        return {"name": self.name, "points": self.points, "max_points": self.max_points,
                "main_points": self.main_points, "bonus_points": self.bonus_points,
                "max_bonus_points": self.max_bonus_points, "all_done": self.all_done,
                "seconds": round(self.seconds, 2), "environment": dict(self.environment),
                "exercises": [r.to_json() for r in self.exercises]}

    @classmethod
    def from_json(cls, data: Mapping, exercises: Iterable[Exercise]) -> SubmissionResult:
        """Read back :meth:`to_json`; ``exercises`` (the manifest) supply the exercises by id."""
        exercises = list(exercises)
        return cls(data["name"],
                   tuple(ExerciseResult.from_json(r, exercises) for r in data["exercises"]),
                   dict(data.get("environment", {})), float(data.get("seconds", 0.0)))
