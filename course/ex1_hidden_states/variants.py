"""Correct variants of exercise 1 (hidden states), in the styles learners write them.

Each ``code`` is executed on top of ``course/ex1_hidden_states/solution.py`` (its public names, such as
``torch``, ``kata``, ``plt`` and the exercise's functions, are in scope). Every test of
``course/ex1_hidden_states/test_public.py`` must pass with each of them.
"""

from course.shared.catalogue import Variant

# The post's notebook: plt.figure + plt.subplot, plt.plot(x, y, "o") per layer, one plt.plot
# call per variance square, the current figure returned with plt.gcf().
_NOTEBOOK_PYPLOT = '''
import numpy as np


def plot_token_activations(hidden_states, token_index, token_label):
    variance = activation_variance(hidden_states, token_index)
    acts = hidden_states[:, token_index, :].numpy()
    n_layers = acts.shape[0]
    names = ["Emb"] + ["L" + str(i) for i in range(n_layers - 1)]
    rng = np.random.default_rng(42)

    plt.figure(figsize=(12, 4))
    plt.subplot(1, 2, 1)
    for i in range(n_layers):
        x = i + rng.uniform(-0.3, 0.3, size=acts.shape[1])
        plt.plot(x, acts[i], "o", markersize=2, alpha=0.4)
    plt.xticks(range(n_layers), names)
    plt.xlabel("Layer")
    plt.ylabel("Activation")
    plt.title("activations of " + token_label)

    plt.subplot(1, 2, 2)
    for i in range(n_layers):
        plt.plot(i, variance[i].item(), "s", color="k")
    plt.xticks(range(n_layers), names)
    plt.xlabel("Layer")
    plt.ylabel("Variance")
    plt.title("variance of " + token_label)
    return plt.gcf()
'''

# GPT-2's own names with a fallback, torch.cat of the (1, T, d) tuple, the embedding tables found
# by attribute (model.transformer / model.model), the last block as model.model.layers[-1] or
# model.transformer.h[-1], and a hook that tests torch.is_tensor.
_ATTRIBUTE_NAMES = '''
def model_summary(model):
    config = model.config
    layers = getattr(config, "n_layer", None) or config.num_hidden_layers
    width = getattr(config, "n_embd", None) or config.hidden_size
    heads = getattr(config, "n_head", None) or config.num_attention_heads
    return {"n_layers": int(layers), "d_model": int(width), "n_heads": int(heads),
            "vocab_size": int(config.vocab_size)}


def _check_length(model, n_tokens):
    limit = kata.context_length(model)
    if n_tokens > limit:
        raise ValueError(f"the text has {n_tokens} tokens but the model reads at most {limit}")


def get_hidden_states(model, tokens):
    _check_length(model, tokens["input_ids"].shape[-1])
    with torch.no_grad():
        out = model(**tokens, output_hidden_states=True)
    return torch.cat(out.hidden_states, dim=0).float().cpu()  # (n_layers + 1, T, d): the batch is 1


def embedding_layer_output(model, input_ids):
    _check_length(model, input_ids.shape[-1])
    with torch.no_grad():
        if hasattr(model, "transformer"):  # GPT-2: token table + position table
            positions = torch.arange(input_ids.shape[-1])
            out = model.transformer.wte(input_ids) + model.transformer.wpe(positions)
        else:  # Llama: rotary positions live inside attention
            out = model.model.embed_tokens(input_ids)
    return out[0].float().cpu()


def raw_last_block_output(model, tokens):
    _check_length(model, tokens["input_ids"].shape[-1])
    if hasattr(model, "model"):
        last_block = model.model.layers[-1]
    else:
        last_block = model.transformer.h[-1]
    saved = []

    def grab(module, inputs, output):
        saved.append(output.detach() if torch.is_tensor(output) else output[0].detach())

    handle = last_block.register_forward_hook(grab)
    try:
        with torch.no_grad():
            model(**tokens)
    finally:
        handle.remove()
    return saved[0].squeeze(0).float().cpu()
'''

