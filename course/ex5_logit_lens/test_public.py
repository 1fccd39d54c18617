"""Exercise 5: the logit lens (what each hidden state already predicts).

What each function must do, one behaviour per test. Every expected value comes from the model's
own modules and weights, never from the solution (``checks.py``); the code under test comes from
the ``ex`` fixture. The tiny tests read a copy of the tiny GPT-2 whose final norm has random
weights, so that a norm applied twice shows; the SmolLM2 and GPT-2 tests check what the lens
shows on trained models, with the numbers measured when they were written. The SmolLM2 lens of
the Kafka text takes about 2 s: yours is computed once and shared by the SmolLM2 tests.
"""

import matplotlib.pyplot as plt
import pytest
import torch

import kata
from course.shared.reference import log_probs_at_every_position
from course.shared.support import (
    check_shape,
    check_tensor,
    expect,
    raises_clearly,
    reference_hidden_states,
    shared_results,  # noqa: F401 - a fixture
)

from .checks import (  # noqa: F401 - lens_model, smollm2_kafka, tiny: fixtures
    INSECT,
    POSITIONS,
    as_lens,
    check_bad_position,
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
    layer_names,
    learner_lens,
    learner_true_ranks,
    lens_heatmap,
    lens_model,
    mean_true_log_prob,
    read,
    smollm2_kafka,
    tiny,
    tiny_lens_figure,
    wrong_lens,
)

# ----------------------------------------------------------------------------- logit_lens


def test_logit_lens_has_one_float32_row_per_hidden_state_without_a_graph(ex, lens_model, tiny):
    n_hidden, n_tokens, _ = tiny["hidden"].shape
    lens = check_tensor(ex.logit_lens(lens_model, tiny["hidden"].clone()), "logit_lens")
    check_lens_shape(lens, n_hidden, n_tokens, lens_model.config.vocab_size, "logit_lens")
    assert lens.dtype == torch.float32, f"logit_lens should return float32, got {lens.dtype}"
    assert lens.device.type == "cpu", f"logit_lens should return a CPU tensor, got {lens.device}"
    assert not lens.requires_grad, (
        "the lens is part of an autograd graph: nothing here needs gradients, so compute it "
        "where autograd records nothing")


def test_logit_lens_gives_log_probabilities(ex, lens_model, tiny):
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"].clone()))
    # log-softmax is shift-invariant: raw logits equal the lens once normalised
    diagnose_log_distribution(lens, tiny["lens"] if lens.shape == tiny["lens"].shape else None,
                              "logit_lens")


def test_logit_lens_last_row_is_the_models_own_prediction(ex, lens_model, tiny):
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"].clone()))
    check_last_row(lens, tiny["model"], lambda: wrong_lens(lens_model, tiny, "last normed")[-1],
                   "logit_lens")


def test_logit_lens_norms_every_hidden_state_but_the_last_once(ex, lens_model, tiny):
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"].clone()))
    check_shape(lens, tuple(tiny["lens"].shape), "logit_lens")
    check_inner_rows(lens, tiny["lens"], lambda name: wrong_lens(lens_model, tiny, name),
                     "logit_lens")


def test_logit_lens_reads_only_the_chosen_positions(ex, lens_model, tiny):
    n_hidden, n_tokens, _ = tiny["hidden"].shape
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"].clone(), positions=list(POSITIONS)))
    check_lens_shape(lens, n_hidden, n_tokens, lens_model.config.vocab_size,
                     f"logit_lens(..., positions={POSITIONS})", POSITIONS)
    expected = tiny["lens"][:, POSITIONS]
    if not close(lens, expected):
        pytest.fail(
            f"logit_lens(..., positions={POSITIONS}) should equal the full lens at those "
            f"positions (negative indices count from the end); largest difference "
            f"{(lens - expected).abs().max().item():.3g}")


