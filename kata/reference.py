"""Reference computations that the tests (``tests/support.py``), the figures command and the
notebooks compare the learner's answers with.

Written once, from the model and torch alone, never from ``solutions/``, so they stay independent
of the code they judge. Trusted side only: the grader's sandbox never holds this module.
"""

from __future__ import annotations

import torch

from .architectures import blocks
from .compat import block_hidden, with_block_hidden


def reference_logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The model's logits at every position, ``(T, vocab_size)`` float32 CPU."""
    with torch.no_grad():
        return model(torch.as_tensor(input_ids).to(model.device)).logits[0].float().cpu()


def reference_log_probs(model, input_ids: torch.Tensor) -> torch.Tensor:
    """``(vocab_size,)``: log-softmax of the logits at the last position."""
    return torch.log_softmax(reference_logits(model, input_ids)[-1], dim=-1)


def scaled_block_log_probs(model, input_ids, target_id: int, factor: float) -> torch.Tensor:
    """The scaling experiment the slow way: ``(n_layers,)``, one forward pass per block with that
    block's output times ``factor``; entry i is the target's log-probability."""

    def scale(module, inputs, output):
        return with_block_hidden(output, block_hidden(output) * factor)

    values = []
    for block in blocks(model):
        handle = block.register_forward_hook(scale, prepend=True)
        try:
            values.append(reference_log_probs(model, input_ids)[target_id])
        finally:
            handle.remove()
    return torch.stack(values)
