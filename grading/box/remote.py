"""The trusted side of grading: an exercise's tests call the learner's functions in a sandbox.

Under the grader, the ``ex`` fixture of a test is a :class:`RemoteExercise`:
``ex.get_hidden_states(model, tokens)`` reads as it does in one process, but the learner's
function runs in the submission's sandbox (:mod:`kata.serve.server`) and only plain data crosses
back (:mod:`kata.serve.codec`). The test, its assertions, its reference values and the recorder
run here, where the learner's code cannot reach: nothing to patch, no report to forge, no answer
to read.

What crosses, and how it keeps the tests' meaning:

* session models and their tokenizers (and blocks of them) go by name and path: the sandbox
  has loaded the same models; other modules (the toys, a changed copy of a model) go by value;
* a hook the test registered on a model (a recorder, a counter, a hook that fails on purpose)
  runs here, called back from the sandbox's forward pass;
* a hook the learner leaves on a model in the sandbox shows here as a stand-in hook on the
  same module, so ``hook_snapshot(model)`` sees the leak as it would in one process (and a
  ``.grad`` left on a parameter as a stand-in gradient); after each test both sides are put back;
* a tensor the learner changed in place is changed here the same way; one returned as is
  comes back as the very object the test passed;
* a hook the learner returns is a :class:`RemoteFunction` the test can register here;
* a figure is drawn again here from what the sandbox's figure holds
  (:mod:`kata.serve.figures`);
* an exception is rebuilt as its builtin type (``IndexError``, ``ValueError``...) with its
  message, the stub it reached and the line of the learner's code; never as a diagnosis.

Each call of a learner's function has a deadline. A call that ends the learner's process (the
deadline, a segfault, ``os._exit``, the memory limit) fails with
:class:`~grading.core.faults.LearnerFault`, in the grader's words for that kind of end, and the
exercise's next *generation* takes over (:mod:`kata.serve.channel`), so that its other functions
are still graded; a function that ended a process fails at once when called again. With no
generation left, the test child exits with :data:`LEARNER_GONE` (a crash of the running test).

What does not cross: the learner's grad mode (a test's hook called back during the learner's
forward pass runs under the trusted side's; read ``requires_grad`` from the tensors it gets), and
a parameter's ``.grad`` crosses only as "has one" (a stand-in of zeros on the trusted model).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import pickle
import sys

import torch
from torch import nn

from grading.core.faults import (CALL_SECONDS_VARIABLE, MEMORY_LIMIT_VARIABLE, Ended, LearnerFault,
                                 kind_of)
from kata.hooks import added_hooks, without_hooks
from kata.serve import Pairs, close_all, parse_pairs
from kata.serve.channel import Peer
from kata.serve.codec import (ChannelClosed, Codec, FrameError, named_class, read_frame,
                              write_frame)

#: The test process's exit status when the learner's process went away in the middle of a test
#: and no generation was left (:mod:`grading.box.worker` records a crash of the running test).
LEARNER_GONE = 97
#: How much longer than a call's deadline this side waits before it gives up on the learner's
#: process (which its sandbox should have ended by then).
CALL_GRACE_SECONDS = 15.0


class _Ended(Exception):
    """The learner's process serving this channel ended (or was given up on): ``ended`` says
    how, from the next generation's first words."""

    def __init__(self, ended: Ended):
        super().__init__("the learner's process ended")
        self.ended = ended


def _environment_number(name: str) -> float:
    try:
        return max(0.0, float(os.environ.get(name, "0")))
    except ValueError:
        return 0.0


#: Exceptions rebuilt as themselves (anything else becomes a class of the same name).
_REBUILT = {name: getattr(builtins, name) for name in (
    "ValueError", "IndexError", "TypeError", "KeyError", "AttributeError", "RuntimeError",
    "NotImplementedError", "ZeroDivisionError", "OverflowError", "MemoryError",
    "RecursionError", "LookupError", "ArithmeticError", "AssertionError", "NameError",
    "UnboundLocalError", "ImportError", "ModuleNotFoundError", "OSError", "FileNotFoundError",
    "PermissionError", "UnicodeError", "FloatingPointError", "SystemExit", "Exception")}
