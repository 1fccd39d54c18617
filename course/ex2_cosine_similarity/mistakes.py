"""Learner mistakes that the tests of exercise 2 (cosine similarities) must catch, and their diagnoses."""

from course.shared.catalogue import catalogue, template

# A correct cosine_similarity_matrix: its input check (CHECK) and how it gets unit vectors (UNIT).
_matrix = template('''
def cosine_similarity_matrix(vectors):
    {CHECK}
    unit = {UNIT}
    return unit @ unit.T
''', CHECK='''
if vectors.ndim != 2:
    raise ValueError(f"expected (n, d), got {tuple(vectors.shape)}")
''', UNIT="vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(EPS)")

# laminar_profile: dropping the first token (SKIP), which pairs (PAIRS), their values (VALUES).
_profile = template('''
def laminar_profile(hidden_states, skip_first=True):
    {SKIP}
    n_layers_plus_1, n_tokens, _ = hidden_states.shape
    rows, cols = {PAIRS}
    return torch.stack([{VALUES} for layer in range(n_layers_plus_1)])
''', SKIP='''
if skip_first:
    hidden_states = hidden_states[:, 1:, :]
''', PAIRS="torch.triu_indices(n_tokens, n_tokens, offset=1)",
    VALUES="token_similarity(hidden_states, layer)[rows, cols]")

# plot_layer_similarity: which token's data each panel shows (DATA), the colour limits (LIMITS),
# the layer axis's label (Y_LABEL).
_layer_figure = template('''
def plot_layer_similarity(hidden_states, token_indices, token_labels, vmin=0.8, vmax=1.0):
    fig, axes = plt.subplots(1, len(token_indices), squeeze=False)
    for k, (ax, token_index) in enumerate(zip(axes[0], token_indices)):
        image = ax.imshow(layer_similarity(hidden_states, {DATA}).numpy(), cmap="plasma",
                          {LIMITS}, origin="lower")
        ax.set_title(f"token {token_index}: {token_labels[token_index]!r}")
        ax.set_xlabel("layer")
        ax.set_ylabel({Y_LABEL})
    fig.colorbar(image, ax=axes[0].tolist())
    return fig
''', DATA="token_index", LIMITS="vmin=vmin, vmax=vmax", Y_LABEL='"layer"')

