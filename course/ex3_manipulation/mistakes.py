"""Learner mistakes for exercise 3 (the scaling hook), and the diagnosis the tests must name.

Each ``code`` is executed on top of ``course/ex3_manipulation/solution.py`` (its public names, such as
``torch``, ``kata``, ``plt``, ``make_scaling_hook`` and ``next_token_log_probs``, are in scope),
so the other solution functions call the patched ones. Mistakes never call the solution's
private helpers; a learner's own helper is part of the mistake's code.
"""

from course.shared.catalogue import catalogue, template, wrapped_figure

# ----------------------------------------------------------------------------- the prediction

# The learner's own shared helper, as the docstring suggests; each prediction mistake redefines
# both public functions on top of it.
_LOGITS = '''
def _my_logits(model, input_ids, position=-1, no_grad=True, check_length=True):
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] == 0:
        raise ValueError("one non-empty sequence please")
    if check_length and input_ids.shape[1] > kata.context_length(model):
        raise ValueError(f"longer than the context length {kata.context_length(model)}")
    if no_grad:
        with torch.no_grad():
            return model(input_ids).logits[0, position].float().cpu()
    return model(input_ids).logits[0, position].float().cpu()
'''


_next_log_probs = template('''
def next_token_log_probs(model, input_ids):
    return {LOG_PROBS}
''', LOG_PROBS="")

# top_next_tokens: the scores it ranks (SCORES), the pairs it returns (PAIRS, of LISTED pairs).
_top = template('''
def top_next_tokens(model, tokenizer, input_ids, k=21):
    top = torch.topk({SCORES}, k)
    return {PAIRS}
''', SCORES="_my_logits(model, input_ids)", PAIRS="{LISTED}",
    LISTED="[(tokenizer.decode([i]), v) for i, v in zip(top.indices.tolist(), top.values.tolist())]")


def _prediction(log_probs: str, logits_call: str = "_my_logits(model, input_ids)") -> str:
    return _LOGITS + _next_log_probs(LOG_PROBS=log_probs) + _top(SCORES=logits_call)


_LOGITS_NOT_LOG_SOFTMAX = _prediction("_my_logits(model, input_ids)  # raw logits")
_SOFTMAX_NOT_LOG_SOFTMAX = _prediction("torch.softmax(_my_logits(model, input_ids), dim=-1)")
_LOG_SOFTMAX_OVER_POSITIONS = '''
def next_token_log_probs(model, input_ids):
    input_ids = kata.one_sequence(input_ids, model)
    with torch.no_grad():
        logits = model(input_ids).logits  # (1, T, vocab_size)
    return torch.log_softmax(logits, dim=1)[0, -1]  # normalised over the T positions
'''
_FIRST_POSITION = _prediction(
    "torch.log_softmax(_my_logits(model, input_ids, position=0), dim=-1)",
    "_my_logits(model, input_ids, position=0)")
_NO_GRAD_MISSING = _prediction(
    "torch.log_softmax(_my_logits(model, input_ids, no_grad=False), dim=-1)",
    "_my_logits(model, input_ids, no_grad=False)")
_CONTEXT_LENGTH_NOT_CHECKED = _prediction(
    "torch.log_softmax(_my_logits(model, input_ids, check_length=False), dim=-1)",
    "_my_logits(model, input_ids, check_length=False)")
_UNBATCHED_INPUT = '''
def next_token_log_probs(model, input_ids):
    with torch.no_grad():  # a (T,) input reaches the model without its batch dimension
        logits = model(torch.as_tensor(input_ids)).logits
    return torch.log_softmax(logits[0, -1].float(), dim=-1)
'''
_TOP_TOKENS_LOWEST_FIRST = _LOGITS + _top(PAIRS="sorted({LISTED}, key=lambda pair: pair[1])  # ascending")
_TOP_LOGIT_TENSOR = _LOGITS + _top(
    LISTED="[(tokenizer.decode([int(i)]), v) for i, v in zip(top.indices, top.values)]  # 0-d tensors")
# log-softmax values, not the logits of figure 10
_TOP_TOKENS_LOG_PROBS = _top(SCORES="next_token_log_probs(model, input_ids)")

# ----------------------------------------------------------------------------- the tokens

_UNIQUE_TOKENS_NOT_DEDUPLICATED = '''
def text_stats(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    return {"chars": len(text), "unique_chars": len(set(text)),
            "tokens": len(ids), "unique_tokens": len(ids)}  # no set()
'''

_SET_OF_TENSORS = '''
def text_stats(tokenizer, text):
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    return {"chars": len(text), "unique_chars": len(set(text)),
            "tokens": ids.shape[1], "unique_tokens": len(set(ids[0]))}  # 0-d tensors never equal
'''

