"""Exercise 8's secret checks: each public function again, on inputs nobody prepared for.

One check per function, each on inputs drawn from a seed only the grader knows and from spaces
no table can hold (``course/shared/secret.py``): texts of random words, GPT-2s of random sizes
and weights (their final norm random too), random hidden states, translators, distributions,
layers, learning rates and seeds, random ranks and rows to draw. The expected values are computed
here, from those inputs, before the function sees them (it gets copies); a check of one function
never uses another of yours (the data a training check trains on is made here). A function's
points count only if its check passes.
"""

import torch
from matplotlib.figure import Figure

import kata
from course.shared.diagnosis import diagnose
from course.shared.secret import repeat_hint, secret, secret_check  # noqa: F401 - a fixture
from course.shared.support import expect, figures  # noqa: F401 - a fixture

from .checks import (
    call_lens,
    check_cells,
    check_collected,
    check_curves,
    check_kl,
    check_lens,
    check_ranks,
    check_state,
    check_trained,
    check_translated,
    check_translator_tensors,
    check_translators,
    clear_grads,
    close_translators,
    copied,
    grads_left,
    made_data,
    poisoned,
    printable_ids,
    reference_collect,
    reference_training,
    resumed_wrong_runs,
    same_state,
    splits_differ,
    trained_wrong_runs,
    with_random_norm,
    zero_translators,
)


def random_model(secret, layers=(1, 4)):
    """A GPT-2 of random sizes and weights (spread 0.2) whose final norm is random too."""
    model = secret.gpt2(layers=layers, spread=0.2)
    generator = torch.Generator().manual_seed(secret.integer(0, 2**31))
    return with_random_norm(model, generator)


def random_translators(secret, model, scale=None):
    n_layers = len(kata.blocks(model))
    d_model = model.get_output_embeddings().in_features
    scale = secret.number(0.05, 0.5) if scale is None else scale
    return {"A": list(secret.tensor(n_layers, d_model, d_model, scale=scale / d_model ** 0.5)),
            "b": list(secret.tensor(n_layers, d_model, scale=scale))}


def random_states(secret, model, count=(2, 9)):
    """Hidden states of ``model`` for random token ids: ``(n_layers + 1, T, d_model)``."""
    from course.shared.support import reference_hidden_states

    ids = secret.token_ids(model.config.vocab_size, secret.integer(*count))
    return reference_hidden_states(model, ids)


@secret_check("collect")
def test_secret_collect_of_random_texts(ex, tiny_gpt2, secret):
    model, tokenizer = tiny_gpt2
    texts = [secret.text(words=(2, 9)) for _ in range(secret.integer(2, 6))]
    counts = [len(tokenizer(text)["input_ids"]) for text in texts]
    held_out = secret.number(0.05, 0.95)
    while not splits_differ(counts, held_out):  # else a split by position is right by chance
        held_out = secret.number(0.05, 0.95)
    expected = reference_collect(model, tokenizer, texts, held_out)
    data = ex.collect(model, tokenizer, list(texts), held_out=held_out)
    check_collected(data, expected, f"collect of {len(texts)} random texts, held_out={held_out}"
                    + repeat_hint())


@secret_check("make_translators")
def test_secret_make_translators_of_a_model_of_random_sizes(ex, secret):
    model = secret.gpt2(layers=(1, 6))
    check_translators(ex.make_translators(model), model,
                      f"make_translators of a GPT-2 of {model.config.n_layer} blocks, width "
                      f"{model.config.n_embd}{repeat_hint()}")


@secret_check("translate")
def test_secret_translate_of_random_translators(ex, secret):
    n_layers, width = secret.integer(1, 6), secret.integer(2, 24)
    translators = {"A": list(secret.tensor(n_layers, width, width)),
                   "b": list(secret.tensor(n_layers, width))}
    hidden = secret.tensor(*[secret.integer(1, 5) for _ in range(secret.integer(0, 2))], width)
    layer = secret.integer(-n_layers, n_layers - 1)
    result = ex.translate(copied(translators), hidden.clone(), layer)
    check_translated(result, translators["A"], translators["b"], hidden, layer % n_layers,
                     f"translate at layer {layer} of {n_layers} translators, states "
                     f"{tuple(hidden.shape)}{repeat_hint()}")


