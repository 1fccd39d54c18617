"""Learner mistakes for exercise 1 (hidden states), and the diagnosis the tests must name.

Each ``code`` is executed on top of ``solutions/ex1_hidden_states.py`` (its public names, such as
``torch``, ``kata``, ``plt`` and the exercise's functions, are in scope).
"""

from tests.mistakes import Mistake

_HIDDEN_STATES_WITHOUT_EMBEDDINGS = '''
def get_hidden_states(model, tokens):
    kata.one_sequence(tokens["input_ids"], model)
    with torch.no_grad():
        outputs = model(**tokens, output_hidden_states=True)
    return torch.stack(outputs.hidden_states[1:])[:, 0].float().cpu()  # skips index 0
'''

_BATCH_DIMENSION_LEFT_IN = '''
def get_hidden_states(model, tokens):
    kata.one_sequence(tokens["input_ids"], model)
    with torch.no_grad():
        outputs = model(**tokens, output_hidden_states=True)
    return torch.stack(outputs.hidden_states).float().cpu()  # (n_layers + 1, 1, T, d_model)
'''

_AUTOGRAD_GRAPH_KEPT = '''
def get_hidden_states(model, tokens):
    kata.one_sequence(tokens["input_ids"], model)
    outputs = model(**tokens, output_hidden_states=True)  # no torch.no_grad()
    return torch.stack(outputs.hidden_states)[:, 0].float().cpu()
'''

_CONTEXT_LENGTH_NOT_CHECKED = '''
def get_hidden_states(model, tokens):
    with torch.no_grad():  # never compares the number of tokens with kata.context_length(model)
        outputs = model(**tokens, output_hidden_states=True)
    return torch.stack(outputs.hidden_states)[:, 0].float().cpu()


def embedding_layer_output(model, input_ids):
    with torch.no_grad():
        vectors = model.get_input_embeddings()(input_ids[0])
        wpe = getattr(getattr(model, "transformer", None), "wpe", None)
        if wpe is not None:
            vectors = vectors + wpe(torch.arange(input_ids.shape[1]))
    return vectors.float().cpu()


def raw_last_block_output(model, tokens):
    captured = {}

    def keep_output(module, inputs, output):
        captured["hidden"] = (output[0] if isinstance(output, tuple) else output).detach()

    handle = kata.blocks(model)[-1].register_forward_hook(keep_output)
    try:
        with torch.no_grad():
            model(**tokens)
    finally:
        handle.remove()
    return captured["hidden"][0].float().cpu()
'''

_RAW_IS_LAST_HIDDEN_STATE = '''
def raw_last_block_output(model, tokens):
    return get_hidden_states(model, tokens)[-1]  # already through the final norm
'''

_NO_POSITION_EMBEDDINGS = '''
def embedding_layer_output(model, input_ids):
    kata.one_sequence(input_ids, model)
    with torch.no_grad():
        return model.get_input_embeddings()(input_ids[0]).float().cpu()  # GPT-2 also needs wpe
'''

_POSITION_EMBEDDINGS_ASSUMED = '''
def embedding_layer_output(model, input_ids):
    kata.one_sequence(input_ids, model)
    positions = torch.arange(input_ids.shape[1])
    with torch.no_grad():
        vectors = model.get_input_embeddings()(input_ids[0]) + model.transformer.wpe(positions)
    return vectors.float().cpu()
'''

_HOOK_NEVER_REMOVED = '''
def raw_last_block_output(model, tokens):
    captured = {}

    def keep_output(module, inputs, output):
        captured["hidden"] = (output[0] if isinstance(output, tuple) else output).detach()

    kata.one_sequence(tokens["input_ids"], model)
    kata.blocks(model)[-1].register_forward_hook(keep_output)  # the handle is thrown away
    with torch.no_grad():
        model(**tokens)
    return captured["hidden"][0].float().cpu()
'''

_HOOK_REMOVED_WITHOUT_FINALLY = '''
def raw_last_block_output(model, tokens):
    captured = {}

    def keep_output(module, inputs, output):
        captured["hidden"] = (output[0] if isinstance(output, tuple) else output).detach()

    kata.one_sequence(tokens["input_ids"], model)
    handle = kata.blocks(model)[-1].register_forward_hook(keep_output)
    with torch.no_grad():
        model(**tokens)  # if this raises, the next line never runs
    handle.remove()
    return captured["hidden"][0].float().cpu()
'''

