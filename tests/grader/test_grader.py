"""The grader: statuses, points, hints, reports, and robustness against hostile submissions.

Most tests grade a *toy kata* built in a temporary folder: the real learner kit, grader,
conftest, pyproject and declarations (so the same exercise ids, points, hints and function names,
however many exercises there are), but each exercise's functions are one-liners with one fast
test each. The grading machinery is exactly the real one; only the tests are quicker than the real
exercises' model-based tests. One batch of synthetic submissions (solutions with one function
broken in each exercise, see ``grading.core.synthetic``) is graded once per module by the real
command line, with a small timeout and two jobs, and each kind of fault is checked separately.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from grading.views import learner, reports

from grading.core import synthetic
from grading.core.records import (ExerciseResult, Outcome, Status, SubmissionResult,
                                  TestRecord)
from grading.core.results import exercise_status
from grading.box.submissions import GradingOptions, exercise_files, grade_in_place
from grading.core.declarations import load_exercises

REPO = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()
CORE_POINTS = sum(e.points for e in EXERCISES if not e.bonus)
ALL_POINTS = sum(e.points for e in EXERCISES)  # bonus points are extra credit
BATCH_TIMEOUT = 15  # seconds per exercise: the toy tests take milliseconds, but a flood of
# prints through a loaded machine (2 cores, other graders) has been seen to take 5 s
BATCH_MEMORY_MB = 3000  # the "memory" fault asks for 6 GiB



# --------------------------------------------------------------------------- the toy kata


def _toy_module(exercise, stub: bool) -> str:
    lines = [f'"""Toy {exercise.id}: each function adds its position to x."""\n']
    for k, name in enumerate(exercise.functions):
        body = "raise NotImplementedError" if stub else f"return x + {k}"
        hint = exercise.hints_for(name)[0]
        lines.append(f"\ndef {name}(x):\n    \"\"\"x + {k}.\n\n    Hint: {hint}\n    \"\"\"\n"
                     f"    {body}\n")
    return "".join(lines)


RETURNS_NONE = "toy-returns-none"  # the diagnosis each toy function test names


def _toy_tests(exercise) -> str:
    """One test and one secret check per function, and more for the first one (where faults are
    planted). Each test calls
    its function 20 times, as real tests call a function often: the "prints" fault then prints
    2.8 GB in all, which must cost neither memory nor much time. A function that returns None
    is diagnosed as :data:`RETURNS_NONE`; the first function's extra tests name no diagnosis."""
    first = exercise.functions[0]
    lines = ["import pytest\n\nfrom course.shared.diagnosis import diagnose\n"
             "from course.shared.secret import secret, secret_check  # noqa: F401\n"]
    for k, name in enumerate(exercise.functions):
        lines.append(f"\n\ndef test_{name}(ex):\n"
                     f"    value = [ex.{name}(1) for _ in range(20)][-1]\n"
                     f"    if value is None:\n"
                     f"        diagnose('{RETURNS_NONE}', '{name}(1) returned None: return x + {k}')\n"
                     f"    assert value == {1 + k}, "
                     f"f\"{name}(1) should be {1 + k}, got {{value}}\"\n")
    lines.append(f"\n\n@pytest.mark.parametrize('x', range(6))\n"
                 f"def test_{first}_again(ex, x):\n"
                 f"    assert [ex.{first}(x) for _ in range(20)][-1] == x\n")
    lines.append("\n\ndef test_needs_gpt2():\n    pytest.skip('needs GPT-2, not in the cache')\n")
    for k, name in enumerate(exercise.functions):  # last, as in the kata's own test files
        lines.append(f"\n\n@secret_check('{name}')\ndef test_secret_{name}(ex, secret):\n"
                     f"    x = secret.number(2, 1000)  # a draw no table can hold\n"
                     f"    assert ex.{name}(x) == x + {k}\n")
    return "".join(lines)


