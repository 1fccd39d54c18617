"""The trusted warm worker: imports and model loads once, a fresh forked child per exercise.

``python -m kata.grading.worker`` runs an instructor's tests on a submission, outside the
submission's sandbox: the learner's functions run in the sandbox (:mod:`kata.remote.server`),
reached over one channel per exercise (``--remote EX=READ_FD,WRITE_FD``); this process runs only
the kata's own code (:mod:`kata.grading.remote`). It

1. imports pytest, torch, transformers, the kata's plugin and test support, and loads the
   session models the instructor's test files ask for (``tiny_gpt2``, ``smollm2``) once;
2. then, for each exercise, **forks a child** that runs that exercise's test file in a pytest
   session of its own, in-process, with the recorder plugin writing to the record file and the
   ``ex`` fixture calling into the sandbox. ``--lanes N`` children run at once;
3. keeps each exercise's clock: it starts when the child's first test starts (the child sends
   one byte down a pipe), and a child out of time is killed. It writes how each child ended:
   ``child_done``, or ``child_died`` with ``how`` (crash, timeout, startup timeout, or
   ``learner gone`` when the learner's process ended in the middle of a test) and the signal or
   exit status, with the child's wall and CPU seconds. The grader outside
   (:func:`kata.grading.runner.run_tests`) turns these into records (the running test "timed
   out" or "crashed", the rest "not run").

Nothing of the learner's runs in this process or its children, so nothing here needs defending
from it: the records it writes are the grade. The worker writes ``{"event": "worker_done"}``
last.

It parses its own few arguments (:func:`main`) because only the grader's runner starts it, in a
process of its own; no person types it, so it is not a subcommand of ``grader.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

#: the child's exit status when its pytest session returned normally: NORMAL_EXIT + pytest's code
NORMAL_EXIT = 100
#: fixtures of the kata's plugin that load a session model, and the model each loads
MODEL_FIXTURES = {"tiny_gpt2": "tiny-gpt2", "smollm2": "smollm2"}


def models_wanted(test_files: list[str]) -> list[str]:
    """The session models the test files name (loading one the tests never use is wasted)."""
    wanted = []
    for path in test_files:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            continue
        wanted += [m for fixture, m in MODEL_FIXTURES.items()
                   if fixture in text and m not in wanted]
    return wanted


def warm_up(test_files: list[str]) -> None:
    """Everything a test session would import or load first, done once."""
    import pytest  # noqa: F401
    import torch

    if os.environ.get("KATA_TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["KATA_TORCH_THREADS"]))
    import kata.grading.recorder  # noqa: F401
    import kata.grading.remote  # noqa: F401
    import kata.pytest_plugin  # noqa: F401
    from kata.session_models import session_model

    try:
        import tests.support  # noqa: F401  (the instructor's; matplotlib, numpy)
    except Exception:  # noqa: BLE001 - a kata without it: its tests import what they need
        pass
    for name in models_wanted(test_files):
        try:
            session_model(name)
        except Exception:  # noqa: BLE001 - the test that needs it reports the fault itself
            pass


def _no_dumping() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - not Linux: nothing to protect this way
        pass


def _fork(run, close_fds: tuple[int, ...]) -> int:
    """Fork a child that closes ``close_fds`` and runs ``run()``, then ends without cleanup."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        code = run()
    except BaseException:  # noqa: BLE001 - whatever the child did, it ends here
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class _Clock:
    """A plugin of the child's session: one byte down a pipe when its first test starts (the
    worker starts the exercise's clock then)."""

    def __init__(self, fd: int):
        self.fd = fd

    def pytest_runtest_logstart(self, nodeid, location):
        if self.fd is not None:
            try:
                os.write(self.fd, b"s")
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def _run_tests(exercise_id: str, test_file: str, args, clock_fd: int, remote: str | None) -> int:
    import pytest

    options = ["-p", "kata.grading.recorder", "--kata-record", args.record,
               "--kata-deselect", args.deselect, "--impl", args.impl,
               f"--basetemp={args.basetemp}-{exercise_id}",  # pytest empties its basetemp
               *(["--kata-remote", remote] if remote else []), *args.pytest]
    code = pytest.main([test_file, *options], plugins=[_Clock(clock_fd)])
    return NORMAL_EXIT + int(code)


