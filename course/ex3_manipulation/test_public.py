"""Exercise 3: manipulating hidden states with a scaling hook (the post's demo 3, figures 10, 11).

What each function must do, one behaviour per test. Every expected value comes from the tokenizer,
the model or torch directly, and the scaled runs from an independent computation (``checks.py``),
never from the solution. The tiny GPT-2 runs in milliseconds; the tests marked ``trained`` read
SmolLM2 and GPT-2.
"""

import matplotlib.pyplot as plt
import pytest
import torch

import kata
from course.shared.support import (
    TensorBlock,
    TupleBlock,
    check_close,
    check_shape,
    check_tensor,
    computed_once,
    draw_headless,
    expect,
    raises_clearly,
    reference_logits,
    scaled_block_log_probs,
)
from kata.hooks import hook_snapshot, restore_hooks
from kata.models import transformers_major

from .checks import (  # noqa: F401 - clean_insect, kafka_ids, kafka_logits, scaled_insect: fixtures
    BAD_INPUTS,
    INSECT_GPT2,
    KAFKA_STATS_GPT2,
    block_observers,
    check_hooks_already_there_saw_the_scaling,
    check_hooks_removed_when_a_run_fails,
    check_log_distribution,
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
    clean_insect,
    describe_hook_change,
    experiment_of,
    first_check_scaling_hook,
    kafka_ids,
    kafka_logits,
    log_probs_of,
    recorded_with_hook,
    run_with_hook,
    scaled_insect,
    scaling_of,
    text_stats_of,
    top_21_after_kafka,
    tuple_hook_output,
)

# ----------------------------------------------------------------------------- text_stats


