"""Exercise 6: activation patching (where the model keeps "Paris").

What each function must do, one behaviour per test. Every expected value comes from the model or
from torch, never from the solution (``checks.py``). The tiny GPT-2 carries the structure tests;
SmolLM2 cut to its first 4 blocks checks the same on trained weights.
"""

import pytest
import torch

from course.shared.diagnosis import diagnose
from course.shared.library_errors import Sizes, learner_run
from course.shared.support import (
    TensorBlock,
    check_message_names,
    check_shape,
    check_tensor,
    draw_headless,
    expect,
    figures,  # noqa: F401 - a fixture
    raises_clearly,
)
from kata.hooks import hook_snapshot

from .checks import (  # noqa: F401 - first_blocks, tiny, work: fixtures
    MAP_FUNCTIONS,
    TOKENS,
    as_map,
    check_heatmap,
    check_map,
    check_patch_hook_on_a_toy_block,
    copies,
    first_blocks,
    made_effect,
    made_logits,
    metric_mistake,
    run_hooked,
    run_learner,
    run_map,
    run_with,
    tiny,
    toy_input,
    work,
)

# ----------------------------------------------------------------------------- logit_difference


def test_logit_difference_is_read_at_the_last_position(ex):
    logits = made_logits()
    got = check_tensor(run_learner(ex, "logit_difference", logits, 3, 5, sizes=Sizes(0, 5, vocab=7)),
                       "logit_difference")
    check_shape(got, (2,), "logit_difference of (batch, T, vocab_size) logits", "one value per row",
                diagnosis="logit-difference-shape-wrong")
    mistake = metric_mistake(got, logits, 3, 5)
    if mistake is not None:
        diagnose(*mistake)


def test_logit_difference_of_one_text_is_a_float32_number(ex):
    """float64 logits in, a float32 metric out, as the docstring promises."""
    logits = made_logits()[0].double()  # (T, vocab_size)
    expected = (logits[-1, 1] - logits[-1, 2]).item()
    got = check_tensor(run_learner(ex, "logit_difference", logits, 1, 2, sizes=Sizes(0, 5, vocab=7)),
                       "logit_difference")
    check_shape(got, (), "logit_difference of (T, vocab_size) logits", "a 0-d tensor for one text",
                diagnosis="logit-difference-shape-wrong")
    expect(got.dtype == torch.float32, "logit-difference-not-float32",
           f"on float64 logits your function returned {got.dtype}: the metric is float32 "
           "whatever the logits' dtype")
    assert abs(got.item() - expected) < 1e-5, f"expected {expected:.5f}, got {got.item():.5f}"


@pytest.mark.parametrize("case", ["one-dimensional logits", "good_id not a token", "bad_id negative"])
def test_logit_difference_rejects_bad_input(ex, case):
    logits = made_logits()
    arguments = {"one-dimensional logits": (logits[0, -1], 1, 2),
                 "good_id not a token": (logits, 7, 2),
                 "bad_id negative": (logits, 1, -1)}[case]
    raises_clearly(ValueError, lambda: ex.logit_difference(*arguments),
                   f"logit_difference with {case}",
                   "Check the logits' shape and both ids first (kata.token_id checks an id).",
                   "logit-difference-input-not-checked")


# ----------------------------------------------------------------------------- patch_hook


@pytest.mark.parametrize("block_kind", ["tensor", "tuple"])
@pytest.mark.parametrize("position", [1, -1])
def test_patch_hook_replaces_one_position_in_every_row(ex, block_kind, position):
    check_patch_hook_on_a_toy_block(ex, block_kind, position)


def test_patch_hook_works_out_of_place(ex):
    """A hook of the test's own, registered first, keeps the block's original output."""
    block, x = TensorBlock(), toy_input()
    kept = {}

    def keep(module, inputs, output):
        kept["output"], kept["copy"] = output, output.clone()

    first = block.register_forward_hook(keep)
    try:
        learner_run(lambda: run_hooked(block, ex.patch_hook(2, torch.zeros(3)), x), "patch_hook",
                    Sizes(0, 4, d_model=3), "patch-hook",
                    inputs="position 2 and a vector of 3 numbers, on a block output (2, 4, 3)")
    finally:
        first.remove()
    expect(torch.equal(kept["output"], kept["copy"]), "patch-hook-in-place", (
        "the hook changed the block's own output tensor in place: other hooks, the model and any "
        "cache made from it see the change (a clean cache gets corrupted). A patch is made on a "
        "copy, never on the tensor the block returned"))


