"""The sandbox's own defences, each attacked from inside (docs/security.md, the threat model):
no network, the process cap against a fork bomb, the sizes of the private ``/tmp`` and
``/dev/shm``, and a ``/dev/shm`` of the sandbox's own.

Each test runs a short probe as a submission's learner code runs: in a sandbox made, wrapped
and given its environment by the box's own API (:meth:`Sandbox.create`, :meth:`Sandbox.command`,
:meth:`Sandbox.environment`), and reads what the probe saw, one JSON line on its standard output.
Every probe is bounded, so that a defence gone costs a failed test, never the machine: the fork
loop stops at twice the cap, the writes a little past the size. Everything skips, with the
reason, where no sandbox can be made.

How each was shown to fail without its defence: the defence taken out of
``grading/box/sandbox.py`` by hand, this file run (as root, with a cgroup v1 ``pids``
controller), the line put back:

* no network: ``"--unshare-net"`` dropped from the isolation of a grader run as root: the probe
  saw the machine's interfaces (``eth0`` ...) and connected to the test's loopback and abstract
  sockets, and the datagram socket found a route;
* the process cap: the ``pids.max`` writes of ``_make_v1`` and ``_make_v2`` dropped, then the
  ``RLIMIT_NPROC`` line of ``_INNER``: the ``cgroup`` case, then the ``rlimit`` one, forked up
  to the bound with no ``EAGAIN``;
* the sizes: the ``"--size", ...`` before both ``--tmpfs`` dropped: both writes reached the
  bound with no ``ENOSPC`` (each tmpfs then had half the machine's memory);
* ``/dev/shm`` the sandbox's own: ``--tmpfs /dev/shm`` replaced by ``--bind /dev/shm /dev/shm``:
  the probe saw the test's file, and its own file was left in the machine's ``/dev/shm``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from grading.box.sandbox import sandbox_available

REPO = Path(__file__).resolve().parents[2]
AVAILABLE, WHY = sandbox_available()
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason=f"no sandbox here: {WHY}")


def _probe(box, probe: str, *args: str, timeout: float = 60) -> dict:
    """Run ``probe`` (Python) in ``box`` (a :class:`Sandbox`) as the grader runs a learner's
    server, and return the JSON its last line of output holds; ``box`` is closed after."""
    kata = Path(tempfile.mkdtemp(prefix="kata-limits-"))  # the learner's folder, empty here
    os.chmod(kata, 0o755)  # entered by the learner's uid
    try:
        command = box.command([sys.executable, "-c", textwrap.dedent(probe), *args], kata)
        done = subprocess.run(command, env=box.environment(dict(os.environ)),
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    finally:
        box.kill_all()
        box.close()
        os.rmdir(kata)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, (done.returncode, done.stdout[-1000:],
                                            done.stderr[-2000:])
    return json.loads(lines[-1])


def _sandbox(use_cgroup: bool = True):
    from grading.box.sandbox import Sandbox

    return Sandbox.create([REPO], 0, use_cgroup=use_cgroup)


# --------------------------------------------------------------------------- no network


NETWORK = '''
import errno, json, socket, sys

def interfaces():
    lines = open("/proc/net/dev").read().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines)

def attempt(family, kind, address):
    with socket.socket(family, kind) as s:
        s.settimeout(5)
        try:
            s.connect(address)
        except OSError as error:
            return errno.errorcode.get(error.errno, str(error))
        return "connected"

port, abstract = int(sys.argv[1]), sys.argv[2]
print(json.dumps({
    "interfaces": interfaces(),
    # a non-loopback address (TEST-NET-1): a datagram socket's connect only picks a route
    "outside": attempt(socket.AF_INET, socket.SOCK_DGRAM, ("192.0.2.1", 9)),
    # the machine's own services: on its loopback, and on an abstract Unix socket
    "loopback": attempt(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", port)),
    "abstract": attempt(socket.AF_UNIX, socket.SOCK_STREAM, "\\0" + abstract),
}))
'''


@needs_sandbox
def test_the_sandbox_has_no_network():
    """Inside, only the loopback interface exists: an address off the machine is unreachable
    (``ENETUNREACH``), and the services of the machine itself, listening on its loopback or on
    an abstract Unix socket (both scoped by the network namespace), refuse the connection; the
    same probe run outside (as the grader) reaches both, so the test fails on a machine with no
    network too, should the sandbox share the machine's network namespace."""
    name = f"kata-limits-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        unix.bind("\0" + name)
        unix.listen()
        port = str(tcp.getsockname()[1])
        outside = subprocess.run([sys.executable, "-c", textwrap.dedent(NETWORK), port, name],
                                 capture_output=True, text=True, timeout=60)
        inside = _probe(_sandbox(), NETWORK, port, name)
    outside = json.loads(outside.stdout.strip().splitlines()[-1])
    assert outside["loopback"] == outside["abstract"] == "connected", outside
    assert inside["interfaces"] == ["lo"], (inside, outside["interfaces"])
    assert inside["outside"] == "ENETUNREACH", inside
    assert inside["loopback"] == inside["abstract"] == "ECONNREFUSED", inside


