"""What a learner sees when ``pytest`` runs their ``exercises/``: short, and pointing at the next step.

A test that reaches an untouched stub is not a bug to read a traceback about: it is work not yet
started. In learner mode (the default for ``exercises/``; ``--kata-full`` or ``--impl solutions``
turn it off) such tests are counted per function, with no traceback::

    not started: tokenize, 2 tests
    not started: get_hidden_states, 9 tests
    next: write tokenize in exercises/ex1_hidden_states.py (python grader.py hint 1 for a hint)

Real failures keep pytest's full report, the first one first. The tests still fail, so the exit
status is the same as without learner mode.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from grading.views.commands import grader_command
from course.shared.impl import stub_reached
from grading.core.declarations import exercise_for_test_file

NOT_STARTED = "not started"


class LearnerView:
    """A pytest plugin: stub failures become one line per function; real failures stay in full."""

    def __init__(self, config: pytest.Config, impl_dir: Path):
        self.root = config.rootpath
        self.impl_dir = impl_dir
        #: (exercise file, exercise number or None, function) -> tests that reached its stub
        self.not_started: Counter[tuple[str, int | None, str]] = Counter()
        self.first_failure: str | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        """The report of a test that reached an untouched stub: one line naming the function,
        made here so that pytest never formats the traceback learner mode does not show (a
        fifth of a run of exercise 5's stubs). Any other report is pytest's own."""
        if call.excinfo is None:
            return None
        function = stub_reached(call.excinfo.value, self.impl_dir)
        if function is None:
            return None
        exercise = exercise_for_test_file(item.path, self.root)
        where = (exercise.source(), exercise.number) if exercise else (self.impl_dir.name, None)
        self.not_started[(*where, function)] += 1
        captured = [(f"Captured {key} {when}", content)
                    for when, key, content in getattr(item, "_report_sections", ())]
        report = pytest.TestReport(
            item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed",
            f"{function} is not written yet (it still raises NotImplementedError)", call.when,
            captured, call.duration, call.start, call.stop, user_properties=item.user_properties)
        report.kata_stub = function
        return report

    def pytest_runtest_logreport(self, report):
        if report.failed and not getattr(report, "kata_stub", None) and not self.first_failure:
            self.first_failure = report.nodeid

    def pytest_report_teststatus(self, report, config):
        if report.failed and getattr(report, "kata_stub", None):
            return NOT_STARTED, "n", "NOT STARTED"
        return None

    def pytest_terminal_summary(self, terminalreporter):
        if not self.not_started and self.first_failure is None:
            return
        write = terminalreporter.write_line
        terminalreporter.section("kata", sep="-")
        for (_, _, function), count in self.not_started.items():
            write(f"not started: {function}, {count} test{'s' * (count != 1)}")
        if self.first_failure is not None:
            write(f"next: fix the first failure above, {self.first_failure}")
        else:
            source, number, function = next(iter(self.not_started))
            hint = f" ({grader_command(f'hint {number}')} for a hint)" if number else ""
            write(f"next: write {function} in {source}{hint}")
