"""Running an implementation's tests in a child process that cannot hang, flood or kill the grader.

:func:`run_tests` runs the test files of some exercises in one pytest process with the recorder
plugin (:mod:`grading.core.recorder`), and watches it:

* a wall-clock limit per exercise: the clock of an exercise starts when its first test starts;
  when it runs out, the whole process group is killed and the test that was running is recorded
  as "timed out";
* a memory limit (the address space, ``RLIMIT_AS``), set in the child just before it starts
  pytest, so a runaway allocation fails inside the child with a ``MemoryError``;
* pytest does not capture output and the child's standard output goes to ``/dev/null``, so
  megabytes of prints cannot block, fill the memory or fill the disk; its standard error goes
  to a file (never a pipe), where a crash leaves its traceback;
* when the child dies (segfault, ``os._exit``, killed), the test that was running is recorded
  as "crashed"; the rest of that exercise's tests are "not run"; and pytest is started again
  for the remaining exercises, skipping every test already recorded.

So each exercise gets an outcome for every one of its tests, whatever the code under test does.

Submissions (``run_tests(..., warm=True, learner=...)``) run a trusted warm worker instead
(:mod:`grading.box.worker`): one process per submission that imports torch, transformers and
pytest and loads the models once, then forks a fresh child per exercise and keeps each
exercise's clock itself; the learner's functions run in the learner's server
(:mod:`grading.box.learner_box`, in the submission's sandbox), reached over one channel per
exercise. The whole run has a deadline, enforced from here, whatever the processes write; and
:data:`STOP` (the batch's first Ctrl-C) stops it. The records, statuses and messages are
the same as in one process.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from grading.core.faults import (CALL_SECONDS_VARIABLE, MEMORY_LIMIT_VARIABLE, Ended, kind_of,
                                 sentence, signal_name)
from grading.core.records import ENVIRONMENT_FAULT, CollectedTest, Outcome, Status, TestRecord
from grading.core.recorder import shorten_paths

POLL_SECONDS = 0.1
#: How long pytest may take to start (imports, collection) before its first test.
STARTUP_SECONDS = 90.0
#: How long a finished session may take to exit (a learner's thread can keep it alive).
EXIT_GRACE_SECONDS = 10.0
#: How long a warm worker may stay silent beyond its own limits before it counts as stuck.
WORKER_GRACE_SECONDS = 30.0
#: torch threads per test process unless KATA_TORCH_THREADS says otherwise.
DEFAULT_THREADS = 1
#: The command line's defaults (``--timeout``, ``--memory-limit`` of ``batch``): the wall-clock
#: seconds of one exercise's tests, and the MiB of address space of each test process.
DEFAULT_TIMEOUT = 120.0
DEFAULT_BATCH_MEMORY_MB = 4096

# The child sets its own memory limit and then becomes pytest (exec), so the limit is in place
# before any code under test runs. (subprocess's preexec_fn would do the same but is unsafe when
# the grader runs several submissions from threads.)
_LIMIT_THEN_EXEC = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)
#: Set, every run stops at its next look (the first Ctrl-C or SIGTERM of a batch); a batch clears
#: it as it starts.
STOP = threading.Event()


def stopping() -> bool:
    return STOP.is_set()


@dataclass
class RunResult:
    """Everything recorded about one implementation's tests."""

    tests: list[CollectedTest] = field(default_factory=list)  # in the order they run
    results: dict[str, TestRecord] = field(default_factory=dict)  # nodeid -> its record
    environment: dict = field(default_factory=dict)  # torch, transformers, device, models
    # exercise id -> (status, why) for an exercise that has no recorded test at all
    problems: dict[str, tuple[Status, str]] = field(default_factory=dict)
    processes: int = 0  # how many pytest processes (or warm workers) it took


#: The variable that carries the secret checks' seed (``course/shared/secret.py``) to the test process,
#: never to the learner's: :func:`child_environment` leaves it out.
SECRET_SEED_VARIABLE = "KATA_SECRET_SEED"


def fresh_secret_seed() -> int:
    """A seed for the secret checks that nobody could have guessed."""
    return secrets.randbelow(2**62)


