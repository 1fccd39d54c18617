"""Importing the implementation under test: the learner's ``exercises/`` or ``solutions/``."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

from .manifest import IMPLEMENTATIONS, Exercise


class ImplementationImportError(Exception):
    """An exercise file does not import; the message names the file, the line and the error."""


def describe_import_error(exercise: Exercise, impl: str, error: BaseException) -> str:
    source = exercise.source(impl)
    first_line = (traceback.format_exception_only(type(error), error)[-1]).strip()
    if isinstance(error, SyntaxError) and error.lineno is not None:
        where = f"line {error.lineno}"
        first_line = f"{type(error).__name__}: {error.msg}"
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith(source)]
        where = f"line {frames[-1].lineno}" if frames else "at import"
    return f"{source} does not import ({where}): {first_line}"


def import_implementation(exercise: Exercise, impl: str) -> ModuleType:
    """Import ``<impl>.<module>`` fresh enough to see the learner's latest edit."""
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"impl must be one of {IMPLEMENTATIONS}, got {impl!r}")
    name = f"{impl}.{exercise.module}"
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


def stub_reached(error: BaseException, impl_dir: Path) -> str | None:
    """The function of ``impl_dir`` whose ``raise NotImplementedError`` ``error`` came from, if any.

    That is how the kata tells an untouched stub ("not started") from a real failure: the
    ``NotImplementedError`` (itself, or what the failure was raised from) was raised in a file of
    the code under test, and the function that raised it is the stub.
    """
    prefix = str(Path(impl_dir).resolve()) + os.sep
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, NotImplementedError):
            traceback_ = error.__traceback__
            last = None
            while traceback_ is not None:
                last, traceback_ = traceback_.tb_frame.f_code, traceback_.tb_next
            if last is not None and str(Path(last.co_filename).resolve()).startswith(prefix):
                return last.co_name
        error = error.__cause__ or error.__context__
    return None
