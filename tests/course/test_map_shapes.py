"""The shape classifier of wrong maps (``course/shared/maps.py``), on synthetic maps.

Each shape is built from a reference map and must be named by its pattern; a right map (up to
float noise), random maps and near misses must match none, so that the generic message is kept
for what no shape explains. Exercise 7's comparison results (the worst cells, a wrong
correlation or count; in its checks, ``course/ex7_attribution_patching/checks.py``) are checked
the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course.ex7_attribution_patching.checks import (
    WORST_IDS,
    correlation_shape,
    count_shape,
    worst_cells,
    worst_cells_diagnosis,
    worst_cells_shape,
)
from course.shared.maps import CAUSES, map_diagnosis, map_shape


N_BLOCKS, N_TOKENS = 5, 6


def reference(seed: int = 0, shape=(N_BLOCKS, N_TOKENS)) -> torch.Tensor:
    """A patching-like map: values from -0.3 to 1.1, every row and column different."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=generator, dtype=torch.float64) * 1.4 - 0.3)


def pattern(got, expected=None, **kwargs):
    expected = reference() if expected is None else expected
    shape = map_shape(got, expected, **kwargs)
    return None if shape is None else shape.pattern


# ----------------------------------------------------------------------------- nothing to name


def test_a_right_map_up_to_float_noise_matches_no_shape():
    expected = reference()
    assert map_shape(expected.clone(), expected) is None
    noisy = expected + 1e-6 * torch.randn(expected.shape, generator=torch.Generator().manual_seed(1),
                                          dtype=torch.float64)
    assert map_shape(noisy.float(), expected) is None


@pytest.mark.parametrize("seed", range(1, 21))
def test_random_maps_match_no_shape(seed):
    expected = reference()
    assert map_shape(reference(seed), expected) is None
    noise = torch.randn(N_BLOCKS, N_TOKENS, generator=torch.Generator().manual_seed(100 + seed),
                        dtype=torch.float64)
    assert map_shape(noise, expected) is None
    assert map_diagnosis(noise, expected, "your map", "patching") is None


def test_a_near_miss_matches_no_shape():
    """A shape is named only when every cell fits it: one cell off spoils it."""
    expected = reference()
    got = -expected
    got[2, 3] += 0.05
    assert map_shape(got, expected) is None
    got = expected[:, [5, 0, 1, 2, 3, 4]].clone()  # columns shifted, but its edge column too
    got[1:, 0] += 0.2  # and the edge column spoiled in every row, not one: no "one position"
    assert pattern(got, expected) in (None, "columns-shifted")


# ----------------------------------------------------------------------------- each shape


def test_axes_swapped_transposed_reshaped_and_listed_by_position():
    expected = reference()
    assert pattern(expected.T) == "axes-swapped"
    assert "transposed" in map_shape(expected.T, expected).said
    assert pattern(expected.flatten().reshape(N_TOKENS, N_BLOCKS)) == "axes-swapped"
    listed = expected.T.flatten().reshape(N_BLOCKS, N_TOKENS)
    assert pattern(listed) == "axes-swapped"
    read = expected.flatten().reshape(N_TOKENS, N_BLOCKS).T
    assert pattern(read) == "axes-swapped" and "as if" in map_shape(read, expected).said
    square = reference(shape=(4, 4))
    assert pattern(square.T, square) == "axes-swapped"


def test_late_binding_compares_with_the_map_the_test_computed():
    expected, late = reference(), reference(7)
    late[-1] = expected[-1]  # the last block's own row is right in the trap's map
    shape = map_shape(late.clone(), expected, late=lambda: late)
    assert shape.pattern == "late-binding" and "block 4" in shape.said
    assert pattern(late.clone(), expected, late=late) == "late-binding"  # a tensor works too
    assert pattern(reference(8), expected, late=lambda: late) is None
    calls = []
    map_shape(expected.T, expected, late=lambda: calls.append(1))  # found before: never computed
    assert not calls


def test_every_row_equal_names_the_row_and_a_constant_map():
    expected = reference()
    shape = map_shape(expected[4:5].expand(N_BLOCKS, -1).clone(), expected)
    assert shape.pattern == "rows-all-equal" and "block 4 (the last)" in shape.said
    shape = map_shape(expected[2:3].expand(N_BLOCKS, -1).clone(), expected)
    assert shape.pattern == "rows-all-equal" and "block 2" in shape.said
    assert pattern(reference(3)[:1].expand(N_BLOCKS, -1).clone()) == "rows-all-equal"
    shape = map_shape(torch.zeros(N_BLOCKS, N_TOKENS), expected)
    assert shape.pattern == "rows-all-equal" and "every cell of your map is 0" in shape.said


