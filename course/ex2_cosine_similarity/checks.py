"""Exercise 2's checks: torch's own cosine similarities, and what a wrong answer looks like.

The reference values come from ``torch.nn.functional.cosine_similarity`` on hidden states computed
here, directly from the model, and from pairs listed with plain Python loops, from the test's own
inputs and before the learner's code sees them: never from the exercise's functions. Each
``check_*`` function reads a result the learner's code returned and, when it is wrong, names the
mistake by the shape of its wrongness (plain dot products, a row norm along the wrong dimension,
an index shifted by one, pairs sorted or merged by ``torch.unique``, a loop counter in a panel...)
through :func:`~course.shared.diagnosis.diagnose`, with a stable id the mistakes catalogue uses.
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
    check_shape,
    check_tensor,
    close,
    computed_once,
    cosine_matrix,
    drawn_heatmaps,
    expect,
    heatmap_axes,
    reference_hidden_states,
)

# ----------------------------------------------------------------------------- hidden states


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
def close_figures():
    """Close every figure a test made (import it into a test module to use it)."""
    yield
    plt.close("all")


def random_vectors(n=6, d=16, seed=0) -> torch.Tensor:
    """``(n, d)`` random vectors of very different lengths: only their directions count."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.linspace(0.1, 30.0, n)[:, None]
    return torch.randn(n, d, generator=generator) * lengths


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


# ----------------------------------------------------------------------------- references


reference_similarity = cosine_matrix


def pairs(n_tokens: int, skip_first: bool) -> list[tuple[int, int]]:
    """Every pair i < j, row by row: (0, 1), (0, 2), ..., (1, 2), ... (from 1 when skipping)."""
    first = 1 if skip_first else 0
    return [(i, j) for i in range(first, n_tokens) for j in range(i + 1, n_tokens)]


def pair_values(hidden: torch.Tensor, listed, similarity=None) -> torch.Tensor:
    """(n_layers + 1, P): ``similarity`` (torch's cosine similarity unless given: a function of
    two (n_layers + 1, P, d) stacks) of each listed pair at every layer."""
    i, j = torch.tensor(listed, dtype=torch.long).reshape(-1, 2).T
    if similarity is None:
        return F.cosine_similarity(hidden[:, i, :], hidden[:, j, :], dim=-1)
    return similarity(hidden[:, i, :], hidden[:, j, :])


def reference_profile(hidden: torch.Tensor, skip_first: bool = True, diagonal: bool = False):
    """(n_layers + 1, P): each listed pair's cosine similarity at every layer."""
    n_tokens = hidden.shape[1]
    listed = pairs(n_tokens, skip_first)
    if diagonal:  # the mistake of including each token with itself
        first = 1 if skip_first else 0
        listed = [(i, j) for i in range(first, n_tokens) for j in range(i, n_tokens)]
    return pair_values(hidden, listed)


# ----------------------------------------------------------------------------- cosine_similarity_matrix


def similarity_hint(got: torch.Tensor, vectors: torch.Tensor) -> tuple[str, str]:
    """The diagnosis id and the hint: what a wrong (n, n) similarity matrix of ``vectors`` (n, d)
    most likely came from."""
    n, d = vectors.shape
    if tuple(got.shape) == (d, d) and d != n:
        return "similarity-wrong-dimension", (
            f"it is ({d}, {d}), one row per coordinate: you compared the coordinates instead of "
            "the vectors (wrong dimension). With one vector per row the result has one row and "
            "one column per vector, (n, n)")
    if close(got, vectors @ vectors.T, atol=1e-3):
        return "similarity-plain-dot-products", (
            "these are plain dot products: cosine similarity divides by both lengths, so every "
            "vector must be brought to length 1 first")
    wrong = vectors / vectors.norm(dim=0, keepdim=True)
    if close(got, wrong @ wrong.T, atol=1e-3):
        return "similarity-normalised-wrong-dimension", (
            "you normalised along the wrong dimension, each coordinate across the vectors: it is "
            "every vector (every row) that must have length 1, each divided by its own length")
    diagonal = torch.diagonal(got)
    if not close(diagonal, torch.ones(n), atol=1e-4):
        return "similarity-diagonal-not-one", (
            f"the diagonal should be all ones (each vector with itself) but ranges from "
            f"{diagonal.min().item():.3g} to {diagonal.max().item():.3g}: every row must be "
            "divided by its own length before the dot products")
    return "similarity-wrong", (
        "compare one entry by hand with torch.nn.functional.cosine_similarity")


