"""A library error raised inside your function, told in the kata's words with its likely cause.

Exercises 6 and 7 call your functions on valid inputs. When one stops with an error of torch or
of Python (an IndexError, autograd's RuntimeError, a TypeError about None), the test reports a
diagnosis that names the likely cause instead of the bare error: :func:`learner_run` runs the
call, :func:`explained` turns the error into ``(diagnosis id, sentence)``. The sizes that make
the sentence concrete (blocks, positions, ``d_model``) come from the test's own inputs
(:class:`Sizes`), and the advice in torch's own message is never repeated where it misleads
(autograd's "Set allow_unused=True" hides a gradient that does not exist).

Errors are recognised by their type and text, which cross the grader's boundary unchanged.
"""

from __future__ import annotations

import re
import sysconfig
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import kata
from course.shared.diagnosis import diagnose
from kata.models import EnvironmentFault

#: The errors a library raises on a wrong index, shape or type, and autograd's.
LIBRARY_ERRORS = (TypeError, AttributeError, IndexError, RuntimeError, ValueError, KeyError,
                  ZeroDivisionError)


@dataclass(frozen=True)
class Sizes:
    """The sizes the test knows: ``n_blocks`` blocks, ``n_tokens`` (T) positions, ``d_model``
    numbers per vector, ``vocab`` token ids; ``block_output``: what this model's blocks return
    here, ``"a tuple (hidden, ...)"`` or ``"a plain tensor (1, T, d_model)"`` (or "")."""

    n_blocks: int
    n_tokens: int
    d_model: int = 0
    vocab: int = 0
    block_output: str = ""

    @classmethod
    def of(cls, model, input_ids) -> Sizes:
        """The sizes of ``model`` run on ``input_ids`` ``(1, T)``."""
        config = model.config
        return cls(n_blocks=len(kata.blocks(model)),
                   n_tokens=int(torch.as_tensor(input_ids).shape[-1]),
                   d_model=int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0)),
                   vocab=int(getattr(config, "vocab_size", 0)), block_output=block_output(model))

    def axes(self, size: int) -> list[str]:
        """What an axis of ``size`` is, in the exercise's terms (several when sizes coincide)."""
        named = [
            (1, "the batch axis of one run's tensor, which holds one row (a block's output is "
                "(1, T, d_model), the batch first)"),
            (self.n_tokens, f"the T = {self.n_tokens} positions (0 to {self.n_tokens - 1})"),
            (self.d_model, f"the d_model = {self.d_model} numbers of a vector"),
            (self.vocab, f"the {self.vocab} token ids of the vocabulary"),
        ]
        if self.n_blocks:
            named += [
                (self.n_blocks, f"the {self.n_blocks} blocks (0 to {self.n_blocks - 1}; a cache "
                                "holds one entry per block)"),
                (self.n_blocks + 1, f"the {self.n_blocks + 1} hidden states of "
                                    "output_hidden_states (the embeddings, then one per block)"),
                (1 + self.n_blocks * self.n_tokens,
                 f"the {1 + self.n_blocks * self.n_tokens} rows of the grown batch (the corrupted "
                 "run, then one per block and position)"),
            ]
        return [what for value, what in named if value == size and value > 0]


def block_output(model) -> str:
    """What ``model``'s blocks return with the installed transformers, seen by a hook of the
    test's own on one token."""
    seen = []
    handle = kata.blocks(model)[0].register_forward_hook(
        lambda module, inputs, output: seen.append(isinstance(output, tuple)))
    try:
        with torch.no_grad():
            model(torch.zeros(1, 1, dtype=torch.long, device=model.device))
    except Exception:  # noqa: BLE001 - a model that cannot run is the other tests' business
        return ""
    finally:
        handle.remove()
    if not seen:
        return ""
    return "a tuple (hidden, ...)" if seen[0] else "a plain tensor (1, T, d_model)"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else ""


#: The kata's root folder.
_ROOT = Path(__file__).resolve().parents[2]
#: Folders whose frames are never yours: the kata, the course's shared code, the grader, the
#: maintainers' tests, Python's own library (installed packages are recognised by their
#: site-packages folder). In an exercise's folder only ``solution.py`` is code under test.
_NOT_YOURS = (_ROOT / "kata", _ROOT / "course" / "shared", _ROOT / "grading", _ROOT / "tests",
              Path(sysconfig.get_paths()["stdlib"]).resolve())


def _yours(path: Path) -> bool:
    """Whether a frame of ``path`` is code under test (yours, or the reference answer)."""
    path = path.resolve()
    if any(path.is_relative_to(folder) for folder in _NOT_YOURS):
        return False
    return not (path.is_relative_to(_ROOT / "course") and path.name != "solution.py")


