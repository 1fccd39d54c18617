"""Answer probes: a second channel of evidence that does not trust the test reports.

The test reports come from the same process as the learner's code, so code that patches the
recorder or pytest can forge them. The probes do not depend on pytest at all:

* **inside the sandbox** (``python -m kata.grading.probes``), a fresh process imports each
  exercise file and calls its public functions on fixed inputs (tiny GPT-2, fixed tensors). It
  writes one JSON line per exercise: each function's return value as plain data (tensors as
  nested lists), or what went wrong (``stub``: it raised ``NotImplementedError``; ``error``;
  ``timeout``). JSON, never pickles: reading it back runs nothing;
* **outside** (:func:`check`), the grader rebuilds the same inputs and computes every answer
  itself, with the reference computations in this file (not the solutions, which an autograder
  need not ship), and compares.

:func:`verdict` turns a contradiction into :attr:`~kata.grading.records.Status.TAMPERED`: an
exercise whose tests all "passed" while a probed function is a stub, raises, or returns a wrong
answer; an exercise whose tests passed for a function the probes found untouched; or tests that
passed while the probes never reported at all.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ..reference import reference_log_probs, scaled_block_log_probs

PROBE_TEXT = "The cat sat on the mat because it was"
TARGET = " tired"
FACTOR = 0.8
RTOL, ATOL = 1e-3, 1e-4
#: seconds each probed function may take inside the sandbox
PROBE_SECONDS = 30


# --------------------------------------------------------------------------- fixed inputs


def _tiny():
    from kata.models import load_model

    if "tiny" not in _CACHE:
        _CACHE["tiny"] = load_model("tiny-gpt2", device="cpu")
    return _CACHE["tiny"]


_CACHE: dict[str, Any] = {}


def _tokens():
    _, tokenizer = _tiny()
    return tokenizer(PROBE_TEXT, return_tensors="pt")


def _vectors() -> torch.Tensor:
    generator = torch.Generator().manual_seed(11)
    vectors = torch.randn(5, 8, generator=generator)
    vectors[3] = vectors[1] * 2.5  # a parallel pair: similarity 1
    return vectors


def _hidden() -> torch.Tensor:
    generator = torch.Generator().manual_seed(12)
    return torch.randn(4, 5, 8, generator=generator)


# --------------------------------------------------------------------------- references


def _ref_hidden_states(model, tokens):
    with torch.no_grad():
        out = model(**tokens, output_hidden_states=True)
    return torch.stack(out.hidden_states)[:, 0].float()


def _unit(vectors):
    return vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-8)


def _ref_cosine(vectors):
    unit = _unit(vectors.float())
    return unit @ unit.T


def _ref_laminar(hidden, skip_first=True):
    if skip_first:
        hidden = hidden[:, 1:]
    n = hidden.shape[1]
    rows, cols = torch.triu_indices(n, n, offset=1)
    return torch.stack([_ref_cosine(layer)[rows, cols] for layer in hidden])


def _target_id():
    _, tokenizer = _tiny()
    return tokenizer.encode(TARGET)[0]


@dataclass(frozen=True)
class Probe:
    """Call ``function(*arguments())`` in the sandbox; expect ``reference()`` outside."""

    function: str
    arguments: Callable[[], tuple]
    reference: Callable[[], Any]


def _model_and(*more):
    return lambda: (_tiny()[0], *[m() for m in more])


PROBES: dict[str, list[Probe]] = {
    "ex1": [
        Probe("tokenize", lambda: (_tiny()[1], PROBE_TEXT), lambda: _tokens()["input_ids"]),
        Probe("get_hidden_states", _model_and(_tokens),
              lambda: _ref_hidden_states(_tiny()[0], _tokens())),
        Probe("activation_variance", lambda: (_hidden(), 2), lambda: _hidden()[:, 2, :].var(dim=-1)),
    ],
    "ex2": [
        Probe("cosine_similarity_matrix", lambda: (_vectors(),), lambda: _ref_cosine(_vectors())),
        Probe("laminar_profile", lambda: (_hidden(),), lambda: _ref_laminar(_hidden())),
    ],
    "ex3": [
        Probe("target_token_id", lambda: (_tiny()[1], TARGET), _target_id),
        Probe("next_token_log_probs", _model_and(lambda: _tokens()["input_ids"]),
              lambda: reference_log_probs(_tiny()[0], _tokens()["input_ids"])),
        Probe("scaling_experiment",
              _model_and(lambda: _tokens()["input_ids"], _target_id, lambda: FACTOR),
              lambda: scaled_block_log_probs(_tiny()[0], _tokens()["input_ids"], _target_id(),
                                             FACTOR)),
    ],
    "ex4": [
        Probe("fast_scaling_experiment",
              _model_and(lambda: _tokens()["input_ids"], _target_id, lambda: FACTOR),
              lambda: scaled_block_log_probs(_tiny()[0], _tokens()["input_ids"], _target_id(),
                                             FACTOR)),
    ],
}


# --------------------------------------------------------------------------- plain data


def to_plain(value: Any) -> Any:
    """A return value as JSON data: tensors as ``{"tensor": [...], "shape": [...]}``."""
    if isinstance(value, torch.Tensor):
        data = value.detach().to("cpu", torch.float64) if value.is_floating_point() \
            else value.detach().cpu()
        return {"tensor": data.reshape(-1).tolist(), "shape": list(value.shape)}
    if isinstance(value, dict) or hasattr(value, "keys") and hasattr(value, "__getitem__"):
        return {"mapping": {str(k): to_plain(value[k]) for k in value.keys()}}
    if isinstance(value, (list, tuple)):
        return {"list": [to_plain(v) for v in value]}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return {"value": value}
    return {"repr": repr(value)[:200]}


def _from_plain(data: Any) -> Any:
    if not isinstance(data, dict):
        raise ValueError("malformed probe value")
    if "tensor" in data:
        return torch.tensor(data["tensor"], dtype=torch.float64).reshape(data["shape"])
    if "mapping" in data:
        return {k: _from_plain(v) for k, v in data["mapping"].items()}
    if "list" in data:
        return [_from_plain(v) for v in data["list"]]
    if "value" in data:
        return data["value"]
    return data.get("repr")


def _matches(got: Any, expected: Any) -> bool:
    if isinstance(expected, torch.Tensor):
        if isinstance(got, dict) and "input_ids" in got:  # a BatchEncoding
            got = got["input_ids"]
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(expected.shape):
            return False
        return bool(torch.allclose(got.double(), expected.double(), rtol=RTOL, atol=ATOL,
                                   equal_nan=False))
    if isinstance(expected, int):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and got == expected
    if isinstance(expected, float):
        return isinstance(got, (int, float)) and math.isclose(got, expected, rel_tol=RTOL)
    return got == expected


# --------------------------------------------------------------------------- inside


def _reset_process_state() -> None:
    """What one exercise file may have changed for the next: dtype, grad mode, hooks, cwd."""
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    from torch.nn.modules import module as nn_module

    for name in ("_global_forward_hooks", "_global_forward_pre_hooks",
                 "_global_backward_hooks", "_global_backward_pre_hooks",
                 "_global_forward_hooks_always_called", "_global_forward_hooks_with_kwargs"):
        hooks = getattr(nn_module, name, None)
        if hasattr(hooks, "clear"):
            hooks.clear()


class _TimeUp(BaseException):
    pass


def _alarm(signum, frame):
    raise _TimeUp()


def run_inside(exercise_ids: list[str], impl: str, out) -> None:
    """Call every probe of ``exercise_ids`` on ``impl`` and write one JSON line per exercise."""
    from kata.impl import import_implementation
    from kata.manifest import load_manifest

    manifest = {e.id: e for e in load_manifest()}
    cwd = os.getcwd()
    signal.signal(signal.SIGALRM, _alarm)
    for exercise_id in exercise_ids:
        out.write(json.dumps({"begin": exercise_id}) + "\n")
        out.flush()
        _reset_process_state()
        os.chdir(cwd)
        answers: dict[str, dict] = {}
        try:
            module = import_implementation(manifest[exercise_id], impl)
        except Exception as error:  # noqa: BLE001 - the tests report import errors
            out.write(json.dumps({"exercise": exercise_id, "import_error": str(error)[:300]})
                      + "\n")
            out.flush()
            continue
        for probe in PROBES.get(exercise_id, []):
            function = getattr(module, probe.function, None)
            if not callable(function):
                answers[probe.function] = {"error": "missing"}
                continue
            signal.alarm(PROBE_SECONDS)
            try:
                value = function(*probe.arguments())
                answers[probe.function] = {"value": to_plain(value)}
            except NotImplementedError:
                answers[probe.function] = {"stub": True}
            except _TimeUp:
                answers[probe.function] = {"error": "timeout"}
            except BaseException as error:  # noqa: BLE001 - sys.exit, anything
                answers[probe.function] = {"error": f"{type(error).__name__}: {error}"[:300]}
            finally:
                signal.alarm(0)
            _reset_process_state()
        out.write(json.dumps({"exercise": exercise_id, "answers": answers}) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    impl, out_path, *exercise_ids = argv
    torch.set_num_threads(int(os.environ.get("KATA_TORCH_THREADS", "1")))
    with open(out_path, "a", encoding="utf-8") as out:
        run_inside(exercise_ids, impl, out)
    os._exit(0)  # no atexit handler or thread of the learner's runs after the answers


# --------------------------------------------------------------------------- outside


def read_answers(path: Path) -> tuple[dict[str, dict], str | None]:
    """``({exercise id: line}, exercise begun but never finished)`` from a probe record."""
    answers, begun = {}, None
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {}, None
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        if "begin" in data:
            begun = data["begin"]
        elif isinstance(data.get("exercise"), str):
            answers[data["exercise"]] = data
            if begun == data["exercise"]:
                begun = None
    return answers, begun


_REFERENCES: dict[tuple[str, str], Any] = {}
_REFERENCES_LOCK = threading.Lock()


def reference(exercise_id: str, probe: Probe) -> Any:
    """What ``probe`` must return, computed here (outside any sandbox) once per process."""
    with _REFERENCES_LOCK:
        key = (exercise_id, probe.function)
        if key not in _REFERENCES:
            torch.set_default_dtype(torch.float32)
            _REFERENCES[key] = probe.reference()
        return _REFERENCES[key]


def prepare_references() -> threading.Thread:
    """Compute every reference answer in a background thread (it loads the tiny GPT-2), while
    the first submission's worker warms up; :func:`check` waits for it where needed."""

    def compute():
        for exercise_id, probes in PROBES.items():
            for probe in probes:
                try:
                    reference(exercise_id, probe)
                except Exception:  # noqa: BLE001 - check() computes it again and fails there
                    pass

    thread = threading.Thread(target=compute, name="kata-probe-references", daemon=True)
    thread.start()
    return thread


