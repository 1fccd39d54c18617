"""Exercise 8 (bonus): the tuned lens (a translator per layer, trained on your own CPU).

What each function must do, one behaviour per test. Every expected value comes from the model's
own modules and weights and from torch, never from the solution (``checks.py``); the code under
test gets copies of the test's inputs. The collecting tests read five short texts with the tiny
GPT-2; the lens and training tests use small GPT-2s of fixed seeds (3 blocks, 97 tokens) whose
final norm has random weights, and each training test builds its own model; a trained-model test
runs two steps on SmolLM2's first 4 blocks. The full recipe (six layers of SmolLM2, 200 steps,
about a minute) runs in the notebook and in ``python grader.py figures``, not here.
"""

import math

import pytest
import torch

import kata
from course.shared.support import (
    check_message_names,
    check_tensor,
    computed_once,
    expect,
    figures,  # noqa: F401 - a fixture
    raises_clearly,
)

from .checks import (  # noqa: F401 - lens_inputs, small, tiny: fixtures
    RUN,
    TEXTS,
    call_lens,
    call_train,
    check_cells,
    check_collect_parts,
    check_collected,
    check_curves,
    check_kl,
    check_lens,
    check_ranks,
    check_state,
    check_trained,
    check_translator_tensors,
    check_translated,
    check_translators,
    clear_grads,
    close_translators,
    copied,
    grads_left,
    hand_made_distributions,
    lens_inputs,
    made_data,
    poisoned,
    random_figure_inputs,
    reference_collect,
    reference_training,
    resumed_wrong_runs,
    same_state,
    small,
    small_model,
    tiny,
    trained_wrong_runs,
    zero_translators,
)

# ----------------------------------------------------------------------------- collect


def test_collect_gives_float32_cpu_hidden_states_without_a_graph(ex, tiny_gpt2, tiny):
    model, tokenizer = tiny_gpt2
    data = ex.collect(model, tokenizer, list(TEXTS))
    check_collect_parts(data, "collect's result")
    for name in ("train", "held_out"):
        hidden, ids = data[name]["hidden"], data[name]["next_ids"]
        expect(not hidden.requires_grad, "collect-hidden-requires-grad", (
            f"collect's {name!r} hidden states are part of an autograd graph: nothing here needs "
            "gradients, and a graph kept alive for every text holds the whole forward pass in "
            "memory; run the model where autograd records nothing"))
        expect(hidden.dtype == torch.float32 and hidden.device.type == "cpu",
               "collect-not-float32-cpu",
               f"collect's {name!r} hidden states should be a float32 CPU tensor, got "
               f"{hidden.dtype} on {hidden.device}")
        expect(ids.dtype == torch.int64, "collect-not-float32-cpu",
               f"collect's {name!r} next ids should be int64 token ids, got {ids.dtype}")


def test_collect_pairs_each_position_with_the_next_token_and_holds_out_the_last_texts(
        ex, tiny_gpt2, tiny):
    model, tokenizer = tiny_gpt2
    data = ex.collect(model, tokenizer, list(TEXTS))
    check_collected(data, tiny, f"collect of {len(TEXTS)} texts (held_out=0.25: the last 2)")


@pytest.mark.parametrize("held_out, n_held", [(0.5, 3), (0.9, 4)])
def test_collect_holds_out_the_share_asked_for(ex, tiny_gpt2, held_out, n_held):
    """A share of the 5 texts rounded up, at least 1, and at least 1 left to train on."""
    model, tokenizer = tiny_gpt2
    expected = computed_once(("ex8-collect", "tiny-gpt2", held_out),
                             lambda: reference_collect(model, tokenizer, list(TEXTS), held_out))
    assert len(expected["held_out"]["counts"]) == n_held
    data = ex.collect(model, tokenizer, list(TEXTS), held_out=held_out)
    check_collected(data, expected, f"collect of {len(TEXTS)} texts, held_out={held_out} (the "
                    f"last {n_held})")


