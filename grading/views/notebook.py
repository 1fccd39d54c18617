"""Helpers for the kata's notebooks (``notebooks/exN_*.ipynb``), a second front end to the
same exercises: the learner still writes the functions in ``exercises/``, the tests still judge.

:func:`exercise` gives the learner's module, re-imported when its file changes, its functions
guarded (:func:`attempt`) so that on untouched stubs every cell runs and says which function to
write; :func:`load_model` and :func:`expect` say "what you should see" for the model in use;
:func:`check` grades an exercise with the grader's own machinery. The notebooks are generated
from each exercise's ``notebook.py`` by ``python grader.py generate``.
"""

from __future__ import annotations

import atexit
import functools
import html
import importlib
import os
import shutil
import sys
import tempfile
import textwrap
import traceback
from dataclasses import dataclass
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from grading.views.commands import grader_command

ROOT = Path(__file__).resolve().parents[2]

if str(ROOT) not in sys.path:  # `exercises` and `solutions` are packages of the kata's folder
    sys.path.insert(0, str(ROOT))


# --------------------------------------------------------------------------- which code


def implementation() -> str:
    """``"exercises"`` (the learner's, default) or ``"solutions"`` (``KATA_IMPL=solutions``)."""
    from grading.core.declarations import IMPLEMENTATIONS

    impl = os.environ.get("KATA_IMPL", "exercises")
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"KATA_IMPL must be one of {IMPLEMENTATIONS}, got {impl!r}")
    return impl


def manifest_entry(n: int):
    """Exercise ``n`` (its folder ``course/exN_*``)."""
    from grading.core.declarations import load_exercises

    exercises = load_exercises()
    for entry in exercises:
        if entry.number == n:
            return entry
    raise LookupError(f"the manifest has no exercise {n} (it lists "
                      f"{', '.join(str(e.number) for e in exercises)})")


# --------------------------------------------------------------------------- stubs, gracefully


class Needs:
    """What a guarded call returns when it could not run: the function to write first.

    A placeholder that cells can carry on with: attributes, items and calls give the
    placeholder back, it iterates as empty and prints as "needs `f` first". Guarded calls that
    receive it skip their work and say so.
    """

    def __init__(self, function: str, source: str, reason: str | None = None):
        self.function, self.source = function, source
        self.reason = reason or f"write `{function}` in {source} first"

    @property
    def message(self) -> str:
        return f"needs `{self.function}` first ({self.reason})"

    def __repr__(self) -> str:
        return f"<needs `{self.function}` first>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __getattr__(self, name: str):
        if name.startswith("_"):  # IPython probes _repr_html_ and friends: no such thing here
            raise AttributeError(name)
        return self

    def _same(self, *args, **kwargs):
        return self

    # calls, items, arithmetic and comparisons with a placeholder give the placeholder
    __call__ = __getitem__ = _same
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __pow__ = _same
    __neg__ = __abs__ = __lt__ = __le__ = __gt__ = __ge__ = _same

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False


def _first_needs(values) -> Needs | None:
    for value in values:
        if isinstance(value, Needs):
            return value
        if isinstance(value, (list, tuple)):
            found = _first_needs(value)
        elif isinstance(value, Mapping):
            found = _first_needs(value.values())
        else:
            continue
        if found is not None:  # (a Needs is falsy)
            return found
    return None


def _stub_source(error: BaseException, impl_dir: Path) -> str:
    """The exercise file (relative to the kata) whose stub raised ``error``."""
    from kata.errors import exception_chain

    prefix = str(impl_dir.resolve()) + os.sep
    for exc in exception_chain(error):
        if isinstance(exc, NotImplementedError):
            files = [str(Path(frame.f_code.co_filename).resolve())
                     for frame, _ in traceback.walk_tb(exc.__traceback__)]
            mine = [file for file in files if file.startswith(prefix)]
            if mine:
                return Path(mine[-1]).relative_to(ROOT).as_posix()
    return f"{impl_dir.name}/"


