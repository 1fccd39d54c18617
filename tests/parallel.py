"""How the maintainer suite shares the cores: ``bash run.sh test`` loads this plugin
(``-p tests.parallel``) and runs pytest-xdist with one worker per CPU the machine
gives (``python grader.py cpus``), ``--dist loadscope --no-loadscope-reorder``.

A file whose tests share a costly fixture (:data:`TOGETHER`: a sandboxed batch, the executed
notebooks, a toy kata, the same-verdict runs, SmolLM2's patching map) is one unit of work, so
that fixture is built once; so are the checks of one exercise's catalogued entries
(:func:`planted_batch`: its batches of mistakes and variants, on both sides of the boundary,
share the tests each of its functions reaches, found once per process); every other test is a
unit of its own and goes to whichever worker is free. Those files are handed out first, the
slowest first, so that no worker is left with a long file at the end while the other waits.
(xdist's own ``xdist_group`` marks do not group under pytest 9: xdist rewrites a node id pytest
no longer reads.)
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from xdist.scheduler import LoadScopeScheduling

#: The files whose tests share a fixture built once per file or session, slowest first
#: (each file's time in the suite on 2 cores, 2026-12-06 13:30: test_sandbox about 107 s, its
#: sandboxed batch 66 s of it; the notebooks 53 s; the Classroom and Gradescope steps 49 s).
TOGETHER = ("test_realistic_class.py", "test_sandbox.py", "test_notebooks.py", "test_class_grading.py", "test_grader.py",
            "test_batch_worker.py", "test_same_verdict.py", "test_cli.py", "test_model_facts.py",
            "test_learner_mode.py", "test_stubs_fail.py", "test_classroom_act.py",
            "test_fair_grades.py")


#: Files of long tests that are units of their own (20 to 40 s each in the suite), handed out
#: right after :data:`TOGETHER`: left for the end, one keeps a worker busy while the other waits.
LONG = ("test_secret_seeds.py", "test_figures.py", "test_reference_cache.py",
        "test_table_attack.py")


def together(nodeid: str) -> str | None:
    """The file of a test that must stay with the rest of its file, else None."""
    path = PurePosixPath(nodeid.split("::", 1)[0])
    return str(path) if path.name in TOGETHER and path.parts[0] == "tests" else None


#: The checks that read the results of a pytest session of an exercise's catalogued entries
#: (``planting.planted_results``), parametrized by entry: ``[exN-...]``.
PLANTED = {"test_mistakes.py::test_mistake_is_caught_and_named",
           "test_root_diagnoses.py::test_the_root_diagnosis_of_each_catalogued_mistake",
           "test_variants.py::test_correct_variant_passes_every_test",
           "test_planting.py::test_the_tests_left_out_change_no_verdict"}

#: Checks that read entries of one exercise's batch by name: test -> that exercise's unit.
PLANTED_BY_NAME = {
    "test_root_diagnoses.py::test_the_report_ranks_the_hook_that_returns_nothing_under_its_root":
        "planted:ex3"}


def planted_batch(nodeid: str) -> str | None:
    """``"planted:<exercise>"`` for a check that reads one of an exercise's batches of planted
    entries, else None."""
    path, _, name = nodeid.partition("::")
    test, _, param = name.partition("[")
    key = f"{PurePosixPath(path).name}::{test}"
    if key in PLANTED_BY_NAME:
        return PLANTED_BY_NAME[key]
    if key not in PLANTED or not param.startswith("ex"):
        return None
    return f"planted:{param.split('-', 1)[0]}"


class SharedFixtureScheduling(LoadScopeScheduling):
    """xdist's scope scheduling, with a scope per file of :data:`TOGETHER`, one per batch of
    planted entries for the checks that read it, and one per test elsewhere."""

    def _split_scope(self, nodeid: str) -> str:
        return together(nodeid) or planted_batch(nodeid) or nodeid


def pytest_xdist_make_scheduler(config, log):
    return SharedFixtureScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The files of :data:`TOGETHER` first, in its order, then those of :data:`LONG`, then the
    exercises' catalogue checks (each a unit of 10 to 30 s), then the rest as collected, mostly
    short tests that fill the end evenly (a stable sort: each file's own order is kept)."""
    rank = {name: place for place, name in enumerate(TOGETHER + LONG)}

    def place(item) -> int:
        name = PurePosixPath(item.nodeid.split("::", 1)[0]).name
        if together(item.nodeid) or name in LONG:
            return rank[name]
        return len(rank) + (planted_batch(item.nodeid) is None)

    items.sort(key=place)
