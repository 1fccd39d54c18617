"""Tests for exercise 2: cosine similarities within and across layers (the post's demo 2).

Expected values come from ``torch.nn.functional.cosine_similarity`` on hidden states computed
here, directly from the model, and from pairs listed with plain Python loops: never from the
exercise's own functions. Tiny GPT-2 checks shapes and exact values in milliseconds; SmolLM2 (a
trained model) checks what the post observes on GPT-2.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from tests.helpers import check_shape, check_tensor  # noqa: E402

# --------------------------------------------------------------------------- hidden states


@dataclass(frozen=True)
class States:
    hidden: torch.Tensor  # (n_layers + 1, T, d_model), computed here, not by exercise 1
    labels: list[str]  # the T token strings

    @property
    def n_layers_plus_1(self) -> int:
        return self.hidden.shape[0]

    @property
    def n_tokens(self) -> int:
        return self.hidden.shape[1]


def hidden_states_of(model, tokenizer, text: str) -> States:
    tokens = tokenizer(text, return_tensors="pt").to(model.device)
    with torch.no_grad():
        output = model(**tokens, output_hidden_states=True)
    hidden = torch.stack(output.hidden_states)[:, 0].float().cpu()
    labels = [tokenizer.decode([i]) for i in tokens["input_ids"][0].tolist()]
    return States(hidden, labels)


@pytest.fixture(scope="module")
def tiny(tiny_gpt2) -> States:
    """The tiny GPT-2's hidden states of the Penguin text: (5, 10, 64)."""
    return hidden_states_of(*tiny_gpt2, kata.PENGUIN_TEXT)


@pytest.fixture(scope="module", params=["penguin", "kafka"])
def trained(request, smollm2) -> States:
    """SmolLM2's hidden states: Penguin text (31, 11, 576), Kafka text (31, 23, 576)."""
    text = {"penguin": kata.PENGUIN_TEXT, "kafka": kata.KAFKA_TEXT}[request.param]
    return hidden_states_of(*smollm2, text)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- references


def reference_similarity(vectors: torch.Tensor) -> torch.Tensor:
    """(n, d) -> (n, n) with torch's own cosine similarity, by broadcasting row against row."""
    return F.cosine_similarity(vectors[:, None, :], vectors[None, :, :], dim=-1)


def pairs(n_tokens: int, skip_first: bool) -> list[tuple[int, int]]:
    """Every pair i < j, row by row: (0, 1), (0, 2), ..., (1, 2), ... (from 1 when skipping)."""
    first = 1 if skip_first else 0
    return [(i, j) for i in range(first, n_tokens) for j in range(i + 1, n_tokens)]


def reference_profile(hidden: torch.Tensor, skip_first: bool = True, diagonal: bool = False):
    """(n_layers + 1, P): each listed pair's cosine similarity at every layer."""
    n_tokens = hidden.shape[1]
    listed = pairs(n_tokens, skip_first)
    if diagonal:  # the mistake of including each token with itself
        first = 1 if skip_first else 0
        listed = [(i, j) for i in range(first, n_tokens) for j in range(i, n_tokens)]
    i, j = torch.tensor(listed).T
    return F.cosine_similarity(hidden[:, i, :], hidden[:, j, :], dim=-1)


def close(a, b, atol=1e-5) -> bool:
    a = torch.as_tensor(np.asarray(a, dtype=np.float64))
    b = torch.as_tensor(np.asarray(torch.as_tensor(b).detach().cpu(), dtype=np.float64))
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=atol, rtol=1e-4))


# --------------------------------------------------------------------------- diagnosing mistakes