_MULTI_TOKEN_TARGET_TRUNCATED = '''
def target_token_id(tokenizer, word):
    return tokenizer(word, add_special_tokens=False)["input_ids"][0]  # keeps the first piece
'''

# ----------------------------------------------------------------------------- the hook

_hook = template('''
def make_scaling_hook(factor):
    def scale_output(module, inputs, output):
        {SCALE}
    return scale_output
''', SCALE="")

_HOOK_TENSOR_AS_TUPLE = _hook(SCALE='''
hidden, *rest = output  # the post's unpacking: on a tensor, hidden is output[0]
return (hidden * factor, *rest)
''')
_HOOK_RETURNS_NONE = _hook(SCALE='''
hidden = output[0] if isinstance(output, tuple) else output
hidden = hidden * factor  # computed, never returned: the block's output stays as it was
''')
_HOOK_TUPLE_AS_TENSOR = _hook(SCALE="return output * factor  # a tuple cannot be multiplied by a float")
_HOOK_IN_PLACE = _hook(SCALE='''
if isinstance(output, tuple):
    output[0].mul_(factor)
    return output
return output.mul_(factor)
''')

# ----------------------------------------------------------------------------- the experiment

# A scaling_experiment that never checks target_id (the solution does), with a slot for each
# part the mistakes change.
_scaling = template('''
def scaling_experiment(model, input_ids, target_id, factor=0.8):
    {CHECK}
    {HOOK}
    values = {VALUES}
    for i, block in enumerate({BLOCKS}):
        {RUN}
    return values
''', CHECK="", HOOK="hook = make_scaling_hook(factor)", VALUES="torch.empty(len(kata.blocks(model)))",
    BLOCKS="kata.blocks(model)", RUN='''
handle = {REGISTER}
try:
    values[i] = next_token_log_probs(model, input_ids)[target_id]
finally:
    handle.remove()
''', REGISTER="block.register_forward_hook(hook, prepend=True)")

_HOOK_NEVER_REMOVED = _scaling(RUN='''
block.register_forward_hook(hook, prepend=True)  # the handle is thrown away
values[i] = next_token_log_probs(model, input_ids)[target_id]
''')
_HOOK_REMOVED_WITHOUT_FINALLY = _scaling(RUN='''
handle = {REGISTER}
values[i] = next_token_log_probs(model, input_ids)[target_id]  # if this raises ...
handle.remove()  # ... this never runs
''')
_SCALED_BLOCK_INPUT = _scaling(HOOK='''
def scale_input(module, args):
    return (args[0] * factor, *args[1:])
''', REGISTER="block.register_forward_pre_hook(scale_input)  # the input, not the output")
_HOOK_WITHOUT_PREPEND = _scaling(
    REGISTER="block.register_forward_hook(hook)  # runs after the hooks already there")
_ONE_VALUE_PER_HIDDEN_STATE = _scaling(
    VALUES="torch.zeros(model.config.num_hidden_layers + 1)  # sized like hidden_states")
_GPT2_NAMES = _scaling(CHECK='''
if not 0 <= target_id < model.config.vocab_size:
    raise ValueError(f"target_id {target_id} is not a token id")
''', VALUES="torch.empty(model.config.n_layer)  # GPT-2's name", BLOCKS="model.transformer.h")
_TARGET_NOT_CHECKED = _scaling()  # torch's IndexError

# ----------------------------------------------------------------------------- the figure


def _figure(change):
    return wrapped_figure("plot_scaling_experiment", "values, clean_value", change)


_CLEAN_LINE_SOLID = _figure('''
for line in fig.axes[0].get_lines():
    line.set_linestyle("-")
''')
_CLEAN_LINE_UNLABELLED = _figure("fig.axes[0].get_legend().remove()")


