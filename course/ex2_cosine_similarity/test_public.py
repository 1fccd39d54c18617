"""Tests for exercise 2: cosine similarities within and across layers (the post's demo 2).

Expected values come from ``torch.nn.functional.cosine_similarity`` on hidden states computed
here, directly from the model, and from pairs listed with plain Python loops: never from the
exercise's own functions. Tiny GPT-2 checks shapes and exact values in milliseconds; SmolLM2 (a
trained model) checks what the post observes on GPT-2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from course.shared.diagnosis import diagnose  # noqa: E402
from course.shared.support import (  # noqa: E402
    check_message_names,
    check_shape,
    check_tensor,
    close,
    computed_once,
    cosine_matrix,
    draw_headless,
    drawn_heatmaps,
    drawn_points,
    expect,
    heatmap_axes,
    line_points,
    raises_clearly,
    reference_hidden_states,
)
from course.shared.secret import repeat_hint, secret, secret_check  # noqa: E402,F401 - secret: a fixture

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


def hidden_states_of(model, tokenizer, text: str, model_name: str) -> States:
    """The hidden states of ``text``, from one forward pass per process for each model and text
    (kept across the watcher's re-runs: ``computed_once``)."""
    input_ids = tokenizer(text, return_tensors="pt")["input_ids"]
    labels = [tokenizer.decode([i]) for i in input_ids[0].tolist()]
    hidden = computed_once(("hidden-states", model_name, text),
                           lambda: reference_hidden_states(model, input_ids))
    return States(hidden, labels)


@pytest.fixture(scope="module")
def tiny(tiny_gpt2) -> States:
    """The tiny GPT-2's hidden states of the Penguin text: (5, 10, 64)."""
    return hidden_states_of(*tiny_gpt2, kata.PENGUIN_TEXT, "tiny-gpt2")


@pytest.fixture(scope="module", params=["penguin", "kafka"])
def trained(request, smollm2) -> States:
    """SmolLM2's hidden states: Penguin text (31, 11, 576), Kafka text (31, 23, 576)."""
    text = {"penguin": kata.PENGUIN_TEXT, "kafka": kata.KAFKA_TEXT}[request.param]
    return hidden_states_of(*smollm2, text, "smollm2")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- references


reference_similarity = cosine_matrix


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


# --------------------------------------------------------------------------- diagnosing mistakes


def similarity_hint(got: torch.Tensor, vectors: torch.Tensor) -> tuple[str, str]:
    """The diagnosis id and the hint: what a wrong (n, n) similarity matrix of ``vectors`` (n, d)
    most likely came from."""
    n, d = vectors.shape
    if tuple(got.shape) == (d, d) and d != n:
        return "similarity-wrong-dimension", (
            f"it is ({d}, {d}), one row per coordinate: you compared the coordinates instead of "
            "the vectors (wrong dimension). With one vector per row the result is "
            "unit @ unit.T, shape (n, n)"
        )
    if close(got, vectors @ vectors.T, atol=1e-3):
        return "similarity-plain-dot-products", (
            "these are plain dot products: cosine similarity divides by both lengths, so "
            "normalise every row to length 1 first"
        )
    wrong = vectors / vectors.norm(dim=0, keepdim=True)
    if close(got, wrong @ wrong.T, atol=1e-3):
        return "similarity-normalised-wrong-dimension", (
            "you normalised along the wrong dimension (dim=0, across the vectors): every row "
            "must have length 1, so take the norm over the last dimension (dim=-1, keepdim=True)"
        )
    diagonal = torch.diagonal(got)
    if not close(diagonal, torch.ones(n), atol=1e-4):
        return "similarity-diagonal-not-one", (
            f"the diagonal should be all ones (each vector with itself) but ranges from "
            f"{diagonal.min().item():.3g} to {diagonal.max().item():.3g}: divide every row by "
            "its own length before the matrix product"
        )
    return "similarity-wrong", "compare one entry by hand with torch.nn.functional.cosine_similarity"


def similarity_of(ex, vectors: torch.Tensor, call: str = "cosine_similarity_matrix"):
    """``ex.cosine_similarity_matrix(vectors)``, with a broadcasting error explained."""
    try:
        return ex.cosine_similarity_matrix(vectors)
    except RuntimeError as error:
        if "must match the size" in str(error):
            n, d = vectors.shape
            diagnose("row-norm-without-keepdim", (
                f"{call} on ({n}, {d}) vectors failed with a broadcasting error ({error}): "
                f"the row lengths have shape ({n},), and dividing the ({n}, {d}) vectors by them "
                f"lines them up with the {d} columns, not the {n} rows; keep the dimension, "
                f"vectors.norm(dim=-1, keepdim=True), to get ({n}, 1)"))
        raise


def first_check_cosine_matrix(ex) -> None:
    """Functions built on cosine_similarity_matrix are only checked once it works."""
    vectors = random_vectors(n=6, d=16, seed=5)
    got = similarity_of(ex, vectors, "cosine_similarity_matrix (which this function uses)")
    got = check_tensor(got, "cosine_similarity_matrix")
    if not close(got, cosine_matrix(vectors)):
        id, hint = similarity_hint(got.detach().float().cpu(), vectors)
        diagnose(id, "cosine_similarity_matrix, which this function builds on, is wrong; fix it "
                 f"first: {hint}")


def check_similarity(got, vectors: torch.Tensor, name: str) -> None:
    """``got`` must equal the cosine similarity matrix of ``vectors`` (n, d); else say why not."""
    got = check_tensor(got, name).detach().float().cpu()
    if close(got, reference_similarity(vectors)):
        return
    n, d = vectors.shape
    expect(tuple(got.shape) in ((n, n), (d, d)), "similarity-shape-wrong",
           f"{name} has shape {tuple(got.shape)}, expected {(n, n)}")
    id, hint = similarity_hint(got, vectors)
    diagnose(id, f"{name} differs from torch's cosine similarity: {hint}")


def is_sorted(profile: torch.Tensor) -> bool:
    """True when every layer's values are in increasing order (what torch.unique returns)."""
    return bool((profile[:, 1:] >= profile[:, :-1]).all())


def profile_hint(got: torch.Tensor, hidden: torch.Tensor, skip_first: bool) -> tuple[str, str]:
    """The diagnosis id and the hint: what a wrong laminar profile most likely came from."""
    n_tokens = hidden.shape[1]
    kept = n_tokens - 1 if skip_first else n_tokens
    expected_pairs = kept * (kept - 1) // 2
    with_first = reference_profile(hidden, skip_first=False)
    without_first = reference_profile(hidden, skip_first=True)
    if skip_first and close(got, with_first):
        return "profile-first-token-kept", (
            f"it has the {with_first.shape[1]} pairs of all {n_tokens} tokens: you forgot to leave "
            f"out the first token (with skip_first=True, drop token 0 first; P = (T-1)(T-2)/2 = "
            f"{expected_pairs})"
        )
    if not skip_first and close(got, without_first):
        return "profile-first-token-dropped", (
            "with skip_first=False the first token must be kept: P = T(T-1)/2 = "
            f"{expected_pairs}, but these are only the pairs without token 0"
        )
    if close(got, reference_profile(hidden, skip_first, diagonal=True)):
        return "profile-includes-diagonal", (
            "it includes the diagonal, each token paired with itself (similarity 1): take the "
            "strict upper triangle, torch.triu_indices(n, n, offset=1)"
        )
    expected = reference_profile(hidden, skip_first)
    if got.ndim == 2 and got.shape[0] == hidden.shape[0]:
        lowest_dropped = [row.unique()[1:] for row in expected]
        zero_kept = [torch.cat([row, torch.zeros(1)]).unique()[1:] for row in expected]
        if (all(close(g, u) for g, u in zip(got, lowest_dropped))
                or (all(close(g, u) for g, u in zip(got, zero_kept))
                    and bool((expected.min(dim=1).values < 0).all()))):
            return "unique-drops-lowest-pair", (
                "each layer's values are sorted and its lowest similarity is missing: "
                "torch.unique(...)[1:] sorts the values, so [1:] drops the most negative pair, "
                "not the diagonal; take the pairs with torch.triu_indices(n, n, offset=1)"
            )
        if got.shape[1] < expected_pairs:
            return "unique-merges-pairs", (
                f"it has only {got.shape[1]} value(s) per layer instead of {expected_pairs} pairs: "
                "were duplicate pairs lost to torch.unique, which merges equal similarities? Index "
                "with torch.triu_indices(n, n, offset=1) instead, which keeps every pair"
            )
        if got.shape[1] > 1 and is_sorted(got) and not is_sorted(expected):
            return "unique-sorts-pairs", (
                "every layer's values are sorted: torch.unique sorts (and merges equal values, "
                "losing duplicate pairs); keep the pairs in torch.triu_indices(n, n, offset=1) "
                "order instead"
            )
        same_values = close(got.sort(dim=1).values, expected.sort(dim=1).values)
        if got.shape == expected.shape and same_values:
            return "profile-pairs-wrong-order", (
                "the right values in the wrong order: list the pairs row by row, (0, 1), (0, 2), "
                "..., (1, 2), ..., as torch.triu_indices(n, n, offset=1) does"
            )
    return "profile-wrong", (
        f"expected {expected_pairs} pairs per layer in torch.triu_indices(n, n, offset=1) order"
        + (", the first token left out" if skip_first else ", the first token included")
        + "; check token_similarity first"
    )


def check_profile(got, hidden: torch.Tensor, skip_first: bool, name: str) -> None:
    got = check_tensor(got, name).detach().float().cpu()
    expected = reference_profile(hidden, skip_first)
    if close(got, expected):
        return
    id, hint = profile_hint(got, hidden, skip_first)
    if got.shape == expected.shape:
        diagnose(id, f"{name} has the right shape {tuple(got.shape)} but wrong values: {hint}")
    diagnose(id, f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}: {hint}")


def profile_of(ex, hidden: torch.Tensor, **kwargs):
    """``ex.laminar_profile(hidden, **kwargs)``; a failed torch.stack of unequal rows explained."""
    first_check_cosine_matrix(ex)
    try:
        return ex.laminar_profile(hidden, **kwargs)
    except RuntimeError as error:
        if "stack expects each tensor to be equal size" in str(error):
            diagnose("unique-merges-pairs", (
                f"laminar_profile could not stack its layers ({error}): the layers have "
                "different numbers of values, which happens when torch.unique merges equal "
                "similarities (ties); index with torch.triu_indices(n, n, offset=1), which keeps "
                "every pair"))
        raise


# ---------------------------------------------------------------------- cosine_similarity_matrix


def random_vectors(n=6, d=16, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.linspace(0.1, 30.0, n)[:, None]  # very different lengths: only directions count
    return torch.randn(n, d, generator=generator) * lengths


def test_cosine_matrix_matches_torch(ex):
    vectors = random_vectors()
    got = similarity_of(ex, vectors)
    check_similarity(got, vectors, "cosine_similarity_matrix(vectors)")


def test_cosine_matrix_is_symmetric_with_unit_diagonal_and_in_range(ex):
    vectors = random_vectors(n=8, d=5, seed=1)
    got = check_tensor(similarity_of(ex, vectors), "cosine_similarity_matrix")
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
    got = check_tensor(similarity_of(ex, vectors), "cosine_similarity_matrix")
    expect(not torch.isnan(got).any(), "zero-vector-nan", (
        "a zero vector gave NaN: its length is 0 and 0 / 0 is NaN. Keep the length away from 0 "
        "before dividing (lengths.clamp_min(1e-8)), so that a zero vector gets similarity 0"
    ))
    off_diagonal = torch.cat([got[1, [0, 2]], got[[0, 2], 1]])
    expect(torch.allclose(off_diagonal, torch.zeros(4), atol=1e-6), "zero-vector-similarity-not-zero", (
        f"a zero vector has no direction: its similarity with the other vectors should be 0, got "
        f"{off_diagonal.tolist()}"
    ))
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
        "Check vectors.ndim == 2 first.", "similarity-input-not-checked")
    expect(message, "similarity-error-message-empty",
           "the ValueError should say what is wrong: (n, d) expected, one vector a row")


# --------------------------------------------------------------------------- layer_similarity


def check_every_index(ex, function: str, hidden: torch.Tensor, axis: int, hint: str,
                      diagnosis: str) -> None:
    """``function(hidden, i)`` for every index i along ``axis`` (1: tokens, 0: layers) must be
    the cosine similarity matrix of the vectors that index selects."""
    first_check_cosine_matrix(ex)
    for index in range(hidden.shape[axis]):
        vectors = hidden[:, index] if axis == 1 else hidden[index]
        got = getattr(ex, function)(hidden, index)
        name = f"{function}(hidden_states, {index})"
        check_shape(check_tensor(got, function), (len(vectors),) * 2,
                    f"{name} for hidden states of shape {tuple(hidden.shape)}", hint,
                    diagnosis=diagnosis)
        check_index_not_shifted(got, hidden, index, axis, function)
        check_similarity(got, vectors, name)


# axis: (what the index counts, the diagnosis id of an index shifted by one, the right selection)
SHIFTED_INDEX = {
    0: ("layer", "similarity-layer-off-by-one",
        "hidden_states[layer] is that layer as it is: index 0 is already the embedding layer"),
    1: ("token", "similarity-token-off-by-one",
        "hidden_states[:, token_index, :] is that token as it is: index 0 is the first token"),
}


def check_index_not_shifted(got, hidden: torch.Tensor, index: int, axis: int,
                            function: str) -> None:
    """``function(hidden, index)`` must not be the matrix of a neighbouring index (index + 1 or
    index - 1): your cosine_similarity_matrix is right, the index you hand it is not."""
    got = got.detach().float().cpu()
    vectors = hidden[:, index] if axis == 1 else hidden[index]
    if close(got, reference_similarity(vectors)):
        return
    what, id, advice = SHIFTED_INDEX[axis]
    for shifted in (index + 1, index - 1):
        if not 0 <= shifted < hidden.shape[axis] or shifted == index:
            continue
        neighbour = hidden[:, shifted] if axis == 1 else hidden[shifted]
        if close(got, reference_similarity(neighbour)):
            diagnose(id, (
                f"your {function}(hidden_states, {index}) returned the matrix of {what} "
                f"{shifted}, not of {what} {index}: the similarities themselves are right, the "
                f"{what} index is shifted by {shifted - index:+d}. {advice}, so use the index "
                f"unchanged (no + 1 or - 1)"))


def test_layer_similarity_compares_one_token_across_layers(ex, tiny):
    check_every_index(ex, "layer_similarity", tiny.hidden, 1,
                      "one row and column per layer: hidden_states[:, token_index, :] is one token "
                      "at every layer (hidden_states[token_index] is a layer)",
                      "layer-similarity-indexes-a-layer")


# --------------------------------------------------------------------------- token_similarity


def test_token_similarity_compares_all_tokens_within_a_layer(ex, tiny):
    check_every_index(ex, "token_similarity", tiny.hidden, 0,
                      "one row and column per token: hidden_states[layer] is one layer, all tokens",
                      "token-similarity-indexes-a-token")


# function: (what its index counts, the check that teaches it, diagnosis ids, axis, last one)
INDEX_RULES = {
    "layer_similarity": ("token indices", "kata.token_index(token_index, T)",
                         "layer-similarity-index-not-checked", "layer-similarity-range-not-named",
                         1, lambda hidden: hidden[:, -1]),
    "token_similarity": ("layers", "kata.layer_index(layer, n)",
                         "token-similarity-layer-not-checked", "token-similarity-range-not-named",
                         0, lambda hidden: hidden[-1]),
}


@pytest.mark.parametrize("function", sorted(INDEX_RULES))
def test_an_index_out_of_range_names_the_valid_range(ex, tiny, function):
    what, rule, unchecked, unnamed, axis, last = INDEX_RULES[function]
    n = tiny.hidden.shape[axis]
    message = raises_clearly(
        IndexError, lambda: getattr(ex, function)(tiny.hidden, n),
        f"{function}(hidden_states, {n}) for {n} {what}",
        f"Check the index first ({rule} does).", unchecked)
    check_message_names(message, [str(n - 1)], unnamed,
                        f"name the valid range of {what} (-{n}..{n - 1})")
    # Python-style negative indices count from the end: -1 is the last one.
    check_similarity(getattr(ex, function)(tiny.hidden, -1), last(tiny.hidden),
                     f"{function}(hidden_states, -1), the last of the {what}")


# --------------------------------------------------------------------------- laminar_profile


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
        got = check_tensor(profile_of(ex, hidden, skip_first=skip_first), "laminar_profile")
        expected_pairs = n * (n - 1) // 2
        id, hint = profile_hint(got.detach().float().cpu(), hidden, skip_first)
        expect(got.ndim == 2 and got.shape[1] == expected_pairs, id, (
            f"{n} tokens whose pairs all have the same similarity must still give "
            f"{expected_pairs} pairs per layer, got shape {tuple(got.shape)}: {hint}"))
        name = f"laminar_profile of equal-similarity vectors (skip_first={skip_first})"
        check_profile(got, hidden, skip_first, name)


# --------------------------------------------------------------------------- figures


def draw(ex, function: str, hidden, chosen: list, *args, **kwargs):
    """``ex.<function>(hidden, chosen, ...)``; the error of a one-panel figure explained.

    ``plt.subplots(1, n)`` returns an array of axes for n > 1 but a single ``Axes`` for n = 1,
    so ``axes[k]`` (or ``for ax in axes``) fails only when one panel is asked for.
    """
    try:
        return getattr(ex, function)(hidden, chosen, *args, **kwargs)
    except TypeError as error:
        if len(chosen) == 1 and "'Axes' object" in str(error):
            diagnose("one-panel-single-axes", (
                f"your {function} failed for a single panel ({chosen}) with {error!r}: "
                "plt.subplots(1, 1) returns one Axes, not an array of them, so it cannot be "
                "indexed or looped over. Ask for an array every time with "
                "plt.subplots(1, n, squeeze=False) and use axes[0][k]"))
        raise


def check_figure(fig, name: str) -> None:
    expect(isinstance(fig, Figure), "similarity-figure-not-returned",
           f"{name} should return a matplotlib Figure, got {type(fig).__name__}")


def check_panel_image(ax, k: int, index: int, vectors_of, what: str, argument: str,
                      function: str, figure: str) -> None:
    """Panel ``k`` must show the similarity matrix of ``vectors_of(index)``; if it shows that of
    ``vectors_of(k)``, the loop counter took the place of the index its title names."""
    shown, title = drawn_heatmaps(ax)[0].values, ax.get_title()
    if close(shown, reference_similarity(vectors_of(index))):
        return
    if close(shown, reference_similarity(vectors_of(k))):
        diagnose(f"{figure}-loop-counter", (
            f"panel {k} is titled {title!r} but shows {what} {k}: the image uses the loop "
            f"counter instead of the {what} in its title (use {argument}[{k}] = {index})"))
    diagnose(f"{figure}-matrix-wrong", (
        f"panel {k} ({title!r}) does not show {function}(hidden_states, {index}); "
        f"check {function} first"))


def names_index(title: str, word: str, index: int) -> bool:
    """The title names ``word`` ``index`` ("token 3", "Token 3:", "LAYER 3"; not "layer 30")."""
    return re.search(rf"\b{word}\s+{index}(?!\d)", title, flags=re.IGNORECASE) is not None


def panels_of(fig, name: str, n: int, what: str, figure: str) -> list:
    """The heatmap panels of the figure ``name`` returned, which must be one per ``what``."""
    check_figure(fig, name)
    panels = heatmap_axes(fig)
    expect(len(panels) == n, f"{figure}-panel-count-wrong",
           f"expected one heatmap panel (ax.imshow) per {what} ({n}), got {len(panels)}")
    return panels


def has_colour_bar(panels) -> bool:
    return any(heatmap.colorbar for ax in panels for heatmap in drawn_heatmaps(ax))


def test_layer_figure_panels_show_the_token_in_their_title(ex, tiny):
    # The first and the last token (the post draws 4 panels: linspace(0, T - 1, 4)); two panels
    # suffice to see a loop counter in place of the index, and each costs ~40 ms to draw.
    indices = [0, tiny.n_tokens - 1]
    panels = panels_of(draw(ex, "plot_layer_similarity", tiny.hidden, indices, tiny.labels),
                       "plot_layer_similarity", len(indices), "token", "layer-figure")
    fig = panels[0].figure
    for k, (ax, token) in enumerate(zip(panels, indices)):
        title = ax.get_title()
        expect(names_index(title, "token", token) and tiny.labels[token] in title,
               "layer-figure-title-wrong", (
                   f"panel {k} should be titled with its token, like "
                   f"'token {token}: {tiny.labels[token]!r}'; got {title!r}"))
        check_panel_image(ax, k, token, lambda t: tiny.hidden[:, t], "token", "token_indices",
                          "layer_similarity", "layer-figure")
    draw_headless(fig)


def test_layer_figure_colours_axes_and_colour_bar(ex, tiny):
    fig = draw(ex, "plot_layer_similarity", tiny.hidden, [1, 2], tiny.labels)
    panels = heatmap_axes(fig)
    expect(len(panels) == 2, "layer-figure-panel-count-wrong",
           f"expected one heatmap panel (ax.imshow) per token (2), got {len(panels)}")
    for ax in panels:
        heatmap = drawn_heatmaps(ax)[0]
        expect(heatmap.clim == pytest.approx((0.8, 1.0)), "layer-figure-colour-limits",
               f"the default colour limits are 0.8 to 1 (vmin=0.8, vmax=1.0), got "
               f"{heatmap.clim}")
        expect(heatmap.cmap == "plasma", "layer-figure-cmap",
               f"use cmap='plasma', got {heatmap.cmap!r}")
        expect(heatmap.rows_up, "layer-figure-origin",
               "put layer 0 at the bottom: imshow(..., origin='lower')")
        expect("layer" in ax.get_xlabel().lower() and "layer" in ax.get_ylabel().lower(),
               "layer-figure-axis-labels", (
                   "both axes show layers: label them 'layer' "
                   f"(got {ax.get_xlabel()!r} and {ax.get_ylabel()!r})"))
    expect(has_colour_bar(panels), "layer-figure-colour-bar-missing",
           "the figure needs a colour bar: fig.colorbar(image, ax=...)")
    plt.close(fig)
    fig = draw(ex, "plot_layer_similarity", tiny.hidden, [1], tiny.labels, vmin=0.0, vmax=0.9)
    clim = drawn_heatmaps(heatmap_axes(fig)[0])[0].clim
    expect(clim == pytest.approx((0.0, 0.9)), "layer-figure-ignores-vmin-vmax", (
        "plot_layer_similarity(..., vmin=0.0, vmax=0.9) should use those colour limits, "
        f"got {clim}"))


def test_token_figure_panels_show_the_layer_in_their_title(ex, tiny):
    # The embeddings and the last layer (the post draws 4 panels: linspace(0, n_layers, 4)); two
    # panels suffice to see a loop counter in place of the layer, and each costs ~70 ms to draw.
    layers = [0, tiny.n_layers_plus_1 - 1]
    panels = panels_of(draw(ex, "plot_token_similarity", tiny.hidden, layers, tiny.labels),
                       "plot_token_similarity", len(layers), "layer", "token-figure")
    fig = panels[0].figure
    for k, (ax, layer) in enumerate(zip(panels, layers)):
        title = ax.get_title()
        expect(names_index(title, "layer", layer), "token-figure-title-wrong",
               f"panel {k} should be titled 'layer {layer}', got {title!r}")
        check_panel_image(ax, k, layer, lambda i: tiny.hidden[i], "layer", "layers",
                          "token_similarity", "token-figure")
    draw_headless(fig)


def test_token_figure_tick_labels_colours_and_colour_bar(ex, tiny):
    fig = draw(ex, "plot_token_similarity", tiny.hidden, [2], tiny.labels)
    panels = heatmap_axes(fig)
    expect(len(panels) == 1, "token-figure-panel-count-wrong",
           f"expected one heatmap panel (ax.imshow) per layer (1), got {len(panels)}")
    ax = panels[0]
    heatmap = drawn_heatmaps(ax)[0]
    expect(heatmap.clim == pytest.approx((0.5, 1.0)), "token-figure-colour-limits",
           f"the default colour limits are 0.5 to 1 (vmin=0.5, vmax=1.0), got {heatmap.clim}")
    expect(heatmap.cmap == "plasma", "token-figure-cmap",
           f"use cmap='plasma', got {heatmap.cmap!r}")
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
           f"rotate the x tick labels by 90 degrees (rotation=90), got {rotations}")
    expect(has_colour_bar(panels), "token-figure-colour-bar-missing",
           "the figure needs a colour bar: fig.colorbar(image, ax=...)")
    plt.close(fig)
    fig = draw(ex, "plot_token_similarity", tiny.hidden, [2], tiny.labels, vmin=-1.0, vmax=1.0)
    clim = drawn_heatmaps(heatmap_axes(fig)[0])[0].clim
    expect(clim == pytest.approx((-1.0, 1.0)), "token-figure-ignores-vmin-vmax", (
        "plot_token_similarity(..., vmin=-1.0, vmax=1.0) should use those colour limits, "
        f"got {clim}"))