def test_text_stats_of_the_kafka_sentence(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    stats = ex.text_stats(tokenizer, kata.KAFKA_TEXT)
    check_stats_are_a_dict_of_ints(stats, KAFKA_STATS_GPT2)
    expect(stats == KAFKA_STATS_GPT2, "text-stats-wrong", (
        f"for the Kafka sentence and the GPT-2 tokenizer, expected {KAFKA_STATS_GPT2} "
        f"(the post's numbers), got {stats}"))


def test_text_stats_counts_repeated_tokens_once(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    text = "the cat and the hat and the bat"  # ' the' and ' and' repeat
    expected = text_stats_of(tokenizer, text)
    stats = ex.text_stats(tokenizer, text)
    check_stats_are_a_dict_of_ints(stats, expected)
    check_repeated_tokens_counted_once(stats, expected, text)
    expect(stats == expected, "text-stats-wrong", f"for {text!r} expected {expected}, got {stats}")


# ----------------------------------------------------------------------------- target_token_id


def test_target_token_id_of_insect(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    token_id = ex.target_token_id(tokenizer, kata.TARGET_WORD)
    without_space = " (that is 'insect' without the leading space)" \
        if token_id in (259, 8831) else ""
    check_target_id(token_id, INSECT_GPT2, kata.TARGET_WORD, without_space)


@pytest.mark.parametrize("word", [" Metamorphosis", "insect", " cockroach"])
def test_target_token_id_rejects_a_word_of_several_tokens(ex, tiny_gpt2, word):
    _, tokenizer = tiny_gpt2
    check_several_tokens_refused(ex, tokenizer, word)


def test_target_token_id_rejects_an_empty_word(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    raises_clearly(ValueError, lambda: ex.target_token_id(tokenizer, ""),
                   "target_token_id(tokenizer, '')",
                   "An empty word is no token at all: raise a ValueError.", "empty-target-accepted")


# ----------------------------------------------------------------------------- next_token_log_probs


def test_next_token_log_probs_is_float32_without_a_graph(ex, tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    log_probs = check_tensor(log_probs_of(ex, model, kafka_ids), "next_token_log_probs")
    check_shape(log_probs, (model.config.vocab_size,), "next_token_log_probs",
                "one value per vocabulary entry, for the last position only",
                diagnosis="log-probs-shape-wrong")
    expect(log_probs.dtype == torch.float32, "log-probs-not-float32",
           f"expected float32, got {log_probs.dtype}")
    expect(not log_probs.requires_grad, "prediction-autograd-graph-kept", (
        "the result is part of an autograd graph: nothing here needs gradients, so run the model "
        "where autograd records nothing"))


def test_next_token_log_probs_is_a_log_distribution(ex, tiny_gpt2, kafka_ids, kafka_logits):
    model, _ = tiny_gpt2
    check_log_distribution(log_probs_of(ex, model, kafka_ids), kafka_logits)


def test_next_token_log_probs_matches_the_model(ex, tiny_gpt2, kafka_ids, kafka_logits):
    model, _ = tiny_gpt2
    check_log_probs(log_probs_of(ex, model, kafka_ids), kafka_logits, "next_token_log_probs")


def test_next_token_log_probs_accepts_one_dimensional_ids(ex, tiny_gpt2, kafka_ids, kafka_logits):
    model, _ = tiny_gpt2
    log_probs = log_probs_of(ex, model, kafka_ids[0])  # (T,) instead of (1, T)
    check_close(log_probs, torch.log_softmax(kafka_logits[-1], dim=-1),
                "next_token_log_probs(ids of shape (T,))",
                "a (T,) tensor of ids is one sequence: the same prediction as its (1, T) batch",
                atol=1e-4, diagnosis="unbatched-input")


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_next_token_log_probs_rejects_bad_input(ex, tiny_gpt2, case):
    model, _ = tiny_gpt2
    limit = kata.context_length(model)  # 128 for the tiny GPT-2
    shape, id, why = BAD_INPUTS[case]
    input_ids = torch.full(shape(limit), 464)
    why = why.format(limit=limit)
    message = raises_clearly(
        ValueError, lambda: ex.next_token_log_probs(model, input_ids),
        f"input_ids {case} (shape {tuple(input_ids.shape)})",
        f"{why}; check the input before running the model (kata.one_sequence does)", id)
    if case == "longer than the context":
        expect(str(limit) in message, "prediction-context-length-not-named", (
            f"the ValueError for {limit + 1} tokens should name the context length {limit}; "
            f"got {message!r}"))


# ----------------------------------------------------------------------------- top_next_tokens


def test_top_next_tokens_lists_the_21_highest_logits(ex, tiny_gpt2, kafka_ids, kafka_logits):
    model, tokenizer = tiny_gpt2
    top = ex.top_next_tokens(model, tokenizer, kafka_ids.clone())
    check_top_tokens(top, kafka_logits, tokenizer, 21, count_wrong="top-tokens-count-wrong")


def test_top_next_tokens_returns_k_entries(ex, tiny_gpt2, kafka_ids):
    model, tokenizer = tiny_gpt2
    top = ex.top_next_tokens(model, tokenizer, kafka_ids.clone(), k=3)
    expect(len(top) == 3, "top-tokens-ignores-k",
           f"top_next_tokens(..., k=3) should return 3 entries, got {len(top)}")


# ----------------------------------------------------------------------------- make_scaling_hook


def test_scaling_hook_on_a_tensor_output(ex):
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))  # (batch, T, d_model)
    output = run_with_hook(TensorBlock(), ex.make_scaling_hook(0.5), x)
    check_tensor_hook_output(output, 2 * x * 0.5, "the hooked block's output")


def test_scaling_hook_on_a_tuple_output(ex):
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    block = TupleBlock()
    output = tuple_hook_output(block, ex.make_scaling_hook(0.5), x)
    check_tuple_hook_output(output, 2 * x * 0.5, block.extra)


def test_scaling_hook_does_not_scale_in_place(ex):
    check_out_of_place(ex.make_scaling_hook(0.5), (1, 2, 3))


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
    clean_hidden, clean_logits = recorded_with_hook(model, kafka_ids, block_index, None)
    hook = ex.make_scaling_hook(factor)
    seed_hidden, seed_logits = recorded_with_hook(model, kafka_ids, block_index, hook, False)
    first_hidden, first_logits = recorded_with_hook(model, kafka_ids, block_index, hook, True)

    expect(not torch.allclose(seed_logits, clean_logits, atol=1e-4), "hook-returns-none", (
        "with the scaling hook on block 1 the logits did not change: the hook must return the "
        "scaled output (a forward hook's return value replaces the block's output)"))
    check_close(seed_logits, first_logits, "the logits with the hook registered without prepend",
                "the order of the hooks must not change the logits", diagnosis="hook-order-matters")
    check_close(first_hidden, factor * clean_hidden, "hidden_states[2] with prepend=True",
                "a hook that runs first should make transformers record the scaled output",
                diagnosis="hook-does-not-scale")
    if transformers_major() >= 5:
        expect(not torch.allclose(seed_hidden, factor * clean_hidden, atol=1e-5), "hook-in-place", (
            "hidden_states[2] came out scaled although transformers 5's recording hook ran before "
            "yours and stored the unscaled output tensor: your hook changed that tensor in place "
            "(in-place scaling: mul_ or *=); build a new tensor instead"))
        check_close(seed_hidden, clean_hidden, "hidden_states[2] without prepend (transformers 5)",
                    "the recording hook ran first and kept the unscaled output",
                    diagnosis="hook-in-place")
    else:
        check_close(seed_hidden, factor * clean_hidden,
                    "hidden_states[2] without prepend (transformers 4)",
                    "GPT-2 records each block's returned output after its hooks ran",
                    diagnosis="hook-does-not-scale")


# ----------------------------------------------------------------------------- scaling_experiment


def test_scaling_experiment_gives_one_float32_value_per_block(ex, tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    n_layers = len(kata.blocks(model))
    values = check_tensor(scaling_of(ex, model, kafka_ids, INSECT_GPT2), "scaling_experiment")
    check_shape(values, (n_layers,), "scaling_experiment", (
        f"one value per transformer block ({n_layers}); the hidden states have one more entry, "
        "the embeddings, which the experiment does not scale"),
        diagnosis="one-value-per-hidden-state" if len(values) == n_layers + 1
        else "scaling-shape-wrong")
    expect(values.dtype == torch.float32, "scaling-not-float32",
           f"expected float32, got {values.dtype}")
    expect(not values.requires_grad, "scaling-autograd-graph-kept", (
        "the result is part of an autograd graph: nothing here needs gradients, so run the model "
        "where autograd records nothing"))


def test_scaling_by_one_changes_nothing(ex, tiny_gpt2, kafka_ids, clean_insect):
    model, _ = tiny_gpt2
    values = scaling_of(ex, model, kafka_ids, INSECT_GPT2, factor=1.0)
    expected = torch.full((len(kata.blocks(model)),), clean_insect)
    check_close(values, expected, "scaling_experiment with factor 1.0", (
        "scaling by 1 leaves the model as it is, so every block should give the clean "
        f"log-softmax of the target, {clean_insect:.4f}"),
        atol=1e-4, diagnosis="scaling-by-one-changes")


def test_scaling_experiment_matches_an_independent_computation(
        ex, tiny_gpt2, kafka_ids, scaled_insect):
    model, _ = tiny_gpt2
    values = scaling_of(ex, model, kafka_ids, INSECT_GPT2, factor=0.8)
    check_scaling_values(values, scaled_insect, "scaling_experiment with factor 0.8")


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
        "forward pass; remove each one right after its forward pass"))


def test_scaling_experiment_removes_its_hooks_when_the_forward_pass_raises(
        ex, tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    first_check_scaling_hook(ex)
    check_hooks_removed_when_a_run_fails(ex, model, kafka_ids, INSECT_GPT2, failing_run=1)


def test_scaling_hook_runs_before_hooks_already_on_the_block(ex, tiny_gpt2, kafka_ids):
    """Other hooks on a block (like transformers 5's hidden-state recorders) see the scaled
    output, because the scaling hook is registered with ``prepend=True``."""
    model, _ = tiny_gpt2
    factor = 0.5
    seen, handles = block_observers(model)
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
    check_hooks_already_there_saw_the_scaling(seen, clean, factor)


def test_scaling_the_last_block_barely_changes_the_prediction(
        ex, tiny_gpt2, kafka_ids, clean_insect):
    """The final norm divides its input by the input's size: scaling the last block cancels."""
    model, _ = tiny_gpt2
    values = scaling_of(ex, model, kafka_ids, INSECT_GPT2, factor=0.8)
    change = abs(float(values[-1]) - clean_insect)
    expect(change < 2e-3, "last-block-scaling-changes", (
        f"scaling the last block changed the target's log-softmax by {change:.4f}; the final "
        f"norm cancels a global scale of its input (up to its epsilon), so it should barely "
        f"change: did you scale the block's input, or something after the final norm?"))


def test_scaling_experiment_rejects_a_bad_target(ex, tiny_gpt2, kafka_ids):
    model, _ = tiny_gpt2
    bad = model.config.vocab_size + 5
    first_check_scaling_hook(ex)
    raises_clearly(
        ValueError, lambda: ex.scaling_experiment(model, kafka_ids.clone(), bad),
        f"scaling_experiment with target_id {bad} (the vocabulary has {bad - 5} tokens)",
        "Check target_id before running the model (kata.token_id does).",
        "target-id-not-checked")


# ----------------------------------------------------------------------------- the figure


def test_plot_scaling_experiment(ex):
    values = torch.tensor([-11.2, -11.05, -11.3, -11.09])
    clean = -11.0934
    fig = ex.plot_scaling_experiment(values.clone(), clean)
    try:
        check_scaling_figure(fig, values.tolist(), clean)
        ax = fig.axes[0]
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


@pytest.mark.trained
def test_smollm2_puts_insect_among_the_top_21(ex, smollm2):
    texts = top_21_after_kafka(ex, *smollm2)
    expect(kata.TARGET_WORD in texts, "insect-not-in-top-21", (
        f"SmolLM2 ranks ' insect' among its 21 most likely next tokens after the Kafka sentence "
        f"(9th when measured), but the list was {texts}"))


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
    first_check_scaling_hook(ex)  # before the reference's 5 passes: a stub fails at once
    expected, clean = computed_once(("ex3-llama-scaling", "smollm2-first-blocks"), lambda: (
        scaled_block_log_probs(model, input_ids, target[0], 0.8),
        torch.log_softmax(reference_logits(model, input_ids)[-1], dim=-1)[target[0]].item()))
    values = torch.as_tensor(experiment_of(ex, model, input_ids, target[0], factor=0.8)).float()
    n_layers = len(kata.blocks(model))
    check_shape(values, (n_layers,), "scaling_experiment on a Llama model", "one value per block",
                diagnosis="scaling-shape-wrong")
    check_close(values, expected, "scaling_experiment on a Llama model (SmolLM2's first 4 blocks)",
                "each value is the target's log-softmax with that one block's output times 0.8",
                atol=1e-4, diagnosis="scaling-differs-on-llama")
    expect(abs(values[-1].item() - clean) < 1e-3, "last-block-scaling-changes", (
        f"scaling the last block changed the log-softmax by {values[-1].item() - clean:.4f}; "
        f"the final RMSNorm cancels a global scale, so it should not change"))


@pytest.mark.trained
def test_gpt2_ranks_insect_15th(ex, gpt2):
    texts = top_21_after_kafka(ex, *gpt2)
    expect(kata.TARGET_WORD in texts and texts.index(kata.TARGET_WORD) == 14, "insect-not-15th", (
        f"the post's GPT-2 lists ' insect' 15th of its 21 most likely next tokens; got {texts}"))
