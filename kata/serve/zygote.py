"""A warm start for the learner's server: load the models once per batch, fork each submission's
server from that warm parent into the submission's own sandbox.

A learner's server (:mod:`kata.serve.server`) spends about 5 CPU seconds importing torch,
transformers' model code and matplotlib and loading the models before the first learner file
runs, and every submission of a batch paid it again. ``python -m kata.serve.zygote --control
FD`` pays it once. The grader (:class:`grading.box.learner_box.LearnerZygote`) starts it in a
sandbox of its own with no submission in it (the system's folders, the virtual environment, the
models and the learner-facing ``kata``, as every submission's sandbox has them; nothing hidden
there shows), as root without a user namespace, so that it keeps the capabilities that joining
namespaces takes. No learner code ever runs in it.

For each submission the grader makes the submission's sandbox as before (``bwrap``, with a
placeholder process in it) and sends this process, over the control socket, the sandbox's
namespaces, cgroup, limits, channels and standard error. A child of the zygote joins them
(:func:`_spawn`, :func:`join`) and forks once more into the sandbox's process tree, where
:func:`kata.serve.server.serve` imports the learner's files with the models already loaded.
What the learner's code can reach is what the cold start gives it: the same folders, uid,
namespaces and limits, and no descriptor of the zygote.

It parses its own few arguments, as the server does, because only the grader starts it, in a
sandbox that holds no ``grading``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import socket
import sys
from pathlib import Path

from kata.serve.server import MachineFault, load_session, say_phase, serve

#: Largest request, bytes (a few hundred in practice).
MAX_REQUEST = 16_384
#: Most descriptors one request may carry (8 exercises of 4 channels: 64 channel ends, 6
#: namespaces, the cgroup, standard error, the reply socket); the kernel passes 253 at most.
MAX_FDS = 253
#: The namespaces a submission's sandbox has of its own, joined in this order (the process tree
#: before the mounts; a new process tree takes effect in the next child).
NAMESPACES = ("ipc", "uts", "net", "cgroup", "pid", "mnt")
_PR_SET_NO_NEW_PRIVS = 38


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _setns(fd: int, name: str) -> None:
    if _libc().setns(fd, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"joining the sandbox's {name} namespace: {os.strerror(error)}")


def _close_all_but(keep: set[int]) -> None:
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 2**20)


def join(request: dict, namespace_fds: list[int], cgroup_fds: list[int]) -> None:
    """Become a process of the submission's sandbox: its cgroup, its namespaces, its uid and
    its limits (those of :data:`grading.box.sandbox._INNER`). Raises OSError."""
    for fd in cgroup_fds:
        os.write(fd, str(os.getpid()).encode())
    for name, fd in zip(request["namespaces"], namespace_fds):
        _setns(fd, name)
    os.chdir("/tmp")
    if not os.path.isdir(os.path.join(request["root"], "exercises")):
        raise OSError(2, "the submission's folder is not in the sandbox joined")
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs could not be set")
    uid = int(request["uid"])
    if uid >= 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid or os.getegid() != uid:
            raise OSError(1, "the unprivileged user could not be taken")
    memory, processes, fsize = (int(request[k]) for k in ("memory", "processes", "fsize"))
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _spawn(control: socket.socket, models, message: bytes, fds: list[int]) -> None:
    """In the zygote's child: join the submission's sandbox, start its server there, and say
    on the request's reply socket whether it got there. Never returns."""
    code, reply = 1, fds[0] if fds else -1
    try:
        control.close()
        request = json.loads(message)
        stderr, rest = fds[1], fds[2:]
        n_ns, n_cgroups = len(request["namespaces"]), int(request["cgroups"])
        namespace_fds, cgroup_fds = rest[:n_ns], rest[n_ns:n_ns + n_cgroups]
        channel_fds = rest[n_ns + n_cgroups:]
        channels, used = [], 0
        for exercise_id, module, count in request["channels"]:
            ends = channel_fds[used:used + 2 * count]
            channels.append((exercise_id, module, list(zip(ends[::2], ends[1::2]))))
            used += 2 * count
        os.dup2(stderr, 2)
        _close_all_but({reply, *namespace_fds, *cgroup_fds, *channel_fds})
        join(request, namespace_fds, cgroup_fds)
        for fd in namespace_fds + cgroup_fds:
            os.close(fd)
        pid = os.fork()  # its child is inside the sandbox's process tree
        if pid == 0:
            os.close(reply)
            os.setsid()  # a session of its own, as bwrap --new-session gives a cold server
            say_phase("joined")
            served = 1
            try:
                served = serve(models, Path(request["root"]), channels, int(request["cpu"]),
                               float(request["call_seconds"]))
            finally:
                os._exit(served)
        os.write(reply, b"ok")
        code = 0
    except BaseException as error:  # noqa: BLE001 - the grader starts this server cold instead
        with contextlib.suppress(OSError):
            os.write(reply, f"failed: {type(error).__name__}: {error}"[:1000].encode())
    finally:
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    say_phase("started")
    parser = argparse.ArgumentParser(prog="kata.serve.zygote")
    parser.add_argument("--control", type=int, required=True, help="the grader's socket")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    control = socket.socket(fileno=args.control)
    try:
        models = load_session()
    except MachineFault as error:
        control.send(f"failed: {error}"[:1000].encode())
        return 1
    usage = resource.getrusage(resource.RUSAGE_SELF)
    control.send(f"ready {usage.ru_utime + usage.ru_stime:.2f}".encode())  # its CPU seconds
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, MAX_FDS)
        except OSError:
            return 0
        if not message:
            return 0  # the grader closed the socket: the batch is over
        pid = os.fork()
        if pid == 0:
            _spawn(control, models, message, fds)
        for fd in fds:
            os.close(fd)
        os.waitpid(pid, 0)  # it ends as soon as its child is in the sandbox


if __name__ == "__main__":
    sys.exit(main())
