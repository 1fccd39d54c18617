"""Exercise 2: cosine similarities within and across layers (the post's demo 2, figures 7 to 9).

What each function must do, one behaviour per test. Every expected value comes from torch's own
cosine similarity on hidden states computed here from the model, never from the solution
(``checks.py``); the tiny GPT-2 checks shapes and values in milliseconds, SmolLM2 (a trained
model, ``trained``) what the post observes on GPT-2.
"""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course.shared.support import (
    check_message_names,
    check_shape,
    check_tensor,
    close,
    draw_headless,
    drawn_heatmaps,
    drawn_points,
    expect,
    heatmap_axes,
    line_points,
    raises_clearly,
)

from .checks import (  # noqa: F401 - close_figures, tiny, trained: fixtures
    check_every_index,
    check_figure,
    check_panel_image,
    check_profile,
    check_similarity,
    close_figures,
    cosine_matrix,
    draw,
    equal_similarity_states,
    has_colour_bar,
    is_mean_line,
    laminar_figure_of,
    mean_line_message,
    names_index,
    pairs,
    panels_of,
    profile_hint,
    profile_of,
    random_vectors,
    reference_profile,
    similarity_hint,
    similarity_at,
    similarity_of,
    tiny,
    trained,
)

# ---------------------------------------------------------------------- cosine_similarity_matrix


def test_cosine_matrix_matches_torch(ex):
    vectors = random_vectors()
    expected = cosine_matrix(vectors)
    got = similarity_of(ex, vectors.clone())
    check_similarity(got, vectors, "cosine_similarity_matrix(vectors)", expected)


def test_cosine_matrix_is_symmetric_with_unit_diagonal_and_in_range(ex):
    vectors = random_vectors(n=8, d=5, seed=1)
    got = check_tensor(similarity_of(ex, vectors.clone()), "cosine_similarity_matrix")
    check_shape(got, (8, 8), "cosine_similarity_matrix of 8 vectors of length 5",
                "one row and one column per vector (not per coordinate: wrong dimension?)",
                diagnosis="similarity-wrong-dimension")
    expect(torch.allclose(got, got.T, atol=1e-6), "similarity-not-symmetric",
           "the similarity matrix is not symmetric: a with b must give the same as b with a")
    diagonal = torch.diagonal(got)
    id, hint = similarity_hint(got, vectors)
    expect(torch.allclose(diagonal, torch.ones(8), atol=1e-5), id, (
        "the diagonal should be all ones (each vector with itself), got "
        f"{[round(x, 3) for x in diagonal.tolist()]}: {hint}"))
    expect(got.min() >= -1 - 1e-5 and got.max() <= 1 + 1e-5, id, (
        f"cosine similarities lie in [-1, 1], got values from {got.min().item():.3g} to "
        f"{got.max().item():.3g}: {hint}"))


def test_cosine_matrix_of_a_zero_vector_is_not_nan(ex):
    vectors = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [3.0, -1.0, 0.5]])
    got = check_tensor(similarity_of(ex, vectors.clone()), "cosine_similarity_matrix")
    expect(not torch.isnan(got).any(), "zero-vector-nan", (
        "a zero vector gave NaN: its length is 0 and 0 / 0 is NaN. Keep the length away from 0 "
        "before dividing, so that a zero vector gets similarity 0"))
    off_diagonal = torch.cat([got[1, [0, 2]], got[[0, 2], 1]])
    expect(torch.allclose(off_diagonal, torch.zeros(4), atol=1e-6), "zero-vector-similarity-not-zero", (
        f"a zero vector has no direction: its similarity with the other vectors should be 0, got "
        f"{off_diagonal.tolist()}"))
    # A zero vector with itself is undefined: 0 (as torch's cosine_similarity gives) or 1 both pass.
    itself = got[1, 1].item()
    expect(itself == pytest.approx(0.0, abs=1e-6) or itself == pytest.approx(1.0),
           "zero-vector-self-similarity",
           f"the zero vector's similarity with itself should be 0 (as torch gives) or 1, got {itself}")
    check_similarity(got[[0, 2]][:, [0, 2]], vectors[[0, 2]],
                     "cosine_similarity_matrix (rows 0 and 2, the non-zero vectors)")


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_cosine_matrix_rejects_input_that_is_not_2d(ex, shape):
    message = raises_clearly(
        ValueError, lambda: ex.cosine_similarity_matrix(torch.ones(shape)),
        f"cosine_similarity_matrix of a tensor of shape {shape}",
        "Check that the input is 2-D, one vector a row, before computing anything.",
        "similarity-input-not-checked")
    expect(message, "similarity-error-message-empty",
           "the ValueError should say what is wrong: (n, d) expected, one vector a row")


