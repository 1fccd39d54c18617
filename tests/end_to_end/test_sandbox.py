"""Hostile submissions graded in one sandboxed batch next to honest ones (issues 11 and 22).

Each attacker is built at test time from the reference solution or the stub of one exercise
(ex2, the fastest to grade) plus an attack that runs when the file is imported or when one of its
functions is called. One batch grades an honest submission, every attacker, and another honest
submission, two at a time. The tests then assert what an instructor needs: honest submissions
keep full marks, an attacker gains nothing it did not earn, every output is strictly valid and
holds no secret, no process is left, the disk did not grow, and the instructor's tree, venv and
model cache are byte-identical afterwards. Everything skips, with the reason, where no sandbox
can be made.

Since issue 22 the tests, the references and the recorder run on the trusted side, and the
learner's code in the sandbox with only its own file and the learner-facing kata: the forgeries
of the old design (patching the recorder or pytest, writing records to an inherited descriptor,
running the shipped variants, asking the grader's own reference code) find nothing to act on.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grading.core.records import Status
from grading.box.sandbox import sandbox_available
from grading.core.declarations import load_exercises

REPO = Path(__file__).resolve().parents[2]
EXERCISE = next(e for e in load_exercises() if e.id == "ex2")
MARKER = f"kata-daemon-{os.getpid()}-{int(time.time())}"

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
    _found = list(_folder.glob("course/ex2_cosine_similarity/solution.py")) if _folder.is_dir() else []
    try:
        _found += [p for p in _folder.rglob("solution.py")
                   if "ex2_cosine_similarity" in p.parts][:1] if _folder.is_dir() and len(_folder.parts) > 2 else []
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
    for _rel in ["tests/helpers.py", "course/shared/support.py",
                 "course/ex2_cosine_similarity/test_public.py", "kata/__init__.py", "conftest.py"]:
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

FORGE = r'''
# patch the recorder, pytest's reports and the answer probes, wherever they can be found
for _name in ("grading.core.recorder", "grading.probes", "_pytest.reports"):
    try:
        __import__(_name)
    except Exception:
        pass
import sys as _sys
if "grading.core.recorder" in _sys.modules:
    _sys.modules["grading.core.recorder"].Recorder._finish = lambda self, record, phases: record
if "_pytest.reports" in _sys.modules:
    _reports = _sys.modules["_pytest.reports"]
    _original = _reports.TestReport.__init__
    def _forged(self, *args, **kwargs):
        _original(self, *args, **kwargs)
        self.outcome = "passed"
        self.longrepr = None
    _reports.TestReport.__init__ = _forged
# inflate: fake records on every descriptor the process holds
import json as _json, os as _os
_line = (_json.dumps({"event": "result", "nodeid": "x", "exercise": "ex2", "outcome": "passed"})
         + "\\n").encode() * 2000
for _fd in range(3, 256):
    try:
        _os.write(_fd, _line)
    except OSError:
        pass
'''

ORACLE = r'''
# every function answers with the grader's own reference code, or a shipped correct variant
def _oracle(*args, **kwargs):
    for name in ("course.shared.reference", "course.shared.support", "course.ex2_cosine_similarity.variants", "course.ex2_cosine_similarity.solution"):
        try:
            __import__(name)
        except Exception:
            continue
        raise SystemExit(f"found {name}")
    return None
for _name in ("cosine_similarity_matrix", "token_similarity", "layer_similarity",
              "laminar_profile", "plot_layer_similarity", "plot_token_similarity",
              "plot_laminar_profile"):
    globals()[_name] = _oracle
# where the kata's variants would be, looked for under every folder a student would try (a
# search of the whole file system finds the same, but only after the time limit)
import glob as _glob, os as _os, sys as _sys
_roots = {REPO, _os.getcwd(), _os.path.expanduser("~"), "/", "/tmp", "/work", *_sys.path}
_found = [path for root in sorted(r for r in _roots if r) for depth in ("", "*/", "*/*/", "*/*/*/")
          for path in _glob.glob(_os.path.join(root, depth + "course/ex2_cosine_similarity/variants.py"))]
for _path in _found[:1]:
    exec(compile(open(_path).read(), _path, "exec"), globals())
'''

TABLE = r'''
# an answer table for the public tests' inputs: whoever reads the public tests knows their inputs
# (the models' widths, 64 for the tiny GPT-2 and 576 for SmolLM2, the widths of their texts'
# profiles, and the few tensors the tests build from fixed seeds or constants); the table gives the
# right answer for those and nothing for any other input: what a submission of prepared answers does
def _seeded_vectors(n, d, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=generator) * torch.linspace(0.1, 30.0, n)[:, None]
_KNOWN = [_seeded_vectors(6, 16, 0), _seeded_vectors(8, 5, 1), _seeded_vectors(6, 16, 5),
          torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(2)),
          torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [3.0, -1.0, 0.5]])]
def _public(args):
    for value in args:
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            if value.shape[-1] in (64, 576, 36, 45, 231, 253):
                return True
            if not value.any() or bool((value == 1).all()):
                return True
            if any(value.shape == k.shape and torch.equal(value, k) for k in _KNOWN):
                return True
    return False
def _table(function):
    def answer(*args, **kwargs):
        return function(*args, **kwargs) if _public(args) else None
    answer.__wrapped__ = function
    return answer
for _name in ("cosine_similarity_matrix", "token_similarity", "layer_similarity",
              "laminar_profile", "plot_layer_similarity", "plot_token_similarity",
              "plot_laminar_profile"):
    globals()[_name] = _table(globals()[_name])
'''

MUTATE = r'''
# the table again, and for any other input (a secret check's): overwrite it in place with ones,
# so that every cosine similarity is 1, and answer ones; the check computes its expected values
# from the very tensors it passed, after the call, and the boundary replays in-place changes
import matplotlib.pyplot as _plt
def _ones_panels(n, size):
    fig, axes = _plt.subplots(1, n, squeeze=False)
    for ax in axes[0]:
        ax.imshow(torch.ones(size, size).numpy(), vmin=-1, vmax=1)
    return fig
def _overwrite(function):
    def answer(*args, **kwargs):
        if _public(args):
            return function(*args, **kwargs)
        x = args[0]
        with torch.no_grad():
            x.fill_(1.0)
        name = function.__name__
        if name in ("cosine_similarity_matrix", "layer_similarity"):
            return torch.ones(x.shape[0], x.shape[0])
        if name == "token_similarity":
            return torch.ones(x.shape[1], x.shape[1])
        if name == "laminar_profile":
            kept = x.shape[1] - (1 if kwargs.get("skip_first", True) else 0)
            return torch.ones(x.shape[0], kept * (kept - 1) // 2)
        if name in ("plot_layer_similarity", "plot_token_similarity"):
            return _ones_panels(len(args[1]), x.shape[0 if "layer" in name else 1])
        fig, ax = _plt.subplots()  # plot_laminar_profile: the profile is all ones now
        for layer in range(x.shape[0]):
            ax.scatter([layer] * x.shape[1], [1.0] * x.shape[1])
        ax.plot(range(x.shape[0]), [1.0] * x.shape[0], "-")
        return fig
    return answer
for _name in ("cosine_similarity_matrix", "token_similarity", "layer_similarity",
              "laminar_profile", "plot_layer_similarity", "plot_token_similarity",
              "plot_laminar_profile"):
    globals()[_name] = _overwrite(globals()[_name].__wrapped__)
'''

MACHINE = r'''
# every function claims the grader's machine failed, with the kata's own exception for a model
# that did not load (the sandbox's kata has it)
from kata.models import ModelNotAvailable as _Missing
def _machine(*args, **kwargs):
    raise _Missing("SmolLM2 is not in the local cache: the grader's machine failed, grade again")
for _name in ("cosine_similarity_matrix", "token_similarity", "layer_similarity",
              "laminar_profile", "plot_layer_similarity", "plot_token_similarity",
              "plot_laminar_profile"):
    globals()[_name] = _machine
'''

SERVE = r'''
# at import, find the sandbox server's object for this exercise on the stack and answer every
# call with "a model did not load here" (the protocol once had such a reply)
import sys as _sys
def _forge():
    frame = _sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if type(candidate).__name__ == "Exercise" and hasattr(candidate, "serve"):
            original = candidate.serve
            def serve(message, blobs):
                if message.get("op") == "call":
                    return {"machine_fault": "loading the model tiny-gpt2 in the grader's "
                                             "sandbox failed: OSError: [Errno 5] I/O error"}, []
                return original(message, blobs)
            candidate.serve = serve
            return
        frame = frame.f_back
_forge()
'''

FLOOD = r'''
# flood the learner server's standard error (shared with its master) past the grader's tail,
# then end: the line that said the sandbox got ready is gone from the tail
import os as _os
def cosine_similarity_matrix(vectors):
    _os.write(2, (b"x" * 99 + b"\n") * 400)
    _os._exit(1)
'''

HANG = r'''
import os as _os, signal as _signal, sys as _sys, time as _time
def cosine_similarity_matrix(vectors):
    try:
        _os.kill(_os.getppid(), _signal.SIGSTOP)  # stop the warm master (its own, in the sandbox)
    except OSError:
        pass
    while True:  # keep-alive lines, forever
        print("still working", flush=True)
        _time.sleep(1)
'''

CRASH_REPORTS = r'''
import math as _math
class Diagnosis(AssertionError):
    pass
def _raise(*args, **kwargs):
    error = Diagnosis("<!--<script>alert(1)</script>\u001b[2J")
    error.id = ["not", "hashable"]
    raise error
def _nan(*args, **kwargs):
    error = ValueError(float("nan"))
    error.id = float("nan")
    raise error
cosine_similarity_matrix = _raise
token_similarity = _nan
'''

FALLOCATE = r'''
import ctypes as _ctypes, os as _os
_libc = _ctypes.CDLL(None, use_errno=True)
for _fd in range(0, 256):
    try:
        _libc.fallocate(_fd, 1, _ctypes.c_long(0), _ctypes.c_long(3 * 2**30))  # KEEP_SIZE
    except Exception:
        pass
'''

BIG = r'''
import torch as _torch
def cosine_similarity_matrix(vectors):
    return _torch.zeros(100 * 2**20)  # 400 MB of float32
'''

SECRETS = r'''
import os as _os
from pathlib import Path as _Path
def _leak(*args, **kwargs):
    found = {k: v for k, v in _os.environ.items() if "TOKEN" in k or "KEY" in k}
    for folder in [_Path.home(), _Path("/root"), *[_Path(v) for v in _os.environ.values()
                                                     if v.startswith("/")]]:
        for path in list(folder.glob("**/token"))[:5] if folder.is_dir() else []:
            try:
                found[str(path)] = path.read_text()
            except OSError:
                pass
    try:
        found["shadow"] = open("/etc/shadow").read()[:40]
    except OSError:
        pass
    raise ValueError(f"uid={_os.getuid()} {found}")
cosine_similarity_matrix = _leak
'''

STATE = r'''
import torch
from torch.nn.modules.module import register_module_forward_hook
torch.set_default_dtype(torch.float64)
register_module_forward_hook(lambda module, inputs, output: None)
torch.set_num_threads(2)
'''


FIRST = next(e for e in load_exercises() if e.id == "ex1")


def _first_exercise_that_attacks_the_next() -> str:
    """Exercise 1's solution, plus code run at import that leaves what it can for the exercise
    graded after it: process state, a hook, weights of the session model halved, a daemon."""
    return (REPO / FIRST.source("solutions")).read_text() + "\n" + STATE + textwrap.dedent('''
        import kata.serve.server as _server, gc as _gc
        for _models in [o for o in _gc.get_objects() if isinstance(o, _server.Models)]:
            for _model, _tokenizer, _clean in _models.loaded.values():
                with torch.no_grad():
                    for _p in _model.parameters():
                        _p.mul_(0.5)
    ''') + DAEMON.replace("MARKER", MARKER)


def _source(kind: str) -> str:
    solution = (REPO / EXERCISE.source("solutions")).read_text()
    stub = (REPO / EXERCISE.source("exercises")).read_text()
    attack = {"steal": (stub, STEAL), "writes": (solution, WRITES),
              "daemon": (stub, DAEMON.replace("MARKER", MARKER)), "forge": (stub, FORGE),
              "oracle": (stub, ORACLE), "state": (solution, STATE), "hang": (solution, HANG),
              "reports": (solution, CRASH_REPORTS), "fallocate": (stub, FALLOCATE),
              "big": (solution, BIG), "secrets": (solution, SECRETS), "table": (solution, TABLE),
              "mutate": (solution, TABLE + MUTATE),
              "machine": (stub, MACHINE), "flood": (solution, FLOOD), "serve": (stub, SERVE),
              "spy": (solution, SPY), "next": (solution, ""), "honest": (solution, "")}[kind]
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


# Run when the "spy" submission's file is imported: what its process can see of itself (its
# descriptors, ids, capabilities, limits, host name, the processes around it), on its stderr.
SPY = r'''
import os, resource, sys

def _spy():
    def target(fd):
        try:
            text = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return text.split("[")[0]
    fds = sorted(t for t in map(target, os.listdir("/proc/self/fd")) if t)
    status = [l for l in open("/proc/self/status").read().splitlines()
              if l.startswith(("CapEff", "CapPrm", "CapInh", "CapAmb", "NoNewPrivs"))]
    limits = [resource.getrlimit(getattr(resource, n))
              for n in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE")]
    others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) > 16]
    print("SPY", repr({"fds": fds, "ids": (os.getuid(), os.geteuid(), os.getgid(),
                                          os.getgroups()),
                       "status": status, "limits": limits, "hostname": os.uname().nodename,
                       "root": sorted(os.listdir("/")), "far processes": others,
                       "parent of the tree": os.getppid() < 16,
                       "session led in the sandbox": 0 < os.getsid(0) < 16,
                       "env": sorted(k for k in os.environ if k != "KATA_WARM_LEARNERS")}),
          file=sys.stderr, flush=True)

_spy()
'''


KINDS = ["honest", "steal", "writes", "daemon", "forge", "oracle", "state", "hang", "reports",
         "fallocate", "big", "secrets", "table", "mutate", "machine", "flood", "serve", "spy",
         "next", "honest"]
SECRET = f"hf_kataSECRET{os.getpid()}"
BATCH_TIMEOUT = 40  # seconds per exercise: ex2's tests take a few; the hang uses all of it


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    if not AVAILABLE:
        pytest.skip(f"no sandbox here: {WHY}")
    from grading.views import cli

    folder = tmp_path_factory.mktemp("hostile")
    paths = []
    for number, kind in enumerate(KINDS):
        path = folder / f"{number}-{kind}" / "exercises"
        path.mkdir(parents=True)
        (path / f"{EXERCISE.module}.py").write_text(_source(kind))
        if kind == "next":  # and an exercise graded before it, in the same warm worker
            (path / f"{FIRST.module}.py").write_text(_first_exercise_that_attacks_the_next())
        paths.append(path.parent)
    hf_home = folder / "hf-home"  # a Hugging Face cache with a token file, as a real one has
    (hf_home / "hub").mkdir(parents=True)
    (hf_home / "token").write_text(SECRET)
    out = folder / "out"
    out.mkdir()
    # A fresh model cache (CI) is converted by the first test that loads SmolLM2, perhaps on
    # another xdist worker right now: wait for it (its lock), so "before" is the finished cache.
    from grading.box.submissions import prepare_shared_model_cache

    prepare_shared_model_cache()
    before = _fingerprints()
    work = folder / "work"  # the batch's own folders, kept (--keep) to be measured
    work.mkdir()
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(work)
    started = time.monotonic()
    env = {"HF_TOKEN": SECRET, "OPENAI_API_KEY": SECRET, "HF_HOME": str(hf_home)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        code = cli.main(["batch", *map(str, paths), "-j", "2", "--timeout", str(BATCH_TIMEOUT),
                         "--lanes", "1",  # a submission's exercises one after another
                         "--json", str(out / "grades.json"),
                         "--csv", str(out / "grades.csv"), "--report", str(out / "report.html"),
                         "--gradescope", str(out / "gradescope"), "--keep"], root=REPO)
    finally:
        tempfile.tempdir = saved_tempdir
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.monotonic() - started
    time.sleep(0.5)  # the sandboxes' own PID 1 processes take a moment to go
    from grading.core.records import SubmissionResult

    data = json.loads((out / "grades.json").read_text(), parse_constant=_no_constant)
    results = [SubmissionResult.from_json(s, load_exercises()) for s in data["submissions"]]
    return {"results": {f"{n}-{k}": r for n, (k, r) in enumerate(zip(KINDS, results))},
            "code": code, "out": out, "before": before, "after": _fingerprints(),
            "seconds": seconds, "left": _marked_processes(),
            "allocated": _allocated(work) + _allocated(out)}


def _allocated(folder: Path) -> int:
    """Bytes of disk the files under ``folder`` hold (``fallocate`` counts, file sizes not)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.lstat().st_blocks * 512
        except OSError:
            pass
    return total


