"""Every catalogued correct variant passes every test of its exercise: no false alarms.

For each variant in ``tests/variants/exN.py``: run exercise N's tests against the solution with
the variant planted (``--kata-patch``, the mechanism of ``test_mistakes.py``: the tests its
functions reach, ``planting.Reach``) and require that no test fails. A failure here is a false
alarm in the exercise's tests (a check that demands one way of writing a correct answer): fix the
test, not the variant, unless the variant is wrong.
The runs happen in this process, one pytest session for all the variants of an exercise
(``planting.EveryEntry``), so the session's models are loaded once for all of them.
"""

from __future__ import annotations


import pytest

from course.shared.catalogue import load

from course.shared.diagnosis import diagnosis_of
from tests.course.planting import (
    ALL,
    EXERCISES,
    FAST,
    defined_functions,
    one_pass_each,
    planted_results,
    run_passes,
)
from course.shared.catalogue import Variant


MIN_VARIANTS_PER_EXERCISE = 4


VARIANTS: list[Variant] = load("variants")


class Outcomes:
    """A pytest plugin object that keeps every failing test of a run (all phases) and counts."""

    def __init__(self):
        self.failures: list[str] = []
        self.passed = 0
        self.skipped = 0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.failed:
            error = call.excinfo.value if call.excinfo is not None else None
            found = diagnosis_of(error)
            lines = report.longreprtext.strip().splitlines()
            last = lines[-1][:400] if lines else ""
            named = f" [{found.id}]" if found is not None else ""
            self.failures.append(f"{report.nodeid} ({report.when}){named}: {last}")
        elif report.when == "call":
            self.passed += report.passed
            self.skipped += report.skipped
        elif report.skipped:
            self.skipped += 1

    def pytest_collectreport(self, report):
        if report.failed:
            self.failures.append(f"collection of {report.nodeid} failed: {report.longreprtext[-400:]}")


def all_outcomes(variants: list[Variant], rootpath, directory,
                 boundary: str = "pytest") -> dict[str, Outcomes]:
    """Each variant's outcomes, one pytest session for all of them (one exercise's)."""
    exercise = EXERCISES[variants[0].exercise]
    # an exercise's manifest entry may leave its trained-model tests out of this check (each
    # variant would redo a long SmolLM2 computation that the tiny-model tests pin down exactly);
    # across the boundary, the tiny-model tests hold every kind of value that crosses (hooks,
    # toys, identities, figures); the trained-model tests only compare numbers
    selection = ALL if exercise.variants_on_trained_models and boundary == "pytest" else FAST
    results: dict[str, Outcomes] = {}
    run_passes(exercise.id, one_pass_each(variants, Outcomes, selection, results), rootpath,
               directory, boundary=boundary)
    return results


def test_catalogue_has_enough_variants_for_every_exercise():
    counts = {exercise_id: 0 for exercise_id in EXERCISES}
    for variant in VARIANTS:
        counts[variant.exercise] += 1
    few = {exercise_id: n for exercise_id, n in counts.items() if n < MIN_VARIANTS_PER_EXERCISE}
    assert not few, f"every exercise needs {MIN_VARIANTS_PER_EXERCISE} correct variants: {few}"
    names = [variant.name for variant in VARIANTS]
    assert len(names) == len(set(names)), "variant ids must be unique within an exercise"
    assert all(variant.summary for variant in VARIANTS), "say which learner style each variant shows"
    for variant in VARIANTS:
        exercise = EXERCISES[variant.exercise]
        assert defined_functions(variant.code) <= set(exercise.functions), (
            f"{variant.name} may redefine only {exercise.id}'s public functions "
            f"{exercise.functions}, it defines {sorted(defined_functions(variant.code))}")


@pytest.mark.parametrize("boundary", ["pytest", "grader"])
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_correct_variant_passes_every_test(variant, boundary, request, capsys):
    """No false alarm for the learner's own ``pytest``, nor for the grader, which runs the code
    across its trust boundary."""
    outcomes = planted_results("variants", variant, boundary, request,
                               lambda variants, directory: all_outcomes(
                                   variants, request.config.rootpath, directory, boundary))
    capsys.readouterr()  # the inner run's output is noise here
    assert not outcomes.failures, (
        f"a correct variant ({variant.summary}) fails {len(outcomes.failures)} test(s) of "
        f"{variant.exercise}: false alarms to fix in the tests:\n  " + "\n  ".join(outcomes.failures)
    )
    assert outcomes.passed > 0, f"no test of {variant.exercise} ran for the variant {variant.name}"


@pytest.mark.parametrize("boundary", ["pytest", "grader"])
def test_the_check_reports_a_wrong_variant_between_right_ones(boundary, request, tmp_path,
                                                             capsys):
    """The harness itself: a catalogued mistake planted as a "variant" must show failures, and
    the variants planted before and after it in the same session must not (each pass plants
    its own code, in this process and in the forked learner)."""
    from course.ex4_fast_scaling.mistakes import MISTAKES as EX4_MISTAKES

    mistake = next(m for m in EX4_MISTAKES if m.id == "clean-row-kept")
    right = next(v for v in VARIANTS if v.exercise == "ex4")
    wrong = Variant(id="wrong", exercise="ex4", summary="a mistake in disguise", code=mistake.code)
    again = Variant(id="again", exercise="ex4", summary=right.summary, code=right.code)
    outcomes = all_outcomes([right, wrong, again], request.config.rootpath, tmp_path, boundary)
    capsys.readouterr()
    assert any("clean-row-kept" in failure for failure in outcomes["wrong"].failures), \
        outcomes["wrong"].failures
    for variant in (right, again):
        assert not outcomes[variant.id].failures and outcomes[variant.id].passed > 0, (
            variant.id, outcomes[variant.id].failures)
