"""Correct variants of exercise 5's functions that the tests must accept."""

from course.shared.catalogue import Variant

VARIANTS = [
    Variant(
        id="all-layers-at-once",
        exercise="ex5",
        summary="norms the inner layers in one batch and unembeds every layer in one product",
        code='''
def logit_lens(model, hidden_states, positions=None):
    hidden_states = torch.as_tensor(hidden_states)
    n = len(kata.blocks(model)) + 1
    if hidden_states.dim() != 3 or hidden_states.shape[0] != n:
        raise ValueError(f"expected ({n}, T, d_model), got {tuple(hidden_states.shape)}")
    if positions is not None:
        n = hidden_states.shape[1]
        if any(not -n <= p < n for p in positions):
            raise IndexError(f"positions {list(positions)}: the valid positions are -{n} to {n - 1}")
        hidden_states = hidden_states[:, list(positions)]
    with torch.no_grad():
        h = torch.cat([kata.final_norm(model)(hidden_states[:-1]), hidden_states[-1:]])
        return torch.log_softmax(model.get_output_embeddings()(h), dim=-1).float().cpu()
''',
    ),
    Variant(
        id="ranks-by-sorting",
        exercise="ex5",
        summary="ranks by sorting each row and finding the true token's place",
        code='''
def true_token_ranks(lens, input_ids):
    ids = torch.as_tensor(input_ids).reshape(-1)
    if lens.shape[1] != len(ids):
        raise ValueError("the lens must cover every position")
    order = lens[:, :-1].argsort(dim=-1, descending=True)  # (n, T - 1, vocab)
    return (order == ids[1:][None, :, None]).int().argmax(dim=-1)
''',
    ),
    Variant(
        id="top-tokens-by-argsort",
        exercise="ex5",
        summary="takes the top k with argsort instead of topk, decoding one id at a time",
        code='''
def top_tokens_by_layer(lens, tokenizer, position=-1, k=5):
    n = lens.shape[1]
    if not -n <= position < n:
        raise IndexError(f"position {position} is not one of the {n} positions (-{n} to {n - 1})")
    result = []
    for row in lens[:, position]:
        ids = row.argsort(descending=True)[:k]
        result.append([tokenizer.decode(int(i)) for i in ids])
    return result
''',
    ),
    Variant(
        id="matshow-and-numpy-median",
        exercise="ex5",
        summary="draws the lens with matshow (origin at the top), then turns the y axis over so the "
                "output is the top row, and the ranks with np.median and semilogy",
        code='''
import numpy as np


def plot_logit_lens(lens, tokenizer, input_ids):
    values, indices = lens.max(dim=-1)
    n, t = values.shape
    fig, ax = plt.subplots(figsize=(0.9 * t + 2, 0.32 * n + 2))
    image = ax.matshow(values.numpy(), aspect="auto")
    ax.invert_yaxis()  # matshow puts row 0 at the top: the output row goes up instead
    fig.colorbar(image)
    for i in range(n):
        for p in range(t):
            ax.text(p, i, tokenizer.decode([indices[i, p].item()])[:6], ha="center", va="center", fontsize=6)
    ax.set_xticks(range(t), [tokenizer.decode([i]) for i in torch.as_tensor(input_ids).reshape(-1).tolist()])
    ax.set_yticks(range(n), _layer_names(n))
    ax.set_xlabel("Input token")
    ax.set_ylabel("Layer")
    return fig


def plot_rank_by_layer(ranks_by_text):
    fig, ax = plt.subplots()
    for label, ranks in ranks_by_text.items():
        ax.semilogy(np.median(np.asarray(ranks), axis=1) + 1, label=label)
    ax.set_xlabel("Layer")
    ax.set_ylabel("Median rank + 1")
    ax.legend()
    return fig
''',
    ),
    Variant(
        id="rank-by-sorted-position",
        exercise="ex5",
        summary="ranks the target by where its log-probability falls among the sorted row",
        code='''
def target_rank_by_layer(lens, target_id, position=-1):
    lens = torch.as_tensor(lens)
    n_layers_plus_1, n_positions, vocab_size = lens.shape
    if isinstance(target_id, bool) or not isinstance(target_id, int) or not 0 <= target_id < vocab_size:
        raise ValueError(f"target_id {target_id!r} is not a token id (0 to {vocab_size - 1})")
    if not -n_positions <= position < n_positions:
        raise IndexError(f"position {position} is out of range: the valid positions are "
                         f"-{n_positions} to {n_positions - 1}")
    ranks = []
    for row in lens[:, position]:  # one layer: (vocab_size,)
        ordered = torch.sort(row, descending=True).values
        ranks.append(int(torch.searchsorted(-ordered, -row[target_id], side="left")))
    return torch.tensor(ranks, dtype=torch.int64)
''',
    ),
    Variant(
        id="pcolormesh-texts-at-cell-centres",
        exercise="ex5",
        summary="draws the lens with ax.pcolormesh (rows going up, cells centred at j + 0.5): the "
                "texts and the ticks at the cells' centres, a colour bar from plt.colorbar",
        code='''
def plot_logit_lens(lens, tokenizer, input_ids):
    top = torch.as_tensor(lens).max(dim=-1)
    n_rows, n_cols = top.values.shape
    ids = torch.as_tensor(input_ids).flatten().tolist()
    fig, ax = plt.subplots(figsize=(0.8 * n_cols + 2.5, 0.3 * n_rows + 1.8))
    mesh = ax.pcolormesh(top.values.numpy(), cmap="magma")
    plt.colorbar(mesh, ax=ax, label="top log-probability")
    for row in range(n_rows):
        for col in range(n_cols):
            word = tokenizer.decode([top.indices[row, col].item()])
            ax.text(col + 0.5, row + 0.5, word[:8], ha="center", va="center", fontsize=6,
                    color="grey")
    ax.set_xticks([c + 0.5 for c in range(n_cols)])
    ax.set_xticklabels([tokenizer.decode([i]) for i in ids], rotation=60)
    ax.set_yticks([r + 0.5 for r in range(n_rows)])
    ax.set_yticklabels(["Emb"] + [f"L{r}" for r in range(n_rows - 1)])
    ax.set_xlabel("Input token")
    ax.set_ylabel("Layer")
    fig.tight_layout()
    return fig
''',
    ),
]
