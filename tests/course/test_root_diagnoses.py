"""Root diagnoses: what the report ranks and the learner reads first is the mistake that explains
the most failures, not the first test's symptom (issue 26, item 2).

For each catalogued mistake (``course/<module>/mistakes.py``), every test of its exercise runs against the
solutions with the mistake planted (the tiny-model tests: ``-m "not trained"``; a test the
mistake's functions cannot reach keeps the solution's record, ``planting.Reach``); the records are
built as the grader builds them, and :func:`grading.core.results.root_failure` must name the
catalogue's root (``Mistake.root_diagnosis``: its ``root`` when set, else its ``diagnosis``).
Then a class made of those learners goes through the class report, whose "teach next" must rank
the roots, and the learner's own next step must name the root.

The runs are in this process, and they are the runs ``test_mistakes.py`` reads for the learner's
own ``pytest`` (``planting.planted_run``: once per process for each mistake, in one session for
an exercise); the whole catalogue takes minutes, so select with ``-k`` (``-k hook`` for the hook
mistakes of exercise 3).
"""

from __future__ import annotations

from collections import Counter

import pytest

from course.shared.catalogue import load

from grading.views.class_report import summarize_class
from grading.core.records import ExerciseResult, SubmissionResult
from grading.views.reports import next_step
from grading.core.results import exercise_status, root_failure
from tests.course.planting import EXERCISES, planted_run
from course.shared.catalogue import Mistake


MISTAKES: list[Mistake] = load("mistakes")


def _graded(mistake: Mistake, request) -> ExerciseResult:
    """The exercise's records with the mistake planted, as the grader builds its row."""
    tests = planted_run(mistake, request).records
    status, message = exercise_status(tests)
    return ExerciseResult(EXERCISES[mistake.exercise], status, tests, message)


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: f"{m.exercise}-{m.id}")
def test_the_root_diagnosis_of_each_catalogued_mistake(mistake, request, capsys):
    row = _graded(mistake, request)
    capsys.readouterr()
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
    from grading.views.classroom import reporter_result

    score = sum(t["score"] for t in reporter_result(row)["tests"])
    if not row.exercise.bonus:  # Classroom's step gives what the batch gives
        assert abs(score - row.points) <= 0.01, (score, row.points)


def test_the_report_ranks_the_hook_that_returns_nothing_under_its_root(request, capsys):
    """The learner of issue 26 whose hook returns nothing: "teach next" says a hook must
    return, not tuples against tensors."""
    by_id = {(m.exercise, m.id): m for m in MISTAKES}
    rows = []
    for key in (("ex3", "hook-returns-none"), ("ex3", "hook-returns-none"),
                ("ex3", "hook-tensor-as-tuple")):
        rows.append(_graded(by_id[key], request))
    capsys.readouterr()
    results = [SubmissionResult(f"learner-{i}", [row]) for i, row in enumerate(rows)]
    summary = summarize_class(results, [EXERCISES["ex3"]])
    assert [r.id for r in summary.roots][:2] == ["hook-returns-none", "hook-tensor-as-tuple"]
    # "teach next" lists the mistakes several learners share (issue 49): not the one of one
    assert [r.id for r in summary.teach_next] == ["hook-returns-none"]
    top = summary.teach_next[0]
    assert top.learners == 2 and top.explained >= 4
    assert "learner-" not in top.example, "the example is anonymised"