_HOOK_ASSUMES_TUPLE = '''
def raw_last_block_output(model, tokens):
    kata.one_sequence(tokens["input_ids"], model)
    captured = {}

    def keep_output(module, inputs, output):
        captured["hidden"] = output[0].detach()  # right for a tuple, wrong for a tensor

    handle = kata.blocks(model)[-1].register_forward_hook(keep_output)
    try:
        with torch.no_grad():
            model(**tokens)
    finally:
        handle.remove()
    return captured["hidden"][0].float().cpu()
'''

_HOOK_ASSUMES_TENSOR = '''
def raw_last_block_output(model, tokens):
    kata.one_sequence(tokens["input_ids"], model)
    captured = {}

    def keep_output(module, inputs, output):
        captured["hidden"] = output.detach()  # a tuple has no .detach()

    handle = kata.blocks(model)[-1].register_forward_hook(keep_output)
    try:
        with torch.no_grad():
            model(**tokens)
    finally:
        handle.remove()
    return captured["hidden"][0].float().cpu()
'''

_VARIANCE_OVER_LAYERS = '''
def activation_variance(hidden_states, token_index):
    token_index = kata.token_index(token_index, hidden_states.shape[1])
    return hidden_states[:, token_index, :].var(dim=0)  # (d_model,): across the layers
'''

_POPULATION_VARIANCE = '''
def activation_variance(hidden_states, token_index):
    token_index = kata.token_index(token_index, hidden_states.shape[1])
    return hidden_states[:, token_index, :].var(dim=-1, correction=0)
'''

_TOKEN_INDEX_NOT_CHECKED = '''
def activation_variance(hidden_states, token_index):
    return hidden_states[:, token_index, :].var(dim=-1)  # torch's IndexError names no token
'''

_GPT2_CONFIG_NAMES_ONLY = '''
def model_summary(model):
    config = model.config
    return {"n_layers": config.n_layer, "d_model": config.n_embd,
            "n_heads": config.n_head, "vocab_size": config.vocab_size}
'''

_TOKENIZE_WITH_ENCODE = '''
def tokenize(tokenizer, text):
    if not text:
        raise ValueError("empty text")
    return {"input_ids": torch.tensor([tokenizer.encode(text)])}  # no attention_mask
'''

_EMPTY_TEXT_NOT_CHECKED = '''
def tokenize(tokenizer, text):
    return tokenizer(text, return_tensors="pt")
'''

# The plot mistakes wrap the solution's figure and move its left-panel dots.
_MOVE_DOTS = '''
import numpy as _np

_solution_plot = plot_token_activations


def _move_dots(fig, new_x):
    dots_ax = fig.axes[0]
    for layer, collection in enumerate(dots_ax.collections):
        offsets = _np.asarray(collection.get_offsets())
        offsets[:, 0] = new_x(layer, len(offsets))
        collection.set_offsets(offsets)
    return fig
'''

_PLOT_LAYERS_FROM_ONE = _MOVE_DOTS + '''

def plot_token_activations(hidden_states, token_index, token_label):
    fig = _solution_plot(hidden_states, token_index, token_label)
    return _move_dots(fig, lambda layer, n: layer + 1 + _np.linspace(-0.2, 0.2, n))
'''

_PLOT_WITHOUT_JITTER = _MOVE_DOTS + '''

def plot_token_activations(hidden_states, token_index, token_label):
    fig = _solution_plot(hidden_states, token_index, token_label)
    return _move_dots(fig, lambda layer, n: _np.full(n, float(layer)))
'''

_PLOT_BLOCKS_NUMBERED_FROM_ONE = '''
_solution_plot = plot_token_activations


def plot_token_activations(hidden_states, token_index, token_label):
    fig = _solution_plot(hidden_states, token_index, token_label)
    n_hidden = hidden_states.shape[0]
    for ax in fig.axes:
        ax.set_xticks(range(n_hidden), ["Emb"] + [f"L{block + 1}" for block in range(n_hidden - 1)])
    return fig
'''