def test_laminar_figure_dots_and_mean_line_equal_the_profile(ex, tiny):
    profile = reference_profile(tiny.hidden)  # (5, 36)
    n_layers_plus_1, n_pairs = profile.shape
    try:
        fig = ex.plot_laminar_profile(profile)
    except ValueError as error:
        if "same first dimension" in str(error):  # matplotlib: ax.plot(x, y) of unequal lengths
            diagnose("laminar-mean-over-layers", (
                f"your plot_laminar_profile failed drawing a line with {error!r}: for a profile "
                f"of shape ({n_layers_plus_1}, {n_pairs}) the mean line needs one mean per layer "
                f"({n_layers_plus_1} values), profile.mean(dim=1), the average over the pairs; "
                f"profile.mean(dim=0) averages over the layers and gives {n_pairs} values, one "
                "per pair"))
        raise
    check_figure(fig, "plot_laminar_profile")
    axes = [ax for ax in fig.axes if drawn_points(ax, marked_only=True)]
    expect(len(axes) == 1, "laminar-figure-axes-wrong",
           f"expected one axes with the dots (ax.scatter or ax.plot(x, y, 'o')), got {len(axes)}")
    ax = axes[0]
    means = profile.mean(dim=1)
    layers = np.arange(n_layers_plus_1)

    def is_mean_line(points):
        return close(points[:, 0], layers) and close(points[:, 1], means)

    series = [points for points in drawn_points(ax, marked_only=True) if not is_mean_line(points)]
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
    expect(any(is_mean_line(points) for points in lines), "laminar-mean-over-layers", (
        f"draw the per-layer mean as a line: x = 0 to {n_layers_plus_1 - 1}, "
        "y = profile.mean(dim=1) (one mean per layer, averaged over the pairs, not over the layers)"
    ))
    expect("layer" in ax.get_xlabel().lower(), "laminar-figure-x-label",
           f"label the x axis with 'layer', got {ax.get_xlabel()!r}")
    expect("similarity" in ax.get_ylabel().lower(), "laminar-figure-y-label",
           f"label the y axis 'cosine similarity', got {ax.get_ylabel()!r}")
    draw_headless(fig)


