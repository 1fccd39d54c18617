"""Reference computations that the tests (``course/shared/support.py``), the figures command and the
notebooks compare the learner's answers with.

Written once, from the model and torch alone, never from the reference solutions
(``course/*/solution.py``), so they stay independent of the code they judge. The grader runs them on its trusted side only: its sandbox never holds
this module (a learner's own notebooks and `grader.py figures` use it on their machine).
"""

from __future__ import annotations

import torch

from kata.architectures import blocks
from kata.compat import block_hidden, with_block_hidden


def recorded(model, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hidden states, logits)``: what the model records for one text's ids ``(1, T)`` with
    whatever hooks are on it, ``(n_layers + 1, T, d_model)`` and ``(T, vocab_size)``, float32
    CPU (the hidden states' index 0 the embedding layer, the last after the final norm)."""
    input_ids = torch.as_tensor(input_ids).reshape(1, -1).to(model.device)
    with torch.no_grad():
        outputs = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                        output_hidden_states=True)
    return (torch.stack(outputs.hidden_states)[:, 0].float().cpu(),
            outputs.logits[0].float().cpu())


def hidden_states(model, input_ids: torch.Tensor) -> torch.Tensor:
    """``(n_layers + 1, T, d_model)`` float32 CPU: the model's own hidden states for one
    text's ids ``(1, T)`` (:func:`recorded`)."""
    return recorded(model, input_ids)[0]


def reference_logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The model's logits at every position, ``(T, vocab_size)`` float32 CPU."""
    with torch.no_grad():
        return model(torch.as_tensor(input_ids).to(model.device)).logits[0].float().cpu()


def log_probs_at_every_position(model, input_ids: torch.Tensor) -> torch.Tensor:
    """``(T, vocab_size)``: the model's log-probabilities of the next token at every position."""
    return torch.log_softmax(reference_logits(model, input_ids), dim=-1)


def reference_log_probs(model, input_ids: torch.Tensor) -> torch.Tensor:
    """``(vocab_size,)``: log-softmax of the logits at the last position."""
    return log_probs_at_every_position(model, input_ids)[-1]


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


# ----------------------------------------------------------------------------- patching (ex6, ex7)


def block_outputs(model, input_ids, requires_grad: bool = False):
    """Every block's output for one text: a list of ``n_layers`` tensors ``(T, d_model)``
    (``(1, T, d_model)``, the model's own tensors, with ``requires_grad``).

    Caught by forward hooks (removed before returning). Without ``requires_grad`` the run is under
    ``no_grad`` and the tensors are float32 CPU copies; with it, the run records autograd and the
    tensors are the model's own (on its device), ready for ``torch.autograd.grad``; the second
    element of the result is then the logits ``(T, vocab_size)``.
    """
    caught = []

    def catch(module, inputs, output):  # the whole (1, T, d_model) tensor: the graph uses it
        caught.append(block_hidden(output))

    def leaf(module, inputs, output):  # gradients start here, whatever the parameters say
        return output.detach().requires_grad_(True)

    handles = [block.register_forward_hook(catch) for block in blocks(model)]
    if requires_grad:
        handles.append(model.get_input_embeddings().register_forward_hook(leaf))
    try:
        ids = torch.as_tensor(input_ids).reshape(1, -1).to(model.device)
        with torch.set_grad_enabled(requires_grad):
            logits = model(ids).logits[0]
    finally:
        for handle in handles:
            handle.remove()
    if requires_grad:
        return caught, logits
    return [h[0].detach().float().cpu() for h in caught]


def logit_difference_of(logits: torch.Tensor, good_id: int, bad_id: int) -> torch.Tensor:
    """``log p(good) - log p(bad)`` at the last position of ``logits`` ``(..., T, vocab_size)``."""
    log_probs = torch.log_softmax(logits[..., -1, :].float(), dim=-1)
    return log_probs[..., good_id] - log_probs[..., bad_id]


