"""Plausible wrong answers to exercise 7 (attribution patching), and the diagnosis their first
failure must name.

Each ``code`` is executed on top of ``course/ex7_attribution_patching/solution.py`` (``torch``,
``kata``, ``plt`` and the public functions are in scope). Mistakes bring their own helpers.
"""

from course.shared.catalogue import catalogue, template

# A learner's complete attribution_patching, with a slot for each step a mistake changes: the
# clean run (CLEAN_RUN), the run the gradient comes from (GRAD_RUN), the gradient (GRADIENT), the
# difference (DIFFERENCE), a cell from it (CELL), the normalisation (RESULT), the hooks' life
# (KEEP_RUN) and the metric's probabilities (PROBABILITIES).
_attribution = template('''
def _keep_outputs(model, input_ids):
    outputs = []

    def keep(module, inputs, output):
        outputs.append(output[0] if isinstance(output, tuple) else output)

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
    PROBABILITIES="torch.log_softmax")

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