# --------------------------------------------------------------------------- SmolLM2 (trained)


@pytest.mark.trained
def test_trained_model_shapes_and_values(ex, trained):
    hidden = trained.hidden
    check_similarity(ex.layer_similarity(hidden, 5), hidden[:, 5],
                     "layer_similarity(hidden_states, 5) on SmolLM2")
    check_similarity(ex.token_similarity(hidden, 15), hidden[15],
                     "token_similarity(hidden_states, 15) on SmolLM2")
    check_profile(profile_of(ex, hidden), hidden, True,
                  "laminar_profile(hidden_states) on SmolLM2")


@pytest.mark.trained
def test_trained_token_pairs_are_positively_similar_after_the_embeddings(ex, trained):
    profile = check_tensor(profile_of(ex, trained.hidden), "laminar_profile")
    check_profile(profile, trained.hidden, True, "laminar_profile(hidden_states) on SmolLM2")
    means = profile.mean(dim=1)
    not_positive = [
        (layer, round(mean, 3)) for layer, mean in enumerate(means.tolist())
        if layer > 0 and mean <= 0
    ]
    expect(not not_positive, "profile-not-positive", (
        "with the first token left out, the mean token-pair similarity should be positive at every "
        f"layer after the embeddings (a trained model's vectors share a cone); got {not_positive}"
    ))