def build_toy_kata(target: Path) -> Path:
    """The real kit, grader and shared course code, and toy exercises with the real
    declarations: ``course/<module>/`` holds each one's exercise.toml, a toy solution and toy
    tests; ``exercises/`` the toy stubs."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("kata", "grading", "course/shared"):
        shutil.copytree(REPO / folder, target / folder, ignore=ignore)
    for name in ("conftest.py", "pyproject.toml", "grader.py", "course/__init__.py"):
        shutil.copy2(REPO / name, target / name)
    (target / "exercises").mkdir()
    (target / "exercises" / "__init__.py").write_text("")
    for exercise in EXERCISES:
        folder = target / exercise.folder
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        shutil.copy2(REPO / exercise.folder / "exercise.toml", folder / "exercise.toml")
        (target / exercise.source("exercises")).write_text(_toy_module(exercise, stub=True))
        (target / exercise.source("solutions")).write_text(_toy_module(exercise, stub=False))
        (folder / "test_public.py").write_text(_toy_tests(exercise))
    return target


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return build_toy_kata(tmp_path_factory.mktemp("toy") / "kata")


# --------------------------------------------------------------------------- one graded batch

FAULTS = ["loop", "sys_exit", "os_exit", "segfault", "memory", "prints", "syntax_error",
          "import_error", "imports_solutions", "wrong", "stub_one", "missing"]
LAYOUTS = ["repo", "zip", "exercises", "flat"]


def _plan() -> list[tuple[str, dict, str, bool]]:
    """(name, {exercise id: kind}, layout, ships hostile extras) for every submission.

    The last faulty submission also ships a conftest.py that passes every test, a pytest.ini
    that deselects every test, its own tests and solutions, and declarations worth 1000 points.
    """
    spread = synthetic.spread(FAULTS, EXERCISES)
    plan = [(f"faults{i}", kinds, LAYOUTS[i % len(LAYOUTS)], i == len(spread) - 1)
            for i, kinds in enumerate(spread)]
    plan.append(("correct", {}, "zip", False))
    return plan


@pytest.fixture(scope="module")
def batch(toy, tmp_path_factory):
    """Grade every planned submission once, through ``grader.py``, and load what it wrote."""
    folder = tmp_path_factory.mktemp("submissions")
    paths = [synthetic.make_submission(toy, folder / name, kinds, EXERCISES, layout, extras)
             for name, kinds, layout, extras in _plan()]
    paths.append(folder / "does-not-exist")
    out = tmp_path_factory.mktemp("results")
    started = time.monotonic()
    process = subprocess.run(
        [sys.executable, str(toy / "grader.py"), "batch", *map(str, paths), "-j", "2",
         "--timeout", str(BATCH_TIMEOUT), "--memory-limit", str(BATCH_MEMORY_MB),
         "--csv", str(out / "grades.csv"), "--json", str(out / "grades.json"),
         "--gradescope", str(out / "gradescope"), "--report", str(out / "report.html"),
         "--lanes", "2"],  # two exercises at once in each submission's warm worker
        cwd=toy, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - started
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-3000:]
    data = json.loads((out / "grades.json").read_text())
    submissions = [SubmissionResult.from_json(s, EXERCISES) for s in data["submissions"]]
    return {"out": out, "stdout": process.stdout, "seconds": seconds,
            "submissions": {s.name: s for s in submissions}, "json": data}


def _cases():
    for name, kinds, _, extras in _plan():
        for exercise in EXERCISES:
            yield pytest.param(name, exercise.id, kinds.get(exercise.id, "correct"),
                               id=f"{name}-{exercise.id}-{kinds.get(exercise.id, 'correct')}")


def _toy_expected(kind: str, exercise) -> tuple[Status, ...]:
    """In the toy kata each test calls one function, so a fault in the first function leaves
    the others passing, unless the exercise has only that function."""
    if kind in ("sys_exit", "stub_one"):
        if len(exercise.functions) > 1:
            return (Status.IN_PROGRESS,)
        return (Status.FAILING,) if kind == "sys_exit" else (Status.NOT_STARTED,)
    return synthetic.EXPECTED_STATUS[kind]


def _row(batch, name: str, exercise_id: str) -> ExerciseResult:
    return next(r for r in batch["submissions"][name].exercises if r.exercise.id == exercise_id)


@pytest.mark.parametrize("name, exercise_id, kind", list(_cases()))
def test_each_kind_of_submission_gets_its_own_clear_status(batch, name, exercise_id, kind):
    row = _row(batch, name, exercise_id)
    assert row.status in _toy_expected(kind, row.exercise), (
        f"{name} {exercise_id} ({kind}) graded {row.status!r}: {row.message}")
    failures = [t.message for t in row.tests if not t.passed]
    words = synthetic.EXPECTED_WORDS.get(kind)
    if words:
        text = "\n".join([row.message, *failures])
        assert words in text, f"{name} {exercise_id} ({kind}): {words!r} not in {text!r}"
    if kind in ("correct", "prints"):
        assert row.points == row.max_points


def test_the_report_shows_the_numbers_of_the_batchs_json(batch):
    """``--report`` on the real command line: every number of the class report, for a batch of
    every kind of fault, is the number its grades.json gives."""
    from tests.end_to_end.test_class_grading import Page, check_report_against_json

    page = Page((batch["out"] / "report.html").read_text(encoding="utf-8"))
    data = batch["json"]["submissions"]
    assert [s["name"] for s in data] == [name for name, *_ in _plan()] + ["does-not-exist"]
    check_report_against_json(page, data)
    assert RETURNS_NONE in {row["data-diagnosis"] for row in page.having("tr", "data-diagnosis")}


def test_a_submission_cannot_change_which_tests_run_or_their_points(batch):
    name, kinds, _, extras = _plan()[-2]
    assert extras
    hostile = batch["submissions"][name]
    correct = batch["submissions"]["correct"]
    assert hostile.max_points == correct.max_points == CORE_POINTS
    for mine, theirs in zip(hostile.exercises, correct.exercises):
        if kinds.get(mine.exercise.id, "correct") != "missing":  # the instructor's tests, all
            assert [t.nodeid for t in mine.tests] == [t.nodeid for t in theirs.tests]
        assert mine.max_points == theirs.max_points
    assert (correct.points, correct.max_points) == (ALL_POINTS, CORE_POINTS)
    assert (correct.main_points, correct.bonus_points) == (CORE_POINTS, ALL_POINTS - CORE_POINTS)


def test_an_unreadable_submission_still_gets_a_row(batch):
    row = batch["submissions"]["does-not-exist"]
    assert {e.status for e in row.exercises} == {Status.MISSING}
    assert "does not exist" in row.exercises[0].message


def test_the_json_names_each_diagnosis_and_each_stub_reached(batch):
    """A test that calls ``diagnose`` puts its id into the JSON; a stub reached is named."""
    kinds = {(name, exercise_id): kind for name, plan, _, _ in _plan()
             for exercise_id, kind in plan.items()}
    wrong = next(key for key, kind in kinds.items() if kind == "wrong")
    row = _row(batch, *wrong)
    for test in row.tests:
        named = test.name in {f"test_{f}" for f in row.exercise.functions}
        assert test.diagnosis == (RETURNS_NONE if named else None), test
    raw = next(s for s in batch["json"]["submissions"] if s["name"] == wrong[0])
    raw_row = next(r for r in raw["exercises"] if r["id"] == wrong[1])
    assert all("diagnosis" in t for t in raw_row["tests"])
    gradescope = json.loads((batch["out"] / "gradescope" / f"{wrong[0]}.json").read_text())
    assert {"diagnosis": RETURNS_NONE} in [t.get("extra_data") for t in gradescope["tests"]]
    stub_one = next(key for key, kind in kinds.items() if kind == "stub_one")
    row = _row(batch, *stub_one)
    first = row.exercise.functions[0]
    assert {t.function for t in row.tests if t.stub} == {first}
    assert all(t.diagnosis is None for t in _row(batch, "correct", wrong[1]).tests)


def test_csv_has_one_row_per_submission(batch):
    with open(batch["out"] / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(r["name"] for r in rows) == sorted(batch["submissions"])
    correct = next(r for r in rows if r["name"] == "correct")
    assert correct["all_done"] == "True"
    assert "total" not in correct, "no column mixes the main part and the bonus"
    assert (float(correct["main"]), float(correct["max"])) == (CORE_POINTS, CORE_POINTS)
    assert (float(correct["bonus"]), float(correct["bonus_max"])) == (ALL_POINTS - CORE_POINTS,
                                                                      ALL_POINTS - CORE_POINTS)
    assert all(f"{e.id}_status" in rows[0] for e in EXERCISES)


def test_gradescope_file_per_submission(batch):
    for name, submission in batch["submissions"].items():
        data = json.loads((batch["out"] / "gradescope" / f"{name}.json").read_text())
        assert data["score"] == submission.points
        assert {t["status"] for t in data["tests"]} <= {"passed", "failed"}
        keys = {"name", "score", "max_score", "status", "output", "visibility"}
        assert all(keys <= set(test) for test in data["tests"])
        core_max = sum(t["max_score"] for t in data["tests"] if "extra credit" not in t["name"])
        assert core_max == pytest.approx(submission.max_points, abs=0.01)
        assert {"torch", "transformers", "device", "models"} <= set(data["extra_data"])
    skipped = json.loads((batch["out"] / "gradescope" / "correct.json").read_text())
    assert not any("needs_gpt2" in t["name"] for t in skipped["tests"])  # skips count for nothing


def test_results_record_versions_model_and_device(batch):
    environment = batch["submissions"]["correct"].environment
    assert environment["torch"] and environment["transformers"] and environment["device"]


def test_the_batch_is_fast_enough(batch):
    print(f"graded {len(batch['submissions'])} submissions in {batch['seconds']:.1f} s")
    assert batch["seconds"] < 120


# --------------------------------------------------------------------------- learners


@pytest.fixture(scope="module")
def learner_results(toy, tmp_path_factory):
    """Graded at the same time: the toy's stubs, its solutions, and a "mixed" copy where the first
    exercise does not import, the second's test file does not collect, the last has one wrong
    function and any others are solved."""
    work = build_toy_kata(tmp_path_factory.mktemp("learner") / "kata")
    for exercise in EXERCISES:
        shutil.copy2(work / exercise.source("solutions"), work / exercise.source("exercises"))
    first, last = EXERCISES[0], EXERCISES[-1]
    broken = work / first.source("exercises")
    broken.write_text(broken.read_text() + "\n\ndef broken(:\n    pass\n")
    wrong = work / last.source("exercises")
    wrong.write_text(wrong.read_text() + f"\n\ndef {last.functions[-1]}(x):\n    return x + 100\n")
    (work / EXERCISES[1].folder / "test_public.py").write_text("def test_(:\n")  # does not collect
    jobs = {"stubs": (toy, "exercises"), "solutions": (toy, "solutions"),
            "mixed": (work, "exercises")}
    options = GradingOptions(timeout=30)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {key: pool.submit(grade_in_place, root, EXERCISES, impl, options)
                   for key, (root, impl) in jobs.items()}
    results = {key: future.result() for key, future in futures.items()}
    results["broken line"] = len(broken.read_text().splitlines()) - 1
    results["work"] = work
    return results


def test_learner_view_on_stubs_and_solutions(learner_results):
    stubs = reports.learner_report(learner_results["stubs"], {}, "title")
    first = EXERCISES[0]
    for exercise in EXERCISES:
        assert f"{exercise.id:<4}{exercise.title}" in stubs
    assert stubs.count("not started") >= len(EXERCISES) and not learner_results["stubs"].all_done
    assert f"Next: {first.id} {first.title}" in stubs
    hints = first.hints_for(first.functions[0])
    assert f"{first.functions[0]}() hint 1 of {len(hints)}: {hints[0]}" in stubs
    solved = reports.learner_report(learner_results["solutions"], {}, "title")
    assert learner_results["solutions"].all_done
    assert solved.count(" done ") == len(EXERCISES)
    assert "All exercises are done" in solved


def test_learner_sees_the_first_failure_or_the_import_error(learner_results):
    result = learner_results["mixed"]
    first, last = EXERCISES[0], EXERCISES[-1]
    statuses = {r.exercise.id: r.status for r in result.exercises}
    assert statuses[first.id] is Status.NOT_IMPORTED
    assert (f"{first.source('exercises')} does not import (line {learner_results['broken line']})"
            in result.exercises[0].message)
    assert statuses[last.id] is (Status.IN_PROGRESS if len(last.functions) > 1
                                 else Status.FAILING)
    assert all(statuses[e.id] is Status.DONE for e in EXERCISES[2:-1])
    assert statuses[EXERCISES[1].id] is Status.ERROR
    assert f"no tests collected from {EXERCISES[1].tests}" in result.exercises[1].message
    text = reports.next_step(result, {})
    assert text.startswith(f"Next: {first.id}") and "SyntaxError" in text
    fixed = [replace(row, status=Status.DONE) for row in result.exercises[:-1]]
    result = replace(result, exercises=(*fixed, result.exercises[-1]))  # the next step moves on
    text = reports.next_step(result, {last.id: {last.functions[-1]: 2}})
    k = len(last.functions) - 1
    assert f"first failing test: test_{last.functions[-1]}" in text
    assert f"{last.functions[-1]}(1) should be {1 + k}, got 101" in text
    hints = last.hints_for(last.functions[-1])
    assert f"{last.functions[-1]}() hint 2 of {len(hints)}: {hints[1]}" in text
    assert "Traceback" not in text and str(learner_results["work"]) not in text


def test_learner_command_line_hint_and_exit_status(toy, capsys):
    from grading.views.cli import main

    first = EXERCISES[0].functions[0]
    assert main(["hint", EXERCISES[0].id], root=toy) == 0
    assert EXERCISES[0].hints_for(first)[0] in capsys.readouterr().out
    assert learner.hint_levels(toy) == {EXERCISES[0].id: {first: 1}}


def test_hints_come_one_level_at_a_time(tmp_path):
    exercise = EXERCISES[1]
    function = exercise.functions[0]
    hints = exercise.hints_for(function)
    shown = [learner.reveal_next_hint(tmp_path, exercise) for _ in range(len(hints) + 1)]
    assert hints[0] in shown[0] and hints[1] not in shown[0]
    assert hints[1] in shown[1]
    assert "last hint" in shown[-1]
    assert learner.hint_levels(tmp_path) == {exercise.id: {function: len(hints)}}
    assert learner.find_exercise(EXERCISES, str(exercise.number)) is exercise
    assert learner.find_exercise(EXERCISES, exercise.id) is exercise
    with pytest.raises(SystemExit, match="no exercise"):
        learner.find_exercise(EXERCISES, "99")


def test_watch_notices_a_saved_file(toy):
    before = learner.snapshot(toy, EXERCISES, "exercises")
    path = toy / EXERCISES[0].source("exercises")
    time.sleep(0.01)
    path.write_text(path.read_text())
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))
    assert learner.snapshot(toy, EXERCISES, "exercises") != before


# --------------------------------------------------------------------------- the parts


def _record(outcome=Outcome.FAILED, **facts) -> TestRecord:
    return TestRecord("t", "ex1", "t", outcome, "m", **facts)


P, F, S = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED


@pytest.mark.parametrize("records, status", [
    ([_record(P), _record(P)], Status.DONE),
    ([_record(stub=True), _record(stub=True)], Status.NOT_STARTED),
    ([_record(stub=True), _record()], Status.FAILING),
    ([_record(P), _record(stub=True)], Status.IN_PROGRESS),
    ([_record(P), _record(S)], Status.DONE),
    ([_record(Outcome.ERROR, import_error=True)], Status.NOT_IMPORTED),
    ([_record(stub=True), _record(Outcome.ERROR, import_error=True)], Status.NOT_IMPORTED),
    ([], Status.ERROR),
    ([_record(P), _record(Outcome.TIMED_OUT), _record(Outcome.NOT_RUN)], Status.TIMED_OUT),
    ([_record(P), _record(Outcome.CRASHED)], Status.CRASHED),
    ([_record(P), _record(memory=True)], Status.OUT_OF_MEMORY),
])
def test_statuses_from_outcomes(records, status):
    assert exercise_status(records)[0] is status


def test_a_stub_is_never_a_mistake_whatever_its_record_says():
    """A record that reached an untouched stub carries no diagnosis, even read from a JSON line
    that names one (the environment's fault excepted: it is the machine's, never a mistake)."""
    record = _record(stub=True, function="f", diagnosis="log-probs-wrong")
    assert record.diagnosis is None
    assert TestRecord.validated({**record.to_json(), "diagnosis": "log-probs-wrong"}).diagnosis is None
    assert _record(diagnosis="log-probs-wrong").diagnosis == "log-probs-wrong"
    assert _record(stub=True, diagnosis="environment-fault").diagnosis == "environment-fault"


CAUGHT = "toy-caught-runtime-error"


def _catching_tests(exercise) -> str:
    """A test that catches ``RuntimeError`` around a call (``NotImplementedError`` is one) and
    names a mistake for it, as ``test_secret_next_token_log_probs_of_a_secret_text`` of
    exercise 3 does; and the exercise's secret checks."""
    first = exercise.functions[0]
    lines = ["import pytest\n\nfrom course.shared.diagnosis import diagnose\n"
             "from course.shared.secret import secret, secret_check  # noqa: F401\n",
             f"\n\ndef test_{first}_catches_runtime_errors(ex):\n"
             f"    try:\n        value = ex.{first}(1)\n"
             f"    except (IndexError, RuntimeError, ValueError) as error:\n"
             f"        diagnose('{CAUGHT}', f'{first} failed: {{error!r}}')\n"
             f"    assert value == 1\n"]
    for k, name in enumerate(exercise.functions):
        lines.append(f"\n\n@secret_check('{name}')\ndef test_secret_{name}(ex, secret):\n"
                     f"    x = secret.number(2, 1000)\n"
                     f"    try:\n        value = ex.{name}(x)\n"
                     f"    except RuntimeError as error:\n"
                     f"        diagnose('{CAUGHT}', f'{name} failed: {{error!r}}')\n"
                     f"    assert value == x + {k}\n")
    return "".join(lines)