def child_environment(root: Path, threads: int | None = None) -> dict[str, str]:
    """The environment of a grading child: nothing from the caller changes which tests run.

    torch runs on ``threads`` threads: by default ``KATA_TORCH_THREADS`` if set, else one. The
    kata's forward passes are small, and several threads per process are far slower on a
    crowded machine (grading the stubs on 2 cores: 13 s with one thread, 89 s with two).
    """
    from grading.core.reference_cache import REFERENCE_CACHE_VARIABLE

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "KATA_IMPL", "PYTHONSTARTUP",
                        SECRET_SEED_VARIABLE, REFERENCE_CACHE_VARIABLE)}
    env.update(
        PYTHONPATH=str(root),
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYTHONDONTWRITEBYTECODE="1",
        MPLBACKEND="Agg",
    )
    threads = str(threads or os.environ.get("KATA_TORCH_THREADS") or DEFAULT_THREADS)
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, KATA_TORCH_THREADS=threads)
    return env


#: The model the learner's own code loads by default (``kata.load_model()``: their notebook,
#: ``grader.py figures``). No test reads it: every test names its models.
MODEL_VARIABLE = "KATA_MODEL"


def tests_environment(root: Path, threads: int | None = None) -> dict[str, str]:
    """What the trusted test processes start from: :func:`child_environment` without
    :data:`MODEL_VARIABLE`, so that no verdict depends on it (and a notebook kernel whose
    ``KATA_MODEL`` changed keeps its warm worker)."""
    env = child_environment(root, threads)
    env.pop(MODEL_VARIABLE, None)
    return env


def trusted_environment(root: Path, threads: int | None, secret_seed: int,
                        references: Path | None = None, call_seconds: float = 0.0,
                        memory_limit_mb: int = 0) -> dict[str, str]:
    """The environment of the trusted test processes: :func:`tests_environment` with the secret
    checks' seed and the batch's folder of reference values, which the learner's side never
    gets, and the deadline of a learner's call and the memory limit, which name how a call
    ended the learner's process (:mod:`grading.core.faults`)."""
    from grading.core.reference_cache import REFERENCE_CACHE_VARIABLE

    env = tests_environment(root, threads)
    env[SECRET_SEED_VARIABLE] = str(secret_seed)
    env[CALL_SECONDS_VARIABLE] = str(call_seconds)
    env[MEMORY_LIMIT_VARIABLE] = str(memory_limit_mb)
    if references is not None:
        env[REFERENCE_CACHE_VARIABLE] = str(references)
    return env


def start_child(command: list[str], cwd: Path, env: dict, log_dir: Path,
                memory_limit_mb: int = 0, name: str = "run",
                pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """Start ``command`` in its own process group, its errors going to ``log_dir/<name>.err``.

    Its standard output goes nowhere: pytest runs without capturing (``-s``), so whatever the
    code under test prints, however much, costs neither memory nor disk.
    """
    if memory_limit_mb:
        command = [sys.executable, "-c", _LIMIT_THEN_EXEC, str(memory_limit_mb * 2**20), *command]
    with open(log_dir / f"{name}.err", "wb") as err:
        return subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                pass_fds=pass_fds)


