"""Small fake models for structure tests: blocks that return a tensor or a tuple, a model that fails.

They are part of the learner-facing kata (not of the tests) because the grader runs a learner's
functions in a sandbox and sends these models there by value: the sandbox must know their
classes. They hold no answers.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from kata.compat import block_hidden


class ToyForwardError(Exception):
    """Raised on purpose by a fake model's forward pass."""


class ToyBlock(nn.Module):
    """A block that returns a tensor ``(1, T, 4)`` or a tuple with it first."""

    def __init__(self, returns_tuple: bool):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.returns_tuple = returns_tuple

    def forward(self, x):
        y = x + self.linear(x)
        return (y, None) if self.returns_tuple else y


class ToyModel(nn.Module):
    """Just enough of a GPT-2-shaped model for kata.blocks, kata.final_norm, kata.context_length.

    Its blocks return a tuple (like GPT-2's before transformers 5.3) or a plain tensor (like
    GPT-2's from 5.3 on and Llama's), whichever transformers version runs the tests.
    """

    def __init__(self, returns_tuple: bool, fails: bool = False):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.config = SimpleNamespace(n_positions=16)
            self.transformer = nn.Module()
            self.transformer.wte = nn.Embedding(20, 4)
            self.transformer.h = nn.ModuleList([ToyBlock(returns_tuple) for _ in range(2)])
            self.transformer.ln_f = nn.LayerNorm(4)
        self.fails = fails

    @property
    def device(self):
        return self.transformer.wte.weight.device

    def get_input_embeddings(self):
        return self.transformer.wte

    def forward(self, input_ids=None, attention_mask=None, output_hidden_states=False, **kwargs):
        if self.fails:
            raise ToyForwardError("the toy model's forward pass fails on purpose")
        x = self.transformer.wte(input_ids)
        hidden_states = [x]
        for block in self.transformer.h:
            x = block_hidden(block(x))
            hidden_states.append(x)
        hidden_states[-1] = self.transformer.ln_f(x)  # as real models do
        return SimpleNamespace(
            logits=hidden_states[-1],  # a real model would unembed; no test reads the logits
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            last_block_output=x,
        )


class TensorBlock(nn.Module):
    """Stands in for a block that returns a tensor (GPT-2 from transformers 5.3, Llama)."""

    def forward(self, x):
        return 2 * x


class TupleBlock(nn.Module):
    """Stands in for a block that returns a tuple (GPT-2 up to transformers 5.2)."""

    def __init__(self):
        super().__init__()
        self.extra = torch.arange(3.0)  # stands for the tuple's other elements (e.g. a cache)

    def forward(self, x):
        return (2 * x, self.extra)


class CallOnlyTokenizer:
    """A real tokenizer that can only be called (``tokenizer(text, ...)``), as the post does.

    Everything else is the wrapped tokenizer's, except ``encode``, which raises an
    ``AttributeError`` saying so: a test hands it to a function that must call the tokenizer
    object itself.
    """

    ENCODE_MESSAGE = ("this tokenizer is to be called, tokenizer(text, return_tensors='pt'), "
                      "not asked to encode")

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        if name == "encode":
            raise AttributeError(self.ENCODE_MESSAGE)
        if name.startswith("__") or name == "_tokenizer":  # copying and pickling look these up
            raise AttributeError(name)
        return getattr(self._tokenizer, name)