def similarity_hint(got: torch.Tensor, vectors: torch.Tensor) -> str:
    """What a wrong (n, n) similarity matrix of ``vectors`` (n, d) most likely came from."""
    n, d = vectors.shape
    if tuple(got.shape) == (d, d) and d != n:
        return (
            f"it is ({d}, {d}), one row per coordinate: you compared the coordinates instead of "
            "the vectors (wrong dimension). With one vector per row the result is "
            "unit @ unit.T, shape (n, n)"
        )
    if close(got, vectors @ vectors.T, atol=1e-3):
        return (
            "these are plain dot products: cosine similarity divides by both lengths, so "
            "normalise every row to length 1 first"
        )
    wrong = vectors / vectors.norm(dim=0, keepdim=True)
    if close(got, wrong @ wrong.T, atol=1e-3):
        return (
            "you normalised along the wrong dimension (dim=0, across the vectors): every row "
            "must have length 1, so take the norm over the last dimension (dim=-1, keepdim=True)"
        )
    diagonal = torch.diagonal(got)
    if not close(diagonal, torch.ones(n), atol=1e-4):
        return (
            f"the diagonal should be all ones (each vector with itself) but ranges from "
            f"{diagonal.min().item():.3g} to {diagonal.max().item():.3g}: normalise each row "
            "(dim=-1, not the wrong dimension) before the matrix product"
        )
    return "compare one entry by hand with torch.nn.functional.cosine_similarity"


def check_similarity(got, vectors: torch.Tensor, name: str) -> None:
    """``got`` must equal the cosine similarity matrix of ``vectors`` (n, d); else say why not."""
    got = check_tensor(got, name).detach().float().cpu()
    if close(got, reference_similarity(vectors)):
        return
    n, d = vectors.shape
    assert tuple(got.shape) in ((n, n), (d, d)), (
        f"{name} has shape {tuple(got.shape)}, expected {(n, n)}"
    )
    raise AssertionError(
        f"{name} differs from torch's cosine similarity: {similarity_hint(got, vectors)}"
    )


def is_sorted(profile: torch.Tensor) -> bool:
    """True when every layer's values are in increasing order (what torch.unique returns)."""
    return bool((profile[:, 1:] >= profile[:, :-1]).all())


def profile_hint(got: torch.Tensor, hidden: torch.Tensor, skip_first: bool) -> str:
    """What a wrong laminar profile most likely came from."""
    n_tokens = hidden.shape[1]
    kept = n_tokens - 1 if skip_first else n_tokens
    expected_pairs = kept * (kept - 1) // 2
    with_first = reference_profile(hidden, skip_first=False)
    without_first = reference_profile(hidden, skip_first=True)
    if skip_first and close(got, with_first):
        return (
            f"it has the {with_first.shape[1]} pairs of all {n_tokens} tokens: you forgot to leave "
            f"out the first token (with skip_first=True, drop token 0 first; P = (T-1)(T-2)/2 = "
            f"{expected_pairs})"
        )
    if not skip_first and close(got, without_first):
        return (
            "with skip_first=False the first token must be kept: P = T(T-1)/2 = "
            f"{expected_pairs}, but these are only the pairs without token 0"
        )
    if close(got, reference_profile(hidden, skip_first, diagonal=True)):
        return (
            "it includes the diagonal, each token paired with itself (similarity 1): take the "
            "strict upper triangle, torch.triu_indices(n, n, offset=1)"
        )
    if got.ndim == 2 and got.shape[0] == hidden.shape[0]:
        if got.shape[1] < expected_pairs:
            return (
                f"it has only {got.shape[1]} value(s) per layer instead of {expected_pairs} pairs: "
                "were duplicate pairs lost to torch.unique, which merges equal similarities? Index "
                "with torch.triu_indices(n, n, offset=1) instead, which keeps every pair"
            )
        expected = reference_profile(hidden, skip_first)
        if got.shape[1] > 1 and is_sorted(got) and not is_sorted(expected):
            return (
                "every layer's values are sorted: torch.unique sorts (and merges equal values, "
                "losing duplicate pairs); keep the pairs in torch.triu_indices(n, n, offset=1) "
                "order instead"
            )
        same_values = close(got.sort(dim=1).values, expected.sort(dim=1).values)
        if got.shape == expected.shape and same_values:
            return (
                "the right values in the wrong order: list the pairs row by row, (0, 1), (0, 2), "
                "..., (1, 2), ..., as torch.triu_indices(n, n, offset=1) does"
            )
    return (
        f"expected {expected_pairs} pairs per layer in torch.triu_indices(n, n, offset=1) order"
        + (", the first token left out" if skip_first else ", the first token included")
        + "; check token_similarity first"
    )


