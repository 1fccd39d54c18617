"""Correct variants of exercise 3 (the scaling hook), in the styles learners write them.

Each ``code`` is executed on top of ``course/ex3_manipulation/solution.py`` (``torch``, ``plt``,
``kata`` and the exercise's functions are in scope). Every test of
``course/ex3_manipulation/test_public.py`` must pass with each of them.
"""

from course.shared.catalogue import Variant

# A hook that asks torch.is_tensor and scales with .mul; the blocks found as model.model.layers
# (Llama) or model.transformer.h (GPT-2), both correct; the target id checked by hand; the
# values collected with .item() and turned into a tensor at the end.
_IS_TENSOR_AND_MODEL_LAYERS = '''
def make_scaling_hook(factor):
    def hook(module, inputs, output):
        if torch.is_tensor(output):
            return output.mul(factor)
        return (output[0].mul(factor),) + tuple(output[1:])
    return hook


def scaling_experiment(model, input_ids, target_id, factor=0.8):
    if not 0 <= target_id < model.config.vocab_size:
        raise ValueError(f"target_id {target_id} is not in the vocabulary "
                         f"(0..{model.config.vocab_size - 1})")
    layers = model.model.layers if hasattr(model, "model") else model.transformer.h
    results = []
    for layer in layers:
        handle = layer.register_forward_hook(make_scaling_hook(factor), prepend=True)
        try:
            log_probs = next_token_log_probs(model, input_ids)
        finally:
            handle.remove()
        results.append(log_probs[target_id].item())
    return torch.tensor(results)
'''

# numpy for the ranking (argsort of the negated logits), Python floats with float(); the
# tokenizer's own tokenize/convert_tokens_to_ids for the target; torch.unique for the count of
# distinct ids of a tensor.
_NUMPY_AND_TOKENIZE = '''
import numpy as np


def text_stats(tokenizer, text):
    ids = tokenizer(text, return_tensors="pt")["input_ids"][0]
    return {
        "chars": len(text),
        "unique_chars": len(set(text)),
        "tokens": ids.numel(),
        "unique_tokens": torch.unique(ids).numel(),
    }


def target_token_id(tokenizer, word):
    pieces = tokenizer.tokenize(word)
    if len(pieces) != 1:
        raise ValueError(f"{word!r} must be a single token, but it splits into {pieces}")
    return tokenizer.convert_tokens_to_ids(pieces[0])


def top_next_tokens(model, tokenizer, input_ids, k=21):
    input_ids = kata.one_sequence(input_ids, model)
    with torch.no_grad():
        logits = model(input_ids).logits[0, -1].float().numpy()
    best = np.argsort(-logits)[:k]
    return [(tokenizer.decode([int(i)]), float(logits[i])) for i in best]
'''

# The input checked by hand (unsqueeze a (T,) tensor), F.log_softmax on logits[:, -1, :], a hook
# that unpacks the tuple with a star, the values kept as 0-d tensors and stacked, every handle
# kept in a list and removed in the finally block.
_BY_HAND = '''
import torch.nn.functional as F


def next_token_log_probs(model, input_ids):
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"expected one sequence of shape (1, T), got {tuple(input_ids.shape)}")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is empty")
    limit = kata.context_length(model)
    if input_ids.shape[1] > limit:
        raise ValueError(f"{input_ids.shape[1]} tokens is more than the context length {limit}")
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits[:, -1, :]
    return F.log_softmax(logits, dim=-1).squeeze(0).float()


def make_scaling_hook(factor):
    def hook(module, inputs, output):
        if isinstance(output, tuple):
            hidden, *rest = output
            return (hidden * factor, *rest)
        return output * factor
    return hook


def scaling_experiment(model, input_ids, target_id, factor=0.8):
    target_id = kata.token_id(target_id, model.config.vocab_size)
    values = []
    handles = []
    try:
        for block in kata.blocks(model):
            handles.append(block.register_forward_hook(make_scaling_hook(factor), prepend=True))
            values.append(next_token_log_probs(model, input_ids)[target_id])
            handles.pop().remove()
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(values)
'''

