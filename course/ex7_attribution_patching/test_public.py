"""Exercise 7 (bonus): attribution patching (the one-pass estimate, and where it fails).

What each function must do, one behaviour per test. Every expected value comes from the model or
from torch, never from the solution (``checks.py``); the tests watch the model with hooks of
their own and look at the parameters' ``.grad`` afterwards.
"""

import pytest
import torch

import kata
from course.shared.support import (
    check_tensor,
    draw_headless,
    expect,
    figures,  # noqa: F401 - a fixture
    raises_clearly,
)
from kata.hooks import hook_snapshot

from .checks import (  # noqa: F401 - first_blocks, tiny, watched: fixtures
    InjectedFailure,
    attribution_reference,
    call_attribution,
    check_estimate_figure,
    check_estimate_shape,
    check_summary,
    clear_grads,
    close,
    copies,
    first_blocks,
    made_maps,
    name_wrong_estimate,
    run_compare,
    run_plot,
    tiny,
    watched,
)

# ----------------------------------------------------------------------------- the estimate


def test_attribution_patching_is_the_normalised_linear_estimate_on_tiny_gpt2(ex, tiny_gpt2, tiny):
    model, _ = tiny_gpt2
    try:
        estimate = check_tensor(call_attribution(ex, model, tiny["args"]), "attribution_patching")
    finally:
        clear_grads(model)
    expected = tiny["estimate"]
    check_estimate_shape(estimate, expected, "attribution_patching")
    expect(estimate.dtype == torch.float32 and not estimate.requires_grad,
           "attribution-not-detached-float32",
           f"return a float32 tensor detached from autograd, got {estimate.dtype} with "
           f"requires_grad={estimate.requires_grad}")
    estimate = estimate.detach().double()
    if not close(estimate, expected):
        name_wrong_estimate(estimate, expected, tiny["clean"] - tiny["corrupted"],
                            "on the tiny GPT-2",
                            lambda: attribution_reference(model, *tiny["args"], run="clean"))


def test_one_forward_pass_with_gradients_and_no_grad_left(watched):
    watcher, left = watched
    expect(left == 0, "attribution-grad-left-on-parameters", (
        f"{left} parameters of the model have a .grad after the call: metric.backward() "
        "accumulates gradients into every parameter (and the next backward adds to them). Only "
        "the gradients of the block outputs are needed, and autograd can return those alone "
        "(torch.autograd.grad), leaving the model as it was"))
    recorded = [which for which, grad in watcher.runs if grad]
    expect("clean" not in recorded, "attribution-clean-run-with-grad", (
        "the clean prompt ran with autograd recording: its hidden states are only the target "
        "of the patch, and need no gradient"))
    expect(len(recorded) == 1, "attribution-not-one-pass", (
        f"{len(recorded)} forward passes recorded autograd ({recorded}): the estimate needs one "
        "forward and one backward pass of the corrupted prompt for every cell at once"))


def test_hooks_are_left_exactly_as_they_were(ex, tiny_gpt2, tiny):
    model, _ = tiny_gpt2
    before = hook_snapshot(model)
    try:
        call_attribution(ex, model, tiny["args"])
    finally:
        clear_grads(model)
    expect(hook_snapshot(model) == before, "attribution-hook-left",
           "a hook was left on the model: every hook you register must come off again")


def test_hooks_are_removed_when_a_forward_pass_raises(ex, tiny_gpt2, tiny):
    """The run that records autograd (the corrupted one, with your hooks on the blocks) fails at
    the final norm. Whether autograd records is read from the hidden states the norm gets, which
    cross the grader's boundary (your hooks do not)."""
    model, _ = tiny_gpt2
    before = hook_snapshot(model)

    def explode(module, args):
        if args[0].requires_grad:
            raise InjectedFailure("the forward pass failed (injected by the test)")

    handle = kata.final_norm(model).register_forward_pre_hook(explode)
    raised = False
    try:
        call_attribution(ex, model, tiny["args"])
    except InjectedFailure:
        raised = True
    finally:
        handle.remove()
        clear_grads(model)
    expect(hook_snapshot(model) == before, "attribution-hooks-not-removed-on-error", (
        "after a forward pass raised, a hook was still on the model: a hook must come off on "
        "every way out of the function, an exception included"))
    assert raised, ("attribution_patching ran no forward pass with autograd recording, or "
                    "swallowed the forward pass's exception: let errors propagate")