def test_collect_rejects_what_cannot_be_split_or_paired(ex, tiny_gpt2):
    model, tokenizer = tiny_gpt2
    for case, texts, held_out, why in (
            ("one text", [kata.PENGUIN_TEXT], 0.25,
             "One text cannot give both a training part and a held-out part."),
            ("held_out 0", list(TEXTS), 0.0, "held_out is a share strictly between 0 and 1."),
            ("held_out 1", list(TEXTS), 1.0, "held_out is a share strictly between 0 and 1."),
            ("a text of one token", ["Hello", *TEXTS], 0.25,
             "A text of one token has no next token to pair with.")):
        raises_clearly(ValueError, lambda: ex.collect(model, tokenizer, texts, held_out=held_out),
                       f"collect with {case}", why, "collect-input-not-checked")


# ----------------------------------------------------------------------------- translators


@pytest.mark.parametrize("model_name", ["small", "tiny-gpt2"])
def test_make_translators_starts_every_translator_at_zero(ex, tiny_gpt2, model_name):
    model = small_model() if model_name == "small" else tiny_gpt2[0]
    translators = ex.make_translators(model)
    check_translators(translators, model, f"make_translators on the {model_name} GPT-2")


def test_translate_at_zero_returns_its_input_bit_for_bit(ex, lens_inputs):
    """Zero translators are the identity, exactly: the untrained tuned lens IS the logit lens.
    The states are large (about 10,000) so that nothing can hide in the last digits."""
    zeros, hidden = lens_inputs["zeros"], lens_inputs["hidden"] * 1e4
    for layer in range(len(zeros["A"])):
        h = hidden[layer]
        result = check_tensor(ex.translate(copied(zeros), h.clone(), layer), "translate")
        if result.shape == h.shape and torch.equal(result.detach().cpu(), h):
            continue
        got = result.detach().cpu()
        expect(not (got.shape == h.shape and torch.equal(got, 2 * h)), "translate-doubles", (
            f"translate with zero translators returned 2h at hidden state {layer}: h + I h. The "
            "identity is A = 0 in h + A h + b: either add h back to A h + b, or multiply by "
            "I + A, not both"))
        expect(not (got.shape == h.shape and torch.equal(got, torch.zeros_like(h))),
               "translate-without-residual", (
                   f"translate with zero translators returned zeros at hidden state {layer}: it "
                   "is A h + b without h itself. The translator is h + A h + b, the identity at "
                   "A = 0, b = 0"))
        check_translated(got, zeros["A"], zeros["b"], h, layer,
                         f"translate with zero translators at hidden state {layer}")
        pytest.fail(f"translate with zero translators changed hidden state {layer}'s states by "
                    f"up to {(got - h).abs().max().item():.3g}: at A = 0, b = 0 the translator "
                    "must return its input bit for bit")


def test_translate_is_h_plus_a_h_plus_b(ex, lens_inputs):
    translators, hidden = lens_inputs["random"], lens_inputs["hidden"]
    n = len(translators["A"])
    for layer in [*range(n), -1]:
        h = hidden[layer % n]
        result = ex.translate(copied(translators), h.clone(), layer)
        check_translated(result, translators["A"], translators["b"], h, layer % n,
                         f"translate at layer {layer} (random A and b)")


def test_translate_keeps_autograd_to_a_and_b(ex, lens_inputs):
    translators = {name: [x.clone().requires_grad_(True) for x in value]
                   for name, value in lens_inputs["random"].items()}
    result = check_tensor(ex.translate(translators, lens_inputs["hidden"][0].clone(), 0),
                          "translate")
    expect(result.requires_grad, "translate-detached", (
        "translate's result does not depend on A and b for autograd (requires_grad is False "
        "although A and b require it): training reaches the translators through it, so compute "
        "it where autograd records"))


def test_translate_rejects_the_last_hidden_state(ex, lens_inputs):
    zeros = lens_inputs["zeros"]
    n = len(zeros["A"])
    message = raises_clearly(
        IndexError, lambda: ex.translate(copied(zeros), lens_inputs["hidden"][n].clone(), n),
        f"translate at layer {n}, the last hidden state of a model of {n} blocks",
        "The last hidden state has no translator (kata.layer_index checks a layer).",
        "translate-layer-not-checked")
    check_message_names(message, [str(n - 1)], "translate-layer-range-not-named",
                        f"name the valid range of layers (-{n}..{n - 1})")