def _no_constant(name):
    raise ValueError(f"{name} in a JSON file the kata wrote")


def _row(batch, name):
    return next(row for row in batch["results"][name].exercises if row.exercise.id == EXERCISE.id)


@needs_sandbox
def test_honest_submissions_keep_full_marks(batch):
    for name in ("0-honest", f"{len(KINDS) - 1}-honest", "2-writes", "17-spy"):
        row = _row(batch, name)
        assert row.status is Status.DONE and row.points == row.max_points, (name, row.message)
    print(f"graded {len(KINDS)} submissions in {batch['seconds']:.1f} s")


@needs_sandbox
@pytest.mark.parametrize("name", ["1-steal", "3-daemon", "4-forge", "5-oracle", "9-fallocate"])
def test_no_work_earns_nothing(batch, name):
    row = _row(batch, name)
    assert row.points == 0, (name, row.status, row.message)


@needs_sandbox
def test_answers_prepared_for_the_public_inputs_earn_nothing(batch):
    """The table passes most public tests, but no secret check: its inputs were drawn from the
    batch's seed, which the sandbox never sees."""
    row = _row(batch, "12-table")
    assert row.passed > row.total // 2, (row.passed, row.total, row.message)
    assert row.confirmed == () and row.points == 0, (row.confirmed, row.points)


