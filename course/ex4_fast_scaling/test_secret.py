"""Exercise 4's secret checks: the function again, on inputs nobody prepared for.

Each check draws from a seed only the grader knows and from spaces no table can hold
(``course/shared/secret.py``): a GPT-2 of random sizes and weights with random token ids, or a
text of random words on the tiny GPT-2, and a random target and factor. The loop's values are
computed here, from those inputs, before the function sees them; on the model of random sizes
the check also counts the work done (one pass, one more row per block, the last position
unembedded) and looks for a hook left behind. The function's points count only if its checks
pass.
"""

from kata.hooks import hook_snapshot
from course.shared.secret import repeat_hint, secret, secret_check  # noqa: F401 - a fixture
from course.shared.support import scaled_block_log_probs

from .checks import (
    WorkCounter,
    check_last_position_only,
    check_matches_the_loop,
    check_no_hook_left,
    check_one_pass,
    check_rows_per_block,
)


@secret_check("fast_scaling_experiment")
def test_secret_fast_scaling_matches_the_loop_in_one_pass_on_a_model_of_random_sizes(ex, secret):
    model = secret.gpt2(layers=(1, 5))
    vocab_size, n_blocks = model.config.vocab_size, model.config.n_layer
    ids = secret.token_ids(vocab_size, secret.integer(2, 20))  # (1, T)
    target_id = secret.integer(0, vocab_size - 1)
    factor = secret.number(0.3, 2.0)
    expected = scaled_block_log_probs(model, ids, target_id, factor)
    given = ids[0].clone() if secret.choice([True, False]) else ids.clone()  # (T,) or (1, T)
    before = hook_snapshot(model)
    counter = WorkCounter(model)
    try:
        values = ex.fast_scaling_experiment(model, given, target_id, factor)
    finally:
        counter.remove()
    what = (f"a GPT-2 of {n_blocks} blocks, {ids.shape[1]} tokens, target {target_id}, factor "
            f"{factor}{repeat_hint()}")
    check_matches_the_loop(values, expected, what)
    check_no_hook_left(model, before, f" ({what})")
    check_one_pass(counter, f" ({what})")
    check_rows_per_block(counter, n_blocks, f" ({what})")
    check_last_position_only(counter, f" ({what})")


@secret_check("fast_scaling_experiment")
def test_secret_fast_scaling_matches_the_loop_on_a_text_of_random_words(ex, tiny_gpt2, secret):
    model, tokenizer = tiny_gpt2
    text = secret.text(words=(2, 12))
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    target_id = secret.integer(0, model.config.vocab_size - 1)
    factor = secret.number(0.3, 2.0)
    expected = scaled_block_log_probs(model, ids, target_id, factor)
    values = ex.fast_scaling_experiment(model, ids.clone(), target_id, factor)
    check_matches_the_loop(values, expected, f"tiny-gpt2, {text!r}, target {target_id}, "
                                             f"factor {factor}{repeat_hint()}")