@pytest.mark.parametrize("case", ["prompts of different lengths", "nothing to restore",
                                  "bad_id not a token"])
def test_bad_input_gets_a_clear_error(ex, tiny_gpt2, tiny, case):
    model, _ = tiny_gpt2
    clean, corrupted, good, bad = tiny["args"]
    arguments, why = {
        "prompts of different lengths": ((clean, corrupted[:, 1:], good, bad),
                                         "Compare the two lengths; never truncate a prompt."),
        "nothing to restore": ((corrupted, corrupted, good, bad),
                               "Equal metrics leave nothing to normalise by."),
        "bad_id not a token": ((clean, corrupted, good, -1), "kata.token_id checks an id."),
    }[case]
    try:
        raises_clearly(ValueError, lambda: ex.attribution_patching(model, *copies(arguments)),
                       f"attribution_patching with {case}", why, "attribution-input-not-checked")
    finally:
        clear_grads(model)


# ----------------------------------------------------------------------------- comparing


def test_compare_estimates_gives_r_the_sign_agreement_and_the_worst_cells(ex):
    exact, estimate = made_maps()
    summary = run_compare(ex, exact, estimate, 0.2, 3)
    # 4 cells have |exact| > 0.2 (0.9, 0.3, -0.5, 0.8); the estimate has the sign of 3 of them
    check_summary(summary, exact.numpy(), estimate.numpy(), 0.2, 3, large=" (0.9, 0.3, -0.5, 0.8)")


def test_compare_estimates_rejects_maps_of_different_shapes(ex):
    exact, estimate = made_maps()
    raises_clearly(ValueError, lambda: ex.compare_estimates(exact, estimate[:, :2]),
                   "compare_estimates with maps of shapes (2, 3) and (2, 2)",
                   "Check that both maps are 2-D and of the same shape.", "compare-input-not-checked")


# ----------------------------------------------------------------------------- the figure


def test_figure_scatters_the_cells_around_the_identity_and_labels_the_worst(ex, figures):
    exact, estimate = made_maps()
    tokens = ["The", " Eiffel", " Tower"]  # the worst cells: (0, 0) "L0 The", (1, 2) "L1 Tower"
    fig = run_plot(ex, exact, estimate, tokens, 2)
    ax = check_estimate_figure(ex, fig, exact, estimate, tokens, 2, figures)
    expect(bool(ax.get_xlabel() and ax.get_ylabel()), "estimate-plot-axis-labels-missing",
           f"label both axes (x: {ax.get_xlabel()!r}, y: {ax.get_ylabel()!r})")
    draw_headless(fig)


# ----------------------------------------------------------------------------- trained weights


@pytest.mark.trained
def test_on_smollm2_first_blocks(ex, smollm2_first_blocks, first_blocks):
    """On trained weights (SmolLM2's first 4 blocks, Llama's architecture): the estimate computed
    here. The whole model's numbers are checked in tests/course/test_model_facts.py."""
    model, _ = smollm2_first_blocks
    try:
        estimate = check_tensor(call_attribution(ex, model, first_blocks["args"]),
                                "attribution_patching")
    finally:
        clear_grads(model)
    expected = first_blocks["estimate"]
    scale = first_blocks["clean"] - first_blocks["corrupted"]
    check_estimate_shape(estimate, expected, "attribution_patching on SmolLM2's first 4 blocks")
    estimate = estimate.detach().double()
    if (estimate - expected).abs().max().item() >= 1e-3:
        name_wrong_estimate(estimate, expected, scale, "on SmolLM2's first 4 blocks")
