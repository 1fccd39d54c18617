"""The models a test session loads once and shares: ``session_model(name)``.

Loaded on first use, then kept in :data:`LOADED` with the hooks they had right after loading,
so the kata's hook hygiene (:mod:`course.shared.plugin`) can put each back after every test; the
grader's trusted side (:mod:`grading.box.remote`, the recorder, the warm worker) reads the same
table.
"""

from __future__ import annotations

import gc
import os

import torch

from kata.hooks import hook_snapshot
from kata.models import EnvironmentFault, load_model

#: name -> (model, tokenizer, hook snapshot taken right after loading)
LOADED: dict[str, tuple] = {}


def threads_before_forking() -> None:
    """Torch on one thread in a process that loads models and then forks workers: a thread pool
    does not survive a fork, and a child's first parallel operation would wait forever on the
    parent's threads (a correct answer graded "timed out"). Its children choose their own
    (:func:`threads_after_forking`)."""
    torch.set_num_threads(1)


def threads_after_forking() -> None:
    """In a child forked from a process that kept one thread (:func:`threads_before_forking`):
    torch on ``KATA_TORCH_THREADS`` threads (default one), in a pool of the child's own."""
    torch.set_num_threads(int(os.environ.get("KATA_TORCH_THREADS") or 1))


def load_warm(name: str) -> tuple:
    """``(model, tokenizer, hook snapshot)`` of a freshly loaded model, after one forward pass
    that asks for the hidden states: transformers 5 installs its own hidden-state hooks on first
    use, and they belong to the model's clean state, which the snapshot records. Both sides of
    the grader's boundary load their models so (this module's session, the sandbox's server)."""
    model, tokenizer = load_model(name)
    ids = tokenizer("Hello there", return_tensors="pt")["input_ids"].to(model.device)
    with torch.no_grad():
        model(ids, output_hidden_states=True)
    return model, tokenizer, hook_snapshot(model)


def session_model(name: str):
    """``(model, tokenizer)`` for ``name`` ("tiny-gpt2", "smollm2", "gpt2" or
    :data:`~kata.models.SMOLLM2_FIRST_BLOCKS`), loaded once; a model that cannot load is the
    machine's fault (:class:`~kata.models.EnvironmentFault`)."""
    if name not in LOADED:
        try:
            LOADED[name] = load_warm(name)
        except EnvironmentFault:
            raise
        except Exception as error:  # a broken cache or device is the machine's fault
            raise EnvironmentFault(
                f"loading the model {name} failed: {type(error).__name__}: {error}") from error
        # The models, torch and the libraries live as long as the session: out of the garbage
        # collector's full passes, which would walk their objects again and again (exercise 2's
        # catalogued mistakes and variants took 8% less time so, measured in turn).
        gc.freeze()
    model, tokenizer, _ = LOADED[name]
    return model, tokenizer
