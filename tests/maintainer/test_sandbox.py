"""Hostile submissions graded in one sandboxed batch next to honest ones (issue 11).

Each attacker is built at test time from the reference solution or the stub of one exercise
(ex2, the fastest to grade) plus an attack that runs when the file is imported. One batch grades
an honest submission, every attacker, and another honest submission, two at a time, with the
answer probes on. Each test then asserts what an instructor needs: honest submissions keep full
marks, an attacker gains nothing it did not earn, no process is left, and the instructor's tree,
venv and model cache are byte-identical afterwards. Everything skips, with the reason, where no
sandbox can be made.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kata.grading.records import Status
from kata.grading.sandbox import sandbox_available
from kata.manifest import load_manifest

REPO = Path(__file__).resolve().parents[2]
EXERCISE = next(e for e in load_manifest() if e.id == "ex2")
MARKER = f"kata-daemon-{os.getpid()}-{int(time.time())}"

pytestmark = pytest.mark.maintainer
AVAILABLE, WHY = sandbox_available()
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason=f"no sandbox here: {WHY}")

# Code run when the attacker's exercise file is imported (inside the test process).
STEAL = r'''
import json, os, sys
from pathlib import Path

def _candidates():
    here = Path.cwd()
    for folder in [here, *here.parents, Path(sys.prefix), *Path(sys.prefix).parents,
                   Path(os.path.realpath(sys.prefix)), *Path(os.path.realpath(sys.prefix)).parents,
                   Path.home(), Path("/proc/1/cwd"), Path("/work"), Path("/tmp")]:
        yield folder
    for info in Path(sys.prefix).glob("lib/python*/site-packages/*.dist-info/direct_url.json"):
        try:
            url = json.loads(info.read_text()).get("url", "")
        except Exception:
            continue
        if url.startswith("file://"):
            yield Path(url[7:])

for _folder in _candidates():
    _found = list(_folder.glob("solutions/ex2_cosine_similarity.py")) if _folder.is_dir() else []
    try:
        _found += [p for p in _folder.rglob("ex2_cosine_similarity.py")
                   if "solutions" in p.parts][:1] if _folder.is_dir() and len(_folder.parts) > 2 else []
    except Exception:
        pass
    for _path in _found:
        try:
            exec(compile(_path.read_text(), str(_path), "exec"), globals())
            STOLEN = str(_path)
            break
        except Exception:
            continue
'''

WRITES = r'''
import os, sys, glob
from pathlib import Path
targets = [os.path.join(sys.prefix, "lib"), os.path.realpath(sys.prefix)]
for _site in glob.glob(os.path.join(os.path.realpath(sys.prefix), "lib", "python*", "site-packages")):
    for _name, _text in [("kata_evil.pth", "import os\n"), ("kata_evil.py", "EVIL = 1\n")]:
        try:
            Path(_site, _name).write_text(_text)
        except OSError:
            pass
for _folder in [Path.cwd(), *Path.cwd().parents, Path(REPO)]:
    for _rel in ["tests/helpers.py", "tests/test_ex2_cosine_similarity.py", "kata/__init__.py",
                 "conftest.py"]:
        try:
            with open(_folder / _rel, "a") as _handle:
                _handle.write("\nraise SystemExit('sabotaged')\n")
        except OSError:
            pass
try:
    from kata.models import smollm2_cache_path
    with open(smollm2_cache_path() / "config.json", "a") as _handle:
        _handle.write(" ")
except OSError:
    pass
try:
    with open(os.path.expanduser("~/.bashrc"), "a") as _handle:
        _handle.write("\n# sabotaged\n")
except OSError:
    pass
'''

DAEMON = r'''
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["sh", "-c", "sleep 600; echo MARKER"])
    os._exit(0)
'''

FORGE_RECORDER = r'''
import kata.grading.recorder as _recorder
_recorder.Recorder._finish = lambda self, record, phases: record
'''

FORGE_REPORT = r'''
import _pytest.reports as _reports
_original = _reports.TestReport.__init__
def _forged(self, *args, **kwargs):
    _original(self, *args, **kwargs)
    self.outcome = "passed"
    self.longrepr = None
_reports.TestReport.__init__ = _forged
'''

STATE = r'''
import torch
from torch.nn.modules.module import register_module_forward_hook
torch.set_default_dtype(torch.float64)
register_module_forward_hook(lambda module, inputs, output: None)
torch.set_num_threads(2)
'''


def _source(kind: str) -> str:
    solution = (REPO / EXERCISE.source("solutions")).read_text()
    stub = (REPO / EXERCISE.source("exercises")).read_text()
    attack = {"steal": (stub, STEAL), "writes": (solution, WRITES),
              "daemon": (stub, DAEMON.replace("MARKER", MARKER)),
              "forge_recorder": (stub, FORGE_RECORDER), "forge_report": (stub, FORGE_REPORT),
              "state": (solution, STATE), "honest": (solution, "")}[kind]
    base, extra = attack
    return base + "\n\nREPO = " + repr(str(REPO)) + "\n" + textwrap.dedent(extra)


def _tree_digest(folder: Path, contents: bool, skip=(".git", "__pycache__", ".venv",
                                                        ".pytest_cache")) -> str:
    """A digest of every file under ``folder``: its path, size, and (``contents``) its bytes,
    else its modification time."""
    digest = hashlib.sha256()
    for directory, subdirs, files in os.walk(folder):
        subdirs[:] = sorted(d for d in subdirs if d not in skip)
        for name in sorted(files):
            path = Path(directory, name)
            try:
                stat = path.lstat()
            except OSError:
                continue
            digest.update(f"{path}:{stat.st_size}".encode())
            if contents and path.is_file() and stat.st_size < 5_000_000:
                digest.update(path.read_bytes())
            else:
                digest.update(str(stat.st_mtime_ns).encode())
    return digest.hexdigest()


def _home_digest() -> str:
    """The files directly in the home folder (.bashrc, .profile ...): other programs on this
    machine may change its sub-folders while the batch runs."""
    digest = hashlib.sha256()
    for path in sorted(Path.home().iterdir()):
        if path.is_file() and not path.is_symlink():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def _fingerprints() -> dict[str, str]:
    from kata.models import smollm2_cache_path

    site = Path(os.path.realpath(sys.prefix))
    return {"tree": _tree_digest(REPO, contents=True), "venv": _tree_digest(site, False),
            "cache": _tree_digest(smollm2_cache_path(), contents=True), "home": _home_digest()}


def _marked_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if MARKER.encode() in (entry / "cmdline").read_bytes():
                    found.append(entry.name)
            except OSError:
                pass
    return found


KINDS = ["honest", "steal", "writes", "daemon", "forge_recorder", "forge_report", "state",
         "honest"]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    if not AVAILABLE:
        pytest.skip(f"no sandbox here: {WHY}")
    from kata.grading.submissions import GradingOptions, grade_batch

    folder = tmp_path_factory.mktemp("hostile")
    paths = []
    for number, kind in enumerate(KINDS):
        path = folder / f"{number}-{kind}" / "exercises"
        path.mkdir(parents=True)
        (path / f"{EXERCISE.module}.py").write_text(_source(kind))
        paths.append(path.parent)
    before = _fingerprints()
    options = GradingOptions(timeout=60, memory_limit_mb=4096, sandbox=True, probes=True)
    started = time.monotonic()
    results = grade_batch(paths, REPO, [EXERCISE], options, jobs=2)
    seconds = time.monotonic() - started
    time.sleep(0.5)  # the sandboxes' own PID 1 processes take a moment to go
    return {"results": {f"{n}-{k}": r for n, (k, r) in enumerate(zip(KINDS, results))},
            "before": before, "after": _fingerprints(), "seconds": seconds,
            "left": _marked_processes()}


def _row(batch, name):
    return batch["results"][name].exercises[0]


@needs_sandbox
def test_honest_submissions_keep_full_marks(batch):
    for name in ("0-honest", f"{len(KINDS) - 1}-honest", "2-writes"):
        row = _row(batch, name)
        assert row.status is Status.DONE and row.points == row.max_points, (name, row.message)
    print(f"graded {len(KINDS)} submissions in {batch['seconds']:.1f} s")


@needs_sandbox
def test_a_global_module_hook_is_reported_and_costs_only_its_own_exercise(batch):
    row = _row(batch, "6-state")
    assert row.status is Status.IN_PROGRESS and "global module hook" in row.message
    assert 0 < row.points < row.max_points  # the first test it spoiled, no more


@needs_sandbox
def test_the_solutions_cannot_be_found(batch):
    row = _row(batch, "1-steal")
    assert row.points == 0 and row.status is Status.NOT_STARTED, row.message


@needs_sandbox
@pytest.mark.parametrize("name", ["4-forge_recorder", "5-forge_report"])
def test_forged_results_are_caught_by_the_probes(batch, name):
    row = _row(batch, name)
    assert row.status is Status.TAMPERED, (row.status, row.message)
    assert row.points == 0 and "NotImplementedError" in row.message


@needs_sandbox
def test_nothing_outlives_the_batch(batch):
    assert batch["left"] == [], f"processes left behind: {batch['left']}"
    assert _row(batch, "3-daemon").points == 0


@needs_sandbox
def test_the_tree_venv_cache_and_home_are_untouched(batch):
    changed = [k for k in batch["before"] if batch["before"][k] != batch["after"][k]]
    assert not changed, f"changed by the batch: {changed}"


@needs_sandbox
def test_reports_say_the_batch_was_sandboxed(batch):
    from kata.grading import reports

    result = batch["results"]["0-honest"]
    assert "processes" in result.environment["sandbox"]
    assert "sandbox:" in reports.describe_environment(reports.environment(result))
    assert reports.csv_row(result)[-1] == result.environment["sandbox"]


# --------------------------------------------------------------------------- without grading


def test_batch_refuses_without_a_sandbox(monkeypatch, tmp_path, capsys):
    from kata.grading import cli, sandbox

    monkeypatch.setattr(sandbox, "sandbox_available", lambda: (False, "no bwrap on this test"))
    with pytest.raises(SystemExit, match="(?s)no bwrap on this test.*--no-sandbox"):
        cli.main(["--submissions", str(tmp_path)], root=REPO)


def test_process_state_does_not_leak_between_test_files(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["kata.pytest_plugin"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_a.py").write_text(STATE + "\n\ndef test_a():\n    pass\n")
    (tmp_path / "test_b.py").write_text(textwrap.dedent('''
        import torch
        from torch.nn.modules import module

        def test_b():
            assert torch.get_default_dtype() == torch.float32
            assert torch.get_num_threads() == 1
            assert not module._global_forward_hooks
    '''))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(tmp_path), "-q", "-p", "no:cacheprovider",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "KATA_TORCH_THREADS": "1"})
    # test_a's module-level hook is found after its test and removed; test_b sees a clean process
    assert "2 passed, 1 error" in done.stdout, done.stdout
    assert "global module hook" in done.stdout


def test_environment_faults_name_the_variable(monkeypatch):
    from kata.grading import preflight

    monkeypatch.setenv("KATA_DEVICE", "cuda:7")
    assert "KATA_DEVICE=cuda:7" in (preflight.check_device() or "")
    monkeypatch.delenv("KATA_DEVICE")
    monkeypatch.setenv("KATA_MODEL", "no-such-model-anywhere")
    assert "KATA_MODEL='no-such-model-anywhere'" in (preflight.check_kata_model() or "")


def test_a_corrupt_model_cache_is_found_by_its_checksums(monkeypatch, tmp_path):
    from kata import models

    monkeypatch.setenv("KATA_CACHE", str(tmp_path))
    target = models.smollm2_cache_path()
    target.mkdir(parents=True)
    (target / "config.json").write_text('{"num_hidden_layers": 30}')
    (target / "model.safetensors").write_bytes(bytes(range(256)) * 100)
    models.write_checksums(target)
    assert models.verify_checksums(target) == []
    data = bytearray((target / "model.safetensors").read_bytes())
    data[1000] ^= 1
    (target / "model.safetensors").write_bytes(bytes(data))
    assert models.verify_checksums(target, quick=True) == []  # same size: only the full check
    with pytest.raises(models.ModelCacheCorrupt, match="model.safetensors has changed"):
        models.check_smollm2_cache(repair=False)
    (target / "config.json").write_text('{"num_hidden_layers": 3}')  # truncated
    assert any("config.json" in p for p in models.verify_checksums(target, quick=True))


def test_an_environment_fault_in_a_test_is_not_the_learners_mistake():
    from kata.grading.records import Outcome, TestRecord
    from kata.grading.results import exercise_status

    records = [TestRecord("t", "ex2", "t", Outcome.PASSED),
               TestRecord("u", "ex2", "u", Outcome.ERROR, "loading failed",
                          diagnosis="environment-fault")]
    assert exercise_status(records)[0] is Status.ENVIRONMENT_ERROR


@needs_sandbox
def test_one_exercise_cannot_reach_the_next_in_the_warm_worker(tmp_path):
    """The warm worker forks each exercise from a clean process: ex1's file sets float64, a
    global module hook, a hook on the session model and starts a daemon at import; ex2, graded
    after it in the same worker (one lane), keeps full marks and no process is left."""
    from kata.grading.submissions import GradingOptions, grade_batch

    first = next(e for e in load_manifest() if e.id == "ex1")
    marker = f"kata-next-{os.getpid()}-{int(time.time())}"
    attack = STATE + textwrap.dedent(f'''
        import kata.pytest_plugin as _plugin
        for _model, _tokenizer, _clean in _plugin._SESSION_MODELS.values():
            with torch.no_grad():
                for _p in _model.parameters():
                    _p.mul_(0.5)
    ''') + DAEMON.replace("MARKER", marker)
    folder = tmp_path / "attacker" / "exercises"
    folder.mkdir(parents=True)
    (folder / f"{first.module}.py").write_text(
        (REPO / first.source("solutions")).read_text() + "\n" + attack)
    (folder / f"{EXERCISE.module}.py").write_text(_source("honest"))
    options = GradingOptions(timeout=60, memory_limit_mb=4096, sandbox=True, probes=True,
                             lanes=1)
    [result] = grade_batch([folder.parent], REPO, [first, EXERCISE], options, jobs=1)
    rows = {row.exercise.id: row for row in result.exercises}
    assert rows["ex2"].status is Status.DONE and rows["ex2"].points == rows["ex2"].max_points, \
        rows["ex2"].message
    assert rows["ex1"].points < rows["ex1"].max_points  # its own tests saw what it did
    time.sleep(0.5)
    left = [p.name for p in Path("/proc").iterdir() if p.name.isdigit()
            and marker.encode() in _cmdline(p)]
    assert left == [], f"processes left behind: {left}"


def _cmdline(entry: Path) -> bytes:
    try:
        return (entry / "cmdline").read_bytes()
    except OSError:
        return b""