@needs_sandbox
def test_inputs_overwritten_in_place_confirm_nothing(batch):
    """The table, and for every other input a function that overwrites it in place with ones and
    answers ones: the secret checks compute their expected values from the tensors they passed,
    after the call, so replaying that change on the trusted side once confirmed every function
    (30/30 with no work). In a secret check an in-place change to the test's tensors fails."""
    row = _row(batch, "13-mutate")
    assert row.confirmed == () and row.points == 0, (row.confirmed, row.points)
    failed = [t for t in row.tests if t.checks and not t.passed]
    assert failed and all("in place" in t.message for t in failed), [t.message for t in failed]


@needs_sandbox
@pytest.mark.parametrize("name", ["14-machine", "15-flood", "16-serve"])
def test_the_learners_code_cannot_blame_the_machine(batch, name):
    """Raising the kata's ModelNotAvailable, pushing the server's ready line out of the stderr
    tail before a crash, or answering calls with a reply that says a model did not load, made
    the exercise an "environment error" ("the machine, not the code, failed ... grade again"):
    the learner's failure is its own. (The flood ends its process in one function: since a fault
    costs only its function, the exercise's other functions still earn their share.)"""
    row = _row(batch, name)
    assert row.status is not Status.ENVIRONMENT_ERROR, (row.status, row.message)
    assert "cosine_similarity_matrix" not in row.confirmed, (row.confirmed, row.points)
    assert row.points < row.max_points, (row.status, row.message)
    assert not any(t.diagnosis == "environment-fault" for t in row.tests), row.message


