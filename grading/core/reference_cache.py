"""Reference values computed once per batch, shared by every trusted test process of the batch.

The tests compute their expected values from the session models once per process
(``course/shared/support.py``'s ``computed_once``); a batch grades each submission in processes
of its own, which would compute them all again (SmolLM2's scaling experiment: about 3 CPU
seconds a submission). So the grader gives its trusted test processes a folder
(:data:`REFERENCE_CACHE_VARIABLE`, which no sandbox sees): the first process that computes a
value writes it there, every later one reads it back. Only plain data is shared (what
``torch.load(weights_only=True)`` reads back), each value written whole, then renamed.
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


class _NotPlain(Exception):
    """A value ``torch.load(weights_only=True)`` would not give back as it was."""


def _plain(value: Any) -> Any:
    """``value`` as the folder keeps it, every tensor that views a larger storage copied to its
    own (``torch.save`` writes a view's whole storage: a row of a (T, vocab) tensor would weigh
    the whole table); raises :class:`_NotPlain` for anything but plain data."""
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor or value.layout != torch.strided:
            raise _NotPlain
        whole = value.untyped_storage().nbytes()
        return value.clone() if whole > value.numel() * value.element_size() else value
    if isinstance(value, _PLAIN):
        return value
    if type(value) in (list, tuple):
        return type(value)(_plain(v) for v in value)
    if type(value) is dict and all(isinstance(k, _PLAIN) for k in value):
        return {k: _plain(v) for k, v in value.items()}
    raise _NotPlain


def path_of(folder: Path, key) -> Path:
    """Where the value of ``key`` (a tuple of plain values, e.g. ``("ex4-kafka-scaling",
    "smollm2")``) is kept."""
    digest = hashlib.sha256(repr(key).encode("utf-8")).hexdigest()[:32]
    return folder / f"{digest}.pt"


def load_or_compute(key, compute: Callable[[], Any]) -> Any:
    """``compute()``'s value for ``key``: read from the batch's folder when a process of the
    batch computed it before, else computed here (and written there when it is plain data)."""
    folder = os.environ.get(REFERENCE_CACHE_VARIABLE, "").strip()
    if not folder:  # outside a batch: compute as usual
        return compute()
    path = path_of(Path(folder), key)
    try:
        return torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - not computed yet, or an unreadable copy: compute it here
        pass
    value = compute()
    try:
        plain = _plain(value)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".partial")
        with os.fdopen(handle, "wb") as file:
            torch.save(plain, file)
        os.replace(temporary, path)
    except (_NotPlain, OSError):  # not plain data (a model...), or a full or read-only disk:
        pass  # the value is still used here, just not shared
    return value
