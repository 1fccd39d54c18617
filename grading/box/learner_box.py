"""The learner's side of a graded submission: a folder, a sandboxed server, its channels.

:func:`build_learner_box` makes the only folder the learner's code sees: the submission's
exercise files and the learner kit, ``kata/`` as it is (models, blocks, norms, validation, toys,
the sandbox's server). No tests, no reference computations, no solutions, no variants or
mistakes, no grading code, no declarations: they live in ``course/`` and ``grading/``.

:class:`LearnerBox` starts :mod:`kata.serve.server` on that folder, in the submission's
sandbox (:mod:`grading.box.sandbox`) when there is one, with two pipes per exercise to the
trusted worker. Its standard output goes nowhere and its standard error into a pipe of which the
grader keeps the last :data:`STDERR_TAIL` bytes: the sandbox holds no host file it could write
to, grow or ``fallocate``. In a batch graded as root the server is not started but forked from the
batch's :class:`LearnerZygote` into the submission's sandbox (:mod:`kata.serve.zygote`), with
the same channels and standard error; where that fails it is started as before.
"""

from __future__ import annotations

import array
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from grading.box.runner import LEARNER_READY, STARTUP_SECONDS, child_environment, kill_group
from kata.serve import GENERATIONS, close_all, format_pairs

#: The learner kit: the one folder of the kata the learner's side gets, whole.
LEARNER_KIT = "kata"
#: Where the channels of the exercises sit inside the sandbox: 10 and 11, 12 and 13, ...
FIRST_CHANNEL_FD = 10
#: How much of the learner server's standard error the grader keeps.
STDERR_TAIL = 16_384
#: CPU seconds each exercise's learner process may use, beyond the exercise's wall limit.
CPU_MARGIN_SECONDS = 60

# Prepended to the sandbox's outer shim: move descriptors to fixed numbers, shift argv.
# (argv: N, then N pairs "source target"; each source goes out of the way first, so a source
# that happens to be another pair's target is not overwritten.)
_MOVE_FD = (
    "import os, sys, fcntl\n"
    "_n = int(sys.argv[1])\n"
    "_pairs = [(int(sys.argv[2 + 2 * i]), int(sys.argv[3 + 2 * i])) for i in range(_n)]\n"
    "_high = [fcntl.fcntl(s, fcntl.F_DUPFD, 100) for s, _ in _pairs]\n"
    "for s, _ in _pairs: os.close(s)\n"
    "for h, (_, d) in zip(_high, _pairs):\n"
    "    os.dup2(h, d); os.close(h)\n"
    "del sys.argv[1:2 + 2 * _n]\n"
)


