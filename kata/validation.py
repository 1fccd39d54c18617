"""One input-validation rule per kind of argument, shared by every exercise.

Each check returns the argument in the form the code goes on with, or raises an error whose
message names the argument, the value and the valid range:

* :func:`one_sequence` -- the token ids of one text, ``(T,)`` or ``(1, T)``, returned as ``(1, T)``
  (``ValueError`` otherwise, and for an empty text or one longer than the model's context);
* :func:`token_index` -- a token position among ``T`` (``IndexError``);
* :func:`layer_index` -- a hidden state among ``n`` (``IndexError``);
* :func:`token_id` -- an id in the model's vocabulary (``ValueError``).

Indices follow Python: ``-1`` is the last, so the valid range of ``n`` items is ``-n..n-1``.
A token id is not an index: it must be ``0..vocab_size-1``.
"""

from __future__ import annotations

import operator

import torch

from kata.architectures import context_length

__all__ = ["layer_index", "one_sequence", "token_id", "token_index"]


def _integer(value, name: str, error=TypeError) -> int:
    """``value`` as a Python int (an int, a numpy integer or a 0-d integer tensor)."""
    if isinstance(value, bool):
        raise error(f"{name} must be an integer, got the bool {value!r}")
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
        return int(value.item())
    try:
        return operator.index(value)
    except TypeError:
        raise error(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


def _index(value, n: int, name: str, what: str) -> int:
    index = _integer(value, name, IndexError)
    if not -n <= index < n:
        raise IndexError(
            f"{name} {index} is out of range: there are {n} {what}, so the valid range is "
            f"-{n}..{n - 1} (0 is the first, -1 the last)"
        )
    return index % n


def token_index(index, n_tokens: int, name: str = "token_index") -> int:
    """``index`` as a position ``0..n_tokens-1`` (negative counts from the end).

    Raises ``IndexError`` stating the range ``-n_tokens..n_tokens-1`` when there is no such token.
    """
    return _index(index, n_tokens, name, "tokens")


def layer_index(index, n_hidden_states: int, name: str = "layer") -> int:
    """``index`` as a hidden state ``0..n-1`` (0 is the embedding layer; negative from the end).

    Raises ``IndexError`` stating the range ``-n..n-1`` when there is no such hidden state.
    """
    return _index(index, n_hidden_states, name, "hidden states (0 is the embedding layer)")


def token_id(value, vocab_size: int, name: str = "target_id") -> int:
    """``value`` as a token id of a vocabulary of ``vocab_size`` tokens.

    Raises ``ValueError`` stating the range ``0..vocab_size-1`` otherwise (a token id is not an
    index: -1 is no token).
    """
    tid = _integer(value, name, ValueError)
    if not 0 <= tid < vocab_size:
        raise ValueError(
            f"{name} {tid} is not a token id: the vocabulary has {vocab_size} tokens, "
            f"ids 0..{vocab_size - 1}"
        )
    return tid


def one_sequence(input_ids, model=None, name: str = "input_ids") -> torch.Tensor:
    """The token ids of one text as a ``(1, T)`` int64 tensor (on ``model``'s device if given).

    Accepts ``(T,)`` or ``(1, T)`` (a list is turned into a tensor). Raises ``ValueError`` for any
    other shape (a batch of several texts, a 3-D tensor), for an empty sequence and, when
    ``model`` is given, for more tokens than ``kata.context_length(model)``.
    """
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 1:
        ids = ids[None]  # (T,) -> (1, T)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(
            f"{name} must be the token ids of one text, shape (T,) or (1, T); got shape "
            f"{tuple(ids.shape)}"
        )
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.shape[1] == 0:
        raise ValueError(f"{name} is empty: the text has no tokens")
    if model is not None:
        limit = context_length(model)
        if ids.shape[1] > limit:
            raise ValueError(
                f"{name} has {ids.shape[1]} tokens, but this model reads at most {limit} "
                f"(kata.context_length(model)): use a shorter text"
            )
        ids = ids.to(model.device)
    return ids.long()
