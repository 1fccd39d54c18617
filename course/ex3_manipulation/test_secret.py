"""Exercise 3's secret checks: each public function again, on inputs nobody prepared for.

One check per function, each on inputs drawn from a seed only the grader knows and from spaces
no table can hold (``course/shared/secret.py``): texts of random words, GPT-2s of random sizes and
weights with random token ids, random targets, factors, blocks and values. The expected values
are computed here, from those inputs, before the function sees them (it gets copies); a check
never calls another of the learner's functions, so one wrong function never hides a right one.
A function's points count only if its check passes.
"""

import re

import matplotlib.pyplot as plt
import torch

import kata
from course.shared.diagnosis import diagnose
from course.shared.secret import repeat_hint, secret, secret_check  # noqa: F401 - a fixture
from course.shared.support import (
    TensorBlock,
    TupleBlock,
    check_close,
    check_tensor,
    expect,
    reference_logits,
)
from kata.hooks import hook_snapshot, restore_hooks

from .checks import (
    block_observers,
    check_hooks_already_there_saw_the_scaling,
    check_hooks_removed_when_a_run_fails,
    check_log_probs,
    check_out_of_place,
    check_repeated_tokens_counted_once,
    check_scaling_figure,
    check_scaling_values,
    check_several_tokens_refused,
    check_stats_are_a_dict_of_ints,
    check_target_id,
    check_tensor_hook_output,
    check_top_tokens,
    check_tuple_hook_output,
    describe_hook_change,
    experiment_of,
    independent_scaling,
    log_probs_of,
    run_with_hook,
    scaled_logits,
    text_stats_of,
    tuple_hook_output,
)


def random_model(secret):
    """A GPT-2 of 2 to 5 blocks of random sizes and weights (spread enough for clearly different
    predictions) and 2 to 12 random token ids for it, ``(1, T)``."""
    model = secret.gpt2(layers=(2, 5), spread=0.2)
    return model, secret.token_ids(model.config.vocab_size, secret.integer(2, 12))


def text_prefix(secret, tokenizer, shortest=2) -> torch.Tensor:
    """A text of random words, cut after a random number of its tokens: ``(1, T)`` ids."""
    ids = tokenizer(secret.text(), return_tensors="pt")["input_ids"]
    return ids[:, :secret.integer(min(shortest, ids.shape[1]), ids.shape[1])]


@secret_check("text_stats")
def test_secret_text_stats_of_a_text_of_random_words(ex, tiny_gpt2, secret):
    _, tokenizer = tiny_gpt2
    base = secret.text()
    words = re.findall(r"[A-Za-z]+", base)[1:]  # not the first, capitalised word
    # a text of random words, then a few of its words again: repeated tokens to count once
    repeated = " ".join(secret.choice(words) for _ in range(secret.integer(1, 4)))
    text = base + " " + repeated
    expected = text_stats_of(tokenizer, text)
    stats = ex.text_stats(tokenizer, text)
    check_stats_are_a_dict_of_ints(stats, expected)
    check_repeated_tokens_counted_once(stats, expected, text, repeat_hint())
    expect(stats == expected, "text-stats-wrong",
           f"for {text!r} expected {expected}, got {stats}" + repeat_hint())


@secret_check("target_token_id")
def test_secret_target_token_id_of_random_words(ex, tiny_gpt2, secret):
    _, tokenizer = tiny_gpt2

    def token_count(word):
        return len(tokenizer(word, add_special_tokens=False)["input_ids"])

    words = re.findall(r"[A-Za-z]+", secret.text(words=(6, 12)))
    word = secret.choice([" " + w for w in words if token_count(" " + w) == 1])
    expected = tokenizer(word, add_special_tokens=False)["input_ids"][0]
    check_target_id(ex.target_token_id(tokenizer, word), expected, word, repeat_hint())
    # two of the words glued together: several tokens, never cut to the first one
    glued = [" " + a.lower() + b.lower() for a in words for b in words]
    word = secret.choice([w for w in glued if token_count(w) > 1])
    check_several_tokens_refused(ex, tokenizer, word, repeat_hint())


@secret_check("next_token_log_probs")
def test_secret_next_token_log_probs_of_a_random_model(ex, secret):
    model, ids = random_model(secret)
    given = ids[0] if secret.choice([True, False]) else ids  # (T,) or (1, T)
    logits = reference_logits(model, ids)  # (T, vocab_size)
    name = (f"next_token_log_probs of {ids.shape[1]} random ids of shape {tuple(given.shape)} "
            "on a GPT-2 of random sizes")
    log_probs = check_tensor(log_probs_of(ex, model, given, repeat_hint()), "next_token_log_probs")
    check_log_probs(log_probs, logits, name, repeat_hint())
    expect(log_probs.dtype == torch.float32 and not log_probs.requires_grad,
           "prediction-autograd-graph-kept" if log_probs.requires_grad else "log-probs-not-float32",
           f"{name} should be float32 with no autograd graph, got {log_probs.dtype} "
           f"(requires_grad={log_probs.requires_grad})" + repeat_hint())