def test_only_the_last_row_or_column_filled():
    expected = reference()
    got = torch.full_like(expected, 0.25)
    got[-1] = expected[-1]
    shape = map_shape(got, expected, known={"a cell left at 0": 0.25})
    assert shape.pattern == "partly-filled" and "block 4 (the last)" in shape.said
    assert "(= a cell left at 0)" in shape.said
    got = torch.full_like(expected, -0.1)
    got[:, -1] = expected[:, -1]
    shape = map_shape(got, expected)
    assert shape.pattern == "partly-filled" and "position 5 (the last)" in shape.said
    got = torch.full_like(expected, 0.25)
    got[1] = expected[1]  # a row of the middle kept: not the last pass of a loop
    assert pattern(got, expected) is None


@pytest.mark.parametrize("layer, cause", [(4, "final norm"), (0, "embeddings"), (2, "block 2")])
def test_one_block_differs_with_the_cause_of_its_place(layer, cause):
    expected = reference()
    got = expected.clone()
    got[layer] = reference(5)[layer]
    shape = map_shape(got, expected)
    assert shape.pattern == "one-block-differs" and cause in shape.cause


def test_one_position_differs_and_says_when_it_holds_one_value():
    expected = reference()
    got = expected.clone()
    got[:, 5] = 0.4
    shape = map_shape(got, expected)
    assert shape.pattern == "one-position-differs" and "position 5 (the last)" in shape.said
    assert "one value in every block, 0.4" in shape.said
    got[:, 5] = reference(2)[:, 5]
    shape = map_shape(got, expected)
    assert shape.pattern == "one-position-differs" and "one value" not in shape.said


@pytest.mark.parametrize("step", [1, -1])
def test_cells_shifted_by_one_in_reading_order(step):
    expected = reference()
    flat = expected.flatten()
    got = torch.roll(flat, step).reshape(N_BLOCKS, N_TOKENS)
    got.view(-1)[0 if step > 0 else -1] = 0.0  # the cell nothing fills
    shape = map_shape(got, expected)
    assert shape.pattern == "cells-shifted"
    assert ("before" if step > 0 else "after") in shape.said


@pytest.mark.parametrize("step, said", [(1, "l - 1"), (-1, "l + 1")])
def test_rows_shifted_by_one_block(step, said):
    expected = reference()
    got = torch.roll(expected, step, dims=0)
    got[0 if step > 0 else -1] = reference(9)[0]  # the edge row: anything
    shape = map_shape(got, expected)
    assert shape.pattern == "rows-shifted" and said in shape.said


@pytest.mark.parametrize("step, said", [(1, "p - 1"), (-1, "p + 1")])
def test_columns_shifted_by_one_position(step, said):
    expected = reference()
    got = torch.roll(expected, step, dims=1)
    got[:, 0 if step > 0 else -1] = reference(9)[:, 0]
    shape = map_shape(got, expected)
    assert shape.pattern == "columns-shifted" and said in shape.said


@pytest.mark.parametrize("axis, what", [(0, "blocks"), (1, "positions")])
def test_order_reversed(axis, what):
    expected = reference()
    shape = map_shape(expected.flip(axis), expected)
    assert shape.pattern == "order-reversed" and what in shape.said


def test_sign_and_scale_and_offset():
    expected = reference()
    assert pattern(-expected) == "sign"
    shape = map_shape(1 - expected, expected)
    assert shape.pattern == "sign" and "1 minus" in shape.said
    shape = map_shape(2.5 * expected, expected)
    assert shape.pattern == "scale" and "times 2.5" in shape.said
    shape = map_shape(expected + 0.3, expected)
    assert shape.pattern == "scale" and "plus 0.3" in shape.said
    gap, corrupted = 0.63, -1.7
    shape = map_shape(expected * gap + corrupted, expected,
                      known={"clean - corrupted": gap, "the corrupted metric": corrupted})
    assert shape.pattern == "scale"
    assert "(= clean - corrupted)" in shape.said and "(= the corrupted metric)" in shape.said
    shape = map_shape(expected / gap, expected, known={"clean - corrupted": gap})
    assert "(= 1 / (clean - corrupted))" in shape.said
    shape = map_shape(-0.4 * expected, expected)
    assert shape.pattern == "scale" and "opposite sign" in shape.said
    shape = map_shape(expected.abs(), expected)
    assert shape.pattern == "sign" and "absolute value" in shape.said


def test_a_map_of_two_values_fits_any_scale_and_so_names_none():
    """One block, the last: every cell 0 but the last position (only the final norm and the
    unembedding follow). A scaled copy says nothing about a normalisation."""
    expected = torch.zeros(1, 5, dtype=torch.float64)
    expected[0, -1] = 0.8
    assert map_shape(expected * 1.7, expected) is None


def test_not_finite_cells():
    expected = reference()
    got = expected.clone()
    got[1, 2] = float("nan")
    shape = map_shape(got, expected)
    assert shape.pattern == "not-finite" and "block 1, position 2" in shape.said


def test_the_tolerance_is_the_callers():
    expected = reference()
    jitter = torch.rand(expected.shape, generator=torch.Generator().manual_seed(3),
                        dtype=torch.float64)
    got = -expected + 5e-4 * (2 * (jitter > 0.5).double() - 1)  # more than the default 3e-4 off
    assert map_shape(got, expected) is None
    assert map_shape(got, expected, atol=1e-3).pattern == "sign"