def test_a_stub_caught_as_a_runtime_error_is_not_started_never_a_mistake(tmp_path):
    """Issue 49: a test that catches ``RuntimeError`` around a call also catches an untouched
    stub's ``NotImplementedError``, and named a mistake for it (6 learners in a class of 30
    were "diagnosed" so). Graded in place and across the grader's boundary (where the stub's
    exception is rebuilt, ``kata_stub``): the exercise is "not started", no record names a
    diagnosis. A real RuntimeError of the learner's is still diagnosed, in both."""
    from grading.views.check import grade_exercise

    exercise = EXERCISES[0]
    first = exercise.functions[0]
    graded = {}
    for name, body in (("stub", None), ("raises", "raise RuntimeError('shape mismatch')")):
        kata = build_toy_kata(tmp_path / name)
        (kata / exercise.folder / "test_public.py").write_text(_catching_tests(exercise))
        if body:
            source = kata / exercise.source("exercises")
            source.write_text(source.read_text().replace("raise NotImplementedError", body, 1))
        graded[name, "in place"] = grade_in_place(kata, [exercise], "exercises",
                                                  GradingOptions(timeout=60)).exercises[0]
        graded[name, "across"] = grade_exercise(exercise.number, kata, timeout=60,
                                                across_the_boundary=True).exercises[0]
    for way in ("in place", "across"):
        row = graded["stub", way]
        assert row.status is Status.NOT_STARTED, (way, row.status, row.message)
        assert row.tests and all(t.stub and t.diagnosis is None for t in row.tests), row.tests
        caught = next(t for t in row.tests if t.name == f"test_{first}_catches_runtime_errors")
        assert caught.function == first and "not written yet" in caught.message, caught
        raises = graded["raises", way]
        test = next(t for t in raises.tests if t.name == f"test_{first}_catches_runtime_errors")
        assert (test.stub, test.diagnosis) == (False, CAUGHT), (way, test)