#: Never ``ModelNotAvailable`` or another :class:`kata.models.EnvironmentFault`: whatever the
#: sandbox says, the learner's code may have said it, and an environment fault there would turn
#: the learner's failure into "the machine, not the code, failed" (the exercise's points void).
_KATA_ERRORS = ("ToyForwardError",)


#: Whether the running test is a secret check (set by ``course/shared/secret.py``'s ``secret``
#: fixture): then the learner's code may not change, in place, any tensor the test gave it.
#: The test computes its expected values from those tensors, so a function (or a hook) that
#: overwrote them with a constant whose answer is known would pass without computing anything.
_INPUTS_GUARDED = False

_CHANGED_INPUTS = (
    "your code changed {count} of the tensors this check gave it in place (fill_, zero_, "
    "copy_, mul_, +=, ...): a secret check does not accept that, since the check's expected "
    "values are computed from those tensors; compute new tensors instead of changing the inputs")


def guard_inputs(on: bool) -> None:
    """Refuse (``on``) or accept again the learner's in-place changes to a test's tensors."""
    global _INPUTS_GUARDED
    _INPUTS_GUARDED = bool(on)


class RemoteError(Exception):
    """An exception of the learner's code of a type the trusted side does not rebuild."""


def _error_class(entry: dict) -> type:
    types = [t for t in entry.get("types", []) if isinstance(t, str)]
    module = entry.get("module") if isinstance(entry.get("module"), str) else ""
    if types and types[0] in _KATA_ERRORS and module.startswith("kata."):
        from kata import toys

        return getattr(toys, types[0])
    base = next((_REBUILT[name] for name in types if name in _REBUILT), RemoteError)
    first = types[0] if types and types[0].isidentifier() else "RemoteError"
    return base if first == base.__name__ else named_class(first, base, "learner")


def rebuild_exception(info: dict, raised_here: dict) -> BaseException:
    """The learner's exception, rebuilt from the sandbox's description of it."""
    chain = [e for e in info.get("chain", []) if isinstance(e, dict)][:8] or [{}]
    rebuilt = None
    for entry in reversed(chain):
        token = entry.get("token")
        if type(token) is int and token in raised_here:
            error = raised_here[token]  # the test's own hook raised it: the very object
        else:
            cls = _error_class(entry)
            args = [a for a in entry.get("args", []) if isinstance(a, (str, int, float, bool))]
            try:
                error = cls(*args) if args else cls(str(entry.get("text", ""))[:4000])
            except Exception:  # noqa: BLE001 - a builtin that wants other arguments
                error = RemoteError(str(entry.get("text", ""))[:4000])
        if rebuilt is not None and error.__cause__ is None:
            error.__cause__ = rebuilt
        rebuilt = error
    stub = info.get("stub")
    rebuilt.kata_stub = stub if isinstance(stub, str) and stub.isidentifier() else None
    where = info.get("where")
    rebuilt.kata_where = where[:300] if isinstance(where, str) else ""
    trace = info.get("traceback")
    rebuilt.kata_traceback = trace[:3000] if isinstance(trace, str) else ""
    if rebuilt.kata_traceback and not isinstance(rebuilt, SystemExit):
        rebuilt.add_note("in your code (run in the grader's sandbox):\n" + rebuilt.kata_traceback)
    return rebuilt


# --------------------------------------------------------------------------- the models


def _session_models() -> dict:
    from kata.session_models import LOADED

    return LOADED


def _placeholder(module, *args):
    """A stand-in hook (pre or post) for one the learner's code left on in the sandbox."""


def _pickled_without_hooks(module: nn.Module) -> bytes:
    """``module`` pickled as it would load fresh: without hooks (the test's own cross as
    callbacks) and without transformers' note that its own hooks are installed."""
    with without_hooks(module):
        return pickle.dumps(module)


def _fingerprint(module: nn.Module) -> tuple:
    return tuple((id(t), t._version) for t in [*module.parameters(), *module.buffers()]) + (
        sum(1 for _ in module.modules()),)


