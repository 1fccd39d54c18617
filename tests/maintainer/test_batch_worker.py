"""What a batch's submissions share, all of it on the trusted side: one warm worker every
submission's worker is forked from (kata/grading/batch_worker.py) and reference values computed
once per batch (kata/grading/reference_cache.py). The learner's side gets none of it, and losing
the batch's worker costs no learner a point."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from kata.grading import synthetic
from kata.grading.batch_worker import BatchWorker, ForkedWorker
from kata.grading.reference_cache import REFERENCE_CACHE_VARIABLE, load_or_compute, path_of
from kata.grading.runner import SECRET_SEED_VARIABLE, child_environment, trusted_environment
from kata.grading.submissions import GradingOptions, grade_batch
from kata.grading.worker import WorkerArgs
from kata.manifest import load_manifest

pytestmark = pytest.mark.maintainer

EXERCISES = load_manifest()


def test_a_workers_arguments_cross_to_the_batch_worker_with_its_channels():
    args = WorkerArgs(record="/r.jsonl", impl="exercises", deselect="/d.json", basetemp="/t",
                      tests=[("ex1", "/k/tests/test_ex1.py"), ("ex2", "/k/tests/test_ex2.py")],
                      timeout=60.0, startup=90.0, lanes=2, remote={"ex1": (7, 8), "ex2": (9, 10)},
                      pytest=["-q"])
    message = args.to_message()
    assert args.fds() == [7, 8, 9, 10]
    assert message["remote"] == {"ex1": [0, 1], "ex2": [2, 3]}  # places, not this process's fds
    received = WorkerArgs.from_message(message, [20, 21, 22, 23])
    assert received.remote == {"ex1": (20, 21), "ex2": (22, 23)}
    assert received.tests == args.tests and received.pytest == ["-q"]
    assert "--remote" in received.argv() and "ex2=22,23" in received.argv()


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
    learner = child_environment(tmp_path)  # what the learner's server starts with
    assert REFERENCE_CACHE_VARIABLE not in learner and SECRET_SEED_VARIABLE not in learner
    trusted = trusted_environment(tmp_path, None, 99, tmp_path / "references")
    assert trusted[SECRET_SEED_VARIABLE] == "99"
    assert trusted[REFERENCE_CACHE_VARIABLE] == str(tmp_path / "references")


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    from tests.maintainer.test_grader import build_toy_kata

    return build_toy_kata(tmp_path_factory.mktemp("batch-worker") / "kata")


def _submissions(toy: Path, folder: Path) -> list[Path]:
    stubs = {e.id: "stub" for e in EXERCISES}
    return [synthetic.make_submission(toy, folder / "correct", {}, EXERCISES, "exercises"),
            synthetic.make_submission(toy, folder / "stubs", stubs, EXERCISES, "exercises"),
            synthetic.make_submission(toy, folder / "wrong", {EXERCISES[0].id: "wrong"},
                                      EXERCISES, "exercises")]


def _points(results) -> dict[str, tuple]:
    return {r.name: tuple((e.exercise.id, e.status, e.points) for e in r.exercises)
            for r in results}


def test_losing_the_batch_worker_costs_no_learner_a_point(toy, tmp_path, monkeypatch):
    """The batch's worker is killed as soon as it forked the first submission's worker: that
    submission is graded again by a worker of its own, the others too, with the same grades."""
    options = GradingOptions(timeout=30, secret_seed=7)
    paths = _submissions(toy, tmp_path / "submissions")
    expected = _points(grade_batch(paths, toy, EXERCISES, options, jobs=1))

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
    assert _points(results) == expected
    assert all(not r.interrupted for r in results)
    assert expected["correct"] == tuple((e.id, "done", e.points) for e in EXERCISES)