def explain_broadcast_error(call, name: str, n: int, d: int):
    """``call()``; a broadcasting error of row lengths without their kept dimension, on (n, d)
    vectors, explained as the learner's mistake (any other error passes through)."""
    try:
        return call()
    except NotImplementedError:
        raise
    except RuntimeError as error:
        if "must match the size" in str(error):
            diagnose("row-norm-without-keepdim", (
                f"{name} on ({n}, {d}) vectors failed with a broadcasting error ({error}): the "
                f"row lengths have shape ({n},), and dividing the ({n}, {d}) vectors by them lines "
                f"them up with the {d} columns, not the {n} rows; keep the reduced dimension so "
                f"that the lengths are ({n}, 1), one per row"))
        raise


def similarity_of(ex, vectors: torch.Tensor, call: str = "cosine_similarity_matrix"):
    """``ex.cosine_similarity_matrix(vectors)``, with a broadcasting error explained."""
    n, d = vectors.shape
    return explain_broadcast_error(lambda: ex.cosine_similarity_matrix(vectors), call, n, d)


def first_check_cosine_matrix(ex) -> None:
    """The public tests of the functions built on cosine_similarity_matrix check it first, so
    that its mistake is named where it is made. (The secret checks never do: each confirms one
    function, whatever the others do.)"""
    vectors = random_vectors(n=6, d=16, seed=5)
    expected = cosine_matrix(vectors)
    got = similarity_of(ex, vectors.clone(), "cosine_similarity_matrix (which this function uses)")
    got = check_tensor(got, "cosine_similarity_matrix")
    if not close(got, expected):
        id, hint = similarity_hint(got.detach().float().cpu(), vectors)
        diagnose(id, "cosine_similarity_matrix, which this function builds on, is wrong; fix it "
                 f"first: {hint}")


def check_similarity(got, vectors: torch.Tensor, name: str,
                     expected: torch.Tensor | None = None) -> None:
    """``got`` must equal the cosine similarity matrix of ``vectors`` (n, d) (``expected``, when
    the test computed it before the call); else say why not."""
    expected = reference_similarity(vectors) if expected is None else expected
    got = check_tensor(got, name).detach().float().cpu()
    if close(got, expected):
        return
    n, d = vectors.shape
    expect(tuple(got.shape) in ((n, n), (d, d)), "similarity-shape-wrong",
           f"{name} has shape {tuple(got.shape)}, expected {(n, n)}: one row and one column per "
           "vector")
    id, hint = similarity_hint(got, vectors)
    diagnose(id, f"{name} differs from torch's cosine similarity: {hint}")


# ----------------------------------------------------------------------------- layer and token similarity


# axis: (what the index counts, the diagnosis id of an index shifted by one, the idea)
SHIFTED_INDEX = {
    0: ("layer", "similarity-layer-off-by-one",
        "Index 0 of the hidden states is already the embedding layer"),
    1: ("token", "similarity-token-off-by-one",
        "Index 0 of the tokens is already the first token"),
}


def vectors_at(hidden: torch.Tensor, index: int, axis: int) -> torch.Tensor:
    """The vectors an index selects: one token at every layer (axis 1), one layer (axis 0)."""
    return hidden[:, index] if axis == 1 else hidden[index]


