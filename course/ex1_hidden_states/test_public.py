"""Exercise 1: extracting and inspecting hidden states (the post's demo 1 and figure 6).

What each function must do, one behaviour per test. Every expected value comes from the model or
from torch, never from the solution (``checks.py``); the code under test comes from the ``ex``
fixture, so the same tests check a learner's ``exercises/`` and the reference answer.
"""

import numpy as np
import pytest
import torch

import kata
from course.shared.diagnosis import diagnose
from course.shared.support import (
    ToyForwardError,
    ToyModel,
    check_close,
    check_tensor,
    drawn_points,
    expect,
    figures,  # noqa: F401 - a fixture
    must_draw,
    raises_clearly,
    shared_results,  # noqa: F401 - a fixture
)
from kata.hooks import hook_snapshot

from .checks import (  # noqa: F401 - computed, smollm2_reference, tiny_reference: fixtures
    FIGURE_TOKEN,
    GPT2_SUMMARY,
    SMOLLM2_SUMMARY,
    TINY_SUMMARY,
    check_dtype_device_and_graph,
    check_embedding_layer,
    check_float32_on_cpu,
    check_hidden_states_shape,
    check_not_population_variance,
    check_raw_output,
    check_same_hidden_states,
    check_summary,
    check_tokens,
    check_variance,
    computed,
    draw,
    figure_6,
    hidden_states_of,
    layer_labels,
    raw_output_of,
    smollm2_reference,
    tiny_reference,
    tokens_from,
    toy_tokens,
)

# ----------------------------------------------------------------------------- model_summary


def test_model_summary_reads_gpt2_style_config(ex, tiny_gpt2):
    model, _ = tiny_gpt2
    check_summary(ex.model_summary(model), TINY_SUMMARY, "tiny-gpt2")
    # The documented sizes agree with the model's own tensors.
    assert len(kata.blocks(model)) == TINY_SUMMARY["n_layers"]
    assert model.get_input_embeddings().weight.shape == (50257, 64)


@pytest.mark.trained
def test_model_summary_reads_llama_style_config(ex, smollm2):
    model, _ = smollm2
    try:
        summary = ex.model_summary(model)
    except AttributeError as error:
        diagnose("gpt2-config-names-on-llama", (
            f"model_summary failed on SmolLM2's {type(model.config).__name__} ({error}): "
            "Llama-family configs name the sizes differently from GPT-2's; look for the names "
            "both kinds of config answer to"))
    check_summary(summary, SMOLLM2_SUMMARY, "SmolLM2")
    assert len(kata.blocks(model)) == SMOLLM2_SUMMARY["n_layers"]
    assert model.get_input_embeddings().weight.shape == (49152, 576)


# ----------------------------------------------------------------------------- tokenize


