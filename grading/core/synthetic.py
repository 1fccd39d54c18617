"""Synthetic submissions: the reference solutions with one thing broken, for testing the grader.

Used by ``tests/grader/test_grader.py`` and ``benchmarks/make_submissions.py``. Every fault is
planted into the first function the manifest lists for an exercise (appended at the end of the
solution file, so it replaces the solution's definition), which keeps this independent of what the
exercises contain and of how many there are.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

from grading.core.declarations import Exercise

from grading.core.records import Status

#: Code appended to a solution file; ``{fn}`` is the function it breaks.
FAULTS = {
    "loop": "def {fn}(*args, **kwargs):\n    while True:\n        pass\n",
    "sys_exit": "import sys\n\n\ndef {fn}(*args, **kwargs):\n    sys.exit(3)\n",
    "os_exit": "import os\n\n\ndef {fn}(*args, **kwargs):\n    os._exit(0)\n",
    "segfault": "import ctypes\n\n\ndef {fn}(*args, **kwargs):\n    return ctypes.string_at(0)\n",
    # 6 GiB of address space, never touched: harmless without a limit, refused with one.
    "memory": "import torch\n\n\ndef {fn}(*args, **kwargs):\n"
              "    return torch.empty(6 * 2**30, dtype=torch.uint8)\n",
    # 20 MB of output, then the right answer: must still be graded "done".
    "prints": "_original_{fn} = {fn}\n\n\ndef {fn}(*args, **kwargs):\n"
              "    for _ in range(20):\n        print('spam ' * 200_000)\n"
              "    return _original_{fn}(*args, **kwargs)\n",
    "syntax_error": "def {fn}(model:\n    return model\n",
    "import_error": "import kata_no_such_module  # noqa: F401 - a typo in an import\n",
    "stub_one": "def {fn}(*args, **kwargs):\n    raise NotImplementedError\n",
}
#: How each kind of exercise file may be graded: a fault that breaks one function leaves the
#: exercise's other tests passing ("in progress") or, when every test needs that function,
#: none ("failing").
BROKEN_ONE = (Status.IN_PROGRESS, Status.FAILING)
EXPECTED_STATUS: dict[str, tuple[Status, ...]] = {
    "correct": (Status.DONE,), "stub": (Status.NOT_STARTED,), "wrong": (Status.FAILING,),
    "stub_one": (*BROKEN_ONE, Status.NOT_STARTED), "sys_exit": BROKEN_ONE,
    "loop": (Status.TIMED_OUT,), "os_exit": (Status.CRASHED,), "segfault": (Status.CRASHED,),
    "memory": (Status.OUT_OF_MEMORY,), "prints": (Status.DONE,),
    "syntax_error": (Status.NOT_IMPORTED,), "import_error": (Status.NOT_IMPORTED,),
    "imports_solutions": (Status.NOT_IMPORTED,), "missing": (Status.MISSING,),
}
#: Words the exercise's message must contain, so the learner knows what happened.
EXPECTED_WORDS = {
    "loop": "timed out", "os_exit": "os._exit", "segfault": "SIGSEGV", "memory": "memory",
    "syntax_error": "SyntaxError", "import_error": "kata_no_such_module",
    "imports_solutions": "course", "missing": "no ", "sys_exit": "sys.exit",
}
KINDS = tuple(EXPECTED_STATUS)


def exercise_source(root: Path, exercise: Exercise, kind: str) -> str | None:
    """The text of one exercise file of the given kind (None: the file is left out)."""
    solution = (root / exercise.source("solutions")).read_text(encoding="utf-8")
    fn = exercise.functions[0]
    if kind == "correct":
        return solution
    if kind == "stub":
        return (root / exercise.source("exercises")).read_text(encoding="utf-8")
    if kind == "missing":
        return None
    if kind == "wrong":  # every function returns None: nothing passes, and not because of stubs
        return solution + "".join(f"\n\ndef {f}(*args, **kwargs):\n    return None\n"
                                  for f in exercise.functions)
    if kind == "imports_solutions":  # the reference answers must not be importable
        return f"from {exercise.import_name('solutions')} import *  # noqa: F403\n"
    return solution + "\n\n" + FAULTS[kind].format(fn=fn)


def ship_extras(folder: Path, root: Path, exercises: list[Exercise]) -> None:
    """What a submission must not be able to use: a conftest that passes every test, pytest
    settings that select nothing, its own tests, solutions and declarations worth 1000 points."""
    (folder / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.hookimpl(wrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    report = yield\n    report.outcome = 'passed'\n    return report\n")
    (folder / "pytest.ini").write_text("[pytest]\naddopts = -k no_test_has_this_name\n")
    for exercise in exercises:
        own = folder / exercise.folder
        own.mkdir(parents=True, exist_ok=True)
        (own / "test_public.py").write_text("def test_everything_is_fine():\n    pass\n")
        shutil.copy2(root / exercise.source("solutions"), own / "solution.py")
        text = (root / exercise.folder / "exercise.toml").read_text(encoding="utf-8")
        (own / "exercise.toml").write_text(re.sub(r"(?m)^points = \d+", "points = 1000", text),
                                           encoding="utf-8")


def make_submission(root: Path, target: Path, kinds: dict[str, str], exercises: list[Exercise],
                    layout: str = "repo", extras: bool = False) -> Path:
    """Write one synthetic submission made from ``root``'s solutions and stubs, each exercise of
    the kind ``kinds`` gives its id (:data:`KINDS`; default ``"correct"``), and return its path:
    ``target`` in the layout ``"repo"`` (exercises/ in a copy of the repo), ``"exercises"`` (only
    exercises/) or ``"flat"`` (the files themselves), or ``<target>.zip`` (``"zip"``: one
    top-level folder). ``extras``: also a hostile conftest.py, pytest.ini, tests, solutions and
    declarations (:func:`ship_extras`)."""
    folder = target / target.name if layout == "zip" else target
    files_dir = folder if layout == "flat" else folder / "exercises"
    files_dir.mkdir(parents=True, exist_ok=True)
    for exercise in exercises:
        source = exercise_source(root, exercise, kinds.get(exercise.id, "correct"))
        if source is not None:
            (files_dir / f"{exercise.module}.py").write_text(source, encoding="utf-8")
    if layout == "repo":
        (folder / "README.md").write_text("my copy of the kata\n")
    if extras:
        ship_extras(folder, root, exercises)
    if layout != "zip":
        return target
    archive = target.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                handle.write(path, path.relative_to(target).as_posix())
    shutil.rmtree(target)
    return archive


def spread(kinds: list[str], exercises: list[Exercise]) -> list[dict[str, str]]:
    """Plant the given kinds of exercise file over as few submissions as possible: one kind per
    exercise, ``{exercise id: kind}`` per submission; unused slots stay correct."""
    per = len(exercises)
    return [{e.id: k for e, k in zip(exercises, kinds[i:i + per])}
            for i in range(0, len(kinds), per)]
