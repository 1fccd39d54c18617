"""Learner mistakes for exercise 8 (the tuned lens) and the diagnoses the tests name them with.

Each ``code`` is executed on top of ``course/ex8_tuned_lens/solution.py`` (its names, such as
``torch``, ``F``, ``kata``, ``math``, ``copy``, ``tqdm``, ``plt``, ``_batch_positions``,
``_layer_names`` and the public functions, are in scope), so the other solution functions call
the patched ones. ``diagnosis`` is the id the first failing test must carry.
"""

from course.shared.catalogue import catalogue, template, wrapped_figure

# A correct collect: how each text's states and ids are kept (KEEP), the split (SPLIT), and
# where autograd records (GRAD).
_collect = template('''
def collect(model, tokenizer, texts, held_out=0.25):
    texts = list(texts)
    if len(texts) < 2 or not 0 < held_out < 1:
        raise ValueError("need 2 texts and 0 < held_out < 1")
    n_held = min(len(texts) - 1, max(1, math.ceil(held_out * len(texts))))
    {SPLIT}
    result = {}
    with {GRAD}:
        for name, part in parts.items():
            hidden, following = [], []
            for text in part:
                ids = kata.one_sequence(tokenizer(text, return_tensors="pt")["input_ids"], model)
                if ids.shape[1] < 2:
                    raise ValueError("a text of one token")
                states = torch.stack(model(input_ids=ids, output_hidden_states=True).hidden_states)
                {KEEP}
            result[name] = {"hidden": torch.cat(hidden, dim=1), "next_ids": torch.cat(following)}
    return result
''', SPLIT='parts = {"train": texts[:-n_held], "held_out": texts[-n_held:]}',
    GRAD="torch.no_grad()",
    KEEP="""
hidden.append(states[:, 0, :-1].float())
following.append(ids[0, 1:])
""")

# A correct make_translators: what A starts as (START), and how many translators (COUNT).
_translators = template('''
def make_translators(model):
    n_layers = len(kata.blocks(model))
    d_model = model.get_output_embeddings().in_features
    count = {COUNT}
    return {"A": [{START} for _ in range(count)], "b": [torch.zeros(d_model) for _ in range(count)]}
''', COUNT="n_layers", START="torch.zeros(d_model, d_model)")

_translate = template('''
def translate(translators, hidden, layer):
    layer = kata.layer_index(layer, len(translators["A"]), "layer")
    A, b = translators["A"][layer], translators["b"][layer]
    return {RESULT}
''', RESULT="hidden + hidden @ A.T + b")

# A correct lens_log_probs: which states are translated and normed (READ), and the unembedding.
_lens = template('''
def lens_log_probs(model, translators, hidden, layer):
    n_hidden = len(kata.blocks(model)) + 1
    layer = kata.layer_index(layer, n_hidden)
    norm = kata.final_norm(model)
    {READ}
    return torch.log_softmax(model.get_output_embeddings()(h), dim=-1)
''', READ="h = norm(translate(translators, hidden, layer)) if layer < n_hidden - 1 else hidden")

_kl = template('''
def kl_to_final(lens_log_probs, final_log_probs):
    if lens_log_probs.shape != final_log_probs.shape:
        raise ValueError("shapes differ")
    V = lens_log_probs.shape[-1]
    lens, final = lens_log_probs.reshape(-1, V), final_log_probs.reshape(-1, V)
    return {VALUE}
''', VALUE='F.kl_div(lens, final, log_target=True, reduction="batchmean")')

