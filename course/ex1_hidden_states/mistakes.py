"""Learner mistakes for exercise 1 (hidden states), and the diagnosis the tests must name.

Each ``code`` is executed on top of ``course/ex1_hidden_states/solution.py`` (its public names, such as
``torch``, ``kata``, ``plt`` and the exercise's functions, are in scope).
"""

from course.shared.catalogue import catalogue, template, wrapped_figure

_CHECK = 'kata.one_sequence(tokens["input_ids"], model)'

# Correct versions of the functions, each with a slot for the lines the mistakes change.
_hidden_states = template('''
def get_hidden_states(model, tokens):
    {CHECK}
    with {GRAD}:
        outputs = model(**tokens, output_hidden_states=True)
    return {STACKED}.float().cpu()
''', CHECK=_CHECK, GRAD="torch.no_grad()", STACKED="torch.stack(outputs.hidden_states)[:, 0]")

_embeddings = template('''
def embedding_layer_output(model, input_ids):
    {CHECK}
    with torch.no_grad():
        vectors = model.get_input_embeddings()(input_ids[0])
        {POSITIONS}
    return vectors.float().cpu()
''', CHECK="kata.one_sequence(input_ids, model)", POSITIONS='''
wpe = getattr(getattr(model, "transformer", None), "wpe", None)
if wpe is not None:
    vectors = vectors + wpe(torch.arange(input_ids.shape[1]))
''')

# raw_last_block_output: what the hook keeps (KEPT) and how the forward pass runs with it (RUN).
_raw_last_block = template('''
def raw_last_block_output(model, tokens):
    captured = {}

    def keep_output(module, inputs, output):
        captured["hidden"] = {KEPT}.detach()

    {CHECK}
    {RUN}
    return captured["hidden"][0].float().cpu()
''', KEPT="(output[0] if isinstance(output, tuple) else output)", CHECK=_CHECK, RUN='''
handle = kata.blocks(model)[-1].register_forward_hook(keep_output)
try:
    with torch.no_grad():
        model(**tokens)
finally:
    handle.remove()
''')

_variance = template('''
def activation_variance(hidden_states, token_index):
    {CHECK}
    return hidden_states[:, token_index, :].var({DIM})
''', CHECK="token_index = kata.token_index(token_index, hidden_states.shape[1])", DIM="dim=-1")

# The dot-plot mistakes draw the solution's figure, then move its left-panel dots.
_MOVE_DOTS = '''
import numpy as _np


def _move_dots(fig, new_x):
    dots_ax = fig.axes[0]
    for layer, collection in enumerate(dots_ax.collections):
        offsets = _np.asarray(collection.get_offsets())
        offsets[:, 0] = new_x(layer, len(offsets))
        collection.set_offsets(offsets)
'''


def _figure(change, before=""):
    return wrapped_figure("plot_token_activations", "hidden_states, token_index, token_label",
                          change, before)


def _dots_moved(new_x):
    return _figure(f"_move_dots(fig, {new_x})", before=_MOVE_DOTS)


