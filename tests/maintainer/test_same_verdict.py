"""A submission gets the same verdict in every process (issue 12, item 3).

For a few catalogued mistakes, the first failing test and its message must be the same under
plain ``pytest``, ``pytest -x``, the grader's child process (its command line and environment:
one torch thread, ``--capture=no``, its own rootdir and basetemp) and the warm watcher (an
in-process ``pytest.main``). Each run is observed with the grader's recorder
(``-p kata.grading.recorder``), which only records. The mistakes are chosen where a verdict could
depend on the process: a data tie (``torch.unique`` merging equal similarities), a hook leaked
to the next test (reported at teardown), and a hook's wrong return type caught before a library
error.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

from kata.grading.runner import _pytest_command, child_environment
from kata.manifest import load_manifest

pytestmark = pytest.mark.maintainer

EXERCISES = {exercise.id: exercise for exercise in load_manifest()}
CHOSEN = [("ex2", "torch-unique"), ("ex1", "hook-never-removed"), ("ex3", "hook-tensor-as-tuple")]
MISTAKE = {(m.exercise, m.id): m for exercise, _ in CHOSEN
           for m in importlib.import_module(f"tests.mistakes.{exercise}").MISTAKES}


def first_failure(record_file) -> tuple[str, str | None, str] | None:
    """(node id, diagnosis id, message) of the first failed or erroring test in a record."""
    for line in record_file.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("event") == "result" and event.get("outcome") in ("failed", "error"):
            return event["nodeid"], event.get("diagnosis"), event.get("message", "")
    return None


def run_subprocess(command, root, env, what) -> None:
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), (
        f"{what} ended with exit status {done.returncode}: {done.stderr[-2000:] or done.stdout[-2000:]}")


@pytest.mark.parametrize("chosen", CHOSEN, ids=lambda c: f"{c[0]}-{c[1]}")
def test_first_failure_is_the_same_in_every_process(chosen, request, tmp_path, capsys):
    root = request.config.rootpath
    mistake = MISTAKE[chosen]
    exercise = EXERCISES[mistake.exercise]
    patch = tmp_path / f"{mistake.exercise}_{mistake.id}.py"
    patch.write_text(textwrap.dedent(mistake.code))
    planted = f"--kata-patch={mistake.exercise}={patch}"
    tests = str(root / exercise.tests)
    verdicts = {}

    # plain pytest and pytest -x, in the caller's environment, as a maintainer types them
    for mode, extra in (("pytest", []), ("pytest -x", ["-x"])):
        record = tmp_path / f"{mode.replace(' ', '')}.jsonl"
        command = [sys.executable, "-m", "pytest", tests, "--impl", "solutions", planted, *extra,
                   "-p", "kata.grading.recorder", f"--kata-record={record}", "-q",
                   "-p", "no:cacheprovider", f"--basetemp={tmp_path / mode.replace(' ', '')}"]
        run_subprocess(command, root, None, mode)
        verdicts[mode] = first_failure(record)

    # the grader's child: its own command line and environment
    record, deselect = tmp_path / "grader.jsonl", tmp_path / "deselect.json"
    deselect.write_text("[]", encoding="utf-8")
    command = _pytest_command(root, [exercise.tests], "solutions", record, deselect,
                              tmp_path / "grader-tmp") + [planted]
    run_subprocess(command, root, child_environment(root), "the grader's pytest")
    verdicts["grader"] = first_failure(record)

    # the warm watcher: pytest.main in this process, the models already loaded
    record = tmp_path / "warm.jsonl"
    pytest.main([tests, "--impl", "solutions", planted, "-p", "kata.grading.recorder",
                 f"--kata-record={record}", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                 f"--basetemp={tmp_path / 'warm'}"])
    capsys.readouterr()
    verdicts["warm watcher"] = first_failure(record)

    assert verdicts["pytest"] is not None, f"no test failed under pytest for {mistake.summary}"
    assert verdicts["pytest"][1] == mistake.diagnosis, (
        f"under pytest the first failure names {verdicts['pytest'][1]!r}, the catalogue "
        f"{mistake.diagnosis!r}: {verdicts['pytest']}")
    different = {mode: verdict for mode, verdict in verdicts.items() if verdict != verdicts["pytest"]}
    assert not different, (
        f"'{mistake.summary}' gets another first verdict than under plain pytest "
        f"({verdicts['pytest']}) in: {different}")
