"""Learner mistakes for exercise 5 (the logit lens) and the diagnoses the tests name them with.

Each ``code`` is executed on top of ``solutions/ex5_logit_lens.py`` (its names, such as
``torch``, ``kata``, ``plt``, ``_layer_names`` and the public functions, are in scope), so the
other solution functions call the patched ones. ``message`` is a phrase of the diagnosis's
message; ``diagnosis`` the id the failing test must carry.
"""

from tests.mistakes import Mistake

# A correct logit_lens with one line changed is the common shape of these mistakes.
_LENS = '''
def logit_lens(model, hidden_states, positions=None):
    hidden_states = torch.as_tensor(hidden_states)
    n_hidden = len(kata.blocks(model)) + 1
    if hidden_states.dim() != 3 or hidden_states.shape[0] != n_hidden:
        raise ValueError("hidden_states should be (n_layers + 1, T, d_model)")
    n_tokens = hidden_states.shape[1]
    positions = list(range(n_tokens)) if positions is None else [int(p) for p in positions]
    if any(not -n_tokens <= p < n_tokens for p in positions):
        raise ValueError("position out of range")
    norm, unembed = kata.final_norm(model), model.get_output_embeddings()
    layers = []
    with torch.no_grad():
        for i in range(n_hidden):
            h = hidden_states[i, positions]
            {BODY}
    return torch.stack(layers).float().cpu()
'''


def _lens(body):
    return _LENS.replace("{BODY}", body.strip().replace("\n", "\n            "))