def kill_group(process: subprocess.Popen) -> None:
    """Kill the child and anything it started (it leads its own process group)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows has no process groups to kill
            process.kill()
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def tail(path: Path, chars: int = 4000) -> str:
    """The end of a log file, however large the file grew."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - chars))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class _EventReader:
    """Reads the complete JSON lines the recorder has written so far."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def new_events(self) -> list[dict]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        events = []
        for line in complete.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line the child was killed in the middle of writing
            if isinstance(event, dict) and isinstance(event.get("event"), str):
                events.append(event)
        return events


@dataclass
class _Process:
    """What one pytest process did: its events, and how it ended."""

    events: list[dict] = field(default_factory=list)
    running: str | None = None  # nodeid of the test started but not finished
    last_exercise: str | None = None
    clock_start: float | None = None  # when the running exercise's first test started
    finished_at: float | None = None  # when the session (or the warm worker) ended normally
    last_event_at: float | None = None  # when the process last wrote anything
    warm: bool = False  # a warm worker: one pytest session per exercise, then "worker_done"
    ended: str = ""  # "", "timeout", "startup timeout" or "crash"
    returncode: int | None = None
    stderr: str = ""

    # a warm worker (several exercises, maybe at once): per exercise
    begun: list = field(default_factory=list)  # exercises whose child was started
    running_in: dict = field(default_factory=dict)  # exercise -> nodeid of its running test
    tested: set = field(default_factory=set)  # exercises that started a test
    done: set = field(default_factory=set)  # exercises whose session ended normally
    deaths: list = field(default_factory=list)  # (exercise, how, returncode, running nodeid)

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def _apply_warm(self, kind: str, event: dict, exercise_of: dict[str, str]) -> None:
        """The worker's children write interleaved: the worker keeps each exercise's clock and
        says how each child ended (``child_done``, ``child_died``)."""
        if kind == "collected":
            exercise_of.update({t["nodeid"]: t["exercise"] for t in event.get("tests", [])
                                if isinstance(t, dict) and "nodeid" in t})
        elif kind == "exercise":
            self.begun.append(event.get("exercise"))
        elif kind == "start":
            exercise = exercise_of.get(event.get("nodeid"))
            self.running_in[exercise] = event.get("nodeid")
            self.tested.add(exercise)
        elif kind == "result":
            exercise = exercise_of.get(event.get("nodeid"))
            if self.running_in.get(exercise) == event.get("nodeid"):
                self.running_in[exercise] = None
        elif kind == "child_done":
            self.done.add(event.get("exercise"))
        elif kind == "child_died":
            exercise = event.get("exercise")
            code = -int(event["signal"]) if "signal" in event else int(event.get("code", 1))
            self.deaths.append((exercise, str(event.get("how", "crash")), code,
                                self.running_in.get(exercise)))
            self.done.add(exercise)
        elif kind == "worker_done":
            self.finished_at = time.monotonic()

    def apply(self, event: dict, exercise_of: dict[str, str]) -> None:
        self.events.append(event)
        self.last_event_at = time.monotonic()
        kind = event.get("event")
        if self.warm:
            self._apply_warm(kind, event, exercise_of)
            return
        if kind == "collected":
            exercise_of.update({t["nodeid"]: t["exercise"] for t in event["tests"]})
        elif kind == "start":
            self.running = event["nodeid"]
            exercise = exercise_of.get(event["nodeid"])
            if exercise != self.last_exercise or self.clock_start is None:
                self.clock_start = time.monotonic()  # a new exercise: its clock starts
            self.last_exercise = exercise
        elif kind == "result":
            self.running = None
        elif kind == "end":
            self.finished_at = time.monotonic()


def _pytest_options(root: Path) -> list[str]:
    """pytest's own options, the same in one process and in a warm worker's children."""
    return ["-c", str(root / "pyproject.toml"), "--rootdir", str(root),
            "-p", "no:cacheprovider", "-q", "--capture=no", "--tb=short", "--color=no",
            "--continue-on-collection-errors"]  # one broken test file must not stop the others


def _pytest_command(root: Path, files: list[str], impl: str, record, deselect,
                    basetemp) -> list[str]:
    return [sys.executable, "-m", "pytest", *files, "-p", "grading.core.recorder",
            "--kata-record", str(record), "--kata-deselect", str(deselect), "--impl", impl,
            f"--basetemp={basetemp}", *_pytest_options(root)]


def _worker_args(root: Path, exercises: list, impl: str, record, deselect, basetemp,
                 timeout: float, lanes: int = 1, remote: dict | None = None):
    """The warm worker's arguments (:mod:`grading.box.worker`: one forked pytest session per
    exercise), as the record a batch's worker receives."""
    from grading.box.worker import WorkerArgs

    return WorkerArgs(
        record=str(record), impl=impl, deselect=str(deselect), basetemp=str(basetemp),
        tests=[(e.id, str(root / e.tests)) for e in exercises], timeout=timeout,
        startup=max(STARTUP_SECONDS, timeout), lanes=max(1, lanes), remote=dict(remote or {}),
        pytest=_pytest_options(root))


def _watch(process: subprocess.Popen, reader: _EventReader, timeout: float,
           exercise_of: dict[str, str], warm: bool = False,
           deadline: float | None = None) -> _Process:
    """Follow one pytest process until it ends or is killed; returns what happened.

    ``deadline`` (a ``time.monotonic()`` value) is the latest the process may run, whatever it
    writes: past it, it is killed and what it was running counts as timed out."""
    run = _Process(warm=warm)
    started = time.monotonic()
    while process.poll() is None:
        if deadline is not None and time.monotonic() > deadline:
            run.ended = "hang"
            break
        if stopping():
            run.ended = "interrupted"
            break
        for event in reader.new_events():
            run.apply(event, exercise_of)
        now = time.monotonic()
        if run.finished:
            if now - run.finished_at > EXIT_GRACE_SECONDS:
                break  # results are complete; something keeps the process alive
        elif warm and now - (run.last_event_at or started) > max(STARTUP_SECONDS, timeout) \
                + WORKER_GRACE_SECONDS:
            run.ended = "hang"
            break
        elif warm:
            pass  # the worker keeps each exercise's clock
        elif run.clock_start is None and now - started > max(STARTUP_SECONDS, timeout):
            run.ended = "startup timeout"
            break
        elif run.clock_start is not None and now - run.clock_start > timeout:
            run.ended = "timeout"
            break
        time.sleep(POLL_SECONDS)
    kill_group(process)  # the child if it still runs, and anything it left behind
    run.returncode = process.returncode
    for event in reader.new_events():  # the last lines it wrote
        run.apply(event, exercise_of)
    if not run.finished and not run.ended:
        run.ended = "crash"
    return run


