"""Exercise 7 (bonus): attribution patching: the one-pass estimate, and where it fails.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's
Substack series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb`
in the public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

Exercise 6's map costs one forward pass per (block, position). Attribution patching (Nanda
2023; Syed et al. 2023, "Attribution Patching Outperforms Automated Circuit Discovery")
estimates all of it from one forward and one backward pass of the corrupted run, with a
first-order Taylor expansion of the metric ``m`` around the corrupted hidden state ``h``:

    m(patched) - m(corrupted)  ~  (h_clean - h_corrupted) . dm/dh   (at h = h_corrupted)

one dot product per (block, position), normalised by ``m(clean) - m(corrupted)`` like the exact
map. It is exact when ``m`` is linear in ``h`` along the patch, and the patches here are large:
a different landmark's vector, not a small nudge. So it is cheap and wrong in instructive
places, and you will measure where:

* **the first blocks' subject cells** come out with the wrong sign: right after the
  embeddings the patch swaps the landmark itself, and the attention of every later block
  reacts to that far from linearly;
* **the other middle blocks** give the subject a third to a half of its effect: the metric
  saturates (the clean answer is back before the patch is "all the way in", so the slope at the
  corrupted point misjudges the whole step);
* **the last position in the late blocks** gets about 60 to 80% of its effect: only the final
  norm and the unembedding remain there, and the norm divides by the vector's length, which a
  patch this large changes.

You will write:

* ``attribution_patching``: the ``(n_layers, T)`` estimate, from one forward and one backward
  pass;
* ``compare_estimates``: the correlation with exercise 6's exact map, the sign agreement on the
  large cells, the worst cells;
* ``plot_estimate_against_exact``: figure 15, the estimate against the exact value, cell by cell.

Shapes as in exercise 6: ``n_layers`` blocks, T tokens (the same T for both prompts).
"""

import matplotlib.pyplot as plt  # for plot_estimate_against_exact
import torch

import kata  # kata.blocks, kata.one_sequence, kata.token_id


def _metric(logits, good_id, bad_id):
    """``log p(good) - log p(bad)`` at the last position of ``logits`` ``(1, T, vocab)``."""
    log_probs = torch.log_softmax(logits[0, -1].float(), dim=-1)
    return log_probs[good_id] - log_probs[bad_id]


def _block_outputs(model, input_ids, track):
    """Run the model once, keeping every block's output ``(1, T, d_model)``; with ``track`` the
    run records autograd from the embeddings on (the outputs stay in the graph), without it
    the run is under ``no_grad``. Returns the outputs and the logits of the last position."""
    outputs = []

    def keep(module, inputs, output):  # the whole (1, T, d_model) tensor: the graph uses it
        outputs.append(output[0] if isinstance(output, tuple) else output)

    def start_graph(module, inputs, output):
        return output.detach().requires_grad_(True)  # gradients flow from here, not into weights

    handles = [block.register_forward_hook(keep) for block in kata.blocks(model)]
    if track:
        handles.append(model.get_input_embeddings().register_forward_hook(start_graph))
    try:
        with torch.set_grad_enabled(track):
            logits = model(input_ids, use_cache=False, logits_to_keep=1).logits
    finally:
        for handle in handles:
            handle.remove()
    return outputs, logits


