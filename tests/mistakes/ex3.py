"""Learner mistakes for exercise 3 (the scaling hook) and the words the tests answer them with.

Each ``code`` is executed on top of ``solutions/ex3_manipulation.py`` (its names, such as
``torch``, ``kata``, ``plt``, ``make_scaling_hook``, ``next_token_log_probs`` and the helper
``_next_token_logits``, are in scope), so the other solution functions call the patched ones.
"""

from tests.mistakes import Mistake

# ----------------------------------------------------------------------------- the prediction

_LOGITS_NOT_LOG_SOFTMAX = '''
def next_token_log_probs(model, input_ids):
    return _next_token_logits(model, input_ids)  # raw logits, never normalised
'''

_SOFTMAX_NOT_LOG_SOFTMAX = '''
def next_token_log_probs(model, input_ids):
    return torch.softmax(_next_token_logits(model, input_ids), dim=-1)  # probabilities
'''

_LOG_SOFTMAX_OVER_POSITIONS = '''
def next_token_log_probs(model, input_ids):
    input_ids = torch.as_tensor(input_ids).reshape(1, -1)
    with torch.no_grad():
        logits = model(input_ids).logits  # (1, T, vocab_size)
    return torch.log_softmax(logits, dim=1)[0, -1]  # normalised over the T positions
'''

_FIRST_POSITION = '''
def _next_token_logits(model, input_ids):
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise ValueError("one non-empty sequence please")
    if input_ids.shape[1] > kata.context_length(model):
        raise ValueError(f"longer than the context length {kata.context_length(model)}")
    with torch.no_grad():
        logits = model(input_ids).logits
    return logits[0, 0].float().cpu()  # the first position, not the last
'''

_NO_GRAD_MISSING = '''
def _next_token_logits(model, input_ids):
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise ValueError("one non-empty sequence please")
    if input_ids.shape[1] > kata.context_length(model):
        raise ValueError(f"longer than the context length {kata.context_length(model)}")
    return model(input_ids).logits[0, -1].float().cpu()  # builds an autograd graph
'''

_CONTEXT_LENGTH_NOT_CHECKED = '''
def _next_token_logits(model, input_ids):
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise ValueError("one non-empty sequence please")
    with torch.no_grad():  # a too-long text reaches the model and fails deep inside it
        return model(input_ids).logits[0, -1].float().cpu()
'''

_TOP_TOKENS_LOWEST_FIRST = '''
def top_next_tokens(model, tokenizer, input_ids, k=21):
    logits = _next_token_logits(model, input_ids)
    top = torch.topk(logits, k)
    pairs = [(tokenizer.decode([i]), v) for i, v in zip(top.indices.tolist(), top.values.tolist())]
    return sorted(pairs, key=lambda pair: pair[1])  # ascending
'''

_TOP_TOKENS_LOG_PROBS = '''
def top_next_tokens(model, tokenizer, input_ids, k=21):
    log_probs = next_token_log_probs(model, input_ids)  # not the logits of figure 10
    top = torch.topk(log_probs, k)
    return [(tokenizer.decode([i]), v) for i, v in zip(top.indices.tolist(), top.values.tolist())]
'''

# ----------------------------------------------------------------------------- the tokens

_UNIQUE_TOKENS_NOT_DEDUPLICATED = '''
def text_stats(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    return {"chars": len(text), "unique_chars": len(set(text)),
            "tokens": len(ids), "unique_tokens": len(ids)}  # no set()
'''

_MULTI_TOKEN_TARGET_TRUNCATED = '''
def target_token_id(tokenizer, word):
    return tokenizer(word, add_special_tokens=False)["input_ids"][0]  # keeps the first piece
'''

# ----------------------------------------------------------------------------- the hook

_HOOK_TENSOR_AS_TUPLE = '''
def make_scaling_hook(factor):
    def scale_output(module, inputs, output):
        hidden, *rest = output  # the post's unpacking: on a tensor, hidden is output[0]
        return (hidden * factor, *rest)
    return scale_output
'''