# The notebook's pyplot for figure 11: plt.figure, one plt.plot call per block, plt.axhline,
# plt.legend, plt.gcf(); the token statistics from tokenizer.encode and a Counter.
_NOTEBOOK_PYPLOT = '''
from collections import Counter


def text_stats(tokenizer, text):
    ids = tokenizer.encode(text)
    return {"chars": len(text), "unique_chars": len(Counter(text)),
            "tokens": len(ids), "unique_tokens": len(Counter(ids))}


def target_token_id(tokenizer, word):
    ids = tokenizer.encode(word, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError("not one token: " + " | ".join(tokenizer.decode([i]) for i in ids))
    return int(ids[0])


def plot_scaling_experiment(values, clean_value):
    plt.figure(figsize=(9, 3))
    for block, value in enumerate(values):
        plt.plot(block, float(value), "o", color="tab:blue")
    plt.axhline(y=clean_value, color="r", linestyle="dashed", label="clean run (%.3f)" % clean_value)
    plt.xlabel("Transformer block")
    plt.ylabel("Log-softmax")
    plt.legend()
    return plt.gcf()
'''

# Object-oriented matplotlib with ax.scatter for the markers and the clean value written as a
# text; the log-softmax by hand (logits minus logsumexp) and topk on the log-softmax's logits.
_SCATTER_AND_LOGSUMEXP = '''
def next_token_log_probs(model, input_ids):
    input_ids = kata.one_sequence(input_ids, model)
    with torch.no_grad():
        logits = model(input_ids).logits[0, -1].float().cpu()
    return logits - torch.logsumexp(logits, dim=0)


def top_next_tokens(model, tokenizer, input_ids, k=21):
    input_ids = kata.one_sequence(input_ids, model)
    with torch.no_grad():
        last = model(input_ids).logits[0, -1]
    values, indices = last.topk(k)
    return [(tokenizer.decode(index.item()), value.item()) for value, index in zip(values, indices)]


def plot_scaling_experiment(values, clean_value):
    fig, ax = plt.subplots(figsize=(10, 3.5))
    ax.scatter(range(len(values)), [float(v) for v in values], marker="o", zorder=3)
    ax.axhline(clean_value, ls="--", c="gray")
    ax.text(0, clean_value, f" clean {clean_value:.3f}", va="bottom")
    ax.set_xlabel("Transformer block")
    ax.set_ylabel("Log softmax")
    return fig
'''

# The log-probability read straight from the model's logits inside the loop, a lambda hook;
# figure 11 with longer axis labels and the clean value in the legend via ax.plot.
_LOGITS_IN_THE_LOOP = '''
def scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    target_id = kata.token_id(target_id, model.config.vocab_size)
    scale = lambda module, inputs, output: (
        (output[0] * factor, *output[1:]) if isinstance(output, tuple) else output * factor)
    out = torch.zeros(len(kata.blocks(model)))
    for i, block in enumerate(kata.blocks(model)):
        handle = block.register_forward_hook(scale, prepend=True)
        try:
            with torch.no_grad():
                logits = model(input_ids).logits
        finally:
            handle.remove()
        out[i] = torch.log_softmax(logits[0, -1].float(), dim=-1)[target_id]
    return out


def plot_scaling_experiment(values, clean_value):
    fig, ax = plt.subplots(figsize=(12, 4))
    n = len(values)
    ax.plot(list(range(n)), list(map(float, values)), linestyle="", marker="D", label="scaled")
    ax.plot([-0.5, n - 0.5], [clean_value, clean_value], "k--", label=f"clean = {clean_value:.2f}")
    ax.set_xlabel("Transformer block (scaled by 0.8)")
    ax.set_ylabel("Log-softmax of the target")
    ax.legend(loc="lower right")
    return fig
'''

