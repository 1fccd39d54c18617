"""Grades no learner can change for another, and a share for every function that works (issue 47).

One sandboxed batch, graded one submission after another, holds:

* two in-place attackers of exercise 7: ``attribution_patching`` swaps its two prompts in place
  on the trusted test (once after doing the work, once doing none), which used to put a
  reference computed from the swapped prompts into the batch's shared cache;
* a table attacker of exercise 1: it computes nothing and answers from a table of the solution's
  answers to the public tests and to one seed's secret checks, embedded in its file;
* a learner with two slips: dropping the embedding layer in ``get_hidden_states`` (exercise 1)
  and a ``laminar_profile`` that loops forever (exercise 2);
* an honest learner, graded last.

The honest learner keeps every point, the table earns nothing, and in each exercise with one
broken function the learner keeps at least the share of the six functions that work. The same
learner graded by Gradescope's ``run_autograder``, with the sandbox and in a container that
allows none, gets the batch's scores.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grading.box.sandbox import BWRAP_VARIABLE, closed_to_others, sandbox_available
from grading.core import synthetic
from grading.core.declarations import load_exercises
from grading.core.records import SubmissionResult
from tests.end_to_end.test_table_attack import ATTACKER, KEY, RECORDER, TABLE_SEEDS, _plant, _run

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()
BY_ID = {e.id: e for e in EXERCISES}
AVAILABLE, WHY = sandbox_available()
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason=f"no sandbox here: {WHY}")
CALL_SECONDS = 5  # an endless function costs one call's deadline: kept short here

SWAP = '''

_solution_attribution_patching = attribution_patching


def attribution_patching(model, clean_ids, corrupted_ids, good_id, bad_id):
    result = {work}
    with torch.no_grad():  # the two prompts swapped in place, in the test's own tensors
        first = clean_ids.clone()
        clean_ids.copy_(corrupted_ids)
        corrupted_ids.copy_(first)
    return result
'''
ONE_WRONG = '''

def get_hidden_states(model, tokens):
    input_ids = kata.one_sequence(tokens["input_ids"], model)
    with torch.no_grad():
        outputs = model(input_ids=input_ids, output_hidden_states=True)
    return torch.stack(outputs.hidden_states[1:])[:, 0].float().cpu()  # no embedding layer
'''
#: Endless without spinning: the deadline (the trusted side's clock) stops it as it stops a busy
#: loop (test_realistic_class's loops-forever), and the three runs of it here (the batch and the
#: two Gradescope steps) do not burn a core for their CALL_SECONDS each.
ENDLESS = '''

def laminar_profile(hidden_states, skip_first=True):
    while True:
        __import__("time").sleep(0.5)
'''


def _solution(exercise_id: str) -> str:
    return (ROOT / BY_ID[exercise_id].source("solutions")).read_text(encoding="utf-8")


def _table_attacker(tmp_path: Path) -> str:
    """Exercise 1's file of the table attack, its table inside it (answers small enough to
    ship: the tiny model's and the random models')."""
    exercise = BY_ID["ex1"]
    table = tmp_path / "table.pickle"
    wraps = "".join(f"\n{name} = _recording({name!r}, {name})" for name in exercise.functions)
    recorder = _plant(tmp_path, "recorder.py", RECORDER + wraps + "\n")
    _run(recorder, TABLE_SEEDS[0], tmp_path, table=table)
    answers = {key: value for key, value in pickle.loads(table.read_bytes()).items()
               if len(pickle.dumps(value)) < 40_000}
    blob = base64.b64encode(pickle.dumps(answers)).decode()
    text = KEY + ATTACKER.replace('open({table!r}, "rb").read()',
                                  f"__import__('base64').b64decode({blob!r})")
    return text + "".join(f"\n{name} = _answering({name!r})" for name in exercise.functions)


def _submissions(folder: Path, tmp_path: Path) -> dict[str, Path]:
    """The batch's submissions, in the order they are graded (the honest one last)."""
    plan = {
        "swap-after-work": {"ex7": _solution("ex7") + SWAP.format(
            work="_solution_attribution_patching(model, clean_ids, corrupted_ids, good_id, "
                 "bad_id)")},
        "swap-without-work": {"ex7": _solution("ex7") + SWAP.format(work="torch.zeros(1)")},
        "table": {"ex1": _table_attacker(tmp_path)},
        "slips": {"ex1": _solution("ex1") + ONE_WRONG, "ex2": _solution("ex2") + ENDLESS},
    }
    paths = {}
    for name, files in plan.items():
        exercises = folder / name / "exercises"
        exercises.mkdir(parents=True)
        for exercise_id, text in files.items():
            (exercises / f"{BY_ID[exercise_id].module}.py").write_text(textwrap.dedent(text))
        paths[name] = folder / name
    paths["honest"] = synthetic.make_submission(ROOT, folder / "honest", {}, EXERCISES)
    return paths


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The batch's results by submission, and the submissions."""
    if not AVAILABLE:
        pytest.skip(f"no sandbox here: {WHY}")
    from grading.views import cli

    tmp_path = tmp_path_factory.mktemp("fair")
    paths = _submissions(tmp_path / "subs", tmp_path)
    out = tmp_path / "grades.json"
    code = cli.main(["batch", *map(str, paths.values()), "-j", "1", "--lanes", "1",
                     "--call-timeout", str(CALL_SECONDS), "--json", str(out)], root=ROOT)
    data = json.loads(out.read_text())
    results = {name: SubmissionResult.from_json(s, EXERCISES)
               for name, s in zip(paths, data["submissions"])}
    return {"code": code, "results": results, "paths": paths}


