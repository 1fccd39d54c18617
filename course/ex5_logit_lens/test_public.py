"""Exercise 5: the logit lens (what each hidden state already predicts).

Every expected value here is computed in this file from the model's own modules and weights
(never from the solutions): hidden states straight from ``model(..., output_hidden_states=True)``,
the final norm called as a module, the unembedding as a matrix product with its weight, ranks by
sorting. The code under test comes only from the ``ex`` fixture.

The structure tests use a copy of the tiny GPT-2 whose final norm has random (fixed-seed)
weights and biases. The real tiny GPT-2's final norm starts as weight 1, bias 0, and with those
a LayerNorm applied twice gives nearly the same result as applied once, so norming the last
hidden state again would go unseen. SmolLM2 and GPT-2 tests check properties of the trained
models, with the numbers measured when they were written.

Speed: the tiny tests take milliseconds each. The SmolLM2 lens of the Kafka text takes about
2 s; the learner's lens is computed once and shared by the SmolLM2 tests.
"""

import copy

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from course.shared.diagnosis import diagnose  # noqa: E402
from course.shared.reference import log_probs_at_every_position  # noqa: E402
from course.shared.support import (  # noqa: E402
    check_message_names,
    check_shape,
    check_tensor,
    computed_once,
    drawn_heatmaps,
    expect,
    heatmap_axes,
    once_per_implementation,
    raises_clearly,
    reference_hidden_states,
    shared_results,  # noqa: F401 - a fixture
)

POSITIONS = [0, 3, -1]  # a selection that includes a negative index


# ----------------------------------------------------------------------------- reference values


def read(model, h, norm_times):
    """Log-probabilities of ``h`` (``(..., d_model)``) after the final norm ``norm_times`` times,
    unembedded as a matrix product with the output embedding's weight."""
    norm = kata.final_norm(model)
    weight = model.get_output_embeddings().weight.detach().float().cpu()  # (vocab, d_model)
    with torch.no_grad():
        for _ in range(norm_times):
            h = norm(h.to(model.device)).float().cpu()
        return torch.log_softmax(h @ weight.T, dim=-1)


def reference_lens(model, hidden, norm_inner=1, norm_last=0):
    """The logit lens computed here: inner layers normed ``norm_inner`` times, the last
    ``norm_last`` times (the correct lens is 1 and 0)."""
    n = hidden.shape[0]
    return torch.stack([read(model, hidden[i], norm_inner if i < n - 1 else norm_last) for i in range(n)])


def rank_bounds(rows, chosen):
    """The ranks ``chosen`` (ids, shape ``rows.shape[:-1]``) may rightly have in ``rows``: from
    the count of strictly better tokens to that count plus the ties (float32 log-probabilities
    do tie, and any order of equal tokens is correct)."""
    value = rows.gather(-1, chosen[..., None])
    return (rows > value).sum(-1), (rows >= value).sum(-1) - 1


def within(ranks, bounds, shift=0):
    low, high = bounds
    return ranks.shape == low.shape and bool(((ranks >= low + shift) & (ranks <= high + shift)).all())


def next_token_bounds(lens, ids, offset=1):
    """Rank bounds of token ``t + offset`` at position ``t``, ``(n_layers + 1, T - 1)`` each."""
    ids = ids.reshape(-1)
    chosen = ids[offset:len(ids) - 1 + offset] if offset else ids[:-1]
    return rank_bounds(lens[:, :-1], chosen[None, :].expand(lens.shape[0], -1))


def pairing_bounds(lens, ids, lens_from: int, ids_from: int):
    """Rank bounds of token ``t + ids_from`` in the lens row of position ``t + lens_from``, for
    t = 0 .. T - 2 (``lens_from`` and ``ids_from`` are 0 or 1)."""
    ids = ids.reshape(-1)
    n = len(ids) - 1
    chosen = ids[ids_from:ids_from + n][None, :].expand(lens.shape[0], -1)
    return rank_bounds(lens[:, lens_from:lens_from + n], chosen)


def layer_names(n):
    return ["Emb"] + [f"L{i}" for i in range(n - 1)]


@pytest.fixture(scope="module")
def lens_model(tiny_gpt2):
    """A copy of the tiny GPT-2 whose final norm has random weights and biases (fixed seed)."""

    def build():
        model = copy.deepcopy(tiny_gpt2[0])
        norm = kata.final_norm(model)
        generator = torch.Generator().manual_seed(5)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=generator))
            norm.bias.copy_(0.3 * torch.randn(norm.bias.shape, generator=generator))
        return model

    return computed_once(("ex5-lens-model", "tiny-gpt2"), build)


@pytest.fixture(scope="module")
def tiny(tiny_gpt2, lens_model):
    """The Kafka text on the lens model: ids, hidden states, the model's log-probabilities and
    the reference lens with its wrong variants."""
    _, tokenizer = tiny_gpt2

    def compute():
        ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]  # (1, 22)
        hidden = reference_hidden_states(lens_model, ids)  # (5, 22, 64)
        return {
            "ids": ids,
            "hidden": hidden,
            "model": log_probs_at_every_position(lens_model, ids),
            "lens": reference_lens(lens_model, hidden),
        }

    return computed_once(("ex5-kafka-lens", "tiny-gpt2"), compute)


WRONG_NORMS = {"no norm": (0, 0), "last normed": (1, 1), "inner twice": (2, 0)}


def wrong_lens(lens_model, tiny, name):
    """A wrongly normed lens (``WRONG_NORMS``), computed only when a diagnosis needs it."""
    return reference_lens(lens_model, tiny["hidden"], *WRONG_NORMS[name])


def as_lens(value, name="logit_lens"):
    return check_tensor(value, name).detach().float().cpu()


def close(a, b, atol=1e-4):
    return a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=1e-4)


def diagnose_log_distribution(lens, logits_like, name):
    """Fail, naming the mistake, unless every row of ``lens`` is a log-distribution."""
    totals = lens.exp().sum(-1)
    if torch.allclose(totals, torch.ones_like(totals), atol=1e-3):
        return
    if lens.min() >= 0 and torch.allclose(lens.sum(-1), torch.ones_like(totals), atol=1e-3):
        diagnose("lens-softmax-not-log-softmax",
                 f"{name}: each row sums to 1 and nothing is negative: these are probabilities "
                 f"(softmax); the lens gives log-probabilities, torch.log_softmax(logits, dim=-1)")
    if logits_like is not None and close(lens - lens.logsumexp(-1, keepdim=True), logits_like, 1e-3):
        diagnose("lens-raw-logits",
                 f"{name}: these are the raw logits, not log-probabilities: apply "
                 f"torch.log_softmax(..., dim=-1) after the unembedding")
    diagnose("lens-log-softmax-wrong-dim",
             f"{name}: exp() of each row sums to {totals.flatten()[0].item():.4g}, not 1: take "
             f"log-softmax over the vocabulary (dim=-1), not over the layers or the positions")


