"""Exercise 1's secret checks: each public function again, on inputs nobody prepared for.

One check per function, each on inputs drawn from a seed only the grader knows and from spaces
no table can hold (``course/shared/secret.py``): a GPT-2 of random sizes and weights, random
token ids, a text of random words, hidden states of random sizes. The expected values are
computed here, from those inputs, before the function sees them. A function's points count only
if its check passes.
"""

import numpy as np
import torch
from matplotlib.figure import Figure

from course.shared.secret import repeat_hint, secret, secret_check  # noqa: F401 - a fixture
from course.shared.support import drawn_points, expect, figures  # noqa: F401 - a fixture

from .checks import (
    check_embedding_layer,
    check_hidden_states_shape,
    check_not_population_variance,
    check_raw_output,
    check_same_hidden_states,
    check_summary,
    check_tokens,
    check_variance,
    compute_reference,
    ids_as_tokens,
    tokens_from,
)


def random_model_and_reference(secret):
    """A GPT-2 of random sizes and weights, random token ids for it, and the model's own
    reference for them: ``(model, reference)``."""
    model = secret.gpt2(layers=(1, 4))
    ids = secret.token_ids(model.config.vocab_size, secret.integer(3, 12))
    return model, compute_reference(model, ids_as_tokens(ids))


@secret_check("model_summary")
def test_secret_model_summary_of_a_model_of_random_sizes(ex, secret):
    model = secret.gpt2(layers=(1, 3))
    c = model.config
    expected = {"n_layers": c.n_layer, "d_model": c.n_embd, "n_heads": c.n_head,
                "vocab_size": c.vocab_size}
    check_summary(ex.model_summary(model), expected, "a GPT-2 of random sizes")


@secret_check("tokenize")
def test_secret_tokenize_of_a_text_of_random_words(ex, tiny_gpt2, secret):
    _, tokenizer = tiny_gpt2
    text = secret.text()
    expected = torch.tensor([tokenizer(text)["input_ids"]])
    check_tokens(tokens_from(ex, tokenizer, text), expected, text + repeat_hint())


@secret_check("get_hidden_states")
def test_secret_hidden_states_of_a_random_model(ex, secret):
    model, reference = random_model_and_reference(secret)
    hidden = ex.get_hidden_states(model, reference.tokens)
    check_hidden_states_shape(hidden, model.config.n_layer, reference.n_tokens,
                              model.config.n_embd)
    check_same_hidden_states(hidden, reference.hidden, "a GPT-2 of random sizes" + repeat_hint())


@secret_check("embedding_layer_output")
def test_secret_embedding_layer_of_a_random_model(ex, secret):
    model, reference = random_model_and_reference(secret)
    output = ex.embedding_layer_output(model, reference.tokens["input_ids"])
    check_embedding_layer(output, reference, model.config.n_embd,
                          "a GPT-2 of random sizes" + repeat_hint(), learned_positions=True)


@secret_check("raw_last_block_output")
def test_secret_raw_last_block_of_a_random_model(ex, secret):
    model, reference = random_model_and_reference(secret)
    raw = ex.raw_last_block_output(model, reference.tokens)
    check_raw_output(raw, reference, model, "a GPT-2 of random sizes" + repeat_hint())


@secret_check("activation_variance")
def test_secret_activation_variance_of_random_hidden_states(ex, secret):
    hidden = secret.hidden_states()
    token_index = secret.integer(-hidden.shape[1], hidden.shape[1] - 1)
    check_variance(ex.activation_variance(hidden.clone(), token_index), hidden, token_index,
                   repeat_hint())


@secret_check("plot_token_activations")
def test_secret_figure_draws_the_tokens_activations_and_variance(ex, secret, figures):
    hidden = secret.hidden_states()
    token_index = secret.integer(0, hidden.shape[1] - 1)
    variance = torch.var(hidden[:, token_index, :], dim=-1).tolist()
    fig = ex.plot_token_activations(hidden.clone(), token_index, "token")
    expect(isinstance(fig, Figure) and len(fig.axes) == 2, "figure-panel-count-wrong",
           "plot_token_activations should return a Figure with 2 panels")
    figures.append(fig)
    left, right = sorted(fig.axes, key=lambda ax: ax.get_position().x0)
    dots = drawn_points(left, marked_only=True)
    xy = torch.cat([torch.as_tensor(d) for d in dots]) if dots else torch.zeros(0, 2)
    for layer in range(hidden.shape[0]):
        y = xy[xy[:, 0].round() == layer, 1].sort().values
        expected = hidden[layer, token_index, :].double().sort().values
        expect(y.shape == expected.shape and torch.allclose(y, expected, rtol=1e-5, atol=1e-6),
               "figure-dots-not-activations",
               f"the left panel's dots at layer {layer} are not token {token_index}'s activations "
               "there" + repeat_hint())
    squares = np.concatenate(drawn_points(right, marked_only=True) or [np.zeros((0, 2))])

    def shown(layer, value):
        return bool(np.any(np.isclose(squares[:, 0], layer, atol=1e-6)
                           & np.isclose(squares[:, 1], value, rtol=1e-4, atol=1e-8)))

    layers = range(hidden.shape[0])
    check_not_population_variance(
        lambda population: not all(map(shown, layers, variance))
        and all(map(shown, layers, population.tolist())),
        hidden, token_index, "what the right panel's squares show", repeat_hint())
    for layer, value in enumerate(variance):
        expect(shown(layer, value), "figure-variance-missing",
               f"the right panel has no marker at layer {layer}'s variance {value:.4g} of token "
               f"{token_index}" + repeat_hint())
