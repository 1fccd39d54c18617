"""Correct variants of exercise 4 (the scaling experiment in one pass), in learners' styles.

Each ``code`` is executed on top of ``course/ex4_fast_scaling/solution.py`` (``torch`` and ``kata`` are
in scope). A learner writes the hook factory too (the solution's is private), so each variant
brings its own. Every test of ``course/ex4_fast_scaling/`` (public and secret) must pass with
each of them.
"""

from course.shared.catalogue import Variant

# A torch.is_tensor hook that grows the batch with torch.cat((..., hidden[0:1].mul(factor))).
_IS_TENSOR_CAT = '''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    target_id = kata.token_id(target_id, model.config.vocab_size)

    def grow(module, inputs, output):
        if torch.is_tensor(output):
            return torch.cat((output, output[0:1].mul(factor)), dim=0)
        hidden = output[0]
        return (torch.cat((hidden, hidden[0:1].mul(factor)), dim=0),) + tuple(output[1:])

    handles = []
    try:
        for block in kata.blocks(model):
            handles.append(block.register_forward_hook(grow, prepend=True))
        with torch.no_grad():
            final = model.base_model(input_ids=input_ids, use_cache=False).last_hidden_state
            logits = model.get_output_embeddings()(final[:, -1])
    finally:
        for handle in handles:
            handle.remove()
    return torch.log_softmax(logits.float(), dim=-1)[1:, target_id].cpu()
'''

# The parts by name, both correct: model.model / model.transformer for the trunk,
# model.model.layers / model.transformer.h for the blocks, model.lm_head for the unembedding;
# the hook unpacks a tuple with a star; outputs[0] instead of .last_hidden_state.
_MODEL_LAYERS_BY_NAME = '''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    if not 0 <= target_id < model.config.vocab_size:
        raise ValueError(f"{target_id} is not a token id (vocabulary of {model.config.vocab_size})")
    if hasattr(model, "model"):
        trunk, layers = model.model, model.model.layers
    else:
        trunk, layers = model.transformer, model.transformer.h

    def add_scaled_row(module, args, output):
        if isinstance(output, tuple):
            hidden, *rest = output
            return (torch.cat([hidden, factor * hidden[:1]]), *rest)
        return torch.cat([output, factor * output[:1]])

    handles = [layer.register_forward_hook(add_scaled_row, prepend=True) for layer in layers]
    try:
        with torch.no_grad():
            outputs = trunk(input_ids, use_cache=False)
            logits = model.lm_head(outputs[0][:, -1, :])
    finally:
        for handle in handles:
            handle.remove()
    log_probs = logits.log_softmax(dim=-1)
    return log_probs[1:, target_id].float()
'''

# torch.stack of the unbound rows plus the new one; the last position kept as (rows, 1, d) for
# the unembedding; handles removed from a list with pop.
_STACK_ROWS = '''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    target_id = kata.token_id(target_id, model.config.vocab_size)

    def hook(module, inputs, output):
        is_tuple = isinstance(output, tuple)
        hidden = output[0] if is_tuple else output
        grown = torch.stack([*hidden.unbind(0), hidden[0] * factor])
        return (grown,) + output[1:] if is_tuple else grown

    handles = []
    try:
        for block in kata.blocks(model):
            handles.append(block.register_forward_hook(hook, prepend=True))
        with torch.no_grad():
            hidden = model.base_model(input_ids, use_cache=False).last_hidden_state
            logits = model.get_output_embeddings()(hidden[:, -1:, :])[:, 0]
    finally:
        while handles:
            handles.pop().remove()
    values = torch.log_softmax(logits, dim=-1)[:, target_id]
    return values[1:].float()
'''