# ----------------------------------------------------------------------------- logit_lens: structure


def lens_and_sizes(ex, lens_model, tiny, **kwargs):
    """``ex.logit_lens`` of the tiny hidden states, and ``(n_hidden, n_tokens, vocab_size)``."""
    n_hidden, n_tokens, _ = tiny["hidden"].shape
    lens = check_tensor(ex.logit_lens(lens_model, tiny["hidden"], **kwargs), "logit_lens")
    return lens, (n_hidden, n_tokens, lens_model.config.vocab_size)


def test_logit_lens_shape_and_dtype(ex, lens_model, tiny):
    lens, (n_hidden, n_tokens, vocab_size) = lens_and_sizes(ex, lens_model, tiny)
    expect(tuple(lens.shape) != (n_hidden - 1, n_tokens, vocab_size), "lens-embedding-layer-dropped",
           f"logit_lens has {n_hidden - 1} layers, expected {n_hidden}: read every hidden "
           f"state, the embedding layer (index 0) included")
    check_shape(lens, (n_hidden, n_tokens, vocab_size), "logit_lens",
                "(n_layers + 1, T, vocab_size): one log-distribution per hidden state and position")
    assert lens.dtype == torch.float32, f"logit_lens should return float32, got {lens.dtype}"
    assert lens.device.type == "cpu", f"logit_lens should return a CPU tensor, got {lens.device}"
    assert not lens.requires_grad, (
        "the lens is part of an autograd graph: compute it under torch.no_grad()"
    )


def test_logit_lens_gives_log_probabilities(ex, lens_model, tiny):
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"]))
    logits = None
    if lens.shape == tiny["lens"].shape:
        logits = tiny["lens"]  # log-softmax is shift-invariant: compare after normalising
    diagnose_log_distribution(lens, logits, "logit_lens")


def test_logit_lens_last_layer_is_the_model_prediction(ex, lens_model, tiny):
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"]))
    last = lens[-1]
    if close(last, tiny["model"]):
        return
    if close(last, wrong_lens(lens_model, tiny, "last normed")[-1]):
        diagnose("lens-last-layer-normed-twice",
                 "the lens's last row went through the final norm again: hidden_states[-1] is "
                 "already normed inside the model, so norming it again applies the norm twice; "
                 "send the last hidden state straight to the unembedding")
    if lens.shape == tiny["lens"].shape and close(last - last.logsumexp(-1, keepdim=True), tiny["model"], 1e-3):
        diagnose("lens-raw-logits",
                 "the lens's last row is the model's raw logits, not log-probabilities: apply "
                 "torch.log_softmax(..., dim=-1)")
    worst = (last - tiny["model"]).abs().max().item() if last.shape == tiny["model"].shape else None
    pytest.fail(
        f"the lens's last row should equal the model's own log-probabilities, "
        f"log_softmax(model(ids).logits[0]); "
        + (f"largest difference {worst:.3g}" if worst is not None else f"got shape {tuple(last.shape)}")
    )


def test_logit_lens_norms_every_layer_but_the_last_once(ex, lens_model, tiny):
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"]))
    check_shape(lens, tuple(tiny["lens"].shape), "logit_lens")
    n = lens.shape[0]
    wrong = [i for i in range(n - 1) if not close(lens[i], tiny["lens"][i])]
    if not wrong:
        return
    no_norm, inner_twice = wrong_lens(lens_model, tiny, "no norm"), wrong_lens(lens_model, tiny, "inner twice")
    unnormed = [i for i in wrong if close(lens[i], no_norm[i])]
    twice = [i for i in wrong if close(lens[i], inner_twice[i])]
    if unnormed == [0] and wrong == [0]:
        diagnose("lens-embedding-layer-not-normed",
                 "the embedding layer (index 0) was unembedded without the final norm, while the "
                 "blocks' outputs were normed: every hidden state but the last needs the norm, "
                 "the embedding layer too")
    if unnormed and unnormed == wrong:
        diagnose("lens-inner-layers-not-normed",
                 f"layers {unnormed} were unembedded without the final norm: only the last "
                 f"hidden state is already normed; apply kata.final_norm(model) to every other "
                 f"one before model.get_output_embeddings()")
    if twice and twice == wrong:
        diagnose("lens-inner-layers-normed-twice",
                 f"layers {twice} went through the final norm twice: apply it exactly once")
    diagnose("lens-norm-not-the-models",
             f"layers {wrong} differ from unembed(final_norm(h)): use the model's own final norm "
             f"(kata.final_norm(model)), with its learned weight and bias, not a norm of your own")


def test_logit_lens_selects_positions(ex, lens_model, tiny):
    lens, (n_hidden, n_tokens, vocab_size) = lens_and_sizes(ex, lens_model, tiny,
                                                             positions=POSITIONS)
    lens = as_lens(lens)
    expect(tuple(lens.shape) != (n_hidden, n_tokens, vocab_size), "lens-positions-ignored",
           f"logit_lens(..., positions={POSITIONS}) returned all {n_tokens} positions: "
           f"read only the chosen ones, hidden_states[:, positions]")
    expect(tuple(lens.shape) != (len(POSITIONS), n_tokens, vocab_size), "lens-positions-wrong-axis",
           f"logit_lens(..., positions={POSITIONS}) has shape {tuple(lens.shape)}: the "
           f"positions picked layers; positions are the second axis, hidden_states[:, positions]")
    check_shape(lens, (n_hidden, len(POSITIONS), vocab_size), "logit_lens with positions",
                "(n_layers + 1, P, vocab_size)")
    expected = tiny["lens"][:, POSITIONS]
    if not close(lens, expected):
        pytest.fail(
            f"logit_lens(..., positions={POSITIONS}) should equal the full lens at those "
            f"positions (negative indices count from the end); largest difference "
            f"{(lens - expected).abs().max().item():.3g}"
        )


def test_logit_lens_reads_a_single_position(ex, lens_model, tiny):
    """One position (how a long text is read cheaply): the result is (n_layers + 1, 1, vocab_size)."""
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"], positions=[-1]))
    check_shape(lens, (tiny["hidden"].shape[0], 1, lens_model.config.vocab_size),
                "logit_lens with positions=[-1]")
    assert close(lens[:, 0], tiny["lens"][:, -1]), "logit_lens(..., positions=[-1]) is not the last position"