def test_patch_hook_rejects_bad_input(ex):
    raises_clearly(ValueError, lambda: ex.patch_hook(0, torch.zeros(2, 3)),
                   "patch_hook with new_hidden of shape (2, 3)",
                   "new_hidden is one vector (d_model,): check its shape when the hook is made.",
                   "patch-hook-input-not-checked")
    block, x = TensorBlock(), toy_input()
    raises_clearly(IndexError, lambda: run_hooked(block, ex.patch_hook(4, torch.zeros(3)), x),
                   "a patch_hook for position 4 on an output of 4 tokens",
                   "Only the hook sees how many tokens the output has: it checks the position "
                   "when it runs (kata.token_index checks a position).",
                   "patch-hook-position-not-checked")
    raises_clearly(ValueError, lambda: run_hooked(block, ex.patch_hook(0, torch.zeros(5)), x),
                   "a patch_hook with a vector of 5 numbers on an output with d_model 3",
                   "new_hidden must have as many numbers as the output's vectors.",
                   "patch-hook-size-not-checked")


# ----------------------------------------------------------------------------- the maps


@pytest.mark.parametrize("function", MAP_FUNCTIONS)
def test_the_map_is_the_normalised_restored_metric_on_tiny_gpt2(ex, tiny_gpt2, tiny, function):
    model, _ = tiny_gpt2
    effect = run_map(ex, function, model, tiny["args"], "on the tiny GPT-2")
    value = check_tensor(effect, function)
    expect(value.dtype == torch.float32, "patching-not-float32", f"expected float32, got {value.dtype}")
    check_map(ex, model, effect, tiny, function, "the tiny GPT-2")


def test_a_patch_at_the_last_block_only_matters_at_the_last_position(ex, tiny_gpt2, tiny):
    """After the last block only the final norm and the unembedding remain, position by position."""
    model, _ = tiny_gpt2
    effect = as_map(run_map(ex, "patching_effect", model, tiny["args"], "on the tiny GPT-2"),
                    "patching_effect")
    expect(effect.shape[0] >= 1 and effect[-1, :-1].abs().max() < 1e-4 and abs(effect[-1, -1] - 1) < 1e-4,
           "patching-last-block-wrong", (
               f"patching the last block's output: positions before the last cannot change the "
               f"prediction (0) and the last position carries all of it (1); got "
               f"{[round(v, 4) for v in effect[-1].tolist()]}"))


@pytest.mark.parametrize("function", MAP_FUNCTIONS)
def test_hooks_are_left_exactly_as_they_were(ex, tiny_gpt2, tiny, function):
    model, _ = tiny_gpt2
    before = hook_snapshot(model)
    run_map(ex, function, model, tiny["args"], "on the tiny GPT-2")
    expect(hook_snapshot(model) == before, "patching-hook-left",
           f"{function} left a hook on the model: every hook you register must come off again")


@pytest.mark.parametrize("function", MAP_FUNCTIONS)
def test_hooks_are_removed_when_a_forward_pass_raises(ex, tiny_gpt2, tiny, function):
    """A forward pass fails: the first one, then the last one (a patched run)."""
    model, _ = tiny_gpt2
    before = hook_snapshot(model)

    def call():
        run_map(ex, function, model, tiny["args"], "on the tiny GPT-2")

    counted, _ = run_with(model, call, None)
    assert counted.count, f"{function} ran no forward pass through the model's final norm"
    for at in sorted({1, counted.count}):
        _, raised = run_with(model, call, at)
        expect(hook_snapshot(model) == before, "patching-hooks-not-removed-on-error", (
            f"after forward pass {at} of {function} raised, a hook was still on the model: a hook "
            "must come off on every way out of the function, an exception included"))
        assert raised, f"{function} swallowed the forward pass's exception: let it propagate"


@pytest.mark.parametrize("function", MAP_FUNCTIONS)
@pytest.mark.parametrize("case", ["prompts of different lengths", "nothing to restore",
                                  "good_id not a token"])
def test_bad_input_gets_a_clear_error(ex, tiny_gpt2, tiny, function, case):
    model, _ = tiny_gpt2
    clean, corrupted, good, bad = tiny["args"]
    arguments, diagnosis, why = {
        "prompts of different lengths": (
            (clean, corrupted[:, :-1], good, bad), "patching-lengths-not-checked",
            "Patching pairs position p with position p: two prompts of different lengths are "
            "refused with a ValueError, never truncated."),
        "nothing to restore": (
            (clean, clean, good, bad), "patching-nothing-to-restore-not-checked",
            "With equal clean and corrupted metrics the normalisation divides by 0: raise a "
            "ValueError saying there is nothing to restore."),
        "good_id not a token": (
            (clean, corrupted, model.config.vocab_size + 3, bad), "patching-token-id-not-checked",
            "kata.token_id checks an id."),
    }[case]
    message = raises_clearly(ValueError, lambda: getattr(ex, function)(model, *copies(arguments)),
                             f"{function} with {case}", why, diagnosis)
    if case == "prompts of different lengths":
        check_message_names(message, [clean.shape[1], clean.shape[1] - 1], "patching-lengths-message",
                            "give both prompts' lengths")