def check_index_not_shifted(got, hidden: torch.Tensor, index: int, axis: int,
                            function: str) -> None:
    """``function(hidden, index)`` must not be the matrix of a neighbouring index (index + 1 or
    index - 1): your cosine_similarity_matrix is right, the index you hand it is not."""
    got = got.detach().float().cpu()
    size = hidden.shape[axis]
    position = index % size  # a negative index counts from the end
    if close(got, reference_similarity(vectors_at(hidden, position, axis))):
        return
    what, id, idea = SHIFTED_INDEX[axis]
    for shifted in (position + 1, position - 1):
        if not 0 <= shifted < size:
            continue
        if close(got, reference_similarity(vectors_at(hidden, shifted, axis))):
            diagnose(id, (
                f"your {function}(hidden_states, {index}) returned the matrix of {what} "
                f"{shifted}, not of {what} {position}: the similarities themselves are right, "
                f"the {what} index is shifted by {shifted - position:+d}. {idea}, so the index "
                "needs no shift"))


def check_every_index(ex, function: str, hidden: torch.Tensor, axis: int, hint: str,
                      diagnosis: str) -> None:
    """``function(hidden, i)`` for every index i along ``axis`` (1: tokens, 0: layers) must be
    the cosine similarity matrix of the vectors that index selects."""
    first_check_cosine_matrix(ex)
    for index in range(hidden.shape[axis]):
        vectors = vectors_at(hidden, index, axis)
        got = getattr(ex, function)(hidden.clone(), index)
        name = f"{function}(hidden_states, {index})"
        check_shape(check_tensor(got, function), (len(vectors),) * 2,
                    f"{name} for hidden states of shape {tuple(hidden.shape)}", hint,
                    diagnosis=diagnosis)
        check_index_not_shifted(got, hidden, index, axis, function)
        check_similarity(got, vectors, name)


# axis: the diagnosis id of a function that selects along the other axis
OTHER_AXIS = {0: "token-similarity-indexes-a-token", 1: "layer-similarity-indexes-a-layer"}


def past_the_end(error: IndexError, shape: tuple, axis: int, function: str,
                 index: int | None = None) -> tuple[str, str] | None:
    """The diagnosis id and the message of torch's own IndexError for valid indices along
    ``axis`` of hidden states of ``shape`` (``index``, when there was one): an index used along
    the other axis (the wrong dimension), or shifted past the end of its own; None for any other
    error."""
    found = re.search(r"out of bounds for dimension (\d+) with size (\d+)", str(error))
    if found is None:
        return None
    dimension, size = int(found[1]), int(found[2])
    other = 1 - axis
    what, shifted, idea = SHIFTED_INDEX[axis]
    given = f"{what} {index}, which exists" if index is not None else f"{what}s that exist"
    start = f"{function} failed with torch's IndexError ({error}) for {given}"
    if size == shape[other] and (size != shape[axis] or dimension == other):
        others = SHIFTED_INDEX[other][0]
        return OTHER_AXIS[axis], (
            f"{start}: your function used a {what} index as a {others} index, past the end of "
            f"the {shape[other]} {others}s; the index selects along the wrong dimension of the "
            "(n_layers + 1, T, d_model) hidden states")
    where = f" ({what} {index % shape[axis]} of {shape[axis]})" if index is not None else ""
    return shifted, (
        f"{start}{where}: your function reached past the last {what}, as an index shifted by "
        f"one does. {idea}, so the index needs no shift")


def check_not_the_other_axis(got, hidden: torch.Tensor, index: int, axis: int,
                             function: str) -> None:
    """``function(hidden, index)`` must not compare the vectors the index selects along the other
    axis (a layer's tokens for layer_similarity, a token's layers for token_similarity)."""
    got = got.detach().float().cpu()
    other = 1 - axis
    if not -hidden.shape[other] <= index < hidden.shape[other]:
        return
    if close(got, reference_similarity(vectors_at(hidden, index, other))):
        what, other_what = SHIFTED_INDEX[axis][0], SHIFTED_INDEX[other][0]
        diagnose(OTHER_AXIS[axis], (
            f"your {function}(hidden_states, {index}) compared the vectors of {other_what} "
            f"{index}, not those of {what} {index}: the index selects along the wrong dimension "
            f"of the (n_layers + 1, T, d_model) hidden states"))


