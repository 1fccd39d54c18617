"""Learner mistakes that the tests of exercise 2 (cosine similarities) must catch, and their diagnoses."""

from tests.mistakes import Mistake

MISTAKES = [
    Mistake(
        id="normalised-wrong-dimension",
        exercise="ex2",
        summary="normalises each coordinate across the vectors (dim=0), not each vector (dim=-1)",
        diagnosis="similarity-normalised-wrong-dimension",
        code='''
def cosine_similarity_matrix(vectors):
    if vectors.ndim != 2:
        raise ValueError(f"expected (n, d), got {tuple(vectors.shape)}")
    unit = vectors / vectors.norm(dim=0, keepdim=True).clamp_min(EPS)
    return unit @ unit.T
''',
    ),
    Mistake(
        id="plain-dot-product",
        exercise="ex2",
        summary="returns the dot products without dividing by the vectors' lengths",
        diagnosis="similarity-plain-dot-products",
        code='''
def cosine_similarity_matrix(vectors):
    if vectors.ndim != 2:
        raise ValueError(f"expected (n, d), got {tuple(vectors.shape)}")
    return vectors @ vectors.T
''',
    ),
    Mistake(
        id="nan-for-zero-vector",
        exercise="ex2",
        summary="divides by the length without a guard, so a zero vector gives 0 / 0 = NaN",
        diagnosis="zero-vector-nan",
        code='''
def cosine_similarity_matrix(vectors):
    if vectors.ndim != 2:
        raise ValueError(f"expected (n, d), got {tuple(vectors.shape)}")
    unit = vectors / vectors.norm(dim=-1, keepdim=True)
    return unit @ unit.T
''',
    ),
    Mistake(
        id="no-shape-check",
        exercise="ex2",
        summary="does not check that the input is 2-D: a 1-D vector gives a number, no error",
        diagnosis="similarity-input-not-checked",
        code='''
def cosine_similarity_matrix(vectors):
    unit = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(EPS)
    return unit @ unit.T
''',
    ),
    Mistake(
        id="layer-similarity-takes-a-layer",
        exercise="ex2",
        summary=(
            "layer_similarity takes hidden_states[token_index] (one layer, all tokens) instead of "
            "one token at every layer"
        ),
        diagnosis="layer-similarity-indexes-a-layer",
        code='''
def layer_similarity(hidden_states, token_index):
    n_tokens = hidden_states.shape[1]
    if not 0 <= token_index < n_tokens:
        raise IndexError(f"token_index {token_index}: valid indices are 0 to {n_tokens - 1}")
    return cosine_similarity_matrix(hidden_states[token_index])
''',
    ),
    Mistake(
        id="token-similarity-takes-a-token",
        exercise="ex2",
        summary=(
            "token_similarity takes hidden_states[:, layer] (one token across the layers) instead "
            "of one layer"
        ),
        diagnosis="token-similarity-indexes-a-token",
        code='''
def token_similarity(hidden_states, layer):
    n_layers_plus_1 = hidden_states.shape[0]
    if not 0 <= layer < n_layers_plus_1:
        raise IndexError(f"layer {layer}: valid layers are 0 to {n_layers_plus_1 - 1}")
    return cosine_similarity_matrix(hidden_states[:, layer, :])
''',
    ),
    Mistake(
        id="no-range-check",
        exercise="ex2",
        summary="lets torch's own indexing error through, which does not name the valid indices",
        diagnosis="layer-similarity-index-not-checked",
        code='''
def layer_similarity(hidden_states, token_index):
    return cosine_similarity_matrix(hidden_states[:, token_index, :])
''',
    ),
    Mistake(
        id="first-token-kept",
        exercise="ex2",
        summary=(
            "laminar_profile ignores skip_first and always pairs all tokens, the outlier first "
            "token included"
        ),
        diagnosis="profile-first-token-kept",
        code='''
def laminar_profile(hidden_states, skip_first=True):
    n_layers_plus_1, n_tokens, _ = hidden_states.shape
    rows, cols = torch.triu_indices(n_tokens, n_tokens, offset=1)
    return torch.stack([token_similarity(hidden_states, layer)[rows, cols]
                        for layer in range(n_layers_plus_1)])
''',
    ),
    Mistake(
        id="diagonal-included",
        exercise="ex2",
        summary=(
            "takes the upper triangle with its diagonal (offset=0), so every token is also paired "
            "with itself"
        ),
        diagnosis="profile-includes-diagonal",
        code='''
def laminar_profile(hidden_states, skip_first=True):
    if skip_first:
        hidden_states = hidden_states[:, 1:, :]
    n_layers_plus_1, n_tokens, _ = hidden_states.shape
    rows, cols = torch.triu_indices(n_tokens, n_tokens)
    return torch.stack([token_similarity(hidden_states, layer)[rows, cols]
                        for layer in range(n_layers_plus_1)])
''',
    ),
    Mistake(
        id="torch-unique",
        exercise="ex2",
        summary=(
            "takes torch.unique(torch.triu(similarities, 1))[1:] as the original notebook did: "
            "sorts the values, merges equal similarities (losing duplicate pairs) and assumes the "
            "lower triangle's zeros are the smallest value"
        ),
        diagnosis="unique-drops-lowest-pair",
        code='''
def laminar_profile(hidden_states, skip_first=True):
    if skip_first:
        hidden_states = hidden_states[:, 1:, :]
    rows = []
    for layer in range(hidden_states.shape[0]):
        similarities = token_similarity(hidden_states, layer)
        rows.append(torch.unique(torch.triu(similarities, diagonal=1))[1:])
    return torch.stack(rows)
''',
    ),
    Mistake(
        id="pairs-in-lower-triangle-order",
        exercise="ex2",
        summary="lists the pairs of the lower triangle, not in torch.triu_indices order",
        diagnosis="profile-pairs-wrong-order",
        code='''
def laminar_profile(hidden_states, skip_first=True):
    if skip_first:
        hidden_states = hidden_states[:, 1:, :]
    n_layers_plus_1, n_tokens, _ = hidden_states.shape
    rows, cols = torch.tril_indices(n_tokens, n_tokens, offset=-1)
    return torch.stack([token_similarity(hidden_states, layer)[rows, cols]
                        for layer in range(n_layers_plus_1)])
''',
    ),
    Mistake(
        id="layer-figure-loop-counter",
        exercise="ex2",
        summary=(
            "figure 7 takes the data of the loop counter k while the title names token_indices[k] "
            "(the original notebook's bug)"
        ),
        diagnosis="layer-figure-loop-counter",
        code='''
def plot_layer_similarity(hidden_states, token_indices, token_labels, vmin=0.8, vmax=1.0):
    fig, axes = plt.subplots(1, len(token_indices), squeeze=False)
    for k in range(len(token_indices)):
        token_index = token_indices[k]
        image = axes[0, k].imshow(layer_similarity(hidden_states, k).numpy(), cmap="plasma",
                                  vmin=vmin, vmax=vmax, origin="lower")
        axes[0, k].set_title(f"token {token_index}: {token_labels[token_index]!r}")
        axes[0, k].set_xlabel("layer")
        axes[0, k].set_ylabel("layer")
    fig.colorbar(image, ax=axes[0].tolist())
    return fig
''',
    ),
    Mistake(
        id="token-figure-loop-counter",
        exercise="ex2",
        summary=(
            "figure 8 takes the data of the loop counter k while the title names layers[k] "
            "(the original notebook's bug)"
        ),
        diagnosis="token-figure-loop-counter",
        code='''
def plot_token_similarity(hidden_states, layers, token_labels, vmin=0.5, vmax=1.0):
    n_tokens = hidden_states.shape[1]
    fig, axes = plt.subplots(1, len(layers), squeeze=False)
    for k in range(len(layers)):
        ax = axes[0, k]
        image = ax.imshow(token_similarity(hidden_states, k).numpy(), cmap="plasma",
                          vmin=vmin, vmax=vmax)
        ax.set_title(f"layer {layers[k]}")
        ax.set_xticks(range(n_tokens), labels=token_labels, rotation=90)
        ax.set_yticks(range(n_tokens), labels=token_labels)
    fig.colorbar(image, ax=axes[0].tolist())
    return fig
''',
    ),
    Mistake(
        id="colour-limits-ignored",
        exercise="ex2",
        summary="plot_layer_similarity hard-codes the colour limits 0.8 and 1, ignoring vmin, vmax",
        diagnosis="layer-figure-ignores-vmin-vmax",
        code='''
def plot_layer_similarity(hidden_states, token_indices, token_labels, vmin=0.8, vmax=1.0):
    fig, axes = plt.subplots(1, len(token_indices), squeeze=False)
    for ax, token_index in zip(axes[0], token_indices):
        image = ax.imshow(layer_similarity(hidden_states, token_index).numpy(), cmap="plasma",
                          vmin=0.8, vmax=1.0, origin="lower")
        ax.set_title(f"token {token_index}: {token_labels[token_index]!r}")
        ax.set_xlabel("layer")
        ax.set_ylabel("layer")
    fig.colorbar(image, ax=axes[0].tolist())
    return fig
''',
    ),
    Mistake(
        id="laminar-mean-over-layers",
        exercise="ex2",
        summary="the mean line averages over the layers (dim=0), one value per pair, not per layer",
        diagnosis="laminar-mean-over-layers",
        code='''
def plot_laminar_profile(profile):
    n_layers_plus_1, n_pairs = profile.shape
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots()
    for layer in range(n_layers_plus_1):
        ax.scatter(layer + rng.uniform(-0.25, 0.25, size=n_pairs), profile[layer].numpy(), s=10)
    means = profile.mean(dim=0)
    ax.plot(range(len(means)), means.numpy(), color="black")
    ax.set_xlabel("layer")
    ax.set_ylabel("cosine similarity")
    return fig
''',
    ),
    Mistake(
        id="row-norm-without-keepdim",
        exercise="ex2",
        summary="divides the (n, d) vectors by vectors.norm(dim=-1), shape (n,), without keepdim",
        diagnosis="row-norm-without-keepdim",
        code='''
def cosine_similarity_matrix(vectors):
    if vectors.ndim != 2:
        raise ValueError(f"expected (n, d), got {tuple(vectors.shape)}")
    unit = vectors / vectors.norm(dim=-1).clamp_min(EPS)  # (n, d) / (n,): broadcasts over d
    return unit @ unit.T
''',
    ),
    Mistake(
        id="unique-drops-lowest-pair",
        exercise="ex2",
        summary="takes the pairs above the diagonal, then torch.unique(...)[1:] to 'drop the "
        "diagonal', which drops the lowest (most negative) similarity instead",
        diagnosis="unique-drops-lowest-pair",
        code='''
def laminar_profile(hidden_states, skip_first=True):
    if skip_first:
        hidden_states = hidden_states[:, 1:, :]
    n = hidden_states.shape[1]
    rows, cols = torch.triu_indices(n, n, offset=1)
    return torch.stack([torch.unique(token_similarity(hidden_states, layer)[rows, cols])[1:]
                        for layer in range(hidden_states.shape[0])])
''',
    ),
]