@pytest.mark.trained
def test_trained_first_token_is_an_outlier(ex, trained):
    hidden = trained.hidden
    # Across layers: how far each token's layer-by-layer matrix is from the typical token's.
    matrices = torch.stack([check_tensor(ex.layer_similarity(hidden, t), "layer_similarity")
                            for t in range(trained.n_tokens)])
    typical = matrices[1:].median(dim=0).values
    distance = (matrices - typical).abs().mean(dim=(1, 2))
    others = distance[1:].max().item()
    expect(distance[0].item() > 2 * others, "first-token-not-an-outlier", (
        f"the first token's layer_similarity matrix should stand out: it differs from the typical "
        f"token's by {distance[0].item():.3f} on average, the other tokens' by at most {others:.3f}"
    ))
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
    expect(gaps.argmax().item() == 0, "first-token-gap-not-largest", (
        "the first token's similarities to the other tokens should differ from theirs to each "
        "other more than for any other token; mean gaps per token: "
        f"{[round(gap, 3) for gap in gaps.tolist()]}"
    ))


@pytest.mark.trained
def test_trained_neighbouring_layers_are_more_similar_than_distant_ones(ex, trained):
    n_layers_plus_1 = trained.n_layers_plus_1
    layers = torch.arange(n_layers_plus_1)
    distance = (layers[:, None] - layers[None, :]).abs()  # (n_layers + 1, n_layers + 1)
    matrices = torch.stack([check_tensor(ex.layer_similarity(trained.hidden, t), "layer_similarity")
                            for t in range(1, trained.n_tokens)])
    by_distance = {d: matrices[:, distance == d].mean().item() for d in (1, 2, 4, 8, 16)}
    values = list(by_distance.values())
    expect(all(a > b for a, b in zip(values, values[1:])), "layer-similarity-not-decreasing", (
        "the further apart two layers are, the less similar one token's vectors should be "
        "(figure 7); mean similarity by layer distance: "
        f"{ {d: round(v, 3) for d, v in by_distance.items()} }"
    ))


