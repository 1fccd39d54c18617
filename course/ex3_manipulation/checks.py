"""Exercise 3's checks: the model's own prediction, the scaling done another way, and what a
wrong answer looks like.

Every expected value comes from the tokenizer, the model or torch directly, computed from the
test's own inputs before the learner's code sees them. The scaled runs are recomputed
independently: instead of a forward hook on block ``i`` that scales its output, this module scales
the *input* of the module that consumes that output (block ``i + 1``, or the final norm after the
last block) with a forward pre-hook. Each ``check_*`` function reads a result the learner's code
returned and, when it is wrong, names the mistake by the shape of its wrongness (raw logits,
probabilities, the first position, a tuple taken for a tensor, values shifted by one block...)
through :func:`~course.shared.diagnosis.diagnose`, with a stable id the mistakes catalogue uses.
"""

import re

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from course.shared.diagnosis import diagnose  # noqa: E402
from course.shared.reference import recorded  # noqa: E402
from course.shared.support import (  # noqa: E402
    TensorBlock,
    check_close,
    computed_once,
    drawn_points,
    expect,
    reference_logits,
)
from kata.hooks import hook_snapshot, restore_hooks  # noqa: E402

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


def scaled_logits(model, input_ids, block: int, factor: float) -> torch.Tensor:
    """``(T, vocab_size)``: the logits with block ``block``'s output times ``factor``, scaled
    where it is received: the input of the next block, or of the final norm after the last."""
    model_blocks = kata.blocks(model)
    receivers = list(model_blocks[1:]) + [kata.final_norm(model)]
    handle = receivers[block].register_forward_pre_hook(scale_first_input(factor),
                                                        with_kwargs=True)
    try:
        return reference_logits(model, input_ids)
    finally:
        handle.remove()


def independent_scaling(model, input_ids, target_id, factor):
    """The scaling experiment done another way: scale what *receives* block i's output.

    Block i's output feeds only block i + 1 (or, after the last block, the final norm), so
    scaling that module's input is the same as scaling block i's output.
    """
    values = [torch.log_softmax(scaled_logits(model, input_ids, block, factor)[-1], dim=-1)[target_id]
              for block in range(len(kata.blocks(model)))]
    return torch.stack(values)


@pytest.fixture(scope="module")
def kafka_ids(tiny_gpt2):
    _, tokenizer = tiny_gpt2
    return tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]  # (1, 22)