def test_tokenize_gives_input_ids_and_attention_mask(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    expected = torch.tensor([tokenizer(kata.PENGUIN_TEXT)["input_ids"]])  # (1, T)
    check_tokens(tokens_from(ex, tokenizer, kata.PENGUIN_TEXT), expected, kata.PENGUIN_TEXT)


def test_tokenize_rejects_an_empty_text(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    raises_clearly(
        ValueError, lambda: ex.tokenize(tokenizer, ""), "tokenize(tokenizer, '')",
        "An empty text has no tokens to run: say so in a ValueError.", "empty-text-accepted")


# ----------------------------------------------------------------------------- get_hidden_states


@pytest.mark.parametrize("model_name", ["tiny-gpt2", pytest.param("smollm2", marks=pytest.mark.trained)])
def test_hidden_states_are_float32_on_the_cpu_without_a_graph(ex, computed, request, model_name):
    fixture = {"tiny-gpt2": ("tiny_gpt2", "tiny_reference", 4, 64),
               "smollm2": ("smollm2", "smollm2_reference", 30, 576)}[model_name]
    (model, _), reference = request.getfixturevalue(fixture[0]), request.getfixturevalue(fixture[1])
    hidden = hidden_states_of(ex, computed, model_name, model, reference)
    check_hidden_states_shape(hidden, fixture[2], reference.n_tokens, fixture[3])
    check_dtype_device_and_graph(hidden)


def test_hidden_states_equal_the_models_own_on_tiny_gpt2(ex, computed, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    hidden = hidden_states_of(ex, computed, "tiny-gpt2", model, tiny_reference)
    check_hidden_states_shape(hidden, 4, tiny_reference.n_tokens, 64)
    check_same_hidden_states(hidden, tiny_reference.hidden, "tiny-gpt2")


@pytest.mark.trained
def test_hidden_states_equal_the_models_own_on_smollm2(ex, computed, smollm2, smollm2_reference):
    model, _ = smollm2
    hidden = hidden_states_of(ex, computed, "smollm2", model, smollm2_reference)
    check_hidden_states_shape(hidden, 30, smollm2_reference.n_tokens, 576)
    check_same_hidden_states(hidden, smollm2_reference.hidden, "SmolLM2")


def test_penguin_sentence_on_gpt2_gives_13_hidden_states_of_10_by_768(ex, gpt2):
    model, tokenizer = gpt2
    check_summary(ex.model_summary(model), GPT2_SUMMARY, "GPT-2")
    hidden = ex.get_hidden_states(model, ex.tokenize(tokenizer, kata.PENGUIN_TEXT))
    check_hidden_states_shape(hidden, 12, 10, 768)  # the post: 13 hidden states of 1x10x768
    check_dtype_device_and_graph(hidden)


@pytest.mark.parametrize("function", ["get_hidden_states", "embedding_layer_output",
                                      "raw_last_block_output"])
def test_a_text_longer_than_the_context_is_a_clear_value_error(ex, tiny_gpt2, function):
    model, tokenizer = tiny_gpt2
    tokens = tokenizer(" hello" * 200, return_tensors="pt")  # 200 tokens; tiny-gpt2 reads 128
    argument = tokens["input_ids"] if function == "embedding_layer_output" else tokens
    message = raises_clearly(
        ValueError, lambda: getattr(ex, function)(model, argument),
        f"{function} on a 200-token text (tiny-gpt2's context length is 128)",
        "Check the number of tokens against the model's context length before running it "
        "(kata.one_sequence does).", "context-length-not-checked")
    expect("128" in message, "context-length-not-in-message", (
        f"{function}'s ValueError should say how many tokens the model reads (128), "
        f"got: {message!r}"))


# ----------------------------------------------------------------------------- embedding layer


def test_embedding_layer_output_is_hidden_state_0_on_tiny_gpt2(ex, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    output = ex.embedding_layer_output(model, tiny_reference.tokens["input_ids"])
    check_embedding_layer(output, tiny_reference, 64, "tiny-gpt2", learned_positions=True)
    check_float32_on_cpu(output, "embedding_layer_output")


@pytest.mark.trained
def test_embedding_layer_output_is_hidden_state_0_on_smollm2(ex, smollm2, smollm2_reference):
    model, _ = smollm2
    try:
        output = ex.embedding_layer_output(model, smollm2_reference.tokens["input_ids"])
    except AttributeError as error:
        diagnose("position-embeddings-assumed", (
            f"embedding_layer_output failed on SmolLM2 ({error}): Llama-family models have no "
            "position-embedding table (their positions are rotary, applied inside attention); "
            "add position embeddings only where the model has them"))
    check_embedding_layer(output, smollm2_reference, 576, "SmolLM2", learned_positions=False)


# ----------------------------------------------------------------------------- raw last block


def test_raw_last_block_output_is_the_last_hidden_state_before_the_final_norm(
        ex, computed, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    before = hook_snapshot(model)
    raw = raw_output_of(ex, computed, "tiny-gpt2", model, tiny_reference)
    expect(hook_snapshot(model) == before, "hook-left-on-model", (
        "raw_last_block_output left a forward hook on the model: a hook stays until it is "
        "removed, and then changes or watches every later run"))
    check_raw_output(raw, tiny_reference, model, "tiny-gpt2")
    check_float32_on_cpu(raw, "raw_last_block_output")


@pytest.mark.trained
def test_raw_last_block_output_on_smollm2(ex, computed, smollm2, smollm2_reference):
    model, _ = smollm2
    raw = raw_output_of(ex, computed, "smollm2", model, smollm2_reference)
    check_raw_output(raw, smollm2_reference, model, "SmolLM2")


@pytest.mark.parametrize("returns_tuple", [True, False], ids=["tuple-blocks", "tensor-blocks"])
def test_raw_last_block_output_handles_tuple_and_tensor_blocks(ex, returns_tuple):
    toy, tokens = ToyModel(returns_tuple), toy_tokens()
    kind = ("a tuple (hidden, ...), as GPT-2's blocks do before transformers 5.3" if returns_tuple
            else "a plain tensor (1, T, d_model), as GPT-2's blocks do from transformers 5.3 on")
    with torch.no_grad():
        expected = toy(**tokens).last_block_output[0]  # (T, 4)
    mistake = "hook-assumes-tensor" if returns_tuple else "hook-assumes-tuple"
    idea = ("your hook must handle both kinds of block output: a tuple, whose first element is "
            "the hidden states, and a plain tensor, which is the hidden states")
    before = hook_snapshot(toy)
    try:
        raw = ex.raw_last_block_output(toy, tokens)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        diagnose(mistake, f"raw_last_block_output failed on a model whose blocks return {kind}: "
                          f"{type(error).__name__}: {error}. {idea}")
    expect(hook_snapshot(toy) == before, "hook-left-on-model",
           "raw_last_block_output left a forward hook on the model: remove it before returning")
    check_tensor(raw, "raw_last_block_output", idea)
    expect(tuple(raw.shape) == tuple(expected.shape), mistake, (
        f"on a model whose blocks return {kind}, raw_last_block_output has shape "
        f"{tuple(raw.shape)}, expected {tuple(expected.shape)}: {idea}"))
    check_close(raw, expected, f"raw_last_block_output on a model whose blocks return {kind}",
                hint="it should be the last block's output as the hook receives it",
                diagnosis="raw-output-wrong")


def test_raw_last_block_output_removes_its_hook_when_the_forward_pass_fails(ex):
    toy = ToyModel(returns_tuple=False, fails=True)
    before = hook_snapshot(toy)
    with pytest.raises(ToyForwardError):
        ex.raw_last_block_output(toy, toy_tokens())
    expect(hook_snapshot(toy) == before, "hook-not-removed-on-error", (
        "raw_last_block_output left its hook on the last block when the forward pass raised: "
        "the hook must come off on every way out of the function, an exception included"))


# ----------------------------------------------------------------------------- activation_variance


def test_activation_variance_is_the_unbiased_variance_over_d_model(ex, tiny_reference):
    hidden = tiny_reference.hidden  # (5, T, 64)
    for token_index in (0, FIGURE_TOKEN, -1):
        check_variance(ex.activation_variance(hidden, token_index), hidden, token_index)


@pytest.mark.parametrize("offset", [2, None], ids=["past-the-end", "too-negative"])
def test_activation_variance_rejects_a_token_index_out_of_range(ex, tiny_reference, offset):
    n_tokens = tiny_reference.n_tokens
    token_index = n_tokens + offset if offset is not None else -n_tokens - 1
    message = raises_clearly(
        IndexError, lambda: ex.activation_variance(tiny_reference.hidden, token_index),
        f"activation_variance with token_index={token_index} for a {n_tokens}-token text",
        "Check token_index before indexing (kata.token_index is the kata's one rule).",
        "token-index-not-checked")
    expect("token" in message.lower() and str(n_tokens - 1) in message,
           "token-index-message-without-range", (
               f"activation_variance raised IndexError({message!r}) for token_index="
               f"{token_index}, but the message should name the problem and the valid range "
               f"(-{n_tokens}..{n_tokens - 1})"))


@pytest.mark.trained
def test_variance_of_a_mid_sentence_token_rises_into_the_middle_layers_on_smollm2(
        ex, smollm2_reference):
    hidden = smollm2_reference.hidden  # (31, T, 576)
    token_index = smollm2_reference.n_tokens // 2
    variance = ex.activation_variance(hidden, token_index)
    check_tensor(variance, "activation_variance", "one variance per layer")
    expect(tuple(variance.shape) == (31,), "variance-shape-wrong",
           f"activation_variance has shape {tuple(variance.shape)}, expected (31,): one per layer")
    middle = (len(variance) - 1) // 2
    values = ", ".join(f"{v:.3g}" for v in variance[: middle + 1].tolist())
    first = variance[0]
    rises = variance[middle] > 100 * first and torch.all(variance[1: middle + 1] > first)
    expect(rises, "variance-profile-wrong", (
        f"on SmolLM2 the variance of token {token_index} should grow from the embedding layer to "
        f"the middle layers (the post's figure 6); layers 0..{middle} gave {values}"))


# ----------------------------------------------------------------------------- the figure


def test_figure_has_two_labelled_panels_with_layer_ticks_and_a_title(ex, tiny_reference):
    fig, axes = figure_6(ex, tiny_reference)
    n_hidden = tiny_reference.hidden.shape[0]
    for side, ax in zip(("left", "right"), axes):
        expect(ax.get_xlabel() and ax.get_ylabel(), "figure-axis-labels-missing",
               f"label both axes of the {side} panel (x: {ax.get_xlabel()!r}, "
               f"y: {ax.get_ylabel()!r})")
        ticks = [float(t) for t in ax.get_xticks()]
        labels = [t.get_text() for t in ax.get_xticklabels()]
        expect(ticks == list(range(n_hidden)) and labels == layer_labels(n_hidden),
               "figure-layer-ticks-wrong", (
                   f"the {side} panel's x ticks should be the layers 0..{n_hidden - 1} labelled "
                   f"{layer_labels(n_hidden)} (index 0 is the embedding layer 'Emb', then the "
                   f"blocks from L0), got ticks {ticks} labelled {labels}"))
    titles = " ".join([fig.get_suptitle()] + [ax.get_title() for ax in axes])
    expect("cute" in titles, "figure-title-without-token",
           f"the title should name the token (' cute' here), got {titles.strip()!r}")


def test_figure_left_panel_dots_are_the_tokens_activations_per_layer(ex, tiny_reference):
    _, (left, _) = figure_6(ex, tiny_reference)
    hidden = tiny_reference.hidden
    n_hidden, _, d_model = hidden.shape
    dots = drawn_points(left, marked_only=True)
    expect(dots, "figure-dots-missing", "the left panel has no dots (markers, not lines)")
    xy = torch.cat([torch.as_tensor(d) for d in dots])  # (number of dots, 2)
    expect(len(xy) == n_hidden * d_model, "figure-dot-count-wrong", (
        f"the left panel has {len(xy)} dots, expected {n_hidden} layers x {d_model} activations "
        f"= {n_hidden * d_model}: one dot per activation of the token at every layer"))
    nearest_layer = xy[:, 0].round()
    for layer, name in enumerate(layer_labels(n_hidden)):
        at_layer = nearest_layer == layer
        expect(at_layer.sum() == d_model, "figure-dots-at-wrong-layer", (
            f"layer {layer} ({name!r}) should have {d_model} dots near x = {layer}, found "
            f"{int(at_layer.sum())}: layer i's dots belong at x = i, with a jitter under 0.5"))
        y = xy[at_layer, 1].sort().values
        expected = hidden[layer, FIGURE_TOKEN, :].double().sort().values
        expect(torch.allclose(y, expected, rtol=1e-5, atol=1e-6), "figure-dots-not-activations",
               f"the dots at layer {name!r} are not token {FIGURE_TOKEN}'s activations there")
        expect((xy[at_layer, 0] - layer).std() > 0, "figure-dots-without-jitter", (
            f"all dots of layer {name!r} sit at x = {layer}: spread them sideways with a small "
            "random jitter (smaller than 0.5), as in figure 6"))


def test_figure_right_panel_shows_the_variance_per_layer_as_squares(ex, tiny_reference):
    _, (_, right) = figure_6(ex, tiny_reference)
    hidden = tiny_reference.hidden
    layers = list(range(hidden.shape[0]))
    expected = torch.var(hidden[:, FIGURE_TOKEN, :], dim=-1).double()
    points = drawn_points(right, marked_only=True)  # scatter dots and line markers alike
    xy = np.concatenate(points) if points else np.zeros((0, 2))

    def shown(layer, value):
        return bool(np.any(np.isclose(xy[:, 0], layer, atol=1e-6)
                           & np.isclose(xy[:, 1], value, rtol=1e-4, atol=1e-8)))

    missing = [layer for layer, value in zip(layers, expected.tolist()) if not shown(layer, value)]
    check_not_population_variance(
        lambda population: bool(missing) and all(map(shown, layers, population.tolist())),
        hidden, FIGURE_TOKEN, "what the right panel's squares show")
    found = [(round(float(x), 3), round(float(y), 6)) for x, y in xy[:40]]
    expect(not missing, "figure-variance-missing", (
        f"the right panel should show token {FIGURE_TOKEN}'s activation variance at layers "
        f"{layers} (x = layer index), one marker each: expected y = "
        f"{[round(v, 6) for v in expected.tolist()]}; layers {missing} have no marker at their "
        f"variance. Points found (x, y): {found}"))
    markers = {line.get_marker() for line in right.lines
               if any(shown(x, y) for x, y in zip(np.asarray(line.get_xdata(), dtype=float),
                                                  np.asarray(line.get_ydata(), dtype=float)))}
    expect(markers <= {"s"}, "figure-variance-not-squares",
           f"draw the variances with square markers; the marker is {sorted(map(str, markers))}")


def test_figure_saves_to_png_without_a_display(ex, tiny_reference, figures, tmp_path):
    fig, _ = draw(ex, tiny_reference.hidden, figures)
    path = tmp_path / "figure6.png"
    must_draw(fig, lambda: fig.savefig(path))
    expect(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "figure-not-png",
           "the saved figure is not a PNG file")


def test_figure_rejects_a_token_index_out_of_range(ex, tiny_reference):
    import matplotlib.pyplot as plt

    n_tokens = tiny_reference.n_tokens
    open_before = plt.get_fignums()
    raises_clearly(
        IndexError, lambda: ex.plot_token_activations(tiny_reference.hidden, n_tokens, "?"),
        f"plot_token_activations with token_index={n_tokens} for a {n_tokens}-token text",
        "Check token_index before drawing (activation_variance already does).",
        "figure-token-index-not-checked")
    for number in set(plt.get_fignums()) - set(open_before):
        plt.close(number)