# A correct train_tuned_lens, written as a learner would: slots for the part trained on (PART),
# how the gradient is taken (GRADIENT, with BEFORE and AFTER around the loop), how a resumed run
# starts (DONE, OPTIMIZER), the loss (LOSS) and what is returned (STATE).
_train = template('''
def train_tuned_lens(model, translators, data, layers=None, steps=200, tokens_per_step=32,
                     lr=3e-3, seed=0, progress=True):
    n_layers = len(translators["A"])
    layers = range(n_layers) if layers is None else layers
    layers = sorted({kata.layer_index(l, n_layers, "layer") for l in layers})
    if not layers or tokens_per_step < 1:
        raise ValueError("nothing to train")
    if translators.get("steps_done") and list(translators.get("layers")) != layers:
        raise ValueError("resume with the same layers")
    A = [a.detach().clone() for a in translators["A"]]
    b = [v.detach().clone() for v in translators["b"]]
    for l in layers:
        A[l].requires_grad_(True)
        b[l].requires_grad_(True)
    current = {"A": A, "b": b}
    parameters = [t for l in layers for t in (A[l], b[l])]
    optimizer = torch.optim.Adam(parameters, lr=lr)
    {OPTIMIZER}
    done = {DONE}
    losses = list(translators.get("losses", []))
    hidden = {PART}
    {BEFORE}
    for step in range(done, steps):
        positions = _batch_positions(hidden.shape[1], tokens_per_step, seed, step)
        with torch.no_grad():
            final = lens_log_probs(model, current, hidden[n_layers, positions], n_layers)
        loss = {LOSS}
        {GRADIENT}
        optimizer.step()
        done = step + 1
        losses.append(loss.item())
    {AFTER}
    A, b = [a.detach() for a in A], [v.detach() for v in b]
    return {STATE}
''', OPTIMIZER="""
if translators.get("optimizer"):
    optimizer.load_state_dict(copy.deepcopy(translators["optimizer"]))
""", DONE='translators.get("steps_done", 0)', PART='data["train"]["hidden"]', BEFORE="", AFTER="",
    LOSS="sum(kl_to_final(lens_log_probs(model, current, hidden[l, positions], l), final)"
         " for l in layers)",
    GRADIENT="""
for parameter, gradient in zip(parameters, torch.autograd.grad(loss, parameters)):
    parameter.grad = gradient
""", STATE='{"A": A, "b": b, "layers": layers, "steps_done": done, "losses": losses, '
          '"optimizer": optimizer.state_dict()}')

_ranks = template('''
def next_token_ranks(model, translators, part):
    n_hidden = len(kata.blocks(model)) + 1
    ranks = []
    with torch.no_grad():
        for layer in range(n_hidden):
            rows = lens_log_probs(model, {TRANSLATORS}, part["hidden"][layer], layer)
            true = rows.gather(-1, part["next_ids"][:, None])
            ranks.append((rows {COUNTED} true).sum(-1))
    return torch.stack(ranks)
''', TRANSLATORS="translators", COUNTED=">")

