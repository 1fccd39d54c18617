"""Exercise 7 (bonus): attribution patching (the one-pass estimate, and where it fails).

Expected values come from ``course/shared/reference.py``: the estimate computed there with
``torch.autograd.grad`` on block outputs caught by hooks, and exercise 6's exact map; never from
the solutions. The code under test is reached only through ``ex.<function>(...)``; the tests
watch the model with hooks of their own (which runs record autograd, which prompt each run
reads) and look at the parameters' ``.grad`` afterwards.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from course.shared.diagnosis import Diagnosis, diagnose  # noqa: E402
from kata.hooks import hook_snapshot  # noqa: E402
from kata.models import EnvironmentFault  # noqa: E402
from course.shared.reference import (  # noqa: E402
    attribution_reference,
    logit_difference_of,
    patching_reference,
    reference_logits,
)
from course.shared.library_errors import LIBRARY_ERRORS, Sizes, explained, learner_run  # noqa: E402
from course.shared.maps import (  # noqa: E402
    correlation_shape,
    count_shape,
    map_diagnosis,
    worst_cells_diagnosis,
)
from course.shared.support import (  # noqa: E402
    check_shape,
    check_tensor,
    computed_once,
    draw_headless,
    drawn_points,
    expect,
    figures,  # noqa: F401 - the fixture that closes the figures a test makes
    line_points,
    raises_clearly,
)


def prompts(tokenizer):
    clean = tokenizer(kata.CLEAN_PROMPT, return_tensors="pt")["input_ids"]
    corrupted = tokenizer(kata.CORRUPTED_PROMPT, return_tensors="pt")["input_ids"]
    good = tokenizer(kata.CLEAN_ANSWER, add_special_tokens=False)["input_ids"][0]
    bad = tokenizer(kata.CORRUPTED_ANSWER, add_special_tokens=False)["input_ids"][0]
    return clean, corrupted, good, bad


@pytest.fixture(scope="module")
def tiny(tiny_gpt2):
    model, tokenizer = tiny_gpt2

    def compute():
        args = prompts(tokenizer)
        facts = patching_reference(model, *args)
        return {"args": args, "clean": facts["clean"], "corrupted": facts["corrupted"],
                "estimate": attribution_reference(model, *args)}

    return computed_once(("ex7-attribution", "tiny-gpt2"), compute)


def close(a, b, atol=1e-4):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=atol, rtol=1e-3))


def clear_grads(model):
    for parameter in model.parameters():
        parameter.grad = None


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
    """The learner's estimate on valid prompts; a missing graph is named, not shown as
    autograd's RuntimeError, a ValueError on these prompts is told with their metrics, and any
    other library error with its likely cause (``tests/library_errors.py``)."""
    try:
        return ex.attribution_patching(model, *args)
    except (NotImplementedError, AssertionError, EnvironmentFault):
        raise
    except RuntimeError as error:
        if "does not require grad" in str(error) or "grad_fn" in str(error):
            diagnose("attribution-no-grad-around-backward", (
                f"autograd found no graph to differentiate ({str(error).splitlines()[0]}): the "
                "corrupted run and the backward pass must not be under torch.no_grad(); only "
                "the clean run is"))
        found = explained_error(error, model, args)
    except ValueError as error:
        refused = str(error).splitlines()[0] if str(error) else "ValueError"
        found = explained_error(error, model, args) if "values to unpack" in refused else None
    except LIBRARY_ERRORS as error:
        found = explained_error(error, model, args)
    if found is not None:
        diagnose(*found)  # outside the except: the library's traceback is not the verdict
    clean, corrupted, good, bad = args
    metrics = [logit_difference_of(reference_logits(model, ids), good, bad).item()
               for ids in (clean, corrupted)]
    diagnose("attribution-rejects-valid-prompts", (
        f"your attribution_patching raised ValueError ({refused}) on two valid prompts of "
        f"{clean.shape[-1]} tokens each, whose metrics log p(good) - log p(bad) differ: "
        f"{metrics[0]:.4g} on the clean prompt, {metrics[1]:.4g} on the corrupted one. If your "
        "check found the two metrics equal, compute them from log-probabilities "
        "(torch.log_softmax), not probabilities: a model that spreads its probability over many "
        "tokens gives each a tiny one, and their differences all but vanish"))


# ----------------------------------------------------------------------------- the estimate


#: Exercise 7's ids and causes for the shapes of a wrong estimate (``tests/map_shapes.py``).
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
    """Fail naming the shape of a wrong estimate (``tests/map_shapes.py``), when it has one."""
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
            "product (h_clean - h_corrupted) . dm/dh of two d_model vectors: multiply, then sum "
            f"over the last dimension, to get ({n_layers}, {n_tokens})"))
    if len(shape) == 2 and shape[0] == n_layers and shape[1] != n_tokens:
        diagnose("attribution-summed-over-positions", (
            f"{name} has shape {shape}, expected ({n_layers}, {n_tokens}): the sum went over the "
            f"{n_tokens} positions and kept the hidden coordinates. Each position is a cell of "
            "its own: sum (h_clean - h_corrupted) * dm/dh over d_model, the last dimension"))
    check_shape(estimate, tuple(expected.shape), name,
                "(n_layers, T): one row per block, one column per position",
                diagnosis="attribution-shape-wrong")


def test_attribution_patching_on_tiny_gpt2(ex, tiny_gpt2, tiny):
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
    if close(estimate, expected):
        return
    scale = tiny["clean"] - tiny["corrupted"]
    if close(estimate, -expected):
        diagnose("attribution-difference-sign-flipped",
                 "every cell has the opposite sign: the patch moves the corrupted run towards "
                 "the clean one, so the difference is h_clean - h_corrupted")
    if close(estimate, expected * scale, 1e-3) or close(estimate, -expected * scale, 1e-3):
        diagnose("attribution-not-normalised",
                 f"the estimate is not normalised: divide by clean - corrupted ({scale:.4g}) so "
                 "that 1 means 'restores the whole clean answer', as in exercise 6")
    on_clean = attribution_reference(model, *tiny["args"], run="clean")
    if close(estimate, on_clean) or close(estimate, -on_clean):
        diagnose("attribution-gradient-on-clean-run",
                 "the gradient is the clean run's: the linear expansion starts at the corrupted "
                 "run, so take dm/dh on the corrupted prompt, with the clean states as the target")
    shape_of_wrong_estimate(estimate, expected, "attribution_patching", scale, "on the tiny GPT-2")
    difference = (estimate - expected).abs()
    layer, position = divmod(int(difference.argmax()), expected.shape[1])
    diagnose("attribution-values-wrong", (
        f"attribution_patching: block {layer}, position {position} gives "
        f"{estimate[layer, position]:.4f}, but (h_clean - h_corrupted) . dm/dh there, divided by "
        f"clean - corrupted, is {expected[layer, position]:.4f} (largest difference "
        f"{difference.max():.3g})"))


class RunWatcher:
    """Records, for each forward pass of the model, which prompt it read (a pre-hook on the input
    embeddings, where every run starts) and whether autograd recorded it (a pre-hook on the final
    norm: its input requires grad only in a recorded run, whether the graph starts at the
    weights or at a tensor given ``requires_grad_()``). Both read tensors, which cross the
    grader's boundary; ``torch.is_grad_enabled()`` here would say nothing about the learner's
    side."""

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
    model, _ = tiny_gpt2
    clean_grads_before = [p.grad for p in model.parameters()]
    watcher = RunWatcher(model, *tiny["args"][:2])
    try:
        call_attribution(ex, model, tiny["args"])
    finally:
        watcher.remove()
    left = sum(p.grad is not None for p in model.parameters())
    clear_grads(model)
    return watcher, left, all(g is None for g in clean_grads_before)


def test_one_forward_pass_with_gradients_and_no_grad_left(watched):
    watcher, left, _ = watched
    expect(left == 0, "attribution-grad-left-on-parameters", (
        f"{left} parameters of the model have a .grad after the call: metric.backward() "
        "accumulates gradients into every parameter (and the next backward adds to them). Use "
        "torch.autograd.grad(metric, outputs), which returns the gradients you need and leaves "
        "the model alone"))
    recorded = [which for which, grad in watcher.runs if grad]
    expect("clean" not in recorded, "attribution-clean-run-with-grad", (
        "the clean prompt ran with autograd recording: its hidden states are only the target "
        "of the patch, so run it under torch.no_grad()"))
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
           "a hook was left on the model: remove every hook you register")


class InjectedFailure(Exception):
    pass


def test_hooks_are_removed_when_a_forward_pass_raises(ex, tiny_gpt2, tiny):
    model, _ = tiny_gpt2
    """The run that records autograd (the corrupted one, with the learner's hooks on the blocks)
    fails at the final norm. Whether autograd records is read from the hidden states the norm
    gets, which crosses the grader's boundary (the learner's hooks do not)."""
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
        "after a forward pass raised, a hook was still on the model: remove every hook in a "
        "finally block"))
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
        raises_clearly(ValueError, lambda: ex.attribution_patching(model, *arguments),
                       f"attribution_patching with {case}", why, "attribution-input-not-checked")
    finally:
        clear_grads(model)


# ----------------------------------------------------------------------------- comparing


def made_maps():
    exact = torch.tensor([[0.9, 0.0, 0.3], [0.05, -0.5, 0.8]])
    estimate = torch.tensor([[-0.7, 0.02, 0.25], [0.0, -0.4, 0.1]])
    return exact, estimate


def run_compare(ex, exact, estimate, threshold, k):
    """Your compare_estimates on two valid maps; a library error it raises is named with its
    likely cause (``tests/library_errors.py``): an index past a map's end, most likely a flat
    index taken apart wrongly."""
    n_blocks, n_tokens = exact.shape
    return learner_run(
        lambda: ex.compare_estimates(exact, estimate, threshold=threshold, k=k),
        "compare_estimates", Sizes(n_blocks, n_tokens), "compare",
        inputs=f"two maps of shape ({n_blocks}, {n_tokens}), k = {k}",
        ids={"index": "compare-worst-index-arithmetic"},
        causes={"index": f"a cell's flat index was taken apart into (block, position) with the "
                         f"wrong row length: a map of shape ({n_blocks}, {n_tokens}) lists its "
                         f"cells block by block, {n_tokens} positions per block"})


def run_plot(ex, exact, estimate, tokens, k):
    """Your plot_estimate_against_exact on two valid maps; a library error it raises is named
    with its likely cause, unless your compare_estimates, which it may use, is wrong."""
    n_blocks, n_tokens = exact.shape
    return learner_run(
        lambda: ex.plot_estimate_against_exact(exact, estimate, tokens, k=k),
        "plot_estimate_against_exact", Sizes(n_blocks, n_tokens), "estimate-plot",
        inputs=f"two maps of shape ({n_blocks}, {n_tokens}), {len(tokens)} tokens, k = {k}",
        behind=lambda: check_compare_behind(ex, exact, estimate, k))


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


def check_compare_behind(ex, exact, estimate, k):
    """When the figure labels the wrong cells or raises, your compare_estimates, which the figure
    may use, is the cause to name first if it raises or its ``worst`` has a recognised pattern (a
    compare_estimates not written yet is left to its own tests)."""
    name = "plot_estimate_against_exact may use your compare_estimates, which is wrong"
    try:
        summary = run_compare(ex, exact.clone(), estimate.clone(), 0.2, k)
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


def check_worst(summary, exact, estimate, k, where=""):
    """``worst`` of your summary: a wrong list is named by its pattern (``tests/map_shapes.py``)."""
    worst = [(int(cell[0]), int(cell[1])) for cell in summary.get("worst", [])]
    found = worst_cells_diagnosis(worst, exact, estimate, k, "your compare_estimates", where)
    if found is not None:
        diagnose(*found)
    return worst


def test_compare_estimates(ex):
    exact, estimate = made_maps()
    summary = run_compare(ex, exact, estimate, 0.2, 3)
    assert isinstance(summary, dict), f"compare_estimates should return a dict, got {type(summary).__name__}"
    missing = {"correlation", "large_cells", "same_sign", "worst"} - set(summary)
    assert not missing, f"the dict lacks {sorted(missing)}"
    r = float(np.corrcoef(exact.flatten().numpy(), estimate.flatten().numpy())[0, 1])
    got = float(summary["correlation"])
    expect(abs(got - r) < 1e-6, "compare-correlation-wrong", (
        f"Pearson's r of the 6 cells is {r:.4f}, got {got:.4f}"
        + correlation_shape(got, exact, estimate)))
    check_counts(summary, exact.flatten().numpy(), estimate.flatten().numpy(), 0.2,
                 " (0.9, 0.3, -0.5, 0.8)")
    check_worst(summary, exact, estimate, 3)
    worst = [tuple(cell) for cell in summary["worst"]]
    expected = [(0, 0), (1, 2), (1, 1)]
    expect([(int(b), int(p)) for b, p, *_ in worst] == expected, "compare-worst-cells-wrong", (
        f"the 3 worst cells by |estimate - exact|, largest first, are (block, position) "
        f"{expected}, your compare_estimates gives {[(b, p) for b, p, *_ in worst]}"))
    b, p, x, y = worst[0]
    assert abs(float(x) - 0.9) < 1e-6 and abs(float(y) + 0.7) < 1e-6, (
        f"each worst cell is (block, position, exact, estimate): expected (0, 0, 0.9, -0.7), got {worst[0]}")


def test_compare_estimates_rejects_maps_of_different_shapes(ex):
    exact, estimate = made_maps()
    raises_clearly(ValueError, lambda: ex.compare_estimates(exact, estimate[:, :2]),
                   "compare_estimates with maps of shapes (2, 3) and (2, 2)",
                   "Check that both maps are 2-D and of the same shape.", "compare-input-not-checked")


# ----------------------------------------------------------------------------- the figure


def test_plot_estimate_against_exact(ex, figures):
    exact, estimate = made_maps()
    tokens = ["The", " E", "iffel"]
    fig = run_plot(ex, exact, estimate, tokens, 2)
    assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
    figures.append(fig)
    ax = fig.axes[0]
    points = drawn_points(ax, marked_only=True)
    cells = np.stack([exact.flatten().numpy(), estimate.flatten().numpy()], axis=1)
    found = [p for p in points if p.shape == cells.shape]
    if not found and any(p.shape == cells.shape for p in drawn_points(ax)):
        pytest.fail("draw the cells as points (ax.scatter or markers), not as a line")
    assert found, f"draw one point per cell (6 here); the series drawn have {[len(p) for p in points]} points"
    same = [p for p in found if np.allclose(np.sort(p, axis=0), np.sort(cells, axis=0), atol=1e-6)]
    if not same:
        swapped = cells[:, ::-1]
        if any(np.allclose(np.sort(p, axis=0), np.sort(swapped, axis=0), atol=1e-6) for p in found):
            diagnose("estimate-plot-axes-swapped",
                     "x is the estimate and y the exact value: draw x = exact, y = estimate")
        pytest.fail("the points should be (exact, estimate) for every cell")
    identity = [line for line in line_points(ax) if len(line) >= 2
                and np.allclose(line[:, 0], line[:, 1], atol=1e-9)]
    expect(bool(identity), "estimate-plot-no-identity-line",
           "draw the identity line y = x (dashed): a perfect estimate lies on it")
    if identity:
        line = identity[0]
        expect(line[:, 0].min() <= -0.7 + 1e-6 and line[:, 0].max() >= 0.9 - 1e-6,
               "estimate-plot-no-identity-line",
               "the identity line should span every value of either map (-0.7 to 0.9 here)")
    texts = [t.get_text() for t in ax.texts]
    if not all(any(label in text for text in texts) for label in ("L0 The", "L1 iffel")):
        check_compare_behind(ex, exact, estimate, 2)
    for label in ("L0 The", "L1 iffel"):
        expect(any(label in text for text in texts), "estimate-plot-worst-not-labelled", (
            f"label the worst cells with ax.annotate as 'L<block> <token>': expected {label!r} "
            f"among {texts}"))
    assert ax.get_xlabel() and ax.get_ylabel(), "label both axes"
    draw_headless(fig)


# ----------------------------------------------------------------------------- trained weights


@pytest.mark.trained
def test_on_smollm2_first_blocks(ex, smollm2_first_blocks):
    """On trained weights (SmolLM2's first 4 blocks, Llama's architecture): the estimate computed
    here. The whole model's numbers are checked in tests/course/test_model_facts.py."""
    model, tokenizer = smollm2_first_blocks
    clean, corrupted, good, bad = prompts(tokenizer)
    # the subjects' 4 tokens: there the two metrics differ by 5.8, the whole prompts' by 0.37
    args = clean[:, :4], corrupted[:, :4], good, bad
    metrics = [logit_difference_of(reference_logits(model, ids), good, bad).item()
               for ids in args[:2]]
    try:
        estimate = check_tensor(call_attribution(ex, model, args), "attribution_patching")
    finally:
        clear_grads(model)
    expected = computed_once(("ex7-attribution", "smollm2-first-4-blocks-subjects"),
                             lambda: attribution_reference(model, *args))
    check_estimate_shape(estimate, expected, "attribution_patching on SmolLM2's first 4 blocks")
    shape_of_wrong_estimate(estimate, expected, "attribution_patching", metrics[0] - metrics[1],
                            "on SmolLM2's first 4 blocks")
    worst = (estimate.double() - expected).abs().max().item()
    assert worst < 1e-3, (f"on SmolLM2's first 4 blocks your function's estimate differs from "
                          f"(h_clean - h_corrupted) . dm/dh by up to {worst:.3g}")


