"""Exercise 7's checks: the estimate computed independently, and what a wrong answer looks like.

The reference values come from ``course/shared/reference.py`` (the estimate computed with
``torch.autograd.grad`` on block outputs caught by hooks, and exercise 6's metrics), computed from
the test's own inputs before the code under test sees them; the code under test gets copies. The
tests watch the model with hooks of their own (which runs record autograd, which prompt each run
reads) and look at the parameters' ``.grad`` afterwards. Each ``check_*`` function names a wrong
result by the shape of its wrongness (``course/shared/maps.py``) and a library error by its likely
cause (``course/shared/library_errors.py``), with a stable diagnosis id.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from course.shared.diagnosis import Diagnosis, diagnose  # noqa: E402
from course.shared.inputs import patching_prompts  # noqa: E402
from course.shared.library_errors import LIBRARY_ERRORS, Sizes, explained, learner_run  # noqa: E402
from course.shared.maps import Shape, as_map, map_diagnosis, varies  # noqa: E402
from course.shared.reference import (  # noqa: E402
    attribution_reference,
    logit_difference_of,
    patching_reference,
    reference_logits,
)
from course.shared.support import (  # noqa: E402
    check_shape,
    computed_once,
    drawn_points,
    expect,
    line_points,
)
from kata.models import EnvironmentFault  # noqa: E402

# ----------------------------------------------------------------------------- inputs and references


def metrics_of(model, args) -> tuple[float, float]:
    """The clean and the corrupted metrics, log p(good) - log p(bad), of ``args``."""
    clean, corrupted, good, bad = args
    return tuple(logit_difference_of(reference_logits(model, ids), good, bad).item()
                 for ids in (clean, corrupted))


@pytest.fixture(scope="module")
def tiny(tiny_gpt2):
    model, tokenizer = tiny_gpt2

    def compute():
        args = patching_prompts(tokenizer)
        facts = patching_reference(model, *args)
        return {"args": args, "clean": facts["clean"], "corrupted": facts["corrupted"],
                "estimate": attribution_reference(model, *args)}

    return computed_once(("ex7-attribution", "tiny-gpt2"), compute)


@pytest.fixture(scope="module")
def first_blocks(smollm2_first_blocks):
    """SmolLM2's first 4 blocks on the subjects' 4 tokens (there the two metrics differ by 5.8,
    the whole prompts' by 0.37): ``{"args", "clean", "corrupted", "estimate"}``."""
    model, tokenizer = smollm2_first_blocks

    def compute():
        clean, corrupted, good, bad = patching_prompts(tokenizer)
        args = clean[:, :4], corrupted[:, :4], good, bad
        metrics = metrics_of(model, args)
        return {"args": args, "clean": metrics[0], "corrupted": metrics[1],
                "estimate": attribution_reference(model, *args)}

    return computed_once(("ex7-attribution", "smollm2-first-4-blocks-subjects"), compute)


def copies(args):
    """The arguments with a copy of each tensor: the code under test never holds the tensors the
    test computes from."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def close(a, b, atol=1e-4):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=atol, rtol=1e-3))


def clear_grads(model):
    for parameter in model.parameters():
        parameter.grad = None


# ----------------------------------------------------------------------------- running your estimate

#: A gradient of None, in exercise 7, is a tensor the metric does not depend on.
GRADIENT_NONE = (
    "a gradient that autograd gives as None (with allow_unused=True) belongs to a tensor the "
    "metric does not depend on: a slice or a copy of a block's output (output[0] of an output "
    "that is a tensor, or a clone) is a new tensor that nothing downstream reads; the gradient "
    "is taken with respect to the block's whole output, the tensor the run goes on to use")


def explained_error(error, model, args):
    """``(diagnosis, sentence)`` for a library error of attribution_patching on valid prompts."""
    sizes = Sizes.of(model, args[0])
    form = f" (on this model a block returns {sizes.block_output})" if sizes.block_output else ""
    return explained(error, "attribution_patching", sizes, "attribution",
                     ids={"none": "attribution-output-not-in-graph"},
                     causes={"none": GRADIENT_NONE + form})


def call_attribution(ex, model, args):
    """Your estimate on valid prompts (copies of them); a missing graph is named, not shown as
    autograd's RuntimeError, a ValueError on these prompts is told with their metrics, and any
    other library error with its likely cause (``course/shared/library_errors.py``)."""
    try:
        return ex.attribution_patching(model, *copies(args))
    except (NotImplementedError, AssertionError, EnvironmentFault):
        raise
    except RuntimeError as error:
        if "does not require grad" in str(error) or "grad_fn" in str(error):
            diagnose("attribution-no-grad-around-backward", (
                f"autograd found no graph to differentiate ({str(error).splitlines()[0]}): the "
                "corrupted run and the backward pass must be recorded by autograd; only the "
                "clean run, the target of the patch, goes without"))
        found = explained_error(error, model, args)
    except ValueError as error:
        refused = str(error).splitlines()[0] if str(error) else "ValueError"
        found = explained_error(error, model, args) if "values to unpack" in refused else None
    except LIBRARY_ERRORS as error:
        found = explained_error(error, model, args)
    if found is not None:
        diagnose(*found)  # outside the except: the library's traceback is not the verdict
    metrics = metrics_of(model, args)
    diagnose("attribution-rejects-valid-prompts", (
        f"your attribution_patching raised ValueError ({refused}) on two valid prompts of "
        f"{args[0].shape[-1]} tokens each, whose metrics log p(good) - log p(bad) differ: "
        f"{metrics[0]:.4g} on the clean prompt, {metrics[1]:.4g} on the corrupted one. If your "
        "check found the two metrics equal, compute them from log-probabilities, not "
        "probabilities: a model that spreads its probability over many tokens gives each a tiny "
        "one, and their differences all but vanish"))


# ----------------------------------------------------------------------------- the estimate

#: Exercise 7's ids and causes for the shapes of a wrong estimate (``course/shared/maps.py``).
ESTIMATE_IDS = {"sign": "attribution-difference-sign-flipped", "scale": "attribution-not-normalised"}
ESTIMATE_CAUSES = {
    "sign": "the patch moves the corrupted run towards the clean one, so the difference is "
            "h_clean - h_corrupted, and the gradient is the metric's, log p(good) - log p(bad)",
    "scale": "the estimate is normalised like exercise 6's map: divided by clean - corrupted, so "
             "that 1 means 'restores the whole clean answer'",
    "cells-shifted": "the cells are read one off: an (n_layers, T) estimate lists its cells block "
                     "by block and, within a block, position by position",
    "partly-filled": "the other values were computed but never stored, or stored over each "
                     "other: a line that stores them runs once, after its loop ended",
}


def shape_of_wrong_estimate(estimate, expected, name, scale, where=""):
    """Fail naming the shape of a wrong estimate (``course/shared/maps.py``), when it has one."""
    found = map_diagnosis(estimate, expected, f"your {name}", "attribution", where=where,
                          known=None if scale is None else {"clean - corrupted": scale},
                          ids=ESTIMATE_IDS, causes=ESTIMATE_CAUSES, atol=1e-4)
    if found is not None:
        diagnose(*found)


def check_estimate_shape(estimate, expected, name: str, scale=None) -> None:
    """``(n_layers, T)``, one number a cell; a sum over the wrong dimension (or none) is named."""
    n_layers, n_tokens = expected.shape
    shape = tuple(estimate.shape)
    if shape == (n_layers + 1, n_tokens):
        diagnose("attribution-embedding-row-added", (
            f"{name} has {n_layers + 1} rows: one per block is {n_layers}; the embeddings "
            "(output_hidden_states[0]) are no block's output"))
    if shape != tuple(expected.shape) and len(shape) == 2:
        shape_of_wrong_estimate(estimate, expected, name, scale)
    if len(shape) == 3 and shape[:2] == (n_layers, n_tokens):
        diagnose("attribution-not-summed-over-d-model", (
            f"{name} has shape {shape}: one number per hidden coordinate. A cell is the dot "
            "product (h_clean - h_corrupted) . dm/dh of two d_model vectors, one number"))
    if len(shape) == 2 and shape[0] == n_layers and shape[1] != n_tokens:
        diagnose("attribution-summed-over-positions", (
            f"{name} has shape {shape}, expected ({n_layers}, {n_tokens}): the sum went over the "
            f"{n_tokens} positions and kept the hidden coordinates. Each position is a cell of "
            "its own, the dot product of two d_model vectors"))
    check_shape(estimate, tuple(expected.shape), name,
                "(n_layers, T): one row per block, one column per position",
                diagnosis="attribution-shape-wrong")


def name_wrong_estimate(estimate, expected, scale, where, on_clean=None):
    """Fail naming what is wrong with ``estimate`` (float64, of the expected shape), which is not
    the expected estimate: its sign, its scale, the run its gradient comes from (``on_clean``:
    a function that gives the estimate with the clean run's gradient), its shape; else its worst
    cell."""
    if close(estimate, -expected):
        diagnose("attribution-difference-sign-flipped",
                 "every cell has the opposite sign: the patch moves the corrupted run towards "
                 "the clean one, so the difference is h_clean - h_corrupted")
    if close(estimate, expected * scale, 1e-3) or close(estimate, -expected * scale, 1e-3):
        diagnose("attribution-not-normalised",
                 f"the estimate is not normalised: divided by clean - corrupted ({scale:.4g}), 1 "
                 "means 'restores the whole clean answer', as in exercise 6")
    if on_clean is not None:
        clean_estimate = on_clean()
        if close(estimate, clean_estimate) or close(estimate, -clean_estimate):
            diagnose("attribution-gradient-on-clean-run",
                     "the gradient is the clean run's: the linear expansion starts at the "
                     "corrupted run, so dm/dh is the corrupted run's, with the clean states as "
                     "the target")
    shape_of_wrong_estimate(estimate, expected, "attribution_patching", scale, where)
    difference = (estimate - expected).abs()
    layer, position = divmod(int(difference.argmax()), expected.shape[1])
    diagnose("attribution-values-wrong", (
        f"your attribution_patching {where}: block {layer}, position {position} gives "
        f"{estimate[layer, position]:.4f}, but (h_clean - h_corrupted) . dm/dh there, divided by "
        f"clean - corrupted, is {expected[layer, position]:.4f} (largest difference "
        f"{difference.max():.3g})"))


# ----------------------------------------------------------------------------- what the runs record


class RunWatcher:
    """Records, for each forward pass of the model, which prompt it read (a pre-hook on the input
    embeddings, where every run starts) and whether autograd recorded it (a pre-hook on the final
    norm: its input requires grad only in a recorded run, whether the graph starts at the
    weights or at a tensor given ``requires_grad_()``). Both read tensors, which cross the
    grader's boundary; ``torch.is_grad_enabled()`` here would say nothing about the other side,
    where the code under test runs."""

    def __init__(self, model, clean_ids, corrupted_ids):
        self.runs = []
        self.clean, self.corrupted = clean_ids.reshape(-1), corrupted_ids.reshape(-1)
        self.handles = [model.get_input_embeddings().register_forward_pre_hook(self.record),
                        kata.final_norm(model).register_forward_pre_hook(self.recorded)]

    def record(self, module, args):
        ids = args[0].reshape(-1, args[0].shape[-1]).cpu()
        which = "clean" if any(torch.equal(row, self.clean) for row in ids) else (
            "corrupted" if any(torch.equal(row, self.corrupted) for row in ids) else "other")
        self.runs.append([which, False])

    def recorded(self, module, args):
        if self.runs and args and isinstance(args[0], torch.Tensor):
            self.runs[-1][1] = self.runs[-1][1] or bool(args[0].requires_grad)

    def remove(self):
        for handle in self.handles:
            handle.remove()


@pytest.fixture
def watched(ex, tiny_gpt2, tiny):
    """Your attribution_patching on the tiny GPT-2, watched: ``(watcher, parameters with a
    .grad after the call)``."""
    model, _ = tiny_gpt2
    watcher = RunWatcher(model, *tiny["args"][:2])
    try:
        call_attribution(ex, model, tiny["args"])
    finally:
        watcher.remove()
    left = sum(p.grad is not None for p in model.parameters())
    clear_grads(model)
    return watcher, left


class InjectedFailure(Exception):
    pass


# ----------------------------------------------------------------------------- comparing


def made_maps():
    exact = torch.tensor([[0.9, 0.0, 0.3], [0.05, -0.5, 0.8]])
    estimate = torch.tensor([[-0.7, 0.02, 0.25], [0.0, -0.4, 0.1]])
    return exact, estimate


def run_compare(ex, exact, estimate, threshold, k):
    """Your compare_estimates on two valid maps (copies of them); a library error it raises is
    named with its likely cause: an index past a map's end, most likely a flat index taken apart
    wrongly."""
    n_blocks, n_tokens = exact.shape
    exact, estimate = exact.clone(), estimate.clone()
    return learner_run(
        lambda: ex.compare_estimates(exact, estimate, threshold=threshold, k=k),
        "compare_estimates", Sizes(n_blocks, n_tokens), "compare",
        inputs=f"two maps of shape ({n_blocks}, {n_tokens}), k = {k}",
        ids={"index": "compare-worst-index-arithmetic"},
        causes={"index": f"a cell's flat index was taken apart into (block, position) with the "
                         f"wrong row length: a map of shape ({n_blocks}, {n_tokens}) lists its "
                         f"cells block by block, {n_tokens} positions per block"})


def check_counts(summary, x, y, threshold, where=""):
    """``large_cells`` and ``same_sign`` of your summary, against the counts of the two maps'
    cells ``x``, ``y`` (flat numpy arrays); a wrong count is told with what it counts."""
    large = np.abs(x) > threshold
    got = summary.get("large_cells", -1)
    expect(int(got) == int(large.sum()), "compare-large-cells-wrong", (
        f"{int(large.sum())} cells have |exact| > {threshold:.4g}{where}, your compare_estimates "
        f"gives {got}" + count_shape(int(got), [
            (int((x > threshold).sum()), "the cells with exact > threshold: the large negative "
                                         "cells count too, by their absolute value"),
            (int((np.abs(y) > threshold).sum()), "the cells where the estimate is large: the "
                                                 "large cells are the exact map's"),
            (int((np.abs(x) >= threshold).sum()), "|exact| >= threshold: the threshold itself is "
                                                  "not large"),
            (x.size, "every cell")], int(large.sum()))))
    same = int((large & (np.sign(x) == np.sign(y))).sum())
    got = summary.get("same_sign", -1)
    expect(int(got) == same, "compare-sign-agreement-wrong", (
        f"of those, the estimate has the exact value's sign in {same}{where}, your "
        f"compare_estimates gives {got}" + count_shape(int(got), [
            (int(large.sum()) - same, "the large cells with the opposite sign"),
            (int((np.sign(x) == np.sign(y)).sum()), "the agreements over every cell, not only "
                                                    "the large ones"),
            (int(((np.abs(y) > threshold) & (np.sign(x) == np.sign(y))).sum()),
             "the agreements where the estimate is large: the large cells are the exact map's")],
            same)))


def check_worst(summary, exact, estimate, k, where=""):
    """``worst`` of your summary: a wrong list is named by its pattern (``course/shared/maps.py``),
    then against the ``k`` cells with the largest ``|estimate - exact|``, each ``(block,
    position, exact value, estimate value)``."""
    worst = [tuple(cell) for cell in summary.get("worst", [])]
    cells = [(int(cell[0]), int(cell[1])) for cell in worst]
    found = worst_cells_diagnosis(cells, exact, estimate, k, "your compare_estimates", where)
    if found is not None:
        diagnose(*found)
    x, y = np.asarray(exact, dtype=float), np.asarray(estimate, dtype=float)
    order = np.argsort(-np.abs(y - x), axis=None, kind="stable")[:k]
    expected = [tuple(int(i) for i in divmod(int(flat), x.shape[1])) for flat in order]
    expect(cells == expected, "compare-worst-cells-wrong", (
        f"the {k} worst cells by |estimate - exact|, largest first, are (block, position) "
        f"{expected}, your compare_estimates gives {cells}{where}"))
    for cell in worst:
        block, position = cell[0], cell[1]
        values = (x[block, position], y[block, position])
        expect(len(cell) == 4 and np.allclose([float(v) for v in cell[2:]], values, atol=1e-6),
               "compare-worst-values-wrong", (
                   f"each worst cell is (block, position, exact, estimate): expected "
                   f"({block}, {position}, {values[0]:.4g}, {values[1]:.4g}), got {cell}{where}"))


def check_summary(summary, exact, estimate, threshold, k, where="", large=""):
    """Your compare_estimates' summary of two maps ``exact``, ``estimate`` (numpy, the test's own
    copies): Pearson's r, the counts, the worst cells. ``where``: said after each verdict;
    ``large``: the large cells, said after the count of them."""
    expect(isinstance(summary, dict), "compare-not-a-dict",
           f"compare_estimates should return a dict, got {type(summary).__name__}")
    missing = {"correlation", "large_cells", "same_sign", "worst"} - set(summary)
    expect(not missing, "compare-not-a-dict", f"the dict lacks {sorted(missing)}")
    x, y = exact.flatten(), estimate.flatten()
    r = float(np.corrcoef(x, y)[0, 1])
    got = float(summary["correlation"])
    expect(abs(got - r) < 1e-5, "compare-correlation-wrong", (
        f"Pearson's r of the {x.size} cells is {r:.5f}, got {got:.5f}"
        + correlation_shape(got, exact, estimate) + where))
    check_counts(summary, x, y, threshold, large + where)
    check_worst(summary, exact, estimate, k, where)


def check_compare_behind(ex, exact, estimate, k):
    """When the figure labels the wrong cells or raises, your compare_estimates, which the figure
    may use, is the cause to name first if it raises or its ``worst`` has a recognised pattern (a
    compare_estimates not written yet is left to its own tests)."""
    name = "plot_estimate_against_exact may use your compare_estimates, which is wrong"
    try:
        summary = run_compare(ex, exact, estimate, 0.2, k)
        worst = [(int(cell[0]), int(cell[1])) for cell in summary["worst"]]
    except EnvironmentFault:
        raise
    except Diagnosis as error:
        diagnose(error.id, f"{name}: {error.message}")
    except Exception:  # noqa: BLE001 - NotImplementedError included: its own tests say it
        return
    found = worst_cells_diagnosis(worst, exact, estimate, k, name)
    if found is not None:
        diagnose(*found)


# ----------------------------------------------------------------------------- the figure


def run_plot(ex, exact, estimate, tokens, k):
    """Your plot_estimate_against_exact on two valid maps (copies of them); a library error it
    raises is named with its likely cause, unless your compare_estimates, which it may use, is
    wrong."""
    n_blocks, n_tokens = exact.shape
    given = exact.clone(), estimate.clone(), list(tokens)
    return learner_run(
        lambda: ex.plot_estimate_against_exact(*given, k=k),
        "plot_estimate_against_exact", Sizes(n_blocks, n_tokens), "estimate-plot",
        inputs=f"two maps of shape ({n_blocks}, {n_tokens}), {len(tokens)} tokens, k = {k}",
        behind=lambda: check_compare_behind(ex, exact, estimate, k))


def worst_labels(exact, estimate, tokens, k) -> list[tuple[str, str]]:
    """``(label, the label with the token's own space kept)`` of the ``k`` worst cells:
    ``("L1 Tower", "L1  Tower")``."""
    n_tokens = exact.shape[1]
    labels = []
    for index in torch.topk((estimate - exact).abs().flatten(), k).indices.tolist():
        block, position = divmod(index, n_tokens)
        labels.append((f"L{block} {tokens[position].strip()}", f"L{block} {tokens[position]}"))
    return labels


def check_estimate_figure(ex, fig, exact, estimate, tokens, k, figures, where=""):
    """Your figure 15 of two maps (the test's own copies): one point per cell at (exact,
    estimate), the identity line across the points' range, the ``k`` worst cells labelled
    ``"L{block} {token}"`` with the token's own leading space stripped. Returns the axes."""
    expect(isinstance(fig, Figure), "estimate-plot-not-a-figure",
           f"plot_estimate_against_exact should return a Figure, got {type(fig).__name__}")
    figures.append(fig)
    ax = fig.axes[0]
    cells = np.stack([exact.flatten().numpy(), estimate.flatten().numpy()], axis=1)
    found = [p for p in drawn_points(ax, marked_only=True) if p.shape == cells.shape]

    def drawn(points, expected):
        return np.allclose(np.sort(points, axis=0), np.sort(expected, axis=0), atol=1e-5)

    if not any(drawn(p, cells) for p in found):
        if any(drawn(p, cells[:, ::-1]) for p in found):
            diagnose("estimate-plot-axes-swapped",
                     "x is the estimate and y the exact value: x is the exact value, the one the "
                     "estimate is judged against, and y the estimate" + where)
        lines = any(p.shape == cells.shape for p in drawn_points(ax))
        diagnose("estimate-plot-points-wrong", (
            f"draw one point per cell at (exact, estimate): {len(cells)} points for "
            f"{tuple(exact.shape)} maps"
            + (", as markers, not as a line" if lines and not found else "") + where))
    identity = [line for line in line_points(ax) if len(line) >= 2
                and np.allclose(line[:, 0], line[:, 1], atol=1e-9)]
    expect(bool(identity), "estimate-plot-no-identity-line",
           "draw the identity line, dashed: a perfect estimate lies on it" + where)
    low, high = cells.min(), cells.max()
    expect(any(line[:, 0].min() <= low + 1e-6 and line[:, 0].max() >= high - 1e-6
               for line in identity), "estimate-plot-no-identity-line",
           f"the identity line should span every value of either map ({low:.3g} to {high:.3g})"
           + where)
    texts = [t.get_text() for t in ax.texts]
    for label, spaced in worst_labels(exact, estimate, tokens, k):
        if any(label in text for text in texts):
            continue
        check_compare_behind(ex, exact, estimate, k)
        if spaced != label and any(spaced in text for text in texts):
            diagnose("estimate-plot-worst-not-labelled", (
                f"the label {spaced!r} keeps the token's own leading space: a worst cell is "
                f"labelled 'L<block> <token>' with one space, {label!r}" + where))
        diagnose("estimate-plot-worst-not-labelled", (
            f"label the {k} worst cells as 'L<block> <token>': expected {label!r} among "
            f"{texts}" + where))
    return ax


# --------------------------------------------------------------------------- wrong comparisons
# compare_estimates' results have shapes of their own: the pattern of a wrong list of worst
# cells (worst_cells_diagnosis), the likely cause of a wrong correlation or count.


def worst_cells(score: torch.Tensor, k: int, largest: bool = True) -> list[tuple[int, int]]:
    """The ``k`` cells ``(block, position)`` of an ``(n_blocks, T)`` score with the largest (or
    smallest) values, in that order (ties in row-major order)."""
    n_tokens = score.shape[1]
    flat = score.flatten()
    sign = -1.0 if largest else 1.0
    order = sorted(range(flat.numel()), key=lambda i: (sign * float(flat[i]), i))
    return [divmod(i, n_tokens) for i in order[:k]]


def worst_cells_shape(got: list[tuple[int, int]], exact, estimate, k: int) -> Shape | None:
    """The pattern of a wrong list of worst cells ``got`` (``(block, position)`` pairs), from the
    two maps ``(n_blocks, T)``; None when it matches none."""
    exact, estimate = as_map(exact), as_map(estimate)
    n_blocks, n_tokens = exact.shape
    error = (estimate - exact).abs()
    right = worst_cells(error, k)
    got = [tuple(int(v) for v in cell) for cell in got]
    if got == right:
        return None
    flat_order = [b * n_tokens + p for b, p in right]
    if got == [(p, b) for b, p in right]:
        return Shape("worst-axes-swapped", "your worst cells are (position, block) pairs: "
                     "each is (block, position), the block first")
    if got == [divmod(i, n_blocks) for i in flat_order]:
        return Shape("worst-index-arithmetic", f"your worst cells are their flat indices taken "
                     f"apart with rows of {n_blocks} cells (the number of blocks), not "
                     f"{n_tokens} (the number of positions)")
    if got == [(i % n_blocks, i // n_blocks) for i in flat_order] or \
            got == [(i % n_tokens, i // n_tokens) for i in flat_order]:
        return Shape("worst-axes-swapped", "your worst cells take a flat index apart the other "
                     "way round: (block, position) with the block first")
    if got == list(reversed(right)):
        return Shape("worst-order-reversed", "your worst cells are the right ones, in the "
                     "opposite order: the cell with the largest error comes first")
    if got == worst_cells(error, k, largest=False):
        return Shape("worst-order-reversed", "your worst cells are the best ones, the cells "
                     "with the smallest errors: the worst have the largest |estimate - exact|")
    for score, what in ((estimate - exact, "estimate - exact, with its sign"),
                        (exact - estimate, "exact - estimate, with its sign")):
        if got == worst_cells(score, k) and varies(score, error, 1e-9):
            return Shape("worst-signed-error", f"your worst cells are ranked by {what}: an "
                         "estimate far on the other side of the exact value never comes first; "
                         "the error is the absolute difference")
    for score, what in ((estimate.abs(), "|estimate|"), (exact.abs(), "|exact|"),
                        ((estimate.abs() - exact.abs()).abs(), "||estimate| - |exact||")):
        if got == worst_cells(score, k):
            return Shape("worst-signed-error", f"your worst cells are ranked by {what}, not by "
                         "the error |estimate - exact|")
    if len(got) != k and got == worst_cells(error, len(got)):
        return Shape("worst-count", f"your list has the {len(got)} worst cells, in the right "
                     f"order, where k = {k} were asked for")
    return None


#: The diagnosis id of each pattern of the worst cells.
WORST_IDS = {
    "worst-axes-swapped": "compare-worst-axes-swapped",
    "worst-index-arithmetic": "compare-worst-index-arithmetic",
    "worst-order-reversed": "compare-worst-order-reversed",
    "worst-signed-error": "compare-worst-signed-error",
    "worst-count": "compare-worst-count",
}


def worst_cells_diagnosis(got, exact, estimate, k: int, name: str,
                          where: str = "") -> tuple[str, str] | None:
    """``(diagnosis id, sentence)`` for a recognised wrong list of worst cells, else None."""
    shape = worst_cells_shape(got, exact, estimate, k)
    if shape is None:
        return None
    place = f" {where}" if where else ""
    return WORST_IDS[shape.pattern], f"{name}{place}: {shape.said}"


def correlation_shape(got: float, exact, estimate) -> str:
    """What a wrong correlation ``got`` is, in words (`` (that is r squared)``), or ""."""
    x, y = as_map(exact).flatten(), as_map(estimate).flatten()
    dx, dy = x - x.mean(), y - y.mean()
    r = float((dx * dy).sum() / (dx.norm() * dy.norm()))
    candidates = [
        (r * r, "r squared: Pearson's r itself keeps its sign"),
        (-r, "minus r: the sign is flipped"),
        (float((dx * dy).mean()), "the covariance: r divides it by both standard deviations"),
        (float((dx * dy).sum() / (len(x) - 1)), "the covariance: r divides it by both standard "
                                                "deviations"),
        (float((x * y).sum() / (x.norm() * y.norm())), "the cosine similarity of the two maps: "
                                                       "r subtracts each map's mean first"),
    ]
    for value, what in candidates:
        if abs(got - value) < 1e-6 and abs(value - r) > 1e-6:
            return f" (that is {what})"
    return ""


def count_shape(got: int, candidates: list[tuple[int, str]], right: int) -> str:
    """What a wrong count ``got`` is, in words, from the ``(count, what it counts)`` candidates
    the test computed, or "" (a candidate equal to the right count says nothing)."""
    for value, what in candidates:
        if got == value and value != right:
            return f" (that is {what})"
    return ""
