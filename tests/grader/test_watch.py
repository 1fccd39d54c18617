"""``python grader.py watch --warm``: every re-run in the warm process reads as the first did."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from grading.box.runner import child_environment
from grading.core.declarations import load_exercises

ROOT = Path(__file__).resolve().parents[2]


def _until(process, marker: str, seconds: float) -> str:
    """What the watcher printed, up to and including the line with ``marker``."""
    out, ends = "", time.monotonic() + seconds
    while time.monotonic() < ends:
        line = process.stdout.readline()
        if not line:
            break
        out += line
        if marker in line:
            return out
    raise AssertionError(f"the watcher never said {marker!r}:\n{out[-3000:]}")


def test_a_warm_rerun_after_a_save_prints_no_pytest_warning():
    exercise = load_exercises()[3]  # the quickest exercise's tests
    source = ROOT / exercise.source("solutions")
    env = {**child_environment(ROOT), "PYTHONUNBUFFERED": "1"}
    watcher = subprocess.Popen([sys.executable, "grader.py", "watch", "--warm", "--impl",
                                "solutions"], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               # a pytest-xdist worker ignores SIGINT, and a child keeps an
                               # ignored signal: the watcher gets Ctrl-C as a terminal gives it
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out = ""
    try:
        out = _until(watcher, "Watching", 300)
        os.utime(source)  # a save: the watcher re-runs this exercise's tests in its process
        out += _until(watcher, "Watching", 300)
    finally:
        watcher.send_signal(signal.SIGINT)
        try:
            watcher.wait(30)
        except subprocess.TimeoutExpired:
            watcher.kill()
            raise AssertionError("the watcher did not stop within 30 s of Ctrl-C; it printed "
                                 f"after the save:\n{out[-3000:]}\nthen: {watcher.stdout.read()}")
    assert out.count("tests ran in") == 2, out[-3000:]
    assert "Warning" not in out and "warnings summary" not in out, out[-3000:]