# --------------------------------------------------------------------------- the process cap


FORK_BOMB = '''
import errno, json, os, sys

bound = int(sys.argv[1])
release, hold = os.pipe()  # every child waits on it, and ends when it closes
children, stopped = [], None
for _ in range(bound):
    try:
        pid = os.fork()
    except OSError as error:
        stopped = errno.errorcode.get(error.errno, str(error))
        break
    if pid == 0:
        os.close(hold)
        os.read(release, 1)
        os._exit(0)
    children.append(pid)
os.close(hold)
for pid in children:
    os.waitpid(pid, 0)
print(json.dumps({"forked": len(children), "stopped": stopped}))
'''


@needs_sandbox
@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "rlimit"])
def test_a_fork_bomb_is_stopped_at_the_process_cap(cgroup):
    """A loop of forks, each child kept alive, is stopped (``EAGAIN``) before the sandbox's
    processes reach :data:`MAX_PROCESSES`: by the submission's cgroup (``pids.max``) where one
    can be made, else (``use_cgroup=False`` plays a machine that makes none) by
    ``RLIMIT_NPROC``. The loop gives up at twice the cap, and every child ends with it."""
    from grading.box.sandbox import MAX_PROCESSES

    box = _sandbox(use_cgroup=cgroup)
    if cgroup and box.cgroup is None:
        box.close()
        pytest.skip("no cgroup can be made here: the cap is RLIMIT_NPROC (the rlimit case)")
    seen = _probe(box, FORK_BOMB, str(2 * MAX_PROCESSES))
    assert seen["stopped"] == "EAGAIN" and seen["forked"] < MAX_PROCESSES, seen


# --------------------------------------------------------------------------- /tmp and /dev/shm


FILL = '''
import errno, json, os, sys

folder, bound = sys.argv[1], int(sys.argv[2])
chunk = b"x" * 2**20  # one file a MiB, far below the cap on a file's size
written, error, number = 0, None, 0
while written < bound and error is None:
    try:
        fd = os.open(os.path.join(folder, f"fill-{number}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            written += os.write(fd, chunk)
        finally:
            os.close(fd)
    except OSError as caught:
        error = errno.errorcode.get(caught.errno, str(caught))
    number += 1
size = os.statvfs(folder)
print(json.dumps({"written": written, "error": error, "size": size.f_blocks * size.f_frsize}))
'''


@needs_sandbox
@pytest.mark.parametrize("folder, constant", [("/tmp", "TMP_MB"), ("/dev/shm", "SHM_MB")])
def test_writing_past_the_private_tmp_and_dev_shm_fails(folder, constant):
    """Files written to the sandbox's private ``/tmp`` (``/dev/shm``) fill it at
    :data:`TMP_MB` (:data:`SHM_MB`) MiB, the size the reports state, and the next write fails
    with ``ENOSPC``; should there be no cap, the probe stops a few MiB past the size (the
    memory it held goes with the sandbox's tmpfs, at once)."""
    from grading.box import sandbox

    size = getattr(sandbox, constant) * 2**20
    seen = _probe(_sandbox(), FILL, folder, str(size + 8 * 2**20))
    assert seen["error"] == "ENOSPC", seen
    assert seen["size"] == size and size - 2**20 < seen["written"] <= size, seen


SHARED_MEMORY = '''
import json, os, sys

with open(os.path.join("/dev/shm", sys.argv[2]), "w") as handle:
    handle.write("written in the sandbox")
print(json.dumps({"seen": sys.argv[1] in os.listdir("/dev/shm")}))
'''


@needs_sandbox
def test_dev_shm_is_the_sandboxs_own():
    """A file the machine holds in ``/dev/shm`` is not in the sandbox's, and a file the sandbox
    writes to its ``/dev/shm`` never reaches the machine's (shared memory is a channel between
    processes, and its files outlive their writers)."""
    machine = Path("/dev/shm")
    if not machine.is_dir():
        pytest.skip("this machine has no /dev/shm to tell the sandbox's from")
    token = uuid.uuid4().hex
    host, inside = machine / f"kata-limits-host-{token}", machine / f"kata-limits-box-{token}"
    host.write_text("written by the grader")
    try:
        seen = _probe(_sandbox(), SHARED_MEMORY, host.name, inside.name)
        leaked = inside.exists()
    finally:
        host.unlink()
        inside.unlink(missing_ok=True)
    assert seen == {"seen": False} and not leaked, (seen, leaked)
