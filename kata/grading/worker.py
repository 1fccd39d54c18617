"""A warm grading worker: imports and model loads once, a fresh forked child per exercise.

``python -m kata.grading.worker`` runs inside a submission's sandbox (or, unsandboxed, as the
grader's child) in place of one ``pytest`` process per run. It

1. imports pytest, torch, transformers, the kata's plugin and test support, and loads the
   session models the instructor's test files ask for (``tiny_gpt2``, ``smollm2``), before any
   of the learner's code is imported: this is where a fresh ``pytest`` spends most of its start;
2. makes itself non-dumpable (``PR_SET_DUMPABLE`` 0), so a child cannot open the worker's
   descriptors through ``/proc/<pid>/fd`` or trace it;
3. runs the **answer probes** first, one forked child per exercise, each writing its JSON line
   to the probe descriptor, which no test child holds (:mod:`kata.grading.probes`);
4. then, for each exercise, **forks a child** that runs that exercise's test file in a pytest
   session of its own, in-process, with the recorder plugin writing to the record descriptor
   (which no probe child holds). The child gets a copy of the warm process: whatever it changes
   (default dtype, hooks on the models, the models' weights, modules it patches, the recorder
   itself) dies with it, so nothing one exercise does reaches the next;
5. after each child, kills every process left in the sandbox (``kill(-1)``: a daemon an
   exercise started cannot outlive its exercise).

The grader outside (:func:`kata.grading.runner.run_tests`) reads the record as it does for a
plain pytest process, and keeps its per-exercise clock. When a test child dies in the middle of
its session (a segfault, ``os._exit``, a kill for memory), the worker ends itself the same way,
so the grader sees the death it always saw (same signal or status, same "crashed" record) and
starts a new worker for the exercises left. The worker writes ``{"event": "worker_done"}``
last; the recorder's per-session ``end`` events only close one exercise.

Arguments: ``--record PATH --impl IMPL --deselect PATH --basetemp DIR --tests EX=FILE ...``
``[--probe-record PATH --probes EX ...] [--timeout SECONDS] -- PYTEST-OPTIONS...``
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


def _wait(pid: int, deadline: float | None) -> int | None:
    """The child's wait status, or None when it was killed at ``deadline``."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status
        if deadline is not None and time.monotonic() > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


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


def _run_tests(test_file: str, args) -> int:
    import pytest

    options = ["-p", "kata.grading.recorder", "--kata-record", args.record,
               "--kata-deselect", args.deselect, "--impl", args.impl,
               f"--basetemp={args.basetemp}", *args.pytest]
    code = pytest.main([test_file, *options])
    return NORMAL_EXIT + int(code)


def _die_like(status: int) -> None:
    """End this worker the way its child ended (the grader reads a crash from that)."""
    sys.stderr.flush()
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        time.sleep(1)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
    os._exit(code if code != NORMAL_EXIT else 1)


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

    note("warm", seconds=round(time.time() - started, 2))

    record_fd = _fd_of(args.record)
    probe_fd = _fd_of(args.probe_record) if args.probe_record else None
    if args.probes and probe_fd is not None:
        from kata.grading.probes import PROBE_SECONDS, PROBES

        for exercise_id in args.probes:
            note("probe", exercise=exercise_id)
            seconds = PROBE_SECONDS * max(1, len(PROBES.get(exercise_id, []))) + 10
            pid = _fork(lambda e=exercise_id: _run_probe(e, args.impl, probe_fd),
                        (record_fd, record.fileno()))
            _wait(pid, time.monotonic() + min(seconds, max(args.timeout, 30.0)))
            _kill_leftovers()
    if probe_fd is not None:
        os.close(probe_fd)  # no test child may write to the probes' channel
    for exercise_id, test_file in tests:
        note("exercise", exercise=exercise_id)
        pid = _fork(lambda f=test_file: _run_tests(f, args), ())
        status = _wait(pid, None)  # the grader outside keeps the clock
        _kill_leftovers()
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) >= NORMAL_EXIT):
            note("child_died", exercise=exercise_id, status=status)
            _die_like(status)
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