# ----------------------------------------------------------------------------- secret checks
# Every public function again, on inputs drawn from a seed only the grader knows (course/shared/secret.py):
# a GPT-2 of random sizes with two random prompts, random maps to compare and to draw. Their
# points count only if these pass.

from course.shared.secret import repeat_hint, secret, secret_check  # noqa: E402,F401 - secret: a fixture


@secret_check("attribution_patching")
def test_secret_attribution_patching_on_a_model_of_random_sizes(ex, secret):
    model = secret.gpt2(layers=(1, 4), spread=0.2)
    args = secret.prompt_pair(model)
    expected = attribution_reference(model, *args)
    metrics = [logit_difference_of(reference_logits(model, ids), args[2], args[3]).item()
               for ids in args[:2]]
    try:
        estimate = check_tensor(call_attribution(ex, model, args), "attribution_patching")
        left = sum(p.grad is not None for p in model.parameters())
    finally:
        clear_grads(model)
    where = (f"a GPT-2 of {model.config.n_layer} blocks, prompts {args[0][0].tolist()} and "
             f"{args[1][0].tolist()}, good {args[2]}, bad {args[3]}" + repeat_hint())
    check_estimate_shape(estimate, expected, f"attribution_patching on {where}")
    shape_of_wrong_estimate(estimate, expected, "attribution_patching", metrics[0] - metrics[1],
                            f"on {where}")
    worst = (estimate.detach().double() - expected).abs().max().item()
    expect(worst < 1e-3, "attribution-values-wrong",
           f"attribution_patching on {where} differs from (h_clean - h_corrupted) . dm/dh, "
           f"divided by clean - corrupted, by up to {worst:.3g}")
    expect(left == 0, "attribution-grad-left-on-parameters",
           f"{left} parameters have a .grad after the call on {where}: use torch.autograd.grad")