def check_profile(got, hidden: torch.Tensor, skip_first: bool, name: str) -> None:
    got = check_tensor(got, name).detach().float().cpu()
    expected = reference_profile(hidden, skip_first)
    if close(got, expected):
        return
    if got.shape == expected.shape:
        raise AssertionError(f"{name} has the right shape {tuple(got.shape)} but wrong values: "
                             + profile_hint(got, hidden, skip_first))
    raise AssertionError(f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}: "
                         + profile_hint(got, hidden, skip_first))


# ---------------------------------------------------------------------- cosine_similarity_matrix


def random_vectors(n=6, d=16, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.linspace(0.1, 30.0, n)[:, None]  # very different lengths: only directions count
    return torch.randn(n, d, generator=generator) * lengths


def test_cosine_matrix_matches_torch(ex):
    vectors = random_vectors()
    got = ex.cosine_similarity_matrix(vectors)
    check_similarity(got, vectors, "cosine_similarity_matrix(vectors)")


def test_cosine_matrix_is_symmetric_with_unit_diagonal_and_in_range(ex):
    vectors = random_vectors(n=8, d=5, seed=1)
    got = check_tensor(ex.cosine_similarity_matrix(vectors), "cosine_similarity_matrix")
    check_shape(got, (8, 8), "cosine_similarity_matrix of 8 vectors of length 5",
                "one row and one column per vector (not per coordinate: wrong dimension?)")
    assert torch.allclose(got, got.T, atol=1e-6), (
        "the similarity matrix is not symmetric: a with b must give the same as b with a"
    )
    diagonal = torch.diagonal(got)
    assert torch.allclose(diagonal, torch.ones(8), atol=1e-5), (
        "the diagonal should be all ones (each vector with itself), got "
        f"{[round(x, 3) for x in diagonal.tolist()]}: " + similarity_hint(got, vectors)
    )
    assert got.min() >= -1 - 1e-5 and got.max() <= 1 + 1e-5, (
        f"cosine similarities lie in [-1, 1], got values from {got.min().item():.3g} to "
        f"{got.max().item():.3g}: " + similarity_hint(got, vectors)
    )


def test_cosine_matrix_of_a_zero_vector_is_not_nan(ex):
    vectors = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [3.0, -1.0, 0.5]])
    got = check_tensor(ex.cosine_similarity_matrix(vectors), "cosine_similarity_matrix")
    assert not torch.isnan(got).any(), (
        "a zero vector gave NaN: its length is 0 and 0 / 0 is NaN. Keep the length away from 0 "
        "before dividing (lengths.clamp_min(1e-8)), so that a zero vector gets similarity 0"
    )
    off_diagonal = torch.cat([got[1, [0, 2]], got[[0, 2], 1]])
    assert torch.allclose(off_diagonal, torch.zeros(4), atol=1e-6), (
        f"a zero vector has no direction: its similarity with the other vectors should be 0, got "
        f"{off_diagonal.tolist()}"
    )
    # A zero vector with itself is undefined: 0 (as torch's cosine_similarity gives) or 1 both pass.
    itself = got[1, 1].item()
    assert itself == pytest.approx(0.0, abs=1e-6) or itself == pytest.approx(1.0), (
        f"the zero vector's similarity with itself should be 0 (as torch gives) or 1, got {itself}"
    )
    check_similarity(got[[0, 2]][:, [0, 2]], vectors[[0, 2]],
                     "cosine_similarity_matrix (rows 0 and 2, the non-zero vectors)")