# --------------------------------------------------------------------------- the session


class RemoteSession:
    """The channels to one exercise's learner processes (the one serving now, and the spare
    ones for the generations that may follow it), and what one test has sent over them."""

    def __init__(self, pairs: Pairs, exit_when_gone: bool = True, pid: int | None = None,
                 respawn=None):
        read_fd, write_fd = pairs[0]
        self.peer = Peer(read_fd, write_fd, self.serve)
        self.spares = list(pairs[1:])  # the next generations' channels
        self.respawn = respawn  # fork mode: forks the next one, ``(read, write, pid, Ended)``
        from kata.serve.server import Models

        self.index = Models()  # where each module of the session models sits
        self.broken: str | None = None
        self.exit_when_gone = exit_when_gone  # a test child exits; a maintainer's run raises
        self.pid = pid  # the learner's process, when this process forked it
        self.call_seconds = _environment_number(CALL_SECONDS_VARIABLE)
        self.memory_limit_mb = int(_environment_number(MEMORY_LIMIT_VARIABLE))
        self.faulted: dict[str, str] = {}  # function -> how a call of it ended its process
        #: Whether the learner's code ever changed, in place, a tensor a test gave it: from then
        #: on no value this process computes is shared with other submissions (inputs_changed).
        self.changed_inputs = False
        self._new_test()

    def _new_test(self) -> None:
        self.values: dict[int, nn.Module] = {}  # oid -> a module sent by value
        self.sent: dict[int, tuple] = {}  # oid -> its fingerprint when sent
        self.callbacks: dict[int, object] = {}  # cb -> the test's own function
        self.raised: dict[int, BaseException] = {}  # token -> what a callback raised
        self.placeholders: dict[tuple, list] = {}  # (root, path, kind) -> handles
        self.grads: set[tuple] = set()  # (root, parameter name): a stand-in .grad set here

    # -- requests --------------------------------------------------------------

    def _request(self, header: dict, blobs: list, deadline: float = 0.0) -> tuple[dict, list]:
        """Send a request and wait for its reply; raises :class:`_Ended` when the learner's
        process ended (or ran ``deadline`` seconds past) and the next generation took over."""
        if self.broken:
            raise RemoteError(self.broken)
        try:
            reply, data = self.peer.request(header, blobs, deadline)
        except (ChannelClosed, BrokenPipeError, TimeoutError):  # the learner's process is gone
            raise _Ended(self.next_generation()) from None
        except (FrameError, OSError) as error:
            self.broken = (f"the grader could not read what your code sent back ({error}); "
                           "the rest of this exercise cannot be graded")
            raise RemoteError(self.broken) from None
        # No reply can say "the machine failed": whatever an exercise's process says may be the
        # learner's code speaking. A model that does not load stops the sandbox before it is
        # ready (kata.serve.server.Models.preload), which the runner reports as the machine's.
        if "fault" in reply:
            raise RemoteError(f"your code's process could not answer the grader: "
                              f"{str(reply['fault'])[:300]}")
        return reply, data

    def next_generation(self) -> Ended:
        """Move to the exercise's next learner process; how the one before ended. Without one
        left, the test cannot go on (:meth:`learner_gone`)."""
        self.peer.close()
        try:
            if self.respawn is not None:
                read_fd, write_fd, self.pid, ended = self.respawn(self.pid)
                first = {}
            elif self.spares:
                read_fd, write_fd = self.spares.pop(0)
                write_frame(write_fd, {"op": "hello", "id": 1}, [])  # the server starts it now
                said, _ = read_frame(read_fd)
                if said.get("op") != "ended":
                    raise FrameError("the next learner process did not say how the last ended")
                ended = Ended.from_message(said)
                first, _ = read_frame(read_fd)
            else:
                self.learner_gone()
        except (FrameError, OSError, ValueError):
            self.learner_gone()
        self.peer = Peer(read_fd, write_fd, self.serve)
        self.peer.counter = 1 if first else 0
        if first and isinstance(first.get("functions"), list):
            self.module_info = first
        self.sent.clear()  # modules sent by value went with the old process
        return ended

    def learner_gone(self):
        if not self.exit_when_gone:
            self.broken = "the process running your code ended in the middle of a test"
            raise RemoteError(self.broken)
        sys.stderr.write("kata: the learner's process ended in the middle of a test\n")
        sys.stderr.flush()
        os._exit(LEARNER_GONE)

    def hello(self) -> dict:
        try:
            reply, _ = self._request({"op": "hello"}, [])
        except _Ended:
            reply = self.hello()
        return reply

    def call(self, target: dict, args: tuple, kwargs: dict, name: str):
        """Run the learner's function ``name`` (``target``: by name or as a callable it
        returned) on these arguments; its result, as the trusted side's values."""
        if name in self.faulted:  # it ended a process before: not run again, same verdict
            raise LearnerFault(self.faulted[name], name, again=True)
        encoder = TrustedCodec(self)
        header = {"op": "call", **target, **encoder.encode_call(args, kwargs)}
        header["instrument"] = self._instrumentation(encoder.roots)
        deadline = self.call_seconds + CALL_GRACE_SECONDS if self.call_seconds else 0.0
        try:
            reply, blobs = self._request(header, encoder.blobs, deadline)
        except _Ended as gone:
            kind, detail = kind_of(gone.ended, self.memory_limit_mb)
            self.faulted[name] = kind
            raise LearnerFault(kind, name, detail) from None
        decoder = TrustedCodec(self, table=encoder.table)
        try:
            self._mirror_hooks(reply.get("hooks", []))
            mutated = reply.get("mutated", [])
            self.changed_inputs = self.changed_inputs or bool(mutated)
            if _INPUTS_GUARDED and mutated:
                from course.shared.diagnosis import diagnose

                diagnose("inputs-changed-in-place", _CHANGED_INPUTS.format(
                    count=len(mutated) if isinstance(mutated, list) else "some"))
            decoder.apply_mutations(mutated, blobs)
            if "error" in reply:
                raise rebuild_exception(reply["error"] if isinstance(reply["error"], dict)
                                        else {}, self.raised)
            return decoder.decode(reply.get("result"), blobs)
        except FrameError as error:
            raise RemoteError(f"the grader could not read what your function returned: "
                              f"{error}") from None

    def reset(self) -> list[str]:
        """After a test: the sandbox's models and process state put back; the global hooks the
        learner's code left on (removed there)."""
        for handles in self.placeholders.values():
            for handle in handles:
                handle.remove()
        for key, name in self.grads:
            root = self._root_of(list(key))
            if root is not None:
                root.get_parameter(name).grad = None
        self._new_test()
        if self.broken:
            return []
        try:
            reply, _ = self._request({"op": "reset"}, [])
        except _Ended:  # the learner's process ended between tests: the next one starts clean
            return []
        removed = reply.get("removed", [])
        return [str(r)[:80] for r in removed if isinstance(r, str)][:20] \
            if isinstance(removed, list) else []

    def bye(self) -> None:
        with contextlib.suppress(FrameError, OSError):
            if not self.broken:
                self.peer.request({"op": "bye"}, [])
        self.peer.close()
        for pair in self.spares:  # the server then knows no next generation is wanted
            close_all(pair)
        self.spares = []
        if self.pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)

    # -- the test's hooks, run for the sandbox -----------------------------------

    def _instrumentation(self, roots: dict) -> list[dict]:
        """The hooks the test put on the models of a call (not the stand-ins for the
        learner's), for the sandbox to register as callbacks."""
        specs = []
        for key, (root, clean) in roots.items():
            for path, module in root.named_modules():
                for kind, hook, with_kwargs, always in added_hooks(module,
                                                                   clean.get(path, ((), ()))):
                    if hook is _placeholder:
                        continue
                    cb = len(self.callbacks) + 1
                    self.callbacks[cb] = hook
                    specs.append({"root": list(key), "path": path, "kind": kind,
                                  "kw": with_kwargs, "always": always, "cb": cb})
        return specs

    def serve(self, message: dict, blobs: list) -> tuple[dict, list]:
        """The sandbox asks: run the test's hook ``cb`` on these arguments."""
        if message.get("op") != "callback" or type(message.get("cb")) is not int \
                or message["cb"] not in self.callbacks:
            raise FrameError("a request the trusted side does not serve")
        decoder = TrustedCodec(self)
        args, kwargs = decoder.decode_call(message, blobs)
        encoder = TrustedCodec(self, known={id(o): i for i, o in enumerate(decoder.table)})
        try:
            result = self.callbacks[message["cb"]](*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the test's hook; re-raised as itself later
            token = len(self.raised) + 1
            self.raised[token] = error
            reply = {"error": {"token": token, "text": f"{type(error).__name__}: {error}"[:500]}}
        else:
            reply = {"result": encoder.encode(result)}
        reply["mutated"] = encoder.mutations(decoder.table, decoder.versions)
        return reply, encoder.blobs

    # -- the learner's hooks, mirrored here ------------------------------------

    def _mirror_hooks(self, report) -> None:
        """Stand-in hooks here for the hooks the learner's code left on in the sandbox."""
        if not isinstance(report, list):
            raise FrameError("a hook report of no known form")
        for entry in report[:100]:
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[1], list)
                    and isinstance(entry[2], list)):
                raise FrameError("a hook report of no known form")
            root = self._root_of(entry[0])
            if root is None:
                continue
            self._mirror_grads(tuple(entry[0]), root, entry[2])
            wanted = {}
            for item in entry[1][:1000]:
                if (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                        and type(item[1]) is int and type(item[2]) is int):
                    wanted[item[0]] = (min(item[1], 100), min(item[2], 100))
            key = tuple(entry[0])
            for root_key, path, kind in list(self.placeholders):
                if root_key == key and path not in wanted:
                    for handle in self.placeholders.pop((root_key, path, kind)):
                        handle.remove()
            for path, (pre, post) in wanted.items():
                try:
                    module = root.get_submodule(path)
                except AttributeError:
                    continue
                for kind, count, register in (("pre", pre, module.register_forward_pre_hook),
                                              ("post", post, module.register_forward_hook)):
                    handles = self.placeholders.setdefault((key, path, kind), [])
                    while len(handles) < count:
                        handles.append(register(_placeholder))
                    while len(handles) > count:
                        handles.pop().remove()

    def _mirror_grads(self, key: tuple, root: nn.Module, names: list) -> None:
        """A stand-in ``.grad`` (zeros) here on each parameter the learner's code left one on."""
        wanted = {n for n in names[:5000] if isinstance(n, str)}
        for name, parameter in root.named_parameters():
            if name in wanted and parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
                self.grads.add((key, name))
            elif name not in wanted and (key, name) in self.grads:
                parameter.grad = None
                self.grads.discard((key, name))

    def _root_of(self, key):
        if not isinstance(key, list) or len(key) != 2:
            return None
        kind, name = key
        if kind == "s" and isinstance(name, str) and name in _session_models():
            return _session_models()[name][0]
        if kind == "v" and type(name) is int:
            return self.values.get(name)
        return None


