"""Planting catalogued code into the solutions and running an exercise's tests on it.

Shared by ``test_mistakes.py`` (each mistake must be caught and named), ``test_root_diagnoses.py``
(the root each mistake's failures point to) and ``test_variants.py`` (each correct variant must
pass): an entry's ``code`` is written to a file and planted on top of ``solutions/`` (what
``--kata-patch`` does); the exercise's tests then run in this process, so the session's models are
loaded once for every run.

One pytest session runs an exercise's tests for all its catalogued entries (:class:`EveryEntry`:
the tests are collected once, then run once per entry, a *pass*, with that entry planted), and
:func:`planted_results` keeps each entry's result for the checks that read it, once per process
(``tests/parallel.py`` keeps the checks of one exercise's batch on one xdist worker).
A pass is a session's run of its own: a test's fixtures, a module's and the session's are all
made afresh for it (the models stay loaded), and the planted module is new.

A pass runs only the fast tests the entry's code can reach (:class:`Reach`), and every test on a
trained model it selects: an entry that only replaces some of the exercise's functions
(:func:`replaced_functions`) leaves every other test running the solution's own code, which
passes; those tests' records are the solution's. A test reaches a function when, with that
function alone a stub, it calls it, fails or is skipped: what fails with the stub is what reads
the function's result, directly, through another function or through a result a test keeps for
the next (``once_per_implementation``). That rests on the tests being independent: the kata
puts hooks and process state back after each, but not a session model's weights, so an entry
whose code changed those in place would be seen only by the tests it reaches (no catalogued
entry does). ``KATA_PLANT_EVERY_TEST=1`` runs every test in every pass, to check that the cut
changes no verdict (``test_planting.py`` checks it on exercise 7's mistakes, and on two of
exercise 1's that go on to the trained tests).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import json
import os
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from grading.core.records import Outcome, TestRecord
from course.shared.impl import import_implementation
from grading.core.declarations import load_exercises

EXERCISES = {exercise.id: exercise for exercise in load_exercises()}


def defined_functions(code: str) -> set[str]:
    """The public functions a catalogued mistake's or variant's code (re)defines."""
    tree = ast.parse(textwrap.dedent(code))
    return {node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def replaced_functions(code: str, exercise_id: str) -> frozenset[str] | None:
    """The exercise's functions that a catalogued entry's ``code`` replaces, when that is all it
    changes in the solution's module: its other statements are docstrings, and definitions,
    imports and plain assignments of names the solution's code does not read (an import may bind
    the very object the solution's own binds). None when it may change more (another statement,
    a name the solution reads): every test must then run."""
    exercise = EXERCISES[exercise_id]
    module = vars(import_implementation(exercise, "solutions"))
    replaced = set()
    for node in ast.parse(textwrap.dedent(code)).body:
        bound = _bound_names(node)
        if bound is None:
            return None
        for name, value in bound.items():
            if name in exercise.functions:
                replaced.add(name)
            elif name in module and not (value is not _UNKNOWN and module[name] is value):
                return None
            elif name not in module and hasattr(builtins, name):
                return None
    return frozenset(replaced)


#: What a definition binds: a new object, never the one the solution's module holds.
_UNKNOWN = object()


def _bound_names(node: ast.stmt) -> dict[str, object] | None:
    """The names a top-level statement binds, each with the object it binds when that is known
    without running anything but an import, else ``_UNKNOWN``; None for any other statement."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return {}  # a docstring
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name: _UNKNOWN}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        plain = isinstance(node.value, (ast.Constant, ast.Name, ast.Attribute))
        if plain and all(isinstance(target, ast.Name) for target in targets):
            return {target.id: _UNKNOWN for target in targets}
        return None
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        star = any(alias.name == "*" for alias in node.names)
        if isinstance(node, ast.ImportFrom) and (node.level or star):
            return None
        names: dict = {}
        try:
            exec(compile(ast.Module([node], type_ignores=[]), "<planted import>", "exec"), names)
        except Exception:  # noqa: BLE001 - an import that fails here changes what cannot be told
            return None
        names.pop("__builtins__", None)
        return names
    return None