MISTAKES = [
    # ------------------------------------------------------------------------- the norm
    Mistake(
        id="last-layer-normed-twice",
        exercise="ex5",
        summary="applied the final norm to every hidden state, the last (already normed) one too",
        diagnosis="lens-last-layer-normed-twice",
        code=_lens("layers.append(torch.log_softmax(unembed(norm(h)), dim=-1))"),
    ),
    Mistake(
        id="inner-layers-not-normed",
        exercise="ex5",
        summary="forgot the final norm on the inner layers",
        diagnosis="lens-inner-layers-not-normed",
        code=_lens("layers.append(torch.log_softmax(unembed(h), dim=-1))"),
    ),
    Mistake(
        id="lm-head-on-un-normed-states",
        exercise="ex5",
        summary="normed the states but fed the un-normed ones to lm_head",
        diagnosis="lens-inner-layers-not-normed",
        code=_lens("""
normed = norm(h) if i < n_hidden - 1 else h
layers.append(torch.log_softmax(model.lm_head(h), dim=-1))  # h, not normed
"""),
    ),
    Mistake(
        id="inner-layers-normed-twice",
        exercise="ex5",
        summary="normed the inner layers once up front and again in the loop",
        diagnosis="lens-inner-layers-normed-twice",
        code=_lens("""
if i < n_hidden - 1:
    h = norm(norm(h))  # once "to be safe", once as planned
layers.append(torch.log_softmax(unembed(h), dim=-1))
"""),
    ),
    Mistake(
        id="embedding-layer-not-normed",
        exercise="ex5",
        summary="skipped the norm for the embedding layer, as if it were not a hidden state",
        diagnosis="lens-embedding-layer-not-normed",
        code=_lens("""
h = norm(h) if 0 < i < n_hidden - 1 else h
layers.append(torch.log_softmax(unembed(h), dim=-1))
"""),
    ),
    Mistake(
        id="norm-without-learned-weights",
        exercise="ex5",
        summary="normalised with a plain layer_norm instead of the model's final norm and its weights",
        diagnosis="lens-norm-not-the-models",
        code=_lens("""
if i < n_hidden - 1:
    h = torch.nn.functional.layer_norm(h, h.shape[-1:])  # no learned weight or bias
layers.append(torch.log_softmax(unembed(h), dim=-1))
"""),
    ),
    # ------------------------------------------------------------------------- log-softmax
    Mistake(
        id="softmax-not-log-softmax",
        exercise="ex5",
        summary="used softmax instead of log-softmax",
        diagnosis="lens-softmax-not-log-softmax",
        code=_lens("layers.append(torch.softmax(unembed(norm(h) if i < n_hidden - 1 else h), dim=-1))"),
    ),
    Mistake(
        id="raw-logits",
        exercise="ex5",
        summary="returned the raw logits of the unembedding",
        diagnosis="lens-raw-logits",
        code=_lens("layers.append(unembed(norm(h) if i < n_hidden - 1 else h))"),
    ),
    Mistake(
        id="log-softmax-over-positions",
        exercise="ex5",
        summary="took log-softmax over the positions instead of the vocabulary",
        diagnosis="lens-log-softmax-wrong-dim",
        code=_lens("layers.append(torch.log_softmax(unembed(norm(h) if i < n_hidden - 1 else h), dim=0))"),
    ),
    # ------------------------------------------------------------------------- positions
    Mistake(
        id="positions-ignored",
        exercise="ex5",
        summary="read every position whatever positions asked for",
        diagnosis="lens-positions-ignored",
        code=_lens("""
h = hidden_states[i]
layers.append(torch.log_softmax(unembed(norm(h) if i < n_hidden - 1 else h), dim=-1))
"""),
    ),
    Mistake(
        id="embedding-layer-dropped",
        exercise="ex5",
        summary="read only the blocks' outputs, dropping the embedding layer",
        diagnosis="lens-embedding-layer-dropped",
        code=_lens("""
if i == 0:
    continue
layers.append(torch.log_softmax(unembed(norm(h) if i < n_hidden - 1 else h), dim=-1))
"""),
    ),
    # ------------------------------------------------------------------------- ranks
    Mistake(
        id="ranks-one-based",
        exercise="ex5",
        summary="counted ranks from 1 (the top token has rank 1)",
        diagnosis="rank-one-based",
        code='''
def true_token_ranks(lens, input_ids):
    lens = torch.as_tensor(lens)
    ids = torch.as_tensor(input_ids).reshape(-1)
    if lens.shape[1] != ids.shape[0]:
        raise ValueError("lens and input_ids disagree")
    true = lens[:, :-1].gather(-1, ids[1:][None, :, None].expand(lens.shape[0], -1, 1))
    return (lens[:, :-1] >= true).sum(-1)  # counts the true token itself
''',
    ),
    Mistake(
        id="ranks-of-the-current-token",
        exercise="ex5",
        summary="ranked the current token instead of the next one",
        diagnosis="rank-current-token",
        code='''
def true_token_ranks(lens, input_ids):
    lens = torch.as_tensor(lens)
    ids = torch.as_tensor(input_ids).reshape(-1)
    if lens.shape[1] != ids.shape[0]:
        raise ValueError("lens and input_ids disagree")
    true = lens[:, :-1].gather(-1, ids[:-1][None, :, None].expand(lens.shape[0], -1, 1))
    return (lens[:, :-1] > true).sum(-1)
''',
    ),
    Mistake(
        id="ranks-count-lower",
        exercise="ex5",
        summary="counted the tokens below the true one",
        diagnosis="rank-counts-lower",
        code='''
def true_token_ranks(lens, input_ids):
    lens = torch.as_tensor(lens)
    ids = torch.as_tensor(input_ids).reshape(-1)
    if lens.shape[1] != ids.shape[0]:
        raise ValueError("lens and input_ids disagree")
    true = lens[:, :-1].gather(-1, ids[1:][None, :, None].expand(lens.shape[0], -1, 1))
    return (lens[:, :-1] < true).sum(-1)
''',
    ),
    Mistake(
        id="target-rank-one-based",
        exercise="ex5",
        summary="gave the target's rank from 1",
        diagnosis="rank-one-based",
        code='''
def target_rank_by_layer(lens, target_id, position=-1):
    row = torch.as_tensor(lens)[:, position]
    if not 0 <= target_id < row.shape[-1]:
        raise ValueError("not a token id")
    return (row > row[:, target_id, None]).sum(-1) + 1
''',
    ),
    Mistake(
        id="target-rank-ignores-position",
        exercise="ex5",
        summary="always ranked the target at the last position, whatever position asked for",
        diagnosis="target-rank-wrong-position",
        code='''
def target_rank_by_layer(lens, target_id, position=-1):
    row = torch.as_tensor(lens)[:, -1]
    if not 0 <= target_id < row.shape[-1]:
        raise ValueError("not a token id")
    return (row > row[:, target_id, None]).sum(-1)
''',
    ),
    # ------------------------------------------------------------------------- token texts
    Mistake(
        id="decoded-without-leading-space",
        exercise="ex5",
        summary="stripped the decoded token texts, losing the leading space",
        diagnosis="token-text-without-leading-space",
        code='''
def top_tokens_by_layer(lens, tokenizer, position=-1, k=5):
    top = torch.topk(torch.as_tensor(lens)[:, position], k, dim=-1).indices
    return [[tokenizer.decode([i]).strip() for i in layer] for layer in top.tolist()]
''',
    ),
    Mistake(
        id="raw-bpe-pieces",
        exercise="ex5",
        summary="used convert_ids_to_tokens, whose pieces spell the space as 'Ġ'",
        diagnosis="token-text-raw-bpe",
        code='''
def top_tokens_by_layer(lens, tokenizer, position=-1, k=5):
    top = torch.topk(torch.as_tensor(lens)[:, position], k, dim=-1).indices
    return [tokenizer.convert_ids_to_tokens(layer) for layer in top.tolist()]
''',
    ),
    Mistake(
        id="lens-top-tokens-lowest-first",
        exercise="ex5",
        summary="listed the top tokens in increasing order",
        diagnosis="lens-top-tokens-lowest-first",
        code='''
def top_tokens_by_layer(lens, tokenizer, position=-1, k=5):
    top = torch.topk(torch.as_tensor(lens)[:, position], k, dim=-1).indices
    return [[tokenizer.decode([i]) for i in reversed(layer)] for layer in top.tolist()]
''',
    ),
    # ------------------------------------------------------------------------- the pictures
    Mistake(
        id="argmax-over-positions",
        exercise="ex5",
        summary="took the plot's top token with argmax over the positions instead of the vocabulary",
        diagnosis="lens-plot-max-over-wrong-dim",
        code='''
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
''',
    ),
    Mistake(
        id="lens-picture-transposed",
        exercise="ex5",
        summary="drew positions as rows and layers as columns",
        diagnosis="lens-plot-transposed",
        code='''
def plot_logit_lens(lens, tokenizer, input_ids):
    lens = torch.as_tensor(lens)
    top = lens.max(dim=-1)
    fig, ax = plt.subplots(figsize=(12, 10))
    ax.imshow(top.values.T.numpy(), origin="lower", aspect="auto")
    for i in range(lens.shape[0]):
        for t in range(lens.shape[1]):
            ax.text(i, t, tokenizer.decode([int(top.indices[i, t])])[:8], fontsize=7)
    return fig
''',
    ),
    Mistake(
        id="rank-plot-without-plus-one",
        exercise="ex5",
        summary="drew the median rank itself on the log axis, where rank 0 disappears",
        diagnosis="rank-plot-zero-on-log-axis",
        code='''
def plot_rank_by_layer(ranks_by_text):
    fig, ax = plt.subplots(figsize=(9, 4))
    for label, ranks in ranks_by_text.items():
        ranks = torch.as_tensor(ranks)
        ax.plot(range(ranks.shape[0]), ranks.float().median(dim=1).values.numpy(), label=label)
    ax.set_yscale("log")
    ax.set_xlabel("Layer")
    ax.set_ylabel("Median rank")
    ax.legend()
    return fig
''',
    ),
    Mistake(
        id="rank-plot-mean",
        exercise="ex5",
        summary="drew the mean rank instead of the median",
        diagnosis="rank-plot-mean-not-median",
        code='''
def plot_rank_by_layer(ranks_by_text):
    fig, ax = plt.subplots(figsize=(9, 4))
    for label, ranks in ranks_by_text.items():
        ranks = torch.as_tensor(ranks)
        ax.plot(range(ranks.shape[0]), ranks.float().mean(dim=1).numpy() + 1, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("Layer")
    ax.set_ylabel("Median rank")
    ax.legend()
    return fig
''',
    ),
]