@pytest.fixture(scope="module")
def kafka_logits(tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    return computed_once(("ex3-kafka-logits", "tiny-gpt2"),
                         lambda: reference_logits(model, kafka_ids))  # (22, 50257)


@pytest.fixture(scope="module")
def clean_insect(kafka_logits):
    return torch.log_softmax(kafka_logits[-1], dim=-1)[INSECT_GPT2].item()


@pytest.fixture(scope="module")
def scaled_insect(tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    return computed_once(("ex3-kafka-scaling", "tiny-gpt2", 0.8),
                         lambda: independent_scaling(model, kafka_ids, INSECT_GPT2, 0.8))  # (4,)


# ----------------------------------------------------------------------------- text_stats


def text_stats_of(tokenizer, text: str) -> dict:
    """What text_stats must return for ``text``, counted here."""
    ids = tokenizer(text)["input_ids"]
    return {"chars": len(text), "unique_chars": len(set(text)),
            "tokens": len(ids), "unique_tokens": len(set(ids))}


def check_stats_are_a_dict_of_ints(stats, keys) -> None:
    expect(isinstance(stats, dict), "text-stats-not-a-dict",
           f"text_stats should return a dict, got {type(stats).__name__}")
    expect(set(stats) == set(keys), "text-stats-keys-wrong",
           f"text_stats should return the keys {sorted(keys)}, got {sorted(stats)}")
    values = {key: value for key, value in stats.items() if type(value) is not int}
    expect(not values, "text-stats-not-ints", (
        f"text_stats's values should be Python ints, got {values}: a count is a plain int, and "
        "a 0-d tensor is not one"))


def check_repeated_tokens_counted_once(stats, expected: dict, text: str, then: str = "") -> None:
    """``stats`` of a text whose tokens repeat: distinct tokens counted once, by their ids."""
    expect(stats["tokens"] == expected["tokens"], "text-stats-token-count-wrong", (
        f"{text!r} is {expected['tokens']} tokens, got tokens={stats['tokens']}: count the ids "
        f"the tokenizer makes of the text, not its words or characters{then}"))
    if expected["unique_tokens"] < expected["tokens"] == stats["unique_tokens"]:
        diagnose("set-of-tensors", (
            f"{text!r} has {expected['unique_tokens']} distinct tokens (some repeat), but "
            f"unique_tokens={stats['unique_tokens']} counts every token: either nothing was "
            "deduplicated, or the set held 0-d tensors, which hash by identity, so equal ids "
            f"stay apart; count distinct plain ints{then}"))
    expect(stats["unique_tokens"] == expected["unique_tokens"], "unique-tokens-wrong", (
        f"{text!r} has {expected['unique_tokens']} distinct tokens, got "
        f"unique_tokens={stats['unique_tokens']}: count each distinct token id once{then}"))


# ----------------------------------------------------------------------------- target_token_id


def pieces_of(tokenizer, word: str) -> list[str]:
    """The texts of the tokens the tokenizer makes of ``word`` alone."""
    return [tokenizer.decode([i]) for i in tokenizer(word, add_special_tokens=False)["input_ids"]]


def check_target_id(token_id, expected: int, word: str, then: str = "") -> None:
    expect(isinstance(token_id, int) and not isinstance(token_id, bool), "target-id-not-int", (
        f"target_token_id should return the id as a Python int, got {type(token_id).__name__} "
        f"({token_id!r})"))
    expect(token_id == expected, "target-id-wrong", f"{word!r} is token {expected}, got "
           f"{token_id}{then}")


def check_several_tokens_refused(ex, tokenizer, word: str, then: str = "") -> None:
    """``target_token_id`` of a word of several tokens raises a ValueError listing the pieces."""
    pieces = pieces_of(tokenizer, word)
    try:
        token_id = ex.target_token_id(tokenizer, word)
    except ValueError as error:
        # the pieces themselves, not the word that contains them: "in" and "sect" are in "insect"
        rest = str(error).replace(word.strip(), "")
        missing = [piece for piece in pieces if piece.strip() not in rest]
        expect(not missing, "target-error-without-pieces", (
            f"the ValueError for {word!r} should list the pieces the tokenizer made, {pieces}; "
            f"its message {str(error)!r} does not mention {missing}{then}"))
        return
    diagnose("multi-token-target-truncated", (
        f"{word!r} is {len(pieces)} tokens {pieces}, but target_token_id returned {token_id!r} "
        "instead of raising a ValueError: a word silently cut to its first piece measures the "
        f"wrong thing{then}"))


# ----------------------------------------------------------------------------- next_token_log_probs


# case: (the shape of the ids for a context of ``limit`` tokens, the diagnosis, why it is refused)
BAD_INPUTS = {
    "longer than the context": (lambda limit: (1, limit + 1),
                                "prediction-context-length-not-checked",
                                "the model reads at most {limit} tokens (kata.context_length)"),
    "empty": (lambda limit: (1, 0), "empty-input-not-checked",
              "with no tokens there is no last position to predict from"),
    "two sequences": (lambda limit: (2, 5), "batch-input-not-checked",
                      "the function answers for one sequence, shape (1, T) or (T,)"),
}


def log_probs_of(ex, model, input_ids: torch.Tensor, then: str = ""):
    """``ex.next_token_log_probs`` of a copy of ``input_ids``; an error from ids of shape (T,)
    told as the missing batch dimension, any other library error as a sentence."""
    try:
        return ex.next_token_log_probs(model, input_ids.clone())
    except NotImplementedError:
        raise
    except (IndexError, RuntimeError, ValueError) as error:
        first_line = str(error).splitlines()[0] if str(error) else ""
        if input_ids.dim() == 1:
            diagnose("unbatched-input", (
                f"next_token_log_probs failed on ids of shape (T,) ({type(error).__name__}: "
                f"{first_line}): the (T,) ids reached the model without their batch dimension; "
                "a (T,) tensor of ids is one sequence, and the model wants a batch of them "
                f"(kata.one_sequence makes one){then}"))
        diagnose("log-probs-wrong", (
            f"next_token_log_probs failed on {input_ids.shape[-1]} valid token ids of shape "
            f"{tuple(input_ids.shape)} ({type(error).__name__}: {first_line}){then}"))


def check_log_distribution(log_probs, logits: torch.Tensor) -> None:
    """``log_probs`` must be a log-distribution (its exp sums to 1); else name what it is
    instead. ``logits``: the model's own ``(T, vocab_size)``."""
    log_probs = torch.as_tensor(log_probs).detach().float().cpu()
    total = log_probs.exp().sum().item()
    if abs(total - 1) < 1e-3:
        return
    if torch.allclose(log_probs, logits[-1], atol=1e-4):
        id, mistake = "logits-not-log-softmax", (
            "these are the raw logits: the log-softmax over the vocabulary turns them into "
            "log-probabilities")
    elif abs(log_probs.sum().item() - 1) < 1e-3 and log_probs.min() >= 0:
        id, mistake = "softmax-not-log-softmax", (
            "these are probabilities: softmax instead of log-softmax (their logarithm)")
    elif torch.allclose(log_probs, torch.log_softmax(logits, dim=0)[-1], atol=1e-4):
        id, mistake = "log-softmax-over-positions", (
            "log-softmax over the wrong dimension: you normalised over the positions; "
            "normalise over the vocabulary, the last dimension")
    else:
        id, mistake = "log-probs-not-a-distribution", (
            "expected the log-softmax of the last position's logits over the vocabulary")
    diagnose(id, f"exp(next_token_log_probs) sums to {total:.4g}, not 1: {mistake}")


def check_log_probs(log_probs, logits: torch.Tensor, name: str, then: str = "") -> None:
    """``log_probs`` must be the log-softmax of the last position of ``logits`` ``(T, vocab)``."""
    log_probs = torch.as_tensor(log_probs).detach().float().cpu()
    expected = torch.log_softmax(logits[-1], dim=-1)
    first = torch.log_softmax(logits[0], dim=-1)
    if log_probs.shape == first.shape and not torch.allclose(first, expected, atol=1e-4) and \
            torch.allclose(log_probs, first, atol=1e-4):
        diagnose("first-position-logits", (
            f"{name} used the logits of the first position; the prediction for the next token "
            f"is at the last position{then}"))
    check_log_distribution(log_probs, logits)
    check_close(log_probs, expected, name,
                "expected the log-softmax of the last position's logits, over the vocabulary"
                + then, atol=1e-4, diagnosis="log-probs-wrong")


# ----------------------------------------------------------------------------- top_next_tokens


def check_top_pairs(top) -> None:
    """``top``'s entries must be (text, float) pairs."""
    expect(all(isinstance(pair, tuple) and len(pair) == 2 for pair in top), "top-tokens-not-pairs",
           f"each entry should be a (token text, logit) tuple, got {top[:1]!r}")
    not_floats = [value for _, value in top if type(value) is not float]
    expect(not not_floats, "top-logit-not-float", (
        f"each logit should be a Python float, got "
        f"{type(not_floats[0]).__name__ if not_floats else ''} {not_floats[:1]!r}: a 0-d tensor "
        "is not a float"))
    texts = [text for text, _ in top]
    expect(all(isinstance(text, str) for text in texts), "top-token-text-not-str",
           f"token texts should be strings, each token decoded on its own, got {texts[:3]!r}")


def check_top_tokens(top, logits: torch.Tensor, tokenizer, k: int, then: str = "",
                     count_wrong: str = "top-tokens-ignores-k") -> None:
    """``top`` must list the ``k`` highest logits of the last position, highest first, each with
    its token's text; any token tied with the expected one at a place is right. ``logits`` is the
    model's own ``(T, vocab_size)``; ``count_wrong`` the diagnosis of a list of another length."""
    expect(isinstance(top, list), "top-tokens-not-a-list",
           f"top_next_tokens should return a list, got {type(top).__name__}")
    expect(len(top) == k, count_wrong,
           f"top_next_tokens(..., k={k}) should return {k} entries, got {len(top)}{then}")
    check_top_pairs(top)
    last = logits[-1]
    expected = torch.topk(last, k)
    expected_texts = [tokenizer.decode([i]) for i in expected.indices.tolist()]
    texts = [text for text, _ in top]
    values = torch.tensor([float(value) for _, value in top])
    if (values[1:] > values[:-1]).any():
        diagnose("top-tokens-lowest-first", (
            f"top_next_tokens should be sorted highest logit first, got "
            f"{values[:5].tolist()}...{then}"))
    if torch.allclose(values, torch.log_softmax(last, dim=-1)[expected.indices], atol=1e-4):
        diagnose("top-tokens-log-probs",
                 f"the values are log-softmax values; figure 10 lists the raw logits{then}")
    if logits.shape[0] > 1 and texts != expected_texts and texts == [
            tokenizer.decode([i]) for i in torch.topk(logits[0], k).indices.tolist()]:
        diagnose("top-tokens-first-position", (
            f"these are the top tokens of the first position's logits; the prediction for the "
            f"next token is at the last position{then}"))
    if texts != expected_texts and texts == [text.strip() for text in expected_texts]:
        diagnose("top-token-text-without-leading-space", (
            f"your token texts lost their leading space: the tokenizer decodes the first as "
            f"{expected_texts[0]!r}, and the space is part of the token; do not strip it{then}"))
    for j, text in enumerate(texts):
        tied = (last - expected.values[j]).abs() <= 1e-6  # any of the tokens tied here is right
        allowed = {tokenizer.decode([i]) for i in tied.nonzero()[:, 0].tolist()}
        expect(text in allowed, "top-tokens-wrong", (
            f"entry {j} of top_next_tokens(..., k={k}) is {text!r}, expected "
            f"{expected_texts[j]!r} (the first five: {expected_texts[:5]}, got {texts[:5]}): the "
            f"tokens of the highest logits of the last position, each decoded on its own{then}"))
    check_close(values, expected.values, f"the logits in top_next_tokens(..., k={k})",
                "the highest logits of the last position, highest first" + then, atol=1e-4,
                diagnosis="top-logits-wrong")


def top_21_after_kafka(ex, model, tokenizer) -> list[str]:
    input_ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
    return [text for text, _ in ex.top_next_tokens(model, tokenizer, input_ids, k=21)]


# ----------------------------------------------------------------------------- make_scaling_hook


def recorded_with_hook(model, input_ids, block: int, hook, prepend: bool = True):
    """``(hidden_states[block + 1], logits)`` that the model records with ``hook`` on block
    ``block`` (registered first or last among the block's hooks; no hook when None)."""
    handle = None if hook is None else kata.blocks(model)[block].register_forward_hook(
        hook, prepend=prepend)
    try:
        hidden, logits = recorded(model, input_ids)
    finally:
        if handle is not None:
            handle.remove()
    return hidden[block + 1], logits


def run_with_hook(block, hook, x):
    handle = block.register_forward_hook(hook)
    try:
        return block(x)
    finally:
        handle.remove()


def tuple_hook_output(block, hook, x, then: str = ""):
    """``block(x)`` with ``hook`` on a block whose output is a tuple; the hook's failure on it
    told as a tuple taken for a tensor."""
    try:
        return run_with_hook(block, hook, x)
    except (TypeError, AttributeError) as error:
        diagnose("hook-tuple-as-tensor", (
            f"the hook failed on a tuple output ({type(error).__name__}: {error}): GPT-2 blocks "
            "return a tuple in transformers up to 5.2; scale its first element and keep the "
            f"others{then}"))


def check_tensor_hook_output(output, expected: torch.Tensor, name: str, then: str = "") -> None:
    """What a hooked block that returns a tensor gave back: the same shape, times the factor."""
    expect(not isinstance(output, tuple), "hook-tensor-as-tuple", (
        f"the block returned a tensor, but the hook made it a tuple of {len(output)} element(s): "
        "a tensor output was unpacked like a tuple, which splits the batch; on a tensor, the "
        f"first element is the first row of the batch, not the hidden states{then}"))
    expect(isinstance(output, torch.Tensor), "hook-output-not-a-tensor",
           f"expected a tensor back, got {type(output).__name__}{then}")
    expect(tuple(output.shape) == tuple(expected.shape), "hook-tensor-as-tuple", (
        f"{name} has shape {tuple(output.shape)}, expected {tuple(expected.shape)}: the hook "
        f"must keep the shape{then}"))
    check_close(output, expected, name, "expected the output times the factor" + then,
                diagnosis="hook-does-not-scale")


def check_tuple_hook_output(output, expected: torch.Tensor, extra, then: str = "") -> None:
    """What a hooked block that returns ``(hidden, extra)`` gave back."""
    expect(isinstance(output, tuple), "hook-tuple-as-tensor", (
        f"the block returned a tuple, but the hook returned a {type(output).__name__}: give back "
        f"a tuple with the first element scaled and the others as they were{then}"))
    expect(len(output) == 2, "hook-tuple-length-changed",
           f"the tuple had 2 elements, the hook returned {len(output)}{then}")
    check_close(output[0], expected, "the first element of the hooked output",
                "expected it times the factor" + then, diagnosis="hook-does-not-scale")
    expect(output[1] is extra, "hook-tuple-rest-changed",
           f"the tuple's other elements must pass through unchanged{then}")


def check_out_of_place(hook, shape: tuple, then: str = "") -> None:
    """The hook, called on a tensor output and on a tuple one, leaves them as they were and
    returns a value (in-place scaling would change what the block and other hooks still hold)."""
    x = torch.ones(shape)
    for output in (2 * x, (2 * x, None)):
        hidden = output[0] if isinstance(output, tuple) else output
        kind = "tuple" if isinstance(output, tuple) else "tensor"
        try:
            returned = hook(TensorBlock(), (x,), output)
        except TypeError as error:
            diagnose("hook-tuple-as-tensor", (
                f"make_scaling_hook's hook failed on a {kind} output ({error}): a tuple cannot be "
                f"multiplied; scale its first element and keep the others{then}"))
        expect(torch.equal(hidden, 2 * x), "hook-in-place", (
            "the hook changed the block's output tensor in place (in-place scaling: mul_ or *=): "
            f"other code still holds that tensor; build a new one instead{then}"))
        expect(returned is not None, "hook-returns-none", (
            "the hook returned None: a forward hook replaces the block's output only with the "
            f"value it returns{then}"))


# ----------------------------------------------------------------------------- scaling_experiment


def first_check_scaling_hook(ex) -> None:
    """The public tests of scaling_experiment, which builds on make_scaling_hook, check what the
    hook returns first, so that its mistake is named where it is made. (The secret check never
    does: it confirms scaling_experiment alone.)"""
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
                "output is never replaced; fix make_scaling_hook first: a forward hook replaces "
                "the output with what it returns"))
        if kind == "tensor" and not isinstance(returned, torch.Tensor):
            diagnose("hook-tensor-as-tuple", (
                f"your make_scaling_hook returned a {type(returned).__name__} for a tensor output, "
                "so the next module receives it instead of a tensor; fix make_scaling_hook first: "
                "a tensor output is replaced by the scaled tensor"))
        if kind == "tuple" and not isinstance(returned, tuple):
            diagnose("hook-tuple-as-tensor", (
                f"your make_scaling_hook returned a {type(returned).__name__} for a tuple output; "
                "fix make_scaling_hook first: a tuple output is replaced by a tuple with its "
                "first element scaled and the others unchanged"))


