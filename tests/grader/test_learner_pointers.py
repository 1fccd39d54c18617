"""What the grader and the notebook point a learner to: the next exercise, the next hint.

* "Next:" names the exercise the learner is working on: the unfinished one whose file they
  changed last (issue 49), and then which earlier exercise is still open; without one, the first
  unfinished *main* exercise, and a bonus only once they are done.
* The notebook's ``check(n)`` row shows one hint, at the level ``grader.py hint`` has reached
  (level 1 at first), as text, never the manifest's raw record or every level at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import grading.views.notebook as notebook
from grading.views.learner import HINTS_FILE
from grading.core.records import ExerciseResult, Outcome, Status, SubmissionResult, TestRecord
from grading.views.reports import next_step
from grading.core.declarations import load_exercises


EXERCISES = load_exercises()


def submission(done: set[str]) -> SubmissionResult:
    rows = [ExerciseResult(e, Status.DONE if e.id in done else Status.NOT_STARTED)
            for e in EXERCISES]
    return SubmissionResult("me", rows)


def test_next_is_the_first_unfinished_main_exercise_then_the_bonus():
    main = [e for e in EXERCISES if not e.bonus]
    bonus = [e for e in EXERCISES if e.bonus]
    assert bonus, "the manifest has a bonus exercise"
    # every main exercise before the first bonus is done: the next is a main one, not the bonus
    before_bonus = {e.id for e in EXERCISES[:EXERCISES.index(bonus[0])] if not e.bonus}
    later_main = [e for e in main if e.id not in before_bonus]
    if later_main:
        text = next_step(submission(before_bonus), {})
        assert text.startswith(f"Next: {later_main[0].id} "), text
    # every main exercise done: now the bonus
    text = next_step(submission({e.id for e in main}), {})
    assert text.startswith(f"Next: {bonus[0].id} "), text


def test_next_is_the_exercise_changed_last_and_names_the_earlier_one_still_open():
    main = [e for e in EXERCISES if not e.bonus]
    first, later = main[0], main[-1]
    result = submission({e.id for e in main} - {first.id, later.id})
    text = next_step(result, {}, current=later.id)
    assert text.startswith(f"Next: {later.id} {later.title} "), text
    assert "the exercise you changed last" in text
    assert f"still open before it: {first.id} {first.title} (not started)" in text, text
    # without one, or when it is the first unfinished anyway: the first unfinished one
    assert next_step(result, {}).startswith(f"Next: {first.id} ")
    assert "still open" not in next_step(result, {}, current=first.id)


def test_grader_names_the_exercise_edited_last_as_next(tmp_path):
    """``python grader.py`` on a toy kata where exercise 1 is unfinished, 2 to 5 are done and 6
    was edited last (half done); the untouched bonus stub, written later still, does not count:
    "Next" is exercise 6, and exercise 1 is named as still open."""
    from grading.core import stubs, synthetic
    from tests.grader.test_grader import build_toy_kata

    kata = build_toy_kata(tmp_path / "kata")
    main = [e for e in EXERCISES if not e.bonus]
    one, six = main[0], main[-1]  # ex1 and ex6
    kinds = {e.id: "correct" for e in main} | {one.id: "wrong", six.id: "stub_one"}
    now = time.time()
    ago = {e.id: 3600 - 60 * k for k, e in enumerate(main)} | {six.id: 60}
    for exercise in EXERCISES:
        target = kata / exercise.source("exercises")
        if exercise.id in kinds:
            target.write_text(synthetic.exercise_source(kata, exercise, kinds[exercise.id]))
        else:  # the bonus exercises, as handed out, written after everything else
            target.write_text(stubs.stub_text(exercise, kata))
        when = now - ago.get(exercise.id, 0)
        os.utime(target, (when, when))
    process = subprocess.run([sys.executable, "grader.py"], cwd=kata, capture_output=True,
                             text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    out = process.stdout
    assert process.returncode == 1, out + process.stderr[-2000:]
    assert f"Next: {six.id} {six.title} (edit {six.source()}; the exercise you changed last)" \
        in out, out
    assert f"still open before it: {one.id} {one.title} (failing)" in out, out
    assert not any(f"Next: {e.id} " in out for e in EXERCISES if e.bonus), out


def failing_check(exercise, function):
    record = TestRecord(f"{exercise.folder}/test_public.py::test_{function}", exercise.id,
                        f"test_{function}", Outcome.FAILED, "AssertionError: wrong", function=function)
    check = notebook.CheckResult(exercise, ExerciseResult(exercise, Status.FAILING, (record,)),
                                 "exercises")
    return squeezed(repr(check))  # the text as printed, lines joined


def squeezed(text: str) -> str:
    """``text`` without whitespace: the table wraps long hints at spaces and hyphens."""
    return "".join(text.split())


def test_the_notebook_check_shows_the_hint_level_reached(tmp_path, monkeypatch):
    monkeypatch.setattr(notebook, "ROOT", tmp_path)  # where .kata-hints.json is read
    exercise = EXERCISES[0]
    function = next(h.function for h in exercise.hints if len(h.levels) >= 2)
    levels = exercise.hints_for(function)

    shown = failing_check(exercise, function)
    assert squeezed(levels[0]) in shown and f"hint1of{len(levels)}" in shown, shown
    assert not any(squeezed(level) in shown for level in levels[1:]), "one level at a time"
    assert "FunctionHints" not in shown and "levels=" not in shown, shown

    (tmp_path / HINTS_FILE).write_text(json.dumps({"levels": {exercise.id: {function: 2}}}))
    shown = failing_check(exercise, function)
    assert squeezed(levels[1]) in shown and f"hint2of{len(levels)}" in shown, shown
    assert squeezed(levels[0]) not in shown, shown