MISTAKES = catalogue(
    "ex2",
    ("normalised-wrong-dimension",
     "normalises each coordinate across the vectors (dim=0), not each vector (dim=-1)",
     "similarity-normalised-wrong-dimension",
     _matrix(UNIT="vectors / vectors.norm(dim=0, keepdim=True).clamp_min(EPS)")),
    ("plain-dot-product", "returns the dot products without dividing by the vectors' lengths",
     "similarity-plain-dot-products", _matrix(UNIT="vectors  # not divided by the lengths")),
    ("nan-for-zero-vector",
     "divides by the length without a guard, so a zero vector gives 0 / 0 = NaN",
     "zero-vector-nan", _matrix(UNIT="vectors / vectors.norm(dim=-1, keepdim=True)")),
    ("no-shape-check",
     "does not check that the input is 2-D: a 1-D vector gives a number, no error",
     "similarity-input-not-checked", _matrix(CHECK="")),
    ("layer-similarity-takes-a-layer",
     "layer_similarity takes hidden_states[token_index] (one layer, all tokens) instead of "
     "one token at every layer",
     "layer-similarity-indexes-a-layer", '''
def layer_similarity(hidden_states, token_index):
    n_tokens = hidden_states.shape[1]
    if not 0 <= token_index < n_tokens:
        raise IndexError(f"token_index {token_index}: valid indices are 0 to {n_tokens - 1}")
    return cosine_similarity_matrix(hidden_states[token_index])
'''),
    ("token-similarity-takes-a-token",
     "token_similarity takes hidden_states[:, layer] (one token across the layers) instead "
     "of one layer",
     "token-similarity-indexes-a-token", '''
def token_similarity(hidden_states, layer):
    n_layers_plus_1 = hidden_states.shape[0]
    if not 0 <= layer < n_layers_plus_1:
        raise IndexError(f"layer {layer}: valid layers are 0 to {n_layers_plus_1 - 1}")
    return cosine_similarity_matrix(hidden_states[:, layer, :])
'''),
    ("no-range-check",
     "lets torch's own indexing error through, which does not name the valid indices",
     "layer-similarity-index-not-checked", '''
def layer_similarity(hidden_states, token_index):
    return cosine_similarity_matrix(hidden_states[:, token_index, :])
'''),
    ("first-token-kept",
     "laminar_profile ignores skip_first and always pairs all tokens, the outlier first "
     "token included",
     "profile-first-token-kept", _profile(SKIP="")),
    ("diagonal-included",
     "takes the upper triangle with its diagonal (offset=0), so every token is also paired "
     "with itself",
     "profile-includes-diagonal", _profile(PAIRS="torch.triu_indices(n_tokens, n_tokens)")),
    ("torch-unique",
     "takes torch.unique(torch.triu(similarities, 1))[1:] as the original notebook did: "
     "sorts the values, merges equal similarities (losing duplicate pairs) and assumes the "
     "lower triangle's zeros are the smallest value",
     "unique-drops-lowest-pair",
     _profile(VALUES="torch.unique(torch.triu(token_similarity(hidden_states, layer), "
                     "diagonal=1))[1:]")),
    ("pairs-in-lower-triangle-order",
     "lists the pairs of the lower triangle, not in torch.triu_indices order",
     "profile-pairs-wrong-order",
     _profile(PAIRS="torch.tril_indices(n_tokens, n_tokens, offset=-1)")),
    ("layer-figure-loop-counter",
     "figure 7 takes the data of the loop counter k while the title names token_indices[k] "
     "(the original notebook's bug)",
     "layer-figure-loop-counter", _layer_figure(DATA="k")),
    ("token-figure-loop-counter",
     "figure 8 takes the data of the loop counter k while the title names layers[k] "
     "(the original notebook's bug)",
     "token-figure-loop-counter", '''
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
'''),
    ("colour-limits-ignored",
     "plot_layer_similarity hard-codes the colour limits 0.8 and 1, ignoring vmin, vmax",
     "layer-figure-ignores-vmin-vmax", _layer_figure(LIMITS="vmin=0.8, vmax=1.0")),
    ("laminar-mean-over-layers",
     "the mean line averages over the layers (dim=0), one value per pair, not per layer",
     "laminar-mean-over-layers", '''
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
'''),
    ("row-norm-without-keepdim",
     "divides the (n, d) vectors by vectors.norm(dim=-1), shape (n,), without keepdim",
     "row-norm-without-keepdim",
     _matrix(UNIT="vectors / vectors.norm(dim=-1).clamp_min(EPS)  # (n, d) / (n,): broadcasts over d")),
    ("unique-drops-lowest-pair",
     "takes the pairs above the diagonal, then torch.unique(...)[1:] to 'drop the "
     "diagonal', which drops the lowest (most negative) similarity instead",
     "unique-drops-lowest-pair",
     _profile(VALUES="torch.unique(token_similarity(hidden_states, layer)[rows, cols])[1:]")),
    # ------------------------------------------------------------- as a beginner wrote them
    ("token-similarity-layer-plus-one",
     "token_similarity takes hidden_states[layer + 1], as if index 0 were block 0 and the "
     "embedding layer came before it",
     "similarity-layer-off-by-one", '''
def token_similarity(hidden_states, layer):
    layer = kata.layer_index(layer, hidden_states.shape[0])
    return cosine_similarity_matrix(hidden_states[layer + 1])
'''),
    ("one-panel-axes-indexed",
     "figure 7 makes plt.subplots(1, n) without squeeze=False and indexes axes[k], which "
     "fails when there is one panel (a single Axes)",
     "one-panel-single-axes", '''
def plot_layer_similarity(hidden_states, token_indices, token_labels, vmin=0.8, vmax=1.0):
    fig, axes = plt.subplots(1, len(token_indices), figsize=(16, 4))
    for k in range(len(token_indices)):
        t = token_indices[k]
        image = axes[k].imshow(layer_similarity(hidden_states, t).numpy(), cmap="plasma",
                               vmin=vmin, vmax=vmax, origin="lower")
        axes[k].set_title(f"token {t}: {token_labels[t]!r}")
        axes[k].set_xlabel("layer")
        axes[k].set_ylabel("layer")
    fig.colorbar(image, ax=axes)
    return fig
'''),
    ("tex-matplotlib-cannot-parse",
     "labels the layer axis with TeX that matplotlib's mathtext does not know (\\textrm), so "
     "every call succeeds and the figure fails only when it is drawn",
     "figure-cannot-be-drawn", _layer_figure(
         Y_LABEL=r'r"layer $\ell$ ($\textrm{block output}$)"')),
    ("laminar-mean-over-pairs-axis",
     "the mean line is ax.plot(range(n_layers + 1), profile.mean(dim=0)): the mean over the "
     "layers, whose length (one per pair) matplotlib refuses against the layers' x",
     "laminar-mean-over-layers", '''
def plot_laminar_profile(profile):
    n_layers_plus_1, n_pairs = profile.shape
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots(figsize=(10, 4))
    for layer in range(n_layers_plus_1):
        ax.scatter(layer + rng.uniform(-0.25, 0.25, size=n_pairs), profile[layer].numpy(), s=10)
    ax.plot(range(n_layers_plus_1), profile.mean(dim=0).numpy(), color="black")
    ax.set_xlabel("layer")
    ax.set_ylabel("cosine similarity")
    return fig
'''),
)