@secret_check("lens_log_probs")
def test_secret_lens_of_a_model_of_random_sizes(ex, secret):
    model = random_model(secret)
    translators = random_translators(secret, model)
    hidden = random_states(secret, model)
    n_hidden = hidden.shape[0]
    what = f"a GPT-2 of {n_hidden - 1} blocks{repeat_hint()}"
    for layer in range(n_hidden):  # every hidden state, the last one included
        name = secret.choice([layer, layer - n_hidden])  # negative layers count from the end
        result = call_lens(ex, model, translators, hidden[layer], name)
        check_lens(result, model, translators["A"], translators["b"], hidden[layer], layer,
                   f"lens_log_probs at layer {name} of {what}")
    leaves = {name: [x.clone().requires_grad_(True) for x in value]
              for name, value in translators.items()}
    layer = secret.integer(0, n_hidden - 2)
    result = ex.lens_log_probs(model, leaves, hidden[layer].clone(), layer)
    expect(getattr(result, "requires_grad", False), "tuned-lens-no-graph",
           f"lens_log_probs at layer {layer} of {what} does not depend on the translators for "
           "autograd: training takes its gradient through it")


@secret_check("kl_to_final")
def test_secret_kl_of_random_distributions(ex, secret):
    shape = [secret.integer(2, 4)] + [secret.integer(1, 4) for _ in range(secret.integer(0, 2))]
    shape.append(secret.integer(2, 60))  # 2 positions or more, then the vocabulary
    lens = torch.log_softmax(secret.tensor(*shape), -1)
    final = torch.log_softmax(secret.tensor(*shape) * 3, -1)
    what = f"kl_to_final of random log-probabilities {tuple(shape)}{repeat_hint()}"
    value = ex.kl_to_final(lens.clone().requires_grad_(True), final.clone())
    check_kl(value, lens, final, what)
    expect(value.requires_grad, "kl-no-graph",
           f"{what} does not depend on the lens for autograd: it is the loss training "
           "differentiates")
    check_kl(ex.kl_to_final(final.clone(), final.clone()), final, final,
             f"{what}, the lens equal to the final distribution")