@secret_check("top_next_tokens")
def test_secret_top_next_tokens_of_a_text_of_random_words(ex, tiny_gpt2, secret):
    model, tokenizer = tiny_gpt2
    ids = text_prefix(secret, tokenizer, shortest=1)
    k = secret.integer(1, 30)
    logits = reference_logits(model, ids)  # (T, vocab_size)
    top = ex.top_next_tokens(model, tokenizer, ids.clone(), k=k)
    check_top_tokens(top, logits, tokenizer, k, repeat_hint())


@secret_check("make_scaling_hook")
def test_secret_scaling_hook_of_a_random_factor(ex, secret):
    factor = secret.number(0.2, 3.0)
    x = secret.tensor(secret.integer(1, 3), secret.integer(1, 6), secret.integer(2, 9))
    expected = 2 * x * factor  # what the toy blocks (2 x) give, scaled
    hook = ex.make_scaling_hook(factor)
    check_tensor_hook_output(run_with_hook(TensorBlock(), hook, x.clone()), expected,
                             f"a tensor block's output hooked with factor {factor}", repeat_hint())
    block = TupleBlock()
    check_tuple_hook_output(tuple_hook_output(block, hook, x.clone(), repeat_hint()), expected,
                            block.extra, repeat_hint())
    check_out_of_place(hook, tuple(x.shape), repeat_hint())
    # on a random block of a model, the output whichever kind the installed transformers gives
    model, ids = random_model(secret)
    i = secret.integer(0, len(kata.blocks(model)) - 1)
    expected_logits = scaled_logits(model, ids, i, factor)
    handle = kata.blocks(model)[i].register_forward_hook(ex.make_scaling_hook(factor),
                                                        prepend=True)
    try:
        logits = reference_logits(model, ids)
    except NotImplementedError:
        raise
    except (TypeError, AttributeError, IndexError, RuntimeError) as error:
        diagnose("hook-does-not-scale", (
            f"a GPT-2 block with your scaling hook failed ({type(error).__name__}: {error}): the "
            "hook must return what the block returns, of the same kind, with the hidden states "
            "scaled" + repeat_hint()))
    finally:
        handle.remove()
    check_close(logits, expected_logits,
                f"the logits with block {i}'s output hooked with factor {factor}",
                "the hook should replace the block's output with the output times the factor"
                + repeat_hint(), atol=1e-4, diagnosis="hook-does-not-scale")


@secret_check("scaling_experiment")
def test_secret_scaling_experiment_of_a_random_model_target_and_factor(ex, secret):
    model, ids = random_model(secret)
    target_id = secret.integer(0, model.config.vocab_size - 1)
    factor = secret.number(0.3, 2.0)
    expected = independent_scaling(model, ids, target_id, factor)
    seen, handles = block_observers(model)  # hooks already on the blocks when it runs
    try:
        with torch.no_grad():
            model(ids)
        clean = {i: rows[0] for i, rows in seen.items()}
        for rows in seen.values():
            rows.clear()
        before = hook_snapshot(model)
        try:
            values = experiment_of(ex, model, ids, target_id, factor)
        finally:
            after = hook_snapshot(model)
            restore_hooks(model, before)
    finally:
        for handle in handles:
            handle.remove()
    name = (f"scaling_experiment of {ids.shape[1]} random ids, target {target_id}, factor "
            f"{factor}, on a GPT-2 of {len(expected)} blocks")
    expect(after == before, "scaling-hook-never-removed", (
        f"after scaling_experiment the model's hooks changed on "
        f"{describe_hook_change(before, after)}: a hook left registered keeps scaling every later "
        "forward pass" + repeat_hint()))
    check_scaling_values(check_tensor(values, "scaling_experiment"), expected, name,
                         repeat_hint(), atol=1e-4)
    check_hooks_already_there_saw_the_scaling(seen, clean, factor, repeat_hint())
    failing_run = secret.integer(1, len(expected))  # one of its forward passes raises
    check_hooks_removed_when_a_run_fails(ex, model, ids, target_id, failing_run, repeat_hint())


@secret_check("plot_scaling_experiment")
def test_secret_figure_of_random_values_and_clean_line(ex, secret):
    n = secret.integer(2, 12)
    clean = secret.number(-14.0, -1.0)
    values = clean + secret.tensor(n, scale=secret.number(0.05, 2.0))
    expected = values.tolist()
    fig = ex.plot_scaling_experiment(values.clone(), clean)
    try:
        check_scaling_figure(fig, expected, clean, repeat_hint())
    finally:
        plt.close(fig)