# ----------------------------------------------------------------------------- secret checks
# Every public function again, on inputs drawn from a seed only the grader knows (course/shared/secret.py):
# vectors and hidden states of random sizes, random indices. Their points count only if these pass.


def secret_states(secret) -> tuple[torch.Tensor, list[str]]:
    """Random hidden states ``(n_layers + 1, T, d_model)`` and made-up labels for their tokens."""
    hidden = secret.hidden_states(layers=(2, 6), tokens=(3, 8), width=(4, 20))
    return hidden, [f"w{k}" for k in range(hidden.shape[1])]


@secret_check("cosine_similarity_matrix")
def test_secret_cosine_matrix_of_random_vectors(ex, secret):
    vectors = secret.tensor(secret.integer(2, 9), secret.integer(2, 30))
    check_similarity(similarity_of(ex, vectors), vectors,
                     f"cosine_similarity_matrix of random {tuple(vectors.shape)} vectors"
                     + repeat_hint())


def _check_one_similarity(ex, secret, function: str) -> None:
    hidden, _ = secret_states(secret)
    first_check_cosine_matrix(ex)
    token = secret.integer(0, hidden.shape[1] - 1)
    layer = secret.integer(0, hidden.shape[0] - 1)
    index, axis, vectors = ((token, 1, hidden[:, token]) if function == "layer_similarity"
                            else (layer, 0, hidden[layer]))
    got = check_tensor(getattr(ex, function)(hidden.clone(), index), function)
    check_index_not_shifted(got, hidden, index, axis, function)
    check_similarity(got, vectors, f"{function}(hidden_states of shape "
                     f"{tuple(hidden.shape)}, {index})" + repeat_hint())