class TrustedCodec(Codec):
    """Values as the trusted side writes and reads them."""

    def __init__(self, session: RemoteSession, **kwargs):
        super().__init__(**kwargs)
        self.session = session
        self.roots: dict[tuple, tuple] = {}  # root key -> (module, clean hook snapshot)

    def encode_object(self, value, depth: int):
        session = self.session
        session.index.adopt(_session_models())
        if isinstance(value, nn.Module):
            self.table.append(value)
            where = session.index.where(value)
            if where is not None:
                model, _, clean = _session_models()[where[0]]
                self.roots[("s", where[0])] = (model, clean)
                return {"$obj": "module", "root": ["s", where[0]], "path": where[1]}
            for oid, root in session.values.items():
                for path, sub in root.named_modules():
                    if sub is value:
                        self._send_value(oid, root)
                        return {"$obj": "module", "root": ["v", oid], "path": path}
            oid = id(value)
            session.values[oid] = value
            return self._send_value(oid, value)
        if session.index.tokenizer_name(value) is not None:
            return {"$obj": "tokenizer", "root": session.index.tokenizer_name(value)}
        if isinstance(value, RemoteFunction) and "cid" in value.target:
            return {"$obj": "callable_ref", "cid": value.target["cid"]}
        if type(value).__name__.endswith(("Tokenizer", "TokenizerFast")):  # not a session's
            return {"$obj": "value_tokenizer", "blob": self._blob(pickle.dumps(value))}
        if callable(value) and not isinstance(value, type):
            cb = len(session.callbacks) + 1
            session.callbacks[cb] = value
            return {"$obj": "callback", "cb": cb}
        return None

    def _send_value(self, oid: int, module: nn.Module) -> dict:
        session = self.session
        fingerprint = _fingerprint(module)
        self.roots[("v", oid)] = (module, {})
        node = {"$obj": "value_module", "oid": oid, "blob": None}
        if session.sent.get(oid) != fingerprint:
            node["blob"] = self._blob(_pickled_without_hooks(module))
            session.sent[oid] = fingerprint
        return node

    def decode_object(self, kind: str, node: dict, blobs: list, depth: int):
        session = self.session
        if kind == "module":
            root = session._root_of(node.get("root"))
            path = node.get("path")
            if root is None or not isinstance(path, str):
                raise FrameError("a module reference to no module of this test")
            try:
                module = root.get_submodule(path)
            except AttributeError:
                raise FrameError("a module reference to no module of this test") from None
            self.table.append(module)
            return module
        if kind == "tokenizer":
            name = node.get("root")
            if name not in _session_models():
                raise FrameError("a tokenizer of no session model")
            return _session_models()[name][1]
        if kind == "callable":
            cid = node.get("cid")
            if type(cid) is not int:
                raise FrameError("a function with no id")
            name = str(node.get("name", "function"))[:100].rsplit(".", 1)[-1] or "function"
            return RemoteFunction(session, {"cid": cid}, name)
        if kind == "figure":
            from kata.serve.figures import rebuild

            data = self.decode(node.get("data"), blobs, depth + 1)
            if not isinstance(data, dict):
                raise FrameError("a figure of no known form")
            try:
                figure = rebuild(data)
            except Exception as error:  # noqa: BLE001 - data that draws nothing sensible
                raise FrameError(f"a figure that cannot be drawn again ({error})") from None
            index = node.get("axes")
            if type(index) is int:
                if not 0 <= index < len(figure.axes):
                    raise FrameError("an axes of no figure")
                return figure.axes[index]
            return figure
        return super().decode_object(kind, node, blobs, depth)


