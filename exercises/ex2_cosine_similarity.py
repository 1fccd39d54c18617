# Your exercise file: replace each `raise NotImplementedError` with your code.
# Generated from solutions/ex2_cosine_similarity.py by `python -m kata.stubs`.
# (Maintainers: edit the solution and regenerate, not this file.)
"""Exercise 2: cosine similarities within and across layers.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's
Substack series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb`
in the public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

A hidden state is one vector per token per layer. Cosine similarity compares two vectors by
their direction only: +1 for the same direction, 0 for perpendicular, -1 for opposite. In this
exercise you compare

* one token with itself across all layers: how much does each block turn its vector? (figure 7)
* all tokens with each other inside one layer: which tokens point the same way? (figure 8)
* every pair of tokens at every layer, as one cloud of dots per layer (figure 9, the
  "laminar profile")

Post: Python demo 2, "Cosine similarities within and across layers" (figures 7, 8 and 9).

``hidden_states`` is the ``(n_layers + 1, T, d_model)`` tensor of exercise 1: layer 0 is the
embedding layer, layer ``n_layers`` the last block (after the final norm).
"""

import matplotlib.pyplot as plt  # noqa: F401 - for the plots
import numpy as np  # noqa: F401 - for the jitter
import torch

import kata  # noqa: F401

#: Smallest vector length used in a division, so that a zero vector gives 0 instead of NaN.
EPS = 1e-8