#: How the planted code is reached: in this process, as a learner's ``pytest`` does, or across
#: the grader's trust boundary (``--kata-remote fork``: the tests here, the code in a forked
#: learner process, only plain data between them), as ``grader.py batch`` does.
BOUNDARIES = {"pytest": [], "grader": ["--kata-remote", "fork"]}

#: Which of an exercise's tests a pass runs: the fast ones on the tiny model (what
#: ``-m "not trained"`` selects), or all of them.
FAST, ALL = "fast", "all"

#: The order a learner's ``pytest`` gives: the fast tests first, then, only if none of them
#: failed, all of them (mistakes that only a trained model shows).
SELECTIONS = (FAST, ALL)


def selects(item, selection: str) -> bool:
    """Whether a pass of ``selection`` runs the test ``item``."""
    return selection == ALL or item.get_closest_marker("trained") is None


#: One pass: the entry to plant, the tests to run, and the plugin object that watches them.
Pass = tuple[object, str, object]


class EveryEntry:
    """A pytest plugin object that runs the session's tests once per pass that ``passes`` yields,
    with the pass's entry planted and its watcher (a plugin object) registered for that pass only.

    ``passes`` is a generator: it resumes after its pass has run, so it may look at the watcher
    to choose the next pass (:func:`fast_first`). Each pass ends with every fixture torn down,
    the session's too (a watcher that passes over the tests after a first failure leaves them up).
    With a :class:`Reach`, a pass runs only the fast tests its entry can reach (and every test
    on a trained model it selects). ``order`` is every collected test's node id, in order.
    """

    def __init__(self, passes: Iterator[Pass], directory: Path, reach: Reach | None = None):
        self.passes = passes
        self.directory = directory
        self.reach = reach
        self.order: list[str] = []

    def patch_file(self, entry) -> Path:
        patch = self.directory / f"{entry.exercise}_{entry.id}.py"
        if not patch.exists():
            patch.write_text(textwrap.dedent(entry.code))
        return patch

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        config = session.config
        self.order = [item.nodeid for item in session.items]
        for entry, selection, watcher in self.passes:
            config.option.kata_patch = [f"{entry.exercise}={self.patch_file(entry)}"]
            items = [item for item in session.items if selects(item, selection)]
            if self.reach is not None:
                items = self.reach.tests_of(entry, items)
            config.pluginmanager.register(watcher)
            try:
                for i, item in enumerate(items):
                    nextitem = items[i + 1] if i + 1 < len(items) else None
                    config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                # what pytest itself does when a session ends (SetupState, pytest 8 and 9)
                session._setupstate.teardown_exact(None)
            finally:
                config.pluginmanager.unregister(watcher)
        return True  # the loop is done


def run_passes(exercise_id: str, passes: Iterator[Pass], rootpath, directory: Path,
               options=(), boundary: str = "pytest", cut: bool = True) -> list[str]:
    """One pytest session of ``exercise_id``'s tests against the solutions, run by
    :class:`EveryEntry`; ``options`` are further pytest arguments. With ``cut``, a pass runs the
    fast tests its entry reaches (:func:`reach_of`), unless ``KATA_PLANT_EVERY_TEST=1``.
    Returns every collected test's node id, in order."""
    every_test = os.environ.get("KATA_PLANT_EVERY_TEST") == "1"
    reach = reach_of(exercise_id, rootpath, directory) if cut and not every_test else None
    plugin = EveryEntry(passes, directory, reach)
    pytest.main(
        [
            str(rootpath / EXERCISES[exercise_id].tests), "--impl", "solutions", *options,
            *BOUNDARIES[boundary],
            "-q", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
            # no exercise test reads the log; capturing it visits torch's 60 loggers each phase
            "-p", "no:logging",
            "--tb=native", "-o", "addopts=",
        ],
        plugins=[plugin],
    )
    return plugin.order


# ----------------------------------------------------------------------------- reach


@dataclass(frozen=True)
class Stub:
    """What the reach session plants: ``code`` is empty (the solution) or one function's stub."""

    exercise: str
    id: str
    code: str