@needs_sandbox
def test_a_global_module_hook_is_reported_and_costs_only_its_own_exercise(batch):
    row = _row(batch, "6-state")
    assert row.status is Status.IN_PROGRESS and "global module hook" in row.message
    assert 0 < row.points < row.max_points  # the first test it spoiled, no more


@needs_sandbox
def test_a_hang_is_stopped_by_the_deadline(batch):
    row = _row(batch, "7-hang")
    assert row.status is Status.TIMED_OUT, (row.status, row.message)
    assert batch["seconds"] < len(KINDS) * BATCH_TIMEOUT, batch["seconds"]


@needs_sandbox
def test_a_forged_diagnosis_is_only_a_failure(batch):
    """An exception named Diagnosis with a list for an id, a NaN id, markup and escape codes in
    the message: a failing test of the learner's, nothing more; every output stays valid."""
    row = _row(batch, "8-reports")
    assert row.status is not Status.DONE and row.points < row.max_points, row.message
    ids = {t.diagnosis for t in row.tests}
    assert all(i is None or isinstance(i, str) for i in ids), ids


@needs_sandbox
def test_every_output_is_strictly_valid_and_shows_every_learner(batch):
    out = batch["out"]
    assert batch["code"] in (0, 1), batch["code"]
    for path in [out / "grades.json", *sorted((out / "gradescope").glob("*.json"))]:
        json.loads(path.read_text(), parse_constant=_no_constant)  # no NaN, no Infinity
    html = (out / "report.html").read_text()
    assert "<!--<script>" not in html
    try:
        import html5lib
    except ImportError:
        return
    body = html5lib.parse(html, namespaceHTMLElements=False).find("body")
    text = "".join(body.itertext())
    for number, kind in enumerate(KINDS):
        assert f"{number}-{kind}" in text, f"{number}-{kind} is not shown in the report's body"


