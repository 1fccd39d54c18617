"""Every catalogued learner mistake is caught by the exercise tests, and named by its diagnosis.

For each mistake in ``tests/mistakes/exN.py``: run exercise N's tests against the solution with
the mistake patched in (``--kata-patch``), and check that the *first* failing test (the verdict
the learner reads first) reports the catalogue's diagnosis id through ``course.shared.diagnosis`` -- a
sentence about the learner's code, never a bare library exception. The runs happen in this
process, one pytest session for all the mistakes of an exercise (``planting.EveryEntry``), so
the session's models are loaded and the tests collected once for all of them; each runs the tests
its functions reach (``planting.Reach``: the others run the solution's code and pass).
"""

from __future__ import annotations

import pytest

from course.shared.catalogue import load

from course.shared.diagnosis import diagnosis_of
from tests.course.planting import (
    PlantedRun,
    fast_first,
    planted_results,
    planted_run,
    run_passes,
)
from course.shared.catalogue import Mistake


MISTAKES: list[Mistake] = load("mistakes")


class FirstFailure:
    """A pytest plugin object that keeps the first failing test: its name, message, diagnosis.

    Once a test failed, the remaining tests are passed over: the first failure is the verdict.
    """

    def __init__(self):
        self.test: str | None = None
        self.message = ""
        self.diagnosis: str | None = None
        self.error_type = ""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        return True if self.test is not None else None  # True: "handled", the test does not run

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        # every phase counts: a leaked hook is reported at teardown
        if report.failed and self.test is None:
            error = call.excinfo.value if call.excinfo is not None else None
            found = diagnosis_of(error)
            self.test = report.nodeid
            self.message = report.longreprtext
            self.diagnosis = found.id if found is not None else None
            self.error_type = type(error).__name__ if error is not None else ""

    @classmethod
    def of(cls, run: PlantedRun) -> FirstFailure:
        """The first failure of a run that recorded every test."""
        first = cls()
        record = run.first_failure()
        if record is not None:
            first.test, first.message, first.diagnosis = record.nodeid, record.message, \
                record.diagnosis
            kind = record.message.partition(":")[0]  # the recorder's "TypeError: ..."
            first.error_type = kind if kind.isidentifier() else "failure"
        return first

    @property
    def last_line(self) -> str:
        lines = self.message.strip().splitlines()
        return lines[-1][:300] if lines else ""


def first_failures(mistakes: list[Mistake], rootpath, directory) -> dict[str, FirstFailure]:
    """Each mistake's first failure across the grader's boundary, in the learner's order
    (``planting.fast_first``): one pytest session for all of them."""
    results: dict[str, FirstFailure] = {}
    passes = fast_first(mistakes, FirstFailure, lambda first: first.test is not None, results)
    run_passes(mistakes[0].exercise, passes, rootpath, directory, boundary="grader")
    return results


def run_tests_with_mistake(mistake: Mistake, request, boundary: str = "pytest") -> FirstFailure:
    """The first failure of the exercise's tests with the mistake planted, in the learner's order.
    For the learner's own ``pytest`` it is read from the run the root-diagnosis check reads too
    (``planting.planted_run``); each is run once per process, with the exercise's other
    mistakes."""
    if boundary == "pytest":
        return FirstFailure.of(planted_run(mistake, request))
    return planted_results("mistakes", mistake, boundary, request,
                           lambda mistakes, directory: first_failures(
                               mistakes, request.config.rootpath, directory))


def test_catalogue_is_large_and_covers_every_exercise():
    assert len(MISTAKES) >= 25, f"only {len(MISTAKES)} mistakes catalogued"
    ids = [(m.exercise, m.id) for m in MISTAKES]
    assert len(ids) == len(set(ids)), "mistake ids must be unique within an exercise"
    assert {m.exercise for m in MISTAKES} >= {"ex1", "ex2", "ex3"}


def test_diagnosis_ids_are_kebab_case_and_each_names_one_mistake():
    by_id: dict[str, list[str]] = {}
    for m in MISTAKES:
        by_id.setdefault(m.diagnosis, []).append(f"{m.exercise}/{m.id}")
    assert all(m.diagnosis == m.diagnosis.lower() and " " not in m.diagnosis for m in MISTAKES)
    exercises_per_id = {d: {name.split("/")[0] for name in names} for d, names in by_id.items()}
    shared = {d: names for d, names in by_id.items() if len(exercises_per_id[d]) > 1
              and d not in SHARED_DIAGNOSES}
    assert not shared, f"diagnosis ids belong to one exercise (unless shared on purpose): {shared}"


# Diagnoses that the same mistake earns in every exercise.
SHARED_DIAGNOSES = {"not-a-tensor", "hook-left-on-model"}


@pytest.mark.parametrize("boundary", ["pytest", "grader"])
@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: f"{m.exercise}-{m.id}")
def test_mistake_is_caught_and_named(mistake, boundary, request, capsys):
    """The same verdict for the learner's own ``pytest`` and for the grader, which runs the
    code across its trust boundary (only plain data between the tests and the code)."""
    first = run_tests_with_mistake(mistake, request, boundary)
    capsys.readouterr()  # the inner run's output is noise here
    assert first.test is not None, (
        f"no test of {mistake.exercise} fails when the learner {mistake.summary}"
    )
    assert first.diagnosis is not None, (
        f"the first failing test for '{mistake.summary}' ({first.test}) reports a bare "
        f"{first.error_type}, not a diagnosis about the learner's code: {first.last_line}"
    )
    assert first.diagnosis == mistake.diagnosis, (
        f"the first failing test for '{mistake.summary}' ({first.test}) names the diagnosis "
        f"{first.diagnosis!r}, expected {mistake.diagnosis!r}: {first.last_line}"
    )