def test_logit_lens_reads_a_single_position(ex, lens_model, tiny):
    """One position (how a long text is read cheaply): (n_layers + 1, 1, vocab_size)."""
    lens = as_lens(ex.logit_lens(lens_model, tiny["hidden"].clone(), positions=[-1]))
    check_shape(lens, (tiny["hidden"].shape[0], 1, lens_model.config.vocab_size),
                "logit_lens with positions=[-1]")
    assert close(lens[:, 0], tiny["lens"][:, -1]), (
        "logit_lens(..., positions=[-1]) is not the lens of the last position")


@pytest.mark.parametrize("case", ["no embedding layer", "a batch dimension"])
def test_logit_lens_rejects_hidden_states_of_the_wrong_shape(ex, lens_model, tiny, case):
    hidden = tiny["hidden"].clone()
    given, why = {
        "no embedding layer": (hidden[1:], "hidden_states must hold n_layers + 1 states, the "
                                           "embedding layer first"),
        "a batch dimension": (hidden[:, None], "hidden_states is (n_layers + 1, T, d_model), "
                                               "without a batch dimension"),
    }[case]
    # The docstring promises a ValueError: torch's own IndexError (or a shape error) is no check.
    raises_clearly(ValueError, lambda: ex.logit_lens(lens_model, given),
                   f"logit_lens with {case}", f"Check the input first: {why}.",
                   "lens-input-not-checked")


def test_logit_lens_rejects_a_position_out_of_range(ex, lens_model, tiny):
    n_tokens = tiny["hidden"].shape[1]
    check_bad_position(lambda: ex.logit_lens(lens_model, tiny["hidden"].clone(), [0, n_tokens]),
                       n_tokens, f"logit_lens with positions [0, {n_tokens}] for {n_tokens} tokens",
                       "lens-position-not-checked")


# ----------------------------------------------------------------------------- ranks


def test_true_token_ranks_count_the_tokens_above_the_next_one(ex, tiny):
    ranks = ex.true_token_ranks(tiny["lens"].clone(), tiny["ids"].clone())
    check_true_ranks(ranks, tiny["lens"], tiny["ids"], "your true_token_ranks")


def test_true_token_ranks_rejects_a_lens_of_selected_positions(ex, tiny):
    raises_clearly(
        ValueError, lambda: ex.true_token_ranks(tiny["lens"][:, POSITIONS], tiny["ids"].clone()),
        f"true_token_ranks with a lens of {len(POSITIONS)} positions and "
        f"{tiny['ids'].shape[1]} tokens",
        "A lens of selected positions cannot be paired with every token: check that the lens "
        "has one position per token, and say so in a ValueError.",
        "ranks-lens-positions-not-checked")


def test_true_token_ranks_on_a_hand_made_lens(ex):
    """One layer over a 5-token vocabulary: position 0 predicts token 0, its top (rank 0);
    position 1 predicts token 2, beaten by tokens 3 and 4 (rank 2)."""
    rows = [[5.0, 4, 3, 2, 1], [1, 2, 3, 4, 5], [0, 0, 9, 0, 0]]
    lens = torch.log_softmax(torch.tensor([rows]), -1)
    ids = torch.tensor([[0, 0, 2]])
    check_true_ranks(ex.true_token_ranks(lens.clone(), ids.clone()), lens, ids,
                     "true_token_ranks of the lens rows "
                     f"{lens[0].exp().round(decimals=2).tolist()} and next tokens [0, 2]")


def test_target_rank_by_layer_ranks_the_target_at_the_position_asked_for(ex, tiny):
    lens = tiny["lens"]
    ranks = ex.target_rank_by_layer(lens.clone(), INSECT)
    check_target_ranks(ranks, lens, INSECT, -1, "the rank of ' insect' at the last position")
    at_zero = ex.target_rank_by_layer(lens.clone(), INSECT, position=0)
    check_target_ranks(at_zero, lens, INSECT, 0, "target_rank_by_layer(..., position=0)")


