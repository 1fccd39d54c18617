"""Exercise 5's secret checks: each public function again, on inputs nobody prepared for.

One check per function, each on inputs drawn from a seed only the grader knows and from spaces
no table can hold (``course/shared/secret.py``): a GPT-2 of random sizes and weights whose final
norm has random weights too, random token ids, lenses of random sizes and values, random targets,
positions and k (a target is ranked at a position other than the default last one), random
ranks. The expected values are computed here, from those inputs, before the function sees them;
a check of one function never uses another of yours (the lens a rank check reads is made here).
A function's points count only if its check passes.
"""

import torch
from matplotlib.figure import Figure

import kata
from course.shared.secret import repeat_hint, secret, secret_check  # noqa: F401 - a fixture
from course.shared.support import figures, reference_hidden_states  # noqa: F401 - a fixture

from .checks import (
    WRONG_NORMS,
    as_lens,
    check_cell_texts,
    check_column_labels,
    check_inner_rows,
    check_last_row,
    check_lens_image,
    check_lens_shape,
    check_rank_lines,
    check_target_ranks,
    check_top_tokens,
    check_true_ranks,
    close,
    diagnose_log_distribution,
    lens_heatmap,
    read,
    reference_lens,
)


def random_lens_model(secret):
    """A GPT-2 of random sizes (1-4 blocks) and weights whose final norm has random weights and
    biases too (so that a norm applied twice, or not at all, shows), in eval mode."""
    model = secret.gpt2(layers=(1, 4))
    norm = kata.final_norm(model)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * secret.tensor(*norm.weight.shape, scale=1.0))
        norm.bias.copy_(secret.tensor(*norm.bias.shape, scale=0.3))
    return model


def random_lens(secret, layers=(2, 7), tokens=(2, 9), vocab=(5, 300)):
    """Log-probabilities of random logits, ``(n_layers + 1, T, vocab_size)``."""
    logits = secret.tensor(secret.integer(*layers), secret.integer(*tokens), secret.integer(*vocab))
    return torch.log_softmax(logits, dim=-1)


def printable_ids(tokenizer, vocab_size):
    """The ids from 256 on (merges) whose text is not blank and draws as it is (no '$')."""
    return [i for i in range(256, vocab_size)
            if tokenizer.decode([i]).strip() and "$" not in tokenizer.decode([i])]


def random_printable_lens(secret, tokenizer):
    """A random lens whose top tokens are always printable merges, and matching input ids."""
    lens = random_lens(secret, layers=(2, 7), tokens=(2, 8), vocab=(300, 1200))
    allowed = torch.tensor(printable_ids(tokenizer, lens.shape[-1]))
    mask = torch.full((lens.shape[-1],), -100.0)
    mask[allowed] = 0.0
    lens = torch.log_softmax(lens + mask, dim=-1)
    picks = secret.integers(len(allowed), 1, lens.shape[1])
    return lens, allowed[picks]


@secret_check("logit_lens")
def test_secret_logit_lens_of_a_model_of_random_sizes(ex, secret):
    model = random_lens_model(secret)
    ids = secret.token_ids(model.config.vocab_size, secret.integer(2, 12))
    hidden = reference_hidden_states(model, ids)
    n_hidden, n_tokens, _ = hidden.shape
    full = reference_lens(model, hidden)
    chosen = [secret.integer(-n_tokens, n_tokens - 1)
              for _ in range(secret.integer(1, min(4, n_tokens - 1)))]  # fewer than T
    for positions in (None, chosen):  # every position, then a few (negative ones too)
        picked = slice(None) if positions is None else positions
        expected = full[:, picked]
        lens = as_lens(ex.logit_lens(model, hidden.clone(),
                                     positions=None if positions is None else list(positions)))
        what = (f"logit_lens of a GPT-2 of {model.config.n_layer} blocks, {n_tokens} tokens, "
                f"positions={positions}{repeat_hint()}")
        check_lens_shape(lens, n_hidden, n_tokens, model.config.vocab_size, what, positions)
        if close(lens, expected):
            continue
        diagnose_log_distribution(lens, expected, what)
        check_last_row(lens, expected[-1], lambda: read(model, hidden[-1, picked], 1), what)
        check_inner_rows(lens, expected,
                         lambda name: reference_lens(model, hidden, *WRONG_NORMS[name])[:, picked],
                         what)