def similarity_at(ex, function: str, hidden: torch.Tensor, index: int, axis: int):
    """``ex.<function>(hidden, index)`` on a copy of ``hidden``: a broadcasting error explained,
    and an index error for a valid index told as the mistake it shows (torch's own error: an
    index shifted past the end; the function's own: a negative index refused)."""
    what = SHIFTED_INDEX[axis][0]
    vectors = vectors_at(hidden, index, axis)
    size = hidden.shape[axis]
    try:
        return explain_broadcast_error(lambda: getattr(ex, function)(hidden.clone(), index),
                                       function, *vectors.shape)
    except IndexError as error:
        found = past_the_end(error, tuple(hidden.shape), axis,
                             f"{function}(hidden_states, {index})", index)
        if found is not None:  # torch's own: past the end of an axis
            diagnose(*found)
        if index >= 0:
            raise
        diagnose("negative-index-rejected", (
            f"{function}(hidden_states, {index}) raised IndexError ({error}) for a {what} that "
            f"exists: a negative index counts from the end, as in Python, so {index} is "
            f"{what} {index % size} of {size}"))


# ----------------------------------------------------------------------------- laminar_profile


def is_sorted(profile: torch.Tensor) -> bool:
    """True when every layer's values are in increasing order (what torch.unique returns)."""
    return bool((profile[:, 1:] >= profile[:, :-1]).all())


def _plain_dot(a, b):
    return (a * b).sum(dim=-1)


def _normalised_across_tokens(hidden):
    """The wrong-dimension mistake on every layer: each coordinate divided by its length across
    the tokens."""
    return hidden / hidden.norm(dim=1, keepdim=True)