@pytest.mark.parametrize("case", ["no embedding layer", "a batch dimension"])
def test_logit_lens_rejects_bad_input(ex, lens_model, tiny, case):
    hidden = tiny["hidden"]
    arguments = {
        "no embedding layer": (hidden[1:], None),
        "a batch dimension": (hidden[:, None], None),
    }[case]
    why = {
        "no embedding layer": "hidden_states must hold n_layers + 1 states, the embedding layer first",
        "a batch dimension": "hidden_states is (n_layers + 1, T, d_model), without a batch dimension",
    }[case]
    # The docstring promises a ValueError: torch's own IndexError (or a shape error) is no check.
    raises_clearly(ValueError, lambda: ex.logit_lens(lens_model, *arguments),
                   f"logit_lens with {case}", f"Check the input first: {why}.",
                   "lens-input-not-checked")


def check_bad_position(ex, call, n_positions: int, situation: str, diagnosis: str) -> None:
    """A position that is not one of ``n_positions`` raises IndexError naming the valid range,
    the kata's one rule for positions (``kata.token_index``)."""
    message = raises_clearly(
        IndexError, call, situation,
        f"Check the position first: kata.token_index(position, {n_positions}, 'position') raises "
        "the IndexError and names the valid range.", diagnosis)
    check_message_names(message, [str(n_positions - 1)], f"{diagnosis}-range-not-named",
                        f"name the valid range of positions (-{n_positions}..{n_positions - 1})")


def test_logit_lens_rejects_a_position_out_of_range(ex, lens_model, tiny):
    n_tokens = tiny["hidden"].shape[1]
    check_bad_position(ex, lambda: ex.logit_lens(lens_model, tiny["hidden"], [0, n_tokens]),
                       n_tokens, f"logit_lens with positions [0, {n_tokens}] for {n_tokens} tokens",
                       "lens-position-not-checked")


# ----------------------------------------------------------------------------- ranks


def test_true_token_ranks(ex, tiny):
    ids, lens = tiny["ids"], tiny["lens"]
    ranks = check_tensor(ex.true_token_ranks(lens, ids), "true_token_ranks")
    n_hidden, n_tokens = lens.shape[:2]
    check_shape(ranks, (n_hidden, n_tokens - 1), "true_token_ranks",
                "(n_layers + 1, T - 1): the last position has no next token to check")
    expect(ranks.dtype == torch.int64, "ranks-not-int64",
           f"your true_token_ranks returned {ranks.dtype}: ranks are counts, int64 tensors")
    ranks = ranks.cpu().long()
    bounds = next_token_bounds(lens, ids)
    if within(ranks, bounds):
        return
    if within(ranks, bounds, shift=1):
        diagnose("rank-one-based",
                 "every rank is one too high: ranks are 0-based, the top token has rank 0 (count "
                 "the tokens with a strictly higher log-probability)")
    if within(ranks, next_token_bounds(lens, ids, offset=0)):
        diagnose("rank-current-token",
                 "these are the ranks of the current token: position t predicts the *next* "
                 "token, so pair lens[:, t] with input_ids[t + 1]")
    for lens_from, ids_from in ((1, 1), (1, 0)):  # the lens shifted instead of the tokens
        if within(ranks, pairing_bounds(lens, ids, lens_from, ids_from)):
            lens_part = "lens[:, 1:]" if lens_from else "lens[:, :-1]"
            ids_part = "input_ids[1:]" if ids_from else "input_ids[:-1]"
            diagnose("rank-next-token-shift", (
                f"your true_token_ranks pairs {lens_part} with {ids_part}, so the prediction "
                f"made at position t + {lens_from} is checked against token t + {ids_from}. "
                "Position t predicts the token that follows it, token t + 1: shift the tokens, "
                "not the lens, and pair lens[:, :-1] (positions 0 .. T - 2) with input_ids[1:] "
                "(tokens 1 .. T - 1)"))
    vocab_size = lens.shape[-1]
    if within(vocab_size - 1 - ranks, bounds):
        diagnose("rank-counts-lower",
                 "these ranks count the tokens *below* the true one: count those with a higher "
                 "log-probability, so that 0 is the top")
    low, high = bounds
    wrong = ((ranks < low) | (ranks > high)).nonzero()[0].tolist()
    diagnose("rank-wrong", (
        f"your true_token_ranks is wrong in {int(((ranks < low) | (ranks > high)).sum())} of "
        f"{ranks.numel()} places; e.g. layer {wrong[0]}, position {wrong[1]}: expected "
        f"{int(low[tuple(wrong)])}, got {int(ranks[tuple(wrong)])}. At position t the true token "
        f"is the next one, input_ids[t + 1] (here token {int(ids[0, wrong[1] + 1])}), and its "
        "rank is the number of tokens whose log-probability in lens[layer, t] is strictly "
        "higher than its own"))


def test_true_token_ranks_rejects_a_lens_of_selected_positions(ex, tiny):
    raises_clearly(
        ValueError, lambda: ex.true_token_ranks(tiny["lens"][:, POSITIONS], tiny["ids"]),
        f"true_token_ranks with a lens of {len(POSITIONS)} positions and "
        f"{tiny['ids'].shape[1]} tokens",
        "A lens of selected positions cannot be paired with every token: compare lens.shape[1] "
        "with the number of tokens and raise a ValueError.", "ranks-lens-positions-not-checked")


def test_true_token_ranks_on_a_known_lens(ex):
    """A hand-made lens of one layer over a 5-token vocabulary."""
    lens = torch.log_softmax(torch.tensor([[[5.0, 4, 3, 2, 1], [1, 2, 3, 4, 5], [0, 0, 9, 0, 0]]]), -1)
    ids = torch.tensor([[0, 0, 2]])
    ranks = check_tensor(ex.true_token_ranks(lens, ids), "true_token_ranks").cpu().long()
    # position 0 predicts token 0, its top (rank 0); position 1 predicts token 2, beaten by 3 and 4
    expected = torch.tensor([[0, 2]])
    if torch.equal(ranks, expected + 1):
        diagnose("rank-one-based", "the top token got rank 1: ranks are 0-based, the top token has rank 0")
    assert torch.equal(ranks, expected), (
        f"for the lens rows {lens[0].exp().round(decimals=2).tolist()} and next tokens [0, 2] "
        f"expected ranks {expected.tolist()}, got {ranks.tolist()}"
    )


