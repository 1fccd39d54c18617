# Your exercise file: replace each `raise NotImplementedError` with your code.
# Generated from course/ex2_cosine_similarity/solution.py by `python grader.py generate`.
# (Maintainers: edit the solution and regenerate, not this file.)
"""Exercise 2: cosine similarities within and across layers.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's Substack
series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb` in the
public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

A hidden state is one vector per token per layer. Cosine similarity compares two vectors by their
direction only: +1 for the same direction, 0 for perpendicular, -1 for opposite. In this exercise
you compare

* one token with itself across all layers: how much does each block turn its vector? (figure 7)
* all tokens with each other inside one layer: which tokens point the same way? (figure 8)
* every pair of tokens at every layer, as one cloud of dots per layer (figure 9, the
  "laminar profile")

Post: Python demo 2, "Cosine similarities within and across layers" (figures 7, 8 and 9).

``hidden_states`` is the ``(n_layers + 1, T, d_model)`` tensor of exercise 1: layer 0 is the
embedding layer, layer ``n_layers`` the last block (after the final norm). Every docstring says
what the function does, then what it returns and raises, a first hint (``python grader.py hint 2``
gives more), what to expect on the models, and where the post shows it.
"""

import matplotlib.pyplot as plt  # noqa: F401 - for the plots
import numpy as np  # noqa: F401 - for the jitter
import torch

import kata  # noqa: F401

#: Smallest vector length used in a division, so that a zero vector gives 0 instead of NaN.
EPS = 1e-8