def _readable_copy(source: Path, target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    if source.is_dir():
        shutil.copytree(source, target, ignore=ignore)
    else:
        shutil.copy2(source, target)


def build_learner_box(instructor_root: Path, target: Path, files: dict[str, bytes]) -> None:
    """``target``: the learner's exercise files and the learner kit, readable by all."""
    target.mkdir(parents=True, exist_ok=True)
    _readable_copy(instructor_root / LEARNER_KIT, target / LEARNER_KIT)
    (target / "exercises").mkdir()
    shutil.copy2(instructor_root / "exercises" / "__init__.py", target / "exercises" / "__init__.py")
    for module, source in files.items():
        (target / "exercises" / f"{module}.py").write_bytes(source)
    for directory, subdirs, names in os.walk(target):
        os.chmod(directory, 0o755)
        for name in names:
            os.chmod(os.path.join(directory, name), 0o644)


@dataclass
class Channels:
    """Per exercise, :data:`~kata.serve.GENERATIONS` channels of two pipes each (one
    per learner process the exercise may use): the trusted worker's ends and the server's."""

    trusted: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # id -> [(read, write)]
    learner: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def open(cls, exercise_ids: list[str]) -> Channels:
        channels = cls()
        for exercise_id in exercise_ids:
            for _ in range(GENERATIONS):
                to_learner, from_learner = os.pipe(), os.pipe()
                channels.trusted.setdefault(exercise_id, []).append(
                    (from_learner[0], to_learner[1]))
                channels.learner.setdefault(exercise_id, []).append(
                    (to_learner[0], from_learner[1]))
        return channels

    @property
    def trusted_fds(self) -> tuple[int, ...]:
        return tuple(fd for pairs in self.trusted.values() for pair in pairs for fd in pair)

    @property
    def learner_fds(self) -> tuple[int, ...]:
        return tuple(fd for pairs in self.learner.values() for pair in pairs for fd in pair)

    def close_trusted(self) -> None:
        close_all(self.trusted_fds)

    def close_learner(self) -> None:
        close_all(self.learner_fds)


class LearnerServer:
    """The running :mod:`kata.serve.server`, and the tail of what it wrote to stderr."""

    def __init__(self, process: subprocess.Popen, stream=None):
        self.process = process
        self.stream = stream if stream is not None else process.stderr  # its standard error
        self.started = time.time()  # when the sandbox was started (its phases are timed from it)
        self._tail = bytearray()
        self.ready = False  # it said LEARNER_READY (before any learner file ran)
        self._settled = threading.Event()  # it said it is ready, or it ended
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream = self.stream
        ready = LEARNER_READY.encode()
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                self._settled.set()
                return
            if not self.ready and ready in bytes(self._tail[-64:]) + chunk:
                self.ready = True  # the master's line: no learner file has run before it
                self._settled.set()
            self._tail += chunk
            del self._tail[:-STDERR_TAIL]

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the server has loaded its models (before any learner file is imported),
        or has ended, at most ``timeout`` seconds; whether it did."""
        return self._settled.wait(timeout)

    def stderr(self) -> str:
        """The tail of its standard error, which still says it got ready when it did: the
        learner's code shares that stream and could push the line out of the tail with a flood,
        and a crash before it is the sandbox's fault, not the learner's."""
        text = bytes(self._tail).decode("utf-8", errors="replace")
        if self.ready and LEARNER_READY not in text:
            text = f"{LEARNER_READY}\n{text}"
        return text

    def keep_log(self, path: Path) -> None:
        """Write the tail of its standard error to ``path``, after a line saying when it was
        started (``kata-learner-phase popen TIME 0``; the benchmarks read the phases there)."""
        try:
            path.write_text(f"kata-learner-phase popen {self.started:.3f} 0\n{self.stderr()}",
                            encoding="utf-8")
        except OSError:
            pass

    def kill(self) -> None:
        kill_group(self.process)
        self._reader.join(timeout=5)
        if self.stream is not self.process.stderr:
            self.stream.close()


@dataclass
class LearnerBox:
    """How to start the learner's server for one submission."""

    folder: Path  # made by build_learner_box
    modules: dict[str, str]  # exercise id -> its module
    sandbox: object | None = None  # a Sandbox or an Unprivileged (grading.box.sandbox); None: none
    timeout: float = 60.0
    threads: int | None = None
    zygote: LearnerZygote | None = None  # the batch's warm parent; None: every server starts cold
    call_seconds: float = 0.0  # the deadline of one call of a learner's function (0: none)

    def start(self, exercises: list, work_dir: Path, n: int) -> tuple[Channels, LearnerServer]:
        ids = [e.id for e in exercises if e.id in self.modules]
        channels = Channels.open(ids)
        env = child_environment(self.folder, self.threads)
        cpu = int(self.timeout) + CPU_MARGIN_SECONDS
        try:
            if self.sandbox is None:
                specs = [f"{i}={self.modules[i]}:{format_pairs(pairs)}"
                         for i, pairs in channels.learner.items()]
                command = self._command(str(self.folder), specs, cpu)
                process = _popen(command, self.folder, env, channels.learner_fds)
            elif self.zygote is not None and (process := self._warm_start(channels, cpu)):
                return channels, process
            else:
                targets, specs, inner = {}, [], FIRST_CHANNEL_FD
                for exercise_id, pairs in channels.learner.items():
                    moved = []
                    for r, w in pairs:
                        targets.update({r: inner, w: inner + 1})
                        moved.append((inner, inner + 1))
                        inner += 2
                    specs.append(f"{exercise_id}={self.modules[exercise_id]}:{format_pairs(moved)}")
                command = self._command(self.sandbox.root_of(self.folder), specs, cpu)
                wrapped = self.sandbox.command(command, self.folder)
                pairs = [str(v) for source, target in targets.items() for v in (source, target)]
                wrapped = [wrapped[0], "-c", _MOVE_FD + wrapped[2], str(len(targets)), *pairs,
                           *wrapped[3:]]
                process = _popen(wrapped, self.folder, self.sandbox.environment(env),
                                 tuple(targets))
        finally:
            channels.close_learner()  # the server holds them now (or never will)
        return channels, LearnerServer(process)

    def _warm_start(self, channels: Channels, cpu: int) -> LearnerServer | None:
        """The server forked from the batch's :class:`LearnerZygote` into this submission's
        sandbox; None when the zygote cannot give one (the caller then starts it cold).

        The sandbox is made with a placeholder in it, which says "ready" once bwrap has built
        the whole sandbox (its folders, hidden places and read-only mounts): only then is it
        joined, never while bwrap is still building it."""
        from grading.box.sandbox import INSIDE_ROOT

        info_read, info_write = os.pipe()
        ready_read, ready_write = os.pipe()
        err_read, err_write = os.pipe()
        placeholder = None
        try:
            command = self.sandbox.command(PLACEHOLDER, self.folder, info_fd=info_write)
            placeholder = _popen(command, self.folder, None, (info_write,), ready_write,
                                 err_write)
            close_all((info_write, ready_write))
            info_write = ready_write = -1
            first = _sandbox_pid(info_read, PLACEHOLDER_SECONDS)
            if first is not None and _read_until(ready_read, b"ready\n", PLACEHOLDER_SECONDS) \
                    and self.zygote.spawn(
                        first, lambda: placeholder.poll() is None, self.sandbox, INSIDE_ROOT,
                        cpu, self.call_seconds, err_write,
                        [(i, self.modules[i], pairs) for i, pairs in channels.learner.items()]):
                os.close(err_write)
                err_write = -1
                return LearnerServer(placeholder, os.fdopen(err_read, "rb", buffering=0))
        except OSError:
            pass
        finally:
            close_all(fd for fd in (info_read, info_write, ready_read, ready_write, err_write)
                       if fd >= 0)
        if placeholder is not None:  # started, but no server came into it: start one cold
            kill_group(placeholder)
            self.sandbox.kill_all()
        os.close(err_read)
        return None

    def _command(self, root: str, specs: list[str], cpu: int) -> list[str]:
        command = [sys.executable, "-m", "kata.serve.server", "--root", root, "--cpu", str(cpu),
                   "--call-seconds", str(self.call_seconds)]
        for spec in specs:
            command += ["--channel", spec]
        return command

    def stop(self, server: LearnerServer) -> None:
        server.kill()
        if self.sandbox is not None:
            self.sandbox.kill_all()


def _popen(command, cwd, env, fds, stdout=subprocess.DEVNULL,
           stderr=subprocess.PIPE) -> subprocess.Popen:
    """``command`` in a session of its own, reading nothing, holding ``fds``."""
    return subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                            stderr=stderr, start_new_session=True, pass_fds=fds)