def where_in_your_code(error: BaseException) -> str:
    """``"ex6_activation_patching.py, line 40, in patching_effect"``: the last line of your code
    the error passed through (under the grader, as the sandbox reported it, its folder left out
    as here), or ""."""
    remote = getattr(error, "kata_where", "")
    if isinstance(remote, str) and remote:
        return remote.split("/", 1)[-1]
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = Path(frame.filename)
        if not path.is_file() or "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        if not _yours(path):
            continue
        return f"{path.name}, line {frame.lineno}, in {frame.name}"
    return ""


# ----------------------------------------------------------------------------- causes


def index_cause(error: BaseException, sizes: Sizes) -> str | None:
    """The likely cause of an index past an axis's end, from the axis's size."""
    text = str(error)
    found = re.search(
        r"index (-?\d+) is out of bounds for (?:dimension|axis) (\d+) with size (\d+)", text)
    if found:
        index, size = int(found.group(1)), int(found.group(3))
        axes = sizes.axes(size)
        what = " or ".join(axes) if axes else "an axis none of the map's sizes explains"
        return (f"index {index} went past an axis of size {size}: {what}. An index counted "
                "along one axis was used on another, or counted one too far")
    found = re.search(r"index (-?\d+) is out of range", text)
    if found and int(found.group(1)) in (sizes.n_blocks, -sizes.n_blocks - 1):
        return (f"block index {found.group(1)} went past the blocks, 0 to {sizes.n_blocks - 1}: "
                f"output_hidden_states holds {sizes.n_blocks + 1} entries, the embeddings "
                f"first, and only the last {sizes.n_blocks} are blocks' outputs")
    if "list index out of range" in text or "tuple index out of range" in text:
        kind = "tuple" if "tuple" in text else "list"
        return (f"a {kind} was indexed past its end: it holds fewer entries than your code "
                f"expects (one per block makes {sizes.n_blocks}; output_hidden_states has "
                f"{sizes.n_blocks + 1}, the embeddings first)")
    found = re.search(r"too many indices for (?:tensor|array) of dimension (\d+)", text)
    if found or "too many indices" in text:
        dims = f" has {found.group(1)} axes" if found else " has fewer axes"
        return (f"a tensor{dims} than the index gives: a block's output is (1, T, d_model), one "
                "run's row of it (T, d_model), one vector (d_model,)")
    return None


def shape_cause(error: BaseException, sizes: Sizes) -> str | None:
    """The likely cause of two sizes that do not fit, from the sizes."""
    text = str(error)
    cells = sizes.n_blocks * sizes.n_tokens
    found = re.search(r"shape '\[([^\]]*)\]' is invalid for input of size (\d+)", text)
    if found:
        size = int(found.group(2))
        extra = {1: "one more than the map's cells: the corrupted run's own metric is among them",
                 2: "two more than the map's cells: the clean and the corrupted runs' metrics "
                    "are among them",
                 -1: "one fewer than the map's cells: a patched run is missing"}.get(size - cells)
        what = extra or f"the map has {cells} cells"
        return (f"{size} values were reshaped into ({found.group(1)}): {what} "
                f"({sizes.n_blocks} blocks times {sizes.n_tokens} positions)")
    found = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", text)
    found = found or re.search(r"Expected size (\d+) but got size (\d+)", text)
    if found:
        a, b = int(found.group(1)), int(found.group(2))
        said = [f"{value} ({' or '.join(sizes.axes(value)) or 'no size of the map'})"
                for value in (a, b)]
        return (f"two tensors whose sizes do not fit met in one operation: {said[0]} against "
                f"{said[1]}")
    if "cannot be multiplied" in text or "expanded size" in text:
        return "two tensors whose shapes do not fit met in one operation"
    return None


def output_form_cause(error: BaseException, sizes: Sizes) -> str | None:
    """The likely cause of treating a block's output as the wrong kind of value."""
    text = str(error)
    tuple_trouble = "'tuple' object has no attribute" in text or "values to unpack" in text or \
        "tuple indices must be" in text
    if not tuple_trouble:
        return None
    returns = (f"on this model, with this transformers version, a block returns "
               f"{sizes.block_output}" if sizes.block_output
               else "a block returns a tuple (hidden, ...) or a plain tensor")
    return (f"a block's output was taken for a kind of value it is not: {returns}; code that "
            "must work on both checks which one it got")


