"""The facts the docstrings and the figures' "what you should see" state about SmolLM2, checked
against the model itself (computed here, never with the solutions). A docstring that says
"9th" or "27 of 30" must stay true when a dependency or the conversion changes."""

import pytest
import torch

import kata
from tests.support import (
    computed_once, cosine_matrix, reference_hidden_states, reference_log_probs,
    scaled_block_log_probs,
)

pytestmark = [pytest.mark.maintainer, pytest.mark.trained]


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
    assert int((values < clean).sum()) == 27
    assert abs(values[-1].item() - clean) < 1e-3
