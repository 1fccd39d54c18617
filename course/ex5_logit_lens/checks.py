"""Exercise 5's checks: the lens made from the model's own modules, and what a wrong one looks like.

Every expected value is computed here from the model's own modules and weights, never from the
solution: hidden states straight from ``model(..., output_hidden_states=True)``, the final norm
called as a module, the unembedding as a matrix product with its weight, ranks as counts of
better tokens (with the ties any order may put first or last). They are computed from the
test's own inputs before the function under test sees them (it gets copies). Each ``check_*``
function reads a result and, when it is wrong, names the mistake by the shape of its wrongness
(the last hidden state normed again, the inner ones not normed, ranks counted from 1, the
current token ranked instead of the next...) through :func:`~course.shared.diagnosis.diagnose`,
with the id the mistakes catalogue uses.

The tiny tests use a copy of the tiny GPT-2 whose final norm has random (fixed-seed) weights and
biases: the real tiny GPT-2's final norm starts as weight 1, bias 0, and with those a LayerNorm
applied twice gives nearly the same result as applied once, so norming the last hidden state
again would go unseen.
"""

import copy

import matplotlib

matplotlib.use("Agg")

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
)

POSITIONS = [0, 3, -1]  # a selection that includes a negative index
INSECT = 12833  # " insect" in GPT-2's vocabulary, the target of demo 3
#: The wrong ways to norm, as (times the inner hidden states are normed, times the last one is).
WRONG_NORMS = {"no norm": (0, 0), "last normed": (1, 1), "inner twice": (2, 0)}


# ----------------------------------------------------------------------------- reference values


def read(model, h, norm_times: int) -> torch.Tensor:
    """Log-probabilities of ``h`` (``(..., d_model)``) after the final norm ``norm_times`` times,
    unembedded as a matrix product with the output embedding's weight."""
    norm = kata.final_norm(model)
    weight = model.get_output_embeddings().weight.detach().float().cpu()  # (vocab, d_model)
    with torch.no_grad():
        for _ in range(norm_times):
            h = norm(h.to(model.device)).float().cpu()
        return torch.log_softmax(h @ weight.T, dim=-1)


def reference_lens(model, hidden, norm_inner: int = 1, norm_last: int = 0) -> torch.Tensor:
    """The logit lens computed here: inner hidden states normed ``norm_inner`` times, the last
    one ``norm_last`` times (the correct lens is 1 and 0)."""
    n = hidden.shape[0]
    return torch.stack([read(model, hidden[i], norm_inner if i < n - 1 else norm_last)
                        for i in range(n)])


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
    """The Kafka text on the lens model: ids, hidden states, the model's log-probabilities at
    every position and the reference lens. Tests pass the function copies of these."""
    _, tokenizer = tiny_gpt2

    def compute():
        ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]  # (1, 22)
        hidden = reference_hidden_states(lens_model, ids)  # (5, 22, 64)
        return {"ids": ids, "hidden": hidden,
                "model": log_probs_at_every_position(lens_model, ids),
                "lens": reference_lens(lens_model, hidden)}

    return computed_once(("ex5-kafka-lens", "tiny-gpt2"), compute)


def wrong_lens(lens_model, tiny, name: str) -> torch.Tensor:
    """A wrongly normed lens (``WRONG_NORMS``), computed only when a diagnosis needs it."""
    return reference_lens(lens_model, tiny["hidden"], *WRONG_NORMS[name])


@pytest.fixture(scope="module")
def smollm2_kafka(smollm2):
    model, tokenizer = smollm2

    def compute():
        ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
        return {"ids": ids, "hidden": reference_hidden_states(model, ids),
                "model": log_probs_at_every_position(model, ids)}

    return computed_once(("ex5-kafka", "smollm2"), compute)


