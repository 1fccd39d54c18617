"""A pytest plugin that records every test's outcome for the grader, one JSON line at a time.

Loaded by the grader with ``pytest -p grading.core.recorder --kata-record FILE``. Each line of
FILE is one event, written and flushed as soon as it happens, so a run that crashes or is killed
half-way keeps everything recorded before:

``{"event": "session", "torch": ..., "transformers": ..., "device": ...}``
    the versions and device the tests run with.
``{"event": "collected", "tests": [{"nodeid", "exercise", "name"}, ...]}``
    every test that will run, in order.
``{"event": "start", "nodeid": ...}``
    a test is about to run (a test with a start and no result is the one a crash or timeout hit).
``{"event": "result", "nodeid", "exercise", "name", "outcome", "message", "where", "stub",``
``"import_error", "memory", "duration", "diagnosis", "function"}``
    a :class:`~grading.core.records.TestRecord`: ``outcome`` is passed, failed, error (the test
    could not be set up) or skipped; ``message`` is short, with paths relative to the kata;
    ``stub`` says the failure reached a ``NotImplementedError`` raised in the code under test (an
    untouched stub) and ``function`` names that stub; ``import_error`` that the exercise file
    does not import, ``memory`` that the code ran out of memory; ``diagnosis`` is the id of the
    mistake the test named with :func:`course.shared.diagnosis.diagnose` (None if it named none).
``{"event": "models", "models": [...]}``
    the session models the tests have loaded so far (written when a test loads a new one).
``{"event": "end", "exitstatus": ...}``
    the session finished normally.

``--kata-deselect FILE`` (a JSON list of node ids) leaves out tests already graded, so the
grader can restart a run after a crash without running anything twice. Nothing here parses
pytest's printed output: the messages come from the exceptions themselves.
"""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import replace
from pathlib import Path

import pytest

from course.shared.diagnosis import diagnosis_of
from course.shared.impl import ImplementationImportError, stub_reached
from grading.core.declarations import exercise_for_test_file

from grading.core.faults import CRASHED, EXITED, OUT_OF_MEMORY, TIMED_OUT, LearnerFault, sentence
from grading.core.records import ENVIRONMENT_FAULT, CollectedTest, Outcome, TestRecord
from kata.errors import exception_chain

#: The outcome of a test whose call ended the learner's process, by the kind of end.
_FAULT_OUTCOMES = {TIMED_OUT: Outcome.TIMED_OUT, CRASHED: Outcome.CRASHED,
                   EXITED: Outcome.CRASHED}

MAX_MESSAGE_LINES = 12
MAX_MESSAGE_CHARS = 1500


def pytest_addoption(parser):
    group = parser.getgroup("kata grading")
    group.addoption("--kata-record", metavar="FILE", default=None,
                    help="append one JSON line per test event to FILE (used by grader.py)")
    group.addoption("--kata-deselect", metavar="FILE", default=None,
                    help="a JSON list of node ids not to run (already graded)")


def pytest_configure(config):
    path = config.getoption("--kata-record")
    if path:
        config.pluginmanager.register(Recorder(config, Path(path)), "kata-recorder")


# --------------------------------------------------------------------------- messages


def _every_exception(error: BaseException):
    """``error`` and every exception it was raised from or while handling, through both
    ``__cause__`` and ``__context__`` of each (a ``raise ... from`` keeps the context too),
    without looping."""
    seen, pending = set(), [error]
    while pending:
        exc = pending.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        yield exc
        pending += [exc.__cause__, exc.__context__]


def shorten_paths(text: str, root: Path) -> str:
    """Paths inside the kata become relative (``exercises/ex1_hidden_states.py``)."""
    for prefix in {str(root), str(root.resolve())}:
        text = text.replace(prefix + os.sep, "")
    return text