_HOOK_TUPLE_AS_TENSOR = '''
def make_scaling_hook(factor):
    def scale_output(module, inputs, output):
        return output * factor  # a tuple cannot be multiplied by a float
    return scale_output
'''

_HOOK_IN_PLACE = '''
def make_scaling_hook(factor):
    def scale_output(module, inputs, output):
        if isinstance(output, tuple):
            output[0].mul_(factor)
            return output
        return output.mul_(factor)
    return scale_output
'''

# ----------------------------------------------------------------------------- the experiment

_HOOK_NEVER_REMOVED = '''
def scaling_experiment(model, input_ids, target_id, factor=0.8):
    hook = make_scaling_hook(factor)
    values = torch.empty(len(kata.blocks(model)))
    for i, block in enumerate(kata.blocks(model)):
        block.register_forward_hook(hook, prepend=True)  # the handle is thrown away
        values[i] = next_token_log_probs(model, input_ids)[target_id]
    return values
'''

_HOOK_REMOVED_WITHOUT_FINALLY = '''
def scaling_experiment(model, input_ids, target_id, factor=0.8):
    hook = make_scaling_hook(factor)
    values = torch.empty(len(kata.blocks(model)))
    for i, block in enumerate(kata.blocks(model)):
        handle = block.register_forward_hook(hook, prepend=True)
        values[i] = next_token_log_probs(model, input_ids)[target_id]  # if this raises ...
        handle.remove()  # ... this never runs
    return values
'''

_SCALED_BLOCK_INPUT = '''
def scaling_experiment(model, input_ids, target_id, factor=0.8):
    def scale_input(module, args):
        return (args[0] * factor, *args[1:])

    values = torch.empty(len(kata.blocks(model)))
    for i, block in enumerate(kata.blocks(model)):
        handle = block.register_forward_pre_hook(scale_input)  # the input, not the output
        try:
            values[i] = next_token_log_probs(model, input_ids)[target_id]
        finally:
            handle.remove()
    return values
'''

_HOOK_WITHOUT_PREPEND = '''
def scaling_experiment(model, input_ids, target_id, factor=0.8):
    hook = make_scaling_hook(factor)
    values = torch.empty(len(kata.blocks(model)))
    for i, block in enumerate(kata.blocks(model)):
        handle = block.register_forward_hook(hook)  # runs after the hooks already there
        try:
            values[i] = next_token_log_probs(model, input_ids)[target_id]
        finally:
            handle.remove()
    return values
'''

_ONE_VALUE_PER_HIDDEN_STATE = '''
def scaling_experiment(model, input_ids, target_id, factor=0.8):
    hook = make_scaling_hook(factor)
    values = torch.zeros(model.config.num_hidden_layers + 1)  # sized like hidden_states
    for i, block in enumerate(kata.blocks(model)):
        handle = block.register_forward_hook(hook, prepend=True)
        try:
            values[i] = next_token_log_probs(model, input_ids)[target_id]
        finally:
            handle.remove()
    return values
'''

# ----------------------------------------------------------------------------- the figure

_CLEAN_LINE_SOLID = '''
_solution_plot = plot_scaling_experiment


def plot_scaling_experiment(values, clean_value):
    fig = _solution_plot(values, clean_value)
    for line in fig.axes[0].get_lines():
        line.set_linestyle("-")
    return fig
'''

_CLEAN_LINE_UNLABELLED = '''
_solution_plot = plot_scaling_experiment


def plot_scaling_experiment(values, clean_value):
    fig = _solution_plot(values, clean_value)
    fig.axes[0].get_legend().remove()
    return fig
'''


def _mistake(id, summary, message, code):
    return Mistake(id=id, exercise="ex3", summary=summary, message=message, code=code)


