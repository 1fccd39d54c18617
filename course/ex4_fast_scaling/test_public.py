"""Exercise 4 (bonus): the scaling experiment in one batched forward pass.

What the function must do, one behaviour per test: give exercise 3's values (the loop's, computed
in ``checks.py`` with a hook of its own, never from the solution), and do so in one pass that
grows its batch block by block and unembeds the last position only. The code under test comes
from the ``ex`` fixture.
"""

import pytest
import torch

import kata
from kata.hooks import hook_snapshot
from course.shared.support import expect, raises_clearly

from .checks import (  # noqa: F401 - first_blocks_reference, tiny_reference, work: fixtures
    FACTOR,
    check_factor_one,
    check_last_position_only,
    check_matches_the_loop,
    check_no_hook_left,
    check_one_pass,
    check_rows_per_block,
    first_blocks_reference,
    tiny_reference,
    work,
)

# ----------------------------------------------------------------------------- the values


def test_matches_the_per_block_loop_on_tiny_gpt2(ex, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    ids, target_id = tiny_reference["ids"], tiny_reference["target_id"]
    values = ex.fast_scaling_experiment(model, ids, target_id, FACTOR)
    check_matches_the_loop(values, tiny_reference["expected"], "tiny-gpt2")


@pytest.mark.trained
def test_matches_the_per_block_loop_on_smollm2_first_blocks(ex, smollm2_first_blocks,
                                                             first_blocks_reference):
    """Trained weights and Llama's architecture (rotary positions, RMSNorm) in 4 blocks: the loop
    costs one forward pass per block, 4 here against SmolLM2's 30 (5 s in a fresh process)."""
    model, _ = smollm2_first_blocks
    reference = first_blocks_reference
    values = ex.fast_scaling_experiment(model, reference["ids"], reference["target_id"], FACTOR)
    check_matches_the_loop(values, reference["expected"], "SmolLM2's first 4 blocks")


def test_factor_one_gives_the_clean_value_at_every_block(ex, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    values = ex.fast_scaling_experiment(model, tiny_reference["ids"], tiny_reference["target_id"],
                                        1.0)
    check_factor_one(values, tiny_reference["clean"])


# ----------------------------------------------------------------------------- the work saved


def test_one_forward_pass(work):
    counter, _, _ = work
    check_one_pass(counter)


def test_rows_before_their_block_are_computed_once(work):
    counter, n_blocks, _ = work
    check_rows_per_block(counter, n_blocks)


def test_logits_only_at_the_last_position(work):
    counter, _, _ = work
    check_last_position_only(counter)


# ----------------------------------------------------------------------------- the hooks


def test_hooks_are_left_exactly_as_they_were(ex, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    before = hook_snapshot(model)
    ex.fast_scaling_experiment(model, tiny_reference["ids"], tiny_reference["target_id"], FACTOR)
    check_no_hook_left(model, before)


def test_hooks_are_removed_when_the_forward_pass_raises(ex, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2

    class InjectedFailure(Exception):
        pass

    def explode(module, args):
        raise InjectedFailure("the forward pass failed")

    before = hook_snapshot(model)
    handle = kata.final_norm(model).register_forward_pre_hook(explode)
    try:
        with pytest.raises(InjectedFailure):
            ex.fast_scaling_experiment(model, tiny_reference["ids"], tiny_reference["target_id"],
                                       FACTOR)
    finally:
        handle.remove()
    expect(hook_snapshot(model) == before, "fast-scaling-hooks-not-removed-on-error", (
        "after the forward pass raised, a hook of fast_scaling_experiment was still on the "
        "model: the hooks must come off on every way out of the function, an exception "
        "included"))


# ----------------------------------------------------------------------------- bad input


def test_a_target_that_is_no_token_id_is_a_clear_value_error(ex, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    bad = model.config.vocab_size + 5
    message = raises_clearly(
        ValueError, lambda: ex.fast_scaling_experiment(model, tiny_reference["ids"], bad, FACTOR),
        f"fast_scaling_experiment with target_id {bad}",
        "Check the target against the vocabulary first (kata.token_id does).",
        "fast-target-id-not-checked")
    expect("token id" in message, "fast-target-id-message",
           f"the ValueError should say that {bad} is not a token id, got {message!r}")


def test_a_text_longer_than_the_context_is_a_clear_value_error(ex, tiny_gpt2):
    model, _ = tiny_gpt2
    too_long = torch.zeros(1, kata.context_length(model) + 1, dtype=torch.long)
    message = raises_clearly(
        ValueError, lambda: ex.fast_scaling_experiment(model, too_long, 0, FACTOR),
        "fast_scaling_experiment on a text longer than the context",
        "Check the input against the model's context first (kata.one_sequence does).",
        "fast-context-length-not-checked")
    expect("context" in message, "fast-context-length-message",
           f"the ValueError should name the model's context length, got {message!r}")
