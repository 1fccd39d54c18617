"""Exercise 2's secret checks: each public function again, on inputs nobody prepared for.

One check per function, each on inputs drawn from a seed only the grader knows and from spaces
no table can hold (``course/shared/secret.py``): vectors of random sizes, lengths and directions,
hidden states of random sizes, random token and layer indices (negative ones too), random colour
limits. The expected values are computed here, from those inputs, before the function sees them
(it gets a copy); a check never calls another of the learner's functions, so one wrong function
never hides a right one. A function's points count only if its check passes.
"""

import numpy as np
import torch

from course.shared.secret import repeat_hint, secret, secret_check  # noqa: F401 - a fixture
from course.shared.support import check_tensor, drawn_points, expect, line_points

from .checks import (  # noqa: F401 - close_figures: a fixture
    check_colour_limits,
    check_figure,
    check_index_not_shifted,
    check_not_the_other_axis,
    check_panel_image,
    check_profile,
    check_similarity,
    close_figures,
    cosine_matrix,
    draw,
    is_mean_line,
    laminar_figure_of,
    learner_profile,
    mean_line_message,
    panels_of,
    reference_profile,
    similarity_at,
    similarity_of,
)


def random_states(secret) -> tuple[torch.Tensor, list[str]]:
    """Random hidden states ``(n_layers + 1, T, d_model)`` and a random word for each token.
    d_model (9 to 24) is never the number of tokens or layers, so a matrix over the coordinates
    cannot pass for one over the vectors."""
    hidden = secret.hidden_states(layers=(2, 6), tokens=(3, 8), width=(9, 24))
    return hidden, secret.words(hidden.shape[1])


@secret_check("cosine_similarity_matrix")
def test_secret_cosine_matrix_of_random_vectors(ex, secret):
    n, d = secret.integer(2, 9), secret.integer(10, 30)
    lengths = torch.exp(secret.tensor(n, 1, scale=1.5))  # lengths from about 0.01 to 100
    vectors = secret.tensor(n, d) * lengths
    expected = cosine_matrix(vectors)
    got = similarity_of(ex, vectors.clone())
    check_similarity(got, vectors, f"cosine_similarity_matrix of random {(n, d)} vectors"
                     + repeat_hint(), expected)


@secret_check("layer_similarity")
def test_secret_layer_similarity_of_a_random_token(ex, secret):
    hidden, _ = random_states(secret)
    token = secret.integer(-hidden.shape[1], hidden.shape[1] - 1)
    vectors = hidden[:, token]  # the token at every layer
    expected = cosine_matrix(vectors)
    got = check_tensor(similarity_at(ex, "layer_similarity", hidden, token, axis=1), "layer_similarity")
    name = f"layer_similarity(hidden_states of shape {tuple(hidden.shape)}, {token})"
    check_index_not_shifted(got, hidden, token, 1, "layer_similarity")
    check_not_the_other_axis(got, hidden, token, 1, "layer_similarity")
    check_similarity(got, vectors, name + repeat_hint(), expected)


@secret_check("token_similarity")
def test_secret_token_similarity_of_a_random_layer(ex, secret):
    hidden, _ = random_states(secret)
    layer = secret.integer(-hidden.shape[0], hidden.shape[0] - 1)
    vectors = hidden[layer]  # every token of the layer
    expected = cosine_matrix(vectors)
    got = check_tensor(similarity_at(ex, "token_similarity", hidden, layer, axis=0), "token_similarity")
    name = f"token_similarity(hidden_states of shape {tuple(hidden.shape)}, {layer})"
    check_index_not_shifted(got, hidden, layer, 0, "token_similarity")
    check_not_the_other_axis(got, hidden, layer, 0, "token_similarity")
    check_similarity(got, vectors, name + repeat_hint(), expected)


@secret_check("laminar_profile")
def test_secret_laminar_profile_of_random_hidden_states(ex, secret):
    hidden, _ = random_states(secret)
    skip_first = secret.choice([True, False])
    expected = reference_profile(hidden, skip_first)
    got = learner_profile(ex, hidden, skip_first=skip_first)
    check_profile(got, hidden, skip_first, f"laminar_profile(hidden_states of shape "
                  f"{tuple(hidden.shape)}, skip_first={skip_first})" + repeat_hint(), expected)


@secret_check("plot_layer_similarity")
def test_secret_layer_figure_shows_the_chosen_tokens(ex, secret):
    hidden, labels = random_states(secret)
    tokens = secret.some(range(hidden.shape[1]))
    vmin, vmax = secret.number(-1.0, 0.4), secret.number(0.5, 1.0)
    expected = [cosine_matrix(hidden[:, t]) for t in tokens]
    fig = draw(ex, "plot_layer_similarity", hidden.clone(), tokens, list(labels),
               vmin=vmin, vmax=vmax)
    panels = panels_of(fig, "plot_layer_similarity", len(tokens), "token", "layer-figure")
    for k, (ax, token) in enumerate(zip(panels, tokens)):
        check_panel_image(ax, k, token, hidden, 1, expected[k])
    check_colour_limits(panels, (vmin, vmax), "layer-figure",
                        f"plot_layer_similarity(..., vmin={vmin}, vmax={vmax})" + repeat_hint())


@secret_check("plot_token_similarity")
def test_secret_token_figure_shows_the_chosen_layers(ex, secret):
    hidden, labels = random_states(secret)
    layers = secret.some(range(hidden.shape[0]))
    vmin, vmax = secret.number(-1.0, 0.4), secret.number(0.5, 1.0)
    expected = [cosine_matrix(hidden[layer]) for layer in layers]
    fig = draw(ex, "plot_token_similarity", hidden.clone(), layers, list(labels),
               vmin=vmin, vmax=vmax)
    panels = panels_of(fig, "plot_token_similarity", len(layers), "layer", "token-figure")
    for k, (ax, layer) in enumerate(zip(panels, layers)):
        check_panel_image(ax, k, layer, hidden, 0, expected[k])
    check_colour_limits(panels, (vmin, vmax), "token-figure",
                        f"plot_token_similarity(..., vmin={vmin}, vmax={vmax})" + repeat_hint())


@secret_check("plot_laminar_profile")
def test_secret_laminar_figure_of_a_random_profile(ex, secret):
    profile = secret.tensor(secret.integer(2, 7), secret.integer(2, 12)).tanh()
    n_layers_plus_1, n_pairs = profile.shape
    means = profile.mean(dim=1)
    values = profile.sort(dim=1).values  # each layer's values, in order
    fig = laminar_figure_of(ex, profile)
    check_figure(fig, "plot_laminar_profile")
    marked = [p for ax in fig.axes for p in drawn_points(ax, marked_only=True)]
    lines = marked + [p for ax in fig.axes for p in line_points(ax)]
    expect(any(is_mean_line(p, means) for p in lines), "laminar-mean-over-layers",
           mean_line_message(n_layers_plus_1) + repeat_hint())
    dots = np.concatenate([p for p in marked if not is_mean_line(p, means)] or [np.zeros((0, 2))])
    for layer in range(n_layers_plus_1):
        ys = np.sort(dots[np.rint(dots[:, 0]) == layer, 1])
        expect(len(ys) == n_pairs and np.allclose(ys, values[layer].numpy(), atol=1e-5),
               "laminar-figure-dots-wrong",
               f"the dots at layer {layer} should be that layer's {n_pairs} values "
               f"(profile[{layer}])" + repeat_hint())