@secret_check("layer_similarity")
def test_secret_layer_similarity_of_a_random_token(ex, secret):
    _check_one_similarity(ex, secret, "layer_similarity")


@secret_check("token_similarity")
def test_secret_token_similarity_of_a_random_layer(ex, secret):
    _check_one_similarity(ex, secret, "token_similarity")


@secret_check("laminar_profile")
def test_secret_laminar_profile_of_random_hidden_states(ex, secret):
    hidden, _ = secret_states(secret)
    skip_first = secret.choice([True, False])
    check_profile(profile_of(ex, hidden, skip_first=skip_first), hidden, skip_first,
                  f"laminar_profile(hidden_states of shape {tuple(hidden.shape)}, "
                  f"skip_first={skip_first})" + repeat_hint())


def _check_one_similarity_figure(ex, secret, function: str) -> None:
    hidden, labels = secret_states(secret)
    if function == "plot_layer_similarity":
        chosen, what, figure = secret.some(range(hidden.shape[1])), "token", "layer-figure"

        def vectors_of(t):
            return hidden[:, t]
    else:
        chosen, what, figure = secret.some(range(hidden.shape[0])), "layer", "token-figure"

        def vectors_of(layer):
            return hidden[layer]
    fig = draw(ex, function, hidden.clone(), chosen, labels)
    panels = panels_of(fig, function, len(chosen), what, figure)
    for k, (ax, index) in enumerate(zip(panels, chosen)):
        check_panel_image(ax, k, index, vectors_of, what,
                          "token_indices" if what == "token" else "layers",
                          "layer_similarity" if what == "token" else "token_similarity", figure)


