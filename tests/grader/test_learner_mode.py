"""Learner mode: untouched stubs are a few 'not started' lines, real failures stay in full."""

import subprocess
import sys
from pathlib import Path

import pytest

from grading.core.declarations import load_exercises


ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 40


def run_pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--impl", "exercises", *args],
        capture_output=True, text=True, cwd=ROOT,
    )


def run_pytest_here(capsys, *args: str) -> tuple[int, str]:
    """``pytest ... --impl exercises`` in this process (the exit code and what it printed): the
    same session and output as a learner's, without importing torch and loading the models
    again. The untouched stubs' screen is checked in a fresh process (:func:`ex1_on_stubs`)."""
    capsys.readouterr()
    code = pytest.main(["-p", "no:cacheprovider", "--impl", "exercises", *args])
    return int(code), capsys.readouterr().out


@pytest.fixture(scope="module")
def ex1_on_stubs():
    return run_pytest(load_exercises()[0].tests)


def test_untouched_stubs_fit_on_a_screen(ex1_on_stubs):
    lines = ex1_on_stubs.stdout.splitlines()
    assert ex1_on_stubs.returncode == 1, "the tests still fail against the stubs"
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines:\n{ex1_on_stubs.stdout}"
    assert "Traceback" not in ex1_on_stubs.stdout and "NotImplementedError\n" not in ex1_on_stubs.stdout


def test_each_stub_function_is_one_line_and_the_next_step_is_named(ex1_on_stubs):
    exercise = load_exercises()[0]
    for function in exercise.functions:
        assert f"not started: {function}, " in ex1_on_stubs.stdout
    assert (
        f"next: write {exercise.functions[0]} in {exercise.source()}" in ex1_on_stubs.stdout
    )


def test_kata_full_shows_the_tracebacks(capsys):
    exercise = load_exercises()[0]
    code, out = run_pytest_here(capsys, exercise.tests, "--kata-full", "-x", "-k", "tokenize")
    assert code == 1
    assert "NotImplementedError" in out and "not started:" not in out


def test_a_real_failure_is_shown_in_full_and_named_as_the_next_step(tmp_path, capsys):
    exercise = load_exercises()[0]
    mistake = tmp_path / "mistake.py"
    mistake.write_text(
        "def tokenize(tokenizer, text):\n"
        "    return {'input_ids': [[1, 2, 3]]}\n"
    )
    code, out = run_pytest_here(capsys, exercise.tests, f"--kata-patch={exercise.id}={mistake}",
                                "-k", "tokenize")
    assert code == 1
    assert "FAILURES" in out
    assert f"next: fix the first failure above, {exercise.tests}/" in out


def test_printed_commands_work_where_they_are_printed():
    """In an activated venv the grader prints `python grader.py ...`; otherwise the launcher."""
    code = "from grading.views.commands import grader_command; print(grader_command('hint 1'))"
    venv_bin = str(Path(sys.executable).parent)
    activated = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               cwd=ROOT, env={"PATH": f"{venv_bin}:/usr/bin:/bin"})
    bare = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={"PATH": "/nonexistent"})
    assert activated.stdout.strip() == "python grader.py hint 1"
    assert bare.stdout.strip() == "bash run.sh python grader.py hint 1"