def raised(error_type, call: str, function, *args):
    """The ``error_type`` exception that ``function(*args)`` raises; a plain failure otherwise."""
    try:
        result = function(*args)
    except error_type as error:
        return error
    except NotImplementedError:
        raise
    except Exception as error:
        raise AssertionError(
            f"{call} should raise {error_type.__name__} with a clear message, "
            f"but raised {type(error).__name__}: {error}"
        ) from error
    raise AssertionError(
        f"{call} should raise {error_type.__name__} with a clear message, "
        f"but returned {type(result).__name__}"
    )


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_cosine_matrix_rejects_input_that_is_not_2d(ex, shape):
    error = raised(ValueError, f"cosine_similarity_matrix of a tensor of shape {shape}",
                   ex.cosine_similarity_matrix, torch.ones(shape))
    assert str(error), "the ValueError should say what is wrong: (n, d) expected, one vector a row"


# --------------------------------------------------------------------------- layer_similarity


def test_layer_similarity_compares_one_token_across_layers(ex, tiny):
    for token in range(tiny.n_tokens):
        got = ex.layer_similarity(tiny.hidden, token)
        check_shape(check_tensor(got, "layer_similarity"), (tiny.n_layers_plus_1,) * 2,
                    f"layer_similarity(hidden_states, {token}) on tiny GPT-2 (5 hidden states)",
                    "one row and column per layer: hidden_states[:, token_index, :] is one token "
                    "at every layer (hidden_states[token_index] is a layer)")
        check_similarity(got, tiny.hidden[:, token], f"layer_similarity(hidden_states, {token})")


def test_layer_similarity_token_out_of_range_names_the_valid_range(ex, tiny):
    n = tiny.n_tokens
    error = raised(IndexError, f"layer_similarity(hidden_states, {n}) for {n} tokens",
                   ex.layer_similarity, tiny.hidden, n)
    assert str(n - 1) in str(error), (
        f"the IndexError for token {n} should name the valid range of token indices "
        f"(0 to {n - 1}); it said: {error}"
    )


# --------------------------------------------------------------------------- token_similarity


def test_token_similarity_compares_all_tokens_within_a_layer(ex, tiny):
    for layer in range(tiny.n_layers_plus_1):
        got = ex.token_similarity(tiny.hidden, layer)
        check_shape(check_tensor(got, "token_similarity"), (tiny.n_tokens,) * 2,
                    f"token_similarity(hidden_states, {layer}) for {tiny.n_tokens} tokens",
                    "one row and column per token: hidden_states[layer] is one layer, all tokens")
        check_similarity(got, tiny.hidden[layer], f"token_similarity(hidden_states, {layer})")


def test_token_similarity_layer_out_of_range_names_the_valid_range(ex, tiny):
    n = tiny.n_layers_plus_1
    error = raised(IndexError, f"token_similarity(hidden_states, {n}) for {n} hidden states",
                   ex.token_similarity, tiny.hidden, n)
    assert str(n - 1) in str(error), (
        f"the IndexError for layer {n} should name the valid range of layers (0 to {n - 1}); "
        f"it said: {error}"
    )


# --------------------------------------------------------------------------- laminar_profile