# ---------------------------------------------------------------------- layer and token similarity


def test_layer_similarity_compares_one_token_across_layers(ex, tiny):
    check_every_index(ex, "layer_similarity", tiny.hidden, 1,
                      "one row and column per layer: one token at every layer, not one layer's "
                      "tokens", "layer-similarity-indexes-a-layer")


def test_token_similarity_compares_all_tokens_within_a_layer(ex, tiny):
    check_every_index(ex, "token_similarity", tiny.hidden, 0,
                      "one row and column per token: one layer, all of its tokens",
                      "token-similarity-indexes-a-token")


# function: (what its index counts, the check that teaches it, diagnosis ids, axis, last one)
INDEX_RULES = {
    "layer_similarity": ("token indices", "kata.token_index",
                         "layer-similarity-index-not-checked", "layer-similarity-range-not-named",
                         1, lambda hidden: hidden[:, -1]),
    "token_similarity": ("layers", "kata.layer_index",
                         "token-similarity-layer-not-checked", "token-similarity-range-not-named",
                         0, lambda hidden: hidden[-1]),
}


@pytest.mark.parametrize("function", sorted(INDEX_RULES))
def test_an_index_out_of_range_names_the_valid_range(ex, tiny, function):
    what, rule, unchecked, unnamed, axis, last = INDEX_RULES[function]
    n = tiny.hidden.shape[axis]
    message = raises_clearly(
        IndexError, lambda: getattr(ex, function)(tiny.hidden.clone(), n),
        f"{function}(hidden_states, {n}) for {n} {what}",
        f"Check the index before using it ({rule} does, naming the valid range).", unchecked)
    check_message_names(message, [str(n - 1)], unnamed,
                        f"name the valid range of {what} (-{n}..{n - 1})")
    # Python-style negative indices count from the end: -1 is the last one.
    expected = cosine_matrix(last(tiny.hidden))
    check_similarity(similarity_at(ex, function, tiny.hidden, -1, axis), last(tiny.hidden),
                     f"{function}(hidden_states, -1), the last of the {what}", expected)


# ---------------------------------------------------------------------- laminar_profile


def test_laminar_profile_leaves_out_the_first_token_by_default(ex, tiny):
    got = check_tensor(profile_of(ex, tiny.hidden), "laminar_profile(hidden_states)")
    check_profile(got, tiny.hidden, True, "laminar_profile(hidden_states)")


def test_laminar_profile_keeps_the_first_token_when_asked(ex, tiny):
    got = check_tensor(profile_of(ex, tiny.hidden, skip_first=False),
                       "laminar_profile(hidden_states, skip_first=False)")
    check_profile(got, tiny.hidden, False, "laminar_profile(hidden_states, skip_first=False)")


def test_laminar_profile_lists_pairs_in_triu_order(ex):
    hidden = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(2))
    for skip_first in (True, False):
        got = profile_of(ex, hidden, skip_first=skip_first)
        name = f"laminar_profile of random vectors (skip_first={skip_first})"
        check_profile(got, hidden, skip_first, name)


def test_laminar_profile_keeps_pairs_with_equal_similarity(ex):
    hidden = equal_similarity_states()
    for skip_first, n in ((True, 4), (False, 5)):
        got = check_tensor(profile_of(ex, hidden, skip_first=skip_first), "laminar_profile")
        expected_pairs = n * (n - 1) // 2
        id, hint = profile_hint(got.detach().float().cpu(), hidden, skip_first)
        expect(got.ndim == 2 and got.shape[1] == expected_pairs, id, (
            f"{n} tokens whose pairs all have the same similarity must still give "
            f"{expected_pairs} pairs per layer, got shape {tuple(got.shape)}: {hint}"))
        name = f"laminar_profile of equal-similarity vectors (skip_first={skip_first})"
        check_profile(got, hidden, skip_first, name)


# ---------------------------------------------------------------------- figures 7 and 8


