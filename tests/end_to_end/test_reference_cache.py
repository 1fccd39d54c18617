"""No learner can change what a later submission is compared against (issue 47, item 1).

Under ``grader.py batch`` the reference values the tests compute from the models are computed
once per batch and read back by every later submission's tests (``grading.core.reference_cache``).
The rule that keeps them honest: nothing the learner's code received ever feeds one. A test
computes its expected values before the call, from its own inputs or from a copy the learner
never saw; and a process in which the learner's code changed a tensor it was given in place
shares nothing it computes (``course.shared.support.computed_once``).

The check here is general: every public function of every exercise is replaced by a *mutator*
that answers correctly (from copies) and then spoils, in place, every tensor it was given: ids
rolled, values negated, a pair of prompts swapped. Its tests run across the grader's boundary
(where the learner's in-place changes come back into the tests' tensors) with a batch's shared
folder of reference values; the honest solutions then run with the same folder and the same
secret seed, as the next submission of that batch, and must pass every test.

The honest run is a plain pytest session (the solutions in the tests' process): what it reads
from the folder is what a next submission across the boundary reads, since the trusted tests
read it with the same keys either way (``computed_once``: the boundary is in no key), and a
reference spoiled there fails its test on either side (a folder with every value spoiled:
the same 38 tests fail both ways). In its own process it costs a third less CPU than forked:
10.1 against 15.8 CPU s (2026-12-08, fresh folders, means of 2).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from grading.box.runner import SECRET_SEED_VARIABLE, child_environment
from grading.core.declarations import load_exercises
from grading.core.reference_cache import REFERENCE_CACHE_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()

MUTATOR = '''
from collections.abc import Mapping as _Mapping

import torch as _torch


def _copy(value):
    if isinstance(value, _torch.Tensor):
        return value.detach().clone()
    if isinstance(value, _Mapping):
        return value.__class__({k: _copy(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    return value


def _spoil(value):
    """Change every tensor in ``value`` in place (ids rolled, numbers negated)."""
    if isinstance(value, _torch.Tensor):
        if value.requires_grad or value.numel() == 0:
            return
        with _torch.no_grad():
            if value.is_floating_point():
                value.mul_(-1.5).add_(1.0)
            else:
                value.copy_(value.roll(1, dims=-1))
    elif isinstance(value, _Mapping):
        for item in list(value.values()):
            _spoil(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _spoil(item)


def _mutating(function):
    def mutator(*args, **kwargs):
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, _torch.Tensor)]
        if len(tensors) >= 2 and tensors[0].shape == tensors[1].shape \\
                and tensors[0].dtype == tensors[1].dtype:  # a pair of prompts: swapped
            first = tensors[0].clone()
        else:
            first = None
        result = function(*_copy(list(args)), **_copy(kwargs))
        if first is not None:
            with _torch.no_grad():
                tensors[0].copy_(tensors[1])
                tensors[1].copy_(first)
        for value in [*args, *kwargs.values()]:
            _spoil(value)
        return result
    mutator.__name__ = function.__name__
    return mutator


'''


def mutator_source(exercise) -> str:
    """The exercise's solution with every public function answering, then spoiling its inputs."""
    lines = [MUTATOR]
    lines += [f"{name} = _mutating({name})" for name in exercise.functions]
    return textwrap.dedent("\n".join(lines)) + "\n"


def run_course(patches: dict[str, Path], cache: Path, log: Path,
               remote: bool = True) -> subprocess.CompletedProcess:
    """Every exercise's tests, across the grader's boundary (forked learner) unless ``remote``
    is false, in one session, with a batch's folder of reference values and a fixed secret
    seed."""
    env = child_environment(ROOT)
    env[REFERENCE_CACHE_VARIABLE] = str(cache)
    env[SECRET_SEED_VARIABLE] = "20261207"
    command = [sys.executable, "-m", "pytest", *[e.folder for e in EXERCISES], "--impl",
               "solutions", *(["--kata-remote", "fork"] if remote else []),
               "-q", "-p", "no:cacheprovider",
               "-p", "no:logging", "--tb=line",
               *[f"--kata-patch={e}={path}" for e, path in patches.items()]]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    return done


def test_a_learner_who_spoils_its_inputs_changes_no_later_submissions_references(tmp_path):
    cache = tmp_path / "references"
    cache.mkdir()
    patches = {}
    for exercise in EXERCISES:
        patches[exercise.id] = tmp_path / f"{exercise.id}_mutator.py"
        patches[exercise.id].write_text(mutator_source(exercise), encoding="utf-8")
    run_course(patches, cache, tmp_path / "mutator.log")
    honest = run_course({}, cache, tmp_path / "honest.log", remote=False)
    assert honest.returncode == 0, (
        "after a submission that changed its inputs in place, the honest solutions fail a test "
        "of the same batch: a reference was computed from what the learner's code wrote\n"
        + honest.stdout[-4000:])