@secret_check("plot_layer_similarity")
def test_secret_layer_figure_shows_the_chosen_tokens(ex, secret):
    _check_one_similarity_figure(ex, secret, "plot_layer_similarity")


@secret_check("plot_token_similarity")
def test_secret_token_figure_shows_the_chosen_layers(ex, secret):
    _check_one_similarity_figure(ex, secret, "plot_token_similarity")


@secret_check("plot_laminar_profile")
def test_secret_laminar_figure_of_a_random_profile(ex, secret):
    profile = secret.tensor(secret.integer(2, 7), secret.integer(2, 12)).tanh()
    fig = ex.plot_laminar_profile(profile)
    check_figure(fig, "plot_laminar_profile")
    points = [p for ax in fig.axes for p in drawn_points(ax, marked_only=True) + line_points(ax)]
    means = profile.mean(dim=1)
    layers = np.arange(profile.shape[0])
    expect(any(len(p) == len(layers) and close(p[:, 0], layers) and close(p[:, 1], means)
               for p in points), "laminar-mean-over-layers",
           f"draw each layer's mean, profile.mean(dim=1), as a line at x = 0..{len(layers) - 1}"
           + repeat_hint())
    dots = np.concatenate([p for ax in fig.axes for p in drawn_points(ax, marked_only=True)
                           if not (len(p) == len(layers) and close(p[:, 1], means))]
                          or [np.zeros((0, 2))])
    for layer in layers:
        ys = np.sort(dots[np.rint(dots[:, 0]) == layer, 1])
        expect(len(ys) == profile.shape[1] and close(ys, profile[layer].sort().values),
               "laminar-figure-dots-wrong",
               f"the dots at layer {layer} should be that layer's {profile.shape[1]} values "
               f"(profile[{layer}])" + repeat_hint())