def test_laminar_profile_leaves_out_the_first_token_by_default(ex, tiny):
    got = check_tensor(ex.laminar_profile(tiny.hidden), "laminar_profile(hidden_states)")
    n = tiny.n_tokens - 1
    check_shape(got, (tiny.n_layers_plus_1, n * (n - 1) // 2), "laminar_profile(hidden_states)",
                profile_hint(got.detach().float().cpu(), tiny.hidden, skip_first=True))
    check_profile(got, tiny.hidden, True, "laminar_profile(hidden_states)")


def test_laminar_profile_keeps_the_first_token_when_asked(ex, tiny):
    got = check_tensor(ex.laminar_profile(tiny.hidden, skip_first=False),
                       "laminar_profile(hidden_states, skip_first=False)")
    n = tiny.n_tokens
    check_shape(got, (tiny.n_layers_plus_1, n * (n - 1) // 2),
                "laminar_profile(hidden_states, skip_first=False)",
                profile_hint(got.detach().float().cpu(), tiny.hidden, skip_first=False))
    check_profile(got, tiny.hidden, False, "laminar_profile(hidden_states, skip_first=False)")


def test_laminar_profile_lists_pairs_in_triu_order(ex):
    hidden = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(2))
    for skip_first in (True, False):
        got = ex.laminar_profile(hidden, skip_first=skip_first)
        name = f"laminar_profile of random vectors (skip_first={skip_first})"
        check_profile(got, hidden, skip_first, name)


def equal_similarity_states(n_tokens=5) -> torch.Tensor:
    """(3, n_tokens, 16): at layer l every pair of tokens has the same similarity, (3 - l) / 4.

    Each vector has four entries 0.5 (length 1): 3 - l of them shared by all tokens, the others
    its own. Tokens are scaled by 1, 2, 4, ... (lengths must not matter). Every number here is
    exact in floating point, so the equal similarities are exactly equal.
    """
    hidden = torch.zeros(3, n_tokens, 16)
    for layer in range(3):
        shared = 3 - layer
        for token in range(n_tokens):
            own = [shared + (4 - shared) * token + k for k in range(4 - shared)]
            hidden[layer, token, list(range(shared)) + own] = 0.5 * 2.0**token
    return hidden


def test_laminar_profile_keeps_pairs_with_equal_similarity(ex):
    hidden = equal_similarity_states()
    for skip_first, n in ((True, 4), (False, 5)):
        got = check_tensor(ex.laminar_profile(hidden, skip_first=skip_first), "laminar_profile")
        expected_pairs = n * (n - 1) // 2
        assert got.ndim == 2 and got.shape[1] == expected_pairs, (
            f"{n} tokens whose pairs all have the same similarity must still give "
            f"{expected_pairs} pairs per layer, got shape {tuple(got.shape)}: "
            + profile_hint(got.detach().float().cpu(), hidden, skip_first)
        )
        name = f"laminar_profile of equal-similarity vectors (skip_first={skip_first})"
        check_profile(got, hidden, skip_first, name)


# --------------------------------------------------------------------------- figures


def image_panels(fig) -> list:
    """The axes that show an image (a colour bar's axes shows none)."""
    return [ax for ax in fig.axes if ax.images]


def check_figure(fig, name: str) -> None:
    assert isinstance(fig, Figure), (
        f"{name} should return a matplotlib Figure, got {type(fig).__name__}"
    )


def has_colour_bar(panels) -> bool:
    return any(getattr(image, "colorbar", None) is not None for ax in panels for image in ax.images)


def test_layer_figure_panels_show_the_token_in_their_title(ex, tiny, tmp_path):
    indices = [0, 3, 6, 9]  # like the post: linspace(0, T - 1, 4)
    fig = ex.plot_layer_similarity(tiny.hidden, indices, tiny.labels)
    check_figure(fig, "plot_layer_similarity")
    panels = image_panels(fig)
    assert len(panels) == len(indices), (
        f"expected one image panel per token ({len(indices)}), got {len(panels)}"
    )
    for k, (ax, token) in enumerate(zip(panels, indices)):
        title = ax.get_title()
        assert f"token {token}" in title and tiny.labels[token] in title, (
            f"panel {k} should be titled with its token, like "
            f"'token {token}: {tiny.labels[token]!r}'; got {title!r}"
        )
        shown = ax.images[0].get_array()
        if not close(shown, reference_similarity(tiny.hidden[:, token])):
            if close(shown, reference_similarity(tiny.hidden[:, k])):
                raise AssertionError(
                    f"panel {k} is titled {title!r} but shows token {k}: the image uses the loop "
                    f"counter instead of the token in its title (use token_indices[{k}] = {token})"
                )
            raise AssertionError(
                f"panel {k} ({title!r}) does not show layer_similarity(hidden_states, {token}); "
                "check layer_similarity first"
            )
    fig.savefig(tmp_path / "layer_similarity.png", dpi=50)


def test_layer_figure_colours_axes_and_colour_bar(ex, tiny):
    fig = ex.plot_layer_similarity(tiny.hidden, [1, 2], tiny.labels)
    panels = image_panels(fig)
    assert len(panels) == 2, f"expected one image panel per token (2), got {len(panels)}"
    for ax in panels:
        image = ax.images[0]
        assert tuple(image.get_clim()) == pytest.approx((0.8, 1.0)), (
            f"the default colour limits are 0.8 to 1 (vmin=0.8, vmax=1.0), got {image.get_clim()}"
        )
        assert image.get_cmap().name == "plasma", (
            f"use cmap='plasma', got {image.get_cmap().name!r}"
        )
        assert image.origin == "lower", "put layer 0 at the bottom: imshow(..., origin='lower')"
        assert "layer" in ax.get_xlabel().lower() and "layer" in ax.get_ylabel().lower(), (
            "both axes show layers: label them 'layer' "
            f"(got {ax.get_xlabel()!r} and {ax.get_ylabel()!r})"
        )
    assert has_colour_bar(panels), "the figure needs a colour bar: fig.colorbar(image, ax=...)"
    plt.close(fig)
    fig = ex.plot_layer_similarity(tiny.hidden, [1], tiny.labels, vmin=0.0, vmax=0.9)
    clim = image_panels(fig)[0].images[0].get_clim()
    assert tuple(clim) == pytest.approx((0.0, 0.9)), (
        "plot_layer_similarity(..., vmin=0.0, vmax=0.9) should use those colour limits, "
        f"got {clim}"
    )


def test_token_figure_panels_show_the_layer_in_their_title(ex, tiny, tmp_path):
    layers = [0, 1, 3, 4]  # like the post: linspace(0, n_layers, 4), rounded
    fig = ex.plot_token_similarity(tiny.hidden, layers, tiny.labels)
    check_figure(fig, "plot_token_similarity")
    panels = image_panels(fig)
    assert len(panels) == len(layers), (
        f"expected one image panel per layer ({len(layers)}), got {len(panels)}"
    )
    for k, (ax, layer) in enumerate(zip(panels, layers)):
        title = ax.get_title()
        assert f"layer {layer}" in title, (
            f"panel {k} should be titled 'layer {layer}', got {title!r}"
        )
        shown = ax.images[0].get_array()
        if not close(shown, reference_similarity(tiny.hidden[layer])):
            if close(shown, reference_similarity(tiny.hidden[k])):
                raise AssertionError(
                    f"panel {k} is titled {title!r} but shows layer {k}: the image uses the loop "
                    f"counter instead of the layer in its title (use layers[{k}] = {layer})"
                )
            raise AssertionError(
                f"panel {k} ({title!r}) does not show token_similarity(hidden_states, {layer}); "
                "check token_similarity first"
            )
    fig.savefig(tmp_path / "token_similarity.png", dpi=50)


def test_token_figure_tick_labels_colours_and_colour_bar(ex, tiny):
    fig = ex.plot_token_similarity(tiny.hidden, [2], tiny.labels)
    panels = image_panels(fig)
    assert len(panels) == 1, f"expected one image panel per layer (1), got {len(panels)}"
    ax = panels[0]
    image = ax.images[0]
    assert tuple(image.get_clim()) == pytest.approx((0.5, 1.0)), (
        f"the default colour limits are 0.5 to 1 (vmin=0.5, vmax=1.0), got {image.get_clim()}"
    )
    assert image.get_cmap().name == "plasma", (
        f"use cmap='plasma', got {image.get_cmap().name!r}"
    )
    for axis, labels in (("x", ax.get_xticklabels()), ("y", ax.get_yticklabels())):
        texts = [label.get_text() for label in labels]
        assert texts == tiny.labels, (
            f"the {axis} tick labels should be the {tiny.n_tokens} token strings "
            f"{tiny.labels}, got {texts}"
        )
    ticks = list(ax.get_xticks())
    assert ticks == list(range(tiny.n_tokens)), (
        f"put one x tick on every token, 0 to {tiny.n_tokens - 1}; got {ticks}"
    )
    rotations = {label.get_rotation() for label in ax.get_xticklabels()}
    assert rotations == {90.0}, (
        f"rotate the x tick labels by 90 degrees (rotation=90), got {rotations}"
    )
    assert has_colour_bar(panels), "the figure needs a colour bar: fig.colorbar(image, ax=...)"
    plt.close(fig)
    fig = ex.plot_token_similarity(tiny.hidden, [2], tiny.labels, vmin=-1.0, vmax=1.0)
    clim = image_panels(fig)[0].images[0].get_clim()
    assert tuple(clim) == pytest.approx((-1.0, 1.0)), (
        "plot_token_similarity(..., vmin=-1.0, vmax=1.0) should use those colour limits, "
        f"got {clim}"
    )


def test_laminar_figure_dots_and_mean_line_equal_the_profile(ex, tiny, tmp_path):
    profile = reference_profile(tiny.hidden)  # (5, 36)
    n_layers_plus_1, n_pairs = profile.shape
    fig = ex.plot_laminar_profile(profile)
    check_figure(fig, "plot_laminar_profile")
    axes = [ax for ax in fig.axes if any(isinstance(c, PathCollection) for c in ax.collections)]
    assert len(axes) == 1, f"expected one axes with the dots (ax.scatter), got {len(axes)}"
    ax = axes[0]
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    dots = np.concatenate([np.asarray(c.get_offsets()) for c in scatters])  # (n_dots, 2): x, y
    assert len(dots) == profile.numel(), (
        f"expected one dot per pair per layer ({n_layers_plus_1} x {n_pairs} = "
        f"{profile.numel()}), got {len(dots)}"
    )
    x, y = dots[:, 0], dots[:, 1]
    layer_of_dot = np.rint(x)
    assert np.all(np.abs(x - layer_of_dot) <= 0.4), (
        "keep each dot within 0.4 of its layer on the x axis"
    )
    assert np.std(x - layer_of_dot) > 0.01, (
        "jitter the dots' x positions a little, so that they do not hide each other"
    )
    for layer in range(n_layers_plus_1):
        ys = np.sort(y[layer_of_dot == layer])
        assert close(ys, profile[layer].sort().values), (
            f"the dots at layer {layer} should be that layer's {n_pairs} pair similarities "
            f"(profile[{layer}])"
        )
    means = profile.mean(dim=1)
    lines = [line for line in ax.lines if len(line.get_ydata()) == n_layers_plus_1]
    layers = np.arange(n_layers_plus_1)
    mean_lines = [line for line in lines if close(line.get_xdata(), layers)]
    assert any(close(line.get_ydata(), means) for line in mean_lines), (
        f"draw the per-layer mean as a line: x = 0 to {n_layers_plus_1 - 1}, "
        "y = profile.mean(dim=1) (one mean per layer, averaged over the pairs, not over the layers)"
    )
    assert "layer" in ax.get_xlabel().lower(), (
        f"label the x axis with 'layer', got {ax.get_xlabel()!r}"
    )
    assert "similarity" in ax.get_ylabel().lower(), (
        f"label the y axis 'cosine similarity', got {ax.get_ylabel()!r}"
    )
    fig.savefig(tmp_path / "laminar_profile.png", dpi=50)


# --------------------------------------------------------------------------- SmolLM2 (trained)


@pytest.mark.trained
def test_trained_model_shapes_and_values(ex, trained):
    hidden = trained.hidden
    check_similarity(ex.layer_similarity(hidden, 5), hidden[:, 5],
                     "layer_similarity(hidden_states, 5) on SmolLM2")
    check_similarity(ex.token_similarity(hidden, 15), hidden[15],
                     "token_similarity(hidden_states, 15) on SmolLM2")
    check_profile(ex.laminar_profile(hidden), hidden, True,
                  "laminar_profile(hidden_states) on SmolLM2")


@pytest.mark.trained
def test_trained_token_pairs_are_positively_similar_after_the_embeddings(ex, trained):
    profile = check_tensor(ex.laminar_profile(trained.hidden), "laminar_profile")
    check_profile(profile, trained.hidden, True, "laminar_profile(hidden_states) on SmolLM2")
    means = profile.mean(dim=1)
    not_positive = [
        (layer, round(mean, 3)) for layer, mean in enumerate(means.tolist())
        if layer > 0 and mean <= 0
    ]
    assert not not_positive, (
        "with the first token left out, the mean token-pair similarity should be positive at every "
        f"layer after the embeddings (a trained model's vectors share a cone); got {not_positive}"
    )


@pytest.mark.trained
def test_trained_first_token_is_an_outlier(ex, trained):
    hidden = trained.hidden
    # Across layers: how far each token's layer-by-layer matrix is from the typical token's.
    matrices = torch.stack([check_tensor(ex.layer_similarity(hidden, t), "layer_similarity")
                            for t in range(trained.n_tokens)])
    typical = matrices[1:].median(dim=0).values
    distance = (matrices - typical).abs().mean(dim=(1, 2))
    others = distance[1:].max().item()
    assert distance[0].item() > 2 * others, (
        f"the first token's layer_similarity matrix should stand out: it differs from the typical "
        f"token's by {distance[0].item():.3f} on average, the other tokens' by at most {others:.3f}"
    )
    # Within layers: the gap between a token's similarities to the others and theirs to each other.
    sims = torch.stack([check_tensor(ex.token_similarity(hidden, layer), "token_similarity")
                        for layer in range(1, trained.n_layers_plus_1)])  # (n_layers, T, T)
    i, j = torch.tensor(pairs(trained.n_tokens - 1, skip_first=False)).T  # pairs among T - 1 tokens
    gaps = torch.zeros(trained.n_tokens)
    for t in range(trained.n_tokens):
        rest = [u for u in range(trained.n_tokens) if u != t]
        to_others = sims[:, t, rest].mean(dim=1)  # (n_layers,)
        among_others = sims[:, rest][:, :, rest][:, i, j].mean(dim=1)  # (n_layers,)
        gaps[t] = (to_others - among_others).abs().mean()
    assert gaps.argmax().item() == 0, (
        "the first token's similarities to the other tokens should differ from theirs to each "
        "other more than for any other token; mean gaps per token: "
        f"{[round(gap, 3) for gap in gaps.tolist()]}"
    )


@pytest.mark.trained
def test_trained_neighbouring_layers_are_more_similar_than_distant_ones(ex, trained):
    n_layers_plus_1 = trained.n_layers_plus_1
    layers = torch.arange(n_layers_plus_1)
    distance = (layers[:, None] - layers[None, :]).abs()  # (n_layers + 1, n_layers + 1)
    matrices = torch.stack([check_tensor(ex.layer_similarity(trained.hidden, t), "layer_similarity")
                            for t in range(1, trained.n_tokens)])
    by_distance = {d: matrices[:, distance == d].mean().item() for d in (1, 2, 4, 8, 16)}
    values = list(by_distance.values())
    assert all(a > b for a, b in zip(values, values[1:])), (
        "the further apart two layers are, the less similar one token's vectors should be "
        "(figure 7); mean similarity by layer distance: "
        f"{ {d: round(v, 3) for d, v in by_distance.items()} }"
    )
