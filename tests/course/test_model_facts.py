"""The facts the docstrings and the figures' "what you should see" state about SmolLM2, checked
against the model itself (computed here, never with the solutions). A docstring that says
"9th" or "27 of 30" must stay true when a dependency or the conversion changes."""

import pytest
import torch

import kata
from course.shared.reference import attribution_reference, patching_reference
from course.shared.support import (
    computed_once, cosine_matrix, reference_hidden_states, reference_log_probs,
    scaled_block_log_probs,
)

pytestmark = pytest.mark.trained


def ids_of(tokenizer, text):
    return tokenizer(text, return_tensors="pt")["input_ids"]


def test_sizes_and_token_counts(smollm2):
    model, tokenizer = smollm2
    config = model.config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.vocab_size) == (30, 576, 9, 49152)
    assert ids_of(tokenizer, kata.PENGUIN_TEXT).shape[1] == 11
    ids = tokenizer(kata.KAFKA_TEXT)["input_ids"]
    assert (len(ids), len(set(ids))) == (23, 23)


def penguin_hidden(model, tokenizer):
    return computed_once(("facts-penguin", "smollm2"),
                         lambda: reference_hidden_states(model, ids_of(tokenizer, kata.PENGUIN_TEXT)))


def test_hidden_states_shape_and_the_first_token_outlier(smollm2):
    hidden = penguin_hidden(*smollm2)
    assert tuple(hidden.shape) == (31, 11, 576)
    norms = hidden[15].norm(dim=-1)
    assert norms[0] > 20_000 and norms[1:].max() < 1_000, norms


def test_variance_grows_to_hundreds_then_the_final_norm_shrinks_it(smollm2):
    variance = penguin_hidden(*smollm2)[:, 8].var(dim=-1)
    assert variance[0] < 0.1 and variance[-2] > 300 and variance[-1] < 10, variance


def test_the_laminar_profile_is_no_smile_on_smollm2(smollm2):
    hidden = penguin_hidden(*smollm2)[:, 1:]
    n = hidden.shape[1]
    rows, cols = torch.triu_indices(n, n, offset=1)
    medians = torch.stack([cosine_matrix(layer)[rows, cols].median() for layer in hidden])
    assert medians[0] < 0.2 and 0.5 < medians[2] < 0.7
    assert medians[-6:-1].min() > 0.7 and medians[-1] < 0.6, medians


def test_insect_is_9th_with_a_clean_log_probability_near_minus_4_7(smollm2):
    model, tokenizer = smollm2
    ids = ids_of(tokenizer, kata.KAFKA_TEXT)
    target = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]
    log_probs = reference_log_probs(model, ids)
    assert abs(log_probs[target].item() + 4.71) < 0.05
    assert int((log_probs > log_probs[target]).sum()) == 8  # 0-based rank 8: 9th


def test_27_of_30_blocks_lower_insect_and_the_last_changes_nothing(smollm2):
    model, tokenizer = smollm2
    ids = ids_of(tokenizer, kata.KAFKA_TEXT)
    target = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]
    clean = reference_log_probs(model, ids)[target].item()
    values = computed_once(("facts-scaling", "smollm2"),
                           lambda: scaled_block_log_probs(model, ids, target, 0.8))
    # The last block's scaled value equals the clean one up to float noise, which a bare `<` could
    # count either way: a block lowers 'insect' only if it lowers it by more than that noise.
    assert int((values < clean - 1e-3).sum()) == 27
    assert abs(values[-1].item() - clean) < 1e-3


def patching_pair(tokenizer):
    clean = ids_of(tokenizer, kata.CLEAN_PROMPT)
    corrupted = ids_of(tokenizer, kata.CORRUPTED_PROMPT)
    good = tokenizer(kata.CLEAN_ANSWER, add_special_tokens=False)["input_ids"][0]
    bad = tokenizer(kata.CORRUPTED_ANSWER, add_special_tokens=False)["input_ids"][0]
    return clean, corrupted, good, bad


def patching_facts(model, tokenizer):
    return computed_once(("facts-patching", "smollm2"),
                         lambda: patching_reference(model, *patching_pair(tokenizer)))


def test_the_patching_prompts_and_their_answers(smollm2):
    model, tokenizer = smollm2
    clean, corrupted, good, bad = patching_pair(tokenizer)
    assert clean.shape[1] == corrupted.shape[1] == 10
    for ids, answer, log_prob in ((clean, good, -0.35), (corrupted, bad, -0.32)):
        log_probs = reference_log_probs(model, ids)
        assert int(log_probs.argmax()) == answer and abs(log_probs[answer].item() - log_prob) < 0.02
    facts = patching_facts(model, tokenizer)
    assert abs(facts["clean"] - 4.81) < 0.01 and abs(facts["corrupted"] + 9.06) < 0.01, facts


def test_the_patching_map_keeps_paris_at_the_subject_then_at_the_last_token(smollm2):
    """Exercise 6's docstrings and figure 14's expectation."""
    effect = patching_facts(*smollm2)["effect"]
    assert effect.shape == (30, 10)
    assert 0.69 < effect[:23, 2].min() and effect[:23, 2].max() < 0.91, effect[:, 2]
    assert 0.25 < effect[:23, 3].min() and effect[:23, 3].max() < 0.37, effect[:, 3]
    assert effect[23:, 2].abs().max() < 0.02
    assert 0.81 < effect[23:29, -1].min() and effect[23:29, -1].max() < 0.92, effect[:, -1]
    assert abs(effect[-1, -1] - 1) < 1e-4 and effect[-1, :-1].abs().max() < 1e-4
    assert 0.23 < effect[23:29, 6].min() and effect[23:29, 6].max() < 0.29, effect[:, 6]
    assert abs(effect[0, 1] - 0.23) < 0.02
    others = effect.clone()
    others[:, [2, 3, 6, 9]] = 0
    others[0, 1] = 0
    assert others.abs().max() < 0.08, others


def test_attribution_patching_against_the_exact_map(smollm2):
    """Exercise 7's docstrings and figure 15's expectation."""
    model, tokenizer = smollm2
    exact = patching_facts(model, tokenizer)["effect"]
    estimate = attribution_reference(model, *patching_pair(tokenizer))
    r = torch.corrcoef(torch.stack([exact.flatten(), estimate.flatten()]))[0, 1]
    assert abs(r - 0.59) < 0.01, r
    large = exact.abs() > 0.2
    assert int(large.sum()) == 60 and int(((exact.sign() == estimate.sign()) & large).sum()) == 49
    assert abs(estimate[0, 2] + 0.77) < 0.01 and abs(exact[0, 2] - 0.70) < 0.01
    assert -0.38 < estimate[2:6, 2].min() and estimate[2:6, 2].max() < 0
    assert 0.15 < estimate[6:23, 2].min() and estimate[6:23, 2].max() < 0.38, estimate[:, 2]
    assert 0.46 < estimate[23:29, -1].min() and estimate[23:29, -1].max() < 0.67, estimate[:, -1]
    assert abs(estimate[-1, -1] - 0.78) < 0.01
