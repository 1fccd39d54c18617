"""Plausible wrong answers to exercise 6 (activation patching), and the diagnosis their first
failure must name.

Each ``code`` is executed on top of ``course/ex6_activation_patching/solution.py`` (``torch``, ``kata``,
``plt`` and the public functions are in scope), so the solution's other functions call the
patched ones. Mistakes bring their own helpers: the solution's private ones are no contract.
"""

from course.shared.catalogue import catalogue, template, wrapped_figure

_logit_difference = template('''
def logit_difference(logits, good_id, bad_id):
    logits = torch.as_tensor(logits)
    if logits.dim() < 2:
        raise ValueError("logits must be (T, vocab_size) or (batch, T, vocab_size)")
    good_id = kata.token_id(good_id, logits.shape[-1], "good_id")
    bad_id = kata.token_id(bad_id, logits.shape[-1], "bad_id")
    scores = {SCORES}(logits[..., {POSITION}, :].float(), dim=-1)
    return scores[..., {FIRST}] - scores[..., {SECOND}]
''', SCORES="torch.log_softmax", POSITION="-1", FIRST="good_id", SECOND="bad_id")

_patch_hook = template('''
def patch_hook(position, new_hidden):
    new_hidden = torch.as_tensor(new_hidden)
    if new_hidden.dim() != 1:
        raise ValueError("new_hidden must be one vector (d_model,)")

    def hook(module, inputs, output):
        hidden = {HIDDEN}
        index = kata.token_index(position, hidden.shape[-2], "position")
        if new_hidden.shape[0] != hidden.shape[-1]:
            raise ValueError("new_hidden does not have the output's d_model")
        patched = {COPY}
        {WRITE} = new_hidden
        return {RETURN}

    return hook
''', HIDDEN="output[0] if isinstance(output, tuple) else output", COPY="hidden.clone()",
    WRITE="patched[:, index]",
    RETURN="(patched, *output[1:]) if isinstance(output, tuple) else patched")

# A complete patching_effect written by a learner, with a slot for each step a mistake changes:
# the checks (CHECKS), the cache (CACHE: clean block outputs; SOURCE: the vector for (l, p)), the
# loops (LOOP, over POSITIONS, storing each metric with STORE), the run that is patched
# (PATCHED), the hook's life (RUN) and the normalisation (RESULT).
_patching = template('''
def _block_outputs(model, input_ids):
    outputs = []
    handles = [block.register_forward_hook(
        lambda m, i, o: outputs.append((o[0] if isinstance(o, tuple) else o)[0].clone()))
        for block in kata.blocks(model)]
    try:
        with torch.no_grad():
            logits = model(input_ids).logits[0]
    finally:
        for handle in handles:
            handle.remove()
    return outputs, logits


def patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id):
    clean_ids = kata.one_sequence(clean_ids, model)
    corrupted_ids = kata.one_sequence(corrupted_ids, model)
    {CHECKS}
    good_id = kata.token_id(good_id, model.config.vocab_size)
    bad_id = kata.token_id(bad_id, model.config.vocab_size)
    {CACHE}
    clean_metric = logit_difference(clean_logits, good_id, bad_id).item()
    corrupted_metric = logit_difference(corrupted_logits, good_id, bad_id).item()
    if abs(clean_metric - corrupted_metric) < 1e-6:
        raise ValueError("nothing to restore: both prompts give the same metric")
    n_tokens = clean_ids.shape[1]
    effect = torch.zeros(len(kata.blocks(model)), n_tokens)
    {LOOP}
    return {RESULT}
''', CHECKS='''
if clean_ids.shape != corrupted_ids.shape:
    raise ValueError(f"the prompts have {clean_ids.shape[1]} and {corrupted_ids.shape[1]} tokens")
''', CACHE='''
clean, clean_logits = _block_outputs(model, clean_ids)
corrupted, corrupted_logits = _block_outputs(model, corrupted_ids)
''', LOOP='''
for layer, block in enumerate(kata.blocks(model)):
    for position in {POSITIONS}:
        handle = block.register_forward_hook(patch_hook(position, {SOURCE}), prepend=True)
        {RUN}
        {STORE}
''', POSITIONS="range(n_tokens)",
    STORE="effect[layer, position] = logit_difference(logits, good_id, bad_id).item()",
    SOURCE="clean[layer][position]", RUN='''
try:
    with torch.no_grad():
        logits = model({PATCHED}).logits[0]
finally:
    handle.remove()
''', RESULT="(effect - corrupted_metric) / (clean_metric - corrupted_metric)",
    PATCHED="corrupted_ids")