def _mistake(id, summary, diagnosis, code):
    return Mistake(id=id, exercise="ex1", summary=summary, diagnosis=diagnosis, code=code)


MISTAKES = [
    _mistake("no-embedding-layer",
             "get_hidden_states drops hidden_states[0], the embedding layer",
             "embedding-layer-missing", _HIDDEN_STATES_WITHOUT_EMBEDDINGS),
    _mistake("batch-dimension-left-in",
             "get_hidden_states returns (n_layers + 1, 1, T, d_model)",
             "batch-dimension-left-in", _BATCH_DIMENSION_LEFT_IN),
    _mistake("autograd-graph-kept",
             "get_hidden_states runs the model without torch.no_grad()",
             "autograd-graph-kept", _AUTOGRAD_GRAPH_KEPT),
    _mistake("context-length-not-checked",
             "a text longer than the model's context reaches the model and fails deep inside it",
             "context-length-not-checked", _CONTEXT_LENGTH_NOT_CHECKED),
    _mistake("raw-is-final-hidden-state",
             "raw_last_block_output returns hidden_states[-1], which has the final norm applied",
             "raw-output-is-final-hidden-state", _RAW_IS_LAST_HIDDEN_STATE),
    _mistake("no-position-embeddings",
             "embedding_layer_output forgets GPT-2's learned position embeddings",
             "position-embeddings-missing", _NO_POSITION_EMBEDDINGS),
    _mistake("position-embeddings-assumed",
             "embedding_layer_output reads model.transformer.wpe on a model without one (Llama)",
             "position-embeddings-assumed", _POSITION_EMBEDDINGS_ASSUMED),
    _mistake("hook-never-removed",
             "raw_last_block_output never removes its forward hook",
             "hook-left-on-model", _HOOK_NEVER_REMOVED),
    _mistake("hook-removed-without-finally",
             "raw_last_block_output removes its hook after the forward pass, not in finally",
             "hook-not-removed-on-error", _HOOK_REMOVED_WITHOUT_FINALLY),
    _mistake("hook-assumes-tuple",
             "the hook takes output[0], which drops the batch dimension of a tensor output",
             "hook-assumes-tuple", _HOOK_ASSUMES_TUPLE),
    _mistake("hook-assumes-tensor",
             "the hook treats the block output as a tensor and breaks on a tuple",
             "hook-assumes-tensor", _HOOK_ASSUMES_TENSOR),
    _mistake("variance-over-layers",
             "activation_variance takes the variance across the layers instead of over d_model",
             "variance-over-layers", _VARIANCE_OVER_LAYERS),
    _mistake("population-variance",
             "activation_variance divides by d_model instead of d_model - 1",
             "population-variance", _POPULATION_VARIANCE),
    _mistake("token-index-not-checked",
             "an out-of-range token index gets torch's IndexError, which names no valid range",
             "token-index-not-checked", _TOKEN_INDEX_NOT_CHECKED),
    _mistake("gpt2-config-names-only",
             "model_summary reads n_layer/n_embd/n_head, which a Llama config does not have",
             "gpt2-config-names-on-llama", _GPT2_CONFIG_NAMES_ONLY),
    _mistake("tokenize-with-encode",
             "tokenize uses tokenizer.encode and returns no attention_mask",
             "tokenize-key-missing", _TOKENIZE_WITH_ENCODE),
    _mistake("empty-text-not-checked",
             "tokenize accepts an empty text",
             "empty-text-accepted", _EMPTY_TEXT_NOT_CHECKED),
    _mistake("plot-layers-from-one",
             "the figure puts layer i's dots at x = i + 1",
             "figure-dots-at-wrong-layer", _PLOT_LAYERS_FROM_ONE),
    _mistake("plot-without-jitter",
             "the figure stacks each layer's dots on one vertical line",
             "figure-dots-without-jitter", _PLOT_WITHOUT_JITTER),
    _mistake("plot-blocks-numbered-from-one",
             "the figure labels the blocks L1, L2, ... instead of L0, L1, ...",
             "figure-layer-ticks-wrong", _PLOT_BLOCKS_NUMBERED_FROM_ONE),
]
