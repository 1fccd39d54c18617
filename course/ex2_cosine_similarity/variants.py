"""Correct variants of exercise 2 (cosine similarities), in the styles learners write them.

Each ``code`` is executed on top of ``course/ex2_cosine_similarity/solution.py`` (``torch``, ``np``,
``plt``, ``kata`` and the exercise's functions are in scope). Every test of
``course/ex2_cosine_similarity/test_public.py`` must pass with each of them.
"""

from course.shared.catalogue import Variant

# torch.nn.functional.cosine_similarity by broadcasting row against row; the pairs of the
# laminar profile picked with a boolean triu mask; the plots with fig.add_subplot.
_F_COSINE_BROADCAST = '''
import torch.nn.functional as F


def cosine_similarity_matrix(vectors):
    if vectors.dim() != 2:
        raise ValueError(f"expected (n, d) vectors, got shape {list(vectors.shape)}")
    return F.cosine_similarity(vectors.unsqueeze(1), vectors.unsqueeze(0), dim=-1)


def laminar_profile(hidden_states, skip_first=True):
    start = 1 if skip_first else 0
    h = hidden_states[:, start:]
    n = h.shape[1]
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return torch.stack([cosine_similarity_matrix(layer)[mask] for layer in h])


def plot_layer_similarity(hidden_states, token_indices, token_labels, vmin=0.8, vmax=1.0):
    fig = plt.figure(figsize=(16, 4))
    axes = []
    for k, t in enumerate(token_indices):
        ax = fig.add_subplot(1, len(token_indices), k + 1)
        im = ax.imshow(layer_similarity(hidden_states, t), cmap="plasma", vmin=vmin, vmax=vmax,
                       origin="lower")
        ax.set_title(f"token {t}: {token_labels[t]!r}")
        ax.set_xlabel("layer")
        ax.set_ylabel("layer")
        axes.append(ax)
    fig.colorbar(im, ax=axes)
    return fig
'''

# Plain Python loops over the pairs: one F.cosine_similarity per pair, the profile listed pair
# by pair and stacked along dimension 1.
_PYTHON_LOOPS = '''
import torch.nn.functional as F


def cosine_similarity_matrix(vectors):
    if len(vectors.shape) != 2:
        raise ValueError("vectors must be a 2-D (n, d) tensor, one vector per row")
    n = vectors.shape[0]
    result = torch.zeros(n, n)
    for i in range(n):
        for j in range(n):
            result[i, j] = F.cosine_similarity(vectors[i], vectors[j], dim=0)
    return result


def layer_similarity(hidden_states, token_index):
    n_tokens = hidden_states.shape[1]
    if not -n_tokens <= token_index < n_tokens:
        raise IndexError(f"token_index must be between -{n_tokens} and {n_tokens - 1}")
    return cosine_similarity_matrix(hidden_states[:, token_index])


def laminar_profile(hidden_states, skip_first=True):
    first = 1 if skip_first else 0
    n_tokens = hidden_states.shape[1]
    columns = []
    for i in range(first, n_tokens):
        for j in range(i + 1, n_tokens):
            columns.append(F.cosine_similarity(hidden_states[:, i], hidden_states[:, j], dim=-1))
    return torch.stack(columns, dim=1)
'''

# numpy round-trips: the norms and the product in numpy, np.triu_indices for the pairs, the
# layers joined with torch.cat of (1, P) rows.
_NUMPY_ROUND_TRIP = '''
def cosine_similarity_matrix(vectors):
    if vectors.ndim != 2:
        raise ValueError(f"need a matrix (n, d), got {vectors.ndim} dimensions")
    v = vectors.detach().cpu().numpy()
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    unit = v / np.maximum(norms, 1e-8)
    return torch.from_numpy(unit @ unit.T)


def token_similarity(hidden_states, layer):
    n = hidden_states.shape[0]
    if layer < -n or layer >= n:
        raise IndexError(f"layer {layer} is out of range -{n}..{n - 1}")
    return cosine_similarity_matrix(hidden_states[layer])


def laminar_profile(hidden_states, skip_first=True):
    if skip_first:
        hidden_states = hidden_states[:, 1:]
    n = hidden_states.shape[1]
    rows, cols = np.triu_indices(n, k=1)
    layers = [token_similarity(hidden_states, l)[rows, cols].reshape(1, -1)
              for l in range(hidden_states.shape[0])]
    return torch.cat(layers, dim=0)
'''