def learner_lens(ex, model, reference):
    """Your lens of the Kafka text on SmolLM2 (134 MiB), computed once per module under test
    and freed when the file's tests are done."""
    return once_per_implementation(
        ex, "ex5-smollm2-kafka-lens",
        lambda: as_lens(ex.logit_lens(model, reference["hidden"].clone())))


def learner_true_ranks(ex, smollm2, smollm2_kafka):
    """Your lens of the Kafka text on SmolLM2, and your ``true_token_ranks`` of it."""
    lens = learner_lens(ex, smollm2[0], smollm2_kafka)
    return lens, check_tensor(ex.true_token_ranks(lens, smollm2_kafka["ids"].clone()),
                              "true_token_ranks")


def mean_true_log_prob(lens, ids) -> torch.Tensor:
    """``(n_layers + 1,)``: the mean log-probability each layer gives the true next tokens."""
    ids = ids.reshape(-1)
    following = ids[1:][None, :, None].expand(lens.shape[0], -1, 1)  # (n_layers + 1, T - 1, 1)
    return lens[:, :-1].gather(-1, following)[..., 0].mean(1)


def layer_names(n: int) -> list[str]:
    return ["Emb"] + [f"L{i}" for i in range(n - 1)]


def as_lens(value, name: str = "logit_lens") -> torch.Tensor:
    return check_tensor(value, name, "one log-distribution per hidden state and position")\
        .detach().float().cpu()


def close(a, b, atol: float = 1e-4) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=1e-4)


# ----------------------------------------------------------------------------- logit_lens


def check_lens_shape(lens, n_hidden: int, n_tokens: int, vocab_size: int, what: str,
                     positions=None) -> None:
    """``lens`` must be ``(n_hidden, P, vocab_size)``, P the number of ``positions`` (all
    ``n_tokens`` when None)."""
    shape, n_positions = tuple(lens.shape), n_tokens if positions is None else len(positions)
    expect(shape != (n_hidden - 1, n_positions, vocab_size), "lens-embedding-layer-dropped",
           f"{what} has {n_hidden - 1} layers, expected {n_hidden}: read every hidden state, "
           "the embedding layer (index 0) included")
    if positions is not None and n_positions != n_tokens:
        expect(shape != (n_hidden, n_tokens, vocab_size), "lens-positions-ignored",
               f"{what} returned all {n_tokens} positions: read only the chosen ones")
    if positions is not None and (n_positions, n_tokens) != (n_hidden, n_positions):
        expect(shape != (n_positions, n_tokens, vocab_size), "lens-positions-wrong-axis",
               f"{what} has shape {shape}: the positions picked layers; positions are the "
               "second axis of hidden_states, after the layers")
    check_shape(lens, (n_hidden, n_positions, vocab_size), what,
                "(n_layers + 1, P, vocab_size): one log-distribution per hidden state and position")


def diagnose_log_distribution(lens, log_probs, what: str) -> None:
    """Fail, naming the mistake, unless every row of ``lens`` is a log-distribution;
    ``log_probs`` (the right lens, or None) tells raw logits from other wrong rows."""
    totals = lens.exp().sum(-1)
    if torch.allclose(totals, torch.ones_like(totals), atol=1e-3):
        return
    if lens.min() >= 0 and torch.allclose(lens.sum(-1), torch.ones_like(totals), atol=1e-3):
        diagnose("lens-softmax-not-log-softmax",
                 f"{what}: each row sums to 1 and nothing is negative: these are probabilities "
                 "(a softmax); the lens gives their logarithms, log-probabilities")
    if log_probs is not None and close(lens - lens.logsumexp(-1, keepdim=True), log_probs, 1e-3):
        diagnose("lens-raw-logits",
                 f"{what}: these are the unembedding's raw logits, not log-probabilities: "
                 "normalise them over the vocabulary with a log-softmax")
    diagnose("lens-log-softmax-wrong-dim",
             f"{what}: exp() of each row sums to {totals.flatten()[0].item():.4g}, not 1: the "
             "log-softmax belongs over the vocabulary, the last dimension, not over the layers "
             "or the positions")