def test_target_rank_by_layer_rejects_a_bad_target(ex, tiny):
    bad = tiny["lens"].shape[-1] + 3
    raises_clearly(ValueError, lambda: ex.target_rank_by_layer(tiny["lens"].clone(), bad),
                   f"target_rank_by_layer with target_id {bad} (the vocabulary has {bad - 3} "
                   "tokens)", "Check target_id first (kata.token_id does).",
                   "lens-target-id-not-checked")


def test_target_rank_by_layer_rejects_a_position_out_of_range(ex, tiny):
    n_positions = tiny["lens"].shape[1]
    check_bad_position(lambda: ex.target_rank_by_layer(tiny["lens"].clone(), INSECT, n_positions),
                       n_positions, f"target_rank_by_layer with position {n_positions} of "
                       f"{n_positions}", "target-rank-position-not-checked")


# ----------------------------------------------------------------------------- top tokens


def test_top_tokens_by_layer_are_decoded_most_likely_first(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    top = ex.top_tokens_by_layer(tiny["lens"].clone(), tokenizer, position=-1, k=5)
    check_top_tokens(top, tiny["lens"], tokenizer, -1, 5, "top_tokens_by_layer")


def test_top_tokens_by_layer_reads_the_position_and_k_asked_for(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    top = ex.top_tokens_by_layer(tiny["lens"].clone(), tokenizer, position=2, k=3)
    check_top_tokens(top, tiny["lens"], tokenizer, 2, 3,
                     "top_tokens_by_layer(..., position=2, k=3)")


def test_top_tokens_by_layer_rejects_a_position_out_of_range(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    n_positions = tiny["lens"].shape[1]
    check_bad_position(
        lambda: ex.top_tokens_by_layer(tiny["lens"].clone(), tokenizer, -n_positions - 1),
        n_positions, f"top_tokens_by_layer with position {-n_positions - 1} of {n_positions}",
        "top-tokens-position-not-checked")


# ----------------------------------------------------------------------------- the lens picture


def test_plot_logit_lens_colours_each_cell_and_writes_its_top_token(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    ax, heatmap = lens_heatmap(tiny_lens_figure(ex, tokenizer, tiny))
    check_lens_image(heatmap, tiny["lens"], "your logit-lens picture")
    check_cell_texts(ax, heatmap, tiny["lens"], tokenizer, "your logit-lens picture")


def test_plot_logit_lens_labels_layers_input_tokens_axes_and_colours(ex, tiny_gpt2, tiny):
    _, tokenizer = tiny_gpt2
    fig = tiny_lens_figure(ex, tokenizer, tiny)
    ax, _ = lens_heatmap(fig)
    n_hidden = tiny["lens"].shape[0]
    ylabels = [label.get_text() for label in ax.get_yticklabels()]
    assert ylabels == layer_names(n_hidden), (
        f"the rows should be labelled {layer_names(n_hidden)}, got {ylabels}")
    check_column_labels(ax, tokenizer, tiny["ids"], "your logit-lens picture")
    assert ax.get_xlabel() and ax.get_ylabel(), "label both axes ('Input token', 'Layer')"
    assert len(fig.axes) >= 2, "add a colorbar so the colours can be read"


def test_plot_logit_lens_is_legible_for_31_layers(ex, tiny_gpt2):
    """SmolLM2 has 31 hidden states: every row must have room for its texts."""
    _, tokenizer = tiny_gpt2
    logits = torch.randn(31, 6, 400, generator=torch.Generator().manual_seed(0))
    logits[..., :256] -= 100  # the top tokens are merges (ids 256 on), printable text
    lens = torch.log_softmax(logits, dim=-1)
    fig = ex.plot_logit_lens(lens, tokenizer, torch.arange(100, 106)[None])
    try:
        ax, heatmap = lens_heatmap(fig)
        assert heatmap.values.shape == (31, 6), (
            "the heatmap should be (31, 6) for 31 layers and 6 positions")
        row_points = ax.get_window_extent().height * 72 / fig.dpi / 31
        sizes = [text.get_fontsize() for text in ax.texts]
        assert sizes and max(sizes) <= row_points, (
            f"with 31 layers each row is {row_points:.1f} points tall, but the cell texts are "
            f"{max(sizes) if sizes else 0:g} points: make the figure taller (about 0.3 inch per "
            "layer) or the texts smaller (about 7 points)")
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- the rank plot


def test_plot_rank_by_layer_draws_each_texts_median_rank_plus_one_on_a_log_axis(ex):
    generator = torch.Generator().manual_seed(1)
    ranks = {"penguin": torch.randint(0, 5000, (5, 10), generator=generator),
             "Kafka": torch.randint(0, 5000, (5, 21), generator=generator)}
    ranks["Kafka"][:, :11] = 0  # the Kafka text's median rank is 0 at every layer (its mean is not)
    fig = ex.plot_rank_by_layer({name: r.clone() for name, r in ranks.items()})
    try:
        check_rank_lines(fig, ranks, "your rank figure")
        ax = fig.axes[0]
        legend = ax.get_legend()
        named = sorted(t.get_text() for t in legend.get_texts()) if legend is not None else []
        assert named == sorted(ranks), "add a legend naming the texts"
        assert ax.get_xlabel() and ax.get_ylabel(), "label both axes"
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- SmolLM2


@pytest.mark.trained
def test_smollm2_last_row_is_the_models_own_prediction(ex, smollm2, smollm2_kafka):
    model, _ = smollm2
    lens = learner_lens(ex, model, smollm2_kafka)
    check_shape(lens, (len(kata.blocks(model)) + 1, smollm2_kafka["ids"].shape[1],
                       model.config.vocab_size), "logit_lens on SmolLM2")
    check_last_row(lens, smollm2_kafka["model"],
                   lambda: read(model, smollm2_kafka["hidden"][-1], 1),
                   "logit_lens on SmolLM2 (measured: identical to float precision)", atol=1e-4)


@pytest.mark.trained
def test_smollm2_lens_uses_the_learned_norm(ex, smollm2, smollm2_kafka):
    """SmolLM2's RMSNorm has trained weights: a norm without them reads other tokens."""
    model, _ = smollm2
    lens = learner_lens(ex, model, smollm2_kafka)
    middle = lens.shape[0] // 2
    expected = read(model, smollm2_kafka["hidden"][middle], 1)
    expect(close(lens[middle], expected, 1e-3), "lens-norm-not-the-models", (
        f"on SmolLM2 layer {middle} differs from the unembedding of the final norm of its hidden "
        f"state by up to {(lens[middle] - expected).abs().max().item():.3g}: use the model's own "
        "final norm (kata.final_norm), with its learned weight, not a norm of your own"))


@pytest.mark.trained
def test_smollm2_embedding_layer_ranks_far_worse_than_the_output(ex, smollm2, smollm2_kafka):
    _, ranks = learner_true_ranks(ex, smollm2, smollm2_kafka)
    medians = ranks.float().median(dim=1).values
    assert medians[0] > 100 * (medians[-1] + 1), (
        f"on SmolLM2 the embedding layer's median rank of the true next token should be far "
        f"worse than the output's (measured: 26,015 against 5); got {medians[0]:.0f} against "
        f"{medians[-1]:.0f}")
    assert medians[-1] <= 20, (
        f"SmolLM2's output ranks the true next token of the Kafka text {medians[-1]:.0f} in the "
        "median (measured: 5)")


@pytest.mark.trained
def test_smollm2_lens_rises_in_the_last_third(ex, smollm2, smollm2_kafka):
    """The plain lens is nearly blind on SmolLM2 until its last blocks."""
    lens, ranks = learner_true_ranks(ex, smollm2, smollm2_kafka)
    check_shape(ranks, (lens.shape[0], lens.shape[1] - 1), "true_token_ranks on SmolLM2")
    log_probs = mean_true_log_prob(lens, smollm2_kafka["ids"])
    n_layers = lens.shape[0] - 1
    start = n_layers - n_layers // 3  # hidden state 20 of 30: the last third of the blocks follows
    rise = log_probs[-1] - log_probs[1:].min()
    assert log_probs[-1] - log_probs[start] > 0.7 * rise, (
        f"on SmolLM2 the mean log-probability of the true next token should rise mostly in the "
        f"last third of the blocks (measured: from -25.2 after L19 to -4.7, 87% of the rise); "
        f"got {[round(v, 1) for v in log_probs.tolist()]}")
    late = ranks.float().median(dim=1).values
    assert late[start] > 50 * (late[-1] + 1), (
        f"on SmolLM2 the median rank two thirds of the way through should still be poor "
        f"(measured: 643 against 5 at the output); got {late[start]:.0f} against {late[-1]:.0f}")


@pytest.mark.trained
def test_smollm2_insect_and_the_top_tokens(ex, smollm2, smollm2_kafka):
    model, tokenizer = smollm2
    lens = learner_lens(ex, model, smollm2_kafka)
    insect = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]
    logits = smollm2_kafka["model"][-1]
    output_rank = int((logits > logits[insect]).sum())
    expected = [tokenizer.decode([i]) for i in torch.topk(logits, 5).indices.tolist()]
    ranks = check_tensor(ex.target_rank_by_layer(lens, insect), "target_rank_by_layer").long()
    assert int(ranks[-1]) == output_rank, (
        f"SmolLM2's output ranks ' insect' {output_rank} (0 = top); target_rank_by_layer gave "
        f"{int(ranks[-1])}")
    assert int(ranks[:-2].min()) > 1000, (
        f"up to two blocks before the end, the lens ranks ' insect' beyond 1,000 on SmolLM2 "
        f"(measured: 1,885 at best); got {ranks.tolist()}")
    top = ex.top_tokens_by_layer(lens, tokenizer, position=-1, k=5)
    assert list(top[-1]) == expected, f"the output's top 5 should be {expected}, got {top[-1]}"
    commas = sum(layer[0] == "," for layer in top)
    assert commas > len(top) // 2, (
        f"on SmolLM2 the lens's top token at the last position is ',' for most layers "
        f"(measured: 24 of 31); got {[layer[0] for layer in top]}")


# ----------------------------------------------------------------------------- GPT-2


@pytest.mark.trained
def test_gpt2_lens_reads_sensible_guesses_before_the_end(ex, gpt2):
    """The cleaner GPT-2 picture (from the logit-lens literature; not measured on this machine,
    where GPT-2 is not cached): the last row is the model's prediction, and the ranks of the true
    next token improve well before the last blocks."""
    model, tokenizer = gpt2
    ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
    hidden = reference_hidden_states(model, ids)
    model_log_probs = log_probs_at_every_position(model, ids)
    lens = as_lens(ex.logit_lens(model, hidden.clone()))
    worst = (lens[-1] - model_log_probs).abs().max().item()
    assert worst <= 1e-4, (
        f"on GPT-2 the lens's last row differs from the model's log-probabilities by {worst:.3g}")
    ranks = check_tensor(ex.true_token_ranks(lens, ids.clone()), "true_token_ranks")
    medians = ranks.float().median(dim=1).values
    two_thirds = (lens.shape[0] - 1) - (lens.shape[0] - 1) // 3
    assert medians[-1] < 50, (
        f"GPT-2's median rank of the true next token at the output: {medians[-1]:.0f}")
    assert medians[two_thirds] * 10 < medians[0], (
        f"on GPT-2 the lens should already rank the true next token far better two thirds of the "
        f"way through than at the embeddings; got medians {medians.tolist()}")
