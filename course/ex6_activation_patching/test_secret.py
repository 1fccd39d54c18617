"""Exercise 6's secret checks: each public function again, on inputs nobody prepared for.

One check per function, each on inputs drawn from a seed only the grader knows and from spaces
no table can hold (``course/shared/secret.py``): logits, positions and vectors of random sizes, a
GPT-2 of random sizes and weights with two random prompts, a random map and random words to draw.
The expected values are computed here, from those inputs, before the function sees them (it gets
copies). A function's points count only if its check passes.
"""

import torch

import kata
from course.shared.library_errors import Sizes, learner_run
from course.shared.reference import patching_reference, reference_logits
from course.shared.secret import repeat_hint, secret, secret_check  # noqa: F401 - a fixture
from course.shared.support import (
    TensorBlock,
    TupleBlock,
    check_close,
    check_shape,
    check_tensor,
    expect,
    figures,  # noqa: F401 - a fixture
)

from .checks import check_heatmap, check_map, hidden_of, run_hooked, run_learner, run_map


@secret_check("logit_difference")
def test_secret_logit_difference_of_random_logits(ex, secret):
    vocab, n_tokens = secret.integer(3, 80), secret.integer(2, 9)
    batch = secret.choice([None, secret.integer(1, 5)])
    shape = (n_tokens, vocab) if batch is None else (batch, n_tokens, vocab)
    logits = secret.tensor(*shape)
    if secret.choice([True, False]):
        logits = logits.double()
    good, bad = secret.rng.sample(range(vocab), 2)
    log_probs = torch.log_softmax(logits.double(), dim=-1)[..., -1, :]
    expected = log_probs[..., good] - log_probs[..., bad]
    got = check_tensor(run_learner(ex, "logit_difference", logits, good, bad,
                                   sizes=Sizes(0, n_tokens, vocab=vocab)), "logit_difference")
    check_shape(got, tuple(expected.shape), f"logit_difference of logits of shape {shape}",
                "one value per text: () for (T, vocab_size), (batch,) for a batch",
                diagnosis="logit-difference-shape-wrong")
    expect(got.dtype == torch.float32, "logit-difference-not-float32",
           f"on {logits.dtype} logits your function returned {got.dtype}: the metric is float32")
    check_close(got, expected, f"logit_difference of logits of shape {shape}, good {good}, bad {bad}",
                "log p(good) - log p(bad) at the last position" + repeat_hint(), atol=1e-4,
                diagnosis="logit-difference-wrong")


def patch_through_the_receiver(model, layer, position, vector):
    """A forward pre-hook that writes ``vector`` at ``position`` of what receives block
    ``layer``'s output (the next block, or the final norm after the last): the same patch as a
    hook on the block itself, made independently of the hook under test."""
    receiver = (list(kata.blocks(model)[1:]) + [kata.final_norm(model)])[layer]

    def pre_hook(module, args, kwargs):
        hidden = (args[0] if args else kwargs["hidden_states"]).clone()
        hidden[:, position] = vector.to(hidden.dtype)
        if args:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    return receiver.register_forward_pre_hook(pre_hook, with_kwargs=True)


@secret_check("patch_hook")
def test_secret_patch_hook_on_toy_blocks_and_a_model_block(ex, tiny_gpt2, secret):
    x = secret.tensor(secret.integer(1, 4), secret.integer(2, 8), secret.integer(2, 9))
    n_tokens, d_model = x.shape[1], x.shape[2]
    position = secret.integer(-n_tokens, n_tokens - 1)
    new = secret.tensor(d_model)
    expected = 2 * x
    expected[:, position] = new
    for block in (TensorBlock(), TupleBlock()):
        output = learner_run(
            lambda: run_hooked(block, ex.patch_hook(position, new.clone()), x.clone()),
            "patch_hook", Sizes(0, n_tokens, d_model=d_model), "patch-hook",
            inputs=f"position {position} on a block output {tuple(x.shape)}" + repeat_hint())
        check_close(hidden_of(output), expected,
                    f"a {type(block).__name__}'s output of shape {tuple(x.shape)} patched at "
                    f"position {position}", "every row's position replaced, nothing else"
                    + repeat_hint(), diagnosis="patch-hook-wrong")
    model, tokenizer = tiny_gpt2
    ids = tokenizer(secret.text(), return_tensors="pt")["input_ids"]
    layer = secret.integer(0, len(kata.blocks(model)) - 1)
    position = secret.integer(0, ids.shape[1] - 1)
    vector = secret.tensor(model.config.n_embd)
    handle = patch_through_the_receiver(model, layer, position, vector)
    try:
        expected = reference_logits(model, ids)
    finally:
        handle.remove()
    handle = kata.blocks(model)[layer].register_forward_hook(
        ex.patch_hook(position, vector.clone()), prepend=True)
    try:
        logits = learner_run(lambda: reference_logits(model, ids), "patch_hook",
                             lambda: Sizes.of(model, ids), "patch-hook",
                             inputs=f"position {position} of block {layer}'s output"
                             + repeat_hint())
    finally:
        handle.remove()
    check_close(logits, expected, f"the logits with block {layer}'s output patched at position "
                f"{position}", "the hook should write the vector into that position of the "
                "block's output" + repeat_hint(), atol=1e-4, diagnosis="patch-hook-wrong")


def random_patching_case(secret):
    """A GPT-2 of random sizes (weights spread ten times GPT-2's, so that prompts lead to clearly
    different predictions), a random prompt pair for it and the model's own map for them:
    ``(model, reference)``."""
    model = secret.gpt2(layers=(1, 4), spread=0.2)
    args = secret.prompt_pair(model)
    return model, {"args": args, **patching_reference(model, *args)}


def describe_case(model, reference) -> str:
    clean, corrupted, good, bad = reference["args"]
    return (f"a GPT-2 of {model.config.n_layer} blocks, prompts {clean[0].tolist()} and "
            f"{corrupted[0].tolist()}, good {good}, bad {bad}")


@secret_check("patching_effect")
def test_secret_patching_effect_on_a_model_of_random_sizes(ex, secret):
    model, reference = random_patching_case(secret)
    where = describe_case(model, reference) + repeat_hint()
    effect = run_map(ex, "patching_effect", model, reference["args"], "on " + where)
    check_map(ex, model, effect, reference, "patching_effect", where)


@secret_check("fast_patching_effect")
def test_secret_fast_patching_effect_on_a_model_of_random_sizes(ex, secret):
    model, reference = random_patching_case(secret)
    where = describe_case(model, reference) + repeat_hint()
    effect = run_map(ex, "fast_patching_effect", model, reference["args"], "on " + where)
    check_map(ex, model, effect, reference, "fast_patching_effect", where)


@secret_check("plot_patching_effect")
def test_secret_figure_draws_a_random_map(ex, secret, figures):
    n_layers, n_tokens = secret.integer(2, 30), secret.integer(2, 12)
    effect = secret.tensor(n_layers, n_tokens, scale=secret.number(0.3, 1.5))
    words = (secret.text() + " " + secret.text()).split()
    tokens = [secret.choice(["", " "]) + secret.choice(words) for _ in range(n_tokens)]
    expected = effect.numpy().copy()
    fig = run_learner(ex, "plot_patching_effect", effect, list(tokens),
                      sizes=Sizes(n_layers, n_tokens))
    check_heatmap(fig, expected, tokens, figures, repeat_hint())
