"""Importing the implementation under test: the learner's ``exercises/`` file, or the exercise's
``course/<module>/solution.py``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from kata.errors import import_error_sentence, stub_reached  # noqa: F401 (stub_reached: re-export)
from grading.core.declarations import IMPLEMENTATIONS, Exercise


class ImplementationImportError(Exception):
    """An exercise file does not import; the message names the file, the line and the error."""


def describe_import_error(exercise: Exercise, impl: str, error: BaseException) -> str:
    return import_error_sentence(exercise.source(impl), error)


def import_implementation(exercise: Exercise, impl: str) -> ModuleType:
    """Import the exercise's module for ``impl``, fresh enough to see the learner's latest edit."""
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"impl must be one of {IMPLEMENTATIONS}, got {impl!r}")
    name = exercise.import_name(impl)
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as error:
        sys.modules.pop(name, None)
        raise ImplementationImportError(describe_import_error(exercise, impl, error)) from error


def patched_solution(exercise: Exercise, patch_file) -> ModuleType:
    """A fresh copy of the solution module with the definitions in ``patch_file`` executed on top.

    The copy is executed from source, so the solution's other functions call the patched ones.
    Used by the maintainer test that plants each catalogued learner mistake.
    """
    solution = import_implementation(exercise, "solutions")
    module = ModuleType(f"{solution.__name__}__patched")
    module.__file__ = solution.__file__
    sys.modules[module.__name__] = module  # dataclasses and pickling look modules up here
    with open(solution.__file__, encoding="utf-8") as handle:
        exec(compile(handle.read(), solution.__file__, "exec"), module.__dict__)
    with open(patch_file, encoding="utf-8") as handle:
        exec(compile(handle.read(), str(patch_file), "exec"), module.__dict__)
    return module