_HIDDEN_STATES_CACHE = '''
with torch.no_grad():
    clean_run = model(clean_ids, output_hidden_states=True)
    corrupted_logits = model(corrupted_ids).logits[0]
clean_logits = clean_run.logits[0]
clean = [h[0] for h in clean_run.hidden_states]  # index 0 is the embeddings
'''

# The fast version, its batch built per block (FAST_RUN) or grown in one pass from the corrupted
# row alone (by the HOOKS), after a clean run that fills the cache; ROWS: the patched runs'
# metrics.
_fast = template('''
def fast_patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id):
    clean_ids = kata.one_sequence(clean_ids, model)
    corrupted_ids = kata.one_sequence(corrupted_ids, model)
    if clean_ids.shape != corrupted_ids.shape:
        raise ValueError(f"the prompts have {clean_ids.shape[1]} and {corrupted_ids.shape[1]} tokens")
    good_id = kata.token_id(good_id, model.config.vocab_size)
    bad_id = kata.token_id(bad_id, model.config.vocab_size)
    n_tokens = clean_ids.shape[1]
    diagonal = torch.arange(n_tokens)
    {FAST_RUN}
    clean_metric, corrupted_metric = metrics[0].item(), metrics[1].item()
    if abs(clean_metric - corrupted_metric) < 1e-6:
        raise ValueError("nothing to restore")
    effect = {ROWS}.reshape(-1, n_tokens)
    return ((effect - corrupted_metric) / (clean_metric - corrupted_metric)).float()
''', FAST_RUN='''
clean = []
handles = [b.register_forward_hook(
    lambda m, i, o: clean.append((o[0] if isinstance(o, tuple) else o)[0].clone()))
    for b in kata.blocks(model)]
try:
    with torch.no_grad():
        clean_logits = model(clean_ids, logits_to_keep=1).logits
finally:
    for handle in handles:
        handle.remove()
{CLEAN_AGAIN}
{HOOKS}
try:
    with torch.no_grad():
        final = model.base_model(input_ids=corrupted_ids, use_cache=False).last_hidden_state
        logits = {UNEMBED}
finally:
    for handle in handles:
        handle.remove()
metrics = torch.cat([logit_difference(clean_logits, good_id, bad_id),
                     logit_difference(logits, good_id, bad_id)])
''', CLEAN_AGAIN="", HOOKS='''
def grow(layer):
    def hook(module, inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        new = hidden[:1].repeat(n_tokens, 1, 1)
        new[diagonal, diagonal] = clean[layer]
        grown = torch.cat([hidden, new])
        return (grown, *output[1:]) if isinstance(output, tuple) else grown
    return hook

handles = [b.register_forward_hook(grow(l), prepend=True) for l, b in enumerate(kata.blocks(model))]
''', UNEMBED="model.get_output_embeddings()(final[:, -1:])", ROWS="metrics[2:]")

# The hooks made in a loop that read the loop's variables when they run: every block gets the
# last block's clean vectors (Python's late binding).
_LATE_BINDING_HOOKS = '''
handles = []
for layer, block in enumerate(kata.blocks(model)):
    def hook(module, inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        new = hidden[:1].repeat(n_tokens, 1, 1)
        new[diagonal, diagonal] = clean[layer]
        grown = torch.cat([hidden, new])
        return (grown, *output[1:]) if isinstance(output, tuple) else grown
    handles.append(block.register_forward_hook(hook, prepend=True))
'''