# ----------------------------------------------------------------------------- the verdict


def test_map_diagnosis_builds_the_id_and_the_sentence():
    expected = reference()
    diagnosis, sentence = map_diagnosis(expected.flip(0), expected, "your patching_effect",
                                        "patching", where="on the tiny GPT-2")
    assert diagnosis == "patching-order-reversed"
    assert sentence.startswith("your patching_effect on the tiny GPT-2: your map has its blocks")
    assert CAUSES["order-reversed"] in sentence
    diagnosis, sentence = map_diagnosis(-expected, expected, "your estimate", "attribution",
                                        ids={"sign": "attribution-difference-sign-flipped"},
                                        causes={"sign": "the difference is h_clean - h_corrupted"})
    assert diagnosis == "attribution-difference-sign-flipped"
    assert sentence.endswith("The likely cause: the difference is h_clean - h_corrupted")
    assert map_diagnosis(expected, expected, "your map", "patching") is None


def test_every_pattern_has_a_cause():
    expected = reference()
    late = reference(4)
    made = [expected.T, late, expected[:1].expand(N_BLOCKS, -1).clone(), -expected, 2 * expected,
            expected.flip(0), torch.roll(expected, 1, 0), torch.roll(expected, 1, 1)]
    for got in made:
        shape = map_shape(got, expected, late=late)
        assert shape is not None and shape.pattern in CAUSES, got


# ----------------------------------------------------------------------------- compare_estimates


def maps(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    exact = torch.randn(4, 3, generator=generator, dtype=torch.float64)
    estimate = 0.5 * exact + 0.4 * torch.randn(4, 3, generator=generator, dtype=torch.float64)
    return exact, estimate


def test_the_right_worst_cells_match_no_pattern():
    exact, estimate = maps()
    right = worst_cells((estimate - exact).abs(), 4)
    assert worst_cells_shape(right, exact, estimate, 4) is None
    flat = np.argsort(-np.abs((estimate - exact).flatten().numpy()), kind="stable")[:4]
    assert right == [divmod(int(i), 3) for i in flat]


def test_worst_cells_patterns():
    exact, estimate = maps()
    n_blocks, n_tokens = exact.shape
    error = (estimate - exact).abs()
    right = worst_cells(error, 4)
    flat = [b * n_tokens + p for b, p in right]
    cases = {
        "worst-axes-swapped": [(p, b) for b, p in right],
        "worst-index-arithmetic": [divmod(i, n_blocks) for i in flat],
        "worst-order-reversed": list(reversed(right)),
        "worst-signed-error": worst_cells(estimate - exact, 4),
        "worst-count": right[:3],
    }
    for expected, got in cases.items():
        shape = worst_cells_shape(got, exact, estimate, 4)
        assert shape is not None and shape.pattern == expected, (expected, got, shape)
        diagnosis, sentence = worst_cells_diagnosis(got, exact, estimate, 4, "your compare_estimates")
        assert diagnosis == WORST_IDS[expected] and sentence.startswith("your compare_estimates: ")
    best = worst_cells(error, 4, largest=False)
    assert worst_cells_shape(best, exact, estimate, 4).pattern == "worst-order-reversed"
    by_size = worst_cells(estimate.abs(), 4)
    if by_size != right:
        assert worst_cells_shape(by_size, exact, estimate, 4).pattern == "worst-signed-error"


@pytest.mark.parametrize("seed", range(5))
def test_random_worst_cells_match_no_pattern(seed):
    exact, estimate = maps()
    rng = np.random.default_rng(seed)
    cells = [divmod(int(i), 3) for i in rng.permutation(12)[:4]]
    shape = worst_cells_shape(cells, exact, estimate, 4)
    right = worst_cells((estimate - exact).abs(), 4)
    assert shape is None or cells == right or shape.pattern in WORST_IDS


def test_correlation_shape_names_what_was_computed():
    exact, estimate = maps()
    x, y = exact.flatten().numpy(), estimate.flatten().numpy()
    r = float(np.corrcoef(x, y)[0, 1])
    assert correlation_shape(r, exact, estimate) == ""
    assert "r squared" in correlation_shape(r * r, exact, estimate)
    assert "minus r" in correlation_shape(-r, exact, estimate)
    assert "covariance" in correlation_shape(float(np.cov(x, y)[0, 1]), exact, estimate)
    assert "covariance" in correlation_shape(float(np.cov(x, y, bias=True)[0, 1]), exact, estimate)
    cosine = float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))
    assert "cosine" in correlation_shape(cosine, exact, estimate)
    assert correlation_shape(0.123456, exact, estimate) == ""


def test_count_shape_names_the_candidate_and_never_the_right_count():
    candidates = [(3, "the signed cells"), (6, "every cell")]
    assert count_shape(3, candidates, 4) == " (that is the signed cells)"
    assert count_shape(5, candidates, 4) == ""
    assert count_shape(3, candidates, 3) == ""