def attribution_patching(model, clean_ids, corrupted_ids, good_id, bad_id):
    """The linear estimate of exercise 6's map: ``(h_clean - h_corrupted) . dm/dh``, normalised.

    The clean run gives the vectors a patch would paste in, and the clean metric (``log p(good) -
    log p(bad)`` at the last position); it needs no gradient. The corrupted run, recorded by
    autograd, gives the metric ``m`` and, in one backward pass, ``dm/dh`` for every block's
    output ``h`` at once. Cell ``(l, p)`` is the dot product of ``h_clean - h_corrupted`` at
    block ``l``, position ``p`` with ``dm/dh`` there, divided by ``clean - corrupted`` (so that 1
    means "restores the whole clean answer", as in exercise 6).

    The gradient is taken with respect to each block's whole output tensor ``(1, T, d_model)``,
    the very tensor the rest of the run uses: a slice or a copy of it is a new tensor that nothing
    downstream reads, so autograd finds no path from it to the metric. Gradients are needed only
    for the block outputs, never for the model's parameters, whatever their ``requires_grad``
    says; and nothing of the model may change, its parameters' ``.grad`` included.

    Returns a float32 CPU tensor ``(n_layers, T)``, detached from autograd. Every hook is removed
    before returning, also when a forward pass raises, and no parameter of the model gets a
    ``.grad``.
    Raises ``ValueError`` when the prompts have different numbers of tokens, when the clean and
    the corrupted metrics are equal, or when ``good_id`` or ``bad_id`` is not a token id.

    Hint: A first-order Taylor expansion: patching h_corrupted to h_clean changes the metric by
    about (h_clean - h_corrupted) . dm/dh, the gradient taken on the corrupted run.

    On the models: on SmolLM2, against exercise 6's exact map (300 cells): correlation 0.59; of
    the 60 cells with |exact| > 0.2, 49 have the right sign; block 0's subject token ``iffel``
    comes out -0.77 (exact +0.70), blocks 2 to 5 give it -0.37 to -0.03 (exact 0.81 to 0.90) and
    blocks 6 to 22 0.16 to 0.37 (exact 0.72 to 0.83); the last position gets 0.47 to 0.66 in
    blocks 23 to 28 (exact 0.82 to 0.91) and 0.78 at the last block (exact 1.00). On GPT-2 the
    attribution-patching literature reports the same kind of agreement: good where the patch is
    small, poor at the first blocks and where the metric or the final norm saturates (not
    measured here: GPT-2 is not in this machine's cache).

    Post: the post scales a block's output and reads a log-probability; here its slope is read
    instead.
    """
    clean_ids = kata.one_sequence(clean_ids, model, "clean_ids")
    corrupted_ids = kata.one_sequence(corrupted_ids, model, "corrupted_ids")
    if clean_ids.shape[1] != corrupted_ids.shape[1]:
        raise ValueError(
            f"the clean prompt has {clean_ids.shape[1]} tokens and the corrupted one "
            f"{corrupted_ids.shape[1]}: the estimate pairs position p with position p, so the "
            "two prompts must have the same number of tokens"
        )
    good_id = kata.token_id(good_id, model.config.vocab_size, "good_id")
    bad_id = kata.token_id(bad_id, model.config.vocab_size, "bad_id")

    clean_outputs, clean_logits = _block_outputs(model, clean_ids, track=False)
    clean_metric = _metric(clean_logits, good_id, bad_id).item()
    corrupted_outputs, corrupted_logits = _block_outputs(model, corrupted_ids, track=True)
    metric = _metric(corrupted_logits, good_id, bad_id)
    if abs(clean_metric - metric.item()) < 1e-6:
        raise ValueError(
            f"the clean and the corrupted prompts give the same metric ({clean_metric:.4g}): "
            "there is nothing for a patch to restore; choose prompts whose answers differ"
        )
    grads = torch.autograd.grad(metric, corrupted_outputs)  # one backward pass, no .grad left
    with torch.no_grad():
        rows = [((clean - corrupted) * grad)[0].sum(dim=-1)  # (T,)
                for clean, corrupted, grad in zip(clean_outputs, corrupted_outputs, grads)]
        estimate = torch.stack(rows) / (clean_metric - metric.item())
    return estimate.float().cpu()


