"""Planting catalogued code into the solutions and running an exercise's tests on it.

Shared by ``test_mistakes.py`` (each mistake must be caught and named), ``test_root_diagnoses.py``
(the root each mistake's failures point to) and ``test_variants.py`` (each correct variant must
pass): an entry's ``code`` is written to a file and planted on top of ``solutions/`` with
``--kata-patch``; the exercise's tests then run in this process, so the session's models are
loaded once for every run. :func:`planted_run` runs a mistake once per process for the first two
(``tests/maintainer/parallel.py`` keeps a mistake's checks on one xdist worker).
"""

from __future__ import annotations

import ast
import importlib
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pytest

from kata.grading.records import Outcome, TestRecord
from kata.manifest import load_manifest

EXERCISES = {exercise.id: exercise for exercise in load_manifest()}
T = TypeVar("T")


def defined_functions(code: str) -> set[str]:
    """The public functions a catalogued mistake's or variant's code (re)defines."""
    tree = ast.parse(textwrap.dedent(code))
    return {node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def catalogue(package: str, name: str) -> list:
    """``name`` (``MISTAKES``, ``VARIANTS``) of every ``tests/<package>/exN.py`` there is."""
    entries = []
    for exercise_id in EXERCISES:
        try:
            module = importlib.import_module(f"tests.{package}.{exercise_id}")
        except ModuleNotFoundError:
            continue
        entries += getattr(module, name)
    return entries


#: How the planted code is reached: in this process, as a learner's ``pytest`` does, or across
#: the grader's trust boundary (``--kata-remote fork``: the tests here, the code in a forked
#: learner process, only plain data between them), as ``grader.py batch`` does.
BOUNDARIES = {"pytest": [], "grader": ["--kata-remote", "fork"]}


def run_planted(entry, rootpath, tmp_path, plugin=None, options=(),
                boundary: str = "pytest") -> None:
    """Run the tests of ``entry.exercise`` against the solutions with ``entry.code`` planted,
    reporting to ``plugin`` (if any); ``options`` are further pytest arguments (selections)."""
    patch = tmp_path / f"{entry.exercise}_{entry.id}.py"
    patch.write_text(textwrap.dedent(entry.code))
    pytest.main(
        [
            str(rootpath / EXERCISES[entry.exercise].tests), "--impl", "solutions", *options,
            f"--kata-patch={entry.exercise}={patch}", *BOUNDARIES[boundary],
            "-q", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
            "--tb=native", "-o", "addopts=",
        ],
        plugins=[plugin] if plugin is not None else [],
    )


def recorded_run(entry, rootpath, tmp_path, options=()) -> list[TestRecord]:
    """:func:`run_planted` with the grader's own recorder (``kata.grading.recorder``): every
    test's record as the grader builds it (outcome of the first phase that failed, message,
    diagnosis id, stub), in the order the tests ran."""
    record = tmp_path / f"{entry.exercise}_{entry.id}.records.jsonl"
    record.unlink(missing_ok=True)
    run_planted(entry, rootpath, tmp_path, None,
                [*options, "-p", "kata.grading.recorder", f"--kata-record={record}"])
    events = (json.loads(line) for line in record.read_text(encoding="utf-8").splitlines())
    return [TestRecord.from_json(event) for event in events if event.get("event") == "result"]


@dataclass
class PlantedRun:
    """Every test's record with a mistake planted, in the order the tests ran."""

    records: list[TestRecord]

    def first_failure(self) -> TestRecord | None:
        """The verdict a learner reads first: the first test that failed, in any phase."""
        return next((t for t in self.records if t.outcome in FAILING), None)


#: Outcomes of a test that did not pass: it failed, or its setup did.
FAILING = (Outcome.FAILED, Outcome.ERROR)


_PLANTED_RUNS: dict[tuple[str, str], PlantedRun] = {}

#: The order a learner's ``pytest`` gives: the fast tests on the tiny model first, then, only if
#: none of them failed, all of them (mistakes that only a trained model shows).
SELECTIONS = (["-m", "not trained"], [])


def fast_first(run: Callable[[list[str]], T], failed: Callable[[T], bool]) -> T:
    """``run(selection)`` for each of :data:`SELECTIONS` until ``failed`` says one failed; the
    last result."""
    for selection in SELECTIONS:
        result = run(selection)
        if failed(result):
            break
    return result


def planted_run(mistake, rootpath, tmp_path) -> PlantedRun:
    """Run the tests of ``mistake.exercise`` with the mistake planted, as the learner's own
    ``pytest`` does (:func:`fast_first`). Once per process for each mistake."""
    key = (mistake.exercise, mistake.id)
    if key not in _PLANTED_RUNS:
        records = fast_first(lambda selection: recorded_run(mistake, rootpath, tmp_path, selection),
                             lambda run: any(t.outcome in FAILING for t in run))
        _PLANTED_RUNS[key] = PlantedRun(records)
    return _PLANTED_RUNS[key]
