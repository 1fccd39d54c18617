"""Root diagnoses: what the report ranks and the learner reads first is the mistake that explains
the most failures, not the first test's symptom (issue 26, item 2).

For each catalogued mistake (``tests/mistakes/``), every test of its exercise runs against the
solutions with the mistake planted (the tiny-model tests: ``-m "not trained"``); the records are
built as the grader builds them, and :func:`kata.grading.results.root_failure` must name the
catalogue's root (``Mistake.root_diagnosis``: its ``root`` when set, else its ``diagnosis``).
Then a class made of those learners goes through the class report, whose "teach next" must rank
the roots, and the learner's own next step must name the root.

The runs are in this process, like ``test_mistakes.py``; the whole catalogue takes minutes, so
select with ``-k`` (``-k hook`` for the hook mistakes of exercise 3).
"""

from __future__ import annotations

from collections import Counter

import pytest

from kata.diagnosis import diagnosis_of
from kata.grading.class_report import summarize_class
from kata.grading.records import ExerciseResult, Outcome, SubmissionResult, TestRecord
from kata.grading.reports import next_step
from kata.grading.results import exercise_status, root_failure
from tests.maintainer.planting import EXERCISES, catalogue, run_planted
from tests.mistakes import Mistake

pytestmark = pytest.mark.maintainer

MISTAKES: list[Mistake] = catalogue("mistakes", "MISTAKES")


class EveryOutcome:
    """A pytest plugin object that records every test as the grader's recorder would: outcome,
    diagnosis id, whether it reached an untouched stub."""

    def __init__(self, exercise_id: str):
        self.exercise_id = exercise_id
        self.records: dict[str, TestRecord] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when != "call" and not report.failed and not report.skipped:
            return
        if report.nodeid in self.records and self.records[report.nodeid].outcome is not \
                Outcome.PASSED:
            return  # the first failing phase is the verdict
        error = call.excinfo.value if call.excinfo is not None else None
        found = diagnosis_of(error)
        result = (Outcome.SKIPPED if report.skipped else Outcome.FAILED if report.failed
                  else Outcome.PASSED)
        self.records[report.nodeid] = TestRecord(
            report.nodeid, self.exercise_id, item.name, result,
            str(error)[:400] if error is not None else "",
            stub=isinstance(error, NotImplementedError),
            diagnosis=found.id if found is not None else None)


def _graded(mistake: Mistake, rootpath, tmp_path) -> ExerciseResult:
    """The exercise's tests on the tiny model first; all of them when none of those fails
    (mistakes that only a trained Llama-family model shows), as ``test_mistakes.py`` does."""
    for selection in (["-m", "not trained"], []):
        plugin = EveryOutcome(mistake.exercise)
        run_planted(mistake, rootpath, tmp_path, plugin, selection)
        if any(t.outcome is Outcome.FAILED for t in plugin.records.values()):
            break
    tests = list(plugin.records.values())
    status, message = exercise_status(tests)
    return ExerciseResult(EXERCISES[mistake.exercise], status, tests, message)


_GRADED: dict[tuple[str, str], ExerciseResult] = {}


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: f"{m.exercise}-{m.id}")
def test_the_root_diagnosis_of_each_catalogued_mistake(mistake, request, tmp_path, capsys):
    row = _graded(mistake, request.config.rootpath, tmp_path)
    capsys.readouterr()
    _GRADED[mistake.exercise, mistake.id] = row
    root = root_failure(row)
    named = dict(sorted(Counter(t.diagnosis for t in row.counted
                                if not t.passed and t.diagnosis).items()))
    print(f"{mistake.exercise}/{mistake.id}: root {root and root.diagnosis}, named {named}")
    assert root is not None, f"no failing test names a diagnosis for '{mistake.summary}'"
    assert root.diagnosis == mistake.root_diagnosis, (
        f"for '{mistake.summary}' the root is {root.diagnosis!r}, the catalogue says "
        f"{mistake.root_diagnosis!r} (failing tests name {named})")
    text = next_step(SubmissionResult("learner", [row]), {})
    assert mistake.root_diagnosis in text or root is row.first_failure(), text
    from kata.grading.classroom import reporter_result

    score = sum(t["score"] for t in reporter_result(row)["tests"])
    if not row.exercise.bonus:  # Classroom's step gives what the batch gives
        assert abs(score - row.points) <= 0.01, (score, row.points)


def test_the_report_ranks_the_hook_that_returns_nothing_under_its_root(request, tmp_path,
                                                                       capsys):
    """The learner of issue 26 whose hook returns nothing: "teach next" says a hook must
    return, not tuples against tensors."""
    by_id = {(m.exercise, m.id): m for m in MISTAKES}
    rows = []
    for key in (("ex3", "hook-returns-none"), ("ex3", "hook-returns-none"),
                ("ex3", "hook-tensor-as-tuple")):
        row = _GRADED.get(key) or _graded(by_id[key], request.config.rootpath, tmp_path)
        _GRADED[key] = row
        rows.append(row)
    capsys.readouterr()
    results = [SubmissionResult(f"learner-{i}", [row]) for i, row in enumerate(rows)]
    summary = summarize_class(results, [EXERCISES["ex3"]])
    assert [r.id for r in summary.teach_next][:2] == ["hook-returns-none",
                                                      "hook-tensor-as-tuple"]
    top = summary.teach_next[0]
    assert top.learners == 2 and top.explained >= 4
    assert "learner-" not in top.example, "the example is anonymised"
