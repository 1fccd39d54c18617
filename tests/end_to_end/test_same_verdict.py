"""A submission gets the same verdict in every process (issue 12, item 3).

For a few catalogued mistakes, the first failing test and its message must be the same under
plain ``pytest``, ``pytest -x``, the grader's child process (its command line and environment:
one torch thread, ``--capture=no``, its own rootdir and basetemp) and the warm watcher (an
in-process ``pytest.main``). Each run is observed with the grader's recorder
(``-p grading.core.recorder``), which only records. The mistakes are chosen where a verdict could
depend on the process: a data tie (``torch.unique`` merging equal similarities), a hook leaked
to the next test (reported at teardown), and a hook's wrong return type caught before a library
error. They are in three exercises, planted together: plain ``pytest``, the grader and the
watcher each run the three exercises' tests in one process, as a learner's ``pytest`` and the
grader run a submission's. ``pytest -x`` stops at the first failure, so it runs each exercise on
its own; it runs in this process, as the watcher does (what ``-x`` changes is which tests run
after the first failure, not the process: a fresh process is plain ``pytest``'s and the
grader's part).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course.shared.catalogue import load

from grading.box.runner import _pytest_command, child_environment
from grading.core.declarations import load_exercises


EXERCISES = {exercise.id: exercise for exercise in load_exercises()}
CHOSEN = [("ex2", "torch-unique"), ("ex1", "hook-never-removed"), ("ex3", "hook-tensor-as-tuple")]
MISTAKE = {(m.exercise, m.id): m for m in load("mistakes") if (m.exercise, m.id) in CHOSEN}


def first_failure(record_file, exercise) -> tuple[str, str | None, str] | None:
    """(node id, diagnosis id, message) of the first failed or erroring test of ``exercise`` in
    a record."""
    folder = Path(exercise.tests).name  # the exercise's tests: the test files of its folder
    for line in record_file.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("event") == "result" and event.get("outcome") in ("failed", "error") \
                and Path(event["nodeid"].split("::", 1)[0]).parent.name == folder:
            return event["nodeid"], event.get("diagnosis"), event.get("message", "")
    return None


def run_subprocess(command, root, env, what) -> None:
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), (
        f"{what} ended with exit status {done.returncode}: {done.stderr[-2000:] or done.stdout[-2000:]}")


@pytest.fixture(scope="module")
def verdicts(request, tmp_path_factory) -> dict[tuple[str, str], dict]:
    """``{(exercise, mistake id): {process: first failure}}`` for every chosen mistake."""
    root = request.config.rootpath
    tmp = tmp_path_factory.mktemp("same-verdict")
    planted, tests = {}, {}
    for key, mistake in MISTAKE.items():
        patch = tmp / f"{mistake.exercise}_{mistake.id}.py"
        patch.write_text(textwrap.dedent(mistake.code))
        planted[key] = f"--kata-patch={mistake.exercise}={patch}"
        tests[key] = str(root / EXERCISES[mistake.exercise].tests)
    found = {key: {} for key in MISTAKE}

    def observe(mode: str, record, keys: list) -> None:
        for key in keys:
            found[key][mode] = first_failure(record, EXERCISES[MISTAKE[key].exercise])

    def as_typed(mode: str, keys: list, extra: list) -> None:
        """pytest in the caller's environment, as a maintainer types it."""
        name = mode.replace(" ", "") + "-" + "-".join(k[0] for k in keys)  # pytest-ex2-ex1-ex3
        record = tmp / f"{name}.jsonl"
        command = [sys.executable, "-m", "pytest", *(tests[k] for k in keys), "--impl",
                   "solutions", *(planted[k] for k in keys), *extra,
                   "-p", "grading.core.recorder", f"--kata-record={record}", "-q",
                   "-p", "no:cacheprovider", f"--basetemp={tmp / name}"]
        run_subprocess(command, root, None, mode)
        observe(mode, record, keys)

    def in_this_process(mode: str, keys: list, extra: list) -> None:
        """``pytest.main`` in this process, the models already loaded, as the watcher runs."""
        name = mode.replace(" ", "") + "-" + "-".join(k[0] for k in keys)
        record = tmp / f"{name}.jsonl"
        pytest.main([*(tests[k] for k in keys), "--impl", "solutions", *(planted[k] for k in keys),
                     *extra, "-p", "grading.core.recorder", f"--kata-record={record}", "-q",
                     "-p", "no:cacheprovider", "-o", "addopts=", f"--basetemp={tmp / name}"])
        observe(mode, record, keys)

    every = list(MISTAKE)
    as_typed("pytest", every, [])
    for key in every:  # -x stops at the first failure: one exercise a run
        in_this_process("pytest -x", [key], ["-x"])

    # the grader's child: its own command line and environment
    record, deselect = tmp / "grader.jsonl", tmp / "deselect.json"
    deselect.write_text("[]", encoding="utf-8")
    command = _pytest_command(root, [EXERCISES[m.exercise].tests for m in MISTAKE.values()],
                              "solutions", record, deselect, tmp / "grader-tmp")
    run_subprocess(command + list(planted.values()), root, child_environment(root),
                   "the grader's pytest")
    observe("grader", record, every)

    in_this_process("warm watcher", every, [])
    return found


@pytest.mark.parametrize("chosen", CHOSEN, ids=lambda c: f"{c[0]}-{c[1]}")
def test_first_failure_is_the_same_in_every_process(chosen, verdicts, capsys):
    capsys.readouterr()  # the warm watcher's output is noise here
    mistake, verdicts = MISTAKE[chosen], verdicts[chosen]
    assert verdicts["pytest"] is not None, f"no test failed under pytest for {mistake.summary}"
    assert verdicts["pytest"][1] == mistake.diagnosis, (
        f"under pytest the first failure names {verdicts['pytest'][1]!r}, the catalogue "
        f"{mistake.diagnosis!r}: {verdicts['pytest']}")
    different = {mode: verdict for mode, verdict in verdicts.items() if verdict != verdicts["pytest"]}
    assert not different, (
        f"'{mistake.summary}' gets another first verdict than under plain pytest "
        f"({verdicts['pytest']}) in: {different}")