def profile_hint(got: torch.Tensor, hidden: torch.Tensor, skip_first: bool) -> tuple[str, str]:
    """The diagnosis id and the hint: what a wrong laminar profile most likely came from."""
    n_tokens = hidden.shape[1]
    kept = n_tokens - 1 if skip_first else n_tokens
    expected_pairs = kept * (kept - 1) // 2
    with_first = reference_profile(hidden, skip_first=False)
    without_first = reference_profile(hidden, skip_first=True)
    if skip_first and close(got, with_first):
        return "profile-first-token-kept", (
            f"it has the {with_first.shape[1]} pairs of all {n_tokens} tokens: the first token "
            f"must be left out when skip_first is true (P = (T-1)(T-2)/2 = {expected_pairs})")
    if not skip_first and close(got, without_first):
        return "profile-first-token-dropped", (
            "with skip_first=False the first token must be kept: P = T(T-1)/2 = "
            f"{expected_pairs}, but these are only the pairs without token 0")
    if close(got, reference_profile(hidden, skip_first, diagonal=True)):
        return "profile-includes-diagonal", (
            "it includes the diagonal, each token paired with itself (similarity 1): take only "
            "the pairs of two different tokens, the strict upper triangle")
    expected = reference_profile(hidden, skip_first)
    listed = pairs(n_tokens, skip_first)
    if close(got, pair_values(hidden, listed, _plain_dot), atol=1e-3):
        return "similarity-plain-dot-products", (
            "these are the pairs' plain dot products: cosine similarity divides by both "
            "lengths (check cosine_similarity_matrix, which laminar_profile builds on)")
    start = 1 if skip_first else 0
    wrong = _normalised_across_tokens(hidden[:, start:])
    if close(got, pair_values(wrong, pairs(kept, False), _plain_dot), atol=1e-3):
        return "similarity-normalised-wrong-dimension", (
            "the vectors were normalised along the wrong dimension, each coordinate across the "
            "tokens: every vector must have length 1 (check cosine_similarity_matrix, which "
            "laminar_profile builds on)")
    if got.ndim == 2 and got.shape[0] == hidden.shape[0]:
        lowest_dropped = [row.unique()[1:] for row in expected]
        zero_kept = [torch.cat([row, torch.zeros(1)]).unique()[1:] for row in expected]
        if (all(close(g, u) for g, u in zip(got, lowest_dropped))
                or (all(close(g, u) for g, u in zip(got, zero_kept))
                    and bool((expected.min(dim=1).values < 0).all()))):
            return "unique-drops-lowest-pair", (
                "each layer's values are sorted and its lowest similarity is missing: "
                "torch.unique sorts the values, so dropping its first value drops the most "
                "negative pair, not the diagonal; pick the pairs by their row and column")
        if got.shape[1] < expected_pairs:
            return "unique-merges-pairs", (
                f"it has only {got.shape[1]} value(s) per layer instead of {expected_pairs} pairs: "
                "were duplicate pairs lost to torch.unique, which merges equal similarities? "
                "Pick the pairs by their row and column, which keeps every pair")
        if got.shape[1] > 1 and is_sorted(got) and not is_sorted(expected):
            return "unique-sorts-pairs", (
                "every layer's values are sorted: torch.unique sorts (and merges equal values, "
                "losing duplicate pairs); keep the pairs in the order of their row and column")
        same_values = close(got.sort(dim=1).values, expected.sort(dim=1).values)
        if got.shape == expected.shape and same_values:
            return "profile-pairs-wrong-order", (
                "the right values in the wrong order: list the pairs row by row, (0, 1), (0, 2), "
                "..., (1, 2), ..., the order of torch.triu_indices")
    return "profile-wrong", (
        f"expected {expected_pairs} pairs per layer, row by row above the diagonal"
        + (", the first token left out" if skip_first else ", the first token included")
        + "; check token_similarity first")


def check_profile(got, hidden: torch.Tensor, skip_first: bool, name: str,
                  expected: torch.Tensor | None = None) -> None:
    """``got`` must be the laminar profile of ``hidden`` (``expected``, when the test computed
    it before the call); else say why not."""
    expected = reference_profile(hidden, skip_first) if expected is None else expected
    got = check_tensor(got, name).detach().float().cpu()
    if close(got, expected):
        return
    id, hint = profile_hint(got, hidden, skip_first)
    if got.shape == expected.shape:
        diagnose(id, f"{name} has the right shape {tuple(got.shape)} but wrong values: {hint}")
    diagnose(id, f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}: {hint}")


def learner_profile(ex, hidden: torch.Tensor, **kwargs):
    """``ex.laminar_profile(hidden, **kwargs)`` on a copy of ``hidden``; a broadcasting error and
    a failed torch.stack of unequal rows explained."""
    kept = hidden.shape[1] - (1 if kwargs.get("skip_first", True) else 0)
    try:
        return explain_broadcast_error(lambda: ex.laminar_profile(hidden.clone(), **kwargs),
                                       "laminar_profile", kept, hidden.shape[2])
    except NotImplementedError:
        raise
    except RuntimeError as error:
        if "stack expects each tensor to be equal size" in str(error):
            diagnose("unique-merges-pairs", (
                f"laminar_profile could not stack its layers ({error}): the layers have "
                "different numbers of values, which happens when torch.unique merges equal "
                "similarities (ties); pick the pairs by their row and column, which keeps every "
                "pair"))
        raise
    except IndexError as error:
        if "out of bounds for dimension" not in str(error):  # not torch's own
            raise
        # Past the end of the layers (a layer index shifted by one) or of a layer's matrix (one
        # over the layers, indexed with token pairs): the same error, so only the symptom.
        diagnose("profile-wrong", (
            f"laminar_profile failed with torch's IndexError ({error}) on hidden states of shape "
            f"{tuple(hidden.shape)}: it reached past the end of the layers, or of a layer's "
            "similarity matrix, which has one row and one column per token (a layer index "
            "shifted by one? a matrix over the layers instead of the tokens?); check "
            "token_similarity, which laminar_profile builds on, first"))