_FAULTHANDLER_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


#: What the learner's server writes once its models are loaded, before any learner file runs.
LEARNER_READY = "kata-learner-ready"
_LEARNER_ENDED = re.compile(r"^kata-learner-ended (\S+) (signal|code) (\d{1,3})$", re.M)


def learner_exit_status(stderr: str, exercise_id: str) -> int | None:
    """How the learner's process of ``exercise_id`` ended, as its server reported it: minus the
    signal, or the exit code (:mod:`kata.serve.server`); None when it did not say."""
    found = [m for m in _LEARNER_ENDED.finditer(stderr) if m.group(1) == exercise_id]
    if not found:
        return None
    kind, number = found[-1].group(2), int(found[-1].group(3))
    return -number if kind == "signal" else number


def _crash_description(run: _Process, root: Path, impl: str, module: str | None = None) -> str:
    code = run.returncode
    if code is not None and code < 0:
        name = signal_name(-code)
        how = f"the process was killed by {name}"
        if name == "SIGSEGV":
            how += " (a segmentation fault: memory accessed where it must not be)"
        elif name == "SIGKILL":
            how += " from outside, often for using too much memory"
    else:
        how = f"exited with status {code} in the middle of a test (os._exit or a crash in C code?)"
    frames = _FAULTHANDLER_FRAME.findall(run.stderr)
    if module is not None:  # a warm worker's children share one error log: the latest dump
        # that passes through this exercise's own file (dumps list the latest call first)
        frames = []
        for dump in reversed(run.stderr.split("Fatal Python error")):
            frames = [f for f in _FAULTHANDLER_FRAME.findall(dump)
                      if f[0].endswith(f"{os.sep}{impl}{os.sep}{module}.py")]
            if frames:
                break
    for filename, line, function in frames:
        if f"{os.sep}{impl}{os.sep}" in filename:
            filename = shorten_paths(filename, root)
            how += f"; last line of your code: {filename}, line {line}, in {function}"
            break
    return how


