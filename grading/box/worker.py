"""The trusted warm worker: imports and model loads once, a fresh forked child per exercise.

``python -m grading.box.worker`` runs an instructor's tests on a submission, outside the
submission's sandbox: the learner's functions run in the sandbox (:mod:`kata.serve.server`),
reached over channels per exercise (one per learner process the exercise may use,
:mod:`kata.serve.channel`); this process runs only the kata's own code
(:mod:`grading.box.remote`). Its one argument is a :class:`WorkerArgs`, as JSON. It

1. imports pytest, torch, transformers, the kata's plugin and test support, and loads the
   session models the instructor's test files ask for, once (:func:`warm_up`);
2. forks, for each exercise, a child that runs its test file in a pytest session of its own,
   with the recorder writing to the record file; ``lanes`` children run at once;
3. keeps each exercise's clock, from the child's first test (one byte down a pipe), and kills a
   child out of time. It writes how each child ended: ``child_done``, or ``child_died`` with
   ``how`` (crash, timeout, startup timeout, or ``learner gone`` when the learner's process
   ended in the middle of a test), the signal or exit status, and its wall and CPU seconds;
   :func:`grading.box.runner.run_tests` turns these into records. ``worker_done`` comes last.

Nothing of the learner's runs in this process or its children, so nothing here needs defending
from it: the records it writes are the grade.

A batch runs one such worker for all its submissions (``--serve FD``, :func:`serve`, started by
:class:`grading.box.batch_worker.BatchWorker`): it warms up once, then, for each submission the
grader asks for over the socket ``FD`` (a :class:`WorkerArgs` and its descriptors: the error log,
the channels to that submission's sandbox), forks a child that runs :func:`main` as a worker of
its own would, in its own process group, and says when each child ends and how.

It parses its own few arguments (:func:`_command_line`) because only the grader starts it, in
a process of its own; no person types it, so it is not a subcommand of ``grader.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kata.serve import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, close_all, format_pairs, prctl

#: the child's exit status when its pytest session returned normally: NORMAL_EXIT + pytest's code
NORMAL_EXIT = 100
#: fixtures of the kata's plugin that load a session model, and the model each loads (None:
#: :data:`kata.models.SMOLLM2_FIRST_BLOCKS`, named there, whose module imports torch)
MODEL_FIXTURES = {"tiny_gpt2": "tiny-gpt2", "smollm2": "smollm2", "smollm2_first_blocks": None}


@dataclass
class WorkerArgs:
    """What one submission's worker runs: its command line, as a record the grader builds and a
    batch's worker receives (:func:`serve`)."""

    record: str  # the record file (JSON lines) the children write
    impl: str  # "exercises" or "solutions"
    deselect: str  # a JSON list of node ids already graded
    basetemp: str  # pytest's basetemp, one per exercise: BASETEMP-<exercise id>
    tests: list[tuple[str, str]]  # (exercise id, test file), in order
    timeout: float  # seconds per exercise, from its first test
    startup: float  # seconds a child may take to start its first test
    lanes: int  # children at a time
    remote: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # id -> [(read, write)]
    pytest: list[str] = field(default_factory=list)  # pytest's own options

    def argv(self) -> list[str]:
        """The worker's command line: its message and the descriptors it inherits, as JSON."""
        return [json.dumps([self.to_message(), self.fds()])]

    def fds(self) -> list[int]:
        """The channels' descriptors, in the order :meth:`to_message` numbers them."""
        return [fd for pairs in self.remote.values() for pair in pairs for fd in pair]

    def to_message(self) -> dict:
        """A JSON-able form; each channel's descriptors become their places in :meth:`fds`."""
        message = asdict(self)
        places = iter(range(len(self.fds())))
        message["remote"] = {e: [[next(places), next(places)] for _ in pairs]
                             for e, pairs in self.remote.items()}
        return message

    @classmethod
    def from_message(cls, message: dict, fds: list[int]) -> WorkerArgs:
        """The arguments again, with the descriptors this process received in the places'
        order."""
        args = cls(**{k: v for k, v in message.items() if k != "remote"})
        args.tests = [tuple(pair) for pair in args.tests]
        args.remote = {e: [(fds[r], fds[w]) for r, w in pairs]
                       for e, pairs in message.get("remote", {}).items()}
        return args