def check_last_row(lens, model_log_probs, normed_again, what: str, atol: float | None = None):
    """The lens's last row must be the model's own log-probabilities ``model_log_probs``;
    ``normed_again()`` is that row read after one more final norm (computed when needed).
    Within ``atol`` when given, else to :func:`close`'s tolerance."""
    last = lens[-1]
    same_shape = last.shape == model_log_probs.shape
    worst = (last - model_log_probs).abs().max().item() if same_shape else None
    if same_shape and (close(last, model_log_probs) if atol is None else worst <= atol):
        return
    if close(last, normed_again()):
        diagnose("lens-last-layer-normed-twice",
                 f"{what}: the last row went through the final norm again: the model already "
                 "normed its last hidden state, so norming it again applies the norm twice; the "
                 "last hidden state goes straight to the unembedding")
    if same_shape and close(last - last.logsumexp(-1, keepdim=True), model_log_probs, 1e-3):
        diagnose("lens-raw-logits",
                 f"{what}: the last row is the model's raw logits, not log-probabilities: "
                 "normalise them over the vocabulary with a log-softmax")
    pytest.fail(f"{what}: the last row should equal the model's own log-probabilities; "
                + (f"largest difference {worst:.3g}" if same_shape
                   else f"got shape {tuple(last.shape)}"))


def check_inner_rows(lens, expected, wrongly_normed, what: str) -> None:
    """Every row but the last must be ``expected`` (normed once); ``wrongly_normed(name)`` gives
    the lens normed as ``WRONG_NORMS[name]`` says (computed when a diagnosis needs it)."""
    n = lens.shape[0]
    wrong = [i for i in range(n - 1) if not close(lens[i], expected[i])]
    if not wrong:
        return
    no_norm, twice = wrongly_normed("no norm"), wrongly_normed("inner twice")
    unnormed = [i for i in wrong if close(lens[i], no_norm[i])]
    normed_twice = [i for i in wrong if close(lens[i], twice[i])]
    if unnormed == wrong == [0] and n > 2:  # the blocks' outputs were normed
        diagnose("lens-embedding-layer-not-normed",
                 f"{what}: the embedding layer (index 0) was unembedded without the final norm, "
                 "while the blocks' outputs were normed: every hidden state but the last needs "
                 "the norm, the embedding layer too")
    if unnormed and unnormed == wrong:
        diagnose("lens-inner-layers-not-normed",
                 f"{what}: layers {unnormed} were unembedded without the final norm: only the "
                 "last hidden state is already normed; every other one needs the model's final "
                 "norm before the unembedding")
    if normed_twice and normed_twice == wrong:
        diagnose("lens-inner-layers-normed-twice",
                 f"{what}: layers {normed_twice} went through the final norm twice: apply it "
                 "exactly once")
    diagnose("lens-norm-not-the-models",
             f"{what}: layers {wrong} differ from the unembedding of the model's final norm of "
             f"the hidden state (largest difference "
             f"{(lens[wrong] - expected[wrong]).abs().max():.3g}): use the model's own final "
             "norm (kata.final_norm), with its learned weight and bias, not a norm of your own")


def check_bad_position(call, n_positions: int, situation: str, diagnosis: str) -> None:
    """A position that is not one of ``n_positions`` raises IndexError naming the valid range,
    the kata's one rule for positions (``kata.token_index``)."""
    message = raises_clearly(
        IndexError, call, situation,
        "Check the position first (kata.token_index does, and names the valid range).",
        diagnosis)
    check_message_names(message, [str(n_positions - 1)], f"{diagnosis}-range-not-named",
                        f"name the valid range of positions (-{n_positions}..{n_positions - 1})")


# ----------------------------------------------------------------------------- ranks