def run_tests(root: Path, exercises: list, impl: str, work_dir: Path, timeout: float = 60.0,
              memory_limit_mb: int = 0, threads: int | None = None,
              warm: bool = False, lanes: int = 1, learner=None,
              secret_seed: int | None = None, batch_worker=None,
              references: Path | None = None, call_seconds: float = 0.0) -> RunResult:
    """Run the tests of ``exercises`` (manifest entries, in order) on ``root/impl``
    (``"exercises"`` or ``"solutions"``; ``root`` gives the tests, conftest and
    ``pyproject.toml``) and record every outcome; records and logs go to ``work_dir``.

    ``timeout``: wall-clock seconds per exercise; ``memory_limit_mb``: the test process's address
    space (0: no limit); ``threads``: torch threads (None: ``KATA_TORCH_THREADS``, else one).
    ``warm``: a warm worker (:mod:`grading.box.worker`) grades ``lanes`` exercises at once, the
    learner's functions running in ``learner`` (a :class:`~grading.box.learner_box.LearnerBox`,
    in its sandbox), each call within ``call_seconds``; it is forked from ``batch_worker`` (the
    batch's :class:`~grading.box.batch_worker.BatchWorker`) when that can give one, else started.
    ``secret_seed`` (None: a fresh one; a batch passes one for all) and ``references`` (the
    batch's folder of :mod:`~grading.core.reference_cache`) reach the test processes only.
    """
    root, work_dir = Path(root), Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    result = RunResult()
    exercise_of: dict[str, str] = {}
    env = trusted_environment(root, threads,
                              fresh_secret_seed() if secret_seed is None else secret_seed,
                              references, call_seconds, memory_limit_mb)
    pending = list(exercises)
    while pending and not stopping():
        result.processes += 1
        n = result.processes
        record, deselect = work_dir / f"record-{n}.jsonl", work_dir / f"deselect-{n}.json"
        deselect.write_text(json.dumps(sorted(result.results)), encoding="utf-8")
        files = [e.tests for e in pending]
        server, channels, deadline, process = None, None, None, None
        if warm:
            if learner is not None:
                channels, server = learner.start(pending, work_dir, n)
            args = _worker_args(root, pending, impl, record, deselect, work_dir / f"tmp-{n}",
                                timeout, lanes, channels.trusted if channels else None)
            if batch_worker is not None:
                if server is not None:
                    # a worker forked from the batch's starts its first test at once: the
                    # exercises' clocks must not run while the sandbox still loads the models
                    wait_until(server.wait_ready, STARTUP_SECONDS)
                process = batch_worker.spawn(args, work_dir / f"pytest-{n}.err")
            command = [sys.executable, "-m", "grading.box.worker", *args.argv()]
            # the whole run's deadline: every exercise's limit, in its lane, plus start-up
            rounds = -(-len(pending) // max(1, lanes))
            deadline = time.monotonic() + rounds * (timeout + STARTUP_SECONDS) \
                + WORKER_GRACE_SECONDS
        else:
            command = _pytest_command(root, files, impl, record, deselect, work_dir / f"tmp-{n}")
        if process is None:
            process = start_child(command, root, env, work_dir, memory_limit_mb,
                                  name=f"pytest-{n}",
                                  pass_fds=channels.trusted_fds if channels else ())
        if channels is not None:
            channels.close_trusted()  # the worker holds them now
        try:
            run = _watch(process, _EventReader(record), timeout, exercise_of, warm, deadline)
        finally:
            if server is not None:
                learner.stop(server)
        if getattr(process, "lost", False) and not stopping():
            batch_worker = None  # the batch's worker went away: grade again with one's own
            continue
        run.stderr = tail(work_dir / f"pytest-{n}.err")
        if server is not None:
            run.stderr += "\n" + server.stderr()
            server.keep_log(work_dir / f"learner-{n}.err")
        _collect(result, run)
        if run.ended == "interrupted":
            _mark_unrecorded(result, pending, Outcome.NOT_RUN,
                             "not run: the batch was interrupted")
            break
        if warm:
            pending, again = _settle_worker(result, run, pending, root, impl, timeout)
            if again:
                continue
            break
        if run.finished:
            _mark_unrecorded(result, pending, Outcome.NOT_RUN,
                             "the test session ended before this test ran")
            _note_collection_problems(result, run, pending)
            break
        culprit_exercise = _record_abnormal_end(result, run, pending, root, impl, timeout)
        if culprit_exercise is None:
            break  # nothing ran at all: every remaining test got the same explanation
        pending = [e for e in pending if e.id != culprit_exercise
                   and any(t.exercise == e.id and t.nodeid not in result.results
                           for t in result.tests)]
    return result


def wait_until(ready, seconds: float) -> bool:
    """Whether ``ready(timeout)``, asked again and again, says True within ``seconds``; False
    at once when the batch is stopped."""
    waited_until = time.monotonic() + seconds
    while not ready(POLL_SECONDS):
        if stopping() or time.monotonic() > waited_until:
            return False
    return True


def _settle_worker(result: RunResult, run: _Process, pending: list, root: Path, impl: str,
                   timeout: float) -> tuple[list, bool]:
    """Record how each exercise of a warm worker ended. Returns the exercises a new worker
    must grade, and whether to start one."""
    by_id = {e.id: e for e in pending}

    def abnormal(exercise_id, how, code, running):
        child = _Process(ended=how, returncode=code, stderr=run.stderr, running=running,
                         last_exercise=exercise_id if exercise_id in run.tested else None,
                         warm=True)
        _record_abnormal_end(result, child, [by_id[exercise_id]], root, impl, timeout)

    for exercise_id, how, code, running in run.deaths:
        if exercise_id in by_id:
            abnormal(exercise_id, how, code, running)
    if run.finished:
        _mark_unrecorded(result, pending, Outcome.NOT_RUN,
                         "the test session ended before this test ran")
        _note_collection_problems(result, run, [e for e in pending if e.id in run.done])
        return [], False
    # the worker itself died or got stuck: its running children with it
    how = "timeout" if run.ended == "hang" else "crash"
    in_flight = [e for e in run.begun if e in by_id and e not in run.done]
    for exercise_id in in_flight:
        abnormal(exercise_id, how, run.returncode, run.running_in.get(exercise_id))
    if not run.begun:  # it never got to any exercise
        _record_abnormal_end(result, _Process(ended=how, returncode=run.returncode,
                                              stderr=run.stderr), pending, root, impl, timeout)
        return [], False
    rest = [e for e in pending if e.id not in run.begun]
    return rest, bool(rest)


def _collect(result: RunResult, run: _Process) -> None:
    for event in run.events:
        kind = event["event"]
        if kind == "session":
            result.environment.update({k: event[k] for k in ("torch", "transformers", "device")})
        elif kind == "collected":
            known = {t.nodeid for t in result.tests}
            collected = [CollectedTest.from_json(t) for t in event["tests"]]
            result.tests += [t for t in collected if t.nodeid not in known]
        elif kind == "result":
            try:
                record = TestRecord.from_json(event)
            except (KeyError, TypeError, ValueError):
                continue  # a malformed record: its test is then "not run"
            result.results[record.nodeid] = record
        elif kind == "models":
            models = set(result.environment.get("models", [])) | set(event["models"])
            result.environment["models"] = sorted(models)


def _mark_unrecorded(result: RunResult, exercises: list, outcome: Outcome, message: str) -> None:
    ids = {e.id for e in exercises}
    for test in result.tests:
        if test.exercise in ids and test.nodeid not in result.results:
            result.results[test.nodeid] = TestRecord.placeholder(test, outcome, message)


def _note_collection_problems(result: RunResult, run: _Process, pending: list) -> None:
    """An exercise with no collected test at all (a broken or missing test file)."""
    errors = [e for e in run.events if e["event"] == "collect_error"]
    for exercise in pending:
        if not any(t.exercise == exercise.id for t in result.tests):
            own = [e for e in errors if exercise.tests in str(e.get("nodeid", ""))] or errors
            detail = (str(own[0].get("message", "")) if own
                      else run.stderr.strip()[-600:] or "no test found")
            why = f"no tests collected from {exercise.tests}: {detail}"
            result.problems[exercise.id] = Status.ERROR, why


def _record_abnormal_end(result: RunResult, run: _Process, pending: list, root: Path,
                         impl: str, timeout: float) -> str | None:
    """Record the crash or timeout; return the exercise it happened in (None: before any test)."""
    timed_out = run.ended in ("timeout", "startup timeout")
    outcome = Outcome.TIMED_OUT if timed_out else Outcome.CRASHED
    status = Status.TIMED_OUT if timed_out else Status.CRASHED
    if run.ended == "startup timeout":
        why = f"pytest did not start its first test within {max(STARTUP_SECONDS, timeout):g} s"
    elif timed_out:
        why = f"stopped after {timeout:g} s: an endless loop, or far too slow"
    elif run.ended == "learner gone" and LEARNER_READY not in run.stderr:
        # the learner's server never got as far as importing any learner file: the sandbox or
        # the machine failed, not the learner (the exercise is an environment error)
        why = ("the grader's sandbox did not start (the machine's fault, not yours; grade "
               f"again): {run.stderr.strip()[-400:]}")
        status = Status.ENVIRONMENT_ERROR
    elif run.ended == "learner gone":
        code = learner_exit_status(run.stderr, pending[0].id) if len(pending) == 1 else None
        if code is None:
            why = ("the process running your code ended in the middle of this test (a crash in C "
                   "code, os._exit, a signal, too much memory or CPU time)")
        else:
            kind, detail = kind_of(Ended(signal=-code) if code < 0 else Ended(code=code))
            why = sentence(kind, None, detail).split(";")[0]
    else:
        module = pending[0].module if run.warm and len(pending) == 1 else None
        why = _crash_description(run, root, impl, module)
    culprit = run.running
    test = next(t for t in result.tests if t.nodeid == culprit) if culprit else None
    exercise = test.exercise if test else run.last_exercise
    if culprit:
        record = TestRecord.placeholder(test, outcome, f"{outcome}: {why}")
        if status is Status.ENVIRONMENT_ERROR:
            record = replace(record, outcome=Outcome.ERROR, diagnosis=ENVIRONMENT_FAULT)
        result.results[culprit] = record
    if exercise is None:  # it died before running any test of this run
        detail = why if timed_out else f"{why}\n{run.stderr.strip()[-800:]}"
        message = f"the test process {outcome} before any test ran: {detail}"
        result.problems.update({e.id: (status, message) for e in pending})
        _mark_unrecorded(result, pending, outcome, message)
        return None
    name = culprit.rsplit("::", 1)[-1] if culprit else "between two tests"
    _mark_unrecorded(result, [e for e in pending if e.id == exercise], Outcome.NOT_RUN,
                     f"not run: the test process {outcome} in {name}")
    return exercise
