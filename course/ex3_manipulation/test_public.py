"""Exercise 3: manipulating hidden states with a scaling hook (the post's demo 3, figures 10, 11).

Every expected value here comes from the tokenizer, the model or torch directly. The scaled runs
are recomputed independently: instead of a forward hook on block ``i`` that scales its output,
this file scales the *input* of the module that consumes that output (block ``i + 1``, or the
final norm after the last block) with a forward pre-hook. The code under test comes only from the
``ex`` fixture, so the same tests check a learner's ``exercises/`` and the reference
``solutions/``.

Speed: the tiny GPT-2 runs in milliseconds; the reference values for it are computed once per
module. The SmolLM2 tests (marked ``trained``) need 31 forward passes of a 135M model.
"""

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from kata.hooks import hook_snapshot, restore_hooks  # noqa: E402
from kata.models import transformers_major  # noqa: E402
from course.shared.diagnosis import diagnose  # noqa: E402
from course.shared.support import (  # noqa: E402
    TensorBlock,
    TupleBlock,
    check_close,
    check_shape,
    check_tensor,
    draw_headless,
    drawn_points,
    expect,
    raises_clearly,
    reference_logits,
    scaled_block_log_probs,
)

INSECT_GPT2 = 12833  # " insect" in GPT-2's vocabulary (the post's target)
KAFKA_STATS_GPT2 = {"chars": 109, "unique_chars": 25, "tokens": 22, "unique_tokens": 22}


# ----------------------------------------------------------------------------- reference values


def scale_first_input(factor):
    """A forward pre-hook that scales a module's first input (positional or ``hidden_states=``)."""

    def pre_hook(module, args, kwargs):
        if args:
            return (args[0] * factor, *args[1:]), kwargs
        kwargs = dict(kwargs)
        kwargs["hidden_states"] = kwargs["hidden_states"] * factor
        return args, kwargs

    return pre_hook


def independent_scaling(model, input_ids, target_id, factor):
    """The scaling experiment done another way: scale what *receives* block i's output.

    Block i's output feeds only block i + 1 (or, after the last block, the final norm), so
    scaling that module's input is the same as scaling block i's output.
    """
    model_blocks = kata.blocks(model)
    receivers = list(model_blocks[1:]) + [kata.final_norm(model)]
    values = []
    for receiver in receivers:
        handle = receiver.register_forward_pre_hook(scale_first_input(factor), with_kwargs=True)
        try:
            logits = reference_logits(model, input_ids)[-1]
            values.append(torch.log_softmax(logits, dim=-1)[target_id])
        finally:
            handle.remove()
    return torch.stack(values)


@pytest.fixture(scope="module")
def kafka_ids(tiny_gpt2):
    _, tokenizer = tiny_gpt2
    return tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]  # (1, 22)