def experiment_of(ex, model, input_ids, target_id, factor=0.8):
    """``ex.scaling_experiment`` on a copy of ``input_ids``; GPT-2-only names, and a scaled output
    of the wrong kind reaching the next module, explained."""
    try:
        return ex.scaling_experiment(model, input_ids.clone(), target_id, factor=factor)
    except AttributeError as error:
        diagnose("gpt2-names-in-scaling-experiment", (
            f"scaling_experiment failed on {type(model).__name__} ({error}): GPT-2-only names "
            "such as model.transformer.h or config.n_layer do not exist on Llama-family models; "
            "kata.blocks finds the blocks of both, and the config's vocab_size names the "
            "vocabulary of both"))
    except TypeError as error:
        if "not tuple" in str(error):
            diagnose("hook-tensor-as-tuple", (
                f"scaling_experiment failed ({error}): the module after a scaled block received "
                "a tuple where the block had returned a tensor; the scaling hook must give back "
                "the kind of output the block returned (on a tensor, the first element is the "
                "first row of the batch, not the hidden states)"))
        if "can't multiply sequence" in str(error):
            diagnose("hook-tuple-as-tensor", (
                f"scaling_experiment failed ({error}): the scaling hook multiplied a block's "
                "tuple output as if it were a tensor; scale its first element and keep the "
                "others"))
        raise


