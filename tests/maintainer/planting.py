"""Planting catalogued code into the solutions and running an exercise's tests on it.

Shared by ``test_mistakes.py`` (each mistake must be caught and named) and ``test_variants.py``
(each correct variant must pass): an entry's ``code`` is written to a file and planted on top of
``solutions/`` with ``--kata-patch``; the exercise's tests then run in this process, so the
session's models are loaded once for every run.
"""

from __future__ import annotations

import ast
import importlib
import textwrap

import pytest

from kata.manifest import load_manifest

EXERCISES = {exercise.id: exercise for exercise in load_manifest()}


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


def run_planted(entry, rootpath, tmp_path, plugin, options=(), boundary: str = "pytest") -> None:
    """Run the tests of ``entry.exercise`` against the solutions with ``entry.code`` planted,
    reporting to ``plugin``; ``options`` are further pytest arguments (selections)."""
    patch = tmp_path / f"{entry.exercise}_{entry.id}.py"
    patch.write_text(textwrap.dedent(entry.code))
    pytest.main(
        [
            str(rootpath / EXERCISES[entry.exercise].tests), "--impl", "solutions", *options,
            f"--kata-patch={entry.exercise}={patch}", *BOUNDARIES[boundary],
            "-q", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
            "--tb=native", "-o", "addopts=",
        ],
        plugins=[plugin],
    )