class _Describer:
    """Turns one phase's exception into the short facts the grader needs."""

    def __init__(self, root: Path, impl: str):
        self.root = root
        self.impl_dir = str((root / impl).resolve()) + os.sep

    def in_code_under_test(self, filename: str) -> bool:
        return any(path.startswith(self.impl_dir)
                   for path in (os.path.abspath(filename), str(Path(filename).resolve())))

    def where(self, error: BaseException) -> tuple[str, str | None]:
        """The deepest line of the code under test that the exception passed through, and its
        function: ``("exercises/ex4.py, line 5, in f", "f")``; ``("", None)`` when none."""
        for exc in exception_chain(error):
            frames = [(frame.f_code, line) for frame, line in traceback.walk_tb(exc.__traceback__)
                      if self.in_code_under_test(frame.f_code.co_filename)]
            if frames:
                code, line = frames[-1]
                filename = shorten_paths(code.co_filename, self.root)
                function = code.co_name if code.co_name.isidentifier() else None  # not <lambda>
                return f"{filename}, line {line}, in {code.co_name}", function
        return "", None

    def stub_function(self, error: BaseException) -> str | None:
        """The name of the stub whose ``raise NotImplementedError`` this failure reached, through
        every exception it was raised from or while handling (:func:`_every_exception`): a test
        that catches ``RuntimeError`` around a call and then fails still reached the stub."""
        for exc in _every_exception(error):
            function = stub_reached(exc, Path(self.impl_dir))
            if function is not None:
                return function
        return None

    def facts(self, error: BaseException) -> dict:
        """The :class:`TestRecord` fields that describe ``error``."""
        chain = list(exception_chain(error))
        fault = next((e for e in chain if isinstance(e, LearnerFault)), None)
        if fault is not None:  # the call ended the learner's process: the grader's own words
            return {"message": str(fault), "where": "", "stub": False, "import_error": False,
                    "memory": fault.kind == OUT_OF_MEMORY, "diagnosis": None,
                    "function": fault.function, "fault": fault.kind}
        import_error = next((e for e in chain if isinstance(e, ImplementationImportError)), None)
        stub = self.stub_function(error)
        memory = any(isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and
                                                    "alloc" in str(e) and "memory" in str(e))
                     for e in chain)
        where, function = self.where(error)
        if import_error is not None:
            message = str(import_error)
        elif stub is not None:
            message = f"{stub} is not written yet (it still raises NotImplementedError)"
        elif isinstance(error, SystemExit):
            message = f"the code called sys.exit({error.code!r}); return a value instead of exiting"
        elif memory:  # an allocation refused under the memory limit: an exception, not an end
            message = sentence(OUT_OF_MEMORY, function,
                               f"{type(error).__name__}: {str(error)[:200]}")
        elif isinstance(error, AssertionError):
            message = _assertion_message(error)
        elif isinstance(error, pytest.fail.Exception):
            message = str(error.msg)
        else:
            message = f"{type(error).__name__}: {error}"
        if where and import_error is None and stub is None:
            message += f"\n(raised at {where})"
        diagnosis = diagnosis_of(error)
        # an untouched stub is "not started" for its function, never a mistake: whatever the
        # test caught around it and named, the record carries no diagnosis
        diagnosis_id = diagnosis.id if diagnosis is not None and stub is None else None
        from kata.models import EnvironmentFault  # here: the grader's own process needs no torch

        if any(isinstance(e, EnvironmentFault) for e in chain):
            diagnosis_id = ENVIRONMENT_FAULT  # the machine's fault, never the learner's
        return {"message": _trim(shorten_paths(message, self.root)), "where": where,
                "stub": stub is not None, "import_error": import_error is not None,
                "memory": memory, "diagnosis": diagnosis_id, "function": stub}


def _assertion_message(error: AssertionError) -> str:
    """The test's own words; pytest's rewritten ``assert ...`` only when there are none."""
    text = str(error)
    if not text.startswith("assert ") and "\nassert " in text:
        text = text.split("\nassert ", 1)[0]
    return text or "AssertionError"


def _error_lines(longrepr: str) -> str:
    """The ``E   ...`` lines of a pytest error report (the error itself), else its last lines."""
    lines = longrepr.strip().splitlines()
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return "\n".join(errors or lines[-3:])


def _trim(text: str) -> str:
    lines = text.strip().splitlines()[:MAX_MESSAGE_LINES]
    text = "\n".join(lines)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


# --------------------------------------------------------------------------- the plugin