def _points(result: SubmissionResult, exercise_id: str) -> float:
    return next(r.points for r in result.exercises if r.exercise.id == exercise_id)


@needs_sandbox
def test_the_honest_learner_graded_last_keeps_every_point(graded):
    honest = graded["results"]["honest"]
    assert (honest.main_points, honest.bonus_points) == (honest.max_points,
                                                         honest.max_bonus_points), [
        (r.exercise.id, r.status.value, r.message) for r in honest.exercises if not r.done]


@needs_sandbox
def test_the_table_earns_nothing_for_exercise_1(graded):
    assert _points(graded["results"]["table"], "ex1") == 0.0


@needs_sandbox
@pytest.mark.parametrize("exercise_id", ["ex1", "ex2"])
def test_one_broken_function_keeps_the_share_of_the_six_that_work(graded, exercise_id):
    row = next(r for r in graded["results"]["slips"].exercises if r.exercise.id == exercise_id)
    assert len(row.confirmed) == len(row.exercise.functions) - 1, (row.confirmed, row.message)
    assert row.points >= 5 / 7 * row.max_points, (row.points, row.status.value, row.message)
    if exercise_id == "ex2":
        assert row.status.value == "timed out" and "`laminar_profile`" in row.message


@needs_sandbox
def test_the_swap_changes_nothing_for_later_learners(graded):
    for name in ("swap-after-work", "swap-without-work"):
        row = next(r for r in graded["results"][name].exercises if r.exercise.id == "ex7")
        assert row.points < row.max_points  # a swap of the test's own inputs earns no share


# --------------------------------------------------------------------------- Gradescope's run


@pytest.fixture
def reachable_by_other_users():
    """Grading without a sandbox runs the learner's side as a user of its own, who must reach
    the interpreter and the models: open their folders to other users (traversal only) for the
    test, as an image built by Gradescope's setup.sh has them, and close them again after."""
    if os.geteuid() != 0:
        pytest.skip("grading without a sandbox as another user needs a grader run as root")
    from kata.models import cache_dir

    closed = closed_to_others([sys.executable, sys.prefix, sys.base_prefix, str(cache_dir())])
    for folder in closed:
        os.chmod(folder, os.stat(folder).st_mode | 0o001)
    try:
        yield
    finally:
        for folder in closed:
            os.chmod(folder, os.stat(folder).st_mode & ~0o001)


def _autograde(bundle: Path, root: Path, submission: Path, bwrap: str | None) -> dict:
    """Gradescope's run on ``submission``, with bwrap or (``bwrap="none"``) without."""
    from kata.models import cache_dir
    from tests.end_to_end.test_class_grading import _unpack

    _unpack(bundle, root)
    shutil.copytree(submission / "exercises", root / "submission")
    env = {**os.environ, "KATA_AUTOGRADER_ROOT": str(root), "KATA_AUTOGRADER_PYTHON": sys.executable,
           "KATA_CACHE": str(cache_dir()), "OMP_NUM_THREADS": "1"}
    if bwrap is not None:
        env[BWRAP_VARIABLE] = bwrap
    done = subprocess.run([str(root / "source" / "run_autograder")], env=env,
                          capture_output=True, text=True, timeout=900)
    results = root / "results" / "results.json"
    assert results.is_file(), (done.stdout + done.stderr)[-3000:]
    return json.loads(results.read_text())


@needs_sandbox
@pytest.mark.parametrize("bwrap", [None, "none"], ids=["sandboxed", "no-sandbox-possible"])
def test_gradescope_gives_the_batchs_scores_with_or_without_a_sandbox(
        graded, tmp_path, bwrap, reachable_by_other_users):
    from grading.views import gradescope

    bundle = gradescope.build_gradescope_bundle(
        tmp_path / "autograder.zip", ROOT, exercises=["ex1", "ex2"], call_seconds=CALL_SECONDS)
    data = _autograde(bundle, tmp_path / "autograder", graded["paths"]["slips"], bwrap)
    expected = _points(graded["results"]["slips"], "ex1") + _points(graded["results"]["slips"],
                                                                    "ex2")
    assert abs(data["score"] - expected) <= 0.01, (data["score"], expected,
                                                   data["output"][-1500:])
    if bwrap == "none":
        assert "no sandbox could be made here" in data["output"], data["output"][-1500:]
