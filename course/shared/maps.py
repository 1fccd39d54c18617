"""The shape of a wrong map, in words: exercises 6 and 7 name the class of mistake behind it.

A patching map (exercise 6) or an attribution estimate (exercise 7) is an ``(n_blocks, T)`` map:
row ``l`` is block ``l``, column ``p`` position ``p``. When yours differs from the expected map,
*how* it differs usually names the mistake: its rows shifted by one block, only one row filled,
every row equal, its sign flipped, its scale off, its axes swapped, one row or one position
wrong. :func:`map_diagnosis` tries each shape in turn (:data:`SHAPES`) and returns a diagnosis
id and a sentence, or None when no shape matches (the test then gives its generic message).

Exercise 7's comparison results (``compare_estimates``) have shapes of their own, named in its
checks (``course/ex7_attribution_patching/checks.py``).

Everything here compares values the test holds: the map your function returned, the expected
map the test computed itself, and wrong maps the test computed with its own hooks (such as the
map of the late-binding trap, :func:`late_binding`). Nothing here calls your code.

Each shape function takes ``got`` and ``expected`` (float64 tensors; ``expected`` is
``(n_blocks, T)``, ``got`` usually the same) and returns the shape in words, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

#: How close two maps must be to be "the same": absolute, for a map whose largest value is about
#: 1 (maps of exercises 6 and 7 are normalised), plus a relative part per cell.
ATOL = 3e-4
RTOL = 1e-3


@dataclass(frozen=True)
class Shape:
    """A matched shape: ``pattern`` (a key of :data:`CAUSES`), ``said`` (the shape in words,
    about "your map"), ``cause`` (the likely mistake; "" to use the pattern's default)."""

    pattern: str
    said: str
    cause: str = ""


# ----------------------------------------------------------------------------- comparing maps


def as_map(value) -> torch.Tensor:
    """Any array-like as a float64 CPU tensor (a copy)."""
    return torch.as_tensor(value).detach().double().cpu().clone()


def tolerance(expected: torch.Tensor, atol: float = ATOL) -> float:
    """The absolute tolerance for maps like ``expected``: ``atol`` times its largest absolute
    value (at least 1)."""
    finite = expected[torch.isfinite(expected)]
    return atol * max(1.0, float(finite.abs().max()) if finite.numel() else 1.0)


def same(a: torch.Tensor, b: torch.Tensor, atol: float) -> bool:
    """``a`` and ``b`` have one shape and every cell agrees within ``atol`` plus :data:`RTOL` of
    ``b`` (a NaN or an infinity in either never agrees)."""
    if a.shape != b.shape or a.numel() == 0:
        return False
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return False
    return bool(((a - b).abs() <= atol + RTOL * b.abs()).all())


def varies(a: torch.Tensor, b: torch.Tensor, atol: float) -> bool:
    """``a`` and ``b`` (two slices of the expected map) differ somewhere: a shape that moves one
    onto the other is then visible."""
    return not same(a, b, atol)


def block_name(layer: int, n_blocks: int) -> str:
    """``"block 3 (the last)"``, ``"block 0 (the first)"`` or ``"block 2"``."""
    if layer == n_blocks - 1 and n_blocks > 1:
        return f"block {layer} (the last)"
    if layer == 0 and n_blocks > 1:
        return f"block {layer} (the first)"
    return f"block {layer}"


# ----------------------------------------------------------------------------- the shapes


def axes_swapped(got: torch.Tensor, expected: torch.Tensor,
                 atol: float | None = None) -> Shape | None:
    """``got`` ``(T, n_blocks)`` is the expected map transposed, or its values in the right order
    with the two sizes swapped; or, same shape, the values listed position by position and read
    block by block (``expected.T`` flattened into ``(n_blocks, T)``)."""
    n_blocks, n_tokens = expected.shape
    atol = tolerance(expected) if atol is None else atol
    if got.dim() != 2:
        return None
    if got.shape == (n_tokens, n_blocks) and n_blocks != n_tokens:
        if same(got, expected.T, atol):
            return Shape("axes-swapped", f"your map has shape {tuple(got.shape)}: its rows are "
                         f"the {n_tokens} positions and its columns the {n_blocks} blocks, the "
                         "expected map transposed")
        if same(got.flatten(), expected.flatten(), atol):
            return Shape("axes-swapped", f"your map holds the right values in the right order, "
                         f"but in shape {tuple(got.shape)}, the two sizes swapped: "
                         f"({n_blocks}, {n_tokens}) has one row of {n_tokens} positions per block")
    if got.shape == expected.shape and n_blocks > 1 and n_tokens > 1:
        if n_blocks == n_tokens and same(got, expected.T, atol) and \
                varies(expected, expected.T, atol):
            return Shape("axes-swapped", "your map is the expected map transposed: its rows are "
                         "positions and its columns blocks")
        listed = expected.T.flatten().reshape(n_blocks, n_tokens)
        if same(got, listed, atol) and varies(expected, listed, atol):
            return Shape("axes-swapped", "your map holds the values listed position by position "
                         "(every block's value for position 0, then for position 1, ...) but "
                         "read block by block, one row per block")
        read = expected.flatten().reshape(n_tokens, n_blocks).T
        if same(got, read, atol) and varies(expected, read, atol):
            return Shape("axes-swapped", "your map reads values listed block by block (every "
                         "position of block 0, then of block 1, ...) as if they were listed "
                         "position by position")
    return None


def late_binding(got: torch.Tensor, expected: torch.Tensor, late: torch.Tensor | None,
                 atol: float | None = None) -> Shape | None:
    """``got`` is ``late``: the map the test computed with every block patched with the last
    block's values (what hooks made in a loop give when they all read the loop's variables after
    the loop ended)."""
    if late is None:
        return None
    atol = tolerance(expected) if atol is None else atol
    if not same(got, late, atol) or not varies(late, expected, atol):
        return None
    n_blocks = expected.shape[0]
    return Shape("late-binding", f"your map is the map of runs in which every block is patched "
                 f"with the last block's clean vectors (block {n_blocks - 1}'s): only its last row "
                 "is right")


def rows_all_equal(got: torch.Tensor, expected: torch.Tensor,
                   atol: float | None = None) -> Shape | None:
    """Every row of ``got`` is the same row (every cell the same value is a special case), where
    the expected rows differ."""
    n_blocks = expected.shape[0]
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape or n_blocks < 2:
        return None
    if not same(got, got[:1].expand_as(got), atol) or \
            not varies(expected, expected[:1].expand_as(expected), atol):
        return None
    if same(got, torch.full_like(got, float(got[0, 0])), atol) and got.shape[1] > 1:
        return Shape("rows-all-equal", f"every cell of your map is {float(got[0, 0]):.4g}",
                     "no patch changed the metric, or the map was never filled in: every "
                     "(block, position) needs a run of its own, patched there")
    for layer in range(n_blocks):
        if same(got[0], expected[layer], atol):
            return Shape("rows-all-equal", f"every row of your map is the same: the expected "
                         f"row of {block_name(layer, n_blocks)}")
    return Shape("rows-all-equal", "every row of your map is the same row, where the "
                 "expected rows differ from block to block")


def partly_filled(got: torch.Tensor, expected: torch.Tensor, atol: float | None = None,
                  known: dict[str, float] | None = None) -> Shape | None:
    """Only the last row (or the last column) of ``got`` is right, and every other cell holds
    one value: only the loop's last pass was stored, the rest never filled in."""
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape:
        return None
    for axis, what in ((0, "block"), (1, "position")):
        size = expected.shape[axis]
        if size < 2:
            continue
        right = [i for i in range(size)
                 if same(got.select(axis, i), expected.select(axis, i), atol)]
        if right != [size - 1]:
            continue
        keep = right[0]
        rest = torch.cat([got.narrow(axis, 0, keep), got.narrow(axis, keep + 1, size - keep - 1)],
                         dim=axis)
        expected_rest = torch.cat([expected.narrow(axis, 0, keep),
                                   expected.narrow(axis, keep + 1, size - keep - 1)], dim=axis)
        value = float(rest.flatten()[0])
        if not same(rest, torch.full_like(rest, value), atol) or \
                not varies(expected_rest, torch.full_like(expected_rest, value), atol):
            continue
        held = f"{value:.4g}{_named(value, known)}"
        if axis == 0:
            return Shape("partly-filled", f"only the row of {block_name(keep, size)} is right in "
                         f"your map; every other row holds one value, {held}")
        return Shape("partly-filled", f"only the column of position {keep} (the last) is right "
                     f"in your map; every other column holds one value, {held}")
    return None


def one_line_wrong(got: torch.Tensor, expected: torch.Tensor, atol: float | None = None,
                   known: dict[str, float] | None = None) -> Shape | None:
    """Every row of ``got`` but one is right (or every column but one)."""
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape:
        return None
    n_blocks, n_tokens = expected.shape
    wrong_rows = [l for l in range(n_blocks) if not same(got[l], expected[l], atol)]
    if len(wrong_rows) == 1 and n_blocks >= 2 and _telling(expected, 0, wrong_rows[0], atol):
        layer = wrong_rows[0]
        if layer == n_blocks - 1:
            cause = ("the last block is the one a final norm follows: the vector that model "
                     "outputs report for it (output_hidden_states' last entry) has the final norm "
                     "applied, so it is not the block's own output; catch the block's output "
                     "itself")
        elif layer == 0:
            cause = ("block 0 is the one the embeddings come before: output_hidden_states[0] is "
                     "the embeddings, no block's output, and block l's output is entry l + 1")
        else:
            cause = f"block {layer} is treated differently from the other blocks"
        return Shape("one-block-differs", f"every row of your map is right except the row of "
                     f"{block_name(layer, n_blocks)}", cause)
    wrong_columns = [p for p in range(n_tokens) if not same(got[:, p], expected[:, p], atol)]
    if len(wrong_columns) == 1 and n_tokens >= 2 and _telling(expected, 1, wrong_columns[0], atol):
        position = wrong_columns[0]
        column = got[:, position]
        never = same(column, torch.full_like(column, float(column[0])), atol) and n_blocks > 1
        value = float(column[0])
        held = f"; it holds one value in every block, {value:.4g}{_named(value, known)}" \
            if never else ""
        end = " (the last)" if position == n_tokens - 1 else " (the first)" if position == 0 else ""
        return Shape("one-position-differs", f"every column of your map is right except the column "
                     f"of position {position}{end}{held}")
    return None


def _telling(expected: torch.Tensor, axis: int, left_out: int, atol: float) -> bool:
    """The lines of ``expected`` along ``axis`` other than ``left_out`` hold more than one value:
    that they are right then says something (a map of zeros but one line says nothing)."""
    rest = torch.cat([expected.narrow(axis, 0, left_out),
                      expected.narrow(axis, left_out + 1, expected.shape[axis] - left_out - 1)],
                     dim=axis)
    return rest.numel() > 1 and varies(rest, torch.full_like(rest, float(rest.flatten()[0])), atol)


def cells_shifted(got: torch.Tensor, expected: torch.Tensor,
                  atol: float | None = None) -> Shape | None:
    """Read block by block, position by position, each cell of ``got`` holds the value of the
    cell before it (or after it): a list of runs read one run off."""
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape or expected.numel() < 3 or expected.shape[1] < 2:
        return None
    flat, reference = got.flatten(), expected.flatten()
    if not varies(reference[1:], reference[:-1], atol):
        return None
    for step, which in ((1, "before"), (-1, "after")):
        ours = flat[step:] if step > 0 else flat[:step]
        theirs = reference[:-step] if step > 0 else reference[-step:]
        if same(ours, theirs, atol):
            return Shape("cells-shifted", f"read block by block, position by position, each "
                         f"cell of your map holds the value of the cell {which} it: block 0, "
                         f"position {1 if step > 0 else 0} holds "
                         f"{'block 0, position 0' if step > 0 else 'block 0, position 1'}'s value")
    return None


def rows_shifted(got: torch.Tensor, expected: torch.Tensor,
                 atol: float | None = None) -> Shape | None:
    """Row ``l`` of ``got`` holds block ``l - 1``'s row (or ``l + 1``'s), the edge row left out."""
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape or expected.shape[0] < 2:
        return None
    if not varies(expected[1:], expected[:-1], atol):
        return None
    if same(got[1:], expected[:-1], atol):
        return Shape("rows-shifted", "row l of your map holds block l - 1's values (the "
                     "expected map's row l - 1): every block's effect shows one block late")
    if same(got[:-1], expected[1:], atol):
        return Shape("rows-shifted", "row l of your map holds block l + 1's values (the "
                     "expected map's row l + 1): every block's effect shows one block early")
    return None


def columns_shifted(got: torch.Tensor, expected: torch.Tensor,
                    atol: float | None = None) -> Shape | None:
    """Column ``p`` of ``got`` holds position ``p - 1``'s column (or ``p + 1``'s), the edge
    column left out."""
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape or expected.shape[1] < 2:
        return None
    if not varies(expected[:, 1:], expected[:, :-1], atol):
        return None
    if same(got[:, 1:], expected[:, :-1], atol):
        return Shape("columns-shifted", "column p of your map holds position p - 1's values: "
                     "every position's effect shows one position to the right")
    if same(got[:, :-1], expected[:, 1:], atol):
        return Shape("columns-shifted", "column p of your map holds position p + 1's values: "
                     "every position's effect shows one position to the left")
    return None


def reversed_order(got: torch.Tensor, expected: torch.Tensor,
                   atol: float | None = None) -> Shape | None:
    """``got`` is the expected map with its blocks (or its positions) in reverse order."""
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape:
        return None
    for axis, what in ((0, "blocks"), (1, "positions")):
        flipped = expected.flip(axis)
        if expected.shape[axis] > 1 and same(got, flipped, atol) and \
                varies(expected, flipped, atol):
            first = "the last block" if axis == 0 else "the last position"
            return Shape("order-reversed",
                         f"your map has its {what} in reverse order: its first "
                         f"{'row' if axis == 0 else 'column'} is {first}'s")
    return None


def affine(got: torch.Tensor, expected: torch.Tensor, known: dict[str, float] | None = None,
           atol: float | None = None) -> Shape | None:
    """``got`` is ``a * expected + b`` for numbers ``a`` and ``b`` other than 1 and 0: a sign
    (``a = -1``) or a scale and an offset (a normalisation, whatever the sign of ``a``).
    ``known`` names numbers the test knows, ``{"clean - corrupted": 0.63, ...}``, to say which
    one ``a`` or ``b`` is."""
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape or expected.numel() < 2:
        return None
    if not torch.isfinite(got).all():
        return None
    x, y = expected.flatten(), got.flatten()
    if len(torch.unique(torch.round(x / (10 * atol)))) < 3:
        return None  # two values or fewer (a map of zeros but one cell): any scale fits them
    design = torch.stack([x, torch.ones_like(x)], dim=1)
    a, b = (float(v) for v in torch.linalg.lstsq(design, y[:, None]).solution.flatten())
    size = max(1.0, abs(a))
    if not same(y, a * x + b, atol * size):
        return None
    if abs(a) < 0.05:  # a constant map: rows_all_equal says it
        return None
    near = lambda value, target: abs(value - target) <= 2e-3 * max(1.0, abs(target))  # noqa: E731
    offset = abs(b) > atol * size
    if near(a, 1.0) and not offset:
        return None
    factor = _named(a, known) if not near(abs(a), 1.0) else ""
    named = _named(b, known) if offset else ""
    plus = "" if not offset else f", plus {b:.4g}{named}" if b > 0 or named else f", minus {-b:.4g}"
    if near(a, -1.0):
        if not offset:
            return Shape("sign", "every cell of your map has the opposite sign of the expected one")
        if near(b, 1.0):
            return Shape("sign", "your map is 1 minus the expected map: its 0 and its 1 are "
                         "swapped, so a patch that restores the clean answer shows as 0")
        return Shape("sign", f"your map is minus the expected map{plus}")
    if a < 0:
        return Shape("scale", f"your map is the expected map times {a:.4g}{factor}{plus}: "
                     "another size, and the opposite sign")
    if near(a, 1.0):
        return Shape("scale", f"your map is the expected map{plus[1:]}: its 0 is not where a "
                     "patch restores nothing")
    return Shape("scale", f"your map is the expected map times {a:.4g}{factor}{plus}")


def absolute(got: torch.Tensor, expected: torch.Tensor,
             atol: float | None = None) -> Shape | None:
    """``got`` is ``|expected|`` (or ``-|expected|``) where the expected map has cells of both
    signs: the sign was thrown away."""
    atol = tolerance(expected) if atol is None else atol
    if got.shape != expected.shape or not (expected < -atol).any() or not (expected > atol).any():
        return None
    for sign, said in ((1, "the absolute value"), (-1, "minus the absolute value")):
        if same(got, sign * expected.abs(), atol):
            return Shape("sign", f"every cell of your map is {said} of the expected one: its "
                         "negative cells lost their sign")
    return None


def _named(value: float, known: dict[str, float] | None) -> str:
    """`` (= clean - corrupted)`` when ``value`` is one of the ``known`` numbers (or its
    inverse), else ""."""
    for name, number in (known or {}).items():
        if abs(number) < 1e-9:
            continue
        if abs(value - number) <= 2e-3 * max(1.0, abs(number)):
            return f" (= {name})"
        if abs(value - 1 / number) <= 2e-3 * max(1.0, abs(1 / number)):
            return f" (= 1 / ({name}))"
    return ""


def not_finite(got: torch.Tensor, expected: torch.Tensor) -> Shape | None:
    """Cells of ``got`` are NaN or infinite where the expected map is finite."""
    if got.shape != expected.shape:
        return None
    bad = ~torch.isfinite(got) & torch.isfinite(expected)
    if not bad.any():
        return None
    layer, position = (int(v) for v in bad.nonzero()[0])
    return Shape("not-finite", f"{int(bad.sum())} of the {got.numel()} cells of your map are not "
                 f"numbers (NaN or infinity), the first at block {layer}, position {position}: "
                 f"{float(got[layer, position])}")


#: The shapes, in the order they are tried: the most specific first. Each takes
#: ``(got, expected, late, known, atol)``, ``late`` a function that gives the late-binding map or
#: None, ``atol`` the absolute tolerance.
SHAPES: list[tuple[str, Callable]] = [
    ("axes swapped", lambda got, expected, late, known, atol: axes_swapped(got, expected, atol)),
    ("not finite", lambda got, expected, late, known, atol: not_finite(got, expected)),
    ("late binding",
     lambda got, expected, late, known, atol: late_binding(got, expected, late(), atol)),
    ("every row equal",
     lambda got, expected, late, known, atol: rows_all_equal(got, expected, atol)),
    ("one row filled",
     lambda got, expected, late, known, atol: partly_filled(got, expected, atol, known)),
    ("sign or scale", lambda got, expected, late, known, atol: affine(got, expected, known, atol)),
    ("sign thrown away", lambda got, expected, late, known, atol: absolute(got, expected, atol)),
    ("one row wrong",
     lambda got, expected, late, known, atol: one_line_wrong(got, expected, atol, known)),
    ("cells shifted", lambda got, expected, late, known, atol: cells_shifted(got, expected, atol)),
    ("rows shifted", lambda got, expected, late, known, atol: rows_shifted(got, expected, atol)),
    ("columns shifted",
     lambda got, expected, late, known, atol: columns_shifted(got, expected, atol)),
    ("order reversed",
     lambda got, expected, late, known, atol: reversed_order(got, expected, atol)),
]

#: The likely mistake behind each pattern, when the caller gives none of its own.
CAUSES = {
    "axes-swapped": "a map is (n_blocks, T): row l is block l, column p position p",
    "late-binding": "hooks made in a loop that read the loop's variables when they run, not "
                    "when they are made, all see the values of the loop's last pass (Python "
                    "closures look names up late): each hook must hold its own block's values "
                    "from the moment it is made",
    "rows-all-equal": "each block's patch should give its row values of its own; these rows "
                      "share one: one row object shared by every row (a list repeated with *), "
                      "or hooks made in a loop that all read the loop variable's last value",
    "partly-filled": "the other values were computed but never stored in the map, or stored over "
                     "each other: a line that stores them runs once, after its loop ended, "
                     "instead of once per pass",
    "one-block-differs": "one block is treated differently from the others",
    "one-position-differs": "one position is patched or read differently from the others: a range "
                          "of positions that stops one short or starts one late, or a position "
                          "counted from the other end",
    "cells-shifted": "the runs are read one run off: the corrupted run comes first, then the "
                     "patched runs, block by block and, within a block, position by position",
    "rows-shifted": "the values of a neighbouring block are used: block l's output is the input "
                    "of block l + 1, and in output_hidden_states it is entry l + 1 (entry 0 is "
                    "the embeddings)",
    "columns-shifted": "the positions are off by one: the cell of position p is the run patched "
                       "at position p, with the clean vector of position p",
    "order-reversed": "row l is block l and column p position p, in the model's order; the "
                      "figure, not the map, decides which way up the blocks are drawn",
    "not-finite": "a division by zero (two equal metrics), or cells never given a value (a map "
                  "made with torch.empty and not filled)",
    "sign": "a map is normalised so that 0 is the corrupted run and 1 the clean one: a patch "
            "that brings the clean answer back is positive",
    "scale": "a map is normalised by the two runs' metrics: 0 where the patch restored nothing "
             "(the corrupted run's metric), 1 where it restored the whole clean answer (the "
             "clean run's)",
}


def map_shape(got, expected, late=None, known: dict[str, float] | None = None,
              atol: float = ATOL) -> Shape | None:
    """The first of :data:`SHAPES` that ``got`` matches, or None.

    ``got``: your map (any shape); ``expected``: the right map ``(n_blocks, T)``; ``late``: the
    map of the late-binding trap ``(n_blocks, T)`` computed by the test, or a function that
    computes it (called only when that shape is tried), or None; ``known``: numbers the test
    knows, to name a scale or an offset; ``atol``: how far a cell may be from a value and still
    be that value, for a map whose largest value is about 1 (the test's own tolerance for a
    right answer: a cell farther away is wrong).
    """
    got, expected = as_map(got), as_map(expected)
    atol = tolerance(expected, atol)
    if expected.dim() != 2 or got.dim() != 2 or same(got, expected, atol):
        return None

    def late_map():
        value = late() if callable(late) else late
        return None if value is None else as_map(value)

    for _, shape in SHAPES:
        found = shape(got, expected, late_map, known, atol)
        if found is not None:
            return found
    return None


def map_diagnosis(got, expected, name: str, prefix: str, where: str = "", late=None,
                  known: dict[str, float] | None = None, ids: dict[str, str] | None = None,
                  causes: dict[str, str] | None = None,
                  atol: float = ATOL) -> tuple[str, str] | None:
    """``(diagnosis id, sentence)`` for a wrong map whose shape :func:`map_shape` recognises, or
    None.

    ``name``: who made the map, ``"your fast_patching_effect"``; ``prefix``: the exercise's
    diagnosis ids start with it, ``"patching"`` gives ``"patching-rows-shifted"``; ``ids``: an id
    of its own for a pattern (``{"sign": "attribution-difference-sign-flipped"}``); ``where``:
    the inputs, ``"on the tiny GPT-2"``; ``late``, ``known`` and ``atol``: as for
    :func:`map_shape`;
    ``causes``: the likely mistake of a pattern in the exercise's own words, in place of the
    shape's and of :data:`CAUSES`.
    """
    shape = map_shape(got, expected, late=late, known=known, atol=atol)
    if shape is None:
        return None
    diagnosis = (ids or {}).get(shape.pattern) or f"{prefix}-{shape.pattern}"
    cause = (causes or {}).get(shape.pattern) or shape.cause or CAUSES[shape.pattern]
    place = f" {where}" if where else ""
    return diagnosis, f"{name}{place}: {shape.said}. The likely cause: {cause}"
