"""What a batch's submissions share, all of it on the trusted side: one warm worker every
submission's worker is forked from (grading/box/batch_worker.py) and reference values computed
once per batch (grading/core/reference_cache.py). The learner's side gets none of it, and losing
the batch's worker costs no learner a point."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from grading.core import synthetic
from grading.box.batch_worker import BatchWorker, ForkedWorker
from grading.core.records import Status
from grading.core.reference_cache import REFERENCE_CACHE_VARIABLE, load_or_compute, path_of
from grading.box.runner import SECRET_SEED_VARIABLE, child_environment, trusted_environment
from grading.box.sandbox import sandbox_available
from grading.box.submissions import GradingOptions, grade_batch
from grading.box.worker import MODEL_FIXTURES, WorkerArgs, models_wanted
from grading.core.declarations import load_exercises


EXERCISES = load_exercises()
#: The batch's own default where the machine has a sandbox: the learners' servers are then forked
#: from the batch's warm parent (a grader run as root), not each started cold (half the time).
SANDBOX = sandbox_available()[0]


def test_a_workers_arguments_cross_to_the_batch_worker_with_its_channels():
    args = WorkerArgs(record="/r.jsonl", impl="exercises", deselect="/d.json", basetemp="/t",
                      tests=[("ex1", "/k/course/ex1_a"), ("ex2", "/k/course/ex2_b")],
                      timeout=60.0, startup=90.0, lanes=2,
                      remote={"ex1": [(7, 8), (11, 12)], "ex2": [(9, 10)]}, pytest=["-q"])
    message = args.to_message()
    assert args.fds() == [7, 8, 11, 12, 9, 10]
    # places, not this process's fds
    assert message["remote"] == {"ex1": [[0, 1], [2, 3]], "ex2": [[4, 5]]}
    received = WorkerArgs.from_message(message, [20, 21, 22, 23, 24, 25])
    assert received.remote == {"ex1": [(20, 21), (22, 23)], "ex2": [(24, 25)]}
    assert received.tests == args.tests and received.pytest == ["-q"]
    # a worker of its own inherits the same descriptors: its command line carries them as they are
    assert WorkerArgs.from_message(*json.loads(received.argv()[0])) == received


def test_the_warm_worker_loads_every_model_an_exercises_tests_use():
    """The warm-up reads each exercise's folder for the model fixtures its tests use; reading
    nothing (the restructure had handed it folders where it read files) left every exercise's
    child loading the models again, twice the batch's CPU time."""
    from kata.models import SMOLLM2_FIRST_BLOCKS

    plugin = Path("course/shared/plugin.py").read_text(encoding="utf-8")
    for fixture in MODEL_FIXTURES:
        assert f"def {fixture}(" in plugin, f"{fixture} is no fixture of the plugin any more"
    for exercise in EXERCISES:
        assert models_wanted([exercise.folder]), f"{exercise.id}: no model warmed"
    assert "tiny-gpt2" in models_wanted(["course/ex1_hidden_states"])
    assert SMOLLM2_FIRST_BLOCKS in models_wanted(["course/ex6_activation_patching"])