class RemoteFunction:
    """A learner's function, run in the sandbox: ``ex.<name>`` (``target`` ``{"fn": name}``,
    ``module`` its module), or one the learner's code returned, a hook (``{"cid": n}``)."""

    def __init__(self, session: RemoteSession, target: dict, name: str, module: str = ""):
        self.session, self.target = session, target
        self.__name__ = self.__qualname__ = name
        if module:
            self.__module__ = module
        self._shown = f"{module}.{name}" if module else name

    def __call__(self, *args, **kwargs):
        return self.session.call(self.target, args, kwargs, self.__name__)

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        return f"<your function {self._shown}, run in the grader's sandbox>"


class RemoteExercise:
    """The ``ex`` fixture under the grader: the learner's exercise module, at arm's length."""

    def __init__(self, session: RemoteSession, module_name: str, functions: list[str]):
        self._session = session
        self.__name__ = module_name
        self._functions = set(functions)

    def __getattr__(self, name: str):
        if name.startswith("__") or name not in self._functions:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        return RemoteFunction(self._session, {"fn": name}, name, self.__name__)

    def __repr__(self) -> str:
        return f"<the learner's module {self.__name__}, run in the grader's sandbox>"


#: The channels to learner processes this test process holds: exercise id -> (the module served,
#: its forked learner) in the maintainers' fork mode; "" -> (None, the grader's channels).
_SESSIONS: dict[str, tuple[object, RemoteSession]] = {}


