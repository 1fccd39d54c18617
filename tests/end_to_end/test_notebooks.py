"""The notebooks (``notebooks/exN_*.ipynb``) run clean, top to bottom, from a fresh start.

Against the solutions: no cell errors, every figure cell (tagged ``figure``) shows an image, and
the check cell (tagged ``check``) reports the exercise done. Against the untouched stubs: the
check cell reports "not started", no output holds a traceback, and every cell that calls a
learner function says which function to write. The generated ``.ipynb`` files match their
sources (``python grader.py generate --check``).

Time: one kernel runs the notebooks one after another, each from a fresh start (an empty
namespace, the notebook's own folder and settings): the kernel's imports and model loads, and its
warm worker's, are paid once, not once per notebook. Two kernels sharing the notebooks took a
quarter off this file's time alone but cost a third more CPU, and the suite's other worker keeps
the second core busy anyway (2026-12-06 at 22:23, this file alone in turn with 1f68035's two
kernels: 57.7 s and 56.2 CPU s against 44.4 s and 72.2 CPU s, medians of 2).
The tiny GPT-2 runs every notebook whose figure does not need a trained model; exercise 3 runs on
SmolLM2, the default model, as a learner sees it. A notebook whose exercise is not in the
manifest yet is skipped.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from grading.views import notebook as kn
from grading.core.declarations import load_exercises


ROOT = Path(__file__).resolve().parents[2]

#: The model each notebook runs on against the solutions (the stubs always get the tiny GPT-2:
#: nothing there reaches the model's weights).
SOLUTION_MODELS = {"ex3": "smollm2"}
DEFAULT_TEST_MODEL = "tiny-gpt2"
CELL_TIMEOUT = 300

#: A cell that calls a learner function: ``ex.tokenize(...)``, ``ex3.plot_scaling_experiment(...)``.
LEARNER_CALL = re.compile(r"\bex\d?\.\w+\(")
SAYS_WHICH = re.compile(r"(write|needs) `\w+`")


def _numbers() -> set[int]:
    return {e.number for e in load_exercises()}


def _notebooks() -> list[Path]:
    return [ROOT / "notebooks" / f"{e.module}.ipynb" for e in load_exercises()]


def _exercise_number(path: Path) -> int:
    return int(re.match(r"ex(\d+)_", path.name).group(1))


def _runnable() -> list[Path]:
    return [p for p in _notebooks() if _exercise_number(p) in _numbers()]


def _model(path: Path, impl: str) -> str:
    stem = path.name.split("_")[0]
    return SOLUTION_MODELS.get(stem, DEFAULT_TEST_MODEL) if impl == "solutions" \
        else DEFAULT_TEST_MODEL


def _kernel_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(MPLBACKEND="Agg",  # as CI sets it: figures must show whatever the backend
               OMP_NUM_THREADS="1", KATA_TORCH_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


def _fresh_start(path: Path, impl: str):
    """A cell run before each notebook in the shared kernel: the notebook's implementation and
    model, its folder, no figures, matplotlib's defaults, and an empty namespace (``%reset``):
    a name the notebook uses without defining it is a NameError, as in a fresh kernel."""
    import nbformat

    return nbformat.v4.new_code_cell("\n".join([
        "import os as _os, matplotlib as _mpl, matplotlib.pyplot as _plt",
        '_plt.close("all"); _mpl.rc_file_defaults()',
        f"_os.environ.update(KATA_IMPL={impl!r}, KATA_MODEL={_model(path, impl)!r})",
        f"_os.chdir({str(path.parent)!r})",
        "%reset -f",
    ]))


def _execute_all(jobs: list[tuple[Path, str]]) -> dict:
    """Run the notebooks of ``jobs`` (``(notebook, impl)``) one after another in one kernel,
    each from a fresh start (:func:`_fresh_start`): ``{(notebook name, impl): (executed
    notebook, seconds)}``, and under :data:`WORKERS` the cell that read what
    :data:`COUNT_WORKERS` counted.

    One kernel pays the imports and the model loads once for all its notebooks (about 4 s each
    time in a fresh kernel); the check cell grades each exercise in a child process of its own,
    forked from the warm worker the kernel keeps (``grading.views.notebook.check``).
    """
    import nbformat
    from nbclient import NotebookClient

    client = NotebookClient(nbformat.v4.new_notebook(), timeout=CELL_TIMEOUT,
                            kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(ROOT / "notebooks")}})

    def run(cell: str):
        client.nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
        client.execute(cleanup_kc=False)
        return client.nb.cells[0]

    results = {}
    try:
        client.execute(env=_kernel_environment(), cleanup_kc=False)  # starts the kernel
        run(COUNT_WORKERS)
        for path, impl in jobs:
            nb = nbformat.read(path, as_version=4)
            nb.cells.insert(0, _fresh_start(path, impl))
            client.nb = nb
            started = time.perf_counter()
            client.execute(cleanup_kc=False)
            nb.cells.pop(0)
            results[(path.name, impl)] = (nb, time.perf_counter() - started)
        results[WORKERS] = run(READ_WORKERS)
    finally:
        client._cleanup_kernel()
    return results


#: Run in the kernel before the notebooks: count the warm workers the checks start and the
#: children they get (forked from a warm worker, or started cold). Kept on the module, which
#: the notebooks' ``%reset`` leaves alone.
COUNT_WORKERS = """
import grading.box.batch_worker as _bw
def _counting(counts, init, spawn):  # closures: the notebooks' %reset leaves them whole
    def counted_init(self, *args, **kwargs):
        counts["started"] += 1
        init(self, *args, **kwargs)
    def counted_spawn(self, *args, **kwargs):
        child = spawn(self, *args, **kwargs)
        counts["children"].append(type(child).__name__)
        return child
    return counted_init, counted_spawn