def scaling_of(ex, model, input_ids, target_id, factor=0.8):
    """The public tests' ``ex.scaling_experiment(...)``, once make_scaling_hook works."""
    first_check_scaling_hook(ex)
    return experiment_of(ex, model, input_ids, target_id, factor)


def check_scaling_values(values, expected: torch.Tensor, name: str, then: str = "",
                         atol: float = 1e-5) -> None:
    """``values`` must be the independent computation's ``expected``, one value per block."""
    values = torch.as_tensor(values).detach().float()
    n_layers = len(expected)
    expect(values.shape == expected.shape, "one-value-per-hidden-state"
           if values.shape == (n_layers + 1,) else "scaling-shape-wrong", (
               f"{name} has shape {tuple(values.shape)}, expected ({n_layers},): one value per "
               "transformer block; the hidden states have one more entry, the embeddings, which "
               f"the experiment does not scale{then}"))
    if not torch.allclose(values, expected, atol=atol) and n_layers > 1 \
            and torch.allclose(values[1:], expected[:-1], atol=atol):
        diagnose("scaled-block-input", (
            "your values are shifted by one block: you scaled each block's input instead of its "
            f"output, which a forward hook receives{then}"))
    check_close(values, expected, name, (
        "entry i should be the target's log-softmax with only block i's output scaled; if hooks "
        "from earlier blocks were still registered, several blocks were scaled at once" + then),
        atol=atol, diagnosis="scaling-values-wrong")