def check(exercise_id: str, line: dict | None) -> dict[str, str]:
    """{function: "right" | "wrong" | "stub" | "error: ..."} for one exercise's probe line."""
    if line is None:
        return {}
    if "import_error" in line:
        return {p.function: "import error" for p in PROBES.get(exercise_id, [])}
    answers = line.get("answers") or {}
    verdicts = {}
    for probe in PROBES.get(exercise_id, []):
        answer = answers.get(probe.function)
        if not isinstance(answer, dict):
            verdicts[probe.function] = "error: no answer"
        elif answer.get("stub"):
            verdicts[probe.function] = "stub"
        elif "error" in answer:
            verdicts[probe.function] = f"error: {answer['error']}"
        else:
            try:
                got = _from_plain(answer.get("value"))
                right = _matches(got, reference(exercise_id, probe))
            except Exception:  # noqa: BLE001 - a malformed answer is a wrong one
                right = False
            verdicts[probe.function] = "right" if right else "wrong"
    return verdicts


def verdict(row, verdicts: dict[str, str], reported: bool) -> str | None:
    """Why ``row`` (an ExerciseResult) contradicts its probes; None when it does not."""
    from .records import Status

    if row.passed == 0 or row.exercise.id not in PROBES:
        return None
    if row.status in (Status.MISSING, Status.ERROR, Status.TIMED_OUT, Status.CRASHED,
                      Status.ENVIRONMENT_ERROR):
        return None
    if not reported:
        return ("its tests reported passes, but the answer probes (the exercise's functions run "
                "again on fixed inputs) never reported: the results cannot be trusted")
    failed_stub = {t.function for t in row.tests if t.stub and not t.passed}
    for function, seen in verdicts.items():
        if seen == "stub" and (row.done or function not in failed_stub):
            return (f"its tests reported {function} working, but called on fixed inputs it "
                    "still raises NotImplementedError: the test results were forged")
        if row.done and seen != "right":
            return (f"every test reported passing, but {function} gives "
                    f"{'a wrong answer' if seen == 'wrong' else seen} on the probe inputs: "
                    "the test results contradict what the code does")
    return None