def test_layer_figure_panels_show_the_token_in_their_title(ex, tiny):
    # The first and the last token (the post draws 4 panels: linspace(0, T - 1, 4)); two panels
    # suffice to see a loop counter in place of the index, and each costs ~40 ms to draw.
    indices = [0, tiny.n_tokens - 1]
    fig = draw(ex, "plot_layer_similarity", tiny.hidden.clone(), indices, tiny.labels)
    panels = panels_of(fig, "plot_layer_similarity", len(indices), "token", "layer-figure")
    for k, (ax, token) in enumerate(zip(panels, indices)):
        title = ax.get_title()
        expect(names_index(title, "token", token) and tiny.labels[token] in title,
               "layer-figure-title-wrong", (
                   f"panel {k} should be titled with its token, like "
                   f"'token {token}: {tiny.labels[token]!r}'; got {title!r}"))
        check_panel_image(ax, k, token, tiny.hidden, axis=1)
    draw_headless(fig)


def test_layer_figure_colours_axes_and_colour_bar(ex, tiny):
    fig = draw(ex, "plot_layer_similarity", tiny.hidden.clone(), [1, 2], tiny.labels)
    panels = heatmap_axes(fig)
    expect(len(panels) == 2, "layer-figure-panel-count-wrong",
           f"expected one heatmap panel per token (2), got {len(panels)}")
    for ax in panels:
        heatmap = drawn_heatmaps(ax)[0]
        expect(heatmap.clim == pytest.approx((0.8, 1.0)), "layer-figure-colour-limits",
               f"the default colour limits are 0.8 to 1 (vmin=0.8, vmax=1.0), got "
               f"{heatmap.clim}")
        expect(heatmap.cmap == "plasma", "layer-figure-cmap",
               f"use the colour map 'plasma', got {heatmap.cmap!r}")
        expect(heatmap.rows_up, "layer-figure-origin",
               "put layer 0 at the bottom: the image's origin belongs in the lower corner")
        expect("layer" in ax.get_xlabel().lower() and "layer" in ax.get_ylabel().lower(),
               "layer-figure-axis-labels", (
                   "both axes show layers: label them 'layer' "
                   f"(got {ax.get_xlabel()!r} and {ax.get_ylabel()!r})"))
    expect(has_colour_bar(panels), "layer-figure-colour-bar-missing",
           "the figure needs a colour bar, to read the similarities from the colours")
    plt.close(fig)
    fig = draw(ex, "plot_layer_similarity", tiny.hidden.clone(), [1], tiny.labels,
               vmin=0.0, vmax=0.9)
    clim = drawn_heatmaps(heatmap_axes(fig)[0])[0].clim
    expect(clim == pytest.approx((0.0, 0.9)), "layer-figure-ignores-vmin-vmax", (
        "plot_layer_similarity(..., vmin=0.0, vmax=0.9) should use those colour limits, "
        f"got {clim}"))


def test_token_figure_panels_show_the_layer_in_their_title(ex, tiny):
    # The embeddings and the last layer (the post draws 4 panels: linspace(0, n_layers, 4)); two
    # panels suffice to see a loop counter in place of the layer, and each costs ~70 ms to draw.
    layers = [0, tiny.n_layers_plus_1 - 1]
    fig = draw(ex, "plot_token_similarity", tiny.hidden.clone(), layers, tiny.labels)
    panels = panels_of(fig, "plot_token_similarity", len(layers), "layer", "token-figure")
    for k, (ax, layer) in enumerate(zip(panels, layers)):
        title = ax.get_title()
        expect(names_index(title, "layer", layer), "token-figure-title-wrong",
               f"panel {k} should be titled 'layer {layer}', got {title!r}")
        check_panel_image(ax, k, layer, tiny.hidden, axis=0)
    draw_headless(fig)