class Recorder:
    def __init__(self, config, path: Path):
        self.config = config
        self.root = Path(config.rootpath)
        self.describer = _Describer(self.root, config.getoption("--impl", "exercises"))
        self.file = open(path, "a", encoding="utf-8")
        self.phases: dict[str, dict] = {}  # nodeid -> {when: (report, excinfo)}
        self.exercise_of: dict[str, str | None] = {}
        self.checks_of: dict[str, tuple[str, ...]] = {}  # nodeid -> the functions it checks
        self.models: list[str] = []

    def write(self, event: str, **fields) -> None:
        self.file.write(json.dumps({"event": event, **fields}) + "\n")
        self.file.flush()

    # -- session -------------------------------------------------------------

    def pytest_sessionstart(self, session):
        from importlib.metadata import version

        import torch

        from kata.models import default_device

        self.write("session", torch=torch.__version__, transformers=version("transformers"),
                   device=str(default_device()), pid=os.getpid())

    def pytest_collection_modifyitems(self, session, config, items):
        deselect_file = config.getoption("--kata-deselect")
        if not deselect_file:
            return
        done = set(json.loads(Path(deselect_file).read_text(encoding="utf-8")))
        removed = [item for item in items if item.nodeid in done]
        if removed:
            items[:] = [item for item in items if item.nodeid not in done]
            config.hook.pytest_deselected(items=removed)

    def pytest_collection_finish(self, session):
        # The records say what failed and why (:meth:`_Describer.facts`): pytest's own report of
        # each failure is not read, and cost up to half of a failing exercise's time. Collection
        # errors, reported before this, keep their short tracebacks.
        self.config.option.tbstyle = "no"
        tests = []
        for item in session.items:
            exercise = exercise_for_test_file(item.path, self.root)
            self.exercise_of[item.nodeid] = exercise.id if exercise else None
            marker = item.get_closest_marker("secret_check")
            self.checks_of[item.nodeid] = tuple(marker.args) if marker else ()
            tests.append(CollectedTest(item.nodeid, self.exercise_of[item.nodeid], item.name,
                                       self.checks_of[item.nodeid]))
        self.write("collected", tests=[t.to_json() for t in tests])

    def pytest_collectreport(self, report):
        if report.failed:
            self.write("collect_error", nodeid=report.nodeid,
                       message=_trim(shorten_paths(_error_lines(str(report.longrepr)), self.root)))

    def pytest_sessionfinish(self, session, exitstatus):
        self.write("end", exitstatus=int(exitstatus))
        self.file.close()

    # -- tests ---------------------------------------------------------------

    def pytest_runtest_logstart(self, nodeid, location):
        self.phases[nodeid] = {}
        self.write("start", nodeid=nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        self.phases.setdefault(item.nodeid, {})[call.when] = (report, call.excinfo)
        return report

    def pytest_runtest_logfinish(self, nodeid, location):
        phases = self.phases.pop(nodeid, {})
        record = TestRecord(
            nodeid, self.exercise_of.get(nodeid), nodeid.rsplit("::", 1)[-1],
            duration=round(sum(report.duration for report, _ in phases.values()), 4),
            checks=self.checks_of.get(nodeid, ()))
        self.write("result", **self._finish(record, phases).to_json())
        self._note_models()

    def _finish(self, record: TestRecord, phases: dict) -> TestRecord:
        """``record`` with the outcome of the first phase that skipped or failed."""
        for when in ("setup", "call", "teardown"):
            if when not in phases:
                continue
            report, excinfo = phases[when]
            if report.skipped:
                return replace(record, outcome=Outcome.SKIPPED, message=_skip_reason(report))
            if not report.failed:
                continue
            outcome = Outcome.ERROR if when == "setup" else Outcome.FAILED
            if excinfo is None:
                message = _trim(shorten_paths(str(report.longrepr), self.root))
                return replace(record, outcome=outcome, message=message)
            facts = self.describer.facts(excinfo.value)
            if facts["stub"]:
                outcome = Outcome.FAILED  # a module fixture that called a stub
            outcome = _FAULT_OUTCOMES.get(facts.pop("fault", None), outcome)
            return replace(record, outcome=outcome, **facts)
        return record

    def _note_models(self) -> None:
        from kata.session_models import LOADED

        if sorted(LOADED) != self.models:
            self.models = sorted(LOADED)
            self.write("models", models=self.models)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return _trim(reason.removeprefix("Skipped: "))