def check_hooks_removed_when_a_run_fails(ex, model, input_ids, target_id, failing_run: int,
                                         then: str = "") -> None:
    """``scaling_experiment`` whose ``failing_run``-th forward pass raises: the error passes
    through, and the model's hooks end as they were."""

    class InjectedFailure(RuntimeError):
        pass

    runs = []

    def fail(module, args):
        runs.append(1)
        if len(runs) == failing_run:
            raise InjectedFailure(f"injected failure in forward pass {failing_run}")

    handle = kata.final_norm(model).register_forward_pre_hook(fail)
    try:
        before = hook_snapshot(model)
        try:
            ex.scaling_experiment(model, input_ids.clone(), target_id)
        except NotImplementedError:  # a RuntimeError too, but the stub's, not ours
            raise
        except RuntimeError as error:
            expect(isinstance(error, InjectedFailure) or "injected" in str(error),
                   "scaling-error-replaced",
                   f"expected the injected RuntimeError, got {error!r}{then}")
        else:
            diagnose("scaling-error-swallowed", (
                f"forward pass {failing_run} raised a RuntimeError, but scaling_experiment did "
                f"not pass it on: do not swallow errors; let them propagate once the hook is "
                f"removed{then}"))
        after = hook_snapshot(model)
        restore_hooks(model, before)  # so that a leak is reported once, here
    finally:
        handle.remove()
    expect(after == before, "scaling-hook-not-removed-on-error", (
        f"when forward pass {failing_run} raised, a hook was left registered on "
        f"{describe_hook_change(before, after)}: the hook must come off on every way out of the "
        f"run, an exception included (a finally block), not only after a forward pass that "
        f"succeeded{then}"))