def secret_maps(secret):
    """Two random maps of one random shape, the estimate a noisy, shrunk copy of the exact one."""
    shape = (secret.integer(2, 12), secret.integer(2, 10))
    exact = secret.tensor(*shape, scale=secret.number(0.2, 1.0))
    estimate = exact * secret.number(-0.5, 1.0) + secret.tensor(*shape, scale=secret.number(0.05, 0.5))
    return exact, estimate


@secret_check("compare_estimates")
def test_secret_compare_estimates_of_secret_maps(ex, secret):
    exact, estimate = secret_maps(secret)
    threshold, k = secret.number(0.05, 0.6), secret.integer(1, 6)
    shape = tuple(exact.shape)
    x, y = exact.double().flatten().numpy(), estimate.double().flatten().numpy()  # copies
    summary = run_compare(ex, exact.clone(), estimate.clone(), threshold, k)
    expect(isinstance(summary, dict), "compare-not-a-dict",
           f"compare_estimates should return a dict, got {type(summary).__name__}")
    r = float(np.corrcoef(x, y)[0, 1])
    got = float(summary.get("correlation", float("nan")))
    expect(abs(got - r) < 1e-5, "compare-correlation-wrong",
           f"Pearson's r of two {shape} maps is {r:.5f}, got {got:.5f}"
           + correlation_shape(got, x.reshape(shape), y.reshape(shape)) + repeat_hint())
    check_counts(summary, x, y, threshold, repeat_hint())
    check_worst(summary, x.reshape(shape), y.reshape(shape), k, "on two secret maps" + repeat_hint())
    order = np.argsort(-np.abs(y - x), kind="stable")[:k]
    expected = [tuple(divmod(int(i), shape[1])) for i in order]
    worst = [(int(cell[0]), int(cell[1])) for cell in summary.get("worst", [])]
    expect(worst == expected, "compare-worst-cells-wrong",
           f"the {k} worst cells by |estimate - exact|, largest first, are (block, position) "
           f"{expected}, got {worst}" + repeat_hint())