@secret_check("true_token_ranks")
def test_secret_true_token_ranks_of_a_random_lens(ex, secret):
    lens = random_lens(secret, tokens=(3, 9))
    ids = secret.integers(lens.shape[-1], 1, lens.shape[1])  # (1, T)
    given = ids[0].clone() if secret.choice([True, False]) else ids.clone()  # (T,) or (1, T)
    ranks = ex.true_token_ranks(lens.clone(), given)
    check_true_ranks(ranks, lens, ids,
                     f"true_token_ranks of a random lens {tuple(lens.shape)}{repeat_hint()}")


@secret_check("target_rank_by_layer")
def test_secret_target_rank_by_layer_of_a_random_lens(ex, secret):
    lens = random_lens(secret)
    target = secret.integer(0, lens.shape[-1] - 1)
    n_positions = lens.shape[1]
    position = secret.choice([*range(-n_positions, -1), *range(n_positions - 1)])  # not the last
    ranks = ex.target_rank_by_layer(lens.clone(), target, position=position)
    check_target_ranks(ranks, lens, target, position,
                       f"target_rank_by_layer of a random lens {tuple(lens.shape)}, target "
                       f"{target}, position {position}{repeat_hint()}")


@secret_check("top_tokens_by_layer")
def test_secret_top_tokens_by_layer_of_a_random_lens(ex, tiny_gpt2, secret):
    _, tokenizer = tiny_gpt2
    lens = random_lens(secret, vocab=(300, 3000))
    position = secret.integer(-lens.shape[1], lens.shape[1] - 1)
    k = secret.integer(1, 10)
    top = ex.top_tokens_by_layer(lens.clone(), tokenizer, position=position, k=k)
    check_top_tokens(top, lens, tokenizer, position, k,
                     f"top_tokens_by_layer(lens {tuple(lens.shape)}, position={position}, k={k})"
                     + repeat_hint())


@secret_check("plot_logit_lens")
def test_secret_logit_lens_figure_of_a_random_lens(ex, tiny_gpt2, secret, figures):
    _, tokenizer = tiny_gpt2
    lens, ids = random_printable_lens(secret, tokenizer)
    fig = ex.plot_logit_lens(lens.clone(), tokenizer, ids.clone())
    if isinstance(fig, Figure):
        figures.append(fig)
    ax, heatmap = lens_heatmap(fig)
    what = f"the logit-lens picture of a random lens {tuple(lens.shape)}{repeat_hint()}"
    check_lens_image(heatmap, lens, what)
    check_cell_texts(ax, heatmap, lens, tokenizer, what)
    check_column_labels(ax, tokenizer, ids, what)


SECRET_TEXT_NAMES = ("penguin", "Kafka", "river", "owls", "library", "bread", "chess")


@secret_check("plot_rank_by_layer")
def test_secret_rank_figure_of_random_ranks(ex, secret, figures):
    n_hidden = secret.integer(2, 9)
    names = secret.some(SECRET_TEXT_NAMES)
    ranks = {}
    for name in names:
        r = secret.integers(secret.integer(2, 5000), n_hidden, secret.integer(1, 12))
        if secret.choice([True, False]):
            r[:, : r.shape[1] // 2 + 1] = 0  # a median rank of 0: the top token, drawn at 1
        ranks[name] = r
    fig = ex.plot_rank_by_layer({name: r.clone() for name, r in ranks.items()})
    if isinstance(fig, Figure):
        figures.append(fig)
    check_rank_lines(fig, ranks, f"the rank figure of {len(names)} texts over {n_hidden} layers"
                                 + repeat_hint())
