"""Correct variants of exercise 7 (attribution patching), in learners' styles.

Each ``code`` is executed on top of ``course/ex7_attribution_patching/solution.py`` (``torch``, ``kata``
and ``plt`` are in scope). Every test of ``course/ex7_attribution_patching/test_public.py`` must pass
with each of them.
"""

from course.shared.catalogue import Variant

VARIANTS = [
    Variant(
        id="backward-with-inputs",
        exercise="ex7",
        summary="metric.backward(inputs=outputs) after retain_grad, so only the block outputs get a "
                ".grad; the clean cache through output_hidden_states plus a hook on the last block",
        code='''
def attribution_patching(model, clean_ids, corrupted_ids, good_id, bad_id):
    clean_ids = kata.one_sequence(clean_ids, model)
    corrupted_ids = kata.one_sequence(corrupted_ids, model)
    if clean_ids.shape[1] != corrupted_ids.shape[1]:
        raise ValueError(f"the prompts differ in length: {clean_ids.shape[1]} and {corrupted_ids.shape[1]}")
    vocab = model.config.vocab_size
    good_id, bad_id = kata.token_id(good_id, vocab), kata.token_id(bad_id, vocab)
    blocks = kata.blocks(model)
    last = []
    handle = blocks[-1].register_forward_hook(
        lambda m, i, o: last.append((o[0] if isinstance(o, tuple) else o).clone()))
    try:
        with torch.no_grad():
            run = model(clean_ids, output_hidden_states=True)
    finally:
        handle.remove()
    clean = list(run.hidden_states[1:-1]) + last  # hidden_states[-1] has the final norm applied
    lp = run.logits[0, -1].log_softmax(-1)
    clean_metric = (lp[good_id] - lp[bad_id]).item()
    outputs = []
    handles = [b.register_forward_hook(
        lambda m, i, o: outputs.append(o[0] if isinstance(o, tuple) else o)) for b in blocks]
    try:
        logits = model(corrupted_ids).logits
    finally:
        for h in handles:
            h.remove()
    lp = logits[0, -1].log_softmax(-1)
    metric = lp[good_id] - lp[bad_id]
    if abs(metric.item() - clean_metric) < 1e-6:
        raise ValueError("the two prompts give the same metric: nothing to restore")
    for h in outputs:
        h.retain_grad()
    metric.backward(inputs=outputs)
    est = torch.stack([((c - h.detach()) * h.grad)[0].sum(-1) for c, h in zip(clean, outputs)])
    return (est / (clean_metric - metric.item())).float().cpu()
''',
    ),
    Variant(
        id="parameters-frozen-in-a-finally",
        exercise="ex7",
        summary="turns requires_grad off on every parameter for the call (restored in a finally), "
                "starts the graph at the embeddings with requires_grad_(), and calls backward()",
        code='''
def attribution_patching(model, clean_ids, corrupted_ids, good_id, bad_id):
    a = kata.one_sequence(clean_ids, model)
    b = kata.one_sequence(corrupted_ids, model)
    if a.shape != b.shape:
        raise ValueError(f"clean is {a.shape[1]} tokens, corrupted {b.shape[1]}")
    V = model.config.vocab_size
    for name, value in (("good_id", good_id), ("bad_id", bad_id)):
        if not 0 <= value < V:
            raise ValueError(f"{name} {value} is not a token id")

    def run(ids):
        kept = []
        hooks = [blk.register_forward_hook(
            lambda m, i, o: kept.append(o if torch.is_tensor(o) else o[0]))
            for blk in kata.blocks(model)]
        hooks.append(model.get_input_embeddings().register_forward_hook(
            lambda m, i, o: o.requires_grad_(True) if torch.is_grad_enabled() else None))
        try:
            logits = model(ids).logits[0, -1]
        finally:
            for hook in hooks:
                hook.remove()
        return kept, logits[good_id] - logits[bad_id]  # the normaliser cancels

    with torch.no_grad():
        clean, clean_metric = run(a)
    frozen = [p for p in model.parameters() if p.requires_grad]
    try:
        for p in frozen:
            p.requires_grad_(False)
        corrupted, metric = run(b)
        if abs(metric.item() - clean_metric.item()) < 1e-6:
            raise ValueError("nothing to restore")
        for h in corrupted:
            h.retain_grad()
        metric.backward()
    finally:
        for p in frozen:
            p.requires_grad_(True)
    est = torch.stack([((c - h.detach()) * h.grad).sum(-1)[0] for c, h in zip(clean, corrupted)])
    return (est / (clean_metric - metric.detach())).float()
''',
    ),
    Variant(
        id="numpy-compare",
        exercise="ex7",
        summary="compare_estimates with numpy: np.corrcoef, np.argsort and np.unravel_index",
        code='''
import numpy as np


def compare_estimates(exact, estimate, threshold=0.2, k=5):
    x = np.asarray(exact, dtype=float)
    y = np.asarray(estimate, dtype=float)
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(f"shapes {x.shape} and {y.shape} do not match")
    big = np.abs(x) > threshold
    order = np.argsort(-np.abs(y - x), axis=None, kind="stable")[:k]
    worst = []
    for flat in order:
        i, j = np.unravel_index(flat, x.shape)
        worst.append((int(i), int(j), float(x[i, j]), float(y[i, j])))
    return {
        "correlation": float(np.corrcoef(x.ravel(), y.ravel())[0, 1]),
        "large_cells": int(big.sum()),
        "same_sign": int((np.sign(x[big]) == np.sign(y[big])).sum()),
        "worst": worst,
    }
''',
    ),
    Variant(
        id="pyplot-state-machine",
        exercise="ex7",
        summary="draws figure 15 notebook-style with plt.figure, plt.plot markers, plt.text labels",
        code='''
import numpy as np


def plot_estimate_against_exact(exact, estimate, tokens, k=5):
    x = exact.detach().numpy().ravel()
    y = estimate.detach().numpy().ravel()
    fig = plt.figure(figsize=(6, 5))
    plt.plot(x, y, "o", alpha=0.6)
    ends = np.array([min(x.min(), y.min()), max(x.max(), y.max())])
    plt.plot(ends, ends, "k--", linewidth=1)
    T = exact.shape[1]
    for flat in np.argsort(-np.abs(y - x))[:k]:
        block, position = divmod(int(flat), T)
        plt.text(x[flat], y[flat], f"L{block} {tokens[position].strip()}", fontsize=8)
    r = np.corrcoef(x, y)[0, 1]
    plt.title(f"r = {r:.2f}")
    plt.xlabel("exact")
    plt.ylabel("estimate")
    return fig
''',
    ),
]