def profile_of(ex, hidden: torch.Tensor, **kwargs):
    """The public tests' ``ex.laminar_profile(hidden, **kwargs)``, once cosine_similarity_matrix,
    which it builds on, is right."""
    first_check_cosine_matrix(ex)
    return learner_profile(ex, hidden, **kwargs)


# ----------------------------------------------------------------------------- figures


def draw(ex, function: str, hidden, chosen: list, *args, **kwargs):
    """``ex.<function>(hidden, chosen, ...)``; the error of a one-panel figure explained.

    ``plt.subplots(1, n)`` returns an array of axes for n > 1 but a single ``Axes`` for n = 1,
    so ``axes[k]`` (or ``for ax in axes``) fails only when one panel is asked for.
    """
    axis = 1 if function == "plot_layer_similarity" else 0  # what the chosen indices count
    try:
        return explain_broadcast_error(
            lambda: getattr(ex, function)(hidden, chosen, *args, **kwargs),
            function, hidden.shape[1 - axis], hidden.shape[2])
    except IndexError as error:
        shown = "layer_similarity" if axis == 1 else "token_similarity"
        found = past_the_end(error, tuple(hidden.shape), axis, function)
        if found is None:  # not torch's own
            raise
        diagnose(found[0], f"{found[1]} (check {shown}, which {function} builds on, first)")
    except TypeError as error:
        if len(chosen) == 1 and "'Axes' object" in str(error):
            diagnose("one-panel-single-axes", (
                f"your {function} failed for a single panel ({chosen}) with {error!r}: "
                "plt.subplots(1, 1) returns one Axes, not an array of them, so it cannot be "
                "indexed or looped over; ask plt.subplots for a 2-D array of axes every time "
                "(its squeeze option), whatever the number of panels"))
        raise


def check_figure(fig, name: str) -> None:
    expect(isinstance(fig, Figure), "similarity-figure-not-returned",
           f"{name} should return a matplotlib Figure, got {type(fig).__name__}")


# axis of the indices a figure's panels show: (the figure's diagnosis prefix, its argument,
# the function each panel shows)
FIGURES = {1: ("layer-figure", "token_indices", "layer_similarity"),
           0: ("token-figure", "layers", "token_similarity")}


def check_panel_image(ax, k: int, index: int, hidden: torch.Tensor, axis: int,
                      expected: torch.Tensor | None = None) -> None:
    """Panel ``k`` must show the similarity matrix of the vectors ``index`` selects along ``axis``
    of ``hidden`` (``expected``, when the test computed it before the call). Else it names what
    the panel shows: the loop counter's vectors in place of the index its title names, a
    neighbouring index, the other axis, or not cosine similarities."""
    figure, argument, function = FIGURES[axis]
    what = SHIFTED_INDEX[axis][0]
    vectors = vectors_at(hidden, index, axis)
    expected = reference_similarity(vectors) if expected is None else expected
    shown, title = drawn_heatmaps(ax)[0].values, ax.get_title()
    if close(shown, expected):
        return

    def shows(at: int, along: int) -> bool:
        return 0 <= at < hidden.shape[along] and close(
            shown, reference_similarity(vectors_at(hidden, at, along)))

    if k != index and shows(k, axis):
        diagnose(f"{figure}-loop-counter", (
            f"panel {k} is titled {title!r} but shows {what} {k}: the image uses the loop "
            f"counter (the panel's position) instead of the {what} in its title, "
            f"{argument}[{k}] = {index}; the matrix and the title must name the same {what}"))
    for shifted in (index + 1, index - 1):
        if shows(shifted, axis):
            diagnose(SHIFTED_INDEX[axis][1], (
                f"panel {k} ({title!r}) shows {what} {shifted}, not {what} {index}: the "
                f"{what} index is shifted by {shifted - index:+d}. {SHIFTED_INDEX[axis][2]}, so "
                f"the index needs no shift (check {function} first)"))
    if shows(index, 1 - axis):
        diagnose(OTHER_AXIS[axis], (
            f"panel {k} ({title!r}) compares the vectors of {SHIFTED_INDEX[1 - axis][0]} "
            f"{index}, not those of {what} {index}: the index selects along the wrong dimension "
            f"of the hidden states (check {function} first)"))
    if shown.shape == (len(vectors), len(vectors)):
        id, hint = similarity_hint(torch.as_tensor(shown, dtype=torch.float32), vectors)
        if id in ("similarity-plain-dot-products", "similarity-normalised-wrong-dimension"):
            diagnose(id, f"panel {k} ({title!r}) does not show cosine similarities: {hint} "
                     f"(check {function} and cosine_similarity_matrix first)")
    diagnose(f"{figure}-matrix-wrong", (
        f"panel {k} ({title!r}) does not show {function}(hidden_states, {index}); "
        f"check {function} first"))