def test_points_are_proportional_and_skips_count_for_nothing(toy):
    row = ExerciseResult(EXERCISES[0], Status.IN_PROGRESS,
                         [_record(P), _record(), _record(S), _record(P)])
    assert (row.passed, row.total, row.skipped) == (2, 3, 1)
    assert row.points == round(EXERCISES[0].points * 2 / 3, 2)


def test_points_are_capped_by_the_functions_their_secret_checks_confirm(toy):
    """An answer table for the public tests' inputs passes them, not the checks on inputs drawn
    from the batch's seed: the exercise earns the share of its functions that were confirmed."""
    exercise = replace(EXERCISES[0], functions=("f", "g", "h", "k"))
    public = [_record(P) for _ in range(8)]

    def checks(*verdicts):
        return [replace(_record(outcome), checks=(name,))
                for name, outcome in zip(exercise.functions, verdicts)]

    table = ExerciseResult(exercise, Status.IN_PROGRESS, public + checks(F, F, F, F))
    assert table.confirmed == () and table.points == 0
    half = ExerciseResult(exercise, Status.IN_PROGRESS, public + checks(P, P, F, Outcome.NOT_RUN))
    assert half.confirmed == ("f", "g") and half.points == round(exercise.points / 2, 2)
    honest = ExerciseResult(exercise, Status.DONE, public + checks(P, P, P, P))
    assert honest.points == exercise.points
    # a function with two checks is confirmed only when both pass
    two = public + checks(P, P, P, P) + [replace(_record(F), checks=("f", "g"))]
    assert ExerciseResult(exercise, Status.IN_PROGRESS, two).confirmed == ("h", "k")


