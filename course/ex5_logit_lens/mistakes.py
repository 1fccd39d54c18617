"""Learner mistakes for exercise 5 (the logit lens) and the diagnoses the tests name them with.

Each ``code`` is executed on top of ``course/ex5_logit_lens/solution.py`` (its names, such as
``torch``, ``kata``, ``plt``, ``_layer_names`` and the public functions, are in scope), so the
other solution functions call the patched ones. ``message`` is a phrase of the diagnosis's
message; ``diagnosis`` the id the failing test must carry.
"""

from course.shared.catalogue import catalogue, template

# A correct logit_lens, with a slot for each line the mistakes change: how a layer's states are
# picked (STATE), a step before reading them (STEP), and the reading (READ, of NORMED states).
_lens = template('''
def logit_lens(model, hidden_states, positions=None):
    hidden_states = torch.as_tensor(hidden_states)
    n_hidden = len(kata.blocks(model)) + 1
    if hidden_states.dim() != 3 or hidden_states.shape[0] != n_hidden:
        raise ValueError("hidden_states should be (n_layers + 1, T, d_model)")
    n_tokens = hidden_states.shape[1]
    positions = list(range(n_tokens)) if positions is None else [int(p) for p in positions]
    positions = [kata.token_index(p, n_tokens, "position") for p in positions]
    norm, unembed = kata.final_norm(model), model.get_output_embeddings()
    layers = []
    with torch.no_grad():
        for i in range(n_hidden):
            h = {STATE}
            {STEP}
            layers.append({READ})
    return torch.stack(layers).float().cpu()
''', READ="torch.log_softmax(unembed({NORMED}), dim=-1)", NORMED="norm(h) if i < n_hidden - 1 else h",
    STATE="hidden_states[i, positions]", STEP="")

# A correct true_token_ranks: which token is the true one (TRUE), which are counted (COUNTED).
_ranks = template('''
def true_token_ranks(lens, input_ids):
    lens = torch.as_tensor(lens)
    ids = torch.as_tensor(input_ids).reshape(-1)
    if lens.shape[1] != ids.shape[0]:
        raise ValueError("lens and input_ids disagree")
    true = lens[:, :-1].gather(-1, ids[{TRUE}][None, :, None].expand(lens.shape[0], -1, 1))
    return (lens[:, :-1] {COUNTED} true).sum(-1)
''', TRUE="1:", COUNTED=">")

_target_rank = template('''
def target_rank_by_layer(lens, target_id, position=-1):
    row = torch.as_tensor(lens)[:, {POSITION}]
    if not 0 <= target_id < row.shape[-1]:
        raise ValueError("not a token id")
    return (row > row[:, target_id, None]).sum(-1){FROM}
''', POSITION="position", FROM="")

_top_tokens = template('''
def top_tokens_by_layer(lens, tokenizer, position=-1, k=5):
    top = torch.topk(torch.as_tensor(lens)[:, position], k, dim=-1).indices
    return {TEXTS}
''', TEXTS="[[tokenizer.decode([i]) for i in layer] for layer in top.tolist()]")

_rank_plot = template('''
def plot_rank_by_layer(ranks_by_text):
    fig, ax = plt.subplots(figsize=(9, 4))
    for label, ranks in ranks_by_text.items():
        ranks = torch.as_tensor(ranks)
        ax.plot(range(ranks.shape[0]), {CURVE}, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("Layer")
    ax.set_ylabel("Median rank")
    ax.legend()
    return fig
''', CURVE="ranks.float().median(dim=1).values.numpy() + 1")