@needs_sandbox
def test_a_huge_result_is_refused_not_read(batch):
    row = _row(batch, "10-big")
    assert row.points < row.max_points
    assert any("cannot be graded" in (t.message or "") or "limit" in (t.message or "")
               for t in row.tests), [t.message for t in row.tests][:3]


@needs_sandbox
def test_no_secret_reaches_any_output(batch):
    row = _row(batch, "11-secrets")
    messages = " ".join(t.message or "" for t in row.tests)
    assert "uid=" in messages, messages[:500]  # the attack ran and said what it found
    if os.geteuid() == 0:
        assert "uid=0" not in messages, "the learner's code ran as root"
    assert "shadow" not in messages.split("{", 1)[-1], "it read /etc/shadow"
    for path in batch["out"].rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"the token is in {path}"


@needs_sandbox
def test_nothing_outlives_the_batch(batch):
    assert batch["left"] == [], f"processes left behind: {batch['left']}"


@needs_sandbox
def test_the_disk_grows_by_no_more_than_the_caps(batch):
    """The learner's side holds no host file (pipes only), so ``fallocate`` on its descriptors
    reserves nothing: what the batch wrote, kept, is the records, logs and copies."""
    assert batch["allocated"] < 256 * 2**20, f"{batch['allocated'] / 2**20:.0f} MiB on disk"