def attempt(function, *args, **kwargs):
    """Call a learner ``function``; on an untouched stub, say which function to write.

    Returns the function's result; or, when it reached a ``raise NotImplementedError`` of the
    code under test, prints "write `name` in exercises/... first" and returns a :class:`Needs`.
    When an argument is a :class:`Needs`, the call is skipped and that placeholder returned; for
    a ``lambda``, so are the notebook's names it reads (``attempt(lambda: x[i].item())``), and
    the step is skipped quietly.
    Any other error is the learner's to see, and is raised as usual.
    """
    from course.shared.impl import stub_reached

    name = getattr(function, "__name__", type(function).__name__)
    used = [*args, *kwargs.values()]
    if name == "<lambda>":  # attempt(lambda: log_probs[target_id].item()): the names it reads
        name, code = "this step", function.__code__
        used += [function.__globals__.get(n) for n in code.co_names]
        used += [cell.cell_contents for cell in function.__closure__ or ()]
    waiting = _first_needs(used)
    if waiting is not None:
        if name != "this step":  # a lambda's step goes quietly: its cell already said what to write
            print(f"`{name}` skipped: it {waiting.message}")
        return waiting
    try:
        return function(*args, **kwargs)
    except NotImplementedError as error:
        impl_dir = ROOT / implementation()
        stub = stub_reached(error, impl_dir)
        if stub is None:
            raise
        needs = Needs(stub, _stub_source(error, impl_dir))
        print(needs.reason)
        return needs


class LearnerModule:
    """An exercise module whose functions are guarded and whose file is re-imported on change."""

    def __init__(self, entry, impl: str):
        self._entry, self._impl = entry, impl
        self._path = ROOT / entry.source(impl)
        self._module: ModuleType | None = None
        self._stamp = None
        self._problem: str | None = None

    @property
    def module(self) -> ModuleType | None:
        """The module itself, imported afresh if its file changed since the last import."""
        from course.shared.impl import ImplementationImportError, import_implementation

        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        if stamp != self._stamp or (self._module is None and self._problem is None):
            sys.modules.pop(self._entry.import_name(self._impl), None)
            importlib.invalidate_caches()
            try:
                self._module, self._problem = import_implementation(self._entry, self._impl), None
            except ImplementationImportError as error:
                self._module, self._problem = None, str(error)
                print(self._problem)
            self._stamp = stamp
        return self._module

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        module = self.module
        if module is None:
            source = self._entry.source(self._impl)
            needs = Needs(name, source, reason=f"{self._problem}: fix it first")

            def cannot_run(*args, **kwargs):
                print(needs.reason)
                return needs

            return cannot_run
        value = getattr(module, name)
        if callable(value) and getattr(value, "__module__", None) == module.__name__:
            return functools.wraps(value)(lambda *args, **kwargs: attempt(value, *args, **kwargs))
        return value

    def __dir__(self):
        return sorted(set(dir(self.module or object())) | set(self._entry.functions))

    def __repr__(self) -> str:
        return (f"<{self._entry.source(self._impl)}: exercise {self._entry.number}, "
                f"{', '.join(self._entry.functions)}>")


def exercise(n: int) -> LearnerModule:
    """The learner's module of exercise ``n`` (its solution when ``KATA_IMPL=solutions``)."""
    impl = implementation()
    learner = LearnerModule(manifest_entry(n), impl)
    learner.module  # import now: an import error is reported by the cell that asks for it
    return learner


# --------------------------------------------------------------------------- models and figures

_MODEL_NAME: str | None = None

#: What a model name is called in "what you should see".
_KINDS = {"gpt2": "gpt2", "openai-community/gpt2": "gpt2", "smollm2": "smollm2",
          "tiny-gpt2": "tiny"}
_LABELS = {"gpt2": "GPT-2, the post's model", "smollm2": "SmolLM2-135M",
           "tiny": "the tiny random GPT-2", "other": "this model"}