def test_reference_values_are_computed_once_per_batch(monkeypatch, tmp_path):
    monkeypatch.setenv(REFERENCE_CACHE_VARIABLE, str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        table = torch.arange(12.0).reshape(3, 4)
        return {"row": table[1], "ids": torch.tensor([[1, 2]]), "target": 5, "name": "x"}

    first = load_or_compute(("test-reference", "tiny"), compute)
    second = load_or_compute(("test-reference", "tiny"), compute)  # as another process would
    assert len(calls) == 1
    assert torch.equal(first["row"], second["row"]) and second["target"] == 5
    # a row of a table is kept alone, not with the table it views
    assert second["row"].untyped_storage().nbytes() == 4 * 4


def test_a_process_whose_learner_changed_its_inputs_shares_no_reference(monkeypatch, tmp_path):
    """computed_once's guard on its own: once the learner's code has written into a tensor a test
    gave it, what the process computes may hold what it wrote, so it is kept, never shared."""
    from course.shared import support
    from grading.box import remote

    monkeypatch.setenv(REFERENCE_CACHE_VARIABLE, str(tmp_path))
    monkeypatch.setattr(support, "_REFERENCE_VALUES", {})
    key = ("test-spoiled-process", "tiny")
    monkeypatch.setattr(remote, "inputs_changed", lambda: True)
    assert support.computed_once(key, lambda: torch.ones(2)).sum() == 2
    assert not path_of(tmp_path, key).exists(), "a spoiled process shared a reference"
    assert key not in support._REFERENCE_VALUES, "a spoiled process kept a reference for later"
    monkeypatch.setattr(remote, "inputs_changed", lambda: False)
    support.computed_once(key, lambda: torch.ones(2))
    assert path_of(tmp_path, key).exists(), "a clean process shares what it computes"


def test_what_is_not_plain_data_is_computed_in_each_process(monkeypatch, tmp_path):
    monkeypatch.setenv(REFERENCE_CACHE_VARIABLE, str(tmp_path))
    calls = []

    def model():
        calls.append(1)
        return torch.nn.Linear(2, 2)

    load_or_compute(("test-model",), model)
    load_or_compute(("test-model",), model)
    assert len(calls) == 2 and not path_of(tmp_path, ("test-model",)).exists()


def test_without_a_batch_nothing_is_written(monkeypatch, tmp_path):
    monkeypatch.delenv(REFERENCE_CACHE_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    assert load_or_compute(("test-alone",), lambda: torch.ones(2)).sum() == 2
    assert list(tmp_path.iterdir()) == []


def test_the_learners_environment_names_neither_the_seed_nor_the_references(monkeypatch,
                                                                            tmp_path):
    monkeypatch.setenv(REFERENCE_CACHE_VARIABLE, "/somewhere/references")
    monkeypatch.setenv(SECRET_SEED_VARIABLE, "12345")
    monkeypatch.setenv("KATA_MODEL", "tiny-gpt2")
    learner = child_environment(tmp_path)  # what the learner's server starts with
    assert REFERENCE_CACHE_VARIABLE not in learner and SECRET_SEED_VARIABLE not in learner
    trusted = trusted_environment(tmp_path, None, 99, tmp_path / "references")
    assert trusted[SECRET_SEED_VARIABLE] == "99"
    assert "KATA_MODEL" not in trusted  # no verdict depends on the learner's default model
    assert trusted[REFERENCE_CACHE_VARIABLE] == str(tmp_path / "references")


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    from tests.grader.test_grader import build_toy_kata

    return build_toy_kata(tmp_path_factory.mktemp("batch-worker") / "kata")


def _submissions(toy: Path, folder: Path) -> list[Path]:
    """Two submissions: the first is forked, then lost with the batch's worker; the second
    finds no batch worker. Each is graded by a worker of its own (a cold start, the costly
    part of this check: two show both paths)."""
    return [synthetic.make_submission(toy, folder / "correct", {}, EXERCISES, "exercises"),
            synthetic.make_submission(toy, folder / "wrong", {EXERCISES[0].id: "wrong"},
                                      EXERCISES, "exercises")]


def _points(results) -> dict[str, tuple]:
    return {r.name: tuple((e.exercise.id, e.status, e.points) for e in r.exercises)
            for r in results}


def _earned() -> dict[str, tuple]:
    """What :func:`_submissions` earn: the correct one every point, the wrong one every point
    but its first exercise's (where every function returns None)."""
    full = tuple((e.id, Status.DONE, e.points) for e in EXERCISES)
    return {"correct": full, "wrong": ((EXERCISES[0].id, Status.FAILING, 0), *full[1:])}


def test_losing_the_batch_worker_costs_no_learner_a_point(toy, tmp_path, monkeypatch):
    """The batch's worker is killed as soon as it forked the first submission's worker: that
    submission is graded again by a worker of its own, the others too, and each gets what it
    earned."""
    options = GradingOptions(timeout=30, secret_seed=7, sandbox=SANDBOX)
    paths = _submissions(toy, tmp_path / "submissions")

    spawned: list[ForkedWorker | None] = []
    spawn = BatchWorker.spawn

    def spawn_then_lose_the_batch_worker(self, args, error_log):
        child = spawn(self, args, error_log)
        spawned.append(child)
        if child is not None:
            os.killpg(self.process.pid, signal.SIGKILL)  # its own process group: it alone
        return child

    monkeypatch.setattr(BatchWorker, "spawn", spawn_then_lose_the_batch_worker)
    results = grade_batch(paths, toy, EXERCISES, options, jobs=1)
    assert isinstance(spawned[0], ForkedWorker)  # the first one was forked, then lost
    assert spawned[0].lost
    assert _points(results) == _earned()
    assert all(not r.interrupted for r in results)


def _verdicts(result) -> dict[str, tuple]:
    """Each exercise's status, points and every test's outcome and words."""
    return {e.exercise.id: (e.status, e.points,
                            tuple((t.nodeid, t.outcome, t.message, t.stub, t.function,
                                   t.diagnosis) for t in e.tests))
            for e in result.exercises}


def test_an_untouched_exercise_takes_the_batchs_one_run_of_the_stubs(toy, tmp_path,
                                                                     monkeypatch):
    """The stubs are run once per batch; a file that is exactly its stub gets that run's records
    (a submission of nothing but stubs starts nothing), and they are the records the same
    stubs earn when run: a stub with one more line is run, and gets the same words."""
    from grading.core import stubs
    from grading.box import submissions

    def submission(name: str, done: tuple = (), tail: str = "") -> Path:
        for exercise in EXERCISES:
            file = tmp_path / name / exercise.source()
            file.parent.mkdir(parents=True, exist_ok=True)
            solution = toy / exercise.source("solutions")
            text = solution.read_text() if exercise in done else stubs.stub_text(exercise, toy)
            file.write_text(text + tail, encoding="utf-8")
        return tmp_path / name

    untouched, again = submission("untouched"), submission("again")
    edited = submission("edited", tail="# begun\n")
    one_done = submission("one-done", done=(EXERCISES[0],))
    ran = []
    run_learner_files = submissions.run_learner_files

    def counted(files, exercises, *args, **kwargs):
        ran.append(sorted(e.id for e in exercises))
        return run_learner_files(files, exercises, *args, **kwargs)

    monkeypatch.setattr(submissions, "run_learner_files", counted)
    options = GradingOptions(timeout=30, secret_seed=11, sandbox=SANDBOX)
    results = {r.name: r for r in grade_batch([untouched, again, edited, one_done], toy,
                                              EXERCISES, options, jobs=1)}
    every = sorted(e.id for e in EXERCISES)
    assert ran == [every, every, [EXERCISES[0].id]], (
        "expected one run of the stubs, one of the edited stubs and one of the one exercise "
        f"done; the learners' files were run for {ran}")
    assert _verdicts(results["untouched"]) == _verdicts(results["edited"])
    assert _verdicts(results["again"]) == _verdicts(results["edited"])
    assert all(e.status == "not started" for e in results["untouched"].exercises)
    assert results["one-done"].exercises[0].status == "done"
    assert _verdicts(results["one-done"])[EXERCISES[1].id] == \
        _verdicts(results["edited"])[EXERCISES[1].id]
    assert results["untouched"].environment == results["edited"].environment


def test_a_stub_run_that_did_not_end_cleanly_is_not_copied():
    from grading.core.records import CollectedTest, Outcome, TestRecord
    from grading.box.runner import RunResult
    from grading.box.untouched import cleanly_graded

    run = RunResult()
    for exercise, outcome in (("ex1", Outcome.FAILED), ("ex2", Outcome.TIMED_OUT),
                              ("ex3", Outcome.CRASHED)):
        test = CollectedTest(f"tests/t_{exercise}.py::t", exercise, "t")
        run.tests.append(test)
        run.results[test.nodeid] = TestRecord(test.nodeid, exercise, "t", outcome,
                                              message="f is not written yet", stub=True,
                                              function="f")
    run.tests.append(CollectedTest("tests/t_ex4.py::t", "ex4", "t"))  # never recorded
    assert cleanly_graded(run, "ex1")
    assert not any(cleanly_graded(run, e) for e in ("ex2", "ex3", "ex4", "ex5"))


def test_only_stubs_handed_in_untouched_twice_are_run_once_for_all():
    from grading.box.untouched import worth_a_run

    stubs = {"ex1_a": b"stub a", "ex2_b": b"stub b", "ex3_c": b"stub c"}
    handed_in = [{"ex1_a": b"stub a", "ex2_b": b"stub b", "ex3_c": b"mine"},
                 {"ex1_a": b"stub a", "ex2_b": b"stub b\n", "ex3_c": b"stub c"},
                 {}]
    assert worth_a_run(stubs, handed_in) == {"ex1_a": b"stub a"}
    assert worth_a_run(stubs, handed_in[:1]) == {}  # one submission (Gradescope): no stub run


def _processes_naming(path: Path, also: str = "") -> list[int]:
    """The processes whose command line names ``path`` (this test's own excepted), and ``also``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(path).encode() in command and also.encode() in command:
            found.append(int(entry.name))
    return found


def test_a_grader_killed_outright_leaves_no_process_behind(toy, tmp_path):
    """Every process of a batch dies with the grader, also when the grader itself is killed
    outright (a CI limit, the out-of-memory killer): an exercise's child busy in a long test
    was left running, orphaned, after its worker and the grader were gone."""
    import shutil
    import subprocess
    import sys
    import time

    kata = tmp_path / "kata"
    shutil.copytree(toy, kata)
    first = EXERCISES[0]
    tests = kata / first.folder / "test_public.py"
    tests.write_text("import time\n\n\ndef test_a_long_reference():\n    time.sleep(600)\n\n\n"
                     + tests.read_text())
    submission = synthetic.make_submission(kata, tmp_path / "sub", {}, EXERCISES, "exercises")
    own_tmp = tmp_path / "grader-tmp"
    own_tmp.mkdir()
    grader = subprocess.Popen(
        [sys.executable, "grader.py", "batch", str(submission), "--timeout", "600", "--lanes", "1"],
        cwd=kata, env=dict(os.environ, TMPDIR=str(own_tmp)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        started = time.monotonic()
        # the batch's worker, the submission's worker forked from it and the exercise's child
        while len(_processes_naming(own_tmp, "grading.box.worker")) < 3:
            assert grader.poll() is None, "the batch ended before its first exercise ran"
            assert time.monotonic() - started < 120, "no exercise's child started in 120 s"
            time.sleep(0.2)
        time.sleep(1)
        grader.send_signal(signal.SIGKILL)
        grader.wait()
        waited = time.monotonic()
        while _processes_naming(own_tmp) and time.monotonic() - waited < 20:
            time.sleep(0.2)
        assert not _processes_naming(own_tmp), "processes of the batch outlived its grader"
    finally:
        grader.kill()
        for pid in _processes_naming(own_tmp):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