def test_a_batch_refuses_an_exercise_without_secret_checks(tmp_path):
    from grading.box.submissions import refuse_unchecked
    from grading.core.declarations import DeclarationError

    exercise = load_exercises()[0]
    (tmp_path / exercise.folder).mkdir(parents=True)
    (tmp_path / exercise.folder / "test_public.py").write_text("def test_x():\n    pass\n")
    with pytest.raises(DeclarationError, match=f"{exercise.id}: {exercise.functions[0]}"):
        refuse_unchecked([exercise], tmp_path)


def _with_bonus(bonus_status: Status, bonus_test: TestRecord) -> SubmissionResult:
    """Every manifest exercise done, plus a bonus exercise "ex9"."""
    bonus = replace(EXERCISES[0], id="ex9", bonus=True)
    rows = [ExerciseResult(e, Status.DONE, [_record(P)]) for e in EXERCISES]
    return SubmissionResult("x", rows + [ExerciseResult(bonus, bonus_status, [bonus_test])])


def test_bonus_points_are_extra_credit(toy):
    result = _with_bonus(Status.NOT_STARTED, _record(stub=True))
    assert result.all_done  # an unfinished bonus does not stop "all done"
    assert result.max_points == CORE_POINTS
    gradescope = reports.gradescope_results(result)
    bonus = [t for t in gradescope["tests"] if t["name"].startswith("ex9")]
    # Gradescope's extra credit: the real max_score, tagged, outside the assignment's total
    assert [t["max_score"] for t in bonus] == [EXERCISES[0].points] and bonus[0]["score"] == 0
    assert all(t["tags"] == ["extra credit"] and "extra credit" in t["name"] for t in bonus)
    assert sum(t["max_score"] for t in gradescope["tests"] if "tags" not in t) == CORE_POINTS