def rank_bounds(rows, chosen):
    """The ranks ``chosen`` (ids, shape ``rows.shape[:-1]``) may rightly have in ``rows``: from
    the count of strictly better tokens to that count plus the ties (float32 log-probabilities
    do tie, and any order of equal tokens is correct)."""
    value = rows.gather(-1, chosen[..., None])
    return (rows > value).sum(-1), (rows >= value).sum(-1) - 1


def within(ranks, bounds, shift: int = 0) -> bool:
    low, high = bounds
    return (ranks.shape == low.shape
            and bool(((ranks >= low + shift) & (ranks <= high + shift)).all()))


def next_token_bounds(lens, ids, offset: int = 1):
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


def check_rank_tensor(ranks, shape: tuple, function: str, what: str, hint: str) -> torch.Tensor:
    """``ranks`` must be an int64 tensor of ``shape``; returns it on the CPU."""
    check_tensor(ranks, function, "ranks are counts, in a tensor")
    check_shape(ranks, shape, what, hint)
    expect(ranks.dtype == torch.int64, "ranks-not-int64",
           f"your {function} returned {ranks.dtype}: ranks are counts, int64 tensors")
    return ranks.cpu()


def check_true_ranks(ranks, lens, ids, what: str) -> None:
    """``ranks`` must be, at every layer and position t, the rank of token t + 1 in ``lens``
    (ties may fall either way); ``ids`` is ``(1, T)``."""
    n_hidden, n_tokens = lens.shape[:2]
    ranks = check_rank_tensor(ranks, (n_hidden, n_tokens - 1), "true_token_ranks", what,
                              "(n_layers + 1, T - 1): the last position has no next token to check")
    bounds = next_token_bounds(lens, ids)
    if within(ranks, bounds):
        return
    if within(ranks, bounds, shift=1):
        diagnose("rank-one-based",
                 f"{what}: every rank is one too high: ranks are 0-based, the top token has "
                 "rank 0 (count the tokens with a strictly higher log-probability)")
    if within(ranks, next_token_bounds(lens, ids, offset=0)):
        diagnose("rank-current-token",
                 f"{what}: these are the ranks of the current token: position t predicts the "
                 "*next* token, t + 1")
    for lens_from, ids_from in ((1, 1), (1, 0)):  # the lens shifted instead of the tokens
        if within(ranks, pairing_bounds(lens, ids, lens_from, ids_from)):
            diagnose("rank-next-token-shift", (
                f"{what}: the prediction made at position t + {lens_from} is checked against "
                f"token t + {ids_from}. Position t predicts the token that follows it: the "
                "predictions of positions 0 .. T - 2 are checked against tokens 1 .. T - 1 (the "
                "tokens shift, not the lens)"))
    if within(lens.shape[-1] - 1 - ranks, bounds):
        diagnose("rank-counts-lower",
                 f"{what}: these ranks count the tokens *below* the true one: count those with a "
                 "higher log-probability, so that 0 is the top")
    low, high = bounds
    bad = (ranks < low) | (ranks > high)
    layer, position = bad.nonzero()[0].tolist()
    diagnose("rank-wrong", (
        f"{what} is wrong in {int(bad.sum())} of {ranks.numel()} places; e.g. layer {layer}, "
        f"position {position}: expected {int(low[layer, position])}, got "
        f"{int(ranks[layer, position])}. At position t the true token is the next one (here "
        f"token {int(ids.reshape(-1)[position + 1])}), and its rank is the number of tokens "
        "with a strictly higher log-probability at that layer and position"))