@secret_check("plot_estimate_against_exact")
def test_secret_figure_draws_secret_maps(ex, secret, figures):
    exact, estimate = secret_maps(secret)
    words = (secret.text() + " " + secret.text()).split()
    tokens = [" " + secret.choice(words) for _ in range(exact.shape[1])]
    k = secret.integer(1, 4)
    cells = np.stack([exact.flatten().numpy(), estimate.flatten().numpy()], axis=1)  # a copy
    errors = (estimate - exact).abs().flatten()
    fig = run_plot(ex, exact.clone(), estimate.clone(), list(tokens), k)
    expect(isinstance(fig, Figure), "estimate-plot-not-a-figure",
           f"plot_estimate_against_exact should return a Figure, got {type(fig).__name__}")
    figures.append(fig)
    ax = fig.axes[0]
    points = [p for p in drawn_points(ax, marked_only=True) if p.shape == cells.shape]
    expect(any(np.allclose(np.sort(p, axis=0), np.sort(cells, axis=0), atol=1e-5) for p in points),
           "estimate-plot-points-wrong",
           f"draw one point per cell at (exact, estimate): {len(cells)} points for "
           f"{tuple(exact.shape)} maps" + repeat_hint())
    identity = [line for line in line_points(ax) if len(line) >= 2
                and np.allclose(line[:, 0], line[:, 1], atol=1e-9)]
    expect(bool(identity), "estimate-plot-no-identity-line",
           "draw the identity line y = x (dashed)" + repeat_hint())
    texts = [t.get_text() for t in ax.texts]
    for index in torch.topk(errors, k).indices.tolist():
        block, position = divmod(index, exact.shape[1])
        label = f"L{block} {tokens[position].strip()}"
        if not any(label in text for text in texts):
            check_compare_behind(ex, exact, estimate, k)
        expect(any(label in text for text in texts), "estimate-plot-worst-not-labelled",
               f"label the {k} worst cells as 'L<block> <token>': expected {label!r} among "
               f"{texts}" + repeat_hint())