def test_main_and_bonus_points_are_shown_apart(toy):
    """Issue 14: "97.4/100 points, bonus 10/10", never more than the maximum for the main part."""
    result = _with_bonus(Status.DONE, _record(P))
    bonus = ALL_POINTS - CORE_POINTS + EXERCISES[0].points  # the manifest's bonus and ex9
    main = f"{CORE_POINTS:g}/{CORE_POINTS:g} points"
    assert reports.score(result) == f"{main}, bonus {bonus:g}/{bonus:g}"
    assert f"{main}, bonus {bonus:g}/{bonus:g}" in reports.exercise_table(result)
    assert result.points == CORE_POINTS + bonus
    assert f"{result.points:g}/" not in reports.exercise_table(result)
    assert reports.score(SubmissionResult("y", result.core)) == main


def test_records_round_trip_through_json():
    record = TestRecord("course/ex1_a/test_public.py::test_a", "ex1", "test_a", Outcome.FAILED,
                        "expected 13 hidden states", "exercises/ex1.py, line 3, in f", True,
                        False, True, 0.25, "embedding-layer-missing", "hidden_states")
    assert TestRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert TestRecord.from_json({"event": "result", **record.to_json()}) == record
    row = ExerciseResult(EXERCISES[0], Status.FAILING, [record, _record(S)], "why")
    result = SubmissionResult("name", [row], {"torch": "2", "models": ["m"]}, 1.5)
    text = json.dumps(result.to_json())
    assert SubmissionResult.from_json(json.loads(text), EXERCISES) == result
    assert json.loads(text)["exercises"][0]["status"] == "failing"
    with pytest.raises(ValueError, match="ex99"):
        ExerciseResult.from_json({**row.to_json(), "id": "ex99"}, EXERCISES)