#: What holds a submission's sandbox open until the zygote's child joins it: a shell, run once
#: bwrap has built the sandbox, that says so and becomes coreutils' sleep (both among the
#: system's folders every sandbox sees).
PLACEHOLDER = ["/bin/sh", "-c", "echo ready && exec sleep infinity"]
#: How long the sandbox may take to be built, and the zygote to join it.
PLACEHOLDER_SECONDS = 30.0


def _read_until(fd: int, marker: bytes, timeout: float, limit: int = 4096) -> bytes | None:
    """What ``fd`` gave up to and including ``marker``; None if it did not come within
    ``timeout`` seconds and ``limit`` bytes, or the other end closed first."""
    text, deadline = b"", time.monotonic() + timeout
    while marker not in text and len(text) < limit:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, limit)
        if not chunk:
            return None
        text += chunk
    return text if marker in text else None


def _sandbox_pid(info_fd: int, timeout: float) -> int | None:
    """The id of the sandbox's first process, from bwrap's ``--info-fd`` JSON; None if bwrap
    said nothing usable within ``timeout`` seconds."""
    text = _read_until(info_fd, b"}", timeout)
    try:
        pid = json.loads(text[:text.index(b"}") + 1])["child-pid"]
    except (TypeError, ValueError, KeyError):
        return None
    return pid if isinstance(pid, int) and pid > 1 else None