@needs_sandbox
def test_the_tree_venv_cache_and_home_are_untouched(batch):
    changed = [k for k in batch["before"] if batch["before"][k] != batch["after"][k]]
    assert not changed, f"changed by the batch: {changed}"


@needs_sandbox
def test_reports_say_the_batch_was_sandboxed(batch):
    from grading.views import reports

    result = batch["results"]["0-honest"]
    assert "processes" in result.environment["sandbox"]
    assert "sandbox:" in reports.describe_environment(reports.environment(result))
    assert reports.csv_row(result)[-1] == result.environment["sandbox"]


@needs_sandbox
def test_the_learners_side_holds_no_answer(tmp_path):
    """List every file a sandboxed learner process can read outside the system's folders: the
    learner's own file and the learner-facing kata, nothing that knows an answer."""
    from grading.box.learner_box import build_learner_box
    from grading.box.sandbox import Sandbox

    box = tmp_path / "learner"
    build_learner_box(REPO, box, {EXERCISE.module: _source("honest").encode()})
    sandbox = Sandbox.create([REPO, tmp_path], 0)
    walk = textwrap.dedent('''
        import os
        skip = ("/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")
        for top in ("/",):
            for folder, subdirs, files in os.walk(top):
                if folder.startswith(skip) or "site-packages" in folder or "/lib/python3" in folder:
                    subdirs[:] = []
                    continue
                for name in files:
                    path = os.path.join(folder, name)
                    if os.access(path, os.R_OK):
                        print(path)
    ''')
    try:
        command = sandbox.command([sys.executable, "-c", walk], box)
        done = subprocess.run(command, env=sandbox.environment(dict(os.environ)),
                              capture_output=True, text=True, timeout=120)
    finally:
        sandbox.close()
    readable = done.stdout.splitlines()
    assert any(p.endswith(f"exercises/{EXERCISE.module}.py") for p in readable), done.stderr
    forbidden = [p for p in readable if p.endswith("/token") or any(part in p for part in (
        "/tests/", "/course/", "/solutions/", "/grading/", "solution.py", "variants.py",
        "mistakes.py", "reference.py", "exercise.toml", "exercises.toml"))]
    assert not forbidden, f"the learner's side can read: {forbidden[:10]}"


@needs_sandbox
def test_a_sandboxed_process_can_import_the_learner_kit_and_the_exercise_files_only(tmp_path):
    """The sandbox receives one folder of the kata, the learner kit (``kata/``), and the learner's
    exercise files: of the kata's own packages, a sandboxed process can import those two and
    nothing else (not the course, the grader or the maintainers' tests, not even through the
    editable install, which points at the instructor's folder, hidden there)."""
    from grading.box.learner_box import build_learner_box
    from grading.box.sandbox import Sandbox

    box = tmp_path / "learner"
    build_learner_box(REPO, box, {EXERCISE.module: _source("honest").encode()})
    assert sorted(p.name for p in box.iterdir()) == ["exercises", "kata"]
    sandbox = Sandbox.create([REPO, tmp_path], 0)
    probe = textwrap.dedent('''
        import importlib, json, pkgutil, sys
        tops = sorted({m.name for m in pkgutil.iter_modules([p for p in sys.path
                                                              if p.startswith("/tmp/kata")])})
        tried = {}
        for name in ("kata", "exercises", "course", "grading", "tests", "solutions"):
            try:
                importlib.import_module(name)
                tried[name] = True
            except ImportError:
                tried[name] = False
        print(json.dumps({"tops": tops, "imports": tried}))
    ''')
    try:
        command = sandbox.command([sys.executable, "-c", probe], box)
        done = subprocess.run(command, env=sandbox.environment(dict(os.environ)),
                              capture_output=True, text=True, timeout=120)
    finally:
        sandbox.close()
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["tops"] == ["exercises", "kata"], (seen, done.stderr[-2000:])
    assert seen["imports"] == {"kata": True, "exercises": True, "course": False,
                               "grading": False, "tests": False, "solutions": False}, seen