def test_only_the_learners_exercise_files_are_taken(tmp_path):
    folder = tmp_path / "sub"
    for exercise in EXERCISES:
        for where in ("exercises", "solutions", "course", "tests", "deep/er"):
            (folder / where).mkdir(parents=True, exist_ok=True)
            (folder / where / f"{exercise.module}.py").write_text(f"# {where}\n")
    files, missing = exercise_files(folder, EXERCISES)
    assert not missing
    assert all(source == b"# exercises\n" for source in files.values())
    shutil.rmtree(folder / "exercises")
    files, _ = exercise_files(folder, EXERCISES)
    # never solutions/, course/ or tests/
    assert all(source == b"# deep/er\n" for source in files.values())


def test_figures_are_drawn_from_finished_functions_only(tmp_path, capsys, tiny_gpt2):
    """The untouched stubs draw nothing, and say so for each figure; that the solutions draw
    every figure is test_figures.py's check of the reference figures."""
    from grading.views import figures

    planned = figures.planned_figures()
    assert figures.draw_all(tmp_path / "stubs", "exercises", "tiny-gpt2", {"ex1"}, tiny_gpt2) == 0
    assert capsys.readouterr().out.count("not written yet") == len(planned)


def test_warm_rerun_imports_the_saved_file_afresh_and_passes_on_the_solutions():
    """`grader.py watch --warm` re-runs tests in one process; each run must see the latest file."""
    from grading.views.warm import rerun
    from grading.core.declarations import load_exercises

    root = Path(__file__).resolve().parents[2]
    exercise = load_exercises()[1]
    code, _ = rerun(root, exercise, "solutions", quiet=True)
    first = sys.modules[exercise.import_name("solutions")]
    code_again, _ = rerun(root, exercise, "solutions", quiet=True)
    assert (code, code_again) == (0, 0)
    assert sys.modules[exercise.import_name("solutions")] is not first, "the module was not re-imported"