class _Lane:
    """One forked child: what it runs, and its clock."""

    def __init__(self, exercise: str, kind: str, clock_fd: int | None, limit: float):
        self.exercise, self.kind, self.clock_fd = exercise, kind, clock_fd
        self.forked = time.monotonic()
        self.clock: float | None = None  # when its first test started
        self.limit = limit  # seconds before the first test
        self.cpu = self.seconds = 0.0  # CPU and wall seconds, once it has ended

    def poll_clock(self) -> None:
        if self.clock_fd is None or self.clock is not None:
            return
        try:
            data = os.read(self.clock_fd, 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.clock = time.monotonic()
        os.close(self.clock_fd)
        self.clock_fd = None

    def overdue(self, timeout: float) -> str | None:
        now = time.monotonic()
        if self.clock is None:
            return "startup timeout" if now - self.forked > self.limit else None
        return "timeout" if now - self.clock > timeout else None

    def close(self) -> None:
        if self.clock_fd is not None:
            os.close(self.clock_fd)
            self.clock_fd = None


def _describe(status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1}


def _schedule(jobs: list, lanes: int, start, finished, timeout: float) -> None:
    """Run ``jobs`` (``start(job) -> (pid, _Lane)``), at most ``lanes`` at a time; kill a child
    that runs out of time; ``finished(lane, status or None, why)`` as each ends."""
    queue, busy = list(jobs), {}
    while queue or busy:
        while queue and len(busy) < lanes:
            pid, lane = start(queue.pop(0))
            busy[pid] = lane
        time.sleep(0.02)
        for pid, lane in list(busy.items()):
            lane.poll_clock()
            done, status, usage = os.wait4(pid, os.WNOHANG)
            why = None
            if not done:
                why = lane.overdue(timeout)
                if why is None:
                    continue
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                _, status, usage = os.wait4(pid, 0)
            del busy[pid]
            lane.close()
            lane.cpu = round(usage.ru_utime + usage.ru_stime, 2)
            lane.seconds = round(time.monotonic() - lane.forked, 2)
            finished(lane, status, why)


def main(argv: list[str] | None = None) -> int:
    from .remote import LEARNER_GONE  # a test process's status when the learner's went away

    parser = argparse.ArgumentParser(prog="kata.grading.worker")
    parser.add_argument("--record", required=True)
    parser.add_argument("--impl", required=True)
    parser.add_argument("--deselect", required=True)
    parser.add_argument("--basetemp", required=True)
    parser.add_argument("--tests", nargs="*", default=[], metavar="EX=FILE")
    parser.add_argument("--remote", nargs="*", default=[], metavar="EX=READ_FD,WRITE_FD",
                        help="each exercise's channel to the learner's sandbox")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--startup", type=float, default=90.0,
                        help="seconds a child may take to start its first test")
    parser.add_argument("--lanes", type=int, default=1, help="children at a time")
    parser.add_argument("pytest", nargs="*")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    started = time.time()
    tests = [item.split("=", 1) for item in args.tests]
    remote = dict(item.split("=", 1) for item in args.remote)
    channel_fds = {int(fd) for spec in remote.values() for fd in spec.split(",")}
    warm_up([path for _, path in tests])
    _no_dumping()
    record = open(args.record, "a", encoding="utf-8")

    def note(event: str, **fields) -> None:
        record.write(json.dumps({"event": event, "time": round(time.time(), 3), **fields})
                     + "\n")
        record.flush()

    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    note("warm", seconds=round(time.time() - started, 2),
         cpu=round(own.ru_utime + own.ru_stime, 2))
    lanes = max(1, args.lanes)

    def start_tests(job):
        exercise_id, test_file = job
        note("exercise", exercise=exercise_id)
        read_end, write_end = os.pipe()
        mine = {int(fd) for fd in remote[exercise_id].split(",")} if exercise_id in remote \
            else set()
        pid = _fork(lambda: _run_tests(exercise_id, test_file, args, write_end,
                                       remote.get(exercise_id)),
                    (read_end, *sorted(channel_fds - mine)))
        os.close(write_end)
        for fd in mine:  # the child holds this exercise's channel now
            os.close(fd)
            channel_fds.discard(fd)
        os.set_blocking(read_end, False)
        return pid, _Lane(exercise_id, "tests", read_end, args.startup)

    def finished(lane, status, why):
        times = {"seconds": lane.seconds, "cpu": lane.cpu}
        if why is None and os.WIFEXITED(status) and os.WEXITSTATUS(status) >= NORMAL_EXIT:
            note("child_done", exercise=lane.exercise, **times)
        elif why is None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == LEARNER_GONE:
            note("child_died", exercise=lane.exercise, how="learner gone", code=LEARNER_GONE,
                 **times)
        else:
            note("child_died", exercise=lane.exercise, how=why or "crash", **_describe(status),
                 **times)

    _schedule(tests, lanes, start_tests, finished, args.timeout)
    note("worker_done")
    record.close()
    os._exit(0)


def _fd_of(path: str | None) -> int | None:
    """``/dev/fd/N`` -> N; a real path is opened for appending."""
    if path is None:
        return None
    if path.startswith("/dev/fd/"):
        return int(path[len("/dev/fd/"):])
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


if __name__ == "__main__":
    sys.exit(main())