# ----------------------------------------------------------------------------- the lens


def test_untrained_lens_is_exercise_5s_logit_lens(ex, lens_inputs):
    """Fresh translators at every hidden state, the last one included: exercise 5's reading
    (final norm, unembedding, log-softmax; the last state straight to the unembedding)."""
    model, zeros, hidden = lens_inputs["model"], lens_inputs["zeros"], lens_inputs["hidden"]
    for layer in range(hidden.shape[0]):
        result = call_lens(ex, model, zeros, hidden[layer], layer)
        check_lens(result, model, zeros["A"], zeros["b"], hidden[layer], layer,
                   f"lens_log_probs with fresh translators at hidden state {layer}")
        expect(result.dtype == torch.float32, "tuned-lens-not-float32",
               f"lens_log_probs should return float32, got {result.dtype}")
        totals = result.detach().exp().sum(-1)
        assert torch.allclose(totals, torch.ones_like(totals), atol=1e-4), totals


def test_lens_reads_through_the_translator_then_the_norm_and_the_unembedding(ex, lens_inputs):
    model, translators, hidden = lens_inputs["model"], lens_inputs["random"], lens_inputs["hidden"]
    for layer in [*range(hidden.shape[0]), -2]:
        index = layer % hidden.shape[0]
        result = call_lens(ex, model, translators, hidden[index], layer)
        check_lens(result, model, translators["A"], translators["b"], hidden[index], index,
                   f"lens_log_probs with random translators at layer {layer}")


def test_lens_keeps_autograd_for_the_translators(ex, lens_inputs):
    translators = {name: [x.clone().requires_grad_(True) for x in value]
                   for name, value in lens_inputs["random"].items()}
    model = lens_inputs["model"]
    result = check_tensor(ex.lens_log_probs(model, translators, lens_inputs["hidden"][1].clone(),
                                            1), "lens_log_probs")
    expect(result.requires_grad, "tuned-lens-no-graph", (
        "lens_log_probs's result does not depend on the translators for autograd: training "
        "takes its gradient through it, so leave autograd on here (the caller that only reads "
        "turns it off)"))


def test_lens_rejects_a_layer_out_of_range(ex, lens_inputs):
    model, zeros, hidden = lens_inputs["model"], lens_inputs["zeros"], lens_inputs["hidden"]
    n = hidden.shape[0]
    message = raises_clearly(
        IndexError, lambda: ex.lens_log_probs(model, copied(zeros), hidden[0].clone(), n),
        f"lens_log_probs at layer {n} of {n} hidden states",
        "Check the layer first (kata.layer_index does, and names the valid range).",
        "tuned-lens-layer-not-checked")
    check_message_names(message, [str(n - 1)], "tuned-lens-layer-range-not-named",
                        f"name the valid range of layers (-{n}..{n - 1})")


# ----------------------------------------------------------------------------- the loss


def test_kl_is_taken_from_the_final_distribution(ex):
    lens, final = hand_made_distributions()
    check_kl(ex.kl_to_final(lens.clone(), final.clone()), lens, final,
             "kl_to_final of a broad lens and a peaked final distribution")


def test_kl_is_zero_when_the_lens_is_the_final_distribution(ex):
    _, final = hand_made_distributions()
    check_kl(ex.kl_to_final(final.clone(), final.clone()), final, final,
             "kl_to_final of a distribution and itself")


def test_kl_averages_over_every_dimension_but_the_vocabulary(ex):
    generator = torch.Generator().manual_seed(4)
    lens = torch.log_softmax(torch.randn(2, 3, 11, generator=generator), -1)
    final = torch.log_softmax(torch.randn(2, 3, 11, generator=generator) * 3, -1)
    check_kl(ex.kl_to_final(lens.clone(), final.clone()), lens, final,
             "kl_to_final of (2, 3, 11) log-probabilities (6 positions)")


