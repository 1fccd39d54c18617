"""Every catalogued learner mistake is caught by the exercise tests, and named.

For each mistake in ``tests/mistakes/exN.py``: run exercise N's tests against the solution with
the mistake patched in (``--kata-patch``), and check that at least one test fails with a message
containing the catalogue's words. The runs happen in this process, so the session's models are
loaded once for all of them.
"""

from __future__ import annotations

import importlib
import textwrap

import pytest

from kata.diagnosis import diagnosis_of
from kata.manifest import load_manifest
from tests.mistakes import Mistake

pytestmark = pytest.mark.maintainer

EXERCISES = {exercise.id: exercise for exercise in load_manifest()}


def catalogue() -> list[Mistake]:
    mistakes = []
    for exercise_id in EXERCISES:
        try:
            module = importlib.import_module(f"tests.mistakes.{exercise_id}")
        except ModuleNotFoundError:
            continue
        mistakes += module.MISTAKES
    return mistakes


MISTAKES = catalogue()


class FailureCollector:
    """A pytest plugin object that keeps every failed test's name and message.

    Once a failure names the mistake, the remaining tests are passed over: they could only
    confirm it.
    """

    def __init__(self, words: str, diagnosis: str = ""):
        self.words, self.diagnosis = words, diagnosis
        self.failures: dict[str, str] = {}
        self.diagnoses: dict[str, str] = {}  # test -> the diagnosis id its failure carried
        self.named = False

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        yield
        found = diagnosis_of(call.excinfo.value) if call.excinfo is not None else None
        if found is not None:
            self.diagnoses[item.nodeid] = found.id

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        return True if self.named else None  # True: "handled", the test does not run

    def pytest_runtest_logreport(self, report):
        if report.failed:  # keep every phase: a leaked hook is reported at teardown
            self.failures[report.nodeid] = self.failures.get(report.nodeid, "") + report.longreprtext
            diagnosed = not self.diagnosis or self.diagnoses.get(report.nodeid) == self.diagnosis
            self.named = self.named or (self.words in report.longreprtext and diagnosed)


def run_tests_with_mistake(mistake: Mistake, rootpath, tmp_path) -> FailureCollector:
    """Run the exercise's tests with the mistake planted: the fast tests on the tiny model first,
    then, only if they did not name the mistake, all of them."""
    patch = tmp_path / f"{mistake.exercise}_{mistake.id}.py"
    patch.write_text(textwrap.dedent(mistake.code))
    exercise = EXERCISES[mistake.exercise]
    for selection in (["-m", "not trained"], []):
        collector = FailureCollector(mistake.message, mistake.diagnosis)
        pytest.main(
            [
                str(rootpath / exercise.tests), "--impl", "solutions", *selection,
                f"--kata-patch={mistake.exercise}={patch}",
                "-q", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
                "--tb=native", "-o", "addopts=",
            ],
            plugins=[collector],
        )
        if collector.named:
            break
    return collector


def test_catalogue_is_large_and_covers_every_exercise():
    assert len(MISTAKES) >= 25, f"only {len(MISTAKES)} mistakes catalogued"
    ids = [(m.exercise, m.id) for m in MISTAKES]
    assert len(ids) == len(set(ids)), "mistake ids must be unique within an exercise"
    assert {m.exercise for m in MISTAKES} >= {"ex1", "ex2", "ex3"}


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: f"{m.exercise}-{m.id}")
def test_mistake_is_caught_and_named(mistake, request, tmp_path, capsys):
    collector = run_tests_with_mistake(mistake, request.config.rootpath, tmp_path)
    capsys.readouterr()  # the inner run's output is noise here
    assert collector.failures, (
        f"no test of {mistake.exercise} fails when the learner {mistake.summary}"
    )
    named = [test for test, message in collector.failures.items() if mistake.message in message]
    if mistake.diagnosis:
        diagnosed = [t for t in named if collector.diagnoses.get(t) == mistake.diagnosis]
        assert diagnosed, (
            f"the tests catch '{mistake.summary}' but no failure names the diagnosis "
            f"{mistake.diagnosis!r}; diagnoses seen: {sorted(set(collector.diagnoses.values()))}"
        )
    assert named, (
        f"the tests catch '{mistake.summary}' but no failure message contains "
        f"{mistake.message!r}; messages seen:\n"
        + "\n".join(f"- {test}: {msg.strip().splitlines()[-1][:200]}" for test, msg in collector.failures.items())
    )