_bw.maintainer_counts = {"started": 0, "children": []}
_bw.BatchWorker.__init__, _bw.BatchWorker.spawn = _counting(
    _bw.maintainer_counts, _bw.BatchWorker.__init__, _bw.BatchWorker.spawn)
"""
READ_WORKERS = ("import json, grading.box.batch_worker as _bw\n"
                "print('WORKERS', json.dumps(_bw.maintainer_counts))")
WORKERS = ("kernel", "warm workers")


@pytest.fixture(scope="session")
def executed():
    """``{(notebook name, impl): (executed notebook, seconds)}`` for every runnable notebook,
    and under :data:`WORKERS` the cell that read the kernel's warm workers afterwards."""
    pytest.importorskip("nbclient", reason="needs the kernel extra: pip install -e '.[kernel]'")
    pytest.importorskip("ipykernel", reason="needs the kernel extra: pip install -e '.[kernel]'")
    return _execute_all([(p, impl) for impl in ("solutions", "exercises") for p in _runnable()])


def _params():
    params = []
    for path in _notebooks():
        marks = [] if _exercise_number(path) in _numbers() else [pytest.mark.skip(
            reason=f"exercise {_exercise_number(path)} is not in the manifest yet")]
        params.append(pytest.param(path.name, marks=marks, id=path.stem))
    return params


def _text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join(output.traceback)
    return output.get("data", {}).get("text/plain", "")


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _tagged(nb, tag):
    return [c for c in _code_cells(nb) if tag in c.metadata.get("tags", [])]


def _check_status(nb) -> str:
    (cell,) = _tagged(nb, "check")
    texts = "\n".join(_text(o) for o in cell.outputs)
    assert any("text/html" in o.get("data", {}) for o in cell.outputs), \
        "the check cell shows no HTML table"
    match = re.search(r"^status\s+(.+)$", texts, re.M)
    assert match, f"the check cell reports no status:\n{texts}"
    return match.group(1).strip()


def _errors(nb) -> list[str]:
    found = []
    for cell in _code_cells(nb):
        for output in cell.outputs:
            if output.output_type == "error" or "Traceback" in _text(output):
                found.append(f"cell {cell.source.splitlines()[0]!r}:\n{_text(output)[-2000:]}")
    return found


@pytest.mark.parametrize("name", _params())
def test_notebook_runs_clean_on_the_solutions(executed, name):
    nb, seconds = executed[(name, "solutions")]
    assert not _errors(nb), "\n\n".join(_errors(nb))
    figures = _tagged(nb, "figure")
    assert figures, f"{name} has no cell tagged figure"
    for cell in figures:
        assert any("image/png" in o.get("data", {}) for o in cell.outputs), \
            f"the figure cell {cell.source.splitlines()[0]!r} drew no image"
    assert _check_status(nb) == "done"