@secret_check("train_tuned_lens")
def test_secret_training_on_a_model_of_random_sizes(ex, secret):
    """A run of a few steps on some layers, then resumed for a few more, and a step on every
    layer (the default), each against Adam on the given batches; the held-out part is all NaN,
    and the model must get no .grad. The model has 2 blocks or more, so that the default trains
    2 layers or more (a loss averaged over them is then not their sum)."""
    model = random_model(secret, layers=(2, 3))
    generator = torch.Generator().manual_seed(secret.integer(0, 2**31))
    data = made_data(model, generator, texts=secret.integer(3, 5), held=1)
    fresh = zero_translators(model)
    n_layers = len(kata.blocks(model))
    layers = secret.some(range(n_layers))
    first, more = secret.integer(1, 3), secret.integer(1, 3)
    options = {"layers": layers, "tokens_per_step": secret.integer(1, 12),
               "lr": secret.number(0.001, 0.02), "seed": secret.integer(0, 10_000)}
    arguments = (options["tokens_per_step"], options["lr"], options["seed"])
    what = f"train_tuned_lens({options}) on a GPT-2 of {n_layers} blocks{repeat_hint()}"
    total = first + more
    every, every_error = None, None
    try:
        state = ex.train_tuned_lens(model, copied(fresh), poisoned(data), progress=False,
                                    steps=first, **options)
        check_state(state, model, f"{what}, {first} steps", layers=layers, steps_done=first)
        expected = reference_training(model, fresh, data, layers, first, *arguments)
        wrong = {} if close_translators(state, expected, options["lr"], first) else \
            trained_wrong_runs({part: reference_training(model, fresh, data, layers, first,
                                                         *arguments, part=part)
                                for part in ("held_out", "both")})  # only a wrong run needs them
        check_trained(state, expected, wrong, fresh, sorted(set(layers)),
                      f"{what}, {first} steps", lr=options["lr"], steps=first)
        kept = copied(state)
        resumed = ex.train_tuned_lens(model, state, poisoned(data), progress=False,
                                      steps=total, **options)
        expect(same_state(state, kept), "tuned-state-changed-in-place",
               f"{what}: resuming changed the dict it was given in place")
        try:
            every = ex.train_tuned_lens(model, copied(fresh), poisoned(data), progress=False,
                                        steps=1, **{**options, "layers": None})
        except IndexError as error:  # named below, after the resumed run is judged
            every_error = error
        left = grads_left(model)
    finally:
        clear_grads(model)
    check_translator_tensors(resumed, f"{what}, resumed to {total} steps", n_layers)
    expected = reference_training(model, fresh, data, layers, total, *arguments)
    wrong = {} if close_translators(resumed, expected, options["lr"], total) else \
        resumed_wrong_runs({"restarted": reference_training(model, fresh, data, layers, total,
                                                            *arguments, restart_adam_at=first),
                            "again": reference_training(model, fresh, data, layers, total,
                                                        *arguments, start_again_at=first)}, first)
    check_trained(resumed, expected, wrong, fresh, sorted(set(layers)),
                  f"{what}, resumed to {total} steps", lr=options["lr"], steps=total)
    check_state(resumed, model, f"{what}, resumed to {total} steps", layers=layers,
                steps_done=total)
    if every_error is not None:
        diagnose("tuned-last-layer-trained", (
            f"{what} with the default layers raised IndexError ({every_error}): the default is "
            f"every hidden state that has a translator, 0 .. {n_layers - 1}; the last hidden "
            "state is the model's output, with no translator to train"))
    all_layers = list(range(n_layers))
    check_state(every, model, f"{what}, one step with the default layers", layers=all_layers,
                steps_done=1)
    check_trained(every, reference_training(model, fresh, data, all_layers, 1, *arguments), {},
                  fresh, all_layers, f"{what}, one step with the default layers (every layer)",
                  lr=options["lr"], steps=1)
    expect(not left, "tuned-grad-on-model",
           f"{what}: {len(left)} parameters of the model have a .grad after training")


@secret_check("next_token_ranks")
def test_secret_ranks_of_a_model_of_random_sizes(ex, secret):
    model = random_model(secret)
    translators = random_translators(secret, model)
    generator = torch.Generator().manual_seed(secret.integer(0, 2**31))
    part = made_data(model, generator, texts=2, held=1)["held_out"]
    ranks = ex.next_token_ranks(model, copied(translators), copied(part))
    check_ranks(ranks, model, translators, part,
                f"next_token_ranks on a GPT-2 of {len(kata.blocks(model))} blocks{repeat_hint()}")


@secret_check("plot_tuned_lens")
def test_secret_figure_of_random_ranks(ex, tiny_gpt2, secret, figures):
    _, tokenizer = tiny_gpt2
    n_hidden, vocab = secret.integer(3, 12), secret.integer(300, 900)
    # at least one hidden state with a translator is left untrained: drawing the tuned lens
    # at every hidden state must be wrong
    layers = secret.some(range(n_hidden - 1), most=min(4, n_hidden - 2))
    allowed = torch.tensor(printable_ids(tokenizer, vocab))
    mask = torch.full((vocab,), -100.0)
    mask[allowed] = 0.0
    positions = secret.integer(1, 12)
    inputs = {"logit_ranks": secret.integers(5000, n_hidden, positions),
              "tuned_ranks": secret.integers(800, n_hidden, positions),
              "logit_row": torch.log_softmax(secret.tensor(n_hidden, vocab) + mask, -1),
              "tuned_row": torch.log_softmax(secret.tensor(n_hidden, vocab) + mask, -1)}
    fig = ex.plot_tuned_lens(*copied(list(inputs.values())), tokenizer, layers=list(layers))
    if isinstance(fig, Figure):
        figures.append(fig)
    what = f"figure 16 of {n_hidden} hidden states, layers {layers}{repeat_hint()}"
    check_curves(fig, inputs, layers, what)
    check_cells(fig, inputs, tokenizer, layers, what)