def test_kl_keeps_autograd_to_the_lens(ex):
    lens, final = hand_made_distributions()
    value = check_tensor(ex.kl_to_final(lens.clone().requires_grad_(True), final.clone()),
                         "kl_to_final")
    expect(value.requires_grad, "kl-no-graph", (
        "kl_to_final's result does not depend on the lens for autograd: it is the loss that "
        "training differentiates, so compute it with torch's operations, where autograd records"))


def test_kl_rejects_distributions_of_different_shapes(ex):
    lens, final = hand_made_distributions()
    raises_clearly(ValueError, lambda: ex.kl_to_final(lens.clone(), final[:1].clone()),
                   "kl_to_final of (2, 5) and (1, 5) log-probabilities",
                   "Compare the two shapes first: the lens and the final distribution must be "
                   "read at the same positions.", "kl-input-not-checked")


# ----------------------------------------------------------------------------- training


def test_train_returns_plain_data_with_its_progress(ex, small):
    model = small_model()
    state = call_train(ex, model, small["fresh"], small["data"])
    check_state(state, model, "train_tuned_lens's result", layers=RUN["layers"],
                steps_done=RUN["steps"])


def test_train_is_adam_on_the_given_batches_of_the_training_part(ex, small):
    """The held-out part's hidden states are all NaN here: training never reads them."""
    model = small_model()
    state = call_train(ex, model, small["fresh"], poisoned(small["data"]))
    check_state(state, model, "train_tuned_lens's result")
    check_trained(state, small["run"], trained_wrong_runs(small), small["fresh"], RUN["layers"],
                  f"train_tuned_lens({RUN})")


def test_train_leaves_the_model_as_it_was(ex, small):
    """No .grad on the model's parameters, and their requires_grad as they were: read from what
    your lens_log_probs gives on the model afterwards (with translators that need no gradient,
    the result needs one only through the model's own weights)."""
    model = small_model()
    zeros, h = small["fresh"], small["data"]["train"]["hidden"][0, :4]
    before = check_tensor(ex.lens_log_probs(model, copied(zeros), h.clone(), 0),
                          "lens_log_probs").requires_grad
    try:
        call_train(ex, model, small["fresh"], small["data"])
        left = grads_left(model)
        expect(not left, "tuned-grad-on-model", (
            f"after training, {len(left)} parameters of the model have a .grad "
            f"({', '.join(left[:3])}...): the loss's gradient reached the model. Ask autograd "
            "for the translators' gradients only (torch.autograd.grad), or freeze the model "
            "during training and restore its requires_grad afterwards"))
        after = check_tensor(ex.lens_log_probs(model, copied(zeros), h.clone(), 0),
                             "lens_log_probs").requires_grad
        expect(after or not before, "tuned-model-left-frozen", (
            "after training the model's parameters no longer require gradients (your "
            "lens_log_probs's result needed a gradient through the model's weights before "
            "training, and none after): a model frozen for training must get its "
            "requires_grad back, on every way out of the function"))
    finally:
        clear_grads(model)


def test_train_never_changes_the_dict_it_is_given(ex, small):
    """Resuming from a result (and starting from fresh translators) leaves the dict given as it
    was, to the last bit: a state you keep can be resumed twice, or judged after."""
    model = small_model()
    fresh = copied(small["fresh"])
    first = ex.train_tuned_lens(model, fresh, copied(small["data"]), progress=False,
                                **{**RUN, "steps": 2})
    expect(same_state(fresh, small["fresh"]), "tuned-state-changed-in-place", (
        "train_tuned_lens changed the fresh translators it was given in place: train copies "
        "of A and b, and return new tensors"))
    check_state(first, model, "train_tuned_lens's result after 2 steps")
    kept = copied(first)
    ex.train_tuned_lens(model, first, copied(small["data"]), progress=False, **RUN)
    expect(same_state(first, kept), "tuned-state-changed-in-place", (
        "resuming changed the dict it was given in place (its translators or its optimizer "
        "state): an optimizer's load_state_dict keeps the very tensors it is given and Adam "
        "then updates them; load a deep copy, and train copies of A and b"))