MISTAKES = [
    _mistake("logits-not-log-softmax",
             "next_token_log_probs returns the raw logits of the last position",
             "these are the raw logits", _LOGITS_NOT_LOG_SOFTMAX),
    _mistake("softmax-not-log-softmax",
             "next_token_log_probs returns probabilities (softmax), not their logarithm",
             "softmax instead of log-softmax", _SOFTMAX_NOT_LOG_SOFTMAX),
    _mistake("log-softmax-over-positions",
             "next_token_log_probs normalises over the positions (dim=1) instead of the vocabulary",
             "log-softmax over the wrong dimension", _LOG_SOFTMAX_OVER_POSITIONS),
    _mistake("first-position",
             "the prediction is read from the first position's logits instead of the last",
             "first position", _FIRST_POSITION),
    _mistake("autograd-graph-kept",
             "the model runs without torch.no_grad(), so the results carry an autograd graph",
             "torch.no_grad()", _NO_GRAD_MISSING),
    _mistake("context-length-not-checked",
             "a text longer than the model's context reaches the model and fails deep inside it",
             "instead of a clear ValueError", _CONTEXT_LENGTH_NOT_CHECKED),
    _mistake("top-tokens-lowest-first",
             "top_next_tokens lists the 21 tokens lowest logit first",
             "sorted highest logit first", _TOP_TOKENS_LOWEST_FIRST),
    _mistake("top-tokens-log-probs",
             "top_next_tokens lists log-softmax values instead of the raw logits of figure 10",
             "figure 10 lists the raw logits", _TOP_TOKENS_LOG_PROBS),
    _mistake("unique-tokens-not-deduplicated",
             "text_stats counts every token as unique (len(ids) instead of len(set(ids)))",
             "count each distinct token id once", _UNIQUE_TOKENS_NOT_DEDUPLICATED),
    _mistake("multi-token-target-truncated",
             "target_token_id silently keeps the first piece of a word split into several tokens",
             "silently truncated", _MULTI_TOKEN_TARGET_TRUNCATED),
    _mistake("hook-tensor-as-tuple",
             "the hook unpacks a tensor output like a tuple (output[0] drops the batch dimension)",
             "tuple unpacking of a tensor output", _HOOK_TENSOR_AS_TUPLE),
    _mistake("hook-tuple-as-tensor",
             "the hook multiplies a tuple output as if it were a tensor",
             "failed on a tuple output", _HOOK_TUPLE_AS_TENSOR),
    _mistake("hook-in-place",
             "the hook scales the block's output in place (mul_)",
             "in-place scaling", _HOOK_IN_PLACE),
    _mistake("hook-never-removed",
             "scaling_experiment never removes its hooks, so the scalings pile up",
             "a hook left registered", _HOOK_NEVER_REMOVED),
    _mistake("hook-removed-without-finally",
             "scaling_experiment removes each hook after the forward pass, not in finally",
             "remove it in a finally block", _HOOK_REMOVED_WITHOUT_FINALLY),
    _mistake("scaled-block-input",
             "scaling_experiment scales each block's input (a forward pre-hook), not its output",
             "instead of its output", _SCALED_BLOCK_INPUT),
    _mistake("hook-without-prepend",
             "scaling_experiment registers its hook without prepend=True; the values are right, "
             "but hooks already on the block (transformers 5's hidden-state recorders) see the "
             "unscaled output, which only matters to code that reads hidden states",
             "prepend=True", _HOOK_WITHOUT_PREPEND),
    _mistake("one-value-per-hidden-state",
             "scaling_experiment returns n_layers + 1 values, sized like hidden_states",
             "one more entry, the embeddings", _ONE_VALUE_PER_HIDDEN_STATE),
    _mistake("clean-line-solid",
             "the clean line of figure 11 is solid, not dashed",
             "no dashed horizontal line", _CLEAN_LINE_SOLID),
    _mistake("clean-line-unlabelled",
             "the clean line of figure 11 does not show the clean value",
             "not labelled with its value", _CLEAN_LINE_UNLABELLED),
]