# The notebook's pyplot for figures 8 and 9: plt.subplots without squeeze, set_xticklabels,
# plt.colorbar; the dots drawn with ax.plot(x, y, "o"), one call per layer, and a mean line
# with markers.
_NOTEBOOK_PLOTS = '''
def plot_token_similarity(hidden_states, layers, token_labels, vmin=0.5, vmax=1.0):
    fig, axs = plt.subplots(1, len(layers), figsize=(5 * len(layers), 5))
    axs = np.atleast_1d(axs)
    T = len(token_labels)
    for i in range(len(layers)):
        layer = layers[i]
        sims = token_similarity(hidden_states, layer)
        img = axs[i].imshow(sims.numpy(), vmin=vmin, vmax=vmax, cmap="plasma")
        axs[i].set_xticks(np.arange(T))
        axs[i].set_xticklabels(token_labels, rotation=90)
        axs[i].set_yticks(np.arange(T))
        axs[i].set_yticklabels(token_labels)
        axs[i].set_title("layer %d" % layer)
    plt.colorbar(img, ax=axs)
    return fig


def plot_laminar_profile(profile):
    fig = plt.figure(figsize=(10, 4))
    ax = fig.add_subplot(111)
    n_layers = profile.shape[0]
    for layer in range(n_layers):
        y = profile[layer].numpy()
        x = layer + np.random.uniform(-0.3, 0.3, len(y))
        ax.plot(x, y, "o", markersize=3, alpha=0.5)
    ax.plot(np.arange(n_layers), profile.mean(axis=1).numpy(), "ko-", linewidth=2)
    ax.set_xlabel("Layer")
    ax.set_ylabel("Cosine similarity")
    return fig
'''

# Transpose-then-index, torch.stack of per-pair columns, and one scatter call for the whole
# cloud with a plt.plot mean line on the current figure.
_TRANSPOSE_AND_ONE_SCATTER = '''
def layer_similarity(hidden_states, token_index):
    token_index = kata.token_index(token_index, hidden_states.shape[1])
    per_token = hidden_states.transpose(0, 1)  # (T, n_layers + 1, d_model)
    return cosine_similarity_matrix(per_token[token_index])


def token_similarity(hidden_states, layer):
    layer = kata.layer_index(layer, hidden_states.shape[0])
    return cosine_similarity_matrix(hidden_states[layer, :, :])


def laminar_profile(hidden_states, skip_first=True):
    tokens = list(range(1 if skip_first else 0, hidden_states.shape[1]))
    sims = torch.stack([token_similarity(hidden_states, l) for l in range(len(hidden_states))])
    pairs = [(a, b) for k, a in enumerate(tokens) for b in tokens[k + 1:]]
    return torch.stack([sims[:, a, b] for a, b in pairs], dim=-1)


def plot_laminar_profile(profile):
    plt.figure(figsize=(10, 4))
    n_layers, n_pairs = profile.shape
    x = torch.arange(n_layers).repeat_interleave(n_pairs) + 0.6 * (torch.rand(n_layers * n_pairs) - 0.5)
    plt.scatter(x, profile.flatten(), s=6, c=x.round(), cmap="plasma")
    plt.plot(range(n_layers), profile.mean(1), color="k")
    plt.xlabel("layer")
    plt.ylabel("cosine similarity")
    return plt.gcf()
'''