MISTAKES = catalogue(
    "ex1",
    ("no-embedding-layer", "get_hidden_states drops hidden_states[0], the embedding layer",
     "embedding-layer-missing",
     _hidden_states(STACKED="torch.stack(outputs.hidden_states[1:])[:, 0]")),
    ("batch-dimension-left-in", "get_hidden_states returns (n_layers + 1, 1, T, d_model)",
     "batch-dimension-left-in", _hidden_states(STACKED="torch.stack(outputs.hidden_states)")),
    ("autograd-graph-kept", "get_hidden_states runs the model without torch.no_grad()",
     "autograd-graph-kept",
     "import contextlib\n" + _hidden_states(GRAD="contextlib.nullcontext()")),
    ("context-length-not-checked",
     "a text longer than the model's context reaches the model and fails deep inside it",
     "context-length-not-checked",
     _hidden_states(CHECK="") + _embeddings(CHECK="") + _raw_last_block(CHECK="")),
    ("raw-is-final-hidden-state",
     "raw_last_block_output returns hidden_states[-1], which has the final norm applied",
     "raw-output-is-final-hidden-state", '''
def raw_last_block_output(model, tokens):
    return get_hidden_states(model, tokens)[-1]  # already through the final norm
'''),
    ("no-position-embeddings",
     "embedding_layer_output forgets GPT-2's learned position embeddings",
     "position-embeddings-missing", _embeddings(POSITIONS="")),
    ("position-embeddings-assumed",
     "embedding_layer_output reads model.transformer.wpe on a model without one (Llama)",
     "position-embeddings-assumed",
     _embeddings(POSITIONS="vectors = vectors + model.transformer.wpe(torch.arange(input_ids.shape[1]))")),
    ("hook-never-removed", "raw_last_block_output never removes its forward hook",
     "hook-left-on-model", _raw_last_block(RUN='''
kata.blocks(model)[-1].register_forward_hook(keep_output)  # the handle is thrown away
with torch.no_grad():
    model(**tokens)
''')),
    ("hook-removed-without-finally",
     "raw_last_block_output removes its hook after the forward pass, not in finally",
     "hook-not-removed-on-error", _raw_last_block(RUN='''
handle = kata.blocks(model)[-1].register_forward_hook(keep_output)
with torch.no_grad():
    model(**tokens)  # if this raises, the next line never runs
handle.remove()
''')),
    ("hook-assumes-tuple",
     "the hook takes output[0], which drops the batch dimension of a tensor output",
     "hook-assumes-tuple", _raw_last_block(KEPT="output[0]")),  # right for a tuple only
    ("hook-assumes-tensor", "the hook treats the block output as a tensor and breaks on a tuple",
     "hook-assumes-tensor", _raw_last_block(KEPT="output")),  # a tuple has no .detach()
    ("variance-over-layers",
     "activation_variance takes the variance across the layers instead of over d_model",
     "variance-over-layers", _variance(DIM="dim=0")),
    ("population-variance", "activation_variance divides by d_model instead of d_model - 1",
     "population-variance", _variance(DIM="dim=-1, correction=0")),
    ("token-index-not-checked",
     "an out-of-range token index gets torch's IndexError, which names no valid range",
     "token-index-not-checked", _variance(CHECK="")),
    ("gpt2-config-names-only",
     "model_summary reads n_layer/n_embd/n_head, which a Llama config does not have",
     "gpt2-config-names-on-llama", '''
def model_summary(model):
    config = model.config
    return {"n_layers": config.n_layer, "d_model": config.n_embd,
            "n_heads": config.n_head, "vocab_size": config.vocab_size}
'''),
    ("tokenize-with-encode", "tokenize uses tokenizer.encode and returns no attention_mask",
     "tokenize-uses-encode", '''
def tokenize(tokenizer, text):
    if not text:
        raise ValueError("empty text")
    return {"input_ids": torch.tensor([tokenizer.encode(text)])}  # no attention_mask
'''),
    ("empty-text-not-checked", "tokenize accepts an empty text", "empty-text-accepted", '''
def tokenize(tokenizer, text):
    return tokenizer(text, return_tensors="pt")
'''),
    ("plot-layers-from-one", "the figure puts layer i's dots at x = i + 1",
     "figure-dots-at-wrong-layer",
     _dots_moved("lambda layer, n: layer + 1 + _np.linspace(-0.2, 0.2, n)")),
    ("plot-without-jitter", "the figure stacks each layer's dots on one vertical line",
     "figure-dots-without-jitter", _dots_moved("lambda layer, n: _np.full(n, float(layer))")),
    ("plot-blocks-numbered-from-one",
     "the figure labels the blocks L1, L2, ... instead of L0, L1, ...",
     "figure-layer-ticks-wrong", _figure('''
n_hidden = hidden_states.shape[0]
for ax in fig.axes:
    ax.set_xticks(range(n_hidden), ["Emb"] + [f"L{block + 1}" for block in range(n_hidden - 1)])
''')),
    ("tokenize-encode-wrapped",
     "tokenize calls tokenizer.encode and wraps the list into tensors itself",
     "tokenize-uses-encode", '''
def tokenize(tokenizer, text):
    if not text:
        raise ValueError("empty text")
    ids = torch.tensor([tokenizer.encode(text)], dtype=torch.int64)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
'''),
)
