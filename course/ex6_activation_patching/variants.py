"""Correct variants of exercise 6 (activation patching), in learners' styles.

Each ``code`` is executed on top of ``course/ex6_activation_patching/solution.py`` (``torch``, ``kata``
and ``plt`` are in scope). Every test of ``course/ex6_activation_patching/test_public.py`` must pass with
each of them.
"""

from course.shared.catalogue import Variant

VARIANTS = [
    Variant(
        id="raw-logits-and-torch-where",
        exercise="ex6",
        summary="the metric as a raw logit difference (the normaliser cancels); the hook writes with "
                "torch.where and a position mask; checks written by hand",
        code='''
def logit_difference(logits, good_id, bad_id):
    if not torch.is_tensor(logits) or logits.ndim < 2:
        raise ValueError("expected logits of shape (T, vocab) or (batch, T, vocab)")
    vocab = logits.shape[-1]
    for name, value in (("good_id", good_id), ("bad_id", bad_id)):
        if not 0 <= int(value) < vocab:
            raise ValueError(f"{name}={value} is not a token id (0..{vocab - 1})")
    last = logits[..., -1, :].float()
    return last[..., good_id] - last[..., bad_id]


def patch_hook(position, new_hidden):
    if not torch.is_tensor(new_hidden) or new_hidden.ndim != 1:
        raise ValueError("new_hidden must be a 1-D tensor (d_model,)")

    def hook(module, inputs, output):
        hidden = output if torch.is_tensor(output) else output[0]
        T, d = hidden.shape[1], hidden.shape[2]
        if not -T <= position < T:
            raise IndexError(f"position {position} is outside the {T} tokens")
        if new_hidden.numel() != d:
            raise ValueError(f"new_hidden has {new_hidden.numel()} values, d_model is {d}")
        mask = torch.zeros(1, T, 1, dtype=torch.bool, device=hidden.device)
        mask[0, position] = True
        patched = torch.where(mask, new_hidden.to(hidden.dtype).view(1, 1, d), hidden)
        return patched if torch.is_tensor(output) else (patched,) + tuple(output[1:])

    return hook
''',
    ),
    Variant(
        id="one-batched-pass-per-block",
        exercise="ex6",
        summary="patching_effect with the T positions of one block in one batch (30 passes instead "
                "of 300), the clean cache from output_hidden_states[l + 1] with the last block "
                "caught by a hook",
        code='''
def patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id):
    clean_ids = kata.one_sequence(clean_ids, model)
    corrupted_ids = kata.one_sequence(corrupted_ids, model)
    if clean_ids.shape[1] != corrupted_ids.shape[1]:
        raise ValueError(f"lengths differ: {clean_ids.shape[1]} vs {corrupted_ids.shape[1]} tokens")
    vocab = model.config.vocab_size
    good_id, bad_id = kata.token_id(good_id, vocab), kata.token_id(bad_id, vocab)
    layers = kata.blocks(model)
    last = {}

    def catch(module, inputs, output):
        last["h"] = (output[0] if isinstance(output, tuple) else output)[0].clone()

    handle = layers[-1].register_forward_hook(catch)
    try:
        with torch.no_grad():
            run = model(clean_ids, output_hidden_states=True)
    finally:
        handle.remove()
    # hidden_states[l + 1] is block l's output, except the last, which has the final norm applied
    cache = [h[0] for h in run.hidden_states[1:-1]] + [last["h"]]
    with torch.no_grad():
        base = logit_difference(model(corrupted_ids).logits[0], good_id, bad_id).item()
    top = logit_difference(run.logits[0], good_id, bad_id).item()
    if top == base:
        raise ValueError("the two prompts give the same metric: nothing to restore")
    T = clean_ids.shape[1]
    result = []
    for layer, block in enumerate(layers):
        def hook(module, inputs, output, source=cache[layer]):
            hidden = (output[0] if isinstance(output, tuple) else output).clone()
            for p in range(T):
                hidden[p, p] = source[p]
            return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden

        handle = block.register_forward_hook(hook, prepend=True)
        try:
            with torch.no_grad():
                logits = model(corrupted_ids.expand(T, -1)).logits
        finally:
            handle.remove()
        result.append((logit_difference(logits, good_id, bad_id) - base) / (top - base))
    return torch.stack(result).float().cpu()
''',
    ),
    Variant(
        id="fast-cache-then-grow-from-the-corrupted-row",
        exercise="ex6",
        summary="fast_patching_effect with a separate clean run for the cache, then one pass that "
                "starts from the corrupted row alone, through model(..., logits_to_keep=1)",
        code='''
def fast_patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id):
    clean_ids = kata.one_sequence(clean_ids, model)
    corrupted_ids = kata.one_sequence(corrupted_ids, model)
    if clean_ids.shape[-1] != corrupted_ids.shape[-1]:
        raise ValueError(f"prompts of {clean_ids.shape[-1]} and {corrupted_ids.shape[-1]} tokens")
    good_id = kata.token_id(good_id, model.config.vocab_size)
    bad_id = kata.token_id(bad_id, model.config.vocab_size)
    cache = []
    handles = [b.register_forward_hook(
        lambda m, i, o: cache.append((o[0] if isinstance(o, tuple) else o)[0].clone()))
        for b in kata.blocks(model)]
    try:
        with torch.no_grad():
            clean_logits = model(clean_ids, logits_to_keep=1).logits
    finally:
        for h in handles:
            h.remove()
    T = clean_ids.shape[-1]

    def grow(layer):
        def hook(module, inputs, output):
            hidden = output[0] if isinstance(output, tuple) else output
            extra = hidden[0:1].expand(T, -1, -1).clone()
            for p in range(T):
                extra[p, p] = cache[layer][p]
            out = torch.cat((hidden, extra), dim=0)
            return (out, *output[1:]) if isinstance(output, tuple) else out
        return hook

    handles = [b.register_forward_hook(grow(i), prepend=True) for i, b in enumerate(kata.blocks(model))]
    try:
        with torch.no_grad():
            logits = model(corrupted_ids, use_cache=False, logits_to_keep=1).logits
    finally:
        for h in handles:
            h.remove()
    clean = logit_difference(clean_logits, good_id, bad_id)[0]
    values = logit_difference(logits, good_id, bad_id)
    corrupted = values[0]
    if torch.isclose(clean, corrupted, atol=1e-6):
        raise ValueError("clean and corrupted metrics are equal: nothing to restore")
    return ((values[1:] - corrupted) / (clean - corrupted)).reshape(-1, T).float().cpu()
''',
    ),
    Variant(
        id="fast-stack-and-lm-head",
        exercise="ex6",
        summary="fast_patching_effect with the clean cache from output_hidden_states and a hook "
                "on the last block, new rows built with torch.stack, a tuple unpacked with a star, "
                "model.lm_head on final[:, -1]",
        code='''
def fast_patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id):
    a = kata.one_sequence(clean_ids, model)
    b = kata.one_sequence(corrupted_ids, model)
    if a.shape != b.shape:
        raise ValueError(f"clean has {a.shape[1]} tokens, corrupted {b.shape[1]}: same length needed")
    V = model.config.vocab_size
    if not (0 <= good_id < V and 0 <= bad_id < V):
        raise ValueError("good_id and bad_id must be token ids")
    T = a.shape[1]
    layers = kata.blocks(model)
    last = []
    h = layers[-1].register_forward_hook(
        lambda m, i, o: last.append(o[0] if isinstance(o, tuple) else o))
    try:
        with torch.no_grad():
            run = model(a, output_hidden_states=True)
    finally:
        h.remove()
    # hidden_states[l + 1] is block l's output; the last one has the final norm applied
    cache = [s[0] for s in run.hidden_states[1:-1]] + [last[0][0]]

    def make(layer):
        def hook(module, args, output):
            if isinstance(output, tuple):
                hidden, *rest = output
            else:
                hidden, rest = output, None
            rows = []
            for p in range(T):
                row = hidden[0].clone()
                row[p] = cache[layer][p]
                rows.append(row)
            grown = torch.cat([hidden, torch.stack(rows)])
            return grown if rest is None else (grown, *rest)
        return hook

    handles = []
    try:
        for layer, block in enumerate(layers):
            handles.append(block.register_forward_hook(make(layer), prepend=True))
        with torch.no_grad():
            out = model.base_model(b, use_cache=False)
            logits = model.lm_head(out[0][:, -1])  # (rows, vocab)
    finally:
        while handles:
            handles.pop().remove()
    m = logit_difference(logits[:, None, :], good_id, bad_id).double()
    clean = logit_difference(run.logits[0], good_id, bad_id).double()
    if abs(clean - m[0]) < 1e-6:
        raise ValueError("nothing to restore: the metric is the same for both prompts")
    return ((m[1:] - m[0]) / (clean - m[0])).view(-1, T).float()
''',
    ),
    Variant(
        id="matshow-centred-norm",
        exercise="ex6",
        summary="draws the map with matshow, coolwarm and a CenteredNorm, the tokens repr-quoted",
        code='''
from matplotlib.colors import CenteredNorm


def plot_patching_effect(effect, tokens):
    data = effect.detach().cpu().numpy() if torch.is_tensor(effect) else effect
    n, t = data.shape
    fig = plt.figure(figsize=(2 + 0.7 * t, 2 + 0.26 * n))
    ax = fig.add_subplot()
    im = ax.matshow(data, cmap="coolwarm", norm=CenteredNorm(vcenter=0.0), aspect="auto")
    ax.xaxis.set_ticks_position("bottom")
    ax.set_xticks(range(t))
    ax.set_xticklabels(tokens, rotation=90)
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"L{i}" for i in range(n)], fontsize=7)
    ax.set_xlabel("token")
    ax.set_ylabel("block")
    fig.colorbar(im, label="fraction of the clean answer restored")
    fig.tight_layout()
    return fig
''',
    ),
    Variant(
        id="pcolormesh-two-slope-norm",
        exercise="ex6",
        summary="draws the map with ax.pcolormesh and a TwoSlopeNorm centred at 0 (cells centred "
                "at j + 0.5, the ticks put there), seismic colours",
        code='''
from matplotlib.colors import TwoSlopeNorm


def plot_patching_effect(effect, tokens):
    data = torch.as_tensor(effect).detach().cpu().numpy()
    n_layers, n_tokens = data.shape
    fig, ax = plt.subplots(figsize=(2.5 + 0.6 * n_tokens, 1.6 + 0.26 * n_layers))
    mesh = ax.pcolormesh(data, cmap="seismic", norm=TwoSlopeNorm(vcenter=0.0))
    ax.set_xticks([t + 0.5 for t in range(n_tokens)], tokens, rotation=90)
    ax.set_yticks([l + 0.5 for l in range(n_layers)], [f"L{l}" for l in range(n_layers)])
    ax.set_xlabel("token")
    ax.set_ylabel("block")
    fig.colorbar(mesh, ax=ax, label="0: corrupted, 1: clean")
    fig.tight_layout()
    return fig
''',
    ),
]