# The patched rows added before each block (a forward pre-hook), from output_hidden_states[l],
# the block's input: every patch lands one block early.
_GROWN_BEFORE_THE_BLOCK = '''
with torch.no_grad():
    clean_run = model(clean_ids, output_hidden_states=True)
clean_logits = clean_run.logits
clean = [h[0] for h in clean_run.hidden_states]  # the embeddings first


def grow(layer):
    def hook(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        new = hidden[:1].repeat(n_tokens, 1, 1)
        new[diagonal, diagonal] = clean[layer]
        grown = torch.cat([hidden, new])
        if args:
            return (grown, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": grown}
    return hook

handles = [b.register_forward_pre_hook(grow(l), with_kwargs=True)
           for l, b in enumerate(kata.blocks(model))]
try:
    with torch.no_grad():
        final = model.base_model(input_ids=corrupted_ids, use_cache=False).last_hidden_state
        logits = model.get_output_embeddings()(final[:, -1:])
finally:
    for handle in handles:
        handle.remove()
metrics = torch.cat([logit_difference(clean_logits, good_id, bad_id),
                     logit_difference(logits, good_id, bad_id)])
'''

_PER_BLOCK_BATCH = '''
clean, corrupted = [], []

def keep(store):
    return lambda m, i, o: store.append((o[0] if isinstance(o, tuple) else o)[0].clone())

with torch.no_grad():
    metric_logits = []
    for ids, store in ((clean_ids, clean), (corrupted_ids, corrupted)):
        handles = [b.register_forward_hook(keep(store)) for b in kata.blocks(model)]
        try:
            metric_logits.append(model(ids).logits[0])
        finally:
            for handle in handles:
                handle.remove()
    rows = []
    for layer, block in enumerate(kata.blocks(model)):
        def patch(module, inputs, output, source=clean[layer]):
            hidden = (output[0] if isinstance(output, tuple) else output).clone()
            hidden[diagonal, diagonal] = source
            return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
        handle = block.register_forward_hook(patch, prepend=True)
        try:
            rows.append(logit_difference(model(corrupted_ids.repeat(n_tokens, 1)).logits,
                                         good_id, bad_id))
        finally:
            handle.remove()
metrics = torch.cat([logit_difference(torch.stack(metric_logits), good_id, bad_id), *rows])
'''

_IMSHOW = template('''
def plot_patching_effect(effect, tokens):
    effect = torch.as_tensor(effect).float()
    n_layers, n_tokens = effect.shape
    fig, ax = plt.subplots(figsize=(1.5 + 0.6 * n_tokens, 1.5 + 0.25 * n_layers))
    image = ax.imshow(effect.numpy(), cmap="{CMAP}", {LIMITS}, origin="lower", aspect="auto")
    ax.set_xticks(range(n_tokens), list(tokens), rotation=90)
    ax.set_yticks(range(n_layers), [f"L{layer}" for layer in range(n_layers)])
    ax.set_xlabel("Position")
    ax.set_ylabel("Block")
    fig.colorbar(image, ax=ax)
    return fig
''', CMAP="RdBu_r", LIMITS="vmin=-1.5, vmax=1.5")