@pytest.fixture(scope="module")
def kafka_logits(tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    return reference_logits(model, kafka_ids)  # (22, 50257)


@pytest.fixture(scope="module")
def clean_insect(kafka_logits):
    return torch.log_softmax(kafka_logits[-1], dim=-1)[INSECT_GPT2].item()


@pytest.fixture(scope="module")
def scaled_insect(tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    return independent_scaling(model, kafka_ids, INSECT_GPT2, 0.8)  # (4,)


# ----------------------------------------------------------------------------- text_stats


def test_text_stats_of_the_kafka_sentence(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    stats = ex.text_stats(tokenizer, kata.KAFKA_TEXT)
    expect(isinstance(stats, dict), "text-stats-not-a-dict",
           f"text_stats should return a dict, got {type(stats).__name__}")
    expect(set(stats) == set(KAFKA_STATS_GPT2), "text-stats-keys-wrong",
           f"text_stats should return the keys {sorted(KAFKA_STATS_GPT2)}, got {sorted(stats)}")
    check_unique_tokens_of_ints(stats, tokenizer(kata.KAFKA_TEXT)["input_ids"])
    expect(stats == KAFKA_STATS_GPT2, "text-stats-wrong", (
        f"for the Kafka sentence and the GPT-2 tokenizer, expected {KAFKA_STATS_GPT2} "
        f"(the post's numbers), got {stats}"))


def check_unique_tokens_of_ints(stats, ids) -> None:
    values = {key: value for key, value in stats.items() if type(value) is not int}
    expect(not values, "text-stats-not-ints", (
        f"text_stats's values should be Python ints, got {values}: len(...) gives an int; "
        "a tensor's .item() does too"))


def test_text_stats_counts_repeated_tokens_once(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    text = "the cat and the hat and the bat"
    ids = tokenizer(text)["input_ids"]
    expected = {
        "chars": len(text), "unique_chars": len(set(text)),
        "tokens": len(ids), "unique_tokens": len(set(ids)),
    }
    stats = ex.text_stats(tokenizer, text)
    expect(stats["tokens"] == expected["tokens"], "text-stats-token-count-wrong", (
        f"{text!r} is {expected['tokens']} GPT-2 tokens, got tokens={stats['tokens']}: count the "
        f"tokenizer's input_ids, not words or characters"
    ))
    if stats["unique_tokens"] == expected["tokens"]:
        diagnose("set-of-tensors", (
            f"{text!r} has {expected['unique_tokens']} distinct tokens (' the' and ' and' "
            f"repeat), but unique_tokens={stats['unique_tokens']} counts every token: either no "
            "set was used, or the set held 0-d tensors (from tokenizer(..., return_tensors='pt'))"
            ", which hash by identity, so equal ids stay apart; put plain ints in the set "
            "(ids.tolist(), or the tokenizer's list output)"))
    expect(stats["unique_tokens"] == expected["unique_tokens"], "unique-tokens-wrong", (
        f"{text!r} has {expected['unique_tokens']} distinct tokens (' the' and ' and' repeat), got "
        f"unique_tokens={stats['unique_tokens']}: count each distinct token id once (a set)"))
    expect(stats == expected, "text-stats-wrong", f"for {text!r} expected {expected}, got {stats}")


# ----------------------------------------------------------------------------- target_token_id


def test_target_token_id_of_insect(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    token_id = ex.target_token_id(tokenizer, kata.TARGET_WORD)
    expect(isinstance(token_id, int) and not isinstance(token_id, bool), "target-id-not-int", (
        f"target_token_id should return the id as a Python int, got {type(token_id).__name__} "
        f"({token_id!r})"
    ))
    expect(token_id == INSECT_GPT2, "target-id-wrong", (
        f"' insect' is GPT-2 token {INSECT_GPT2}, got {token_id}"
        + (" (that is 'insect' without the leading space)" if token_id in (259, 8831) else "")))


@pytest.mark.parametrize("word", [" Metamorphosis", "insect", " cockroach"])
def test_target_token_id_rejects_a_word_of_several_tokens(ex, tiny_gpt2, word):
    _, tokenizer = tiny_gpt2
    pieces = [tokenizer.decode([i]) for i in tokenizer(word, add_special_tokens=False)["input_ids"]]
    try:
        token_id = ex.target_token_id(tokenizer, word)
    except ValueError as error:
        # the pieces themselves, not the word that contains them: "in" and "sect" are in "insect"
        rest = str(error).replace(word.strip(), "")
        missing = [piece for piece in pieces if piece.strip() not in rest]
        expect(not missing, "target-error-without-pieces", (
            f"the ValueError for {word!r} should list the pieces the tokenizer made, {pieces}; "
            f"its message {str(error)!r} does not mention {missing}"))
    else:
        diagnose(
            "multi-token-target-truncated",
            f"{word!r} is {len(pieces)} GPT-2 tokens {pieces}, but target_token_id returned "
            f"{token_id!r} instead of raising a ValueError: a multi-token word silently truncated "
            f"to its first piece measures the wrong thing"
        )


def test_target_token_id_rejects_an_empty_word(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    raises_clearly(ValueError, lambda: ex.target_token_id(tokenizer, ""),
                   "target_token_id(tokenizer, '')",
                   "An empty word is no token at all: raise a ValueError.", "empty-target-accepted")


# ----------------------------------------------------------------------------- next_token_log_probs


def test_next_token_log_probs_shape_and_dtype(ex, tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    log_probs = check_tensor(ex.next_token_log_probs(model, kafka_ids), "next_token_log_probs")
    check_shape(
        log_probs, (model.config.vocab_size,), "next_token_log_probs",
        "one value per vocabulary entry, for the last position only (logits[0, -1])",
        diagnosis="log-probs-shape-wrong",
    )
    expect(log_probs.dtype == torch.float32, "log-probs-not-float32",
           f"expected float32, got {log_probs.dtype}")
    expect(not log_probs.requires_grad, "prediction-autograd-graph-kept",
           "the result is part of an autograd graph: run the model under torch.no_grad()")


def test_next_token_log_probs_is_a_log_distribution(ex, tiny_gpt2, kafka_ids, kafka_logits):
    model, _ = tiny_gpt2
    log_probs = ex.next_token_log_probs(model, kafka_ids).detach().float().cpu()
    total = log_probs.exp().sum().item()
    if abs(total - 1) < 1e-3:
        return
    if torch.allclose(log_probs, kafka_logits[-1], atol=1e-4):
        id, mistake = "logits-not-log-softmax", (
            "these are the raw logits: apply torch.log_softmax over the vocabulary")
    elif abs(log_probs.sum().item() - 1) < 1e-3 and log_probs.min() >= 0:
        id, mistake = "softmax-not-log-softmax", (
            "these are probabilities: softmax instead of log-softmax (take the log)")
    elif torch.allclose(log_probs, torch.log_softmax(kafka_logits, dim=0)[-1], atol=1e-4):
        id, mistake = "log-softmax-over-positions", (
            "log-softmax over the wrong dimension: you normalised over the positions, "
            "normalise over the vocabulary (dim=-1)"
        )
    else:
        id, mistake = "log-probs-not-a-distribution", (
            "expected log-softmax of the last position's logits over the vocabulary")
    diagnose(id, f"exp(next_token_log_probs) sums to {total:.4g}, not 1: {mistake}")


def test_next_token_log_probs_matches_the_model(ex, tiny_gpt2, kafka_ids, kafka_logits):
    model, _ = tiny_gpt2
    log_probs = ex.next_token_log_probs(model, kafka_ids)
    expected = torch.log_softmax(kafka_logits[-1], dim=-1)
    first = torch.log_softmax(kafka_logits[0], dim=-1)
    if torch.allclose(torch.as_tensor(log_probs).float(), first, atol=1e-4):
        diagnose(
            "first-position-logits",
            "next_token_log_probs used the logits of the first position; the prediction for the "
            "next token is at the last position: logits[0, -1]"
        )
    check_close(
        log_probs, expected, "next_token_log_probs",
        "expected torch.log_softmax(model(input_ids).logits[0, -1], dim=-1)", atol=1e-4,
        diagnosis="log-probs-wrong",
    )


def test_next_token_log_probs_accepts_one_dimensional_ids(ex, tiny_gpt2, kafka_ids, kafka_logits):
    model, _ = tiny_gpt2
    hint = "a (T,) tensor of ids is one sequence: add the batch dimension (ids[None])"
    try:
        log_probs = ex.next_token_log_probs(model, kafka_ids[0])  # (T,) instead of (1, T)
    except NotImplementedError:
        raise
    except (IndexError, RuntimeError, ValueError) as error:
        diagnose("unbatched-input", (
            f"next_token_log_probs failed on ids of shape (T,) ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}): the (T,) ids reached the model "
            f"unbatched; {hint} (kata.one_sequence(input_ids, model) does)"))
    check_close(
        log_probs, torch.log_softmax(kafka_logits[-1], dim=-1),
        "next_token_log_probs(ids of shape (T,))", hint, atol=1e-4, diagnosis="unbatched-input",
    )


@pytest.mark.parametrize("case", ["longer than the context", "empty", "two sequences"])
def test_next_token_log_probs_rejects_bad_input(ex, tiny_gpt2, case):
    model, _ = tiny_gpt2
    limit = kata.context_length(model)  # 128 for the tiny GPT-2
    input_ids = {
        "longer than the context": torch.full((1, limit + 1), 464),
        "empty": torch.zeros((1, 0), dtype=torch.long),
        "two sequences": torch.full((2, 5), 464),
    }[case]
    why = {
        "longer than the context": f"the model reads at most {limit} tokens (kata.context_length)",
        "empty": "with no tokens there is no last position to predict from",
        "two sequences": "the function answers for one sequence, shape (1, T) or (T,)",
    }[case]
    id = {"longer than the context": "prediction-context-length-not-checked",
          "empty": "empty-input-not-checked",
          "two sequences": "batch-input-not-checked"}[case]
    message = raises_clearly(
        ValueError, lambda: ex.next_token_log_probs(model, input_ids),
        f"input_ids {case} (shape {tuple(input_ids.shape)})",
        f"{why}; check the input before the model (kata.one_sequence(input_ids, model) does)", id)
    if case == "longer than the context":
        expect(str(limit) in message, "prediction-context-length-not-named", (
            f"the ValueError for {limit + 1} tokens should name the context length {limit}; "
            f"got {message!r}"))


# ----------------------------------------------------------------------------- top_next_tokens


def test_top_next_tokens_matches_topk(ex, tiny_gpt2, kafka_ids, kafka_logits):
    model, tokenizer = tiny_gpt2
    top = ex.top_next_tokens(model, tokenizer, kafka_ids)
    expect(isinstance(top, list), "top-tokens-not-a-list",
           f"top_next_tokens should return a list, got {type(top).__name__}")
    expect(len(top) == 21, "top-tokens-count-wrong",
           f"the default k is 21 (figure 10), got {len(top)} entries")
    expect(all(isinstance(pair, tuple) and len(pair) == 2 for pair in top), "top-tokens-not-pairs",
           f"each entry should be a (token text, logit) tuple, got {top[0]!r}")
    not_floats = [value for _, value in top if type(value) is not float]
    expect(not not_floats, "top-logit-not-float", (
        f"each logit should be a Python float, got {type(not_floats[0]).__name__ if not_floats else ''} "
        f"{not_floats[:1]!r}: .tolist() or float(value) turns a tensor into floats"))
    texts = [text for text, _ in top]
    values = torch.tensor([float(value) for _, value in top])
    expected = torch.topk(kafka_logits[-1], 21)
    expected_texts = [tokenizer.decode([i]) for i in expected.indices.tolist()]
    expect(all(isinstance(text, str) for text in texts), "top-token-text-not-str",
           f"token texts should be strings (tokenizer.decode([token_id])), got {texts[:3]!r}")
    if (values[1:] > values[:-1]).any():
        diagnose(
            "top-tokens-lowest-first",
            f"top_next_tokens should be sorted highest logit first, got {values[:5].tolist()}..."
        )
    expected_log_probs = torch.log_softmax(kafka_logits[-1], dim=-1)[expected.indices]
    if torch.allclose(values, expected_log_probs, atol=1e-4):
        diagnose("top-tokens-log-probs",
                 "the values are log-softmax values; figure 10 lists the raw logits")
    first_texts = [tokenizer.decode([i]) for i in torch.topk(kafka_logits[0], 21).indices.tolist()]
    if texts == first_texts and texts != expected_texts:
        diagnose(
            "top-tokens-first-position",
            "these are the top tokens of the first position's logits; use the last position"
        )
    if texts != expected_texts and texts == [text.strip() for text in expected_texts]:
        diagnose("top-token-text-without-leading-space", (
            "your token texts lost their leading space: tokenizer.decode([token_id]) gives "
            f"{expected_texts[0]!r}, and the space is part of the token; do not strip it"))
    expect(texts == expected_texts, "top-tokens-wrong", (
        f"expected the tokens {expected_texts[:5]}... (torch.topk of the last position's logits), "
        f"got {texts[:5]}..."))
    check_close(values, expected.values, "the logits in top_next_tokens", atol=1e-4,
                diagnosis="top-logits-wrong")


def test_top_next_tokens_returns_k_entries(ex, tiny_gpt2, kafka_ids):
    model, tokenizer = tiny_gpt2
    top = ex.top_next_tokens(model, tokenizer, kafka_ids, k=3)
    expect(len(top) == 3, "top-tokens-ignores-k",
           f"top_next_tokens(..., k=3) should return 3 entries, got {len(top)}")


# ----------------------------------------------------------------------------- make_scaling_hook


def run_with_hook(block, hook, x):
    handle = block.register_forward_hook(hook)
    try:
        return block(x)
    finally:
        handle.remove()


def test_scaling_hook_on_a_tensor_output(ex):
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))  # (batch, T, d_model)
    output = run_with_hook(TensorBlock(), ex.make_scaling_hook(0.5), x)
    expect(not isinstance(output, tuple), "hook-tensor-as-tuple", (
        f"the block returned a tensor, but the hook made it a tuple of {len(output)} element(s): "
        f"tuple unpacking of a tensor output (hidden, *rest = output splits the batch); on a "
        f"tensor, output[0] is the first row of the batch, which drops the batch dimension"))
    expect(isinstance(output, torch.Tensor), "hook-output-not-a-tensor",
           f"expected a tensor back, got {type(output).__name__}")
    check_shape(output, (2, 3, 4), "the hooked block's output", "the hook must keep the shape",
                diagnosis="hook-tensor-as-tuple")
    check_close(
        output, 2 * x * 0.5, "the hooked block's output", "expected the output times the factor",
        diagnosis="hook-does-not-scale",
    )


def test_scaling_hook_on_a_tuple_output(ex):
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    block = TupleBlock()
    try:
        output = run_with_hook(block, ex.make_scaling_hook(0.5), x)
    except (TypeError, AttributeError) as error:
        diagnose(
            "hook-tuple-as-tensor",
            f"the hook failed on a tuple output ({type(error).__name__}: {error}): GPT-2 blocks "
            f"return a tuple in transformers up to 5.2; scale output[0] and keep the rest"
        )
    expect(isinstance(output, tuple), "hook-tuple-as-tensor", (
        f"the block returned a tuple, but the hook returned a {type(output).__name__}: give back "
        f"a tuple with the first element scaled and the others as they were"))
    expect(len(output) == 2, "hook-tuple-length-changed",
           f"the tuple had 2 elements, the hook returned {len(output)}")
    check_close(
        output[0], 2 * x * 0.5, "the first element of the hooked output",
        "expected it times the factor", diagnosis="hook-does-not-scale",
    )
    expect(output[1] is block.extra, "hook-tuple-rest-changed",
           "the tuple's other elements must pass through unchanged")


def test_scaling_hook_does_not_scale_in_place(ex):
    hook = ex.make_scaling_hook(0.5)
    block = TensorBlock()
    x = torch.ones(1, 2, 3)
    for output in (2 * x, (2 * x, None)):
        hidden = output[0] if isinstance(output, tuple) else output
        kind = "tuple" if isinstance(output, tuple) else "tensor"
        try:
            returned = hook(block, (x,), output)
        except TypeError as error:
            diagnose("hook-tuple-as-tensor", (
                f"make_scaling_hook's hook failed on a {kind} output ({error}): a tuple cannot be "
                "multiplied; scale output[0] and keep the rest when isinstance(output, tuple)"))
        expect(torch.equal(hidden, 2 * x), "hook-in-place", (
            "the hook changed the block's output tensor in place (in-place scaling: mul_ or *=): "
            "other code still holds that tensor; return a new one, output * factor"))
        expect(returned is not None, "hook-returns-none", (
            "the hook returned None: a forward hook replaces the block's output only with the "
            "value it returns"))


def test_hook_registered_the_seed_way_or_with_prepend(ex, tiny_gpt2, kafka_ids):
    """Why the kata registers hooks with ``prepend=True``.

    The post's notebook first runs the model with ``output_hidden_states=True``, then registers
    its scaling hook. In transformers 5 that first run installs transformers' own forward hooks on
    every block, which record ``hidden_states``. A hook registered later runs after them:

    * the block's output is still replaced, so everything downstream and the logits change;
    * but the recorded ``hidden_states[i + 1]`` is the *unscaled* output of block ``i``.

    With ``prepend=True`` the scaling hook runs first, so the recorded state is scaled too.
    transformers 4's GPT-2 collects ``hidden_states`` in its loop over blocks, from each block's
    returned output, after all hooks: there the recorded state is scaled either way.
    """
    model, _ = tiny_gpt2
    block_index, factor = 1, 0.5
    block = kata.blocks(model)[block_index]
    with torch.no_grad():
        clean = model(kafka_ids, output_hidden_states=True)

    def run(prepend):
        handle = block.register_forward_hook(ex.make_scaling_hook(factor), prepend=prepend)
        try:
            with torch.no_grad():
                out = model(kafka_ids, output_hidden_states=True)
        finally:
            handle.remove()
        return out.hidden_states[block_index + 1], out.logits

    seed_hidden, seed_logits = run(prepend=False)
    first_hidden, first_logits = run(prepend=True)
    clean_hidden = clean.hidden_states[block_index + 1]

    expect(not torch.allclose(seed_logits, clean.logits, atol=1e-4), "hook-returns-none", (
        "with the scaling hook on block 1 the logits did not change: the hook must return the "
        "scaled output (a forward hook's return value replaces the block's output)"))
    check_close(
        seed_logits, first_logits, "the logits with the hook registered without prepend",
        "the order of the hooks must not change the logits", diagnosis="hook-order-matters",
    )
    check_close(
        first_hidden, factor * clean_hidden, "hidden_states[2] with prepend=True",
        "a hook that runs first should make transformers record the scaled output",
        diagnosis="hook-does-not-scale",
    )
    if transformers_major() >= 5:
        expect(not torch.allclose(seed_hidden, factor * clean_hidden, atol=1e-5), "hook-in-place", (
            "hidden_states[2] came out scaled although transformers 5's recording hook ran before "
            "yours and stored the unscaled output tensor: your hook changed that tensor in place "
            "(in-place scaling: mul_ or *=); return output * factor instead"
        ))
        check_close(
            seed_hidden, clean_hidden, "hidden_states[2] without prepend (transformers 5)",
            "the recording hook ran first and kept the unscaled output", diagnosis="hook-in-place",
        )
    else:
        check_close(
            seed_hidden, factor * clean_hidden, "hidden_states[2] without prepend (transformers 4)",
            "GPT-2 records each block's returned output after its hooks ran",
            diagnosis="hook-does-not-scale",
        )


def first_check_scaling_hook(ex) -> None:
    """scaling_experiment builds on make_scaling_hook: check what the hook returns first."""
    x = torch.ones(1, 2, 3)
    hook = ex.make_scaling_hook(0.5)
    for output, kind in ((2 * x, "tensor"), ((2 * x, None), "tuple")):
        try:
            returned = hook(TensorBlock(), (x,), output)
        except (TypeError, AttributeError, IndexError) as error:
            diagnose("hook-tuple-as-tensor" if kind == "tuple" else "hook-tensor-as-tuple", (
                f"your make_scaling_hook failed on a {kind} output ({type(error).__name__}: "
                f"{error}); fix make_scaling_hook first"))
        if returned is None:
            diagnose("hook-returns-none", (
                f"your make_scaling_hook's hook returned None for a {kind} output, so the block's "
                "output is never replaced; fix make_scaling_hook first: return the scaled output"))
        if kind == "tensor" and not isinstance(returned, torch.Tensor):
            diagnose("hook-tensor-as-tuple", (
                f"your make_scaling_hook returned a {type(returned).__name__} for a tensor output, "
                "so the next module receives it instead of a tensor; fix make_scaling_hook first: "
                "on a tensor, return output * factor"))
        if kind == "tuple" and not isinstance(returned, tuple):
            diagnose("hook-tuple-as-tensor", (
                f"your make_scaling_hook returned a {type(returned).__name__} for a tuple output; "
                "fix make_scaling_hook first: return (output[0] * factor, *output[1:])"))


def scaling_of(ex, model, input_ids, target_id, factor=0.8):
    """``ex.scaling_experiment(...)`` once make_scaling_hook works; GPT-2-only names explained."""
    first_check_scaling_hook(ex)
    try:
        return ex.scaling_experiment(model, input_ids, target_id, factor=factor)
    except AttributeError as error:
        diagnose("gpt2-names-in-scaling-experiment", (
            f"scaling_experiment failed on {type(model).__name__} ({error}): GPT-2-only names "
            "such as model.transformer.h or config.n_layer do not exist on Llama-family models; "
            "use kata.blocks(model) for the blocks and model.config.vocab_size for the vocabulary"))


# ----------------------------------------------------------------------------- scaling_experiment


def test_scaling_experiment_shape_and_dtype(ex, tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    n_layers = len(kata.blocks(model))
    values = scaling_of(ex, model, kafka_ids, INSECT_GPT2)
    check_tensor(values, "scaling_experiment")
    check_shape(
        values, (n_layers,), "scaling_experiment",
        f"one value per transformer block ({n_layers}); hidden_states has one more entry, the "
        f"embeddings, which the experiment does not scale",
        diagnosis="one-value-per-hidden-state" if len(values) == n_layers + 1 else "scaling-shape-wrong",
    )
    expect(values.dtype == torch.float32, "scaling-not-float32", f"expected float32, got {values.dtype}")
    expect(not values.requires_grad, "scaling-autograd-graph-kept",
           "the result is part of an autograd graph: use torch.no_grad()")


def test_scaling_by_one_changes_nothing(ex, tiny_gpt2, kafka_ids, clean_insect):
    model, _ = tiny_gpt2
    values = scaling_of(ex, model, kafka_ids, INSECT_GPT2, factor=1.0)
    expected = torch.full((len(kata.blocks(model)),), clean_insect)
    check_close(
        values, expected, "scaling_experiment with factor 1.0",
        f"scaling by 1 leaves the model as it is, so every block should give the clean "
        f"log-softmax of the target, {clean_insect:.4f}",
        atol=1e-4, diagnosis="scaling-by-one-changes",
    )


def test_scaling_experiment_matches_an_independent_computation(
    ex, tiny_gpt2, kafka_ids, scaled_insect
):
    model, _ = tiny_gpt2
    values = scaling_of(ex, model, kafka_ids, INSECT_GPT2, factor=0.8)
    values = torch.as_tensor(values).detach().float()
    if values.shape == scaled_insect.shape and not torch.allclose(values, scaled_insect, atol=1e-5):
        if torch.allclose(values[1:], scaled_insect[:-1], atol=1e-5):
            diagnose(
                "scaled-block-input",
                "your values are shifted by one block: you scaled each block's input (a forward "
                "pre-hook) instead of its output; use register_forward_hook"
            )
    check_close(
        values, scaled_insect, "scaling_experiment with factor 0.8",
        "entry i should be the target's log-softmax with only block i's output scaled; if hooks "
        "from earlier blocks were still registered, several blocks were scaled at once",
        atol=1e-5, diagnosis="scaling-values-wrong",
    )


def describe_hook_change(before, after):
    changed = [name for name in set(before) | set(after) if before.get(name) != after.get(name)]
    return ", ".join(sorted(name or "<model>" for name in changed))


def test_scaling_experiment_removes_its_hooks(ex, tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    before = hook_snapshot(model)
    try:
        scaling_of(ex, model, kafka_ids, INSECT_GPT2)
    finally:
        after = hook_snapshot(model)
        restore_hooks(model, before)  # so that a leak is reported once, here
    expect(after == before, "scaling-hook-never-removed", (
        f"after scaling_experiment the model's hooks changed on "
        f"{describe_hook_change(before, after)}: a hook left registered keeps scaling every later "
        f"forward pass; remove each one (handle.remove()) right after its forward pass"
    ))


def test_scaling_experiment_removes_its_hooks_when_the_forward_pass_raises(
    ex, tiny_gpt2, kafka_ids
):
    model, _ = tiny_gpt2
    first_check_scaling_hook(ex)

    def fail(module, args):
        raise RuntimeError("injected failure in the forward pass")

    handle = kata.final_norm(model).register_forward_pre_hook(fail)
    try:
        before = hook_snapshot(model)
        try:
            ex.scaling_experiment(model, kafka_ids, INSECT_GPT2)
        except NotImplementedError:  # a RuntimeError too, but the stub's, not ours
            raise
        except RuntimeError as error:
            expect("injected" in str(error), "scaling-error-replaced",
                   f"expected the injected RuntimeError, got {error!r}")
        else:
            diagnose(
                "scaling-error-swallowed",
                "the forward pass raised a RuntimeError, but scaling_experiment did not pass it "
                "on: do not swallow errors; let them propagate after removing the hook (finally)"
            )
        after = hook_snapshot(model)
        restore_hooks(model, before)  # so that a leak is reported once, here
    finally:
        handle.remove()
    expect(after == before, "scaling-hook-not-removed-on-error", (
        f"when the forward pass raised, a hook was left registered on "
        f"{describe_hook_change(before, after)}: remove it in a finally block "
        f"(try: ... finally: handle.remove()), not after the call"
    ))


def test_scaling_hook_runs_before_hooks_already_on_the_block(ex, tiny_gpt2, kafka_ids):
    """Other hooks on a block (like transformers 5's hidden-state recorders) see the scaled
    output, because the scaling hook is registered with ``prepend=True``."""
    model, _ = tiny_gpt2
    model_blocks = kata.blocks(model)
    factor = 0.5
    seen = {i: [] for i in range(len(model_blocks))}

    def observer(i):
        def record(module, inputs, output):
            hidden = output[0] if isinstance(output, tuple) else output
            seen[i].extend(hidden.detach().float().cpu())  # one (T, d_model) entry per batch row

        return record

    handles = [block.register_forward_hook(observer(i)) for i, block in enumerate(model_blocks)]
    try:
        with torch.no_grad():
            model(kafka_ids)
        clean = {i: rows[0] for i, rows in seen.items()}
        for rows in seen.values():
            rows.clear()
        scaling_of(ex, model, kafka_ids, INSECT_GPT2, factor=factor)
    finally:
        for handle in handles:
            handle.remove()
    for i, rows in seen.items():
        expect(any(torch.allclose(row, factor * clean[i], atol=1e-5) for row in rows),
               "hook-without-prepend", (
            f"during scaling_experiment, the hook already on block {i} never saw that block's "
            f"scaled output: register the scaling hook with prepend=True so it runs before hooks "
            f"already on the block (transformers 5 records output_hidden_states with such hooks)"
        ))


def test_scaling_the_last_block_barely_changes_the_prediction(
    ex, tiny_gpt2, kafka_ids, clean_insect
):
    """The final norm divides its input by the input's size: scaling the last block cancels."""
    model, _ = tiny_gpt2
    values = scaling_of(ex, model, kafka_ids, INSECT_GPT2, factor=0.8)
    change = abs(float(values[-1]) - clean_insect)
    expect(change < 2e-3, "last-block-scaling-changes", (
        f"scaling the last block changed the target's log-softmax by {change:.4f}; the final "
        f"norm cancels a global scale of its input (up to its epsilon), so it should barely "
        f"change: did you scale the block's input, or something after the final norm?"
    ))


def test_scaling_experiment_rejects_a_bad_target(ex, tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    bad = model.config.vocab_size + 5
    first_check_scaling_hook(ex)
    raises_clearly(
        ValueError, lambda: ex.scaling_experiment(model, kafka_ids, bad),
        f"scaling_experiment with target_id {bad} (the vocabulary has {bad - 5} tokens)",
        "Check target_id before running the model (kata.token_id(target_id, vocab_size) does).",
        "target-id-not-checked")


# ----------------------------------------------------------------------------- the figure


def numbers_in(strings):
    found = []
    for text in strings:
        found += [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text.replace("\u2212", "-"))]
    return found


def dashed_horizontal_lines_at(ax, y: float) -> list:
    """The dashed horizontal lines at ``y``: ``ax.axhline``/``ax.plot`` lines and ``ax.hlines``."""
    from matplotlib.collections import LineCollection

    found = [line for line in ax.get_lines()
             if line.get_linestyle() in ("--", "dashed")
             and np.allclose(np.asarray(line.get_ydata(), float), y, atol=1e-4)]
    for collection in ax.collections:
        if not isinstance(collection, LineCollection):
            continue
        dashed = any(dashes is not None for _, dashes in collection.get_linestyles())
        segments = [np.asarray(segment, float) for segment in collection.get_segments()]
        if dashed and segments and all(np.allclose(s[:, 1], y, atol=1e-4) for s in segments):
            found.append(collection)
    return found


def test_plot_scaling_experiment(ex):
    values = torch.tensor([-11.2, -11.05, -11.3, -11.09])
    clean = -11.0934
    fig = ex.plot_scaling_experiment(values, clean)
    try:
        expect(isinstance(fig, Figure), "scaling-figure-not-returned",
               f"expected a matplotlib Figure, got {type(fig).__name__}")
        expect(len(fig.axes) == 1, "scaling-figure-panel-count-wrong",
               f"figure 11 has one panel, got {len(fig.axes)} axes")
        ax = fig.axes[0]
        width, height = fig.get_size_inches()
        expect(width >= 2 * height, "scaling-figure-not-wide", (
            f"figure 11 is wide (about 9 x 3 inches), got {width:g} x {height:g}"
        ))

        series = [(points[:, 0], points[:, 1]) for points in drawn_points(ax, marked_only=True)]
        points = np.concatenate(drawn_points(ax, marked_only=True) or [np.zeros((0, 2))])
        if len(series) > 1:  # one call per block also counts: all marked points together
            series.append((points[:, 0], points[:, 1]))
        expect(series, "scaling-figure-no-markers", (
            "no markers found: draw one marker per block (ax.plot(x, values, 'o') or ax.scatter)"
        ))
        matching = [
            (x, y) for x, y in series
            if len(y) == len(values) and np.allclose(y, values.numpy(), atol=1e-4)
        ]
        expect(matching, "scaling-figure-markers-wrong", (
            f"no series of {len(values)} markers at the values {values.tolist()}; found "
            f"{[np.round(y, 3).tolist() for _, y in series]}"
        ))
        x = matching[0][0]
        expect(np.allclose(x, np.arange(len(values))), "scaling-figure-markers-off-blocks", (
            f"the markers should sit at the block indices 0..{len(values) - 1}, "
            f"got x = {x.tolist()}"
        ))

        expect(dashed_horizontal_lines_at(ax, clean), "clean-line-missing", (
            f"no dashed horizontal line at the clean value {clean} "
            f"(ax.axhline(clean_value, linestyle='--'))"
        ))
        legends = [legend for legend in [ax.get_legend(), *fig.legends] if legend is not None]
        strings = [t.get_text() for legend in legends for t in legend.get_texts()]
        strings += [t.get_text() for t in ax.texts] + [t.get_text() for t in fig.texts]
        expect(any(abs(n - clean) < 0.01 for n in numbers_in(strings)), "clean-line-unlabelled", (
            f"the clean line is not labelled with its value {clean:.3f}: show the number in a "
            f"legend or a text (label=f'clean: {{clean_value:.3f}}' and ax.legend()); "
            f"found {strings}"
        ))
        # Any label that says what the axis shows passes ("Transformer block (scaled by 0.8)").
        expect("block" in ax.get_xlabel().lower(), "scaling-figure-x-label",
               f"the x axis should be labelled 'Transformer block', got {ax.get_xlabel()!r}")
        y_label = ax.get_ylabel().lower().replace("-", " ").replace("_", " ")
        expect("log" in y_label and "softmax" in y_label.replace(" ", ""), "scaling-figure-y-label",
               f"the y axis should be labelled 'Log softmax', got {ax.get_ylabel()!r}")
        draw_headless(fig)
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- trained models


def top_21_after_kafka(ex, model, tokenizer) -> list[str]:
    input_ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
    return [text for text, _ in ex.top_next_tokens(model, tokenizer, input_ids, k=21)]


@pytest.mark.trained
def test_smollm2_puts_insect_among_the_top_21(ex, smollm2):
    texts = top_21_after_kafka(ex, *smollm2)
    expect(kata.TARGET_WORD in texts, "insect-not-in-top-21", (
        f"SmolLM2 ranks ' insect' among its 21 most likely next tokens after the Kafka sentence "
        f"(9th when measured), but the list was {texts}"
    ))


@pytest.mark.trained
def test_scaling_experiment_on_a_trained_llama_model(ex, smollm2_first_blocks):
    """The learner's experiment on SmolLM2's first 4 blocks (Llama blocks that return tensors,
    trained weights, the real final norm) against an independent computation. The published
    result on the whole model (27 of 30 blocks lower " insect") is checked, with the reference
    computation, in tests/course/test_model_facts.py: running the learner's 30 passes here
    would cost every save in `grader.py watch --warm` about 3.5 s."""
    model, tokenizer = smollm2_first_blocks
    input_ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
    target = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"]
    assert len(target) == 1
    values = torch.as_tensor(scaling_of(ex, model, input_ids, target[0], factor=0.8)).float()
    n_layers = len(kata.blocks(model))
    check_shape(values, (n_layers,), "scaling_experiment on a Llama model", "one value per block",
                diagnosis="scaling-shape-wrong")
    expected = scaled_block_log_probs(model, input_ids, target[0], 0.8)
    check_close(values, expected, "scaling_experiment on a Llama model (SmolLM2's first 4 blocks)",
                "each value is the target's log-softmax with that one block's output times 0.8",
                atol=1e-4, diagnosis="scaling-differs-on-llama")
    clean = torch.log_softmax(reference_logits(model, input_ids)[-1], dim=-1)[target[0]].item()
    expect(abs(values[-1].item() - clean) < 1e-3, "last-block-scaling-changes", (
        f"scaling the last block changed the log-softmax by {values[-1].item() - clean:.4f}; "
        f"the final RMSNorm cancels a global scale, so it should not change"
    ))


@pytest.mark.trained
def test_gpt2_ranks_insect_15th(ex, gpt2):
    texts = top_21_after_kafka(ex, *gpt2)
    expect(kata.TARGET_WORD in texts and texts.index(kata.TARGET_WORD) == 14, "insect-not-15th", (
        f"the post's GPT-2 lists ' insect' 15th of its 21 most likely next tokens; got {texts}"))


# ----------------------------------------------------------------------------- secret checks
# Every public function again, on inputs drawn from a seed only the grader knows (course/shared/secret.py):
# a text from a pool cut at a random length, a random target, factor and block, random values.
# Their points count only if these pass.

from course.shared.secret import repeat_hint, secret, secret_check  # noqa: E402,F401 - secret: a fixture


def secret_prefix(secret, tokenizer, shortest=2):
    """A text from the pool, cut after a random number of its tokens: ``(1, T)`` ids."""
    ids = tokenizer(secret.text(), return_tensors="pt")["input_ids"]
    return ids[:, :secret.integer(min(shortest, ids.shape[1]), ids.shape[1])]


def secret_words(text):
    return re.findall(r"[A-Za-z]+", text)


@secret_check("text_stats")
def test_secret_text_stats_of_a_secret_text(ex, tiny_gpt2, secret):
    _, tokenizer = tiny_gpt2
    words = secret_words(secret.text())
    # a sentence of the pool, with a few of its own words repeated: repeated tokens to count once
    repeated = " ".join(secret.choice(words) for _ in range(secret.integer(1, 4)))
    text = secret.text() + " " + repeated
    ids = tokenizer(text)["input_ids"]
    expected = {"chars": len(text), "unique_chars": len(set(text)),
                "tokens": len(ids), "unique_tokens": len(set(ids))}
    stats = ex.text_stats(tokenizer, text)
    expect(isinstance(stats, dict), "text-stats-not-a-dict",
           f"text_stats should return a dict, got {type(stats).__name__}")
    check_unique_tokens_of_ints(stats, ids)
    expect(stats == expected, "text-stats-wrong",
           f"for {text!r} expected {expected}, got {stats}" + repeat_hint())


@secret_check("target_token_id")
def test_secret_target_token_id_of_words_of_a_secret_text(ex, tiny_gpt2, secret):
    _, tokenizer = tiny_gpt2
    words = secret_words(secret.text())
    single = [" " + w for w in words if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1]
    word = secret.choice(single)
    expected = tokenizer(word, add_special_tokens=False)["input_ids"][0]
    token_id = ex.target_token_id(tokenizer, word)
    expect(isinstance(token_id, int) and not isinstance(token_id, bool), "target-id-not-int",
           f"target_token_id should return the id as a Python int, got {type(token_id).__name__}")
    expect(token_id == expected, "target-id-wrong",
           f"{word!r} is GPT-2 token {expected}, got {token_id}" + repeat_hint())
    # two of the text's words glued together: several tokens, never cut to the first one
    glued = [" " + a.lower() + b.lower() for a in words for b in words]
    glued = [w for w in glued if len(tokenizer(w, add_special_tokens=False)["input_ids"]) > 1]
    word = secret.choice(glued)
    pieces = [tokenizer.decode([i]) for i in tokenizer(word, add_special_tokens=False)["input_ids"]]
    try:
        token_id = ex.target_token_id(tokenizer, word)
    except ValueError:
        pass
    else:
        diagnose("multi-token-target-truncated",
                 f"{word!r} is {len(pieces)} GPT-2 tokens {pieces}, but target_token_id returned "
                 f"{token_id!r} instead of raising a ValueError" + repeat_hint())


@secret_check("next_token_log_probs")
def test_secret_next_token_log_probs_of_a_secret_text(ex, tiny_gpt2, secret):
    model, tokenizer = tiny_gpt2
    ids = secret_prefix(secret, tokenizer, shortest=1)
    given = ids[0] if secret.choice([True, False]) else ids  # (T,) or (1, T)
    try:
        log_probs = ex.next_token_log_probs(model, given)
    except (IndexError, RuntimeError, ValueError) as error:
        diagnose("unbatched-input" if given.dim() == 1 else "log-probs-wrong",
                 f"next_token_log_probs failed on ids of shape {tuple(given.shape)} "
                 f"({type(error).__name__}: {error})" + repeat_hint())
    check_tensor(log_probs, "next_token_log_probs")
    expected = torch.log_softmax(reference_logits(model, ids)[-1], dim=-1)
    check_close(log_probs, expected, f"next_token_log_probs of {ids.shape[1]} tokens of shape "
                f"{tuple(given.shape)}",
                "expected torch.log_softmax(model(input_ids).logits[0, -1], dim=-1)" + repeat_hint(),
                atol=1e-4, diagnosis="log-probs-wrong")


@secret_check("top_next_tokens")
def test_secret_top_next_tokens_of_a_secret_text(ex, tiny_gpt2, secret):
    model, tokenizer = tiny_gpt2
    ids = secret_prefix(secret, tokenizer, shortest=1)
    k = secret.integer(1, 30)
    top = ex.top_next_tokens(model, tokenizer, ids, k=k)
    expect(isinstance(top, list) and len(top) == k, "top-tokens-ignores-k",
           f"top_next_tokens(..., k={k}) should return a list of {k} entries, got "
           f"{len(top) if hasattr(top, '__len__') else type(top).__name__}" + repeat_hint())
    expect(all(isinstance(pair, tuple) and len(pair) == 2 for pair in top), "top-tokens-not-pairs",
           f"each entry should be a (token text, logit) tuple, got {top[0]!r}")
    logits = reference_logits(model, ids)[-1]
    expected = torch.topk(logits, k)
    values = torch.tensor([float(value) for _, value in top])
    check_close(values, expected.values, f"the logits in top_next_tokens(..., k={k})",
                "torch.topk of the last position's logits, highest first" + repeat_hint(),
                atol=1e-4, diagnosis="top-logits-wrong")
    for j, (text, _) in enumerate(top):
        # any of the tokens tied with the expected one at this place is right
        tied = (logits - expected.values[j]).abs() <= 1e-6
        allowed = {tokenizer.decode([i]) for i in tied.nonzero()[:, 0].tolist()}
        expect(text in allowed, "top-tokens-wrong",
               f"entry {j} of top_next_tokens(..., k={k}) is {text!r}, expected "
               f"{tokenizer.decode([expected.indices[j].item()])!r} (torch.topk of the last "
               "position's logits, tokenizer.decode([token_id]))" + repeat_hint())


@secret_check("make_scaling_hook")
def test_secret_scaling_hook_on_toy_blocks_and_a_model_block(ex, tiny_gpt2, secret):
    factor = secret.number(0.2, 3.0)
    x = secret.tensor(secret.integer(1, 3), secret.integer(1, 6), secret.integer(2, 9))
    output = run_with_hook(TensorBlock(), ex.make_scaling_hook(factor), x)
    expect(isinstance(output, torch.Tensor), "hook-tensor-as-tuple",
           f"the block returned a tensor, the hook gave back a {type(output).__name__}")
    check_close(output, 2 * x * factor, f"a tensor block's output hooked with factor {factor}",
                "expected the output times the factor" + repeat_hint(),
                diagnosis="hook-does-not-scale")
    block = TupleBlock()
    try:
        output = run_with_hook(block, ex.make_scaling_hook(factor), x)
    except (TypeError, AttributeError) as error:
        diagnose("hook-tuple-as-tensor",
                 f"the hook failed on a tuple output ({type(error).__name__}: {error}): scale "
                 "output[0] and keep the rest" + repeat_hint())
    expect(isinstance(output, tuple) and len(output) == 2, "hook-tuple-as-tensor",
           "the block returned a tuple of 2: give back a tuple with the first element scaled")
    check_close(output[0], 2 * x * factor, f"a tuple block's first element hooked with factor "
                f"{factor}", "expected it times the factor" + repeat_hint(),
                diagnosis="hook-does-not-scale")
    # on a block of the model (a tuple or a tensor, as the installed transformers has it)
    model, tokenizer = tiny_gpt2
    ids = secret_prefix(secret, tokenizer)
    model_blocks = kata.blocks(model)
    i = secret.integer(0, len(model_blocks) - 1)
    receiver = (list(model_blocks[1:]) + [kata.final_norm(model)])[i]
    handle = receiver.register_forward_pre_hook(scale_first_input(factor), with_kwargs=True)
    try:
        expected = reference_logits(model, ids)
    finally:
        handle.remove()
    handle = model_blocks[i].register_forward_hook(ex.make_scaling_hook(factor), prepend=True)
    try:
        logits = reference_logits(model, ids)
    finally:
        handle.remove()
    check_close(logits, expected, f"the logits with block {i}'s output hooked with factor {factor}",
                "the hook should replace the block's output with the output times the factor"
                + repeat_hint(), atol=1e-4, diagnosis="hook-does-not-scale")


@secret_check("scaling_experiment")
def test_secret_scaling_experiment_with_a_secret_text_target_and_factor(ex, tiny_gpt2, secret):
    model, tokenizer = tiny_gpt2
    ids = secret_prefix(secret, tokenizer)
    target_id = secret.integer(0, model.config.vocab_size - 1)
    factor = secret.number(0.3, 2.0)
    values = scaling_of(ex, model, ids, target_id, factor=factor)
    check_tensor(values, "scaling_experiment")
    expected = independent_scaling(model, ids, target_id, factor)
    check_shape(values, tuple(expected.shape), "scaling_experiment", "one value per block",
                diagnosis="scaling-shape-wrong")
    check_close(values, expected, f"scaling_experiment of {ids.shape[1]} tokens, target "
                f"{target_id}, factor {factor}",
                "entry i should be the target's log-softmax with only block i's output scaled"
                + repeat_hint(), atol=1e-4, diagnosis="scaling-values-wrong")


@secret_check("plot_scaling_experiment")
def test_secret_figure_draws_secret_values_and_clean_line(ex, secret):
    n = secret.integer(2, 12)
    clean = secret.number(-14.0, -1.0)
    values = clean + secret.tensor(n, scale=secret.number(0.05, 2.0))
    fig = ex.plot_scaling_experiment(values, clean)
    try:
        expect(isinstance(fig, Figure) and len(fig.axes) == 1, "scaling-figure-panel-count-wrong",
               "plot_scaling_experiment should return a Figure with one panel")
        ax = fig.axes[0]
        points = np.concatenate(drawn_points(ax, marked_only=True) or [np.zeros((0, 2))])
        for block, value in enumerate(values.tolist()):
            expect(bool(np.any(np.isclose(points[:, 0], block, atol=1e-6)
                               & np.isclose(points[:, 1], value, atol=1e-4))),
                   "scaling-figure-markers-wrong",
                   f"no marker at block {block}, value {value:.4f} (of {n} blocks)" + repeat_hint())
        expect(dashed_horizontal_lines_at(ax, clean), "clean-line-missing",
               f"no dashed horizontal line at the clean value {clean}" + repeat_hint())
        legends = [legend for legend in [ax.get_legend(), *fig.legends] if legend is not None]
        strings = [t.get_text() for legend in legends for t in legend.get_texts()]
        strings += [t.get_text() for t in ax.texts] + [t.get_text() for t in fig.texts]
        expect(any(abs(number - clean) < 0.01 for number in numbers_in(strings)),
               "clean-line-unlabelled",
               f"the clean line is not labelled with its value {clean:.3f}; found {strings}"
               + repeat_hint())
    finally:
        plt.close(fig)
