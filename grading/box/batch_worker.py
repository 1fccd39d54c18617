"""One warm trusted worker for a whole batch: imports and model loads once, not per submission.

A submission's warm worker (:mod:`grading.box.worker`) spends about 5 CPU seconds on imports
and models before any test. A batch starts one :class:`BatchWorker` instead, which warms up once
on the batch's trusted copy of the kata and forks each submission's worker
(:func:`grading.box.worker.serve`): a fresh process as far as the submission can tell (its own
process group, error log, channels and exercise children). The submissions share only trusted
state, the imported modules and the session models as loaded; no learner's code or data ever
reaches the batch's worker itself: it only receives descriptors and forks.

:meth:`BatchWorker.spawn` gives a :class:`ForkedWorker`, which the runner watches like the
``subprocess.Popen`` of a worker of its own (``pid``, ``poll``, ``wait``, ``returncode``; its
process group is killed with ``os.killpg`` like any other). If the batch's worker is gone (it
crashed, or was killed for memory), every child it had is reported :attr:`~ForkedWorker.lost`,
and the runner grades that submission again with a worker of its own: the machine's fault is
never a learner's grade.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
from pathlib import Path

from grading.box.runner import kill_group, start_child, wait_until
from grading.box.worker import MAX_REQUEST_BYTES, WorkerArgs, kill_process_group

#: How long a spawn waits for the batch's worker to be warm, and for its answer.
READY_SECONDS = 120.0
SPAWN_SECONDS = 30.0
#: How long a killed child's end may take to be reported before it counts as lost.
END_SECONDS = 30.0


class ForkedWorker:
    """A submission's worker forked by the batch's worker: what the runner needs of a Popen."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self.lost = False  # the batch's worker went away: this run says nothing of the learner
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Its return code once it ended; a child whose end is not reported within
        :data:`END_SECONDS` (the batch's worker is stuck) counts as lost."""
        if not self._ended.wait(END_SECONDS if timeout is None else timeout) and timeout is None:
            self.end(-signal.SIGKILL, lost=True)
        return self.returncode

    def end(self, returncode: int, lost: bool = False) -> None:
        if not self._ended.is_set():
            self.returncode, self.lost = returncode, lost
            self._ended.set()


class BatchWorker:
    """The batch's warm trusted worker, and the submissions' workers it forked."""

    def __init__(self, root: Path, test_files: list[tuple[str, Path]], env: dict[str, str],
                 log_dir: Path, memory_limit_mb: int = 0):
        self.root = Path(root)
        self.warm: dict | None = None  # {"seconds", "cpu"} of its warm-up, once ready
        self.lost = False
        self._socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-m", "grading.box.worker", "--serve", str(theirs.fileno()),
                   "--record", str(log_dir / "batch-worker.jsonl"),
                   "--tests", *[f"{e}={path}" for e, path in test_files]]
        try:
            self.process = start_child(command, self.root, env, log_dir, memory_limit_mb,
                                       name="batch-worker", pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._next_id = 0
        self._waiting: dict[int, list] = {}  # request id -> [event, ForkedWorker or None]
        self._children: dict[int, ForkedWorker] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # -- the grader's side ---------------------------------------------------

    def spawn(self, args: WorkerArgs, error_log: Path) -> ForkedWorker | None:
        """A child running ``args`` (its channels are passed on, and stay open here for the
        caller to close); None when the batch's worker cannot give one (the caller starts a
        worker of its own), or is not warm within :data:`READY_SECONDS`."""
        if not wait_until(self._ready.wait, READY_SECONDS) or self.lost:
            return None
        with open(error_log, "wb") as log:
            with self._lock:
                self._next_id += 1
                request = self._next_id
                data = json.dumps({"args": args.to_message(), "id": request}).encode("utf-8")
                if len(data) > MAX_REQUEST_BYTES:
                    return None
                waiter = [threading.Event(), None]
                self._waiting[request] = waiter
                try:
                    socket.send_fds(self._socket, [data], [log.fileno(), *args.fds()])
                except OSError:
                    self._waiting.pop(request, None)
                    return None
        waiter[0].wait(SPAWN_SECONDS)
        with self._lock:
            self._waiting.pop(request, None)
        return waiter[1]

    def close(self) -> None:
        """End the batch's worker and every child it still has."""
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        kill_group(self.process)
        self._reader.join(timeout=5)
        self._socket.close()

    # -- what the batch's worker says ----------------------------------------

    def _read(self) -> None:
        while True:
            try:
                data = self._socket.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._gone()
                return
            try:
                message = json.loads(data)
            except ValueError:
                continue
            if isinstance(message, dict):
                self._take(message)

    def _take(self, message: dict) -> None:
        if message.get("ready"):
            self.warm = {k: message.get(k) for k in ("seconds", "cpu")}
            self._ready.set()
        elif "spawned" in message:
            with self._lock:
                waiter = self._waiting.get(message["spawned"])
                pid = message.get("pid")
                if type(pid) is int:
                    child = ForkedWorker(pid)
                    self._children[pid] = child
                    if waiter is None:  # asked for, then given up on: not wanted any more
                        kill_process_group(pid)
                if waiter is not None:
                    waiter[1] = self._children.get(pid) if type(pid) is int else None
                    waiter[0].set()
        elif "exited" in message:
            with self._lock:
                child = self._children.pop(message["exited"], None)
            if child is not None:
                code = message.get("returncode")
                child.end(code if type(code) is int else 1)

    def _gone(self) -> None:
        """The batch's worker ended: nothing more will be spawned, and every child it had is
        lost (killed, so that none outlives it)."""
        self.lost = True
        self._ready.set()
        with self._lock:
            children, self._children = list(self._children.values()), {}
            waiters = list(self._waiting.values())
        for child in children:
            kill_process_group(child.pid)
            child.end(-signal.SIGKILL, lost=True)
        for waiter in waiters:
            waiter[0].set()