# numpy round-trips: hidden states stacked in numpy, the variance with np.var(ddof=1), the
# token index checked by hand.
_NUMPY_ROUND_TRIP = '''
import numpy as np


def get_hidden_states(model, tokens):
    input_ids = kata.one_sequence(tokens["input_ids"], model)
    with torch.no_grad():
        hidden = model(input_ids, output_hidden_states=True).hidden_states
    return torch.from_numpy(np.stack([h[0].float().cpu().numpy() for h in hidden]))


def activation_variance(hidden_states, token_index):
    n_tokens = hidden_states.shape[1]
    if token_index >= n_tokens or token_index < -n_tokens:
        raise IndexError(f"token {token_index} does not exist: use -{n_tokens} to {n_tokens - 1}")
    values = hidden_states[:, token_index, :].numpy()
    return torch.from_numpy(np.var(values, axis=1, ddof=1))
'''

# Everything by hand: a plain dict from tokenize, the variance as mean squared deviation, the
# figure with fig.add_subplot, one scatter for all dots, and squares joined by a line.
_BY_HAND = '''
def tokenize(tokenizer, text):
    if len(text) == 0:
        raise ValueError("empty text")
    encoded = tokenizer(text, return_tensors="pt")
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def activation_variance(hidden_states, token_index):
    token_index = kata.token_index(token_index, hidden_states.shape[1])
    x = hidden_states[:, token_index, :]
    d_model = x.shape[-1]
    mean = x.mean(dim=-1, keepdim=True)
    return ((x - mean) ** 2).sum(dim=-1) / (d_model - 1)


def plot_token_activations(hidden_states, token_index, token_label):
    import matplotlib.figure

    variance = activation_variance(hidden_states, token_index)
    token = hidden_states[:, token_index]
    n_layers, d_model = token.shape
    xs, ys = [], []
    for layer in range(n_layers):
        jitter = (torch.rand(d_model) - 0.5) * 0.6
        xs += (layer + jitter).tolist()
        ys += token[layer].tolist()
    fig = matplotlib.figure.Figure(figsize=(10, 4))
    left = fig.add_subplot(1, 2, 1)
    right = fig.add_subplot(1, 2, 2)
    left.scatter(xs, ys, s=3, c=[int(x + 0.5) for x in xs], cmap="viridis")
    right.plot(range(n_layers), variance, "s-", color="tab:red")
    labels = ["Emb"] + [f"L{i}" for i in range(n_layers - 1)]
    for ax in (left, right):
        ax.set_xticks(range(n_layers))
        ax.set_xticklabels(labels)
        ax.set_xlabel("layer")
    left.set_ylabel("activation value")
    right.set_ylabel("variance")
    fig.suptitle(f"token {token_index}: {token_label}")
    return fig
'''

# Object-oriented matplotlib the other way round: plt.subplots, ax.scatter with an explicit
# square marker for the variances, ticks set from a list comprehension; the hidden states
# through torch.stack along a new dimension 1 and squeeze.
_SUBPLOTS_SCATTER_SQUARES = '''
def get_hidden_states(model, tokens):
    input_ids = kata.one_sequence(tokens["input_ids"], model)
    with torch.no_grad():
        outputs = model(input_ids=input_ids, output_hidden_states=True)
    return torch.stack(outputs.hidden_states, dim=1).squeeze(0).detach().float().cpu()


def plot_token_activations(hidden_states, token_index, token_label):
    variance = activation_variance(hidden_states, token_index)
    n = hidden_states.shape[0]
    fig, axs = plt.subplots(ncols=2, figsize=(14, 5))
    generator = torch.Generator().manual_seed(1)
    for layer in range(n):
        values = hidden_states[layer, token_index]
        x = torch.full_like(values, float(layer)) + 0.4 * (torch.rand(len(values), generator=generator) - 0.5)
        axs[0].scatter(x, values, s=5, label=None)
    axs[1].scatter(list(range(n)), variance.tolist(), marker="s", s=40, color="black")
    for ax in axs:
        ax.set_xticks(list(range(n)), ["Emb"] + [f"L{b}" for b in range(n - 1)])
        ax.set(xlabel="hidden state")
    axs[0].set(ylabel="activation", title=f"{token_label!r}: activations")
    axs[1].set(ylabel="variance", title=f"{token_label!r}: variance")
    return fig
'''

