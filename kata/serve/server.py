"""The learner's side of trusted grading: runs a submission's functions, and nothing else.

``python -m kata.serve.server --channel ex1=ex1_hidden_states:10,11;12,13 ...`` runs inside the
submission's sandbox, which holds only the learner's exercise files and the learner-facing
``kata``: no tests, no reference computations, no solutions, no grading code. It imports torch,
transformers and matplotlib and loads the session models once (:func:`load_session`), then forks
one learner process per exercise (:func:`serve`), which imports that exercise's file and answers
the trusted side's requests on the exercise's channel (:mod:`kata.serve.channel`, which also
tells how a process that ended is followed by the next *generation*):

* ``hello``: the functions the file defines, or why it does not import;
* ``call``: one function run on the arguments sent, under a deadline (``--call-seconds``:
  ``SIGALRM`` ends the process) and a cap on its CPU time (``RLIMIT_CPU``); back go its result,
  the tensors it changed in place, the hooks it left on the models, or its exception;
* ``reset``: after each test, the models' hooks and the process-wide state put back.

On its standard error it says when each phase of its start ended and the CPU seconds it had used
(``kata-learner-phase started|imports|models TIME CPU``), and how many CPU seconds each
exercise's process used (``kata-learner-cpu EXERCISE CPU``): figures for the grader's
benchmarks, never for a grade (the learner's code can write there too).

Verdicts are never computed here: whatever this process sends is data the trusted side checks.
It parses its own few arguments (:func:`main`): the sandbox must stay import-light and holds no
``grading``, where the command line (:mod:`grading.views.cli`) lives.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import importlib
import math
import os
import pickle
import resource
import select
import signal
import sys
import termios
import time
import traceback
import types
from pathlib import Path

from kata.models import SMOLLM2_FIRST_BLOCKS
from kata.serve import PR_SET_DUMPABLE, Pairs, parse_pairs, prctl
from kata.serve.channel import Peer
from kata.serve.codec import Codec, FrameError, _blob_of, write_frame

#: Models the trusted side's session fixtures use, by name.
SESSION_MODEL_NAMES = ("tiny-gpt2", "smollm2", SMOLLM2_FIRST_BLOCKS)
MAX_MESSAGE_CHARS = 4000


class MachineFault(Exception):
    """A session model did not load here: the machine's fault, never the learner's (raised only
    by the server's master, before it is ready, see :meth:`Models.preload`)."""


class CallbackError(Exception):
    """A hook of the trusted side's test raised; ``token`` names its exception there."""

    def __init__(self, token: int, text: str):
        super().__init__(text)
        self.token = token


# --------------------------------------------------------------------------- session models


class Models:
    """The session models, by name, and what each looked like before any learner code ran."""

    def __init__(self):
        self.loaded: dict[str, tuple] = {}  # name -> (model, tokenizer, clean hook snapshot)
        self._index: dict[int, tuple[str, str]] = {}  # id(module) -> (name, path)
        self._tokenizers: dict[int, str] = {}

    def load(self, name: str) -> None:
        if name in self.loaded:
            return
        try:
            from kata.session_models import load_warm

            self.adopt({name: load_warm(name)})
        except Exception as error:  # noqa: BLE001 - a broken cache or device
            raise MachineFault(f"loading the model {name} in the grader's sandbox failed: "
                               f"{type(error).__name__}: {error}"[:500]) from error

    def adopt(self, loaded: dict) -> None:
        """Models this process already holds, ``{name: (model, tokenizer, clean snapshot)}``
        (on the trusted side, its session models); a name already adopted stays as it is."""
        for name, (model, tokenizer, clean) in loaded.items():
            if name in self.loaded:
                continue
            self.loaded[name] = (model, tokenizer, clean)
            self._index.update({id(m): (name, path) for path, m in model.named_modules()})
            self._tokenizers[id(tokenizer)] = name

    def preload(self) -> None:
        """Load every session model, before any learner file runs: only then can a model that
        does not load be told as the machine's fault (the server stops before it is ready);
        later, any reply from an exercise's child may be the learner's code speaking."""
        for name in SESSION_MODEL_NAMES:
            self.load(name)

    def session(self, name: str) -> tuple:
        """``(model, tokenizer, clean hook snapshot)`` of the session model ``name``."""
        if name not in SESSION_MODEL_NAMES:
            raise FrameError(f"no session model {name[:40]!r}")
        self.load(name)
        return self.loaded[name]

    def module(self, name: str, path: str):
        try:
            return self.session(name)[0].get_submodule(path)
        except AttributeError:
            raise FrameError(f"the model {name} has no module {path[:80]!r}") from None

    def where(self, module) -> tuple[str, str] | None:
        return self._index.get(id(module))

    def tokenizer_name(self, tokenizer) -> str | None:
        return self._tokenizers.get(id(tokenizer))


# --------------------------------------------------------------------------- one exercise


class Exercise:
    """One exercise's child: the learner's module and what a test gave it."""

    def __init__(self, models: Models, module_name: str, impl_dir: Path,
                 call_seconds: float = 0.0):
        self.models = models
        self.call_seconds = call_seconds  # the deadline of one call (0: none)
        self.depth = 0  # calls in progress: a callback may lead to a call inside a call
        self.impl_dir = impl_dir  # the learner's exercises/ folder
        self.module_name = module_name
        self.module = None
        self.import_error: str | None = None
        self.peer: Peer | None = None
        from kata.process_state import process_state

        self.baseline = process_state()
        self._new_test()

    def _new_test(self) -> None:
        self.values: dict[int, object] = {}  # oid -> a module the trusted side sent by value
        self.value_paths: dict[int, tuple[int, str]] = {}  # id(submodule) -> (oid, path)
        self.callables: dict[int, object] = {}  # cid -> a function the learner returned
        self.touched: set = set()  # ("s", name) or ("v", oid): roots this test reached

    def import_module(self) -> None:
        from kata.errors import import_error_sentence

        try:
            self.module = importlib.import_module(f"exercises.{self.module_name}")
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the learner's file
            self.import_error = import_error_sentence(f"exercises/{self.module_name}.py", error)

    # -- requests --------------------------------------------------------------

    def serve(self, message: dict, blobs: list) -> tuple[dict, list]:
        """Answer one request; a request this side cannot answer gets a ``fault`` reply (the
        trusted side treats it as what it is: the exercise cannot be graded further)."""
        op = message.get("op")
        try:
            if op == "hello":
                return self.hello(), []
            if op == "call":
                return self.call(message, blobs)
            if op == "reset":
                return self.reset(), []
            raise FrameError(f"an unknown request {str(op)[:40]!r}")
        except FrameError as error:
            return {"fault": str(error)[:500]}, []
        except Exception as error:  # noqa: BLE001 - e.g. a value the trusted side sent that
            # does not load here: the exercise cannot be graded further, the process goes on
            return {"fault": f"{type(error).__name__}: {error}"[:500]}, []

    def hello(self) -> dict:
        if self.module is None:
            return {"import_error": self.import_error or "the file did not import"}
        names = sorted(n for n, v in vars(self.module).items()
                       if not n.startswith("_") and callable(v)
                       and getattr(v, "__module__", None) == self.module.__name__)[:500]
        return {"functions": names}

    def call(self, message: dict, blobs: list) -> tuple[dict, list]:
        decoder = SandboxCodec(self)
        function = self._function(message)
        args, kwargs = decoder.decode_call(message, blobs)
        handles = self._instrument(message.get("instrument", []))
        error = None
        self.depth += 1
        if self.depth == 1 and self.call_seconds > 0:
            # SIGALRM's default action ends the process, even in the middle of C code
            signal.setitimer(signal.ITIMER_REAL, self.call_seconds)
        try:
            result = function(*args, **kwargs)
        except BaseException as raised:  # noqa: BLE001 - the learner's; it crosses as data
            error, result = raised, None
        finally:
            if self.depth == 1:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self.depth -= 1
            for handle in handles:
                handle.remove()
        encoder = SandboxCodec(self, known={id(o): i for i, o in enumerate(decoder.table)})
        reply: dict = {}
        try:
            reply["mutated"] = encoder.mutations(decoder.table, decoder.versions)
            if error is None:
                reply["result"] = encoder.encode(result)
        except FrameError as too_big:
            encoder = SandboxCodec(self)
            error = ValueError(f"the value your function returned cannot be graded: {too_big}")
            reply = {}
        if error is not None:
            reply["error"] = self.describe(error)
        reply["hooks"] = self.leaked_hooks()
        return reply, encoder.blobs

    def callback(self, cb: int, args, kwargs):
        """Run the test's hook ``cb`` on the trusted side; what it returned, or its error."""
        encoder = SandboxCodec(self)
        header = {"op": "callback", "cb": cb, **encoder.encode_call(args, kwargs)}
        reply, blobs = self.peer.request(header, encoder.blobs)
        decoder = SandboxCodec(self, table=encoder.table)
        decoder.apply_mutations(reply.get("mutated", []), blobs)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            token = error.get("token") if type(error.get("token")) is int else -1
            raise CallbackError(token, str(error.get("text", "a hook of the test raised"))[:500])
        return decoder.decode(reply.get("result"), blobs)

    def _function(self, message: dict):
        if "cid" in message:
            function = self.callables.get(message["cid"]) if type(message["cid"]) is int else None
            if function is None:
                raise FrameError("a call to a function this test never got")
            return function
        name = message.get("fn")
        if self.module is None or not isinstance(name, str):
            raise FrameError("a call to no function")
        function = getattr(self.module, name, None)
        if function is None or name.startswith("_"):
            return functools.partial(_no_such_function, self.module.__name__, name)
        return function

    def _instrument(self, specs) -> list:
        """Register the test's own hooks (callbacks to the trusted side) for one call."""
        handles = []
        if not isinstance(specs, list):
            raise FrameError("instrumentation that is not a list")
        for spec in specs[:1000]:
            if not isinstance(spec, dict) or type(spec.get("cb")) is not int:
                raise FrameError("a hook of the test of no known form")
            module = self._root_module(spec.get("root"), spec.get("path"))
            hook, kw = CallbackHook(self, spec["cb"]), spec.get("kw") is True
            if spec.get("kind") == "pre":
                handles.append(module.register_forward_pre_hook(hook, with_kwargs=kw))
            else:
                handles.append(module.register_forward_hook(
                    hook, with_kwargs=kw, always_call=spec.get("always") is True))
        return handles

    def _root_module(self, root, path):
        if not isinstance(root, list) or len(root) != 2 or not isinstance(path, str):
            raise FrameError("a module reference of no known form")
        kind, key = root
        if kind == "s" and isinstance(key, str):
            self.touched.add(("s", key))
            return self.models.module(key, path)
        if kind == "v" and type(key) is int and key in self.values:
            try:
                return self.values[key].get_submodule(path)
            except AttributeError:
                raise FrameError("no such submodule") from None
        raise FrameError("a module reference to nothing sent")

    def leaked_hooks(self) -> list:
        """``[[root, [[path, pre-hooks, hooks], ...], [parameters with a .grad]], ...]``: what
        the learner's code left on the models it was given (hooks, gradients)."""
        from kata.hooks import added_hooks, hook_snapshot

        report = []
        for kind, key in sorted(self.touched, key=repr):
            if kind == "s":
                model, _, clean = self.models.loaded[key]
            else:
                model, clean = self.values[key], {}
            left = []
            for path in hook_snapshot(model):
                added = added_hooks(model.get_submodule(path), clean.get(path, ((), ())))
                extra_pre = sum(1 for entry in added if entry[0] == "pre")
                if added:
                    left.append([path, extra_pre, len(added) - extra_pre])
            grads = [name for name, parameter in model.named_parameters()
                     if parameter.grad is not None][:5000]
            report.append([[kind, key], left[:1000], grads])
        return report

    def reset(self) -> dict:
        """After a test: the models as they were, the process-wide state as it was."""
        from kata.hooks import restore_hooks
        from kata.process_state import restore_process_state

        for model, _, clean in self.models.loaded.values():
            restore_hooks(model, clean)
            for parameter in model.parameters():
                parameter.grad = None
        removed = restore_process_state(self.baseline)
        self._new_test()
        with contextlib.suppress(Exception):  # no figures to close
            import matplotlib.pyplot as plt

            plt.close("all")
        return {"removed": removed[:50]}

    # -- exceptions ------------------------------------------------------------

    def describe(self, error: BaseException) -> dict:
        from kata.errors import exception_chain, stub_reached

        chain = []
        for exc in list(exception_chain(error))[:8]:
            try:
                text = str(exc)
            except Exception:  # noqa: BLE001
                text = "<an error message that cannot be shown>"
            plain = all(isinstance(a, (str, int, bool)) or a is None
                        or (isinstance(a, float) and math.isfinite(a)) for a in exc.args)
            plain_args = list(exc.args) if plain and len(exc.args) <= 4 else [text]
            chain.append({"types": [c.__name__ for c in type(exc).__mro__][:16],
                          "module": type(exc).__module__,
                          "args": [a[:MAX_MESSAGE_CHARS] if isinstance(a, str) else a
                                   for a in plain_args],
                          "text": text[:MAX_MESSAGE_CHARS],
                          "token": exc.token if isinstance(exc, CallbackError) else None})
        return {"chain": chain, "stub": stub_reached(error, self.impl_dir),
                "where": self.where(error), "traceback": self.learner_traceback(error)}

    def _own_frames(self, error) -> list[tuple[str, str]]:
        """``[("exercises/FILE.py, line N, in FUNCTION", source line)]``: the frames of
        ``error``'s traceback in the learner's files."""
        prefix = str(self.impl_dir.resolve()) + os.sep
        return [(f"{self.impl_dir.name}/{Path(f.filename).name}, line {f.lineno}, in {f.name}",
                 (f.line or "").strip()) for f in traceback.extract_tb(error.__traceback__)
                if os.path.abspath(f.filename).startswith(prefix)]

    def where(self, error: BaseException) -> str:
        from kata.errors import exception_chain

        for exc in exception_chain(error):
            frames = self._own_frames(exc)
            if frames:
                return frames[-1][0]
        return ""

    def learner_traceback(self, error: BaseException) -> str:
        lines = [f"  {place}: {line}" for place, line in self._own_frames(error)]
        return "\n".join(lines[-12:])[:3000]


def _no_such_function(module: str, name: str, *args, **kwargs):
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


class CallbackHook:
    """Stands in, on the sandbox's model, for a hook the test registered on the trusted side."""

    def __init__(self, exercise: Exercise, cb: int):
        self.exercise, self.cb = exercise, cb

    def __call__(self, *args, **kwargs):
        return self.exercise.callback(self.cb, args, kwargs)


class SandboxCodec(Codec):
    """Values as the sandbox writes and reads them."""

    def __init__(self, exercise: Exercise, **kwargs):
        super().__init__(**kwargs)
        self.exercise = exercise

    def encode_object(self, value, depth: int):
        import torch

        exercise = self.exercise
        if isinstance(value, torch.nn.Module):
            where = exercise.models.where(value)
            if where is not None:
                return {"$obj": "module", "root": ["s", where[0]], "path": where[1]}
            if id(value) in exercise.value_paths:
                oid, path = exercise.value_paths[id(value)]
                return {"$obj": "module", "root": ["v", oid], "path": path}
            return self.opaque(value)
        name = exercise.models.tokenizer_name(value)
        if name is not None:
            return {"$obj": "tokenizer", "root": name}
        figure = _figure_of(value)
        if figure is not None:
            from kata.serve.figures import describe

            data = self.encode(describe(figure[0]), depth + 1)
            return {"$obj": "figure", "data": data, "axes": figure[1]}
        if isinstance(value, (types.FunctionType, types.MethodType, functools.partial)) or (
                callable(value) and not isinstance(value, type)
                and type(value).__module__.startswith("exercises")):
            cid = len(exercise.callables) + 1
            exercise.callables[cid] = value
            return {"$obj": "callable", "cid": cid,
                    "name": str(getattr(value, "__qualname__", type(value).__name__))[:100]}
        return None

    def decode_object(self, kind: str, node: dict, blobs: list, depth: int):
        exercise = self.exercise
        if kind == "module":
            module = exercise._root_module(node.get("root"), node.get("path"))
            self.table.append(module)
            return module
        if kind == "value_module":
            oid = node.get("oid")
            if type(oid) is not int:
                raise FrameError("a module sent by value with no id")
            if node.get("blob") is not None:
                raw = _blob_of(node["blob"], blobs)
                from kata.compat import after_unpickling

                module = after_unpickling(pickle.loads(raw))  # made by the trusted side only
                exercise.values[oid] = module
                exercise.value_paths.update(
                    {id(m): (oid, path) for path, m in module.named_modules()})
            if oid not in exercise.values:
                raise FrameError("a module by value that was never sent")
            exercise.touched.add(("v", oid))
            module = exercise.values[oid]
            self.table.append(module)
            return module
        if kind == "tokenizer":
            return exercise.models.session(str(node.get("root")))[1]
        if kind == "value_tokenizer":
            return pickle.loads(_blob_of(node.get("blob"), blobs))  # made by the trusted side
        if kind == "callback":
            if type(node.get("cb")) is not int:
                raise FrameError("a callback with no id")
            return CallbackHook(exercise, node["cb"])
        if kind == "callable_ref":
            function = exercise.callables.get(node.get("cid"))
            if function is None:
                raise FrameError("a reference to a function this test never got")
            return function
        return super().decode_object(kind, node, blobs, depth)


def _figure_of(value):
    """``(figure, axes index or None)`` for a matplotlib Figure or Axes, else None."""
    try:
        from matplotlib.axes import Axes
        from matplotlib.figure import Figure
    except ImportError:
        return None
    if isinstance(value, Figure):
        return value, None
    if isinstance(value, Axes) and value.figure is not None and value in value.figure.axes:
        return value.figure, value.figure.axes.index(value)
    return None


# --------------------------------------------------------------------------- the process


def _serve_exercise(models: Models, root: Path, module: str, read_fd: int, write_fd: int,
                    cpu_seconds: int, call_seconds: float) -> int:
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("500")  # the out-of-memory killer takes a child before the master
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # a call past its deadline ends the process
    from kata.session_models import threads_after_forking

    threads_after_forking()
    if cpu_seconds > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    exercise = Exercise(models, module, root / "exercises", call_seconds=call_seconds)
    exercise.import_module()
    exercise.peer = Peer(read_fd, write_fd, exercise.serve)
    exercise.peer.serve_forever()
    return 0


def say_phase(name: str) -> None:
    """When a phase of the start ended (wall clock) and the CPU seconds used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    sys.stderr.write(f"kata-learner-phase {name} {time.time():.3f} "
                     f"{usage.ru_utime + usage.ru_stime:.2f}\n")


def load_session() -> Models:
    """Import torch and matplotlib and load every session model, before any learner file runs
    (:meth:`Models.preload`: a model that does not load raises :class:`MachineFault`)."""
    from kata.session_models import threads_before_forking

    threads_before_forking()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    say_phase("imports")
    models = Models()
    models.preload()
    say_phase("models")
    return models


def parse_channel(spec: str) -> tuple[str, str, Pairs]:
    """``EXERCISE=MODULE:READ,WRITE;READ,WRITE`` as ``(exercise, module, channels)``: the
    exercise's channels, one per generation of its learner process."""
    exercise_id, rest = spec.split("=", 1)
    module, pairs = rest.split(":", 1)
    return exercise_id, module, parse_pairs(pairs)


def _waiting_bytes(fd: int) -> int:
    """How many bytes wait in the pipe ``fd`` (0 at its end, once the writer closed it)."""
    count = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return int.from_bytes(count, sys.byteorder)


class Lineage:
    """One exercise's learner processes, one after another, each on a channel of its own."""

    def __init__(self, exercise_id: str, module: str, pairs: Pairs):
        self.exercise_id, self.module = exercise_id, module
        self.spare = list(pairs)  # channels no process has served yet
        self.pid: int | None = None  # the running process
        self.ended: dict = {}  # how the last process ended, for the next channel's first words

    def fds(self) -> set[int]:
        return {fd for pair in self.spare for fd in pair}

    def close_spares(self) -> None:
        for fd in self.fds():
            os.close(fd)
        self.spare = []

    def asked(self) -> bool | None:
        """Whether the trusted side wrote on the next channel (True), closed it (None: it is done
        with this exercise), or neither yet (False)."""
        if not self.spare:
            return None
        read_fd = self.spare[0][0]
        if not select.select([read_fd], [], [], 0)[0]:
            return False
        return True if _waiting_bytes(read_fd) else None


def _fork_generation(lineage: Lineage, lineages: list[Lineage], models: Models, root: Path,
                     cpu_seconds: int, call_seconds: float) -> None:
    """Start the lineage's next process on its next channel (first saying there how the one
    before ended, when there was one)."""
    read_fd, write_fd = lineage.spare.pop(0)
    if lineage.ended:
        write_frame(write_fd, {"op": "ended", "id": 0, **lineage.ended}, [])
        lineage.ended = {}
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd in set().union(*(each.fds() for each in lineages)):  # the other channels
                os.close(fd)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            code = _serve_exercise(models, root, lineage.module, read_fd, write_fd, cpu_seconds,
                                   call_seconds)
        except BaseException:  # noqa: BLE001 - whatever the child did, it ends here
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(read_fd)
    os.close(write_fd)
    lineage.pid = pid


def _reap(lineages: dict[int, Lineage], pid: int, status: int, usage) -> None:
    """Note how the process ``pid`` ended, on standard error and for its lineage's next one."""
    lineage = lineages.pop(pid, None)
    if lineage is None:
        return
    lineage.pid = None
    cpu = usage.ru_utime + usage.ru_stime
    sys.stderr.write(f"kata-learner-cpu {lineage.exercise_id} {cpu:.2f}\n")
    ended = {"max_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    if os.WIFSIGNALED(status):
        ended["signal"] = os.WTERMSIG(status)
        said = f"signal {ended['signal']}"
    else:
        ended["code"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
        said = f"code {ended['code']}"
    lineage.ended = {**lineage.ended, **ended}
    sys.stderr.write(f"kata-learner-ended {lineage.exercise_id} {said}\n")
    sys.stderr.flush()


def _end(lineage: Lineage, running: dict[int, Lineage], wait: float = 1.0) -> None:
    """The trusted side asks for the lineage's next process while this one has not been reaped:
    it is ending (its channel closed as it died), or the trusted side gave up waiting for its
    answer. Give it ``wait`` seconds to end by itself, then stop it."""
    ends = time.monotonic() + wait
    while time.monotonic() < ends:
        pid, status, usage = os.wait4(lineage.pid, os.WNOHANG)
        if pid:
            _reap(running, pid, status, usage)
            return
        time.sleep(0.01)
    os.kill(lineage.pid, signal.SIGKILL)
    lineage.ended = {"killed": True}
    _reap(running, *os.wait4(lineage.pid, 0))


def serve(models: Models, root: Path, channels: list[tuple[str, str, Pairs]],
          cpu_seconds: int, call_seconds: float = 0.0) -> int:
    """Say the server is ready, start each exercise's first learner process (each imports its
    file and answers on its channel), start the next one on the next channel when the trusted
    side asks there, and say how each ended. ``channels``: :func:`parse_channel`'s."""
    sys.path.insert(0, str(root))
    prctl(PR_SET_DUMPABLE, 0)
    sys.stderr.write("kata-learner-ready\n")  # grading.box.runner.LEARNER_READY
    sys.stderr.flush()
    lineages = [Lineage(*channel) for channel in channels]
    running: dict[int, Lineage] = {}

    def start(lineage: Lineage) -> None:
        _fork_generation(lineage, lineages, models, root, cpu_seconds, call_seconds)
        running[lineage.pid] = lineage

    for lineage in lineages:
        start(lineage)
    while running or any(lineage.spare for lineage in lineages):
        for lineage in lineages:
            asked = lineage.asked()
            if asked is None and lineage.spare:  # the trusted side is done with it
                lineage.close_spares()
            elif asked:
                if lineage.pid is not None:
                    _end(lineage, running)
                start(lineage)
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            pid = 0
        if pid:
            _reap(running, pid, status, usage)
            continue
        waiting = [lineage.spare[0][0] for lineage in lineages if lineage.spare]
        select.select(waiting, [], [], 0.05)
    return 0


def main(argv: list[str] | None = None) -> int:
    say_phase("started")  # the interpreter, and this module's imports
    parser = argparse.ArgumentParser(prog="kata.serve.server")
    parser.add_argument("--root", required=True, help="the folder holding exercises/")
    parser.add_argument("--channel", action="append", default=[],
                        metavar="EXERCISE=MODULE:READ_FD,WRITE_FD;...")
    parser.add_argument("--cpu", type=int, default=0, help="CPU seconds per exercise's child")
    parser.add_argument("--call-seconds", type=float, default=0.0,
                        help="the deadline of one call of a learner's function (0: none)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        models = load_session()
    except MachineFault as error:  # before the ready line: the grader blames the machine
        sys.stderr.write(f"kata-learner-failed: {error}\n")
        return 1
    return serve(models, Path(args.root), [parse_channel(c) for c in args.channel], args.cpu,
                 args.call_seconds)


if __name__ == "__main__":
    sys.exit(main())