# A hook that clones before scaling in place (clone().mul_() is a new tensor), the forward pass
# under torch.inference_mode, token counts from tokenizer.tokenize, and the clean line of
# figure 11 drawn with ax.hlines.
_CLONE_INFERENCE_HLINES = '''
def text_stats(tokenizer, text):
    pieces = tokenizer.tokenize(text)
    return {"chars": len(text), "unique_chars": len(set(text)),
            "tokens": len(pieces), "unique_tokens": len(set(pieces))}


def make_scaling_hook(factor):
    def hook(module, inputs, output):
        if isinstance(output, tuple):
            return (output[0].clone().mul_(factor),) + output[1:]
        return output.clone().mul_(factor)
    return hook


def next_token_log_probs(model, input_ids):
    input_ids = kata.one_sequence(input_ids, model)
    with torch.inference_mode():
        logits = model(input_ids).logits[0, -1]
        return torch.log_softmax(logits.float(), dim=-1).cpu()


def plot_scaling_experiment(values, clean_value):
    fig, ax = plt.subplots(figsize=(9, 3))
    n = len(values)
    ax.plot(range(n), values, "o")
    ax.hlines(clean_value, 0, n - 1, linestyles="dashed", colors="gray",
              label=f"clean ({clean_value:.3f})")
    ax.set_xlabel("Transformer block")
    ax.set_ylabel("Log softmax")
    ax.legend()
    return fig
'''

# tokenizer.batch_decode of the top ids (one id per row), pairs built with zip and tolist().
_BATCH_DECODE = '''
def top_next_tokens(model, tokenizer, input_ids, k=21):
    input_ids = kata.one_sequence(input_ids, model)
    with torch.no_grad():
        logits = model(input_ids).logits[0, -1]
    values, ids = torch.topk(logits, k=k)
    texts = tokenizer.batch_decode(ids.unsqueeze(-1))
    return list(zip(texts, values.tolist()))
'''

VARIANTS = [
    Variant(
        id="is-tensor-model-layers",
        exercise="ex3",
        summary="a torch.is_tensor hook with .mul, model.model.layers / model.transformer.h, "
        "target_id checked by hand, .item() values turned into a tensor",
        code=_IS_TENSOR_AND_MODEL_LAYERS,
    ),
    Variant(
        id="numpy-and-tokenize",
        exercise="ex3",
        summary="np.argsort for the top tokens with float(), tokenizer.tokenize for the target, "
        "torch.unique for the distinct ids of a tensor",
        code=_NUMPY_AND_TOKENIZE,
    ),
    Variant(
        id="by-hand",
        exercise="ex3",
        summary="input checks by hand, F.log_softmax on logits[:, -1, :], a hook unpacking "
        "hidden, *rest = output for tuples only, 0-d values stacked, handles in a list",
        code=_BY_HAND,
    ),
    Variant(
        id="notebook-pyplot",
        exercise="ex3",
        summary="figure 11 in pyplot: one plt.plot per block, plt.axhline, plt.legend, plt.gcf(); "
        "tokenizer.encode and a Counter",
        code=_NOTEBOOK_PYPLOT,
    ),
    Variant(
        id="scatter-and-logsumexp",
        exercise="ex3",
        summary="ax.scatter markers with the clean value as a text, log-softmax as logits minus "
        "logsumexp, Tensor.topk with .item()",
        code=_SCATTER_AND_LOGSUMEXP,
    ),
    Variant(
        id="logits-in-the-loop",
        exercise="ex3",
        summary="the log-softmax of the model's logits inside the loop, a lambda hook; figure 11 "
        "with diamond markers, a dashed ax.plot for the clean line, longer axis labels",
        code=_LOGITS_IN_THE_LOOP,
    ),
    Variant(
        id="clone-inference-hlines",
        exercise="ex3",
        summary="clone().mul_() in the hook, torch.inference_mode, tokenizer.tokenize counts, "
        "the clean line drawn with ax.hlines",
        code=_CLONE_INFERENCE_HLINES,
    ),
    Variant(
        id="batch-decode",
        exercise="ex3",
        summary="tokenizer.batch_decode of the top ids as rows, list(zip(texts, values.tolist()))",
        code=_BATCH_DECODE,
    ),
]