MISTAKES = catalogue(
    "ex6",
    # ------------------------------------------------------------------------- the metric
    ("metric-of-probabilities", "took the difference of the two probabilities (softmax)",
     "logit-difference-of-probabilities", _logit_difference(SCORES="torch.softmax")),
    ("metric-at-position-0", "read the metric at the first position instead of the last",
     "logit-difference-wrong-position", _logit_difference(POSITION="0")),
    ("metric-swapped", "subtracted the other way round, log p(bad) - log p(good)",
     "logit-difference-swapped", _logit_difference(FIRST="bad_id", SECOND="good_id")),
    # ------------------------------------------------------------------------- the hook
    ("hook-patches-every-position", "wrote the clean vector into every position",
     "patch-hook-every-position", _patch_hook(WRITE="patched[:, :]")),
    ("hook-patches-a-batch-row", "indexed the batch axis, patched[position], not the positions",
     "patch-hook-wrong-position", _patch_hook(WRITE="patched[index]")),
    ("hook-patches-first-row-only", "patched only the first row of the batch, patched[0, position]",
     "patch-hook-first-row-only", _patch_hook(WRITE="patched[0, index]")),
    ("hook-in-place", "wrote into the block's own output instead of a copy",
     "patch-hook-in-place", _patch_hook(COPY="hidden")),
    ("hook-assumes-tensor", "treated the block's output as a tensor, also when it is a tuple",
     "patch-hook-output-form", _patch_hook(HIDDEN="output", RETURN="patched")),
    # ------------------------------------------------------------------------- the map
    ("clean-and-corrupted-swapped", "patched the corrupted run's states into the clean run",
     "patching-clean-corrupted-swapped",
     _patching(SOURCE="corrupted[layer][position]", PATCHED="clean_ids",
               RESULT="(effect - clean_metric) / (corrupted_metric - clean_metric)")),
    ("not-normalised", "returned the patched metric itself, not normalised",
     "patching-not-normalised", _patching(RESULT="effect")),
    ("normalised-by-the-clean-metric", "divided by the clean metric alone, not clean - corrupted",
     "patching-not-normalised",
     _patching(RESULT="(effect - corrupted_metric) / clean_metric")),
    ("normalised-the-wrong-way", "normalised with 0 at the clean run and 1 at the corrupted one",
     "patching-normalised-wrong-way",
     _patching(RESULT="(effect - clean_metric) / (corrupted_metric - clean_metric)")),
    ("hidden-states-index-is-the-block", "patched block l with hidden_states[l] (index 0 is the embeddings)",
     "patching-hidden-states-off-by-one", _patching(CACHE=_HIDDEN_STATES_CACHE)),
    ("hook-left-on-error", "removed each hook after its run, but not in a finally block",
     "patching-hooks-not-removed-on-error", _patching(RUN='''
with torch.no_grad():
    logits = model(corrupted_ids).logits[0]
handle.remove()
''')),
    ("rows-stored-after-the-loop",
     "stored each block's row of metrics after the loop over the blocks, not inside it: only the "
     "last block's row is filled",
     "patching-partly-filled", _patching(LOOP='''
for layer, block in enumerate(kata.blocks(model)):
    row = []
    for position in range(n_tokens):
        handle = block.register_forward_hook(patch_hook(position, {SOURCE}), prepend=True)
        {RUN}
        row.append(logit_difference(logits, good_id, bad_id).item())
effect[layer] = torch.tensor(row)
''')),
    ("rows-one-shared-list", "made the map as [[0.0] * T] * n_layers: every row is one list",
     "patching-rows-all-equal", _patching(LOOP='''
rows = [[0.0] * n_tokens] * len(kata.blocks(model))
for layer, block in enumerate(kata.blocks(model)):
    for position in range(n_tokens):
        handle = block.register_forward_hook(patch_hook(position, {SOURCE}), prepend=True)
        {RUN}
        rows[layer][position] = logit_difference(logits, good_id, bad_id).item()
effect = torch.tensor(rows)
''')),
    ("map-positions-by-blocks", "made the map (T, n_layers), a row per position",
     "patching-axes-swapped", _patching(LOOP='''
effect = torch.zeros(n_tokens, len(kata.blocks(model)))
for layer, block in enumerate(kata.blocks(model)):
    for position in range(n_tokens):
        handle = block.register_forward_hook(patch_hook(position, {SOURCE}), prepend=True)
        {RUN}
        effect[position, layer] = logit_difference(logits, good_id, bad_id).item()
''')),
    ("cache-from-hidden-states-1-on",
     "took the clean cache from output_hidden_states[1:], whose last entry has the final norm "
     "applied", "patching-one-block-differs", _patching(CACHE='''
with torch.no_grad():
    clean_run = model(clean_ids, output_hidden_states=True)
    corrupted_logits = model(corrupted_ids).logits[0]
clean_logits = clean_run.logits[0]
clean = [h[0] for h in clean_run.hidden_states[1:]]  # the last one is after the final norm
''')),
    ("last-position-never-patched", "looped over range(n_tokens - 1): the last position is never "
     "patched", "patching-one-position-differs", _patching(POSITIONS="range(n_tokens - 1)")),
    ("map-flipped-for-the-figure", "flipped the map so that the last block comes first, as it is "
     "drawn at the top", "patching-order-reversed", _patching(
         RESULT="((effect - corrupted_metric) / (clean_metric - corrupted_metric)).flip(0)")),
    ("block-per-hidden-state", "looped over the n_layers + 1 hidden states and took block l for "
     "each", "patching-index-out-of-range", _patching(CACHE=_HIDDEN_STATES_CACHE, LOOP='''
for layer, source in enumerate(clean):
    block = kata.blocks(model)[layer]
    for position in range(n_tokens):
        handle = block.register_forward_hook(patch_hook(position, source[position]), prepend=True)
        {RUN}
        {STORE}
''')),
    ("prompts-truncated", "cut both prompts to the shorter one instead of refusing them",
     "patching-lengths-not-checked", _patching(CHECKS='''
n = min(clean_ids.shape[1], corrupted_ids.shape[1])
clean_ids, corrupted_ids = clean_ids[:, :n], corrupted_ids[:, :n]
''')),
    # ------------------------------------------------------------------------- the fast version
    ("fast-one-pass-per-block", "batched the T positions per block, re-running every block before the patch",
     "fast-patching-prefix-recomputed", _fast(FAST_RUN=_PER_BLOCK_BATCH)),
    ("fast-unembeds-every-position", "unembedded every position of every row",
     "fast-patching-unembeds-every-position", _fast(UNEMBED="model.get_output_embeddings()(final)")),
    ("fast-hooks-late-binding",
     "made the growing hooks in a loop, each reading the loop's layer when it runs: every block "
     "gets the last block's clean vectors", "patching-late-binding",
     _fast(HOOKS=_LATE_BINDING_HOOKS)),
    ("fast-rows-grown-before-the-block",
     "added the patched rows before each block (a forward pre-hook) from output_hidden_states[l], "
     "the block's input", "patching-rows-shifted", _fast(FAST_RUN=_GROWN_BEFORE_THE_BLOCK)),
    ("fast-runs-read-one-off", "took metrics[1:-1] as the patched runs: the corrupted row and all "
     "but the last patched one", "patching-cells-shifted", _fast(ROWS="metrics[1:-1]")),
    ("fast-corrupted-row-kept", "took metrics[1:] as the patched runs, the corrupted row with them",
     "patching-sizes-do-not-fit", _fast(ROWS="metrics[1:]")),
    ("fast-clean-run-twice", "ran the clean prompt a second time for its metric",
     "fast-patching-prompt-run-twice", _fast(CLEAN_AGAIN='''
with torch.no_grad():
    clean_logits = model(clean_ids).logits
''')),
    # ------------------------------------------------------------------------- the figure
    ("plot-sequential-colormap", "drew the map with viridis, a colormap with no neutral 0",
     "patching-plot-not-diverging", _IMSHOW(CMAP="viridis")),
    ("plot-not-centred", "let imshow scale the colours from the map's minimum to its maximum",
     "patching-plot-not-centred", _IMSHOW(LIMITS="vmin=float(effect.min()), vmax=float(effect.max())")),
    ("plot-transposed", "drew positions as rows", "patching-plot-transposed",
     wrapped_figure("plot_patching_effect", "effect, tokens", '''
image = fig.axes[0].images[0]
image.set_data(torch.as_tensor(effect).float().numpy().T)
''')),
)