#: One function replaced by a stub that says which test called it, then raises as an untouched
#: stub of the exercises does.
STUB = """
from tests.course.planting import stub_called as _kata_stub_called


def {name}(*args, **kwargs):
    _kata_stub_called()
    raise NotImplementedError("{name} is a stub here, to find the tests that reach it")
"""


class StubWatcher:
    """A pytest plugin object for a pass with one function a stub: the tests that call it, fail
    in any phase or are skipped."""

    def __init__(self):
        self.reached: set[str] = set()
        self.current = ""

    def pytest_runtest_logstart(self, nodeid, location):
        global _WATCHING
        _WATCHING, self.current = self, nodeid

    def pytest_runtest_logreport(self, report):
        if not report.passed:
            self.reached.add(report.nodeid)


_WATCHING: StubWatcher | None = None


def stub_called() -> None:
    """Called by a stub (:data:`STUB`): the test running now reaches it, whatever it does with
    the error."""
    if _WATCHING is not None:
        _WATCHING.reached.add(_WATCHING.current)


@dataclass
class Reach:
    """For each of an exercise's functions, the fast tests that reach it (:class:`StubWatcher`),
    every fast test's record on the solutions, and every collected test's node id, in order."""

    by_function: dict[str, frozenset[str]]
    solution: list[TestRecord]
    order: list[str]

    def tests_of(self, entry, items: list) -> list:
        """The ``items`` that ``entry``'s code can change: the fast tests that reach the functions
        it replaces and every test on a trained model (the reach session runs none of those).
        All of them when it may change more (:func:`replaced_functions`), or when no fast test
        reaches its functions (the entry's check then reads what a full run gives)."""
        replaced = replaced_functions(entry.code, entry.exercise)
        if not replaced:
            return items
        reached = set().union(*(self.by_function[name] for name in replaced))
        if not any(item.nodeid in reached for item in items):
            return items
        return [item for item in items if item.nodeid in reached or not selects(item, FAST)]

    def completed(self, records: list[TestRecord]) -> list[TestRecord]:
        """A pass's records with the solution's record for every fast test it did not run, in the
        order the tests were collected."""
        ran = {record.nodeid: record for record in records}
        if all(record.nodeid in ran for record in self.solution):
            return records
        solution = {record.nodeid: record for record in self.solution}
        return [ran[nodeid] if nodeid in ran else solution[nodeid] for nodeid in self.order
                if nodeid in ran or nodeid in solution]


#: Each exercise's :class:`Reach` in this process.
_REACH: dict[str, Reach] = {}


def reach_of(exercise_id: str, rootpath, directory: Path) -> Reach:
    """``exercise_id``'s :class:`Reach`, made once per process by a pytest session of its own:
    a fast pass on the solution, recorded, then one with each function a stub."""
    if exercise_id not in _REACH:
        folder = directory / "reach"
        folder.mkdir(exist_ok=True)
        record = folder / "records.jsonl"
        solution: list[RecordedPass] = []
        watchers: dict[str, StubWatcher] = {}

        def passes() -> Iterator[Pass]:
            solution.append(RecordedPass(record))
            yield Stub(exercise_id, "solution", ""), FAST, solution[0]
            for name in EXERCISES[exercise_id].functions:
                watchers[name] = StubWatcher()
                yield Stub(exercise_id, f"stub-{name}", STUB.format(name=name)), FAST, \
                    watchers[name]

        order = run_passes(exercise_id, passes(), rootpath, folder,
                           ["-p", "grading.core.recorder", f"--kata-record={record}"], cut=False)
        _REACH[exercise_id] = Reach({name: frozenset(w.reached) for name, w in watchers.items()},
                                    solution[0].records(), order)
    return _REACH[exercise_id]