def test_train_resumed_gives_what_one_call_gives(ex, small):
    model = small_model()
    first = call_train(ex, model, small["fresh"], small["data"], steps=2)
    check_state(first, model, "train_tuned_lens's result after 2 steps", steps_done=2)
    resumed = call_train(ex, model, first, small["data"])
    check_translator_tensors(resumed, "train_tuned_lens resumed to 4 steps", len(first["A"]))
    check_trained(resumed, small["run"], resumed_wrong_runs(small, 2), small["fresh"],
                  RUN["layers"], "train_tuned_lens resumed to 4 steps")
    check_state(resumed, model, "train_tuned_lens resumed to 4 steps", steps_done=RUN["steps"])
    expect(len(resumed["losses"]) == RUN["steps"]
           and math.isclose(resumed["losses"][0], small["run"]["losses"][0], rel_tol=1e-3),
           "tuned-losses-not-one-per-step",
           "a resumed run's losses go on the earlier ones': one per step done in all")


def test_a_finished_run_does_nothing(ex, small):
    model = small_model()
    done = call_train(ex, model, small["fresh"], small["data"])
    again = call_train(ex, model, done, small["data"])
    expect(isinstance(again, dict) and again.get("steps_done") == RUN["steps"]
           and close_translators(again, small["run"]), "tuned-finished-run-trained-again", (
               f"called again with a run that has done its {RUN['steps']} steps, "
               "train_tuned_lens trained further: `steps` is the run's total, so a finished run "
               "has nothing left to do"))


def test_train_takes_every_translated_layer_by_default(ex, small):
    model = small_model()
    n = len(small["fresh"]["A"])
    try:
        state = call_train(ex, model, small["fresh"], small["data"], layers=None, steps=2)
    except IndexError as error:
        from course.shared.diagnosis import diagnose

        diagnose("tuned-last-layer-trained", (
            f"train_tuned_lens with the default layers raised IndexError ({error}): the "
            f"default is every hidden state that has a translator, 0 .. {n - 1}; the last "
            "hidden state is the model's output, with no translator to train"))
    check_state(state, model, "train_tuned_lens with the default layers",
                layers=list(range(n)), steps_done=2)
    expect(close_translators(state, small["all"]), "tuned-default-layers-wrong",
           f"train_tuned_lens with the default layers should train all {n} translators")


def test_train_rejects_what_it_cannot_run(ex, small):
    model = small_model()
    fresh, data = small["fresh"], small["data"]
    started = {**copied(fresh), "layers": [0], "steps_done": 1, "losses": [1.0], "optimizer": None}
    for case, given, options, why in (
            ("no layers", fresh, {"layers": []}, "An empty list trains nothing."),
            ("no tokens", fresh, {"tokens_per_step": 0}, "A step needs positions."),
            ("other layers on resume", started, {"layers": [0, 2]},
             "A run resumes with the layers it was started with.")):
        raises_clearly(ValueError, lambda: call_train(ex, model, given, data, **options),
                       f"train_tuned_lens with {case}", why, "tuned-input-not-checked")


def test_train_rejects_a_layer_without_a_translator(ex, small):
    model = small_model()
    n = len(small["fresh"]["A"])
    message = raises_clearly(
        IndexError, lambda: call_train(ex, model, small["fresh"], small["data"], layers=[0, n]),
        f"train_tuned_lens with layers [0, {n}] for {n} translators",
        "The last hidden state has no translator (kata.layer_index checks a layer).",
        "tuned-layer-not-checked")
    check_message_names(message, [str(n - 1)], "tuned-layer-range-not-named",
                        f"name the valid range of layers (-{n}..{n - 1})")


# ----------------------------------------------------------------------------- ranks


