"""Reference values computed once per batch, shared by every trusted test process of the batch.

The tests compute their expected values from the session models once per process
(``course/shared/support.py``'s ``computed_once``: reference forward passes). Under ``grader.py batch``
each submission's exercises run in processes of their own, so every submission paid for the same
values again: SmolLM2's scaling experiment alone (30 forward passes, exercise 4) cost about 3 CPU
seconds per submission. The grader gives its trusted test processes a folder
(:data:`REFERENCE_CACHE_VARIABLE`, inside the batch's work folder, which no sandbox sees and
whose name the learner's environment never carries): the first process that computes a value
writes it there, every later one reads it back.

Only plain data is shared: tensors, numbers, strings, ``None``, and lists, tuples and dicts of
them, which :func:`torch.load` reads back with ``weights_only=True``. Anything else (a model, a
tokenizer's output) is computed in each process, as without the folder. A value is written to a
temporary file and renamed, so a reader never sees half of one; two processes that compute the
same value at once both write it, and either copy is the same value.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

#: The trusted test process's variable naming the batch's folder of reference values.
REFERENCE_CACHE_VARIABLE = "KATA_REFERENCE_CACHE"
_PLAIN = (int, float, str, bool, type(None))


def cache_folder() -> Path | None:
    """The batch's folder of reference values, or None outside a batch (compute as usual)."""
    folder = os.environ.get(REFERENCE_CACHE_VARIABLE, "").strip()
    return Path(folder) if folder else None


def is_plain(value: Any) -> bool:
    """Whether ``value`` is data ``torch.load(weights_only=True)`` gives back as it was."""
    if isinstance(value, torch.Tensor):
        return type(value) is torch.Tensor and value.layout == torch.strided
    if isinstance(value, _PLAIN):
        return True
    if type(value) in (list, tuple):
        return all(is_plain(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, _PLAIN) and is_plain(v) for k, v in value.items())
    return False


def _compact(value: Any) -> Any:
    """``value`` with every tensor that views a larger storage copied to its own (``torch.save``
    writes a view's whole storage: a row of a (T, vocab) tensor would weigh the whole table)."""
    if isinstance(value, torch.Tensor):
        whole = value.untyped_storage().nbytes()
        return value.clone() if whole > value.numel() * value.element_size() else value
    if type(value) in (list, tuple):
        return type(value)(_compact(v) for v in value)
    if type(value) is dict:
        return {k: _compact(v) for k, v in value.items()}
    return value


def path_of(folder: Path, key) -> Path:
    """Where the value of ``key`` (a tuple of plain values, e.g. ``("ex4-kafka-scaling",
    "smollm2")``) is kept."""
    digest = hashlib.sha256(repr(key).encode("utf-8")).hexdigest()[:32]
    return folder / f"{digest}.pt"


def load_or_compute(key, compute: Callable[[], Any]) -> Any:
    """``compute()``'s value for ``key``: read from the batch's folder when a process of the
    batch computed it before, else computed here (and written there when it is plain data)."""
    folder = cache_folder()
    if folder is None:
        return compute()
    path = path_of(folder, key)
    try:
        return torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - not computed yet, or an unreadable copy: compute it here
        pass
    value = compute()
    if is_plain(value):
        _write(path, _compact(value))
    return value


def _write(path: Path, value: Any) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".partial")
        with os.fdopen(handle, "wb") as file:
            torch.save(value, file)
        os.replace(temporary, path)
    except OSError:
        pass  # a full or read-only disk: the value is still used here, just not shared