def compare_estimates(exact, estimate, threshold=0.2, k=5):
    """How well the estimate matches the exact map, in three numbers and a list.

    ``exact``, ``estimate``: two maps of the same shape ``(n_layers, T)`` (exercise 6's
    ``patching_effect`` and ``attribution_patching``).

    Returns a dict:

    * ``"correlation"``: Pearson's r over all cells, a float;
    * ``"large_cells"``: how many cells have ``|exact| > threshold``, an int;
    * ``"same_sign"``: how many of those the estimate gives the same sign, an int;
    * ``"worst"``: the ``k`` cells with the largest ``|estimate - exact|``, largest first, as
      tuples ``(block, position, exact value, estimate value)`` of ints and floats.

    Raises ``ValueError`` when the two maps differ in shape or are not 2-D.

    Hint: Three numbers: Pearson's r over all cells, how many cells have |exact| > threshold, and
    how many of those the estimate gets the same sign; then the k cells with the largest |estimate -
    exact|.

    On the models: on SmolLM2, r = 0.59 and 49 of 60 large cells with the right sign; the worst
    cells are all the subject's, in blocks 0 to 5 (block 0's ``iffel``: exact 0.70, estimate
    -0.77).

    Post: none: this is how one judges a cheap estimate against the expensive truth.
    """
    exact = torch.as_tensor(exact).detach().double().cpu()
    estimate = torch.as_tensor(estimate).detach().double().cpu()
    if exact.dim() != 2 or exact.shape != estimate.shape:
        raise ValueError(
            f"the exact map and the estimate must be two (n_layers, T) maps of the same shape, "
            f"got {tuple(exact.shape)} and {tuple(estimate.shape)}"
        )
    correlation = torch.corrcoef(torch.stack([exact.flatten(), estimate.flatten()]))[0, 1]
    large = exact.abs() > threshold
    same = (torch.sign(exact) == torch.sign(estimate)) & large
    n_tokens = exact.shape[1]
    errors = (estimate - exact).abs().flatten()
    worst = []
    for index in torch.topk(errors, min(k, errors.numel())).indices.tolist():
        block, position = divmod(index, n_tokens)
        worst.append((block, position, exact[block, position].item(),
                      estimate[block, position].item()))
    return {"correlation": correlation.item(), "large_cells": int(large.sum()),
            "same_sign": int(same.sum()), "worst": worst}


def plot_estimate_against_exact(exact, estimate, tokens, k=5):
    """Figure 15: every cell's estimate against its exact value, with the identity line.

    ``exact``, ``estimate``: ``(n_layers, T)`` maps; ``tokens``: the T token texts. Draw one
    point per cell (x the exact value, y the estimate), the identity line (y equal to x) dashed
    across the points' range (where a perfect estimate would lie), and label the ``k`` worst
    cells (``compare_estimates``'s ``"worst"``) exactly ``"L{block} {token}"``, with the token's
    own leading space stripped: block 5's token ``" are"`` is labelled ``"L5 are"``, block 0's
    ``"iffel"`` ``"L0 iffel"``; neighbouring cells' labels must not run into each other
    (``grader.py figures`` warns when they do). Put Pearson's r in the title, and label the axes
    "Exact (activation patching)" and "Estimate (attribution patching)".

    Returns the ``matplotlib.figure.Figure``.

    Hint: One point per cell, x the exact value and y the estimate; a perfect estimate lies on y =
    x.

    On the models: on SmolLM2 most points sit near 0 on both axes; the subject's cells lie far
    below the line (0.16 to 0.37 against 0.72 to 0.83 in the middle blocks, below 0 in blocks 0
    to 5, the worst labelled), and the late last-position cells below it too (0.47 to 0.78
    against 0.82 to 1.00).

    Post: none: a scatter of two maps of exercise 6's figure 14.
    """
    exact = torch.as_tensor(exact).detach().double().cpu()
    estimate = torch.as_tensor(estimate).detach().double().cpu()
    summary = compare_estimates(exact, estimate, k=k)
    fig, ax = plt.subplots(figsize=(6, 6))
    ax.scatter(exact.flatten().numpy(), estimate.flatten().numpy(), s=14, alpha=0.7)
    low = min(exact.min().item(), estimate.min().item())
    high = max(exact.max().item(), estimate.max().item())
    ax.plot([low, high], [low, high], "--", color="gray", label="estimate = exact")
    # The labels from the lowest point up, each a line higher than the one before it, so that
    # two neighbouring cells' labels never sit on top of each other.
    worst = sorted(summary["worst"], key=lambda cell: cell[3])
    for line, (block, position, x, y) in enumerate(worst):
        ax.annotate(f"L{block} {str(tokens[position]).strip()}", (x, y), fontsize=8,
                    xytext=(6, 12 * line - 6 * (len(worst) - 1)), textcoords="offset points",
                    arrowprops={"arrowstyle": "-", "linewidth": 0.5, "color": "gray"})
    ax.set_xlabel("Exact (activation patching)")
    ax.set_ylabel("Estimate (attribution patching)")
    ax.set_title(f"Attribution patching against the exact map (r = {summary['correlation']:.2f})")
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig
