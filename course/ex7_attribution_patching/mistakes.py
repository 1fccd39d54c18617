"""Plausible wrong answers to exercise 7 (attribution patching), and the diagnosis their first
failure must name.

Each ``code`` is executed on top of ``course/ex7_attribution_patching/solution.py`` (``torch``,
``kata``, ``plt`` and the public functions are in scope). Mistakes bring their own helpers.
"""

from course.shared.catalogue import catalogue, template

# A learner's complete attribution_patching, with a slot for each step a mistake changes: the
# clean run (CLEAN_RUN), the run the gradient comes from (GRAD_RUN), the gradient (GRADIENT), the
# difference (DIFFERENCE), a cell from it (CELL), the normalisation (RESULT), the hooks' life
# (KEEP_RUN), what the hooks keep of a block's output (KEPT) and the metric's probabilities
# (PROBABILITIES).
_attribution = template('''
def _keep_outputs(model, input_ids):
    outputs = []

    def keep(module, inputs, output):
        outputs.append({KEPT})

    handles = [block.register_forward_hook(keep) for block in kata.blocks(model)]
    {KEEP_RUN}
    return outputs, logits


def _difference(logits, good_id, bad_id):
    log_probs = {PROBABILITIES}(logits[0, -1], dim=-1)
    return log_probs[good_id] - log_probs[bad_id]


def attribution_patching(model, clean_ids, corrupted_ids, good_id, bad_id):
    clean_ids = kata.one_sequence(clean_ids, model)
    corrupted_ids = kata.one_sequence(corrupted_ids, model)
    if clean_ids.shape != corrupted_ids.shape:
        raise ValueError(f"{clean_ids.shape[1]} and {corrupted_ids.shape[1]} tokens")
    good_id = kata.token_id(good_id, model.config.vocab_size)
    bad_id = kata.token_id(bad_id, model.config.vocab_size)
    {CLEAN_RUN}
    {GRAD_RUN}
    if abs(clean_metric - corrupted_metric) < 1e-6:
        raise ValueError("nothing to restore")
    {GRADIENT}
    rows = [({DIFFERENCE}) * g.detach() for c, k, g in zip(clean, corrupted, grads)]
    estimate = torch.stack([{CELL} for r in rows])
    return ({RESULT}).detach().float().cpu()
''', KEEP_RUN='''
try:
    logits = model(input_ids).logits
finally:
    for handle in handles:
        handle.remove()
''', CLEAN_RUN='''
with torch.no_grad():
    clean, clean_logits = _keep_outputs(model, clean_ids)
clean_metric = _difference(clean_logits, good_id, bad_id).item()
''', GRAD_RUN='''
corrupted, corrupted_logits = _keep_outputs(model, corrupted_ids)
metric = _difference(corrupted_logits, good_id, bad_id)
corrupted_metric = metric.item()
''', GRADIENT="grads = torch.autograd.grad(metric, corrupted)", DIFFERENCE="c - k.detach()",
    RESULT="estimate / (clean_metric - corrupted_metric)", CELL="r[0].sum(-1)",
    PROBABILITIES="torch.log_softmax", KEPT="output[0] if isinstance(output, tuple) else output")

# The block outputs read from output_hidden_states instead of hooks: STATES picks the entries
# (entry 0 is the embeddings, the last has the final norm applied).
_hidden_states_attribution = template('''
def attribution_patching(model, clean_ids, corrupted_ids, good_id, bad_id):
    clean_ids = kata.one_sequence(clean_ids, model)
    corrupted_ids = kata.one_sequence(corrupted_ids, model)
    if clean_ids.shape != corrupted_ids.shape:
        raise ValueError(f"{clean_ids.shape[1]} and {corrupted_ids.shape[1]} tokens")
    good_id = kata.token_id(good_id, model.config.vocab_size)
    bad_id = kata.token_id(bad_id, model.config.vocab_size)
    with torch.no_grad():
        clean_run = model(clean_ids, output_hidden_states=True)
    clean = clean_run.hidden_states{STATES}
    log_probs = torch.log_softmax(clean_run.logits[0, -1], dim=-1)
    clean_metric = (log_probs[good_id] - log_probs[bad_id]).item()
    run = model(corrupted_ids, output_hidden_states=True)
    corrupted = run.hidden_states{STATES}
    log_probs = torch.log_softmax(run.logits[0, -1], dim=-1)
    metric = log_probs[good_id] - log_probs[bad_id]
    if abs(clean_metric - metric.item()) < 1e-6:
        raise ValueError("nothing to restore")
    grads = torch.autograd.grad(metric, corrupted)
    rows = [((c - k.detach()) * g)[0].sum(-1) for c, k, g in zip(clean, corrupted, grads)]
    return (torch.stack(rows) / (clean_metric - metric.item())).detach().float().cpu()
''', STATES="[1:]")

# compare_estimates written out, with a slot for the worst cells' order (ORDER), how a flat index
# is taken apart (CELL) and the tuple of each (TUPLE).
_compare = template('''
def compare_estimates(exact, estimate, threshold=0.2, k=5):
    exact = torch.as_tensor(exact).detach().double()
    estimate = torch.as_tensor(estimate).detach().double()
    if exact.dim() != 2 or exact.shape != estimate.shape:
        raise ValueError(f"two maps of one shape, got {tuple(exact.shape)} and {tuple(estimate.shape)}")
    n_layers, n_tokens = exact.shape
    x, y = exact.flatten(), estimate.flatten()
    large = exact.abs() > threshold
    worst = []
    for index in {ORDER}:
        {CELL}
        worst.append({TUPLE})
    return {"correlation": torch.corrcoef(torch.stack([x, y]))[0, 1].item(),
            "large_cells": int(large.sum()),
            "same_sign": int((large & (torch.sign(exact) == torch.sign(estimate))).sum()),
            "worst": worst}
''', ORDER="torch.topk((y - x).abs(), min(k, x.numel())).indices.tolist()",
    CELL="block, position = divmod(index, n_tokens)",
    TUPLE="(block, position, exact[block, position].item(), estimate[block, position].item())")

_GRAD_ON_CLEAN = '''
with torch.no_grad():
    corrupted, _ = _keep_outputs(model, corrupted_ids)
    corrupted_metric = _difference(model(corrupted_ids).logits, good_id, bad_id).item()
clean, clean_logits = _keep_outputs(model, clean_ids)
metric = _difference(clean_logits, good_id, bad_id)
clean_metric = metric.item()
grads = torch.autograd.grad(metric, clean)
clean = [c.detach() for c in clean]
'''

MISTAKES = catalogue(
    "ex7",
    ("gradient-on-the-clean-run", "took the gradient on the clean run instead of the corrupted one",
     "attribution-gradient-on-clean-run", _attribution(GRAD_RUN=_GRAD_ON_CLEAN, GRADIENT="")),
    ("metric-from-probabilities",
     "computed the metric p(good) - p(bad) from probabilities (torch.softmax): on a model that "
     "spreads its probability over the vocabulary both are about 0, and the function's own "
     "check refuses valid prompts as having equal metrics",
     "attribution-rejects-valid-prompts", _attribution(PROBABILITIES="torch.softmax")),
    ("not-summed-over-d-model",
     "multiplied (h_clean - h_corrupted) by the gradient but never summed over d_model",
     "attribution-not-summed-over-d-model", _attribution(CELL="r[0]")),
    ("summed-over-positions",
     "summed the product over the positions (dim 0 of (T, d_model)) instead of d_model",
     "attribution-summed-over-positions", _attribution(CELL="r[0].sum(0)")),
    ("difference-sign-flipped", "used h_corrupted - h_clean",
     "attribution-difference-sign-flipped", _attribution(DIFFERENCE="k.detach() - c")),
    ("not-normalised", "returned the estimated change of the metric without normalising it",
     "attribution-not-normalised", _attribution(RESULT="estimate")),
    ("backward-leaves-grad", "called metric.backward() and read each output's .grad (retain_grad)",
     "attribution-grad-left-on-parameters", _attribution(GRADIENT='''
for h in corrupted:
    h.retain_grad()
metric.backward()
grads = [h.grad for h in corrupted]
''')),
    ("no-grad-around-everything", "wrapped the corrupted run and the backward pass in torch.no_grad()",
     "attribution-no-grad-around-backward", _attribution(GRAD_RUN='''
with torch.no_grad():
    corrupted, corrupted_logits = _keep_outputs(model, corrupted_ids)
    metric = _difference(corrupted_logits, good_id, bad_id)
corrupted_metric = metric.item()
''')),
    ("clean-run-with-grad", "ran the clean prompt with autograd recording too",
     "attribution-clean-run-with-grad", _attribution(CLEAN_RUN='''
clean, clean_logits = _keep_outputs(model, clean_ids)
clean = [c.detach() for c in clean]
clean_metric = _difference(clean_logits, good_id, bad_id).item()
''')),
    ("hooks-not-removed-on-error", "removed the hooks after the run, but not in a finally block",
     "attribution-hooks-not-removed-on-error", _attribution(KEEP_RUN='''
logits = model(input_ids).logits
for handle in handles:
    handle.remove()
''')),
    ("output-zero-on-tensor-blocks",
     "kept output[0] of every block, which on a block that returns a tensor is its one row, a new "
     "tensor outside the graph", "attribution-output-not-in-graph",
     _attribution(KEPT="output[0]")),
    ("allow-unused-after-output-zero",
     "kept output[0] of tensor blocks and, told by autograd, passed allow_unused=True: the "
     "gradients come back None", "attribution-output-not-in-graph",
     _attribution(KEPT="output[0]",
                  GRADIENT="grads = torch.autograd.grad(metric, corrupted, allow_unused=True)")),
    ("hidden-states-before-each-block",
     "read the states from output_hidden_states[:-1], each block's input: every row is the block "
     "before's", "attribution-rows-shifted", _hidden_states_attribution(STATES="[:-1]")),
    ("hidden-states-1-on",
     "read the states from output_hidden_states[1:], whose last entry has the final norm applied",
     "attribution-one-block-differs", _hidden_states_attribution()),
    ("every-hidden-state", "estimated every entry of output_hidden_states, the embeddings too",
     "attribution-embedding-row-added", _hidden_states_attribution(STATES="")),
    ("normalised-by-the-clean-metric", "divided by the clean metric alone, not clean - corrupted",
     "attribution-not-normalised", _attribution(RESULT="estimate / clean_metric")),
    ("worst-by-divmod-of-blocks", "took a flat index apart with divmod(index, n_layers)",
     "compare-worst-index-arithmetic", _compare(CELL="block, position = divmod(index, n_layers)")),
    ("worst-position-first", "listed each worst cell as (position, block)",
     "compare-worst-axes-swapped", _compare(
         TUPLE="(position, block, exact[block, position].item(), estimate[block, position].item())")),
    ("worst-smallest-first", "took the k cells with the smallest errors (topk with largest=False)",
     "compare-worst-order-reversed", _compare(
         ORDER="torch.topk((y - x).abs(), min(k, x.numel()), largest=False).indices.tolist()")),
    ("worst-by-signed-error", "ranked the cells by estimate - exact, without the absolute value",
     "compare-worst-signed-error",
     _compare(ORDER="torch.topk(y - x, min(k, x.numel())).indices.tolist()")),
    ("r-squared", "returned r squared as the correlation", "compare-correlation-wrong", '''
_right_compare = compare_estimates


def compare_estimates(exact, estimate, threshold=0.2, k=5):
    summary = _right_compare(exact, estimate, threshold, k)
    summary["correlation"] = summary["correlation"] ** 2
    return summary
'''),
    ("large-cells-signed", "counted the large cells with exact > threshold, forgetting the negative ones",
     "compare-large-cells-wrong", '''
_right_compare = compare_estimates


def compare_estimates(exact, estimate, threshold=0.2, k=5):
    summary = _right_compare(exact, estimate, threshold, k)
    summary["large_cells"] = int((torch.as_tensor(exact) > threshold).sum())
    return summary
'''),
    ("plot-axes-swapped", "drew the estimate on x and the exact value on y",
     "estimate-plot-axes-swapped", '''
_right_plot = plot_estimate_against_exact


def plot_estimate_against_exact(exact, estimate, tokens, k=5):
    return _right_plot(estimate, exact, tokens, k)
'''),
    ("plot-no-identity-line", "left out the identity line", "estimate-plot-no-identity-line", '''
_right_plot = plot_estimate_against_exact


def plot_estimate_against_exact(exact, estimate, tokens, k=5):
    fig = _right_plot(exact, estimate, tokens, k)
    for line in list(fig.axes[0].lines):
        line.remove()
    return fig
'''),
)