def describe_hook_change(before, after):
    changed = [name for name in set(before) | set(after) if before.get(name) != after.get(name)]
    return ", ".join(sorted(name or "<model>" for name in changed))


def block_observers(model):
    """Forward hooks on every block that record each output they see: ``(seen, handles)``,
    ``seen[i]`` a list of ``(T, d_model)`` tensors, one per batch row and run."""
    seen = {i: [] for i in range(len(kata.blocks(model)))}

    def observer(i):
        def record(module, inputs, output):
            hidden = output[0] if isinstance(output, tuple) else output
            seen[i].extend(hidden.detach().float().cpu())

        return record

    handles = [block.register_forward_hook(observer(i))
               for i, block in enumerate(kata.blocks(model))]
    return seen, handles


def check_hooks_already_there_saw_the_scaling(seen: dict, clean: dict, factor: float,
                                              then: str = "") -> None:
    """Each block's observer, registered before the experiment, saw that block's output times
    ``factor`` in one of the runs: the scaling hook ran before the hooks already there."""
    for i, rows in seen.items():
        expect(any(torch.allclose(row, factor * clean[i], atol=1e-5) for row in rows),
               "hook-without-prepend", (
                   f"during scaling_experiment, the hook already on block {i} never saw that "
                   "block's scaled output: your scaling hook must run before the hooks already on "
                   "the block, registered first in line (transformers 5 records "
                   f"output_hidden_states with such hooks){then}"))


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