def load_model(name: str | None = None, device=None):
    """``kata.load_model`` (default: ``KATA_MODEL``, else GPT-2 if cached, else SmolLM2),
    remembered for :func:`expect`. Torch runs on ``KATA_TORCH_THREADS`` threads if set."""
    global _MODEL_NAME
    import torch

    import kata

    if os.environ.get("KATA_TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["KATA_TORCH_THREADS"]))
    model, tokenizer = kata.load_model(name, device)
    _MODEL_NAME = getattr(model, "kata_name", name)
    config = model.config
    print(f"model: {_MODEL_NAME} ({config.num_hidden_layers} blocks, d_model {config.hidden_size}) "
          f"on {model.device}")
    return model, tokenizer


def expect(gpt2: str | None = None, smollm2: str | None = None, tiny: str | None = None,
           other: str | None = None) -> None:
    """Print "what you should see" for the model in use (``other`` when none is given for it)."""
    kind = _KINDS.get(_MODEL_NAME or "", "other")  # of the model load_model loaded
    text = {"gpt2": gpt2, "smollm2": smollm2, "tiny": tiny}.get(kind) or other
    if not text:
        return
    text = textwrap.dedent(text).strip()
    title = f"What you should see ({_LABELS[kind]})"
    plain = title + ":\n" + "\n".join(textwrap.fill(p, 96) for p in text.split("\n"))
    _display_text(plain, f"**{title}:** {text}")


def _display_text(plain: str, markdown: str) -> None:
    """Markdown in Jupyter, plain text anywhere else."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(plain)
        return
    display({"text/plain": plain, "text/markdown": markdown}, raw=True)


def show(figure, dpi: int = 100) -> None:
    """Display a matplotlib figure inline, as a PNG whatever the backend (``MPLBACKEND=Agg``
    included), and close it; a :class:`Needs` shows nothing."""
    if figure is None or isinstance(figure, Needs):
        return
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(figure)
    display(Image(data=buffer.getvalue(), format="png"))


def token_strings(tokenizer, text: str) -> list[str]:
    """The text of each token, as the figures label them."""
    return [tokenizer.decode([i]) for i in tokenizer(text)["input_ids"]]


def hidden_states_of(model, tokenizer, text: str):
    """``(n_layers + 1, T, d_model)`` straight from the model (not from your exercise 1), for the
    notebooks of later exercises."""
    from course.shared.reference import hidden_states

    return hidden_states(model, tokenizer(text, return_tensors="pt")["input_ids"])


# --------------------------------------------------------------------------- checking an exercise


def _hint(entry, function: str | None) -> tuple[int, int, str]:
    """The hint a learner has reached for ``function``, as ``grader.py`` shows it: ``(level,
    levels, text)``, level 1 until ``grader.py hint N`` has shown more; ``(0, 0, "")`` if none."""
    from grading.views.learner import hint_levels  # the grader's record of the hints seen

    hints = entry.hints_for(function) if function else ()
    if not hints:
        return 0, 0, ""
    seen = hint_levels(ROOT).get(entry.id, {}).get(function, 0)
    level = max(1, min(seen, len(hints)))
    return level, len(hints), hints[level - 1]


class CheckResult:
    """One exercise's verdict: a small HTML table in Jupyter, plain text elsewhere."""

    def __init__(self, entry, result, impl: str, quick: bool = False):
        from grading.views.learner import function_of

        self.entry, self.result, self.impl, self.quick = entry, result, impl, quick
        self.status, self.done = result.status, result.done
        self.passed, self.total = result.passed, result.total
        failure = self.failure = result.first_failure()
        self.function = function_of(entry, failure.name, failure.function) if failure else None
        if self.status.value == "not started":
            self.function = self.function or entry.functions[0]
        self.hint_level, self.hint_levels, self.hint = (
            (0, 0, "") if self.done else _hint(entry, self.function))

    def _rows(self) -> list[tuple[str, str]]:
        entry = self.entry
        rows = [("exercise", f"{entry.number}: {entry.title} ({entry.source(self.impl)})"),
                ("status", self.status.value)]
        if self.quick:
            rows.append(("tests passed", "0 (not run: every function is still a stub)"))
        else:
            skipped = f", {self.result.skipped} skipped" if self.result.skipped else ""
            rows.append(("tests passed", f"{self.passed} of {self.total}{skipped}"))
        if self.status.value == "not started":
            rows.append(("next", f"write `{self.function}` in {entry.source(self.impl)}"))
        elif self.failure is not None:
            if not self.failure.import_error:
                rows.append(("first failing test", self.failure.name))
            rows.append(("message", self.failure.message))
        elif self.result.message and not self.done:
            rows.append(("message", self.result.message))
        if self.hint:
            rows.append((f"{self.function}() hint {self.hint_level} of {self.hint_levels}",
                         self.hint))
        if not self.done:
            more = (f"; the next hint, in a terminal: {grader_command(f'hint {entry.number}')}"
                    if self.hint_level < self.hint_levels else "")
            rows.append(("then", f"save the file and run this cell again{more}"))
        return rows

    def __repr__(self) -> str:
        width = max(len(k) for k, _ in self._rows())
        lines = []
        for key, value in self._rows():
            wrapped = textwrap.wrap(str(value), 100 - width) or [""]
            lines.append(f"{key:<{width}}  {wrapped[0]}")
            lines += [" " * (width + 2) + more for more in wrapped[1:]]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        colour = {"done": "#1a7f37", "not started": "#6e7781", "in progress": "#9a6700"}.get(
            self.status.value, "#cf222e")
        cells = []
        for key, value in self._rows():
            text = html.escape(str(value))
            if key == "status":
                text = f'<b style="color:{colour}">{text}</b>'
            elif key == "message":
                text = f'<pre style="white-space:pre-wrap;margin:0">{text}</pre>'
            cells.append(f'<tr><th style="text-align:left;vertical-align:top">{html.escape(key)}'
                         f'</th><td style="text-align:left">{text}</td></tr>')
        return '<table class="kata-check">' + "".join(cells) + "</table>"


def check(n: int, timeout: float = 120.0, full: bool = False) -> CheckResult:
    """Grade exercise ``n`` as the grader does, on the saved file, and return the verdict.

    The tests run in a time-limited child forked from the kernel's warm worker
    (:func:`_kernel_worker`). Untouched stubs are "not started" at once, without running the
    tests (they would all stop at a stub); ``full=True`` runs them anyway.
    """
    from grading.box.runner import run_tests
    from grading.core.results import summarize, untouched_result
    from grading.views.learner import still_stubs

    entry, impl = manifest_entry(n), implementation()
    if not full and still_stubs(ROOT / entry.source(impl), entry) == list(entry.functions):
        return CheckResult(entry, untouched_result(entry), impl, quick=True)
    worker, seed = _kernel_worker()
    with tempfile.TemporaryDirectory(prefix="kata-check-") as work:
        run = run_tests(ROOT, [entry], impl, Path(work), timeout=timeout, warm=True,
                        secret_seed=seed, batch_worker=worker)
    return CheckResult(entry, summarize([entry], run).exercises[0], impl)


@dataclass
class _KernelWorker:
    """The kernel's warm worker, the environment it was started in, its seed and log folder."""

    worker: object
    environment: dict
    seed: int
    logs: Path


#: The kernel's warm worker; None before the first check.
_WORKER: _KernelWorker | None = None


def _kernel_worker():
    """``(worker, seed)``: the warm worker every check of this kernel is forked from, started
    again when the tests' environment changed or it was lost; ``(None, None)`` when it cannot
    be started (each check then starts a worker of its own)."""
    global _WORKER
    from grading.box.batch_worker import BatchWorker
    from grading.box.runner import fresh_secret_seed, tests_environment, trusted_environment
    from grading.core.declarations import load_exercises

    environment = tests_environment(ROOT, None)
    if _WORKER is not None:
        if _WORKER.environment == environment and not _WORKER.worker.lost:
            return _WORKER.worker, _WORKER.seed
        _stop_kernel_worker()
    seed, logs = fresh_secret_seed(), Path(tempfile.mkdtemp(prefix="kata-notebook-worker-"))
    tests = [(e.id, ROOT / e.tests) for e in load_exercises()]
    try:
        worker = BatchWorker(ROOT, tests, trusted_environment(ROOT, None, seed), logs)
    except OSError:
        shutil.rmtree(logs, ignore_errors=True)
        return None, None
    _WORKER = _KernelWorker(worker, environment, seed, logs)
    return worker, seed


def _stop_kernel_worker() -> None:
    global _WORKER
    if _WORKER is not None:
        stopping, _WORKER = _WORKER, None
        stopping.worker.close()
        shutil.rmtree(stopping.logs, ignore_errors=True)


atexit.register(_stop_kernel_worker)