# ----------------------------------------------------------------------------- the fast version's work


def test_fast_patching_reuses_what_no_patch_changes(work):
    counter, n_blocks, n_tokens = work
    for prompt, reuse in (("clean", "the run that keeps the clean block outputs also gives the "
                           "clean metric"),
                          ("corrupted", "the run that grows the patched rows starts from the "
                           "corrupted prompt alone, and its first row is the corrupted run, "
                           "whose metric is the map's 0")):
        alone = counter.runs_alone(prompt)
        expect(len(alone) <= 1, "fast-patching-prompt-run-twice", (
            f"your fast_patching_effect ran the {prompt} prompt {len(alone)} times (runs of "
            f"{[run['rows'] for run in alone]} rows): one run of each prompt gives everything "
            f"the map needs, since {reuse}"))
    first = counter.rows.get(0, [])
    expect(sum(r or 0 for r in first) <= 2, "fast-patching-prefix-recomputed", (
        f"block 0 ran {len(first)} time(s) on {sum(r or 0 for r in first)} rows in all: your "
        "patched runs went through block 0 as well. Before block l a run patched at block l is "
        "still the corrupted run, so block 0 needs one row of each prompt, and a run patched at "
        "block l becomes a row of its own only after block l"))
    total = [sum(r or 0 for r in counter.rows.get(j, [])) for j in range(n_blocks)]
    bound = [2 + n_tokens * j for j in range(n_blocks)]
    expect(all(t <= b for t, b in zip(total, bound)), "fast-patching-prefix-recomputed", (
        f"rows per block {total}; at most {bound} are needed: block j runs the clean and the "
        f"corrupted prompt and the runs patched at blocks 0 .. j - 1, {n_tokens} each"))


def test_fast_patching_unembeds_only_the_last_position(work):
    """The patched rows are unembedded at their last position only; a run of one prompt (the
    clean run that fills the cache, say) may unembed every position: that is one row. (An
    unembedding written as a matrix product with the weight never runs the module: it is read
    by the map's values alone.)"""
    counter, n_blocks, n_tokens = work
    batched = [shape for shape in counter.unembedded if len(shape) == 3 and shape[0] > 2]
    wide = [shape for shape in batched if shape[1] > 1]
    expect(not wide, "fast-patching-unembeds-every-position", (
        f"the unembedding ran on {wide[0][1] if wide else 0} positions of {wide[0][0] if wide else 0} "
        f"rows (inputs {counter.unembedded}): only the last position predicts the next token, so "
        "it is the only one the patched rows need unembedded"))


# ----------------------------------------------------------------------------- the figure


def test_figure_is_the_map_as_a_centred_diverging_heatmap_that_stays_legible(ex, figures):
    effect = made_effect()
    fig = run_learner(ex, "plot_patching_effect", effect, TOKENS, sizes=Sizes(30, 6))
    ax, _ = check_heatmap(fig, effect.numpy(), TOKENS, figures)
    ylabels = [label.get_text() for label in ax.get_yticklabels()]
    expect(ylabels == [f"L{i}" for i in range(30)], "patching-plot-block-labels",
           f"label the rows L0 .. L29, one per block, got {ylabels[:3]}...")
    expect(len(fig.axes) >= 2, "patching-plot-no-colorbar",
           "add a colour bar, so that the colours can be read as numbers")
    row_points = ax.get_window_extent().height * 72 / fig.dpi / 30
    size = max(label.get_fontsize() for label in ax.get_yticklabels())
    expect(size <= row_points * 1.05, "patching-plot-illegible", (
        f"with 30 blocks each row is {row_points:.1f} points tall, but the row labels are "
        f"{size:g} points: the figure needs about 0.25 inch of height per block"))
    draw_headless(fig)


# ----------------------------------------------------------------------------- trained weights


@pytest.mark.trained
@pytest.mark.parametrize("function", MAP_FUNCTIONS)
def test_maps_on_smollm2_first_blocks(ex, smollm2_first_blocks, first_blocks, function):
    model, _ = smollm2_first_blocks
    effect = run_map(ex, function, model, first_blocks["args"], "on SmolLM2's first 4 blocks")
    check_map(ex, model, effect, first_blocks, function,
              "SmolLM2's first 4 blocks with the subjects' 4 tokens")