def check_scaling_figure(fig, values: list, clean: float, then: str = "") -> None:
    """Figure 11: one panel, a marker per block at (block, value), a dashed line at ``clean``
    labelled with its value."""
    expect(isinstance(fig, Figure), "scaling-figure-not-returned",
           f"expected a matplotlib Figure, got {type(fig).__name__}")
    expect(len(fig.axes) == 1, "scaling-figure-panel-count-wrong",
           f"figure 11 has one panel, got {len(fig.axes)} axes")
    width, height = fig.get_size_inches()
    expect(width >= 2 * height, "scaling-figure-not-wide",
           f"figure 11 is wide (about 9 x 3 inches), got {width:g} x {height:g}")
    ax = fig.axes[0]
    series = [(points[:, 0], points[:, 1]) for points in drawn_points(ax, marked_only=True)]
    points = np.concatenate(drawn_points(ax, marked_only=True) or [np.zeros((0, 2))])
    if len(series) > 1:  # one call per block also counts: all marked points together
        series.append((points[:, 0], points[:, 1]))
    expect(series, "scaling-figure-no-markers", f"no markers found: draw one marker per block{then}")
    matching = [(x, y) for x, y in series
                if len(y) == len(values) and np.allclose(y, values, atol=1e-4)]
    expect(matching, "scaling-figure-markers-wrong", (
        f"no series of {len(values)} markers at the values {[round(v, 4) for v in values]}; "
        f"found {[np.round(y, 3).tolist() for _, y in series]}{then}"))
    x = matching[0][0]
    expect(np.allclose(x, np.arange(len(values))), "scaling-figure-markers-off-blocks", (
        f"the markers should sit at the block indices 0..{len(values) - 1}, "
        f"got x = {x.tolist()}{then}"))
    expect(dashed_horizontal_lines_at(ax, clean), "clean-line-missing",
           f"no dashed horizontal line at the clean value {clean}{then}")
    legends = [legend for legend in [ax.get_legend(), *fig.legends] if legend is not None]
    strings = [t.get_text() for legend in legends for t in legend.get_texts()]
    strings += [t.get_text() for t in ax.texts] + [t.get_text() for t in fig.texts]
    expect(any(abs(n - clean) < 0.01 for n in numbers_in(strings)), "clean-line-unlabelled", (
        f"the clean line is not labelled with its value {clean:.3f}: show the number in a legend "
        f"or a text; found {strings}{then}"))