def models_wanted(test_files: list[str]) -> list[str]:
    """The session models the tests name (loading one the tests never use is wasted); a path
    is a test file or an exercise's folder, whose Python files all count (its checks hold
    fixtures too)."""
    from kata.models import SMOLLM2_FIRST_BLOCKS

    wanted = []
    for text in _python_texts(test_files):
        wanted += [m or SMOLLM2_FIRST_BLOCKS for fixture, m in MODEL_FIXTURES.items()
                   if fixture in text and (m or SMOLLM2_FIRST_BLOCKS) not in wanted]
    return wanted


def _python_texts(paths: list[str]) -> list[str]:
    """The text of each file, or of each ``*.py`` file in each folder, among ``paths``."""
    files = []
    for path in map(Path, paths):
        files += sorted(path.glob("*.py")) if path.is_dir() else [path]
    texts = []
    for file in files:
        try:
            texts.append(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def warm_up(test_files: list[str]) -> dict:
    """Everything a test session would import or load first, done once; then this process
    cannot be inspected (not dumpable). Its wall and CPU seconds."""
    started = time.time()
    import pytest  # noqa: F401

    from kata.session_models import threads_before_forking

    threads_before_forking()  # each exercise's child takes KATA_TORCH_THREADS (_run_tests)
    import grading.core.recorder  # noqa: F401
    import grading.box.remote  # noqa: F401
    import course.shared.plugin  # noqa: F401
    from kata.session_models import session_model

    try:
        import course.shared.support  # noqa: F401  (the instructor's; matplotlib, numpy)
    except Exception:  # noqa: BLE001 - a kata without it: its tests import what they need
        pass
    for name in models_wanted(test_files):
        try:
            session_model(name)
        except Exception:  # noqa: BLE001 - the test that needs it reports the fault itself
            pass
    prctl(PR_SET_DUMPABLE, 0)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {"seconds": round(time.time() - started, 2),
            "cpu": round(own.ru_utime + own.ru_stime, 2)}


def _fork(run, close_fds: tuple[int, ...], group: bool = False) -> int:
    """Fork a child that closes ``close_fds`` and runs ``run()``, then ends without cleanup; it
    dies with this worker (a grader killed outright leaves no exercise's child behind). With
    ``group``, it leads a process group of its own."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        if group:
            try:
                os.setpgid(pid, pid)  # here too: the grader may kill the group before it runs
            except OSError:
                pass
        return pid
    code = 1
    try:
        if group:
            os.setpgid(0, 0)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # killed when its parent ends
        close_all(close_fds)
        code = run()
    except BaseException:  # noqa: BLE001 - whatever the child did, it ends here
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

    from kata.session_models import threads_after_forking

    threads_after_forking()

    options = ["-p", "grading.core.recorder", "--kata-record", args.record,
               "--kata-deselect", args.deselect, "--impl", args.impl,
               f"--basetemp={args.basetemp}-{exercise_id}",  # pytest empties its basetemp
               *(["--kata-remote", remote] if remote else []), *args.pytest]
    code = pytest.main([test_file, *options], plugins=[_Clock(clock_fd)])
    return NORMAL_EXIT + int(code)


class _Lane:
    """One forked child: what it runs, and its clock."""

    def __init__(self, exercise: str, clock_fd: int | None, limit: float):
        self.exercise, self.clock_fd = exercise, clock_fd
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


def main(args: WorkerArgs) -> int:
    """Grade ``args.tests``, each exercise in a forked child, ``args.lanes`` at a time."""
    from grading.box.remote import LEARNER_GONE  # a test process's status when the learner's went away

    channel_fds = set(args.fds())
    warm = warm_up([path for _, path in args.tests])
    record = open(args.record, "a", encoding="utf-8")

    def note(event: str, **fields) -> None:
        record.write(json.dumps({"event": event, "time": round(time.time(), 3), **fields})
                     + "\n")
        record.flush()

    note("warm", **warm)

    def start_tests(job):
        exercise_id, test_file = job
        note("exercise", exercise=exercise_id)
        read_end, write_end = os.pipe()
        pairs = args.remote.get(exercise_id, [])
        mine = {fd for pair in pairs for fd in pair}
        pid = _fork(lambda: _run_tests(exercise_id, test_file, args, write_end,
                                       format_pairs(pairs) if pairs else None),
                    (read_end, *sorted(channel_fds - mine)))
        os.close(write_end)
        for fd in mine:  # the child holds this exercise's channel now
            os.close(fd)
            channel_fds.discard(fd)
        os.set_blocking(read_end, False)
        return pid, _Lane(exercise_id, read_end, args.startup)

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

    _schedule(args.tests, max(1, args.lanes), start_tests, finished, args.timeout)
    note("worker_done")
    record.close()
    os._exit(0)


# --------------------------------------------------------------------------- a batch's worker

#: Largest request the grader sends a batch's worker (a WorkerArgs as JSON), and most descriptors.
MAX_REQUEST_BYTES = 1 << 20
MAX_REQUEST_FDS = 253  # the kernel's most per message: 8 exercises of 4 channels fit
#: How often a batch's worker looks for ended children while it waits for requests.
SERVE_POLL_SECONDS = 0.05


def kill_process_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (a submission's worker and its children), if it
    is still there."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _send(channel: socket.socket, message: dict) -> None:
    channel.send(json.dumps(message).encode("utf-8"))


def _submission(args: WorkerArgs, error_log: int) -> int:
    """:func:`main` on ``args`` in a forked child, its standard output nowhere and its standard
    error into ``error_log``."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(error_log, 2)
    close_all((devnull, error_log))
    return main(args)


def _reap(channel: socket.socket, children: set[int]) -> None:
    """Tell the grader how each child that ended did (``returncode`` as subprocess gives it:
    the exit status, or minus the signal)."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(channel, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


def serve(channel_fd: int, test_files: list[str], record: str | None = None) -> int:
    """A batch's trusted worker: warm up once, then fork one child per submission asked for.

    Requests come over the socket ``channel_fd`` (``SOCK_SEQPACKET``): ``{"id", "args"}`` (a
    :class:`WorkerArgs` as :meth:`WorkerArgs.to_message` writes it) with the descriptors: the
    error log first, then the channels. Replies: ``{"ready", "seconds", "cpu"}`` once warm,
    ``{"spawned": id, "pid"}`` per request and ``{"exited": pid, "returncode"}`` per child.
    When the grader closes the socket (or dies), every child's process group is killed.
    """
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # killed when its parent ends
    warm = warm_up(test_files)
    if record:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": "batch_warm", "time": round(time.time(), 3), **warm})
                         + "\n")
    channel = socket.socket(fileno=channel_fd)
    channel.settimeout(SERVE_POLL_SECONDS)
    _send(channel, {"ready": True, **warm})
    children: set[int] = set()
    while True:
        _reap(channel, children)
        try:
            data, fds, _, _ = socket.recv_fds(channel, MAX_REQUEST_BYTES, MAX_REQUEST_FDS)
        except (socket.timeout, BlockingIOError, InterruptedError):
            continue
        except OSError:
            data, fds = b"", []
        if not data:  # the grader is gone or done
            for pid in children:
                kill_process_group(pid)
            os._exit(0)
        request = None
        try:
            request = json.loads(data)
            args = WorkerArgs.from_message(request["args"], fds[1:])
            pid = _fork(lambda: _submission(args, fds[0]), (channel.fileno(),), group=True)
        except Exception as error:  # noqa: BLE001 - a request it cannot run: say so, go on
            _send(channel, {"spawned": request.get("id") if isinstance(request, dict) else None,
                            "error": f"{type(error).__name__}: {error}"[:500]})
        else:
            children.add(pid)
            _send(channel, {"spawned": request["id"], "pid": pid})
        finally:
            for fd in fds:
                os.close(fd)


def _command_line(argv: list[str]) -> int:
    """``--serve FD --record FILE --tests EX=FILE ...``: a batch's worker (:func:`serve`); else
    one submission's, its arguments as :meth:`WorkerArgs.argv` wrote them."""
    if argv[:1] != ["--serve"]:
        return main(WorkerArgs.from_message(*json.loads(argv[0])))
    parser = argparse.ArgumentParser(prog="grading.box.worker --serve")
    parser.add_argument("--serve", type=int, required=True, metavar="FD")
    parser.add_argument("--record", default=None)
    parser.add_argument("--tests", nargs="*", default=[], metavar="EX=FILE")
    args = parser.parse_args(argv)
    return serve(args.serve, [item.split("=", 1)[1] for item in args.tests], args.record)


if __name__ == "__main__":
    sys.exit(_command_line(sys.argv[1:]))