class LearnerZygote:
    """The batch's warm parent of learners' servers (:mod:`kata.serve.zygote`): started once,
    in a sandbox of its own, it loads the models; each submission's server is forked from it
    into that submission's sandbox (:meth:`spawn`). Only for a grader run as root, the one that
    can keep the capabilities joining a sandbox takes, without a user namespace."""

    def __init__(self, process: subprocess.Popen, control, sandbox, log: Path | None = None):
        self.process = process
        self.log = log  # where its start's CPU seconds are written, as a learner log's phases
        self.control = control
        self.sandbox = sandbox  # the zygote's own (never a submission's)
        self._lock = threading.Lock()
        self._state = "starting"  # then "ready" or "broken"

    @classmethod
    def start(cls, instructor_root: Path, folder: Path, hide: list, memory_limit_mb: int,
              threads: int | None, log: Path | None = None) -> LearnerZygote | None:
        """Start the zygote on a learner box with no submission in it (``folder``); None where
        it cannot be (not root, no sandbox, or ``KATA_WARM_LEARNERS=0``). ``log``: where to
        write the CPU seconds its start took."""
        from grading.box.sandbox import Sandbox, sandbox_available

        if os.geteuid() != 0 or not sandbox_available()[0] \
                or os.environ.get("KATA_WARM_LEARNERS", "1") == "0":
            return None
        build_learner_box(instructor_root, folder, {})
        os.chmod(folder.parent, 0o755)
        sandbox = Sandbox.create(hide, memory_limit_mb, use_cgroup=False)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-m", "kata.serve.zygote", "--control", str(theirs.fileno())]
        wrapped = sandbox.command(command, folder, warm_parent=True)
        env = sandbox.environment(child_environment(folder, threads))  # PYTHONPATH: INSIDE_ROOT
        try:
            process = _popen(wrapped, folder, env, (theirs.fileno(),),
                             stderr=subprocess.DEVNULL)
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        return cls(process, ours, sandbox, log)

    def _ready(self) -> bool:
        """Whether the zygote has loaded its models (waited for once, by the first caller)."""
        if self._state == "starting":
            self.control.settimeout(STARTUP_SECONDS)
            try:
                said = self.control.recv(1024).decode("ascii", errors="replace").split()
            except OSError:
                said = []
            self._state = "ready" if said[:1] == ["ready"] else "broken"
            if self.log is not None and len(said) == 2:  # the benchmarks' CPU line reads it
                try:
                    self.log.write_text(f"kata-learner-phase models 0 {float(said[1]):.2f}\n")
                except (OSError, ValueError):
                    pass
        return self._state == "ready"

    def spawn(self, first_pid: int, alive, sandbox, root: str, cpu: int, call_seconds: float,
              stderr_fd: int, channels: list[tuple[str, str, list[tuple[int, int]]]]) -> bool:
        """Fork a server into the sandbox whose first process is ``first_pid``: its namespaces,
        ``sandbox``'s cgroup and limits, ``stderr_fd`` as its standard error, and ``channels``
        (exercise, module, its channels' read and write ends). ``alive()`` says whether that sandbox still
        runs (checked once its namespaces are open: the process id was not yet taken by another
        process). Whether the server got there; after a failure the zygote is not asked again."""
        from kata.serve.zygote import NAMESPACES

        opened: list[int] = []
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._lock:
                if not self._ready():
                    return False
                opened += [os.open(f"/proc/{first_pid}/ns/{name}", os.O_RDONLY)
                           for name in NAMESPACES]
                if not alive():
                    return False
                cgroups = sandbox.cgroup.procs_files if sandbox.cgroup is not None else []
                opened += [os.open(path, os.O_WRONLY) for path in cgroups]
                request = {"namespaces": list(NAMESPACES), "cgroups": len(cgroups),
                           "root": root, "cpu": cpu, "call_seconds": call_seconds,
                           "channels": [[i, module, len(pairs)] for i, module, pairs in channels],
                           **sandbox.limits()}
                fds = [theirs.fileno(), stderr_fd, *opened,
                       *(fd for _, _, pairs in channels for pair in pairs for fd in pair)]
                self.control.sendmsg([json.dumps(request).encode()],
                                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            theirs.close()
            ours.settimeout(PLACEHOLDER_SECONDS)
            said = ours.recv(1024)
        except OSError:
            said = b""
        finally:
            theirs.close()
            ours.close()
            close_all(opened)
        if said != b"ok":
            with self._lock:
                self._state = "broken"
        return said == b"ok"

    def close(self) -> None:
        self.control.close()
        kill_group(self.process)
        self.sandbox.close()