@pytest.mark.parametrize("name", _params())
def test_notebook_on_untouched_stubs_says_what_to_write(executed, name):
    nb, seconds = executed[(name, "exercises")]
    assert not _errors(nb), "\n\n".join(_errors(nb))
    assert _check_status(nb) == "not started"
    for cell in _code_cells(nb):
        if LEARNER_CALL.search(cell.source) and "check" not in cell.metadata.get("tags", []):
            said = "".join(_text(o) for o in cell.outputs)
            assert SAYS_WHICH.search(said), \
                f"cell {cell.source.splitlines()[0]!r} does not say which function to write:\n{said}"


def test_untouched_stub_call_names_the_function_to_write(monkeypatch, capsys):
    monkeypatch.setenv("KATA_IMPL", "exercises")
    ex = kn.exercise(1)
    tokens = ex.tokenize(None, "text")
    assert isinstance(tokens, kn.Needs) and tokens.function == "tokenize"
    assert capsys.readouterr().out.strip() == \
        "write `tokenize` in exercises/ex1_hidden_states.py first"
    hidden = ex.get_hidden_states(None, tokens)
    assert hidden is tokens
    assert "needs `tokenize` first" in capsys.readouterr().out
    assert ex.plot_token_activations({"hidden": [hidden]}, 0, "x") is tokens  # found inside too
    capsys.readouterr()
    # What a cell may do with a placeholder does not raise.
    assert str(hidden.shape) == "<needs `tokenize` first>"
    assert list(hidden) == [] and not hidden and (hidden - 1).abs().max().item() is hidden


def test_check_result_shows_a_table(monkeypatch):
    monkeypatch.setenv("KATA_IMPL", "exercises")
    result = kn.check(1)  # untouched stubs: decided without running the tests
    assert result.status == "not started" and not result.done
    assert "write `model_summary`" in repr(result)
    assert result._repr_html_().startswith('<table class="kata-check">')


def test_checks_after_the_first_are_forked_from_the_kernels_warm_worker(executed):
    """In the kernel that ran every notebook, the first check started the kernel's warm worker
    and every check that ran the tests got a child forked from it: one worker for all of them,
    although the notebooks switch KATA_MODEL (exercise 3 runs on SmolLM2), which no test reads."""
    cell = executed[WORKERS]
    text = "".join(_text(o) for o in cell.outputs)
    match = re.search(r"^WORKERS (.+)$", text, re.M)
    assert match, text[-2000:]
    counts = json.loads(match.group(1))
    solved = sum(1 for (name, impl) in executed if impl == "solutions")
    assert counts == {"started": 1, "children": ["ForkedWorker"] * solved}, counts


class _FakeWorker:
    """A warm worker that starts no process: what :func:`grading.views.notebook._kernel_worker` decides."""

    def __init__(self, *args, **kwargs):
        self.lost = False
        self.closed = False

    def close(self):
        self.closed = True


def test_another_tests_environment_or_a_lost_worker_gets_a_new_warm_worker(monkeypatch):
    """Another KATA_MODEL keeps the kernel's warm worker; another environment of the tests
    (another KATA_TORCH_THREADS) stops it and starts a new one, and so does a lost worker."""
    from grading.box import batch_worker

    monkeypatch.setattr(batch_worker, "BatchWorker", _FakeWorker)
    monkeypatch.setattr(kn, "_WORKER", None)
    monkeypatch.setenv("KATA_TORCH_THREADS", "1")
    monkeypatch.setenv("KATA_MODEL", DEFAULT_TEST_MODEL)
    try:
        first, _ = kn._kernel_worker()
        monkeypatch.setenv("KATA_MODEL", "smollm2")
        assert kn._kernel_worker()[0] is first and not first.closed
        monkeypatch.setenv("KATA_TORCH_THREADS", "2")
        second, _ = kn._kernel_worker()
        assert second is not first and first.closed
        second.lost = True
        third, _ = kn._kernel_worker()
        assert third is not second and second.closed
    finally:
        kn._stop_kernel_worker()