# F.normalize and one batched matrix product for all layers, the pairs read from the (L, T, T)
# stack with [:, rows, cols]; capitalised panel titles ("Token 3: ...", "Layer 0 (embeddings)"),
# plt.colorbar() on the current image.
_NORMALIZE_BATCHED = '''
import torch.nn.functional as F


def cosine_similarity_matrix(vectors):
    if vectors.ndim != 2:
        raise ValueError("cosine_similarity_matrix needs 2-D input (n, d)")
    unit = F.normalize(vectors, dim=1)
    return unit @ unit.T


def laminar_profile(hidden_states, skip_first=True):
    h = hidden_states[:, 1:] if skip_first else hidden_states
    unit = F.normalize(h, dim=-1)
    sims = unit @ unit.transpose(1, 2)  # (n_layers + 1, T, T)
    rows, cols = torch.triu_indices(h.shape[1], h.shape[1], 1)
    return sims[:, rows, cols]


def plot_layer_similarity(hidden_states, token_indices, token_labels, vmin=0.8, vmax=1.0):
    fig, axes = plt.subplots(1, len(token_indices), figsize=(4 * len(token_indices), 4),
                             squeeze=False)
    for ax, t in zip(axes.flat, token_indices):
        plt.sca(ax)
        plt.imshow(layer_similarity(hidden_states, t), cmap="plasma", vmin=vmin, vmax=vmax,
                   origin="lower")
        plt.title(f"Token {t}: {token_labels[t]!r}")
        plt.xlabel("Layer")
        plt.ylabel("Layer")
    plt.colorbar()
    return fig


def plot_token_similarity(hidden_states, layers, token_labels, vmin=0.5, vmax=1.0):
    fig, axes = plt.subplots(1, len(layers), figsize=(5 * len(layers), 5), squeeze=False)
    for ax, layer in zip(axes[0], layers):
        image = ax.imshow(token_similarity(hidden_states, layer), cmap="plasma", vmin=vmin, vmax=vmax)
        ax.set_title(f"Layer {layer}" + (" (embeddings)" if layer == 0 else ""))
        ax.set_xticks(range(len(token_labels)), token_labels, rotation=90)
        ax.set_yticks(range(len(token_labels)), token_labels)
    fig.colorbar(image, ax=list(axes[0]))
    return fig
'''

# itertools.combinations for the pairs, einsum with a torch.where guard for zero lengths,
# figure 7 drawn with matshow and one colour bar per panel.
_COMBINATIONS_EINSUM = '''
from itertools import combinations


def cosine_similarity_matrix(vectors):
    if vectors.dim() != 2:
        raise ValueError(f"vectors has shape {tuple(vectors.shape)}; expected (n, d)")
    lengths = torch.linalg.vector_norm(vectors, dim=1)
    lengths = torch.where(lengths == 0, torch.ones_like(lengths), lengths)
    unit = vectors / lengths[:, None]
    return torch.einsum("id,jd->ij", unit, unit)


def laminar_profile(hidden_states, skip_first=True):
    first = 1 if skip_first else 0
    pairs = list(combinations(range(first, hidden_states.shape[1]), 2))
    profile = torch.empty(hidden_states.shape[0], len(pairs))
    for layer in range(hidden_states.shape[0]):
        sims = token_similarity(hidden_states, layer)
        for p, (i, j) in enumerate(pairs):
            profile[layer, p] = sims[i, j]
    return profile


def plot_layer_similarity(hidden_states, token_indices, token_labels, vmin=0.8, vmax=1.0):
    fig, axes = plt.subplots(1, len(token_indices), figsize=(4 * len(token_indices), 4),
                             squeeze=False)
    for ax, t in zip(axes[0], token_indices):
        image = ax.matshow(layer_similarity(hidden_states, t).numpy(), cmap="plasma",
                           vmin=vmin, vmax=vmax, origin="lower")
        ax.set_title(f"token {t}: {token_labels[t]!r}")
        ax.set_xlabel("layer")
        ax.set_ylabel("layer")
        fig.colorbar(image, ax=ax, shrink=0.8)
    return fig
'''

# Indexing first and turning torch's IndexError into the learner's own message; np.ravel of
# plt.subplots' axes (a single Axes when there is one panel); xticks set with plt.xticks.
_REINDEX_ERROR = '''
def _checked(index, n, what):
    try:
        range(n)[index]
    except IndexError:
        raise IndexError(f"{what} {index} does not exist: valid values are -{n} to {n - 1}") from None
    return index


def layer_similarity(hidden_states, token_index):
    _checked(token_index, hidden_states.shape[1], "token")
    return cosine_similarity_matrix(hidden_states[:, token_index, :])


def token_similarity(hidden_states, layer):
    _checked(layer, hidden_states.shape[0], "layer")
    return cosine_similarity_matrix(hidden_states[layer])


def plot_token_similarity(hidden_states, layers, token_labels, vmin=0.5, vmax=1.0):
    fig, axes = plt.subplots(1, len(layers), figsize=(5 * len(layers), 5))
    axes = np.ravel(axes)
    for ax, layer in zip(axes, layers):
        plt.sca(ax)
        image = plt.imshow(token_similarity(hidden_states, layer), cmap="plasma", vmin=vmin,
                           vmax=vmax)
        plt.title(f"layer {layer}" + (" (embeddings)" if layer == 0 else ""))
        plt.xticks(range(len(token_labels)), token_labels, rotation="vertical")
        plt.yticks(range(len(token_labels)), token_labels)
    fig.colorbar(image, ax=axes.tolist())
    return fig
'''