MISTAKES = catalogue(
    "ex5",
    # ------------------------------------------------------------------------- the norm
    ("last-layer-normed-twice",
     "applied the final norm to every hidden state, the last (already normed) one too",
     "lens-last-layer-normed-twice", _lens(NORMED="norm(h)")),
    ("inner-layers-not-normed", "forgot the final norm on the inner layers",
     "lens-inner-layers-not-normed", _lens(NORMED="h")),
    ("lm-head-on-un-normed-states", "normed the states but fed the un-normed ones to lm_head",
     "lens-inner-layers-not-normed",
     _lens(STEP="normed = norm(h) if i < n_hidden - 1 else h  # then reads h, not normed",
           READ="torch.log_softmax(model.lm_head(h), dim=-1)")),
    ("inner-layers-normed-twice", "normed the inner layers once up front and again in the loop",
     "lens-inner-layers-normed-twice",
     _lens(STEP="""
if i < n_hidden - 1:
    h = norm(norm(h))  # once "to be safe", once as planned
""", NORMED="h")),
    ("embedding-layer-not-normed",
     "skipped the norm for the embedding layer, as if it were not a hidden state",
     "lens-embedding-layer-not-normed", _lens(NORMED="norm(h) if 0 < i < n_hidden - 1 else h")),
    ("norm-without-learned-weights",
     "normalised with a plain layer_norm instead of the model's final norm and its weights",
     "lens-norm-not-the-models",
     _lens(STEP="""
if i < n_hidden - 1:
    h = torch.nn.functional.layer_norm(h, h.shape[-1:])  # no learned weight or bias
""", NORMED="h")),
    # ------------------------------------------------------------------------- log-softmax
    ("softmax-not-log-softmax", "used softmax instead of log-softmax",
     "lens-softmax-not-log-softmax", _lens(READ="torch.softmax(unembed({NORMED}), dim=-1)")),
    ("raw-logits", "returned the raw logits of the unembedding",
     "lens-raw-logits", _lens(READ="unembed({NORMED})")),
    ("log-softmax-over-positions", "took log-softmax over the positions instead of the vocabulary",
     "lens-log-softmax-wrong-dim", _lens(READ="torch.log_softmax(unembed({NORMED}), dim=0)")),
    # ------------------------------------------------------------------------- positions
    ("positions-ignored", "read every position whatever positions asked for",
     "lens-positions-ignored", _lens(STATE="hidden_states[i]")),
    ("embedding-layer-dropped", "read only the blocks' outputs, dropping the embedding layer",
     "lens-embedding-layer-dropped", _lens(STEP="""
if i == 0:
    continue
""")),
    # ------------------------------------------------------------------------- ranks
    ("ranks-one-based", "counted ranks from 1 (the top token has rank 1)",
     "rank-one-based", _ranks(COUNTED=">=")),  # counts the true token itself
    ("ranks-of-the-current-token", "ranked the current token instead of the next one",
     "rank-current-token", _ranks(TRUE=":-1")),
    ("ranks-count-lower", "counted the tokens below the true one",
     "rank-counts-lower", _ranks(COUNTED="<")),
    ("target-rank-one-based", "gave the target's rank from 1",
     "rank-one-based", _target_rank(FROM=" + 1")),
    ("target-rank-ignores-position",
     "always ranked the target at the last position, whatever position asked for",
     "target-rank-wrong-position", _target_rank(POSITION="-1")),
    # ------------------------------------------------------------------------- token texts
    ("decoded-without-leading-space",
     "stripped the decoded token texts, losing the leading space",
     "token-text-without-leading-space",
     _top_tokens(TEXTS="[[tokenizer.decode([i]).strip() for i in layer] for layer in top.tolist()]")),
    ("raw-bpe-pieces", "used convert_ids_to_tokens, whose pieces spell the space as 'Ġ'",
     "token-text-raw-bpe",
     _top_tokens(TEXTS="[tokenizer.convert_ids_to_tokens(layer) for layer in top.tolist()]")),
    ("lens-top-tokens-lowest-first", "listed the top tokens in increasing order",
     "lens-top-tokens-lowest-first",
     _top_tokens(TEXTS="[[tokenizer.decode([i]) for i in reversed(layer)] for layer in top.tolist()]")),
    # ------------------------------------------------------------------------- the pictures
    ("argmax-over-positions", "took the plot's top token with argmax over the positions instead of the vocabulary",
     "lens-plot-max-over-wrong-dim", '''
def plot_logit_lens(lens, tokenizer, input_ids):
    lens = torch.as_tensor(lens)
    n_hidden, n_positions, _ = lens.shape
    values = lens.max(dim=-1).values
    indices = lens.argmax(dim=1)  # (n_hidden, vocab): over the positions
    fig, ax = plt.subplots(figsize=(0.8 * n_positions + 2, 0.3 * n_hidden + 1.5))
    image = ax.imshow(values.numpy(), origin="lower", aspect="auto")
    fig.colorbar(image, ax=ax)
    for i in range(n_hidden):
        for t in range(n_positions):
            ax.text(t, i, tokenizer.decode([int(indices[i, t])])[:8], ha="center", fontsize=7)
    ax.set_xticks(range(n_positions), [tokenizer.decode([i]) for i in torch.as_tensor(input_ids).reshape(-1).tolist()])
    ax.set_yticks(range(n_hidden), _layer_names(n_hidden))
    ax.set_xlabel("Input token")
    ax.set_ylabel("Layer")
    return fig
'''),
    ("lens-picture-transposed", "drew positions as rows and layers as columns",
     "lens-plot-transposed", '''
def plot_logit_lens(lens, tokenizer, input_ids):
    lens = torch.as_tensor(lens)
    top = lens.max(dim=-1)
    fig, ax = plt.subplots(figsize=(12, 10))
    ax.imshow(top.values.T.numpy(), origin="lower", aspect="auto")
    for i in range(lens.shape[0]):
        for t in range(lens.shape[1]):
            ax.text(i, t, tokenizer.decode([int(top.indices[i, t])])[:8], fontsize=7)
    return fig
'''),
    ("rank-plot-without-plus-one",
     "drew the median rank itself on the log axis, where rank 0 disappears",
     "rank-plot-zero-on-log-axis", _rank_plot(CURVE="ranks.float().median(dim=1).values.numpy()")),
    ("rank-plot-mean", "drew the mean rank instead of the median",
     "rank-plot-mean-not-median", _rank_plot(CURVE="ranks.float().mean(dim=1).numpy() + 1")),
    # ------------------------------------------------------------- as a beginner wrote them
    ("ranks-lens-shifted",
     "true_token_ranks shifts the lens instead of the tokens: lens[:, 1:] against input_ids[1:]",
     "rank-next-token-shift", '''
def true_token_ranks(lens, input_ids):
    lens = torch.as_tensor(lens)
    ids = torch.as_tensor(input_ids).reshape(-1)
    if lens.shape[1] != ids.shape[0]:
        raise ValueError("lens and input_ids disagree")
    ranks = []
    for layer in lens:
        predictions = layer[1:]  # (T - 1, vocab_size)
        true = predictions[torch.arange(len(ids) - 1), ids[1:]]
        ranks.append((predictions > true[:, None]).sum(dim=-1))
    return torch.stack(ranks)
'''),
    ("lens-picture-origin-upper",
     "plot_logit_lens calls imshow without origin='lower', so the output row is at the bottom",
     "lens-plot-output-at-bottom", '''
def plot_logit_lens(lens, tokenizer, input_ids):
    lens = torch.as_tensor(lens)
    n_hidden, n_positions, _ = lens.shape
    top = lens.max(dim=-1)
    fig, ax = plt.subplots(figsize=(0.8 * n_positions + 2, 0.3 * n_hidden + 1.5))
    image = ax.imshow(top.values.numpy(), aspect="auto")
    fig.colorbar(image, ax=ax)
    for i in range(n_hidden):
        for t in range(n_positions):
            ax.text(t, i, tokenizer.decode([int(top.indices[i, t])])[:8], ha="center", fontsize=7)
    ids = torch.as_tensor(input_ids).reshape(-1).tolist()
    ax.set_xticks(range(n_positions), [tokenizer.decode([i]) for i in ids], rotation=90)
    ax.set_yticks(range(n_hidden), _layer_names(n_hidden))
    ax.set_xlabel("Input token")
    ax.set_ylabel("Layer")
    return fig
'''),
)
