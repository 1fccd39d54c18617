"""Drawing recipes: how ``python grader.py figures`` draws each exercise's figures.

Each exercise that has figures has a ``drawing.py`` in its folder
(``course/ex1_hidden_states/drawing.py``) with one function per figure, named after the figure's
``recipe`` in its ``exercise.toml``::

    def fig06(f, inputs):
        ...  # f: the exercise's module (yours or the reference); inputs: an Inputs
        return f.plot_token_activations(...)  # a matplotlib Figure, or a str for a text figure

A recipe calls only its own exercise's functions; whatever else a figure needs (the hidden states
it displays, exercise 6's exact map under figure 15) comes from :class:`Inputs`, computed from the
model by :mod:`course.shared.reference`. Saving, legibility warnings and the reference drawing
beside the learner's are :mod:`grading.views.figures`'s work.
"""

from __future__ import annotations

import importlib
from typing import Callable

import kata


class Inputs:
    """The model, its tokenizer and the post's texts, with forward passes computed once."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self._hidden_of = {}

    def ids(self, text):
        """``(1, T)`` token ids of ``text``."""
        return self.tokenizer(text, return_tensors="pt")["input_ids"]

    def tokens(self, text) -> list[str]:
        """The token texts of ``text``, ``tokenizer.decode([id])`` of each id."""
        return [self.tokenizer.decode([i]) for i in self.tokenizer(text)["input_ids"]]

    def hidden_states(self, text):
        """``(n_layers + 1, T, d_model)`` for ``text``, straight from the model (computed once)."""
        if text not in self._hidden_of:
            from course.shared.reference import hidden_states

            self._hidden_of[text] = hidden_states(self.model, self.ids(text))
        return self._hidden_of[text]

    def token_id(self, word) -> int:
        """The id of ``word``, one token (the post's targets are)."""
        return self.tokenizer(word, add_special_tokens=False)["input_ids"][0]

    def patching_pair(self):
        """Exercises 6 and 7's prompts (:func:`patching_prompts`), and the tokens to label them
        with (``"iffel/osse"`` where the two prompts differ)."""
        labels = [a if a == b else f"{a}/{b}" for a, b in
                  zip(self.tokens(kata.CLEAN_PROMPT), self.tokens(kata.CORRUPTED_PROMPT))]
        return patching_prompts(self.tokenizer), labels


def patching_prompts(tokenizer):
    """``(clean_ids, corrupted_ids, good_id, bad_id)`` of exercises 6 and 7's Eiffel / Colosseum
    pair: ``(1, T)`` ids of each prompt, and the id of each answer's first token."""
    clean = tokenizer(kata.CLEAN_PROMPT, return_tensors="pt")["input_ids"]
    corrupted = tokenizer(kata.CORRUPTED_PROMPT, return_tensors="pt")["input_ids"]
    good = tokenizer(kata.CLEAN_ANSWER, add_special_tokens=False)["input_ids"][0]
    bad = tokenizer(kata.CORRUPTED_ANSWER, add_special_tokens=False)["input_ids"][0]
    return clean, corrupted, good, bad


def spread(n: int, count: int) -> list[int]:
    """``count`` indices spread evenly over ``range(n)``, first and last included."""
    count = min(count, n)
    return sorted({round(i * (n - 1) / max(count - 1, 1)) for i in range(count)})


def drawing(exercise, recipe: str) -> Callable | None:
    """The recipe's drawing function in the exercise's ``drawing.py`` (None if none)."""
    name = f"course.{exercise.module}.drawing"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if not name.startswith(str(error.name)):  # a missing import inside the drawing file
            raise
        return None
    found = getattr(module, recipe, None)
    return found if callable(found) else None