def autograd_cause(error: BaseException, sizes: Sizes) -> tuple[str, str] | None:
    """``(kind, likely cause)`` of an autograd error, or None. Kinds: ``"not-in-graph"``,
    ``"no-graph"``, ``"not-scalar"``, ``"twice"``, ``"in-place"``."""
    text = str(error)
    if "not have been used in the graph" in text:
        form = (f" On this model a block returns {sizes.block_output} with this transformers "
                "version." if sizes.block_output else "")
        return "not-in-graph", (
            "autograd was asked for the gradient of a tensor the metric does not depend on. A "
            "tensor you differentiate by must be the very tensor the rest of the run goes on "
            "to use: a slice or a copy of a block's output (output[0] of a tensor output, which "
            f"is its one row, or a clone) is a new tensor that nothing downstream reads.{form} "
            "(allow_unused=True, which the error suggests, only turns that gradient into None.)")
    if "does not require grad" in text or "does not have a grad_fn" in text:
        return "no-graph", (
            "autograd found no graph to differentiate: the run the gradient comes from was not "
            "recorded (torch.no_grad() around it, or a tensor detached from it)")
    if "implicitly created only for scalar outputs" in text:
        return "not-scalar", (
            "the gradient was asked of a tensor with more than one number: the metric is one "
            "number, read at the last position")
    if "backward through the graph a second time" in text:
        return "twice", (
            "a second backward pass through one graph: one backward pass gives the gradient "
            "of every block's output at once")
    if "inplace operation" in text or "in-place operation" in text:
        return "in-place", (
            "a tensor that autograd needs was changed in place after it was used: write into a "
            "copy")
    return None


def none_cause(error: BaseException) -> str | None:
    """The likely cause of an operation on None."""
    if "NoneType" not in str(error):
        return None
    return ("a value was None where a tensor was expected: a function of yours that returns "
            "nothing, or a gradient that autograd gave as None")


# ----------------------------------------------------------------------------- the verdict

#: The diagnosis id of each kind of error, after the exercise's prefix.
KINDS = {"not-in-graph": "output-not-in-graph", "no-graph": "no-grad-around-backward",
         "autograd": "autograd-error", "output-form": "output-form",
         "index": "index-out-of-range", "sizes": "sizes-do-not-fit", "none": "none-value",
         "value": "rejects-valid-input", "other": "raised"}


def cause_of(error: BaseException, sizes: Sizes, inputs: str) -> tuple[str, str]:
    """``(kind, likely cause)`` of a library ``error`` (a key of :data:`KINDS`); ``inputs``
    says what the function was given (valid inputs)."""
    found = autograd_cause(error, sizes)
    if found is not None:
        kind, cause = found
        return (kind if kind in ("not-in-graph", "no-graph") else "autograd"), cause
    cause = output_form_cause(error, sizes)
    if cause is not None:
        return "output-form", cause
    if isinstance(error, IndexError) or "out of bounds" in str(error):
        return "index", (index_cause(error, sizes)
                         or "an index went past the end of a tensor or a list")
    cause = shape_cause(error, sizes)
    if cause is not None:
        return "sizes", cause
    if isinstance(error, (TypeError, AttributeError)) and none_cause(error) is not None:
        return "none", none_cause(error)
    if isinstance(error, ValueError):
        return "value", (f"the inputs were valid ({inputs}): a check of yours refuses what it "
                         "should accept, or one of your functions gave another a wrong value")
    return "other", (f"the inputs were valid ({inputs}): the error is in your code, at the line "
                     "its traceback ends in")


def explained(error: BaseException, function: str, sizes: Sizes, prefix: str, where: str = "",
              inputs: str = "", ids: dict[str, str] | None = None,
              causes: dict[str, str] | None = None) -> tuple[str, str]:
    """``(diagnosis id, sentence)`` for a library ``error`` raised inside your ``function`` on
    valid inputs. The id is ``prefix`` and the kind's (:data:`KINDS`), unless ``ids`` gives the
    kind one of its own; ``causes`` gives a kind's cause in the exercise's words; ``inputs`` says
    what was given (by default two valid prompts of the sizes' length)."""
    inputs = inputs or (f"two prompts of {sizes.n_tokens} tokens each, whose answers differ, and "
                        "two token ids of the vocabulary")
    kind, cause = cause_of(error, sizes, inputs)
    cause = (causes or {}).get(kind) or cause
    place = f" {where}" if where else ""
    line = where_in_your_code(error)
    at = f" at {line}" if line else ""
    head = f"your {function}{place} raised {type(error).__name__}{at} ({first_line(error)})"
    return (ids or {}).get(kind) or f"{prefix}-{KINDS[kind]}", f"{head}: {cause}"


def learner_run(call: Callable, function: str, sizes: Callable[[], Sizes] | Sizes, prefix: str,
                where: str = "", passes: tuple = (), behind: Callable[[], None] | None = None,
                **explain):
    """``call()``, your ``function`` on valid inputs; a library error it raises fails the test
    with :func:`explained`'s diagnosis (``explain``: its ``inputs``, ``ids`` and ``causes``).
    ``sizes`` may be a function, called only then; ``passes``: exception types to let through
    (a test's own injected failure); ``behind``: checks of the other functions of yours that
    ``function`` uses, run first, which fail naming theirs (the first dependency is the fault)."""
    try:
        return call()
    except (NotImplementedError, AssertionError, EnvironmentFault):
        raise
    except passes:
        raise
    except LIBRARY_ERRORS as error:
        found = explained(error, function, sizes() if callable(sizes) else sizes, prefix, where,
                          **explain)
    if behind is not None:
        behind()
    diagnose(*found)  # outside the except: the library's traceback is not the verdict