# Checks by hand ((T,) unsqueezed, the context length, the target id read from the
# unembedding's size), a hook factory, and the final log-softmax in float64 through numpy.
_BY_HAND_NUMPY = '''
import numpy as np


def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    if input_ids.dim() == 1:
        input_ids = input_ids[None, :]
    n_tokens = input_ids.shape[-1]
    if n_tokens == 0 or input_ids.shape[0] != 1:
        raise ValueError("give one non-empty sequence of token ids")
    if n_tokens > kata.context_length(model):
        raise ValueError(f"{n_tokens} tokens do not fit the model's context of "
                         f"{kata.context_length(model)}")
    vocab = model.get_output_embeddings().weight.shape[0]
    if target_id < 0 or target_id >= vocab:
        raise ValueError(f"target_id={target_id} is not a valid token id (0 to {vocab - 1})")

    def make_hook():
        def hook(module, inputs, output):
            hidden = output if isinstance(output, torch.Tensor) else output[0]
            new = torch.cat([hidden, hidden[:1] * factor], dim=0)
            return new if isinstance(output, torch.Tensor) else (new, *output[1:])
        return hook

    blocks = kata.blocks(model)
    handles = []
    try:
        for block in blocks:
            handles.append(block.register_forward_hook(make_hook(), prepend=True))
        with torch.no_grad():
            out = model.base_model(input_ids=input_ids, use_cache=False)
            last = out.last_hidden_state[:, -1, :]
            logits = model.get_output_embeddings()(last).double().cpu().numpy()
    finally:
        for h in handles:
            h.remove()
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return torch.from_numpy(log_probs[1:, target_id].astype(np.float32))
'''

# The whole model with logits_to_keep=1 (transformers unembeds the last position only).
_LOGITS_TO_KEEP = '''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    target_id = kata.token_id(target_id, model.config.vocab_size)

    def append_scaled(module, inputs, output):
        if isinstance(output, tuple):
            return (torch.cat([output[0], output[0][:1] * factor]),) + output[1:]
        return torch.cat([output, output[:1] * factor])

    handles = []
    try:
        for block in kata.blocks(model):
            handles.append(block.register_forward_hook(append_scaled, prepend=True))
        with torch.no_grad():
            logits = model(input_ids, use_cache=False, logits_to_keep=1).logits[:, -1]
    finally:
        for handle in handles:
            handle.remove()
    return logits.float().log_softmax(-1)[1:, target_id].cpu()
'''

# torch.inference_mode, the clean row taken with narrow, the rows' log-softmax with
# torch.nn.functional, the result returned from inside the try.
_INFERENCE_MODE_NARROW = '''
import torch.nn.functional as F


def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    target_id = kata.token_id(target_id, model.config.vocab_size)

    def hook(module, inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        hidden = torch.cat([hidden, hidden.narrow(0, 0, 1) * factor])
        return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden

    handles = []
    try:
        for block in kata.blocks(model):
            handles.append(block.register_forward_hook(hook, prepend=True))
        with torch.inference_mode():
            final = model.base_model(input_ids=input_ids, use_cache=False)[0]
            logits = model.get_output_embeddings()(final[:, -1])
            return F.log_softmax(logits.float(), dim=-1)[1:, target_id].cpu()
    finally:
        for handle in handles:
            handle.remove()
'''

VARIANTS = [
    Variant(
        id="is-tensor-cat",
        exercise="ex4",
        summary="a torch.is_tensor hook growing the batch with torch.cat and .mul",
        code=_IS_TENSOR_CAT,
    ),
    Variant(
        id="model-layers-by-name",
        exercise="ex4",
        summary="model.model.layers / model.transformer.h and model.lm_head by name, "
        "hidden, *rest = output for tuples, outputs[0], target id checked by hand",
        code=_MODEL_LAYERS_BY_NAME,
    ),
    Variant(
        id="stack-rows",
        exercise="ex4",
        summary="torch.stack of the unbound rows plus the new one, the last position kept as "
        "(rows, 1, d), handles popped from a list",
        code=_STACK_ROWS,
    ),
    Variant(
        id="by-hand-numpy",
        exercise="ex4",
        summary="every input check by hand, the vocabulary read from the unembedding, the "
        "log-softmax in float64 numpy",
        code=_BY_HAND_NUMPY,
    ),
    Variant(
        id="logits-to-keep",
        exercise="ex4",
        summary="the whole model called with logits_to_keep=1 instead of base_model + unembedding",
        code=_LOGITS_TO_KEEP,
    ),
    Variant(
        id="inference-mode-narrow",
        exercise="ex4",
        summary="torch.inference_mode, hidden.narrow(0, 0, 1), F.log_softmax, the return inside "
        "the try",
        code=_INFERENCE_MODE_NARROW,
    ),
]
