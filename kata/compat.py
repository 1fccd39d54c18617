"""Every difference between library versions that the kata's infrastructure handles, in one place.

The exercises teach these differences in their own words (a block's output in exercise 3); the
infrastructure (model loading, tests' reference computations, the grader) calls the helpers here
instead of repeating version checks.

Facts:

* ``GPT2Block.forward`` returns a tuple ``(hidden, ...)`` up to transformers 5.2 and a plain
  tensor from 5.3 on; ``LlamaDecoderLayer`` returns a tensor from 4.54 on. Code that must work on
  both checks the output's type, never the version.
* transformers 5 takes ``dtype=`` in ``from_pretrained``/``from_config``; 4.x before 4.56 only
  knows ``torch_dtype=``.
* ``GPT2TokenizerFast`` takes ``vocab=``/``merges=`` objects in 5.x and ``vocab_file=``/
  ``merges_file=`` paths in 4.x.
* In 5.x ``output_hidden_states=True`` is recorded by forward hooks installed lazily on first use,
  from a registry of what each model class can record that a model's ``__init__`` fills; a model
  unpickled in a process where no model of its class was ever built has no entry there, and
  gives ``hidden_states=None`` (:func:`after_unpickling` fills it).
"""

from __future__ import annotations

from typing import Any

import torch



def block_hidden(output: Any) -> torch.Tensor:
    """The hidden-state tensor of a block's output, whether the block returned a tuple or a tensor.

    ``(B, T, d_model)``. On a tensor, ``output[0]`` would silently drop the batch dimension.
    """
    return output[0] if isinstance(output, tuple) else output


def with_block_hidden(output: Any, hidden: torch.Tensor) -> Any:
    """``output`` with its hidden state replaced by ``hidden``, keeping the output's type."""
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


def after_unpickling(module: torch.nn.Module) -> torch.nn.Module:
    """``module``, loaded with :mod:`pickle` (which skips ``__init__``), ready to record its
    hidden states as a freshly built one would: each transformers model class in it registered
    in transformers 5's output-capturing registry. Nothing to do on 4.x."""
    try:
        from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
    except ImportError:  # transformers 4.x records hidden states without hooks
        return module
    for sub in module.modules():
        if hasattr(sub, "_can_record_outputs") and hasattr(sub, "config"):
            _CAN_RECORD_REGISTRY[sub] = sub._can_record_outputs
    return module