def test_token_figure_tick_labels_colours_and_colour_bar(ex, tiny):
    fig = draw(ex, "plot_token_similarity", tiny.hidden.clone(), [2], tiny.labels)
    panels = heatmap_axes(fig)
    expect(len(panels) == 1, "token-figure-panel-count-wrong",
           f"expected one heatmap panel per layer (1), got {len(panels)}")
    ax = panels[0]
    heatmap = drawn_heatmaps(ax)[0]
    expect(heatmap.clim == pytest.approx((0.5, 1.0)), "token-figure-colour-limits",
           f"the default colour limits are 0.5 to 1 (vmin=0.5, vmax=1.0), got {heatmap.clim}")
    expect(heatmap.cmap == "plasma", "token-figure-cmap",
           f"use the colour map 'plasma', got {heatmap.cmap!r}")
    for axis, labels in (("x", ax.get_xticklabels()), ("y", ax.get_yticklabels())):
        texts = [label.get_text() for label in labels]
        expect(texts == tiny.labels, "token-figure-tick-labels-wrong", (
            f"the {axis} tick labels should be the {tiny.n_tokens} token strings "
            f"{tiny.labels}, got {texts}"))
    ticks = [float(tick) for tick in ax.get_xticks()]
    columns = [float(x) for x in heatmap.centres[0, :, 0]]  # where each token's column is drawn
    expect(len(ticks) == len(columns) and np.allclose(ticks, columns), "token-figure-ticks-wrong",
           f"put one x tick on every token, at the centre of its column ({columns[0]:g} to "
           f"{columns[-1]:g}; with imshow 0 to {tiny.n_tokens - 1}); got {ticks}")
    rotations = {label.get_rotation() for label in ax.get_xticklabels()}
    expect(rotations == {90.0}, "token-figure-labels-not-rotated",
           f"stand the x tick labels upright, rotated by 90 degrees, got {rotations}")
    expect(has_colour_bar(panels), "token-figure-colour-bar-missing",
           "the figure needs a colour bar, to read the similarities from the colours")
    plt.close(fig)
    fig = draw(ex, "plot_token_similarity", tiny.hidden.clone(), [2], tiny.labels,
               vmin=-1.0, vmax=1.0)
    clim = drawn_heatmaps(heatmap_axes(fig)[0])[0].clim
    expect(clim == pytest.approx((-1.0, 1.0)), "token-figure-ignores-vmin-vmax", (
        "plot_token_similarity(..., vmin=-1.0, vmax=1.0) should use those colour limits, "
        f"got {clim}"))


# ---------------------------------------------------------------------- figure 9


def test_laminar_figure_dots_and_mean_line_equal_the_profile(ex, tiny):
    profile = reference_profile(tiny.hidden)  # (5, 36)
    n_layers_plus_1, n_pairs = profile.shape
    means = profile.mean(dim=1)
    fig = laminar_figure_of(ex, profile)
    check_figure(fig, "plot_laminar_profile")
    axes = [ax for ax in fig.axes if drawn_points(ax, marked_only=True)]
    expect(len(axes) == 1, "laminar-figure-axes-wrong",
           f"expected one axes with the dots (scatter, or a line drawn with markers), got {len(axes)}")
    ax = axes[0]
    series = [points for points in drawn_points(ax, marked_only=True)
              if not is_mean_line(points, means)]
    dots = np.concatenate(series) if series else np.zeros((0, 2))  # (n_dots, 2): x, y
    expect(len(dots) == profile.numel(), "laminar-figure-dot-count-wrong", (
        f"expected one dot per pair per layer ({n_layers_plus_1} x {n_pairs} = "
        f"{profile.numel()}), got {len(dots)}"))
    x, y = dots[:, 0], dots[:, 1]
    layer_of_dot = np.rint(x)
    expect(np.all(np.abs(x - layer_of_dot) <= 0.4), "laminar-figure-dots-off-layer",
           "keep each dot within 0.4 of its layer on the x axis")
    expect(np.std(x - layer_of_dot) > 0.01, "laminar-figure-without-jitter",
           "jitter the dots' x positions a little, so that they do not hide each other")
    for layer in range(n_layers_plus_1):
        ys = np.sort(y[layer_of_dot == layer])
        expect(close(ys, profile[layer].sort().values), "laminar-figure-dots-wrong", (
            f"the dots at layer {layer} should be that layer's {n_pairs} pair similarities "
            f"(profile[{layer}])"))
    lines = line_points(ax) + drawn_points(ax, marked_only=True)
    expect(any(is_mean_line(points, means) for points in lines), "laminar-mean-over-layers",
           mean_line_message(n_layers_plus_1))
    expect("layer" in ax.get_xlabel().lower(), "laminar-figure-x-label",
           f"label the x axis with 'layer', got {ax.get_xlabel()!r}")
    expect("similarity" in ax.get_ylabel().lower(), "laminar-figure-y-label",
           f"label the y axis 'cosine similarity', got {ax.get_ylabel()!r}")
    draw_headless(fig)