def cosine_similarity_matrix(vectors: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every pair of rows of ``vectors``.

    ``vectors`` is ``(n, d)``, one vector per row. The cosine similarity of two vectors compares
    their directions only, whatever their lengths: it is their dot product once both are brought
    to length 1. With every row of length 1, all the pairwise dot products come at once, from one
    matrix product.

    Returns ``(n, n)``: entry (i, j) is the cosine similarity of row ``i`` and row ``j``.
    Symmetric, with ones on the diagonal. A zero vector has no direction: its similarity with every
    vector, itself included, is 0 (as ``torch.nn.functional.cosine_similarity`` gives), never NaN.
    Raises ``ValueError`` when ``vectors`` is not 2-D (for example a single 1-D vector).

    Hint: Cosine similarity is the dot product of two vectors divided by the product of their
    lengths.

    Post: Python demo 2, the cosine similarity of one token between layers.
    """
    raise NotImplementedError


def layer_similarity(hidden_states: torch.Tensor, token_index: int) -> torch.Tensor:
    """One token's vector compared with itself across all layers.

    ``hidden_states`` is ``(n_layers + 1, T, d_model)``; ``token_index`` picks the token, from -T to
    T - 1 (a negative index counts from the end, as in Python). The token's vector at every layer,
    compared with ``cosine_similarity_matrix``, shows how far each block turns it.

    Returns ``(n_layers + 1, n_layers + 1)``: entry (a, b) is the cosine similarity between the
    token's hidden state at layer a and at layer b. Raises ``IndexError`` naming the valid range
    when ``token_index`` is not a token (``kata.token_index`` checks it and returns the position).

    Hint: One token at every layer: one row per layer.

    On the models: (13, 13) on GPT-2 and (31, 31) on SmolLM2. GPT-2's similarities stay above 0.8;
    on SmolLM2 the embedding layer is unlike every block (near 0).

    Post: Python demo 2, figure 7.
    """
    raise NotImplementedError


def token_similarity(hidden_states: torch.Tensor, layer: int) -> torch.Tensor:
    """All tokens compared with each other inside one layer.

    ``hidden_states`` is ``(n_layers + 1, T, d_model)``; ``layer`` picks the layer, from
    -(n_layers + 1) to n_layers: 0 is the embedding layer, 1 the output of block 0, -1 the last.
    The layer's vectors, one per token, compared with ``cosine_similarity_matrix``, show which
    tokens point the same way.

    Returns ``(T, T)``: entry (i, j) is the cosine similarity of token i and token j at that
    layer. Raises ``IndexError`` naming the valid range when ``layer`` is not a layer
    (``kata.layer_index`` checks it and returns the index).

    Hint: One layer, every token: one row per token.

    On the models: on GPT-2 every pair is positively similar; on SmolLM2 the tokens are nearly
    unrelated at the embeddings (median about 0.08) and alike in the middle blocks (about 0.6).

    Post: Python demo 2, figure 8.
    """
    raise NotImplementedError


def laminar_profile(hidden_states: torch.Tensor, skip_first: bool = True) -> torch.Tensor:
    """Every token pair's cosine similarity, at every layer.

    ``hidden_states`` is ``(n_layers + 1, T, d_model)``. Each unordered pair of different tokens
    counts once: the entries above the diagonal of ``token_similarity``, row by row: (0, 1), (0,
    2), ..., (1, 2), ... (the order of ``torch.triu_indices``). Every pair is kept, even two pairs
    whose similarities happen to be exactly equal: a pair is picked by its two tokens, never by
    its value. With ``skip_first`` (the default) the first token is left out, since it has no
    context and behaves as an outlier: the pairs are then those of tokens 1 to T - 1.

    Returns ``(n_layers + 1, P)`` with P = (T - 1)(T - 2) / 2 pairs when the first token is left
    out, P = T(T - 1) / 2 when it is kept.

    Hint: Every pair of distinct tokens once per layer: the entries above the diagonal of each
    layer's token similarity matrix.

    On the models: GPT-2 makes the post's "smile" (lower in the middle layers, higher at the end);
    SmolLM2 does not: its median jumps from about 0.1 to 0.6 in two blocks, reaches about 0.75 in
    the last blocks and falls to about 0.5 after the final norm.

    Post: Python demo 2, figure 9 (the "smile").
    """
    raise NotImplementedError


def plot_layer_similarity(
    hidden_states: torch.Tensor,
    token_indices: list[int],
    token_labels: list[str],
    vmin: float = 0.8,
    vmax: float = 1.0,
):
    """Figure 7: one panel per token, showing its ``layer_similarity`` matrix.

    ``hidden_states`` is ``(n_layers + 1, T, d_model)``; ``token_indices`` are the tokens to show,
    one panel each, in this order; ``token_labels`` are the T token strings (``token_labels[t]``
    names token t); ``vmin`` and ``vmax`` are the colour limits (0.8 to 1 shows the small
    differences; try 0 to 1). The panel of token t shows that token's ``layer_similarity`` matrix
    as a heatmap: the "plasma" colour map, the colour limits above, layer 0 at the bottom. It is
    titled with the token's index and its text in quotes, as in "token 3: ' cute'", and both axes
    are labelled "layer". The figure has a colour bar. A panel's matrix and its title name the
    same token (the token, not the panel's position), and one panel works as well as several.

    Returns a matplotlib ``Figure``.

    Hint: One panel per token index, each showing layer_similarity for that token.

    On the models: with SmolLM2's 31 layers, label every 5th tick or stand the names upright.

    Post: Python demo 2, figure 7.
    """
    raise NotImplementedError


def plot_token_similarity(
    hidden_states: torch.Tensor,
    layers: list[int],
    token_labels: list[str],
    vmin: float = 0.5,
    vmax: float = 1.0,
):
    """Figure 8: one panel per layer, showing its ``token_similarity`` matrix.

    ``hidden_states`` is ``(n_layers + 1, T, d_model)``; ``layers`` are the layers to show, one
    panel each, in this order; ``token_labels`` are the T token strings, used as tick labels;
    ``vmin`` and ``vmax`` are the colour limits (try -1 to 1 to see that almost all similarities
    are positive). The panel of a layer shows that layer's ``token_similarity`` matrix as a
    heatmap (the "plasma" colour map, the colour limits above) and is titled "layer 4" for layer 4
    (layer 0 may add " (embeddings)"). Both axes have one tick per token, labelled with the token
    strings, the x labels standing upright (rotated 90 degrees). The figure has a colour bar. As in
    figure 7, a panel's matrix and title name the same layer, and one panel works too.

    Returns a matplotlib ``Figure``.

    Hint: One panel per layer, each showing token_similarity for that layer.

    Post: Python demo 2, figure 8.
    """
    raise NotImplementedError


def plot_laminar_profile(profile: torch.Tensor):
    """Figure 9: every token pair's similarity as a dot at its layer, and the mean per layer.

    ``profile`` is ``(n_layers + 1, P)``, as ``laminar_profile`` returns it. For every layer, its P
    similarities are dots at x = layer plus a small random jitter (less than 0.4 either way), so
    that the dots do not hide each other; then one line goes through the per-layer means at x = 0,
    1, ..., n_layers. Each layer's mean is the average over its pairs: one value per layer, not
    one per pair. The x axis is labelled "layer", the y axis "cosine similarity".

    Returns a matplotlib ``Figure`` with one axes.

    Hint: One column of dots per layer (the pairs' similarities), and a line through the mean of
    each layer.

    On the models: with SmolLM2's 31 layers, label every 5th tick or stand the names upright.

    Post: Python demo 2, figure 9.
    """
    raise NotImplementedError