def check_colour_limits(panels, clim: tuple, figure: str, call: str) -> None:
    """Every panel's heatmap uses the colour limits ``clim`` it was asked for."""
    for ax in panels:
        got = drawn_heatmaps(ax)[0].clim
        expect(got == pytest.approx(clim), f"{figure}-ignores-vmin-vmax", (
            f"{call} should use the colour limits it is given, vmin={clim[0]} and "
            f"vmax={clim[1]}, got {got}"))


def names_index(title: str, word: str, index: int) -> bool:
    """The title names ``word`` ``index`` ("token 3", "Token 3:", "LAYER 3"; not "layer 30")."""
    return re.search(rf"\b{word}\s+{index}(?!\d)", title, flags=re.IGNORECASE) is not None


def panels_of(fig, name: str, n: int, what: str, figure: str) -> list:
    """The heatmap panels of the figure ``name`` returned, which must be one per ``what``."""
    check_figure(fig, name)
    panels = heatmap_axes(fig)
    expect(len(panels) == n, f"{figure}-panel-count-wrong",
           f"expected one heatmap panel per {what} ({n}), got {len(panels)}")
    return panels


def has_colour_bar(panels) -> bool:
    return any(heatmap.colorbar for ax in panels for heatmap in drawn_heatmaps(ax))


def laminar_figure_of(ex, profile: torch.Tensor):
    """``ex.plot_laminar_profile`` of a copy of ``profile``; matplotlib's refusal of a mean line
    whose length is not the number of layers explained."""
    n_layers_plus_1, n_pairs = profile.shape
    try:
        return ex.plot_laminar_profile(profile.clone())
    except ValueError as error:
        if "same first dimension" in str(error):  # matplotlib: ax.plot(x, y) of unequal lengths
            diagnose("laminar-mean-over-layers", (
                f"your plot_laminar_profile failed drawing a line with {error!r}: for a profile "
                f"of shape ({n_layers_plus_1}, {n_pairs}) the mean line needs one mean per layer "
                f"({n_layers_plus_1} values), the average over the pairs; a mean over the layers "
                f"gives {n_pairs} values, one per pair"))
        raise


def is_mean_line(points: np.ndarray, means) -> bool:
    """``points`` ((n, 2): x, y) are the per-layer ``means`` at x = 0, 1, ..., n_layers."""
    layers = np.arange(len(means))
    return len(points) == len(layers) and close(points[:, 0], layers) and close(points[:, 1], means)


def mean_line_message(n_layers_plus_1: int) -> str:
    return (f"draw the per-layer mean as a line at x = 0 to {n_layers_plus_1 - 1}: one mean per "
            "layer, averaged over that layer's pairs, not over the layers")