# ---------------------------------------------------------------------- SmolLM2 (trained)


@pytest.mark.trained
def test_trained_model_shapes_and_values(ex, trained):
    hidden = trained.hidden
    check_similarity(ex.layer_similarity(hidden.clone(), 5), hidden[:, 5],
                     "layer_similarity(hidden_states, 5) on SmolLM2")
    check_similarity(ex.token_similarity(hidden.clone(), 15), hidden[15],
                     "token_similarity(hidden_states, 15) on SmolLM2")
    check_profile(profile_of(ex, hidden), hidden, True,
                  "laminar_profile(hidden_states) on SmolLM2")


@pytest.mark.trained
def test_trained_token_pairs_are_positively_similar_after_the_embeddings(ex, trained):
    profile = check_tensor(profile_of(ex, trained.hidden), "laminar_profile")
    check_profile(profile, trained.hidden, True, "laminar_profile(hidden_states) on SmolLM2")
    means = profile.mean(dim=1)
    not_positive = [(layer, round(mean, 3)) for layer, mean in enumerate(means.tolist())
                    if layer > 0 and mean <= 0]
    expect(not not_positive, "profile-not-positive", (
        "with the first token left out, the mean token-pair similarity should be positive at every "
        f"layer after the embeddings (a trained model's vectors share a cone); got {not_positive}"))


@pytest.mark.trained
def test_trained_first_token_is_an_outlier(ex, trained):
    hidden = trained.hidden
    # Across layers: how far each token's layer-by-layer matrix is from the typical token's.
    matrices = torch.stack([check_tensor(ex.layer_similarity(hidden.clone(), t), "layer_similarity")
                            for t in range(trained.n_tokens)])
    typical = matrices[1:].median(dim=0).values
    distance = (matrices - typical).abs().mean(dim=(1, 2))
    others = distance[1:].max().item()
    expect(distance[0].item() > 2 * others, "first-token-not-an-outlier", (
        f"the first token's layer_similarity matrix should stand out: it differs from the typical "
        f"token's by {distance[0].item():.3f} on average, the other tokens' by at most {others:.3f}"))
    # Within layers: the gap between a token's similarities to the others and theirs to each other.
    sims = torch.stack([check_tensor(ex.token_similarity(hidden.clone(), layer), "token_similarity")
                        for layer in range(1, trained.n_layers_plus_1)])  # (n_layers, T, T)
    i, j = torch.tensor(pairs(trained.n_tokens - 1, skip_first=False)).T  # pairs among T - 1 tokens
    gaps = torch.zeros(trained.n_tokens)
    for t in range(trained.n_tokens):
        rest = [u for u in range(trained.n_tokens) if u != t]
        to_others = sims[:, t, rest].mean(dim=1)  # (n_layers,)
        among_others = sims[:, rest][:, :, rest][:, i, j].mean(dim=1)  # (n_layers,)
        gaps[t] = (to_others - among_others).abs().mean()
    expect(gaps.argmax().item() == 0, "first-token-gap-not-largest", (
        "the first token's similarities to the other tokens should differ from theirs to each "
        "other more than for any other token; mean gaps per token: "
        f"{[round(gap, 3) for gap in gaps.tolist()]}"))


@pytest.mark.trained
def test_trained_neighbouring_layers_are_more_similar_than_distant_ones(ex, trained):
    layers = torch.arange(trained.n_layers_plus_1)
    distance = (layers[:, None] - layers[None, :]).abs()  # (n_layers + 1, n_layers + 1)
    matrices = torch.stack([
        check_tensor(ex.layer_similarity(trained.hidden.clone(), t), "layer_similarity")
        for t in range(1, trained.n_tokens)])
    by_distance = {d: matrices[:, distance == d].mean().item() for d in (1, 2, 4, 8, 16)}
    values = list(by_distance.values())
    expect(all(a > b for a, b in zip(values, values[1:])), "layer-similarity-not-decreasing", (
        "the further apart two layers are, the less similar one token's vectors should be "
        "(figure 7); mean similarity by layer distance: "
        f"{ {d: round(v, 3) for d, v in by_distance.items()} }"))