def check_target_ranks(ranks, lens, target: int, position: int, what: str) -> None:
    """``ranks`` must be the rank of ``target`` at ``position`` in every layer of ``lens``."""
    n_hidden = lens.shape[0]
    ranks = check_rank_tensor(ranks, (n_hidden,), "target_rank_by_layer", what,
                              "one rank per layer")
    bounds = rank_bounds(lens[:, position], torch.full((n_hidden,), target))
    if within(ranks, bounds):
        return
    if within(ranks, bounds, shift=1):
        diagnose("rank-one-based", f"{what}: every rank is one too high: the top token has rank 0")
    if within(ranks, rank_bounds(lens[:, -1], torch.full((n_hidden,), target))):
        diagnose("target-rank-wrong-position",
                 f"{what}: these are the ranks at the last position; rank the target at the "
                 "position asked for")
    pytest.fail(f"{what}: expected {bounds[0].tolist()}, got {ranks.tolist()}: a rank counts "
                "the tokens with a strictly higher log-probability")


# ----------------------------------------------------------------------------- top tokens


def check_top_tokens(top, lens, tokenizer, position: int, k: int, what: str) -> None:
    """``top`` must be each layer's ``k`` most likely tokens at ``position``, decoded, most
    likely first."""
    expect(isinstance(top, list) and len(top) == lens.shape[0], "top-tokens-not-a-list", (
        f"{what} should be a list with one entry per layer ({lens.shape[0]}), got "
        f"{type(top).__name__} of length {len(top) if hasattr(top, '__len__') else '?'}"))
    expected_ids = torch.topk(lens[:, position], k, dim=-1).indices.tolist()
    expected = [[tokenizer.decode([i]) for i in layer] for layer in expected_ids]
    got = [list(layer) for layer in top]
    if got == expected:
        return
    if all(len(layer) == k for layer in got):
        if got == [[tokenizer.convert_ids_to_tokens(i) for i in layer] for layer in expected_ids]:
            diagnose("token-text-raw-bpe",
                     f"{what}: these are the tokenizer's internal pieces ('Ġinsect'): decoding "
                     "an id gives the text as it reads, with its leading space")
        if got == [[text.strip() for text in layer] for layer in expected]:
            diagnose("token-text-without-leading-space",
                     f"{what}: the token texts lost their leading space: ' insect' is one "
                     "token, 'insect' another; keep the text exactly as decoded")
        if got == [layer[::-1] for layer in expected]:
            diagnose("lens-top-tokens-lowest-first",
                     f"{what}: the tokens are in increasing order: most likely first")
    pytest.fail(f"{what}: expected the top {k} per layer, most likely first, e.g. layer 0: "
                f"{expected[0]}, got {got[0] if got else got}")


# ----------------------------------------------------------------------------- the pictures


def lens_heatmap(fig):
    """``(ax, heatmap)``: the logit-lens picture's first heatmap and its axes, by any call."""
    assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
    axes = heatmap_axes(fig)
    assert axes, "no heatmap in the figure: draw the top log-probabilities as an image"
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
        fig = ex.plot_logit_lens(tiny["lens"].clone(), tokenizer, tiny["ids"].clone())
        assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
        return fig

    return once_per_implementation(ex, "ex5-tiny-lens-figure", compute)


def check_lens_image(heatmap, lens, what: str) -> None:
    """The image must be each cell's top log-probability, layers as rows, the output on top."""
    image = heatmap.values
    expected = lens.max(dim=-1).values.numpy()  # (n_layers + 1, T)
    if image.shape == expected.T.shape != expected.shape and np.allclose(image, expected.T,
                                                                       atol=1e-4):
        diagnose("lens-plot-transposed",
                 f"{what}: the image has the positions as rows ({image.shape}): rows are "
                 "layers, columns positions, shape (n_layers + 1, T)")
    if image.shape != expected.shape and image.shape[-1] == lens.shape[-1]:
        diagnose("lens-plot-max-over-wrong-dim",
                 f"{what}: the image has shape {image.shape}: the maximum was taken over the "
                 "layers or positions; take it over the vocabulary, the last dimension")
    assert image.shape == expected.shape, (
        f"{what}: the image should be (n_layers + 1, T) = {expected.shape}, got {image.shape}")
    assert np.allclose(image, expected, atol=1e-4), (
        f"{what}: the colours should be each cell's top log-probability, the maximum over the "
        "vocabulary")
    expect(heatmap.rows_up, "lens-plot-output-at-bottom", (
        f"{what}: the output (the last hidden state) is the bottom row and the embedding layer "
        "the top one: an image puts row 0 at the top unless told otherwise. Put row 0 (Emb) at "
        "the bottom, so that the layers climb towards the output, as the model computes them"))