def test_target_rank_by_layer(ex, tiny):
    target = 12833  # " insect"
    ranks = check_tensor(ex.target_rank_by_layer(tiny["lens"], target), "target_rank_by_layer")
    check_shape(ranks, (tiny["lens"].shape[0],), "target_rank_by_layer", "one rank per layer")
    expect(ranks.dtype == torch.int64, "ranks-not-int64",
           f"your target_rank_by_layer returned {ranks.dtype}: ranks are counts, int64 tensors")
    ranks = ranks.cpu().long()
    n_hidden = tiny["lens"].shape[0]
    bounds = rank_bounds(tiny["lens"][:, -1], torch.full((n_hidden,), target))
    if within(ranks, bounds, shift=1):
        diagnose("rank-one-based", "every rank is one too high: the top token has rank 0")
    assert within(ranks, bounds), (
        f"the rank of ' insect' at the last position, per layer: expected {bounds[0].tolist()}, "
        f"got {ranks.tolist()}"
    )
    at_zero = ex.target_rank_by_layer(tiny["lens"], target, position=0).cpu().long()
    if not within(at_zero, rank_bounds(tiny["lens"][:, 0], torch.full((n_hidden,), target))):
        diagnose("target-rank-wrong-position",
                 "target_rank_by_layer(..., position=0) should rank the target at position 0, "
                 "lens[:, position], not always at the last position")


def test_target_rank_by_layer_rejects_a_bad_target(ex, tiny):
    bad = tiny["lens"].shape[-1] + 3
    raises_clearly(ValueError, lambda: ex.target_rank_by_layer(tiny["lens"], bad),
                   f"target_rank_by_layer with target_id {bad} (the vocabulary has {bad - 3} tokens)",
                   "Check target_id first (kata.token_id(target_id, vocab_size) does).",
                   "lens-target-id-not-checked")


def test_target_rank_by_layer_rejects_a_position_out_of_range(ex, tiny):
    n_positions = tiny["lens"].shape[1]
    check_bad_position(ex, lambda: ex.target_rank_by_layer(tiny["lens"], 12833, n_positions),
                       n_positions, f"target_rank_by_layer with position {n_positions} of "
                       f"{n_positions}", "target-rank-position-not-checked")


# ----------------------------------------------------------------------------- top tokens