def cosine_similarity_matrix(vectors: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every pair of rows of ``vectors``.

    Args:
        vectors: ``(n, d)``, one vector per row.

    Returns:
        ``(n, n)``: entry ``[i, j]`` is the cosine similarity of row ``i`` and row ``j``.
        Symmetric, with ones on the diagonal. A zero vector has no direction: its similarity
        with every vector, itself included, is 0 (as ``torch.nn.functional.cosine_similarity``
        gives), never NaN.

    Raises:
        ValueError: ``vectors`` is not 2-D (for example a single 1-D vector).

    Hint: divide every row by its own length (the norm over the last dimension) so that all
    rows have length 1; then one matrix product gives every pairwise dot product at once.
    Guard the division against a zero length.

    ``keepdim=True`` keeps the reduced dimension, so ``vectors.norm(dim=-1, keepdim=True)`` is
    (n, 1) and divides every row by its own length; without it the (n,) norms would broadcast
    along the wrong dimension.

    Post: Python demo 2, the cosine similarity of one token between layers.
    """
    raise NotImplementedError


def layer_similarity(hidden_states: torch.Tensor, token_index: int) -> torch.Tensor:
    """One token's vector compared with itself across all layers.

    Args:
        hidden_states: ``(n_layers + 1, T, d_model)``.
        token_index: which token, ``-T <= token_index < T`` (negative counts from the end).

    Returns:
        ``(n_layers + 1, n_layers + 1)``: entry ``[a, b]`` is the cosine similarity between the
        token's hidden state at layer ``a`` and at layer ``b``.

    Raises:
        IndexError: ``token_index`` is out of range; the message names the valid range.

    Hint: ``hidden_states[:, token_index, :]`` is that token at every layer, one row per layer;
    hand it to ``cosine_similarity_matrix``.

    On the models: (13, 13) on GPT-2 and (31, 31) on SmolLM2. GPT-2's similarities stay above
    0.8; on SmolLM2 the embedding layer is unlike every block (near 0).

    Post: Python demo 2, figure 7.
    """
    raise NotImplementedError


def token_similarity(hidden_states: torch.Tensor, layer: int) -> torch.Tensor:
    """All tokens compared with each other inside one layer.

    Args:
        hidden_states: ``(n_layers + 1, T, d_model)``.
        layer: which layer, ``-(n_layers + 1) <= layer <= n_layers`` (0 is the embedding
            layer, -1 the last).

    Returns:
        ``(T, T)``: entry ``[i, j]`` is the cosine similarity of token ``i`` and token ``j``
        at that layer.

    Raises:
        IndexError: ``layer`` is out of range; the message names the valid range.

    Hint: ``hidden_states[layer]`` is that layer, one row per token.

    On the models: on GPT-2 every pair is positively similar; on SmolLM2 the tokens are nearly
    unrelated at the embeddings (median about 0.08) and alike in the middle blocks (about 0.6).

    Post: Python demo 2, figure 8.
    """
    raise NotImplementedError


def laminar_profile(hidden_states: torch.Tensor, skip_first: bool = True) -> torch.Tensor:
    """Every token pair's cosine similarity, at every layer.

    Each unordered pair of different tokens counts once: the entries above the diagonal of
    ``token_similarity``, in the order of ``torch.triu_indices(n, n, offset=1)`` (row by row:
    (0, 1), (0, 2), ..., (1, 2), ...). Pairs with equal similarities are all kept.

    Args:
        hidden_states: ``(n_layers + 1, T, d_model)``.
        skip_first: leave out the first token (default), which has no context and behaves as
            an outlier; the pairs are then those of tokens 1 to T - 1.

    Returns:
        ``(n_layers + 1, P)`` with ``P = (T - 1)(T - 2) / 2`` pairs when the first token is left
        out, ``P = T(T - 1) / 2`` when it is kept.

    Hint: ``torch.triu_indices(n, n, offset=1)`` gives the row and column of every entry above
    the diagonal; index each layer's similarity matrix with them. (``torch.unique`` would sort
    the values and merge equal ones: some pairs would be lost.)

    On the models: GPT-2 makes the post's "smile" (lower in the middle layers, higher at the
    end); SmolLM2 does not: its median jumps from about 0.1 to 0.6 in two blocks, reaches about
    0.75 in the last blocks and falls to about 0.5 after the final norm.

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

    Args:
        hidden_states: ``(n_layers + 1, T, d_model)``.
        token_indices: the tokens to show, one panel each, in this order.
        token_labels: the T token strings; ``token_labels[t]`` names token ``t``.
        vmin, vmax: colour limits (0.8 to 1 shows the small differences; try 0 to 1).

    Returns:
        A matplotlib ``Figure``. Panel ``k`` shows ``layer_similarity(hidden_states, t)`` for
        ``t = token_indices[k]`` with ``imshow`` (``cmap="plasma"``, ``origin="lower"``, the
        colour limits above), is titled ``f"token {t}: {token_labels[t]!r}"`` and labels both
        axes "layer". The figure has a colour bar.

    Hint: loop over the token indices themselves (``for ax, t in zip(axes, token_indices)``):
    the matrix and the title must both use ``t``, not the position of the panel.

    Legibility: with SmolLM2's 31 layers, label every 5th tick or stand the names upright.

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

    Args:
        hidden_states: ``(n_layers + 1, T, d_model)``.
        layers: the layers to show, one panel each, in this order.
        token_labels: the T token strings, used as tick labels.
        vmin, vmax: colour limits (try -1 to 1 to see that almost all similarities are positive).

    Returns:
        A matplotlib ``Figure``. Panel ``k`` shows ``token_similarity(hidden_states, layer)``
        for ``layer = layers[k]`` with ``imshow`` (``cmap="plasma"``, the colour limits above)
        and is titled ``f"layer {layer}"`` (layer 0 adds " (embeddings)"). Both axes have one tick per token, labelled with the
        token strings (the x labels rotated 90 degrees). The figure has a colour bar.

    Hint: ``ax.set_xticks(range(T), labels=token_labels, rotation=90)`` puts the token strings
    on the x axis; as in figure 7, take the matrix of the layer the title names.

    Post: Python demo 2, figure 8.
    """
    raise NotImplementedError


def plot_laminar_profile(profile: torch.Tensor):
    """Figure 9: every token pair's similarity as a dot at its layer, and the mean per layer.

    Args:
        profile: ``(n_layers + 1, P)``, as returned by ``laminar_profile``.

    Returns:
        A matplotlib ``Figure`` with one axes: for every layer, its P similarities as dots at
        x = layer plus a small random jitter (less than 0.4 either way) so that the dots do not
        hide each other; and one line through the per-layer means (x = 0, 1, ..., n_layers).
        The x axis is labelled with "layer", the y axis with "cosine similarity".

    Hint: ``ax.scatter(layer + jitter, profile[layer])`` for each layer, then
    ``ax.plot(range(n_layers + 1), profile.mean(dim=1))``: average over the pairs, not over
    the layers.

    Legibility: with SmolLM2's 31 layers, label every 5th tick or stand the names upright.

    Post: Python demo 2, figure 9.
    """
    raise NotImplementedError