@pytest.mark.parametrize("translators", ["zeros", "random"])
def test_next_token_ranks_count_the_tokens_above_the_true_one(ex, lens_inputs, translators):
    model, part = lens_inputs["model"], lens_inputs["part"]
    chosen = lens_inputs[translators]
    ranks = ex.next_token_ranks(model, copied(chosen), copied(part))
    check_ranks(ranks, model, chosen, part,
                f"next_token_ranks with {'fresh' if translators == 'zeros' else 'random'} "
                "translators", lens=lambda h, layer: ex.lens_log_probs(model, copied(chosen),
                                                                       h.clone(), layer))


# ----------------------------------------------------------------------------- the figure


@pytest.mark.parametrize("layers", [[0, 2], None])
def test_figure_draws_both_lenses_median_ranks_on_a_log_axis(ex, tiny_gpt2, figures, layers):
    inputs = random_figure_inputs(torch.Generator().manual_seed(6), tiny_gpt2[1], 6, 9, 400)
    fig = ex.plot_tuned_lens(*copied(list(inputs.values())), tiny_gpt2[1], layers=layers,
                             position_label='after "...into a gigantic"')
    figures.append(fig)
    check_curves(fig, inputs, layers, f"figure 16 with layers={layers}")


def test_figure_shows_the_top_tokens_under_both_lenses(ex, tiny_gpt2, figures):
    inputs = random_figure_inputs(torch.Generator().manual_seed(7), tiny_gpt2[1], 6, 9, 400)
    fig = ex.plot_tuned_lens(*copied(list(inputs.values())), tiny_gpt2[1], layers=[0, 2],
                             position_label='after "...into a gigantic"')
    figures.append(fig)
    check_cells(fig, inputs, tiny_gpt2[1], [0, 2], "figure 16's top tokens")


def test_figure_rejects_a_layer_that_is_not_a_hidden_state(ex, tiny_gpt2, figures):
    inputs = random_figure_inputs(torch.Generator().manual_seed(6), tiny_gpt2[1], 6, 9, 400)

    def draw():
        figures.append(ex.plot_tuned_lens(*copied(list(inputs.values())), tiny_gpt2[1],
                                          layers=[0, 6]))

    message = raises_clearly(IndexError, draw, "plot_tuned_lens with layers [0, 6] of 6 hidden "
                             "states", "Check each layer (kata.layer_index does).",
                             "tuned-plot-layer-not-checked")
    check_message_names(message, ["5"], "tuned-plot-layer-range-not-named",
                        "name the valid range of layers (-6..5)")


# ----------------------------------------------------------------------------- trained weights


@pytest.mark.trained
def test_on_smollm2_first_blocks(ex, smollm2_first_blocks):
    """On trained weights (SmolLM2's first 4 blocks: Llama's architecture, RMSNorm, a tied
    unembedding): collect two short texts, make translators, train two steps at hidden states 0
    and 2."""
    model, tokenizer = smollm2_first_blocks
    texts = [kata.PENGUIN_TEXT, kata.KAFKA_TEXT]
    expected = reference_collect(model, tokenizer, texts, held_out=0.5)
    data = ex.collect(model, tokenizer, texts, held_out=0.5)
    check_collected(data, expected, "collect on SmolLM2's first 4 blocks")
    data = {name: {"hidden": expected[name]["hidden"], "next_ids": expected[name]["next_ids"]}
            for name in ("train", "held_out")}
    check_translators(ex.make_translators(model), model, "make_translators on SmolLM2's first 4 blocks")
    fresh = zero_translators(model)
    options = {"layers": [0, 2], "steps": 2, "tokens_per_step": 4, "lr": 3e-3, "seed": 0}
    try:
        state = call_train(ex, model, fresh, data, **options)
        left = grads_left(model)
    finally:
        clear_grads(model)
    expect(not left, "tuned-grad-on-model",
           f"after training on SmolLM2's first blocks, {len(left)} parameters have a .grad")
    run = reference_training(model, fresh, data, options["layers"], 2, 4, 3e-3, 0)
    check_trained(state, run, {}, fresh, options["layers"], "two steps on SmolLM2's first blocks",
                  lr=3e-3, steps=2)
