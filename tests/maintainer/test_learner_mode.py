"""Learner mode: untouched stubs are a few 'not started' lines, real failures stay in full."""

import subprocess
import sys
from pathlib import Path

import pytest

from kata.manifest import load_manifest

pytestmark = pytest.mark.maintainer

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 40


def run_pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--impl", "exercises", *args],
        capture_output=True, text=True, cwd=ROOT,
    )


@pytest.fixture(scope="module")
def ex1_on_stubs():
    return run_pytest(load_manifest()[0].tests)


def test_untouched_stubs_fit_on_a_screen(ex1_on_stubs):
    lines = ex1_on_stubs.stdout.splitlines()
    assert ex1_on_stubs.returncode == 1, "the tests still fail against the stubs"
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines:\n{ex1_on_stubs.stdout}"
    assert "Traceback" not in ex1_on_stubs.stdout and "NotImplementedError\n" not in ex1_on_stubs.stdout


def test_each_stub_function_is_one_line_and_the_next_step_is_named(ex1_on_stubs):
    exercise = load_manifest()[0]
    for function in exercise.functions:
        assert f"not started: {function}, " in ex1_on_stubs.stdout
    assert (
        f"next: write {exercise.functions[0]} in {exercise.source()}" in ex1_on_stubs.stdout
    )


def test_kata_full_shows_the_tracebacks():
    exercise = load_manifest()[0]
    result = run_pytest(exercise.tests, "--kata-full", "-x", "-k", "tokenize")
    assert result.returncode == 1
    assert "NotImplementedError" in result.stdout and "not started:" not in result.stdout


def test_a_real_failure_is_shown_in_full_and_named_as_the_next_step(tmp_path):
    exercise = load_manifest()[0]
    mistake = tmp_path / "mistake.py"
    mistake.write_text(
        "def tokenize(tokenizer, text):\n"
        "    return {'input_ids': [[1, 2, 3]]}\n"
    )
    result = run_pytest(exercise.tests, f"--kata-patch={exercise.id}={mistake}", "-k", "tokenize")
    assert result.returncode == 1
    assert "FAILURES" in result.stdout
    assert "next: fix the first failure above, tests/" in result.stdout


def test_printed_commands_work_where_they_are_printed():
    """In an activated venv the grader prints `python grader.py ...`; otherwise the launcher."""
    code = "from kata.commands import grader_command; print(grader_command('hint 1'))"
    venv_bin = str(Path(sys.executable).parent)
    activated = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               cwd=ROOT, env={"PATH": f"{venv_bin}:/usr/bin:/bin"})
    bare = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={"PATH": "/nonexistent"})
    assert activated.stdout.strip() == "python grader.py hint 1"
    assert bare.stdout.strip() == "bash run.sh python grader.py hint 1"
