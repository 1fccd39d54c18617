"""A warm grading worker: imports and model loads once, a fresh forked child per exercise.

``python -m kata.grading.worker`` runs inside a submission's sandbox (or, unsandboxed, as the
grader's child) in place of one ``pytest`` process per submission. It

1. imports pytest, torch, transformers, the kata's plugin and test support, and loads the
   session models the instructor's test files ask for (``tiny_gpt2``, ``smollm2``), before any
   of the learner's code is imported: this is most of what a fresh ``pytest`` spends before its
   first test (about 5 CPU seconds);
2. makes itself non-dumpable (``PR_SET_DUMPABLE`` 0), so no child can open the worker's
   descriptors through ``/proc/<pid>/fd`` or trace it;
3. runs the **answer probes** first, one forked child per exercise, each writing its JSON line
   to the probe descriptor (:mod:`kata.grading.probes`). The worker closes that descriptor
   before any test child exists, and probe children never hold the test record's;
4. then, for each exercise, **forks a child** that runs that exercise's test file in a pytest
   session of its own, in-process, with the recorder plugin writing to the record descriptor.
   The child works on a copy of the warm process: whatever it changes (default dtype, hooks on
   the models, the models' weights, modules it patches, the recorder itself) dies with it, so
   nothing one exercise does reaches the next. ``--lanes N`` children run at once (the cores a
   submission may use);
5. keeps each exercise's clock, as the grader did: it starts when the child's first test starts
   (the child sends one byte down a pipe), and a child out of time is killed. It writes how each
   child ended: ``child_done``, or ``child_died`` with ``how`` (crash, timeout, startup timeout)
   and the signal or exit status, with the child's wall and CPU seconds. The grader outside
   (:func:`kata.grading.runner.run_tests`) turns these into the same records as before (the
   running test "timed out" or "crashed", the rest "not run"), and only watches the worker
   itself: if the worker dies or stays silent too long, the exercises it was running are
   recorded as crashed or timed out and a new worker grades the rest;
6. whenever no child runs, kills every other process of the sandbox (``kill(-1)`` in its PID
   namespace): a daemon an exercise started does not outlive its lane. Everything dies with the
   sandbox at the end.

A child that runs out of memory gets a ``MemoryError`` from its address-space limit (recorded as
"out of memory"), or is killed by the submission's memory cgroup (a crash by SIGKILL, "often for
using too much memory"); children raise their ``oom_score_adj`` so the killer takes them before
the worker. The worker writes ``{"event": "worker_done"}`` last.
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


def warm_up(test_files: list[str], probes: bool) -> None:
    """Everything a test session would import or load first, done once, before learner code."""
    import pytest  # noqa: F401
    import torch

    if os.environ.get("KATA_TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["KATA_TORCH_THREADS"]))
    import kata.grading.recorder  # noqa: F401
    import kata.pytest_plugin as plugin

    try:
        import tests.support  # noqa: F401  (the instructor's; matplotlib, numpy)
    except Exception:  # noqa: BLE001 - a kata without it: its tests import what they need
        pass
    wanted = models_wanted(test_files)
    if probes and "tiny-gpt2" not in wanted:
        wanted.insert(0, "tiny-gpt2")
    for name in wanted:
        try:
            plugin._session_model(name)
        except Exception:  # noqa: BLE001 - the test that needs it reports the fault itself
            pass
    if probes:
        from kata.grading import probes as probe_module

        try:
            probe_module._CACHE["tiny"] = plugin._SESSION_MODELS["tiny-gpt2"][:2]
        except KeyError:
            pass


def _no_dumping() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - not Linux: nothing to protect this way
        pass


def _kill_leftovers() -> None:
    """Kill every other process this worker may signal (in a sandbox: its PID namespace)."""
    if os.environ.get("KATA_WORKER_SANDBOXED") != "1":
        return  # unsandboxed, kill(-1) would reach the grader's own processes
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break


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


def _run_probe(exercise_id: str, impl: str, out_fd: int) -> int:
    import torch

    from kata.grading import probes

    torch.set_num_threads(int(os.environ.get("KATA_TORCH_THREADS", "1")))
    with os.fdopen(out_fd, "a", encoding="utf-8", closefd=False) as out:
        probes.run_inside([exercise_id], impl, out)
    return 0


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


def _run_tests(exercise_id: str, test_file: str, args, clock_fd: int) -> int:
    import pytest

    try:  # under a memory cgroup, the out-of-memory killer takes a child before the worker
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("500")
    except OSError:
        pass
    options = ["-p", "kata.grading.recorder", "--kata-record", args.record,
               "--kata-deselect", args.deselect, "--impl", args.impl,
               f"--basetemp={args.basetemp}-{exercise_id}",  # pytest empties its basetemp
               *args.pytest]
    code = pytest.main([test_file, *options], plugins=[_Clock(clock_fd)])
    return NORMAL_EXIT + int(code)


class _Lane:
    """One forked child: what it runs, and its clock."""

    def __init__(self, exercise: str, kind: str, clock_fd: int | None, limit: float):
        self.exercise, self.kind, self.clock_fd = exercise, kind, clock_fd
        self.forked = time.monotonic()
        self.clock: float | None = None  # when its first test started
        self.limit = limit  # seconds before the first test (tests) or in all (probes)
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
        if self.kind == "probe":
            return "timeout" if now - self.forked > self.limit else None
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
        if not busy:
            _kill_leftovers()  # nothing of the submission runs now: what is left is a daemon


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kata.grading.worker")
    parser.add_argument("--record", required=True)
    parser.add_argument("--impl", required=True)
    parser.add_argument("--deselect", required=True)
    parser.add_argument("--basetemp", required=True)
    parser.add_argument("--tests", nargs="*", default=[], metavar="EX=FILE")
    parser.add_argument("--probe-record", default=None)
    parser.add_argument("--probes", nargs="*", default=[], metavar="EX")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--startup", type=float, default=90.0,
                        help="seconds a child may take to start its first test")
    parser.add_argument("--lanes", type=int, default=1, help="children at a time")
    parser.add_argument("pytest", nargs="*")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    started = time.time()
    tests = [item.split("=", 1) for item in args.tests]
    warm_up([path for _, path in tests], bool(args.probes))
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
    record_fd = _fd_of(args.record)
    probe_fd = _fd_of(args.probe_record) if args.probe_record else None

    if args.probes and probe_fd is not None:
        from kata.grading.probes import PROBE_SECONDS, PROBES

        def start_probe(exercise_id):
            note("probe", exercise=exercise_id)
            seconds = PROBE_SECONDS * max(1, len(PROBES.get(exercise_id, []))) + 10
            pid = _fork(lambda: _run_probe(exercise_id, args.impl, probe_fd),
                        (record_fd, record.fileno()))
            return pid, _Lane(exercise_id, "probe", None, min(seconds, max(args.timeout, 30.0)))

        def probe_done(lane, status, why):
            note("probe_done", exercise=lane.exercise, seconds=lane.seconds, cpu=lane.cpu)

        _schedule(args.probes, lanes, start_probe, probe_done, args.timeout)
    if probe_fd is not None:
        os.close(probe_fd)  # no test child may write to the probes' channel

    def start_tests(job):
        exercise_id, test_file = job
        note("exercise", exercise=exercise_id)
        read_end, write_end = os.pipe()
        pid = _fork(lambda: _run_tests(exercise_id, test_file, args, write_end), (read_end,))
        os.close(write_end)
        os.set_blocking(read_end, False)
        return pid, _Lane(exercise_id, "tests", read_end, args.startup)

    def finished(lane, status, why):
        times = {"seconds": lane.seconds, "cpu": lane.cpu}
        if why is None and os.WIFEXITED(status) and os.WEXITSTATUS(status) >= NORMAL_EXIT:
            note("child_done", exercise=lane.exercise, **times)
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
