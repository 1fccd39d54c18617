"""One exercise graded alone: ``python grader.py check N`` (exit status 0 when it is done, a
pass/fail autograder step) and each step of the Classroom workflow (:mod:`grading.views.classroom`).

It grades with the grader's runner (time limit, crash and memory handling) and needs only the
kata's ``kata/``, ``course/`` and ``exercises/``, never an exercise's solution, so it runs in a
template repository that does not ship them.
"""

from __future__ import annotations

from pathlib import Path

from grading.core.declarations import load_exercises

from grading.views import learner
from grading.core.records import SubmissionResult
from grading.box.submissions import (GradingOptions, grade_batch, grade_in_place,
                                     prepare_shared_model_cache)

#: Wall-clock seconds per exercise: generous, since a CI runner may be slow or busy.
DEFAULT_TIMEOUT = 300.0
ROOT = Path(__file__).resolve().parents[2]


def grade_exercise(number: int | str, root: Path | None = None, impl: str = "exercises",
                   timeout: float = DEFAULT_TIMEOUT, memory_limit_mb: int = 0,
                   across_the_boundary: bool = False) -> SubmissionResult:
    """Grade one exercise (``2``, ``"2"`` or ``"ex2"``) of ``root/impl``: in place, as the
    learner's own ``check`` does, or ``across_the_boundary`` as the batch grades it (the tests
    here, the learner's functions in a process of their own, without a sandbox), so that a
    Classroom step gives the batch's points and words for every fault."""
    root = Path(root or ROOT)
    exercise = learner.find_exercise(load_exercises(), str(number))
    prepare_shared_model_cache()
    options = GradingOptions(timeout=timeout, memory_limit_mb=memory_limit_mb)
    if not across_the_boundary:
        return grade_in_place(root, [exercise], impl, options)
    [result] = grade_batch([root], root, [exercise], options)
    return result