if __name__ == "__main__":
    sys.exit(main())


def run_probes(root: Path, exercise_ids: list[str], impl: str, work_dir: Path,
               timeout: float, memory_limit_mb: int = 0, threads: int | None = None,
               sandbox=None) -> dict[str, dict | None]:
    """Run the probes of ``exercise_ids`` on ``root/impl`` in a child process (in ``sandbox``
    when given). Returns {exercise id: its answer line, or None where the probes never reported
    (the process crashed or timed out in that exercise)}."""
    import time

    from .runner import child_environment, kill_group, start_child, start_sandboxed

    work_dir.mkdir(parents=True, exist_ok=True)
    pending = [e for e in exercise_ids if e in PROBES]
    results: dict[str, dict | None] = {}
    env = child_environment(root, threads)
    attempt = 0
    while pending:
        attempt += 1
        record = work_dir / f"probes-{attempt}.jsonl"
        record.touch()
        if sandbox is None:
            command = [sys.executable, "-m", "kata.grading.probes", impl, str(record), *pending]
            process = start_child(command, root, env, work_dir, memory_limit_mb,
                                  name=f"probes-{attempt}")
        else:
            from .sandbox import RECORD_FD

            command = [sys.executable, "-m", "kata.grading.probes", impl,
                       f"/dev/fd/{RECORD_FD}", *pending]
            process = start_sandboxed(sandbox, command, root, env, work_dir,
                                      f"probes-{attempt}", record, {})
        deadline = time.monotonic() + 60 + timeout * len(pending)
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        kill_group(process)
        answers, begun = read_answers(record)
        results.update({k: v for k, v in answers.items() if k in pending})
        if begun is None or begun not in pending:
            for exercise_id in pending:
                results.setdefault(exercise_id, None)
            break
        results[begun] = None  # it crashed or hung in this exercise
        pending = [e for e in pending if e not in results]
    return results