# Both similarity figures with pcolormesh: cells centred at (j + 0.5, i + 0.5), the ticks moved
# there; rows going up, and figure 8 turned over with invert_yaxis to read like imshow's.
_PCOLORMESH_FIGURES = '''
def plot_layer_similarity(hidden_states, token_indices, token_labels, vmin=0.8, vmax=1.0):
    fig, axes = plt.subplots(1, len(token_indices), figsize=(4 * len(token_indices), 4),
                             squeeze=False, layout="constrained")
    for ax, t in zip(axes[0], token_indices):
        mesh = ax.pcolormesh(layer_similarity(hidden_states, t).numpy(), cmap="plasma",
                             vmin=vmin, vmax=vmax)
        ax.set_aspect("equal")
        ax.set_title(f"token {t}: {token_labels[t]!r}")
        ax.set_xlabel("layer")
        ax.set_ylabel("layer")
    fig.colorbar(mesh, ax=axes[0].tolist(), label="cosine similarity")
    return fig


def plot_token_similarity(hidden_states, layers, token_labels, vmin=0.5, vmax=1.0):
    n = len(token_labels)
    centres = np.arange(n) + 0.5
    fig, axes = plt.subplots(1, len(layers), figsize=(4.5 * len(layers), 4.5), squeeze=False,
                             layout="constrained")
    for ax, layer in zip(axes[0], layers):
        mesh = ax.pcolormesh(token_similarity(hidden_states, layer), cmap="plasma", vmin=vmin,
                             vmax=vmax)
        ax.invert_yaxis()  # token 0 at the top, as imshow shows it
        ax.set_title(f"Layer {layer}")
        ax.set_xticks(centres, token_labels, rotation=90)
        ax.set_yticks(centres, token_labels)
    fig.colorbar(mesh, ax=list(axes[0]))
    return fig
'''

VARIANTS = [
    Variant(
        id="f-cosine-broadcast",
        exercise="ex2",
        summary="F.cosine_similarity by broadcasting, a boolean triu mask for the pairs, "
        "plt.figure + fig.add_subplot for figure 7",
        code=_F_COSINE_BROADCAST,
    ),
    Variant(
        id="python-loops",
        exercise="ex2",
        summary="plain Python loops over pairs, one F.cosine_similarity each, the profile "
        "stacked along dimension 1, the token index checked by hand",
        code=_PYTHON_LOOPS,
    ),
    Variant(
        id="numpy-round-trip",
        exercise="ex2",
        summary="norms and matrix product in numpy, np.triu_indices, torch.cat of (1, P) rows",
        code=_NUMPY_ROUND_TRIP,
    ),
    Variant(
        id="notebook-plots",
        exercise="ex2",
        summary="figure 8 with set_xticklabels and plt.colorbar; figure 9 with ax.plot(x, y, 'o') "
        "per layer and a mean line drawn with markers",
        code=_NOTEBOOK_PLOTS,
    ),
    Variant(
        id="transpose-one-scatter",
        exercise="ex2",
        summary="transpose then index, pairs stacked as columns, one plt.scatter for the whole "
        "cloud, plt.plot mean line, plt.gcf()",
        code=_TRANSPOSE_AND_ONE_SCATTER,
    ),
    Variant(
        id="normalize-batched",
        exercise="ex2",
        summary="F.normalize and one batched product for all layers, [:, rows, cols], capitalised "
        "titles, plt.sca + plt.imshow + plt.colorbar()",
        code=_NORMALIZE_BATCHED,
    ),
    Variant(
        id="combinations-einsum",
        exercise="ex2",
        summary="itertools.combinations for the pairs, einsum with a torch.where zero guard, "
        "matshow with one colour bar per panel",
        code=_COMBINATIONS_EINSUM,
    ),
    Variant(
        id="reraised-index-error",
        exercise="ex2",
        summary="the index tried on range(n) and the IndexError re-raised with the valid range, "
        "np.ravel(axes), plt.xticks(rotation='vertical')",
        code=_REINDEX_ERROR,
    ),
    Variant(
        id="pcolormesh-figures",
        exercise="ex2",
        summary="figures 7 and 8 with ax.pcolormesh: cells centred at j + 0.5 and the ticks put "
        "there, figure 8 turned over with invert_yaxis",
        code=_PCOLORMESH_FIGURES,
    ),
]