def fast_first(entries, watch: Callable[[], object], failed: Callable[[object], bool],
               results: dict) -> Iterator[Pass]:
    """The passes of a learner's ``pytest`` (:data:`SELECTIONS`) for each entry: the fast tests,
    then all of them unless ``failed(watcher)`` says a fast one failed; ``results[entry.id]``
    is the last pass's watcher."""
    for entry in entries:
        for selection in SELECTIONS:
            watcher = watch()
            yield entry, selection, watcher
            if failed(watcher):
                break
        results[entry.id] = watcher


def one_pass_each(entries, watch: Callable[[], object], selection: str,
                  results: dict) -> Iterator[Pass]:
    """One pass of ``selection`` for each entry; ``results[entry.id]`` is its watcher."""
    for entry in entries:
        results[entry.id] = watch()
        yield entry, selection, results[entry.id]


class RecordedPass:
    """A pass's records, as the grader's recorder (``grading.core.recorder``, loaded for the
    whole session) wrote them: the part of the record file the pass's tests wrote."""

    def __init__(self, record: Path):
        self.record = record
        self.start = self.end = record.stat().st_size if record.exists() else 0

    @pytest.hookimpl(trylast=True)  # after the recorder wrote the test's result
    def pytest_runtest_logfinish(self, nodeid, location):
        self.end = self.record.stat().st_size

    def records(self) -> list[TestRecord]:
        with self.record.open("rb") as file:
            file.seek(self.start)
            lines = file.read(self.end - self.start).decode("utf-8").splitlines()
        events = [json.loads(line) for line in lines]
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


def recorded_runs(entries, rootpath, directory: Path) -> dict[str, PlantedRun]:
    """Each entry's :class:`PlantedRun` as the learner's own ``pytest`` gives it
    (:func:`fast_first`), recorded as the grader records it."""
    record = directory / "records.jsonl"
    passes: dict[str, RecordedPass] = {}

    def failed(watcher: RecordedPass) -> bool:
        return any(t.outcome in FAILING for t in watcher.records())

    exercise_id = entries[0].exercise
    run_passes(exercise_id, fast_first(entries, lambda: RecordedPass(record), failed, passes),
               rootpath, directory, ["-p", "grading.core.recorder", f"--kata-record={record}"])
    reach = _REACH.get(exercise_id)
    return {key: PlantedRun(reach.completed(watcher.records()) if reach else watcher.records())
            for key, watcher in passes.items()}


#: Each batch's results in this process: (what, exercise, boundary) -> entry id -> result.
_RESULTS: dict[tuple[str, str, str], dict] = {}


def selected_entries(session, param: str, exercise_id: str) -> list:
    """The catalogue entries of ``exercise_id`` that this session's tests take as ``param``
    (``"mistake"``, ``"variant"``), each once, in order: all of them under xdist, where every
    worker collects every test; those ``-k`` chose in a plain run."""
    found = {}
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        entry = callspec.params.get(param) if callspec is not None else None
        if entry is not None and entry.exercise == exercise_id:
            found.setdefault(entry.id, entry)
    return list(found.values())


def planted_results(what: str, entry, boundary: str, request,
                    run: Callable[[list, Path], dict]):
    """``entry``'s result in the batch ``what`` of its exercise across ``boundary``: ``run(entries,
    directory)`` gives every entry's result for the entries this session still needs, in one
    pytest session (:func:`run_passes`), the first time one of them is asked for."""
    results = _RESULTS.setdefault((what, entry.exercise, boundary), {})
    if entry.id not in results:
        param = "mistake" if what == "mistakes" else "variant"
        wanted = [e for e in selected_entries(request.session, param, entry.exercise)
                  if e.id not in results]
        if entry not in wanted:
            wanted.append(entry)
        directory = request.getfixturevalue("tmp_path_factory").mktemp(
            f"{what}-{entry.exercise}-{boundary}")
        results.update(run(wanted, directory))
    return results[entry.id]


def planted_run(mistake, request) -> PlantedRun:
    """Every test's record with ``mistake`` planted, as the learner's own ``pytest`` gives it
    (:func:`recorded_runs`, for all the exercise's mistakes at once)."""
    return planted_results("mistakes", mistake, "pytest", request,
                           lambda entries, directory: recorded_runs(
                               entries, request.config.rootpath, directory))