def test_top_tokens_by_layer(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    lens = tiny["lens"]
    top = ex.top_tokens_by_layer(lens, tokenizer, position=-1, k=5)
    assert isinstance(top, list) and len(top) == lens.shape[0], (
        f"top_tokens_by_layer should return a list with one entry per layer ({lens.shape[0]}), "
        f"got {type(top).__name__} of length {len(top) if hasattr(top, '__len__') else '?'}"
    )
    expected_ids = torch.topk(lens[:, -1], 5, dim=-1).indices.tolist()
    expected = [[tokenizer.decode([i]) for i in layer] for layer in expected_ids]
    got = [list(layer) for layer in top]
    if got == expected:
        return
    if all(len(layer) == 5 for layer in got):
        if got == [[tokenizer.convert_ids_to_tokens(i) for i in layer] for layer in expected_ids]:
            diagnose("token-text-raw-bpe",
                     "these are the tokenizer's internal pieces ('Ġinsect'): use "
                     "tokenizer.decode([token_id]), which gives the text with its leading space")
        if got == [[text.strip() for text in layer] for layer in expected]:
            diagnose("token-text-without-leading-space",
                     "the token texts lost their leading space: tokenizer.decode([token_id]) "
                     "gives ' insect', which is not the token 'insect'; do not strip or split")
        if got == [layer[::-1] for layer in expected]:
            diagnose("lens-top-tokens-lowest-first", "the tokens are in increasing order: most likely first")
    pytest.fail(f"expected the top 5 per layer, most likely first, e.g. layer 0: {expected[0]}, got {got[0]}")


def test_top_tokens_by_layer_position_and_k(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    top = ex.top_tokens_by_layer(tiny["lens"], tokenizer, position=2, k=3)
    expected = [[tokenizer.decode([i]) for i in layer]
                for layer in torch.topk(tiny["lens"][:, 2], 3, dim=-1).indices.tolist()]
    assert [list(layer) for layer in top] == expected, (
        f"top_tokens_by_layer(..., position=2, k=3): expected {expected[:2]}..., got {top[:2]}..."
    )


def test_top_tokens_by_layer_rejects_a_position_out_of_range(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    n_positions = tiny["lens"].shape[1]
    check_bad_position(ex, lambda: ex.top_tokens_by_layer(tiny["lens"], tokenizer, -n_positions - 1),
                       n_positions, f"top_tokens_by_layer with position {-n_positions - 1} of "
                       f"{n_positions}", "top-tokens-position-not-checked")


# ----------------------------------------------------------------------------- the lens picture


def lens_heatmap(fig):
    """``(ax, heatmap)``: the logit-lens picture's first heatmap and its axes, by any call."""
    axes = heatmap_axes(fig)
    assert axes, "no heatmap in the figure: draw the top log-probabilities with ax.imshow"
    return axes[0], drawn_heatmaps(axes[0])[0]


def cell_texts(ax, heatmap) -> dict:
    """``{(position, layer): text}``: the texts written inside a cell of ``heatmap`` (column
    ``position``, row ``layer``), wherever the plotting call centres its cells."""
    cells = {}
    for text in ax.texts:
        x, y = text.get_position()
        cell = heatmap.cell_at(float(x), float(y))
        if cell is not None:
            cells[(cell[1], cell[0])] = text.get_text()
    return cells


def tiny_lens_figure(ex, tokenizer, tiny):
    """``ex.plot_logit_lens`` of the tiny lens, drawn once per module under test for the tests
    that only read the figure (each would otherwise draw the same figure again)."""

    def compute():
        fig = ex.plot_logit_lens(tiny["lens"], tokenizer, tiny["ids"])
        assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
        return fig

    return once_per_implementation(ex, "ex5-tiny-lens-figure", compute)


def test_plot_logit_lens_colours_and_texts(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    lens, ids = tiny["lens"], tiny["ids"]
    n_hidden, n_tokens, _ = lens.shape
    fig = tiny_lens_figure(ex, tokenizer, tiny)
    ax, heatmap = lens_heatmap(fig)
    image = heatmap.values
    top = lens.max(dim=-1)
    expected = top.values.numpy()
    if image.shape == expected.T.shape and np.allclose(image, expected.T, atol=1e-4):
        diagnose("lens-plot-transposed",
                 f"the image has the positions as rows ({image.shape}): rows are layers, "
                 f"columns positions, shape (n_layers + 1, T)")
    if image.shape != expected.shape and image.shape[-1] == lens.shape[-1]:
        diagnose("lens-plot-max-over-wrong-dim",
                 f"the image has shape {image.shape}: the maximum was taken over the layers or "
                 f"positions; take it over the vocabulary, lens.max(dim=-1)")
    assert image.shape == expected.shape, (
        f"the image should be (n_layers + 1, T) = {expected.shape}, got {image.shape}"
    )
    assert np.allclose(image, expected, atol=1e-4), (
        "the colours should be each cell's top log-probability, lens.max(dim=-1).values"
    )
    expect(heatmap.rows_up, "lens-plot-output-at-bottom", (
        "in your picture the output (the last hidden state) is the bottom row and the "
        "embedding layer the top one: imshow puts row 0 at the top unless told otherwise. "
        "Pass origin='lower' to ax.imshow so that row 0 (Emb) is at the bottom and the "
        "layers climb towards the output, as the model computes them"))
    cells = cell_texts(ax, heatmap)
    missing = [(t, i) for i in range(n_hidden) for t in range(n_tokens) if (t, i) not in cells]
    if missing:
        t, i = missing[0]
        x, y = heatmap.centres[i, t]
        pytest.fail(
            f"no text in {len(missing)} of the {n_hidden * n_tokens} cells (e.g. layer {i}, "
            f"position {t}, drawn around x={x:g}, y={y:g}): write each cell's top token at "
            "its centre, ax.text(position, layer, text) over ax.imshow")
    wrong = []
    for i in range(n_hidden):
        for t in range(n_tokens):
            want = tokenizer.decode([int(top.indices[i, t])]).strip()
            got = cells[(t, i)].strip()
            if not (got and want.startswith(got) and len(got) >= min(4, len(want))):
                wrong.append((i, t, want, got))
    if wrong:
        by_positions = lens.max(dim=1).indices  # (n_hidden, vocab): a wrong-dimension max
        i, t, want, got = wrong[0]
        if got == tokenizer.decode([int(by_positions[i, t])]).strip():
            diagnose("lens-plot-max-over-wrong-dim",
                     f"cell (layer {i}, position {t}) shows {got!r}, not the top token {want!r}: "
                     f"take the argmax over the vocabulary, the last dimension")
        pytest.fail(
            f"{len(wrong)} cells show the wrong token; layer {i}, position {t}: expected "
            f"{want!r} (the top token, tokenizer.decode of lens[{i}, {t}].argmax()), got {got!r}"
        )


def test_plot_logit_lens_labels(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    lens, ids = tiny["lens"], tiny["ids"]
    fig = tiny_lens_figure(ex, tokenizer, tiny)
    ax, _ = lens_heatmap(fig)
    ylabels = [label.get_text() for label in ax.get_yticklabels()]
    assert ylabels == layer_names(lens.shape[0]), (
        f"the rows should be labelled {layer_names(lens.shape[0])}, got {ylabels}"
    )
    xlabels = [label.get_text().strip() for label in ax.get_xticklabels()]
    expected = [tokenizer.decode([i]).strip() for i in ids[0].tolist()]
    assert xlabels == expected, (
        f"the columns should be labelled with the input tokens {expected[:4]}..., got {xlabels[:4]}..."
    )
    assert ax.get_xlabel() and ax.get_ylabel(), "label both axes ('Input token', 'Layer')"
    assert len(fig.axes) >= 2, "add a colorbar (fig.colorbar) so the colours can be read"


def test_plot_logit_lens_is_legible_for_31_layers(ex, tiny_gpt2):
    """SmolLM2 has 31 hidden states: every row must have room for its texts."""
    _, tokenizer = tiny_gpt2
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(31, 6, 400, generator=generator)
    logits[..., :256] -= 100  # the top tokens are merges (ids 256 on), printable text
    lens = torch.log_softmax(logits, dim=-1)
    ids = torch.arange(100, 106)[None]
    fig = ex.plot_logit_lens(lens, tokenizer, ids)
    try:
        ax, heatmap = lens_heatmap(fig)
        assert heatmap.values.shape == (31, 6), (
            "the heatmap should be (31, 6) for 31 layers and 6 positions")
        height_points = ax.get_window_extent().height * 72 / fig.dpi
        row_points = height_points / 31
        sizes = [text.get_fontsize() for text in ax.texts]
        assert sizes and max(sizes) <= row_points, (
            f"with 31 layers each row is {row_points:.1f} points tall, but the cell texts are "
            f"{max(sizes) if sizes else 0:g} points: make the figure taller (about 0.3 inch per "
            f"layer) or the texts smaller (about 7 points)"
        )
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- the rank plot


def test_plot_rank_by_layer(ex):
    generator = torch.Generator().manual_seed(1)
    ranks = {
        "penguin": torch.randint(0, 5000, (5, 10), generator=generator),
        "Kafka": torch.randint(0, 5000, (5, 21), generator=generator),
    }
    ranks["Kafka"][:, :11] = 0  # the Kafka text's median rank is 0 at every layer (its mean is not)
    fig = ex.plot_rank_by_layer(ranks)
    try:
        assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
        ax = fig.axes[0]
        assert ax.get_yscale() == "log", (
            f"the y axis should be logarithmic (ax.set_yscale('log')), got {ax.get_yscale()!r}"
        )
        lines = [line for line in ax.get_lines() if len(line.get_ydata()) == 5]
        labels = sorted(line.get_label() for line in lines)
        assert labels == sorted(ranks), (
            f"draw one line per text, labelled with its key {sorted(ranks)}; got lines {labels}"
        )
        legend = ax.get_legend()
        assert legend is not None and sorted(t.get_text() for t in legend.get_texts()) == sorted(ranks), (
            "add a legend naming the texts (ax.legend())"
        )
        for line in lines:
            r = ranks[line.get_label()].float()
            y = np.asarray(line.get_ydata(), float)
            x = np.asarray(line.get_xdata(), float)
            assert np.allclose(x, np.arange(5)), f"x should be the layers 0..4, got {x.tolist()}"
            lower = r.median(dim=1).values.numpy() + 1
            middle = np.median(r.numpy(), axis=1) + 1
            if np.allclose(y, lower) or np.allclose(y, middle):
                continue
            if np.allclose(y, lower - 1) or np.allclose(y, middle - 1):
                diagnose("rank-plot-zero-on-log-axis",
                         f"the line for {line.get_label()!r} is the median rank itself: a log axis "
                         f"cannot show rank 0 (the top token), so draw median + 1")
            if np.allclose(y, r.mean(dim=1).numpy() + 1):
                diagnose("rank-plot-mean-not-median",
                         f"the line for {line.get_label()!r} is the mean rank: one badly ranked "
                         f"token drags the mean up; draw the median")
            pytest.fail(f"the line for {line.get_label()!r} should be median rank + 1: "
                        f"expected {lower.tolist()}, got {y.tolist()}")
        assert ax.get_xlabel() and ax.get_ylabel(), "label both axes"
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- SmolLM2

@pytest.fixture(scope="module")
def smollm2_kafka(smollm2):
    model, tokenizer = smollm2

    def compute():
        ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
        return {"ids": ids, "hidden": reference_hidden_states(model, ids), "model": log_probs_at_every_position(model, ids)}

    return computed_once(("ex5-kafka", "smollm2"), compute)


def learner_lens(ex, model, reference):
    """The learner's lens of the Kafka text (134 MiB), computed once per module under test and
    freed when this file's tests are done."""
    return once_per_implementation(ex, "ex5-smollm2-kafka-lens",
                                   lambda: as_lens(ex.logit_lens(model, reference["hidden"])))


def learner_true_ranks(ex, smollm2, smollm2_kafka):
    """The learner's lens of the Kafka text on SmolLM2, and its ``true_token_ranks``."""
    lens = learner_lens(ex, smollm2[0], smollm2_kafka)
    return lens, check_tensor(ex.true_token_ranks(lens, smollm2_kafka["ids"]), "true_token_ranks")


def mean_true_log_prob(lens, ids):
    ids = ids.reshape(-1)
    return lens[:, :-1].gather(-1, ids[1:][None, :, None].expand(lens.shape[0], -1, 1))[..., 0].mean(1)


@pytest.mark.trained
def test_smollm2_last_layer_is_the_model_prediction(ex, smollm2, smollm2_kafka):
    model, _ = smollm2
    lens = learner_lens(ex, model, smollm2_kafka)
    n_hidden = len(kata.blocks(model)) + 1
    check_shape(lens, (n_hidden, smollm2_kafka["ids"].shape[1], model.config.vocab_size), "logit_lens on SmolLM2")
    worst = (lens[-1] - smollm2_kafka["model"]).abs().max().item()
    if worst > 1e-4:
        normed = read(model, smollm2_kafka["hidden"][-1], 1)
        if close(lens[-1], normed):
            diagnose("lens-last-layer-normed-twice",
                     "on SmolLM2 the lens's last row went through the final RMSNorm again: "
                     "hidden_states[-1] is already normed; send it straight to the unembedding")
        pytest.fail(f"on SmolLM2 the lens's last row differs from the model's log-probabilities "
                    f"by up to {worst:.3g} (measured: identical to float precision)")


@pytest.mark.trained
def test_smollm2_lens_uses_the_learned_norm(ex, smollm2, smollm2_kafka):
    """SmolLM2's RMSNorm has trained weights: a norm without them reads other tokens."""
    model, _ = smollm2
    lens = learner_lens(ex, model, smollm2_kafka)
    middle = lens.shape[0] // 2
    expected = read(model, smollm2_kafka["hidden"][middle], 1)
    if not close(lens[middle], expected, 1e-3):
        diagnose("lens-norm-not-the-models",
                 f"on SmolLM2 layer {middle} differs from unembed(final_norm(h)) by up to "
                 f"{(lens[middle] - expected).abs().max().item():.3g}: use kata.final_norm(model), "
                 f"with its learned weight, not a norm of your own")


@pytest.mark.trained
def test_smollm2_embedding_layer_ranks_far_worse_than_the_output(ex, smollm2, smollm2_kafka):
    _, ranks = learner_true_ranks(ex, smollm2, smollm2_kafka)
    medians = ranks.float().median(dim=1).values
    assert medians[0] > 100 * (medians[-1] + 1), (
        f"on SmolLM2 the embedding layer's median rank of the true next token should be far worse "
        f"than the output's (measured: 26,015 against 5); got {medians[0]:.0f} against {medians[-1]:.0f}"
    )
    assert medians[-1] <= 20, (
        f"SmolLM2's output ranks the true next token of the Kafka text {medians[-1]:.0f} in the "
        f"median (measured: 5)"
    )


@pytest.mark.trained
def test_smollm2_lens_rises_in_the_last_third(ex, smollm2, smollm2_kafka):
    """The plain lens is nearly blind on SmolLM2 until its last blocks."""
    lens, ranks = learner_true_ranks(ex, smollm2, smollm2_kafka)
    check_shape(ranks, (lens.shape[0], lens.shape[1] - 1), "true_token_ranks on SmolLM2")
    log_probs = mean_true_log_prob(lens, smollm2_kafka["ids"])
    n_layers = lens.shape[0] - 1
    start = n_layers - n_layers // 3  # hidden state 20 of 30: the last third of the blocks follows
    rise = log_probs[-1] - log_probs[1:].min()
    last_third = log_probs[-1] - log_probs[start]
    assert last_third > 0.7 * rise, (
        f"on SmolLM2 the mean log-probability of the true next token should rise mostly in the "
        f"last third of the blocks (measured: from -25.2 after L19 to -4.7, 87% of the rise); got "
        f"{[round(v, 1) for v in log_probs.tolist()]}"
    )
    late = ranks.float().median(dim=1).values
    assert late[start] > 50 * (late[-1] + 1), (
        f"on SmolLM2 the median rank two thirds of the way through should still be poor (measured: "
        f"643 against 5 at the output); got {late[start]:.0f} against {late[-1]:.0f}"
    )


@pytest.mark.trained
def test_smollm2_insect_and_the_top_tokens(ex, smollm2, smollm2_kafka):
    model, tokenizer = smollm2
    lens = learner_lens(ex, model, smollm2_kafka)
    insect = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]
    ranks = check_tensor(ex.target_rank_by_layer(lens, insect), "target_rank_by_layer").long()
    logits = smollm2_kafka["model"][-1]
    output_rank = int((logits > logits[insect]).sum())
    assert int(ranks[-1]) == output_rank, (
        f"SmolLM2's output ranks ' insect' {output_rank} (0 = top); target_rank_by_layer gave {int(ranks[-1])}"
    )
    assert int(ranks[:-2].min()) > 1000, (
        f"up to two blocks before the end, the lens ranks ' insect' beyond 1,000 on SmolLM2 "
        f"(measured: 1,885 at best); got {ranks.tolist()}"
    )
    top = ex.top_tokens_by_layer(lens, tokenizer, position=-1, k=5)
    expected = [tokenizer.decode([i]) for i in torch.topk(logits, 5).indices.tolist()]
    assert list(top[-1]) == expected, f"the output's top 5 should be {expected}, got {top[-1]}"
    commas = sum(layer[0] == "," for layer in top)
    assert commas > len(top) // 2, (
        f"on SmolLM2 the lens's top token at the last position is ',' for most layers (measured: "
        f"24 of 31); got {[layer[0] for layer in top]}"
    )


# ----------------------------------------------------------------------------- GPT-2


@pytest.mark.trained
def test_gpt2_lens_reads_sensible_guesses_before_the_end(ex, gpt2):
    """The cleaner GPT-2 picture (from the logit-lens literature; not measured on this machine,
    where GPT-2 is not cached): the last row is the model's prediction, and the ranks of the true
    next token improve well before the last blocks."""
    model, tokenizer = gpt2
    ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
    hidden = reference_hidden_states(model, ids)
    lens = as_lens(ex.logit_lens(model, hidden))
    worst = (lens[-1] - log_probs_at_every_position(model, ids)).abs().max().item()
    assert worst <= 1e-4, f"on GPT-2 the lens's last row differs from the model's log-probabilities by {worst:.3g}"
    medians = check_tensor(ex.true_token_ranks(lens, ids), "true_token_ranks").float().median(dim=1).values
    n_layers = lens.shape[0] - 1
    two_thirds = n_layers - n_layers // 3
    assert medians[-1] < 50, f"GPT-2's median rank of the true next token at the output: {medians[-1]:.0f}"
    assert medians[two_thirds] * 10 < medians[0], (
        f"on GPT-2 the lens should already rank the true next token far better two thirds of the "
        f"way through than at the embeddings; got medians {medians.tolist()}"
    )


# ----------------------------------------------------------------------------- secret checks
# Every public function again, on inputs drawn from a seed only the grader knows (course/shared/secret.py):
# a GPT-2 of random sizes with a random final norm, lenses of random sizes, random targets,
# positions and k. Their points count only if these pass.

from course.shared.secret import repeat_hint, secret, secret_check  # noqa: E402,F401 - secret: a fixture
from course.shared.support import figures  # noqa: E402,F401 - a fixture


def random_lens_model(secret):
    """A freshly initialised GPT-2 of random sizes (1-4 blocks) whose final norm has random
    weights and biases (so a norm applied twice, or not at all, shows), in eval mode."""
    from transformers import GPT2Config, GPT2LMHeadModel

    heads = secret.integer(1, 4)
    config = GPT2Config(n_layer=secret.integer(1, 4), n_head=heads,
                        n_embd=heads * secret.integer(2, 6), vocab_size=secret.integer(60, 400),
                        n_positions=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(secret.rng.getrandbits(63))
        model = GPT2LMHeadModel(config).eval()
        norm = kata.final_norm(model)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape))
            norm.bias.copy_(0.3 * torch.randn(norm.bias.shape))
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
    picks = torch.randint(0, len(allowed), (1, lens.shape[1]), generator=secret.generator)
    return lens, allowed[picks]


@secret_check("logit_lens")
def test_secret_logit_lens_of_a_model_of_random_sizes(ex, secret):
    model = random_lens_model(secret)
    ids = secret.token_ids(model.config.vocab_size, secret.integer(2, 12))
    hidden = reference_hidden_states(model, ids)
    n_tokens = hidden.shape[1]
    positions = None
    if secret.choice([True, False]):
        positions = [secret.integer(-n_tokens, n_tokens - 1) for _ in range(secret.integer(1, 4))]
    expected = reference_lens(model, hidden)
    expected = expected if positions is None else expected[:, positions]
    lens = as_lens(ex.logit_lens(model, hidden, positions=positions))
    what = (f"logit_lens of a GPT-2 of {model.config.n_layer} blocks, {n_tokens} tokens, "
            f"positions={positions}")
    check_shape(lens, tuple(expected.shape), what, "(n_layers + 1, P, vocab_size)" + repeat_hint())
    if close(lens, expected):
        return
    picked = slice(None) if positions is None else positions
    if not close(lens[-1], expected[-1]):
        if close(lens[-1], read(model, hidden[-1, picked], 1)):
            diagnose("lens-last-layer-normed-twice",
                     f"{what}: the last row went through the final norm again: hidden_states[-1] "
                     "is already normed; send it straight to the unembedding" + repeat_hint())
    else:
        wrong = [i for i in range(len(lens) - 1) if not close(lens[i], expected[i])]
        no_norm = reference_lens(model, hidden, 0, 0)[:, picked]
        if wrong == [0] and len(lens) > 2 and close(lens[0], no_norm[0]):  # blocks normed
            diagnose("lens-embedding-layer-not-normed",
                     f"{what}: the embedding layer (index 0) was unembedded without the final "
                     "norm: every hidden state but the last needs it" + repeat_hint())
        if all(close(lens[i], no_norm[i]) for i in wrong):
            diagnose("lens-inner-layers-not-normed",
                     f"{what}: layers {wrong} were unembedded without the final norm: apply "
                     "kata.final_norm(model) to every hidden state but the last" + repeat_hint())
        twice = reference_lens(model, hidden, 2, 0)[:, picked]
        if all(close(lens[i], twice[i]) for i in wrong):
            diagnose("lens-inner-layers-normed-twice",
                     f"{what}: layers {wrong} went through the final norm twice: apply it once"
                     + repeat_hint())
    pytest.fail(f"{what} differs from unembed(final_norm(h)) (the last hidden state without the "
                f"norm) by up to {(lens - expected).abs().max().item():.3g}" + repeat_hint())


@secret_check("true_token_ranks")
def test_secret_true_token_ranks_of_a_random_lens(ex, secret):
    lens = random_lens(secret, tokens=(3, 9))
    ids = torch.randint(0, lens.shape[-1], (1, lens.shape[1]), generator=secret.generator)
    given = ids[0] if secret.choice([True, False]) else ids  # (T,) or (1, T)
    ranks = check_tensor(ex.true_token_ranks(lens, given), "true_token_ranks")
    expect(ranks.dtype == torch.int64, "ranks-not-int64",
           f"your true_token_ranks returned {ranks.dtype}: ranks are counts, int64 tensors")
    ranks = ranks.cpu().long()
    bounds = next_token_bounds(lens, ids)
    what = f"true_token_ranks of a random lens {tuple(lens.shape)}"
    if within(ranks, bounds):
        return
    if within(ranks, bounds, shift=1):
        diagnose("rank-one-based", f"{what}: every rank is one too high: the top token has rank 0"
                 + repeat_hint())
    if within(ranks, next_token_bounds(lens, ids, offset=0)):
        diagnose("rank-current-token", f"{what}: these are the ranks of the current token: "
                 "pair lens[:, t] with input_ids[t + 1]" + repeat_hint())
    diagnose("rank-wrong", f"{what}: expected {bounds[0].tolist()}, got "
             f"{ranks.tolist() if ranks.shape == bounds[0].shape else tuple(ranks.shape)}: the "
             "rank of input_ids[t + 1] at position t is the number of tokens with a strictly "
             "higher log-probability" + repeat_hint())


@secret_check("target_rank_by_layer")
def test_secret_target_rank_by_layer_of_a_random_lens(ex, secret):
    lens = random_lens(secret)
    target = secret.integer(0, lens.shape[-1] - 1)
    position = secret.integer(-lens.shape[1], lens.shape[1] - 1)
    ranks = check_tensor(ex.target_rank_by_layer(lens, target, position=position),
                         "target_rank_by_layer")
    expect(ranks.dtype == torch.int64, "ranks-not-int64",
           f"your target_rank_by_layer returned {ranks.dtype}: ranks are counts, int64 tensors")
    ranks = ranks.cpu().long()
    n_hidden = lens.shape[0]
    bounds = rank_bounds(lens[:, position], torch.full((n_hidden,), target))
    what = (f"target_rank_by_layer of a random lens {tuple(lens.shape)}, target {target}, "
            f"position {position}")
    if within(ranks, bounds):
        return
    if within(ranks, bounds, shift=1):
        diagnose("rank-one-based", f"{what}: every rank is one too high: the top token has rank 0"
                 + repeat_hint())
    if within(ranks, rank_bounds(lens[:, -1], torch.full((n_hidden,), target))):
        diagnose("target-rank-wrong-position", f"{what}: these are the ranks at the last position;"
                 " rank the target at lens[:, position]" + repeat_hint())
    pytest.fail(f"{what}: expected {bounds[0].tolist()}, got {ranks.tolist()}" + repeat_hint())


@secret_check("top_tokens_by_layer")
def test_secret_top_tokens_by_layer_of_a_random_lens(ex, tiny_gpt2, secret):
    _, tokenizer = tiny_gpt2
    lens = random_lens(secret, vocab=(300, 3000))
    position = secret.integer(-lens.shape[1], lens.shape[1] - 1)
    k = secret.integer(1, 10)
    top = ex.top_tokens_by_layer(lens, tokenizer, position=position, k=k)
    expected_ids = torch.topk(lens[:, position], k, dim=-1).indices.tolist()
    expected = [[tokenizer.decode([i]) for i in layer] for layer in expected_ids]
    got = [list(layer) for layer in top] if isinstance(top, list) else top
    if got == expected:
        return
    what = f"top_tokens_by_layer(lens {tuple(lens.shape)}, position={position}, k={k})"
    if isinstance(got, list) and all(len(layer) == k for layer in got):
        if got == [[tokenizer.convert_ids_to_tokens(i) for i in layer] for layer in expected_ids]:
            diagnose("token-text-raw-bpe",
                     f"{what}: these are the tokenizer's internal pieces ('Ġinsect'): use "
                     "tokenizer.decode([token_id])" + repeat_hint())
        if got == [[text.strip() for text in layer] for layer in expected]:
            diagnose("token-text-without-leading-space",
                     f"{what}: the token texts lost their leading space: do not strip them"
                     + repeat_hint())
        if got == [layer[::-1] for layer in expected]:
            diagnose("lens-top-tokens-lowest-first",
                     f"{what}: the tokens are in increasing order: most likely first" + repeat_hint())
    pytest.fail(f"{what}: expected {expected[:2]}..., got {got[:2] if isinstance(got, list) else got}"
                + repeat_hint())


@secret_check("plot_logit_lens")
def test_secret_logit_lens_figure_of_a_random_lens(ex, tiny_gpt2, secret, figures):
    _, tokenizer = tiny_gpt2
    lens, ids = random_printable_lens(secret, tokenizer)
    n_hidden, n_tokens, _ = lens.shape
    fig = ex.plot_logit_lens(lens, tokenizer, ids)
    assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
    figures.append(fig)
    ax, heatmap = lens_heatmap(fig)
    image = heatmap.values
    top = lens.max(dim=-1)
    expected = top.values.numpy()
    what = f"the logit-lens picture of a random lens {tuple(lens.shape)}"
    if image.shape == expected.T.shape and image.shape != expected.shape:
        diagnose("lens-plot-transposed",
                 f"{what}: the image has the positions as rows ({image.shape}): rows are layers, "
                 "columns positions" + repeat_hint())
    assert image.shape == expected.shape and np.allclose(image, expected, atol=1e-4), (
        f"{what}: the image should be each cell's top log-probability, lens.max(dim=-1).values, "
        f"shape {expected.shape}, got shape {image.shape}" + repeat_hint())
    expect(heatmap.rows_up, "lens-plot-output-at-bottom",
           f"{what}: the output (the last hidden state) is the bottom row: pass origin='lower' "
           "to ax.imshow" + repeat_hint())
    cells = cell_texts(ax, heatmap)
    for i in range(n_hidden):
        for t in range(n_tokens):
            want = tokenizer.decode([int(top.indices[i, t])]).strip()
            got = cells.get((t, i), "").strip()
            if not (got and want.startswith(got) and len(got) >= min(4, len(want))):
                if got and got == tokenizer.decode([int(lens.max(dim=1).indices[i, t])]).strip():
                    diagnose("lens-plot-max-over-wrong-dim",
                             f"{what}: cell (layer {i}, position {t}) shows {got!r}, not the top "
                             f"token {want!r}: take the argmax over the vocabulary" + repeat_hint())
                pytest.fail(f"{what}: cell (layer {i}, position {t}) should show {want!r} (the top "
                            f"token, tokenizer.decode of lens[{i}, {t}].argmax()), got {got!r}"
                            + repeat_hint())
    xlabels = [label.get_text().strip() for label in ax.get_xticklabels()]
    expected_labels = [tokenizer.decode([i]).strip() for i in ids[0].tolist()]
    assert xlabels == expected_labels, (
        f"{what}: the columns should be labelled with the input tokens {expected_labels}, got "
        f"{xlabels}" + repeat_hint())


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
    fig = ex.plot_rank_by_layer(ranks)
    assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
    figures.append(fig)
    ax = fig.axes[0]
    what = f"the rank figure of {len(names)} texts over {n_hidden} layers"
    assert ax.get_yscale() == "log", f"{what}: the y axis should be logarithmic" + repeat_hint()
    lines = {line.get_label(): line for line in ax.get_lines() if line.get_label() in ranks}
    assert sorted(lines) == sorted(names), (
        f"{what}: draw one line per text, labelled with its key {sorted(names)}; got "
        f"{sorted(line.get_label() for line in ax.get_lines())}" + repeat_hint())
    for name, line in lines.items():
        r = ranks[name].float()
        x = np.asarray(line.get_xdata(), float)
        y = np.asarray(line.get_ydata(), float)
        assert np.allclose(x, np.arange(n_hidden)), (
            f"{what}: x should be the layers 0..{n_hidden - 1}, got {x.tolist()}" + repeat_hint())
        lower = r.median(dim=1).values.numpy() + 1
        middle = np.median(r.numpy(), axis=1) + 1
        if np.allclose(y, lower) or np.allclose(y, middle):
            continue
        if np.allclose(y, lower - 1) or np.allclose(y, middle - 1):
            diagnose("rank-plot-zero-on-log-axis",
                     f"{what}: the line for {name!r} is the median rank itself: draw median + 1"
                     + repeat_hint())
        if np.allclose(y, r.mean(dim=1).numpy() + 1):
            diagnose("rank-plot-mean-not-median",
                     f"{what}: the line for {name!r} is the mean rank: draw the median" + repeat_hint())
        pytest.fail(f"{what}: the line for {name!r} should be median rank + 1: expected "
                    f"{lower.tolist()}, got {y.tolist()}" + repeat_hint())