def connect(spec: str) -> RemoteSession:
    """This test process's channels to the learner: ``"READ_FD,WRITE_FD;..."`` (the grader's
    worker made them, one per generation)."""
    if "" not in _SESSIONS:
        _SESSIONS[""] = (None, RemoteSession(parse_pairs(spec)))
    return _SESSIONS[""][1]


def _fork_one(module, impl_dir) -> tuple[int, int, int]:
    """Fork a child that serves ``module`` as a learner process does; ``(read, write, pid)``."""
    import signal
    from pathlib import Path

    from kata.serve import server

    to_learner, from_learner = os.pipe(), os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import faulthandler

            faulthandler.disable()  # a learner's crash is a verdict here, not a traceback to print
            os.close(to_learner[1])
            os.close(from_learner[0])
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            torch.set_num_threads(1)  # the parent's thread pool does not survive a fork
            models = server.Models()
            models.adopt(_session_models())
            exercise = server.Exercise(models, module.__name__.rsplit(".", 1)[-1], Path(impl_dir),
                                       call_seconds=_environment_number(CALL_SECONDS_VARIABLE))
            exercise.module = module
            exercise.peer = Peer(to_learner[0], from_learner[1], exercise.serve)
            exercise.peer.serve_forever()
            code = 0
        finally:
            os._exit(code)
    os.close(to_learner[0])
    os.close(from_learner[1])
    return from_learner[0], to_learner[1], pid