def patched_metrics(model, corrupted_ids, sources, good_id: int, bad_id: int,
                    shift: int = 0) -> torch.Tensor:
    """Activation patching the plain way, one batched pass per block.

    ``sources``: ``n_layers`` tensors ``(T, d_model)``; in the pass for block ``l`` row ``p`` of
    a batch of ``T`` copies of ``corrupted_ids`` has position ``p`` of block ``l + shift``'s
    output replaced by ``sources[l][p]`` (``shift`` exists only to build a catalogued mistake's
    expected values). Returns the metric of every row, ``(n_layers, T)``, float64 CPU.
    """
    ids = torch.as_tensor(corrupted_ids).reshape(1, -1).to(model.device)
    n_tokens = ids.shape[1]
    rows = torch.arange(n_tokens)
    metrics = []
    for layer, block in enumerate(blocks(model)):
        source = sources[layer - shift] if 0 <= layer - shift < len(sources) else None
        if source is None:
            metrics.append(torch.full((n_tokens,), float("nan"), dtype=torch.float64))
            continue

        def patch(module, inputs, output, source=source):
            hidden = block_hidden(output).clone()
            hidden[rows, rows] = source.to(hidden.device, hidden.dtype)
            return with_block_hidden(output, hidden)

        handle = block.register_forward_hook(patch, prepend=True)
        try:
            with torch.no_grad():
                logits = model(ids.repeat(n_tokens, 1)).logits
        finally:
            handle.remove()
        metrics.append(logit_difference_of(logits, good_id, bad_id).double().cpu())
    return torch.stack(metrics)


def patching_reference(model, clean_ids, corrupted_ids, good_id: int, bad_id: int) -> dict:
    """Everything the patching tests compare with, computed from the model alone.

    ``{"clean", "corrupted"}``: the two metrics (floats); ``"clean_outputs"``,
    ``"corrupted_outputs"``: the block outputs (lists of ``(T, d_model)``); ``"effect"``: the
    normalised map ``(n_layers, T)`` float64 (0 the corrupted metric, 1 the clean one);
    ``"raw"``: the patched metrics themselves.
    """
    clean_outputs = block_outputs(model, clean_ids)
    corrupted_outputs = block_outputs(model, corrupted_ids)
    clean = logit_difference_of(reference_logits(model, clean_ids), good_id, bad_id).item()
    corrupted = logit_difference_of(reference_logits(model, corrupted_ids), good_id, bad_id).item()
    raw = patched_metrics(model, corrupted_ids, clean_outputs, good_id, bad_id)
    return {"clean": clean, "corrupted": corrupted, "clean_outputs": clean_outputs,
            "corrupted_outputs": corrupted_outputs, "raw": raw,
            "effect": (raw - corrupted) / (clean - corrupted)}


def attribution_reference(model, clean_ids, corrupted_ids, good_id: int, bad_id: int,
                          run: str = "corrupted") -> torch.Tensor:
    """Attribution patching, ``(n_layers, T)`` float64: ``(h_clean - h_corrupted) . d metric/d h``
    with the gradient of the ``run`` run (``"corrupted"``, the right one, or ``"clean"``), divided
    by ``clean - corrupted``. Uses ``torch.autograd.grad``, so no parameter gets a ``.grad``."""
    clean_outputs = block_outputs(model, clean_ids)
    corrupted_outputs = block_outputs(model, corrupted_ids)
    clean = logit_difference_of(reference_logits(model, clean_ids), good_id, bad_id).item()
    corrupted = logit_difference_of(reference_logits(model, corrupted_ids), good_id, bad_id).item()
    outputs, logits = block_outputs(model, corrupted_ids if run == "corrupted" else clean_ids,
                                    requires_grad=True)
    grads = torch.autograd.grad(logit_difference_of(logits, good_id, bad_id), outputs)
    rows = [((c - k).double() * g[0].detach().double().cpu()).sum(-1)
            for c, k, g in zip(clean_outputs, corrupted_outputs, grads)]
    return torch.stack(rows) / (clean - corrupted)