def test_the_warm_watcher_shows_the_graders_summary_of_the_saved_exercise(capsys):
    """`grader.py watch --warm` prints, after each save, the summary `grader.py check` prints."""
    from grading.views.warm import rerun_and_summarize

    exercise = EXERCISES[3]  # ex4: one function, quick
    code, _ = rerun_and_summarize(REPO, exercise, "exercises")
    out = capsys.readouterr().out
    assert code != 0
    assert f"{exercise.id} {exercise.title}: not started" in out
    assert f"start with {exercise.functions[0]}()" in out


def test_the_canary_grades_the_reference_solutions_and_names_what_fails(toy, tmp_path):
    """``batch --canary`` grades the solutions like a submission first: full marks go on, a
    solution that fails stops the batch, naming its exercise."""
    from grading.box.preflight import canary

    options = GradingOptions(timeout=30)
    ok, why = canary(toy, EXERCISES, options)
    assert ok, why
    broken = tmp_path / "kata"
    shutil.copytree(toy, broken)
    first = EXERCISES[0]
    solution = broken / first.source("solutions")
    solution.write_text(solution.read_text() + f"\n\ndef {first.functions[0]}(x):\n    return x + 100\n")
    ok, why = canary(broken, EXERCISES, options)
    assert not ok and f"{first.id} " in why, why