MISTAKES = catalogue(
    "ex3",
    ("logits-not-log-softmax",
             "next_token_log_probs returns the raw logits of the last position",
             "logits-not-log-softmax", _LOGITS_NOT_LOG_SOFTMAX),
    ("softmax-not-log-softmax",
             "next_token_log_probs returns probabilities (softmax), not their logarithm",
             "softmax-not-log-softmax", _SOFTMAX_NOT_LOG_SOFTMAX),
    ("log-softmax-over-positions",
             "next_token_log_probs normalises over the positions (dim=1) instead of the vocabulary",
             "log-softmax-over-positions", _LOG_SOFTMAX_OVER_POSITIONS),
    ("first-position",
             "the prediction is read from the first position's logits instead of the last",
             "first-position-logits", _FIRST_POSITION),
    ("autograd-graph-kept",
             "the model runs without torch.no_grad(), so the results carry an autograd graph",
             "prediction-autograd-graph-kept", _NO_GRAD_MISSING),
    ("context-length-not-checked",
             "a text longer than the model's context reaches the model and fails deep inside it",
             "prediction-context-length-not-checked", _CONTEXT_LENGTH_NOT_CHECKED),
    ("top-tokens-lowest-first",
             "top_next_tokens lists the 21 tokens lowest logit first",
             "top-tokens-lowest-first", _TOP_TOKENS_LOWEST_FIRST),
    ("top-tokens-log-probs",
             "top_next_tokens lists log-softmax values instead of the raw logits of figure 10",
             "top-tokens-log-probs", _TOP_TOKENS_LOG_PROBS),
    ("unique-tokens-not-deduplicated",
             "text_stats counts every token as unique (len(ids) instead of len(set(ids)))",
             "set-of-tensors", _UNIQUE_TOKENS_NOT_DEDUPLICATED),
    ("multi-token-target-truncated",
             "target_token_id silently keeps the first piece of a word split into several tokens",
             "multi-token-target-truncated", _MULTI_TOKEN_TARGET_TRUNCATED),
    ("hook-tensor-as-tuple",
             "the hook unpacks a tensor output like a tuple (output[0] drops the batch dimension)",
             "hook-tensor-as-tuple", _HOOK_TENSOR_AS_TUPLE),
    ("hook-returns-none",
             "the hook scales the output but never returns it, so nothing is replaced",
             "hook-does-not-scale", _HOOK_RETURNS_NONE, "hook-returns-none"),
    ("hook-tuple-as-tensor",
             "the hook multiplies a tuple output as if it were a tensor",
             "hook-tuple-as-tensor", _HOOK_TUPLE_AS_TENSOR),
    ("hook-in-place",
             "the hook scales the block's output in place (mul_)",
             "hook-in-place", _HOOK_IN_PLACE),
    ("hook-never-removed",
             "scaling_experiment never removes its hooks, so the scalings pile up",
             "hook-left-on-model", _HOOK_NEVER_REMOVED),
    ("hook-removed-without-finally",
             "scaling_experiment removes each hook after the forward pass, not in finally",
             "scaling-hook-not-removed-on-error", _HOOK_REMOVED_WITHOUT_FINALLY),
    ("scaled-block-input",
             "scaling_experiment scales each block's input (a forward pre-hook), not its output",
             "scaled-block-input", _SCALED_BLOCK_INPUT),
    ("hook-without-prepend",
             "scaling_experiment registers its hook without prepend=True; the values are right, "
             "but hooks already on the block (transformers 5's hidden-state recorders) see the "
             "unscaled output, which only matters to code that reads hidden states",
             "hook-without-prepend", _HOOK_WITHOUT_PREPEND),
    ("one-value-per-hidden-state",
             "scaling_experiment returns n_layers + 1 values, sized like hidden_states",
             "one-value-per-hidden-state", _ONE_VALUE_PER_HIDDEN_STATE),
    ("clean-line-solid",
             "the clean line of figure 11 is solid, not dashed",
             "clean-line-missing", _CLEAN_LINE_SOLID),
    ("clean-line-unlabelled",
             "the clean line of figure 11 does not show the clean value",
             "clean-line-unlabelled", _CLEAN_LINE_UNLABELLED),
    ("set-of-tensors",
             "text_stats counts distinct tokens with a set of 0-d tensors, which hash by identity",
             "set-of-tensors", _SET_OF_TENSORS),
    ("unbatched-input",
             "next_token_log_probs passes a (T,) input to the model without a batch dimension",
             "unbatched-input", _UNBATCHED_INPUT),
    ("top-logit-tensor",
             "top_next_tokens returns each logit as a 0-d tensor, not a Python float",
             "top-logit-not-float", _TOP_LOGIT_TENSOR),
    ("gpt2-names-on-llama",
             "scaling_experiment uses model.config.n_layer and model.transformer.h (GPT-2 only)",
             "gpt2-names-in-scaling-experiment", _GPT2_NAMES),
    ("target-id-not-checked",
             "scaling_experiment lets a bad target_id reach torch's indexing",
             "target-id-not-checked", _TARGET_NOT_CHECKED),
    ("target-error-names-no-pieces",
     "target_token_id raises a ValueError that repeats the word but lists none of its pieces",
     "target-error-without-pieces", '''
def target_token_id(tokenizer, word):
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"{word!r} is not a single token")
    return ids[0]
'''),
    ("top-token-texts-stripped",
     "top_next_tokens strips the decoded token texts, losing their leading space",
     "top-token-text-without-leading-space", '''
def top_next_tokens(model, tokenizer, input_ids, k=21):
    ids = kata.one_sequence(input_ids, model)
    with torch.no_grad():
        logits = model(ids).logits[0, -1].float().cpu()
    top = torch.topk(logits, k)
    return [(tokenizer.decode([i]).strip(), v) for i, v in zip(top.indices.tolist(), top.values.tolist())]
'''),
)