MISTAKES = catalogue(
    "ex8",
    # ------------------------------------------------------------------------- collect
    ("next-ids-not-shifted", "paired each position with its own token instead of the next one",
     "collect-next-ids-not-shifted", _collect(KEEP="""
hidden.append(states[:, 0, :-1].float())
following.append(ids[0, :-1])
""")),
    ("last-position-kept", "kept every position's hidden states, the last one too",
     "collect-last-position-kept", _collect(KEEP="""
hidden.append(states[:, 0].float())
following.append(ids[0, 1:])
""")),
    ("first-position-dropped", "dropped the first position's states instead of the last's",
     "collect-first-position-dropped", _collect(KEEP="""
hidden.append(states[:, 0, 1:].float())
following.append(ids[0, 1:])
""")),
    ("held-out-first", "held out the first texts instead of the last",
     "collect-held-out-first",
     _collect(SPLIT='parts = {"train": texts[n_held:], "held_out": texts[:n_held]}')),
    ("split-by-position", "split the positions 3 to 1 instead of the texts",
     "collect-split-by-position", '''
def collect(model, tokenizer, texts, held_out=0.25):
    texts = list(texts)
    if len(texts) < 2 or not 0 < held_out < 1:
        raise ValueError("need 2 texts and 0 < held_out < 1")
    hidden, following = [], []
    with torch.no_grad():
        for text in texts:
            ids = kata.one_sequence(tokenizer(text, return_tensors="pt")["input_ids"], model)
            if ids.shape[1] < 2:
                raise ValueError("a text of one token")
            states = torch.stack(model(input_ids=ids, output_hidden_states=True).hidden_states)
            hidden.append(states[:, 0, :-1].float())
            following.append(ids[0, 1:])
    hidden, following = torch.cat(hidden, dim=1), torch.cat(following)
    cut = round(len(following) * (1 - held_out))
    return {"train": {"hidden": hidden[:, :cut], "next_ids": following[:cut]},
            "held_out": {"hidden": hidden[:, cut:], "next_ids": following[cut:]}}
'''),
    ("hidden-with-graph", "ran the model with autograd on, so the hidden states keep a graph",
     "collect-hidden-requires-grad", _collect(GRAD="torch.enable_grad()")),
    # ------------------------------------------------------------------------- the translators
    ("identity-matrix", "started A at the identity matrix, so the translator gives h + I h = 2h",
     "translators-identity-matrix",
     _translators(START="torch.eye(d_model)")),
    ("linear-default-init", "started A as torch.nn.Linear initialises its weight (random)",
     "translators-not-zero",
     _translators(START="torch.nn.Linear(d_model, d_model).weight.detach()")),
    ("translator-for-the-last-layer", "made a translator for the last hidden state too",
     "translators-for-the-last-layer", _translators(COUNT="n_layers + 1")),
    ("module-list", "returned a ModuleList of identity nn.Linear layers instead of tensors",
     "translators-not-plain-data", '''
def make_translators(model):
    d_model = model.get_output_embeddings().in_features
    translators = torch.nn.ModuleList()
    for _ in kata.blocks(model):
        linear = torch.nn.Linear(d_model, d_model)
        with torch.no_grad():
            linear.weight.copy_(torch.eye(d_model))
            linear.bias.zero_()
        translators.append(linear)
    return translators
'''),
    ("translate-without-residual", "computed A h + b without adding h back",
     "translate-without-residual", _translate(RESULT="hidden @ A.T + b")),
    ("translate-transposed", "multiplied h by A instead of A transposed",
     "translate-a-transposed", _translate(RESULT="hidden + hidden @ A + b")),
    ("translate-doubles", "added h to (I + A) h, the identity twice",
     "translate-doubles",
     _translate(RESULT="hidden + hidden @ (torch.eye(A.shape[0]) + A).T + b")),
    # ------------------------------------------------------------------------- the lens
    ("lens-norm-skipped", "skipped the final norm before the unembedding",
     "tuned-lens-norm-skipped",
     _lens(READ="h = translate(translators, hidden, layer) if layer < n_hidden - 1 else hidden")),
    ("lens-last-layer-normed", "normed (and translated at zero) the last hidden state too",
     "tuned-lens-last-layer-normed",
     _lens(READ="h = norm(translate(translators, hidden, layer)) if layer < n_hidden - 1 "
                "else norm(hidden)")),
    ("lens-last-layer-translated", "sent the last hidden state through a translator as well",
     "tuned-lens-last-layer-translated", _lens(READ="h = norm(translate(translators, hidden, layer))")),
    ("lens-translator-after-norm", "applied the translator after the final norm",
     "tuned-lens-translator-after-norm",
     _lens(READ="h = translate(translators, norm(hidden), layer) if layer < n_hidden - 1 else hidden")),
    ("lens-ignores-translators", "read every hidden state as the logit lens does, translators unused",
     "tuned-lens-ignores-translators",
     _lens(READ="h = norm(hidden) if layer < n_hidden - 1 else hidden")),
    ("lens-under-no-grad", "computed the lens under torch.no_grad(), so nothing reaches A and b",
     "tuned-lens-no-graph", '''
_solution_lens_log_probs = lens_log_probs


def lens_log_probs(model, translators, hidden, layer):
    with torch.no_grad():
        return _solution_lens_log_probs(model, translators, hidden, layer)
'''),
    # ------------------------------------------------------------------------- the loss
    ("kl-wrong-direction", "gave F.kl_div the final distribution as its input: KL(lens || final)",
     "kl-wrong-direction",
     _kl(VALUE='F.kl_div(final, lens, log_target=True, reduction="batchmean")')),
    ("kl-mean", "averaged over the vocabulary too (reduction='mean')", "kl-mean-over-vocabulary",
     _kl(VALUE='F.kl_div(lens, final, log_target=True, reduction="mean")')),
    ("kl-sum", "summed over the positions (reduction='sum')", "kl-summed-over-positions",
     _kl(VALUE='F.kl_div(lens, final, log_target=True, reduction="sum")')),
    ("kl-cross-entropy", "used the cross-entropy, without the final distribution's entropy",
     "kl-cross-entropy-not-kl", _kl(VALUE="-(final.exp() * lens).sum(-1).mean()")),
    ("kl-log-target-forgotten", "forgot log_target=True: the log-probabilities read as probabilities",
     "kl-log-target-missing", _kl(VALUE='F.kl_div(lens, final, reduction="batchmean")')),
    # ------------------------------------------------------------------------- training
    ("trained-on-held-out", "trained on the held-out part instead of the training part",
     "tuned-trained-on-held-out", _train(PART='data["held_out"]["hidden"]')),
    ("trained-on-both-parts", "trained on both parts put together",
     "tuned-trained-on-held-out",
     _train(PART='torch.cat([data["train"]["hidden"], data["held_out"]["hidden"]], dim=1)')),
    ("gradient-reaches-the-model",
     "called loss.backward() with the model's parameters still requiring grad",
     "tuned-grad-on-model", _train(GRADIENT="""
optimizer.zero_grad()
loss.backward()
""")),
    ("model-left-frozen", "froze the model for training and never gave its requires_grad back",
     "tuned-model-left-frozen", _train(BEFORE="model.requires_grad_(False)", GRADIENT="""
optimizer.zero_grad()
loss.backward()
""")),
    ("resume-restarts-adam", "kept no optimizer state, so a resumed run starts a new Adam",
     "tuned-resume-restarts-adam", _train(OPTIMIZER="", STATE='{"A": A, "b": b, "layers": layers, '
                                          '"steps_done": done, "losses": losses, "optimizer": None}')),
    ("resume-from-step-zero", "resumed from step 0 instead of from the steps done",
     "tuned-resume-ignores-steps-done", _train(DONE="0")),
    ("optimizer-state-aliased",
     "loaded the optimizer's state without copying it: Adam updates the caller's tensors",
     "tuned-state-changed-in-place", _train(OPTIMIZER="""
if translators.get("optimizer"):
    optimizer.load_state_dict(translators["optimizer"])
""")),
    ("optimizer-object-returned", "returned the optimizer itself instead of its state",
     "tuned-state-not-plain-data", _train(STATE='{"A": A, "b": b, "layers": layers, '
                                          '"steps_done": done, "losses": losses, "optimizer": optimizer}')),
    ("loss-averaged-over-layers", "averaged the loss over the trained layers instead of summing it",
     "tuned-loss-not-summed-over-layers",
     _train(LOSS="sum(kl_to_final(lens_log_probs(model, current, hidden[l, positions], l), "
                 "final) for l in layers) / len(layers)")),
    ("last-layer-trained-by-default", "trained every hidden state by default, the last one too",
     "tuned-last-layer-trained", '''
_solution_train_tuned_lens = train_tuned_lens


def train_tuned_lens(model, translators, data, layers=None, steps=200, tokens_per_step=32,
                     lr=3e-3, seed=0, progress=True):
    if layers is None:
        layers = range(len(kata.blocks(model)) + 1)
    return _solution_train_tuned_lens(model, translators, data, list(layers), steps,
                                      tokens_per_step, lr, seed, progress)
'''),
    # ------------------------------------------------------------------------- ranks
    ("ranks-one-based", "counted the true token itself, so the top token has rank 1",
     "lens-ranks-one-based", _ranks(COUNTED=">=")),
    ("ranks-of-the-logit-lens", "ranked with fresh translators whatever translators were given",
     "lens-ranks-ignore-translators", _ranks(TRANSLATORS="make_translators(model)")),
    # ------------------------------------------------------------------------- the figure
    ("plot-tuned-at-every-layer", "drew the tuned lens at every hidden state, untrained ones too",
     "tuned-plot-untrained-layers-drawn", wrapped_figure(
         "plot_tuned_lens", "logit_ranks, tuned_ranks, logit_row, tuned_row, tokenizer, "
         "layers=None, position_label=''", """
line = [l for l in fig.axes[0].get_lines() if "tuned" in l.get_label()][0]
ranks = torch.as_tensor(tuned_ranks)
line.set_data(range(ranks.shape[0]), ranks.float().median(dim=1).values + 1)
""")),
    ("plot-without-plus-one", "drew the median rank itself on the log axis",
     "tuned-plot-zero-on-log-axis", wrapped_figure(
         "plot_tuned_lens", "logit_ranks, tuned_ranks, logit_row, tuned_row, tokenizer, "
         "layers=None, position_label=''", """
for line in fig.axes[0].get_lines():
    line.set_ydata(line.get_ydata() - 1)
""")),
    ("plot-cells-upside-down", "drew the cells with imshow's default origin, the output at the bottom",
     "tuned-plot-output-at-bottom", wrapped_figure(
         "plot_tuned_lens", "logit_ranks, tuned_ranks, logit_row, tuned_row, tokenizer, "
         "layers=None, position_label=''", """
fig.axes[1].images[0].origin = "upper"
""")),
)