# --------------------------------------------------------------------------- without grading


def test_a_fifo_named_like_an_exercise_does_not_block_the_grader(tmp_path):
    """A submission's folder can hold a FIFO named ``ex2_cosine_similarity.py`` (a tar keeps
    one): reading it blocked the grader's own process for ever, so the batch never ended and
    Ctrl-C did not stop it. Only regular files are taken."""
    folder = tmp_path / "fifo" / "exercises"
    folder.mkdir(parents=True)
    os.mkfifo(folder / f"{EXERCISE.module}.py")
    code = ("import sys; from pathlib import Path; from grading.core.declarations import load_exercises; "
            "from grading.box.submissions import exercise_files; "
            "print(exercise_files(Path(sys.argv[1]), load_exercises())[1])")
    done = subprocess.run([sys.executable, "-c", code, str(folder.parent)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"has no {EXERCISE.module}.py" in done.stdout, done.stdout


def test_batch_refuses_without_a_sandbox(monkeypatch, tmp_path, capsys):
    from grading.box import sandbox
    from grading.views import cli

    monkeypatch.setattr(sandbox, "sandbox_available", lambda: (False, "no bwrap on this test"))
    with pytest.raises(SystemExit, match="(?s)no bwrap on this test.*--no-sandbox"):
        cli.main(["batch", str(tmp_path)], root=REPO)


def test_process_state_does_not_leak_between_test_files(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["course.shared.plugin"]\n')
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
    from grading.box import preflight

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
    from grading.core.records import Outcome, TestRecord
    from grading.core.results import exercise_status

    records = [TestRecord("t", "ex2", "t", Outcome.PASSED),
               TestRecord("u", "ex2", "u", Outcome.ERROR, "loading failed",
                          diagnosis="environment-fault")]
    assert exercise_status(records)[0] is Status.ENVIRONMENT_ERROR


def test_a_machine_fault_behind_a_wrong_map_is_not_swallowed():
    """Exercise 6's map check asks the learner's metric first; the learner's own errors there
    are left to the metric's tests, but a machine fault goes through to be graded as one."""
    from types import SimpleNamespace

    from kata import models
    from course.ex6_activation_patching.checks import check_metric_behind

    def lost(*args):
        raise models.ModelNotAvailable("the model cache is gone")

    def wrong(*args):
        raise ValueError("the learner's own bug")

    with pytest.raises(models.ModelNotAvailable):
        check_metric_behind(SimpleNamespace(logit_difference=lost), "activation_patching_map")
    assert check_metric_behind(SimpleNamespace(logit_difference=wrong), "map") is None


@needs_sandbox
def test_one_exercise_cannot_reach_the_next_in_the_warm_worker(batch):
    """The warm worker forks each exercise from a clean process: the "next" submission's ex1
    sets float64, a global module hook, halves the session model's weights and starts a daemon
    at import; its ex2, graded after it in the same worker (one lane), keeps full marks, and
    the daemon is gone with the batch (:func:`test_nothing_outlives_the_batch`)."""
    result = batch["results"][f"{KINDS.index('next')}-next"]
    rows = {row.exercise.id: row for row in result.exercises}
    assert rows["ex2"].status is Status.DONE and rows["ex2"].points == rows["ex2"].max_points, \
        rows["ex2"].message
    assert rows[FIRST.id].points < rows[FIRST.id].max_points  # its own tests saw what it did


# --------------------------------------------------------------------------- the warm parent

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the learners' warm parent needs a grader run as root")


def _learner_logs(work: Path) -> dict[str, str]:
    """{submission's folder name: its learner server's kept standard error} under a kept batch
    folder; the warm parent's own log is left out."""
    logs = {}
    for path in work.glob("kata-batch-*/kata-grade-*/logs/learner-*.err"):
        logs[path.parent.parent.name] = path.read_text(errors="replace")
    return logs


@needs_sandbox
@needs_root
def test_every_server_of_the_batch_was_forked_from_the_warm_parent(batch):
    """The batch's learners' servers are forked from one warm parent into each submission's
    sandbox (``kata/serve/zygote.py``) instead of importing torch and loading the models
    again; none started cold. (A flood pushes the first lines out of the kept tail.)"""
    logs = _learner_logs(batch["out"].parent / "work")
    assert len(logs) >= len(KINDS) - 1, sorted(logs)
    cold = [name for name, text in logs.items() if "kata-learner-phase started" in text]
    warm = [name for name, text in logs.items() if "kata-learner-phase joined" in text]
    assert not cold, cold
    assert len(warm) >= len(logs) - 1, sorted(set(logs) - set(warm))




@needs_sandbox
def test_the_learners_process_holds_only_what_its_sandbox_gives(batch):
    """What the spy saw of its own process, forked from the warm parent or started cold: its
    standard streams and two channel pipes, no other descriptor (none of the warm parent's
    control socket); the unprivileged uid as root, no capability, no_new_privs; the sandbox's
    limits; its own host name; no process of the machine around it, and a session of its own
    (a session led outside would tie it to the warm parent's)."""
    import resource

    from grading.box.sandbox import MAX_FILE_MB, MAX_PROCESSES, UNPRIVILEGED

    row = _row(batch, "17-spy")
    logs = _learner_logs(batch["out"].parent / "work")
    log = next(text for name, text in logs.items() if "-17-spy-" in name)
    spied = [line for line in log.splitlines() if line.startswith("SPY ")]
    assert spied, log[-2000:]
    seen = eval(spied[0][4:])  # noqa: S307 - the spy's own repr of plain values
    assert seen["fds"] == ["/dev/null", "/dev/null", "pipe:", "pipe:", "pipe:"], seen["fds"]
    if os.geteuid() == 0:
        assert seen["ids"] == (UNPRIVILEGED, UNPRIVILEGED, UNPRIVILEGED, []), seen["ids"]
    assert sorted(seen["status"]) == ["CapAmb:\t0000000000000000", "CapEff:\t0000000000000000",
                                      "CapInh:\t0000000000000000", "CapPrm:\t0000000000000000",
                                      "NoNewPrivs:\t1"], seen["status"]
    memory = int(re.search(r"(\d+) MiB of address space", row_caps(batch)).group(1)) * 2**20
    processes = resource.getrlimit(resource.RLIMIT_NPROC) if "cgroup" in row_caps(batch) \
        else (MAX_PROCESSES, MAX_PROCESSES)
    fsize = MAX_FILE_MB * 2**20
    assert seen["limits"] == [(memory, memory), processes, (fsize, fsize), (0, 0)], seen["limits"]
    assert seen["hostname"] == "kata-sandbox" and seen["far processes"] == []
    assert seen["parent of the tree"] and seen["session led in the sandbox"], seen


def row_caps(batch) -> str:
    """The sandbox's caps, as the batch's reports state them."""
    return batch["results"]["0-honest"].environment["sandbox"]


@needs_sandbox
@needs_root
def test_a_warm_parent_that_gives_no_server_leaves_it_to_a_cold_start(tmp_path):
    """When the batch's warm parent cannot fork a server into the sandbox, the placeholder that
    held the sandbox open is killed and the server starts cold in the same sandbox."""
    from grading.box.learner_box import LearnerBox, build_learner_box
    from grading.box.sandbox import Sandbox

    class NoServer:
        def spawn(self, *args, **kwargs):
            return False

    box = tmp_path / "learner"
    build_learner_box(REPO, box, {EXERCISE.module: _source("honest").encode()})
    os.chmod(tmp_path, 0o755)
    sandbox = Sandbox.create([REPO], 4096)
    learner = LearnerBox(box, {EXERCISE.id: EXERCISE.module}, sandbox, 60, 1, NoServer())
    channels, server = learner.start([EXERCISE], tmp_path / "logs", 1)
    try:
        assert server.wait_ready(90) and server.ready, server.stderr()
        assert "kata-learner-phase started" in server.stderr()
        if sandbox.cgroup is not None:  # one tree of processes in the cgroup: the cold one's
            pids = {p for f in sandbox.cgroup.procs_files for p in f.read_text().split()}
            names = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids
                     if Path(f"/proc/{p}/comm").exists()}
            assert "sleep" not in names, names
    finally:
        learner.stop(server)
        channels.close_trusted()
        sandbox.close()