def check_cell_texts(ax, heatmap, lens, tokenizer, what: str) -> None:
    """Every cell must show its top token's text (cut to at least 4 characters)."""
    n_hidden, n_tokens, _ = lens.shape
    top = lens.max(dim=-1)
    cells = cell_texts(ax, heatmap)
    missing = [(t, i) for i in range(n_hidden) for t in range(n_tokens) if (t, i) not in cells]
    if missing:
        t, i = missing[0]
        x, y = heatmap.centres[i, t]
        pytest.fail(
            f"{what}: no text in {len(missing)} of the {n_hidden * n_tokens} cells (e.g. layer "
            f"{i}, position {t}, drawn around x={x:g}, y={y:g}): write each cell's top token "
            "at the cell's centre")
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
                     f"{what}: cell (layer {i}, position {t}) shows {got!r}, not the top token "
                     f"{want!r}: the top token is the maximum over the vocabulary, the last "
                     "dimension")
        pytest.fail(f"{what}: {len(wrong)} cells show the wrong token; layer {i}, position {t}: "
                    f"expected {want!r} (the top token at that layer and position), got {got!r}")


def check_column_labels(ax, tokenizer, ids, what: str) -> None:
    xlabels = [label.get_text().strip() for label in ax.get_xticklabels()]
    expected = [tokenizer.decode([i]).strip() for i in ids.reshape(-1).tolist()]
    assert xlabels == expected, (
        f"{what}: the columns should be labelled with the input tokens {expected[:4]}..., got "
        f"{xlabels[:4]}...")


def check_rank_lines(fig, ranks: dict, what: str) -> None:
    """One line per text on a log y axis: x the layers, y the median rank + 1."""
    assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
    ax = fig.axes[0]
    assert ax.get_yscale() == "log", (
        f"{what}: the y axis should be logarithmic (ranks run from 0 to the vocabulary's size), "
        f"got {ax.get_yscale()!r}")
    lines = {line.get_label(): line for line in ax.get_lines() if line.get_label() in ranks}
    assert sorted(lines) == sorted(ranks), (
        f"{what}: draw one line per text, labelled with its key {sorted(ranks)}; got lines "
        f"{sorted(line.get_label() for line in ax.get_lines())}")
    for name, line in lines.items():
        r = torch.as_tensor(ranks[name]).float()
        n_hidden = r.shape[0]
        x = np.asarray(line.get_xdata(), float)
        y = np.asarray(line.get_ydata(), float)
        assert np.allclose(x, np.arange(n_hidden)), (
            f"{what}: x should be the layers 0..{n_hidden - 1}, got {x.tolist()}")
        lower = r.median(dim=1).values.numpy() + 1  # torch's median: the lower middle value
        middle = np.median(r.numpy(), axis=1) + 1  # numpy's: the mean of the two middle values
        if np.allclose(y, lower) or np.allclose(y, middle):
            continue
        if np.allclose(y, lower - 1) or np.allclose(y, middle - 1):
            diagnose("rank-plot-zero-on-log-axis",
                     f"{what}: the line for {name!r} is the median rank itself: a log axis "
                     "cannot show rank 0 (the top token), so draw median + 1")
        if np.allclose(y, r.mean(dim=1).numpy() + 1):
            diagnose("rank-plot-mean-not-median",
                     f"{what}: the line for {name!r} is the mean rank: one badly ranked token "
                     "drags the mean up; draw the median")
        pytest.fail(f"{what}: the line for {name!r} should be median rank + 1: expected "
                    f"{lower.tolist()}, got {y.tolist()}")