def fork_learner(module, impl_dir) -> RemoteSession:
    """Serve ``module`` (already imported) from a forked child, as the sandbox's server would:
    the maintainers' way to run any planted code through the grader's boundary in-process. A
    child a call ended is followed by a new one, as the server's generations are."""
    def respawn(old_pid: int):
        _, status, usage = os.wait4(old_pid, 0)
        ended = Ended(signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                      code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                      max_rss_mb=usage.ru_maxrss / 1024)
        return (*_fork_one(module, impl_dir), ended)

    read_fd, write_fd, pid = _fork_one(module, impl_dir)
    return RemoteSession([(read_fd, write_fd)], exit_when_gone=False, pid=pid, respawn=respawn)


def forked_learner(exercise_id: str, module, impl_dir) -> RemoteSession:
    """The forked learner serving ``module``: one per exercise met in this test session; a
    maintainers' session that plants one module after another ends the one before."""
    served = _SESSIONS.get(exercise_id)
    if served is not None and served[0] is module:
        return served[1]
    if served is not None:
        served[1].bye()
    session = fork_learner(module, impl_dir)
    _SESSIONS[exercise_id] = (module, session)
    return session


def inputs_changed() -> bool:
    """Whether the learner's code changed, in place, a tensor a test of this process gave it
    (the tests' tensors then hold what the learner wrote: :func:`course.shared.support.
    computed_once` shares no value computed after that)."""
    return any(session.changed_inputs for session in active())


def active() -> list[RemoteSession]:
    """The channels to learner processes this test process holds."""
    return [session for _, session in _SESSIONS.values()]


def end_session() -> None:
    """Say bye to the learner's process (at the end of a test session)."""
    for session in active():
        session.bye()
    _SESSIONS.clear()


def remote_exercise(exercise, spec: str, module=None, impl_dir=None) -> RemoteExercise:
    """The ``ex`` fixture's value under the grader; raises as importing the file would."""
    from course.shared.impl import ImplementationImportError

    if spec == "fork":
        session = forked_learner(exercise.id, module, impl_dir)
    else:
        session = connect(spec)
    if not hasattr(session, "module_info"):
        session.module_info = session.hello()
    info = session.module_info
    if isinstance(info.get("import_error"), str):
        raise ImplementationImportError(info["import_error"][:2000])
    if not hasattr(session, "exercise"):
        # one object per learner process, as in one process: a result kept for ``ex`` stays
        functions = [f for f in info.get("functions", []) if isinstance(f, str)
                     and f.isidentifier()][:500]
        session.exercise = RemoteExercise(session, f"exercises.{exercise.module}", functions)
    return session.exercise