# The last block's output caught where it arrives: a forward pre-hook on the final norm (its
# input is the last block's output); the embeddings as rows of the weight tables.
_FINAL_NORM_PRE_HOOK = '''
def embedding_layer_output(model, input_ids):
    ids = kata.one_sequence(input_ids, model)[0]
    with torch.no_grad():
        vectors = model.get_input_embeddings().weight[ids]
        if hasattr(model, "transformer") and hasattr(model.transformer, "wpe"):
            vectors = vectors + model.transformer.wpe.weight[: len(ids)]
    return vectors.float().cpu()


def raw_last_block_output(model, tokens):
    input_ids = kata.one_sequence(tokens["input_ids"], model)
    seen = {}

    def before_norm(module, args):
        seen["x"] = args[0].detach()

    handle = kata.final_norm(model).register_forward_pre_hook(before_norm)
    try:
        with torch.no_grad():
            model(input_ids)
    finally:
        handle.remove()
    return seen["x"][0].float().cpu()
'''

# The config as a dict, the forward pass under torch.inference_mode, the variance in float64
# numpy (the docstring names no dtype).
_CONFIG_DICT_INFERENCE_MODE = '''
import numpy as np


def model_summary(model):
    cfg = model.config.to_dict()
    pick = lambda *names: next(cfg[name] for name in names if name in cfg)
    return {"n_layers": pick("n_layer", "num_hidden_layers"), "d_model": pick("n_embd", "hidden_size"),
            "n_heads": pick("n_head", "num_attention_heads"), "vocab_size": cfg["vocab_size"]}


def get_hidden_states(model, tokens):
    input_ids = kata.one_sequence(tokens["input_ids"], model)
    with torch.inference_mode():
        states = model(input_ids, output_hidden_states=True).hidden_states
        return torch.stack([s.squeeze(0) for s in states]).float().cpu()


def activation_variance(hidden_states, token_index):
    token_index = kata.token_index(token_index, hidden_states.shape[1])
    rows = hidden_states[:, token_index, :].double().numpy()
    return torch.tensor([np.var(row, ddof=1) for row in rows])
'''

VARIANTS = [
    Variant(
        id="notebook-pyplot",
        exercise="ex1",
        summary="the notebook's pyplot: plt.figure + plt.subplot, plt.plot(x, y, 'o') per layer, "
        "one plt.plot call per variance square, plt.gcf()",
        code=_NOTEBOOK_PYPLOT,
    ),
    Variant(
        id="attribute-names",
        exercise="ex1",
        summary="GPT-2 config names with a fallback, torch.cat of the hidden states, "
        "model.model.layers / model.transformer.h, a torch.is_tensor hook, own length check",
        code=_ATTRIBUTE_NAMES,
    ),
    Variant(
        id="numpy-round-trip",
        exercise="ex1",
        summary="np.stack of the hidden states, np.var(ddof=1), the token index checked by hand",
        code=_NUMPY_ROUND_TRIP,
    ),
    Variant(
        id="by-hand",
        exercise="ex1",
        summary="a plain dict from tokenize, the variance as a mean squared deviation, "
        "Figure.add_subplot, one scatter call for all dots, squares joined by a line",
        code=_BY_HAND,
    ),
    Variant(
        id="subplots-scatter-squares",
        exercise="ex1",
        summary="torch.stack(dim=1).squeeze(0), plt.subplots with ax.scatter(marker='s') for "
        "the variances, ax.set(...)",
        code=_SUBPLOTS_SCATTER_SQUARES,
    ),
    Variant(
        id="final-norm-pre-hook",
        exercise="ex1",
        summary="the raw output caught by a forward pre-hook on the final norm, the embeddings "
        "as rows of the weight tables",
        code=_FINAL_NORM_PRE_HOOK,
    ),
    Variant(
        id="config-dict-inference-mode",
        exercise="ex1",
        summary="model.config.to_dict() with a name fallback, torch.inference_mode, the variance "
        "per layer in a float64 numpy loop",
        code=_CONFIG_DICT_INFERENCE_MODE,
    ),
]
