"""Exercise 6: activation patching (where the model keeps "Paris").

Every expected value comes from ``course/shared/reference.py`` (block outputs caught by hooks, one batched
pass per block, the metric from torch's log-softmax), never from the solutions; the code under
test is reached only through ``ex.<function>(...)``. The tiny GPT-2 carries the structure tests
(each reference is a handful of millisecond passes, computed once per process); SmolLM2 cut to
its first 4 blocks checks the same on trained weights, and the full SmolLM2 the textbook picture
with the fast version.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from course.shared.diagnosis import Diagnosis, diagnose  # noqa: E402
from kata.hooks import hook_snapshot  # noqa: E402
from kata.models import EnvironmentFault  # noqa: E402
from course.shared.reference import patched_metrics, patching_reference  # noqa: E402
from course.shared.library_errors import Sizes, learner_run  # noqa: E402
from course.shared.maps import map_diagnosis  # noqa: E402
from course.shared.support import (  # noqa: E402
    TensorBlock,
    TupleBlock,
    check_close,
    check_message_names,
    check_shape,
    check_tensor,
    computed_once,
    draw_headless,
    drawn_heatmaps,
    expect,
    figures,  # noqa: F401 - the fixture that closes the figures a test makes
    heatmap_axes,
    raises_clearly,
    reference_logits,
)

MAP_FUNCTIONS = ["patching_effect", "fast_patching_effect"]
DIVERGING = {"RdBu", "RdBu_r", "coolwarm", "coolwarm_r", "bwr", "bwr_r", "seismic", "seismic_r",
             "PiYG", "PiYG_r", "PRGn", "PRGn_r", "BrBG", "BrBG_r", "PuOr", "PuOr_r", "RdGy",
             "RdGy_r", "RdYlBu", "RdYlBu_r", "RdYlGn", "RdYlGn_r", "Spectral", "Spectral_r",
             "berlin", "managua", "vanimo"}


# ----------------------------------------------------------------------------- inputs and references


def prompts(tokenizer):
    """``(clean_ids, corrupted_ids, good_id, bad_id)`` of the Eiffel / Colosseum pair."""
    clean = tokenizer(kata.CLEAN_PROMPT, return_tensors="pt")["input_ids"]
    corrupted = tokenizer(kata.CORRUPTED_PROMPT, return_tensors="pt")["input_ids"]
    good = tokenizer(kata.CLEAN_ANSWER, add_special_tokens=False)["input_ids"][0]
    bad = tokenizer(kata.CORRUPTED_ANSWER, add_special_tokens=False)["input_ids"][0]
    return clean, corrupted, good, bad


def subject_prompts(tokenizer):
    """The pair cut to its subjects, "The Eiffel Tower" / "The Colosseum": up to the position
    from which the two prompts are the same tokens (4 in SmolLM2, 5 in GPT-2). The subjects alone
    separate " Paris" from " Rome" far better than the whole prompts (by 5.8 against 0.37 on
    SmolLM2's first 4 blocks, 0.60 against 0.016 on the tiny GPT-2), and the normalisation divides
    by that; the loop also runs fewer, shorter passes (4 x 4 on SmolLM2's first blocks, 4 x 5 on
    the tiny GPT-2, instead of 4 x 10 and 4 x 11)."""
    clean, corrupted, good, bad = prompts(tokenizer)
    differ = (clean[0] != corrupted[0]).nonzero()
    end = int(differ.max()) + 1
    return clean[:, :end], corrupted[:, :end], good, bad


def reference(model, tokenizer, name, pair=prompts):
    def compute():
        args = pair(tokenizer)
        return {"args": args, **patching_reference(model, *args)}

    return computed_once(("ex6-patching", name), compute)


@pytest.fixture(scope="module")
def tiny(tiny_gpt2):
    return reference(*tiny_gpt2, "tiny-gpt2-subjects", subject_prompts)


@pytest.fixture(scope="module")
def first_blocks(smollm2_first_blocks):
    return reference(*smollm2_first_blocks, "smollm2-first-4-blocks-subjects", subject_prompts)


def as_map(value, name):
    return check_tensor(value, name).detach().double().cpu()


def close(a, b, atol=1e-4):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    mask = ~torch.isnan(b)
    return a.shape == b.shape and bool(torch.allclose(a[mask], b[mask], atol=atol, rtol=1e-4))


def wrong_maps(model, ref):
    """The maps that catalogued mistakes give, computed from the model only when needed."""
    clean_ids, corrupted_ids, good, bad = ref["args"]
    clean, corrupted, raw = ref["clean"], ref["corrupted"], ref["raw"]
    yield "patching-not-normalised", raw, "the raw patched metric"
    yield "patching-not-normalised", raw - corrupted, "the patched metric minus the corrupted one"
    yield "patching-normalised-wrong-way", (raw - clean) / (corrupted - clean), \
        "normalised with 0 at the clean run and 1 at the corrupted one"
    yield "patching-normalised-wrong-way", (raw - corrupted) / (corrupted - clean), \
        "divided by corrupted - clean"
    swapped = patched_metrics(model, clean_ids, ref["corrupted_outputs"], good, bad)
    yield "patching-clean-corrupted-swapped", (swapped - clean) / (corrupted - clean), \
        "the corrupted states patched into the clean run"
    yield "patching-clean-corrupted-swapped", (swapped - corrupted) / (clean - corrupted), \
        "the corrupted states patched into the clean run"
    shifted = patched_metrics(model, corrupted_ids, ref["clean_outputs"], good, bad, shift=1)
    yield "patching-hidden-states-off-by-one", (shifted - corrupted) / (clean - corrupted), \
        "block l patched with hidden_states[l], the output of block l - 1"


def late_binding_map(model, ref):
    """``(n_layers, T)``: the map of runs with every block patched with the *last* block's clean
    outputs, what hooks made in a loop give when they read the loop's variables after it ended
    (computed here, with the test's own hooks)."""
    clean_ids, corrupted_ids, good, bad = ref["args"]
    last = ref["clean_outputs"][-1]
    raw = patched_metrics(model, corrupted_ids, [last] * len(ref["clean_outputs"]), good, bad)
    return (raw - ref["corrupted"]) / (ref["clean"] - ref["corrupted"])


def shape_of_wrong_map(model, effect, ref, name, where):
    """Fail naming the shape of a wrong map (``tests/map_shapes.py``), when it has one."""
    found = map_diagnosis(effect, ref["effect"], f"your {name}", "patching", where=f"on {where}",
                          late=lambda: late_binding_map(model, ref),
                          known={"clean - corrupted": ref["clean"] - ref["corrupted"],
                                 "the corrupted metric": ref["corrupted"],
                                 "a cell left at 0, once normalised":
                                     -ref["corrupted"] / (ref["clean"] - ref["corrupted"]),
                                 "the corrupted metric / (clean - corrupted)":
                                     ref["corrupted"] / (ref["clean"] - ref["corrupted"])},
                          ids={"scale": "patching-not-normalised",
                               "sign": "patching-normalised-wrong-way"}, atol=3e-4)
    if found is not None:
        diagnose(*found)


def run_map(ex, function, model, args, where=""):
    """Your ``function`` on valid prompts; a library error it raises is named with its likely
    cause (``tests/library_errors.py``), unless your patch_hook or logit_difference, which it may
    use, is wrong: that is named first."""

    def behind():
        check_hook_behind(ex, function)
        check_metric_behind(ex, function)

    return learner_run(lambda: getattr(ex, function)(model, *args), function,
                       lambda: Sizes.of(model, args[0]), "patching", where, behind=behind)


def check_hook_behind(ex, name):
    """When a map is wrong, a wrong ``patch_hook`` is the cause to name first: the public test of
    the hook, run on toy blocks (a hook not written yet, or one that only raises, is left to its
    own tests)."""
    for block_kind in ("tensor", "tuple"):
        for position in (1, -1):
            try:
                test_patch_hook_replaces_one_position(ex, block_kind, position)
            except EnvironmentFault:
                raise
            except Diagnosis as error:
                diagnose(error.id, f"{name} may use your patch_hook, which is wrong: "
                         f"{error.message}")
            except Exception:  # noqa: BLE001 - NotImplementedError included: not this test's
                return


def check_map(ex, model, effect, ref, name, where):
    """Fail, naming the mistake, unless ``effect`` is the reference map."""
    effect = as_map(effect, name)
    expected = ref["effect"]
    n_layers, n_tokens = expected.shape
    if effect.shape == (n_layers + 1, n_tokens):
        diagnose("patching-embedding-row-added",
                 f"{name} has {n_layers + 1} rows: one per block is {n_layers}; the embeddings "
                 "(hidden_states[0]) are no block's output")
    if effect.shape != expected.shape:
        shape_of_wrong_map(model, effect, ref, name, where)
    check_shape(effect, (n_layers, n_tokens), name,
                "(n_layers, T): one row per block, one column per position",
                diagnosis="patching-map-shape-wrong")
    if close(effect, expected, atol=3e-4):  # float32 noise, divided by the metrics' gap
        return
    check_metric_behind(ex, name)
    check_hook_behind(ex, name)
    for diagnosis, wrong, what in wrong_maps(model, ref):
        if close(effect, wrong, atol=1e-3):
            diagnose(diagnosis, f"{name} on {where} gives {what}: patch the *clean* block outputs "
                     "into the *corrupted* run, at the output of block l (hidden_states[l + 1]), "
                     "and normalise as (patched - corrupted) / (clean - corrupted), so that 0 is "
                     "the corrupted run and 1 the clean one")
    shape_of_wrong_map(model, effect, ref, name, where)
    difference = (effect - expected).abs()
    layer, position = divmod(int(difference.argmax()), n_tokens)
    diagnose(f"{name.replace('_', '-')}-values-wrong", (
        f"{name} on {where}: block {layer}, position {position} gives "
        f"{effect[layer, position]:.4f}, but writing the clean output of block {layer} at "
        f"position {position} into the corrupted run restores {expected[layer, position]:.4f} "
        f"(largest difference {difference.max():.3g})"))


# ----------------------------------------------------------------------------- logit_difference


def made_logits():
    generator = torch.Generator().manual_seed(6)
    return torch.randn(2, 5, 7, generator=generator) * 3  # (batch, T, vocab)


def run_learner(ex, function, *args, sizes=None, **kwargs):
    """Your ``function`` on valid inputs (not a map's: :func:`run_map`); a library error it
    raises is named with its likely cause (``tests/library_errors.py``). ``sizes``: the
    :class:`Sizes` of the inputs, which name an axis by its size."""
    shapes = ", ".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor))
    return learner_run(lambda: getattr(ex, function)(*args, **kwargs), function,
                       sizes or Sizes(0, 0), function.replace("_", "-"),
                       inputs=f"tensors of shapes {shapes}" if shapes else "valid inputs")


def metric_mistake(got, logits, good, bad) -> tuple[str, str] | None:
    """``(diagnosis, what is wrong)`` when ``got`` is not log p(good) - log p(bad) at the last
    position of ``logits`` (batch, T, vocab_size); ``None`` when it is."""
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    expected = log_probs[:, -1, good] - log_probs[:, -1, bad]
    got = got.detach().double().cpu()
    if close(got, expected, 1e-5):
        return None
    probs = log_probs.exp()
    if close(got, -expected, 1e-5):
        return ("logit-difference-swapped",
                "the sign is flipped: the metric is log p(good) - log p(bad), positive when the "
                "model prefers good_id")
    if close(got, probs[:, -1, good] - probs[:, -1, bad], 1e-5):
        return ("logit-difference-of-probabilities",
                "this is a difference of probabilities (softmax): the metric is the difference "
                "of log-probabilities, or equally of the raw logits")
    if close(got, log_probs[:, 0, good] - log_probs[:, 0, bad], 1e-5):
        return ("logit-difference-wrong-position",
                "this is read at position 0: only the last position predicts the next token, "
                "logits[..., -1, :]")
    return ("logit-difference-wrong",
            f"expected log p({good}) - log p({bad}) at the last position, {expected.tolist()}, "
            f"got {got.tolist()}")


def test_logit_difference_at_the_last_position(ex):
    logits = made_logits()
    got = check_tensor(run_learner(ex, "logit_difference", logits, 3, 5, sizes=Sizes(0, 5, vocab=7)),
                       "logit_difference")
    check_shape(got, (2,), "logit_difference of (batch, T, vocab_size) logits", "one value per row",
                diagnosis="logit-difference-shape-wrong")
    mistake = metric_mistake(got, logits, 3, 5)
    if mistake is not None:
        diagnose(*mistake)


def check_metric_behind(ex, name):
    """When the map is wrong, a wrong ``logit_difference`` is the cause to name first: the map
    divides by the metric, so a wrong metric can mimic a catalogued wrong map."""
    logits = made_logits()
    try:
        got = ex.logit_difference(logits, 3, 5)
        mistake = metric_mistake(torch.as_tensor(got), logits, 3, 5)
    except EnvironmentFault:  # the machine's fault is graded as the machine's, never as the map's
        raise
    except Exception:  # noqa: BLE001 - the metric's own tests name what is wrong with it
        return
    if mistake is not None:
        diagnose(mistake[0], f"{name} reads the metric with your logit_difference, which is "
                 f"wrong: {mistake[1]}")


def test_logit_difference_of_one_text(ex):
    """float64 logits in, a float32 metric out, as the docstring promises."""
    logits = made_logits()[0].double()  # (T, vocab_size)
    got = check_tensor(run_learner(ex, "logit_difference", logits, 1, 2, sizes=Sizes(0, 5, vocab=7)),
                       "logit_difference")
    check_shape(got, (), "logit_difference of (T, vocab_size) logits", "a 0-d tensor for one text",
                diagnosis="logit-difference-shape-wrong")
    expect(got.dtype == torch.float32, "logit-difference-not-float32",
           f"on float64 logits your function returned {got.dtype}: the metric is float32 "
           "whatever the logits' dtype (.float() before the log-softmax)")
    expected = (logits[-1, 1] - logits[-1, 2]).item()
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


def toy_input():
    return torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)  # (batch, T, d)


def run_hooked(block, hook, x):
    handle = block.register_forward_hook(hook)
    try:
        return block(x)
    finally:
        handle.remove()


def hidden_of(output):
    return output[0] if isinstance(output, tuple) else output


@pytest.mark.parametrize("block_kind", ["tensor", "tuple"])
@pytest.mark.parametrize("position", [1, -1])
def test_patch_hook_replaces_one_position(ex, block_kind, position):
    block = TensorBlock() if block_kind == "tensor" else TupleBlock()
    x = toy_input()
    new = torch.tensor([-1.0, -2.0, -3.0])
    hook = ex.patch_hook(position, new)
    try:
        output = run_hooked(block, hook, x)
    except (TypeError, AttributeError, IndexError, RuntimeError) as error:
        diagnose("patch-hook-output-form",
                 f"on a block that returns a {block_kind}, the hook raised "
                 f"{type(error).__name__}: {error}. A block returns a tensor (batch, T, d_model) "
                 "or a tuple with it first: check isinstance(output, tuple)")
    if block_kind == "tuple":
        expect(isinstance(output, tuple) and len(output) == 2 and output[1] is block.extra,
               "patch-hook-output-form",
               "on a block that returns a tuple, return a tuple with the patched hidden states "
               "first and the other elements unchanged")
    else:
        expect(isinstance(output, torch.Tensor), "patch-hook-output-form",
               f"on a block that returns a tensor, return a tensor, got {type(output).__name__}")
    hidden = check_tensor(hidden_of(output), "the patched output")
    expected = 2 * x
    expected[:, position] = new
    check_shape(hidden, tuple(expected.shape), "the patched output",
                "(batch, T, d_model), as the block returned it", diagnosis="patch-hook-output-form")
    if torch.equal(hidden, expected):
        return
    changed = sorted({int(p) for p in (hidden != 2 * x).any(-1).nonzero()[:, 1].tolist()})
    if len(changed) > 1 and (hidden == new).all(-1).all():
        diagnose("patch-hook-every-position",
                 "every position was replaced: patch only output[:, position]")
    target = position % x.shape[1]
    row = position % x.shape[0]
    if (hidden[row] == new).all() and not (hidden[1 - row] == new).all(-1).any():
        diagnose("patch-hook-wrong-position",
                 f"row {row} of the batch was replaced whole: output[position] indexes the batch; "
                 "the positions are the second axis, output[:, position]")
    if changed and target not in changed:
        diagnose("patch-hook-wrong-position",
                 f"position {changed} was replaced instead of {position} (index {target}): "
                 "write into [:, position], the second axis")
    if torch.equal(hidden[0], expected[0]) and not torch.equal(hidden[1], expected[1]):
        diagnose("patch-hook-first-row-only",
                 "only the first row of the batch was patched: write into every row, [:, position]")
    diagnose("patch-hook-wrong",
             f"expected the block's output with position {position} replaced by {new.tolist()}, got "
             f"{hidden.tolist()}")


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
        "cache made from it see the change (a clean cache gets corrupted). clone() it and patch "
        "the copy"))


def test_patch_hook_rejects_bad_input(ex):
    raises_clearly(ValueError, lambda: ex.patch_hook(0, torch.zeros(2, 3)),
                   "patch_hook with new_hidden of shape (2, 3)",
                   "new_hidden is one vector (d_model,): check its shape when the hook is made.",
                   "patch-hook-input-not-checked")
    block, x = TensorBlock(), toy_input()
    raises_clearly(IndexError, lambda: run_hooked(block, ex.patch_hook(4, torch.zeros(3)), x),
                   "a patch_hook for position 4 on an output of 4 tokens",
                   "Check the position inside the hook against output.shape[-2] "
                   "(kata.token_index does).", "patch-hook-position-not-checked")
    raises_clearly(ValueError, lambda: run_hooked(block, ex.patch_hook(0, torch.zeros(5)), x),
                   "a patch_hook with a vector of 5 numbers on an output with d_model 3",
                   "Compare new_hidden's length with the output's last dimension.",
                   "patch-hook-size-not-checked")


# ----------------------------------------------------------------------------- patching_effect


def test_patching_effect_on_tiny_gpt2(ex, tiny_gpt2, tiny):
    model, _ = tiny_gpt2
    effect = run_map(ex, "patching_effect", model, tiny["args"], "on the tiny GPT-2")
    value = check_tensor(effect, "patching_effect")
    expect(value.dtype == torch.float32, "patching-not-float32", f"expected float32, got {value.dtype}")
    check_map(ex, model, effect, tiny, "patching_effect", "the tiny GPT-2")


def test_fast_patching_effect_on_tiny_gpt2(ex, tiny_gpt2, tiny):
    model, _ = tiny_gpt2
    effect = run_map(ex, "fast_patching_effect", model, tiny["args"], "on the tiny GPT-2")
    value = check_tensor(effect, "fast_patching_effect")
    expect(value.dtype == torch.float32, "patching-not-float32", f"expected float32, got {value.dtype}")
    check_map(ex, model, effect, tiny, "fast_patching_effect", "the tiny GPT-2")


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
           f"{function} left a hook on the model: remove every hook you register")


class InjectedFailure(Exception):
    pass


class FailingPass:
    """A pre-hook for the final norm that counts the forward passes and raises in pass number
    ``at`` (never when ``at`` is None). It counts every pass, hooked or not: under the grader
    the learner's hooks live on the other side of the boundary, where this hook cannot see them."""

    def __init__(self, model, at=None):
        self.model, self.at, self.count = model, at, 0

    def __call__(self, module, args):
        self.count += 1
        if self.count == self.at:
            raise InjectedFailure("the forward pass failed (injected by the test)")


def run_with(model, call, at):
    failing = FailingPass(model, at)
    handle = kata.final_norm(model).register_forward_pre_hook(failing)
    try:
        call()
    except InjectedFailure:
        return failing, True
    finally:
        handle.remove()
    return failing, False


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
            f"after forward pass {at} of {function} raised, a hook was still on the model: "
            "remove every hook in a finally block"))
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
            "Patching pairs position p with position p: compare the two lengths and raise a "
            "ValueError; never truncate one prompt."),
        "nothing to restore": (
            (clean, clean, good, bad), "patching-nothing-to-restore-not-checked",
            "With equal clean and corrupted metrics the normalisation divides by 0: raise a "
            "ValueError saying there is nothing to restore."),
        "good_id not a token": (
            (clean, corrupted, model.config.vocab_size + 3, bad), "patching-token-id-not-checked",
            "kata.token_id checks an id."),
    }[case]
    message = raises_clearly(ValueError, lambda: getattr(ex, function)(model, *arguments),
                             f"{function} with {case}", why, diagnosis)
    if case == "prompts of different lengths":
        check_message_names(message, [clean.shape[1], clean.shape[1] - 1], "patching-lengths-message",
                            "give both prompts' lengths")


# ----------------------------------------------------------------------------- the fast version's work


class WorkCounter:
    """What a model runs: rows per block call, positions given to the unembedding, and which
    prompts each run reads (a pre-hook on the input embeddings, where every run starts)."""

    def __init__(self, model, clean_ids, corrupted_ids):
        self.rows = {}  # block index -> [rows of each call]
        self.unembedded = []
        self.runs = []  # per run: {"clean": rows of the clean prompt, "corrupted": ..., "rows": all}
        self.prompts = {"clean": clean_ids.reshape(-1), "corrupted": corrupted_ids.reshape(-1)}
        self.handles = [block.register_forward_pre_hook(self._block(i), with_kwargs=True)
                        for i, block in enumerate(kata.blocks(model))]
        self.handles.append(model.get_output_embeddings().register_forward_pre_hook(self._unembed))
        self.handles.append(model.get_input_embeddings().register_forward_pre_hook(self._read))

    def _read(self, module, args):
        if not args or not isinstance(args[0], torch.Tensor):
            return
        ids = args[0].reshape(-1, args[0].shape[-1]).cpu()
        run = {"rows": ids.shape[0]}
        for name, prompt in self.prompts.items():
            run[name] = sum(torch.equal(row, prompt) for row in ids)
        self.runs.append(run)

    def runs_alone(self, prompt):
        """The runs of ``prompt`` as one row of a run of at most two (a plain run of it, or the
        two prompts side by side), not a batch of copies."""
        return [run for run in self.runs if run[prompt] == 1 and run["rows"] <= 2]

    def _block(self, index):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs.get("hidden_states")
            self.rows.setdefault(index, []).append(None if hidden is None else hidden.shape[0])

        return hook

    def _unembed(self, module, args):
        self.unembedded.append(tuple(args[0].shape))

    def remove(self):
        for handle in self.handles:
            handle.remove()


@pytest.fixture
def work(ex, tiny_gpt2, tiny):
    model, _ = tiny_gpt2
    counter = WorkCounter(model, *tiny["args"][:2])
    try:
        run_map(ex, "fast_patching_effect", model, tiny["args"], "on the tiny GPT-2")
    finally:
        counter.remove()
    return counter, len(kata.blocks(model)), tiny["args"][0].shape[1]


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
        "give it final[:, -1:] only (or pass logits_to_keep=1)"))


# ----------------------------------------------------------------------------- the figure


def made_effect():
    generator = torch.Generator().manual_seed(14)
    return torch.rand(30, 6, generator=generator) * 1.4 - 0.3  # (n_layers, T), some negative


TOKENS = ["The", " E", "iffel", " Tower", " in", " of"]


def test_plot_patching_effect(ex, figures):
    effect = made_effect()
    fig = run_learner(ex, "plot_patching_effect", effect, TOKENS, sizes=Sizes(30, 6))
    assert isinstance(fig, Figure), f"expected a matplotlib Figure, got {type(fig).__name__}"
    figures.append(fig)
    axes = heatmap_axes(fig)
    assert axes, "no heatmap: draw the map with ax.imshow"
    ax = axes[0]
    heatmap = drawn_heatmaps(ax)[0]
    array = heatmap.values
    if array.shape == (6, 30):
        diagnose("patching-plot-transposed",
                 "the image has the positions as rows: rows are blocks, columns positions, "
                 "shape (n_layers, T)")
    assert array.shape == (30, 6) and np.allclose(array, effect.numpy(), atol=1e-6), (
        "the image should be the map itself, (n_layers, T), row l block l")
    name = heatmap.cmap
    expect(name in DIVERGING, "patching-plot-not-diverging", (
        f"the colormap {name!r} is not diverging: a patch can restore (positive) or hurt "
        "(negative), so use one that is neutral at 0, such as 'RdBu_r' or 'coolwarm'"))
    norm = heatmap.norm
    expect(abs(float(norm(0.0)) - 0.5) < 1e-6, "patching-plot-not-centred", (
        f"0 is drawn at {float(norm(0.0)):.2f} of the colormap, not its middle: use vmin=-m, "
        "vmax=m (or matplotlib.colors.CenteredNorm) so that 'no effect' is the neutral colour"))
    xlabels = [label.get_text().strip() for label in ax.get_xticklabels()]
    assert xlabels == [t.strip() for t in TOKENS], f"label the columns with the tokens {TOKENS}, got {xlabels}"
    ylabels = [label.get_text() for label in ax.get_yticklabels()]
    assert ylabels == [f"L{i}" for i in range(30)], f"label the rows L0 .. L29, got {ylabels[:3]}..."
    assert len(fig.axes) >= 2, "add a colorbar (fig.colorbar) so the colours can be read"
    row_points = ax.get_window_extent().height * 72 / fig.dpi / 30
    size = max(label.get_fontsize() for label in ax.get_yticklabels())
    expect(size <= row_points * 1.05, "patching-plot-illegible", (
        f"with 30 blocks each row is {row_points:.1f} points tall, but the row labels are "
        f"{size:g} points: make the figure about 0.25 inch per block tall"))
    draw_headless(fig)


# ----------------------------------------------------------------------------- trained weights


@pytest.mark.trained
@pytest.mark.parametrize("function", MAP_FUNCTIONS)
def test_on_smollm2_first_blocks(ex, smollm2_first_blocks, first_blocks, function):
    model, _ = smollm2_first_blocks
    effect = run_map(ex, function, model, first_blocks["args"], "on SmolLM2's first 4 blocks")
    check_map(ex, model, effect, first_blocks, function,
              "SmolLM2's first 4 blocks with the subjects' 4 tokens")


# ----------------------------------------------------------------------------- secret checks
# Every public function again, on inputs drawn from a seed only the grader knows (course/shared/secret.py):
# logits, positions and vectors of random sizes, a GPT-2 of random sizes with two random prompts,
# random maps to draw. Their points count only if these pass.

from course.shared.secret import repeat_hint, secret, secret_check  # noqa: E402,F401 - secret: a fixture


@secret_check("logit_difference")
def test_secret_logit_difference_of_secret_logits(ex, secret):
    vocab, n_tokens = secret.integer(3, 80), secret.integer(2, 9)
    batch = secret.choice([None, secret.integer(1, 5)])
    shape = (n_tokens, vocab) if batch is None else (batch, n_tokens, vocab)
    logits = secret.tensor(*shape)
    if secret.choice([True, False]):
        logits = logits.double()
    good, bad = secret.rng.sample(range(vocab), 2)
    log_probs = torch.log_softmax(logits.double(), dim=-1)[..., -1, :]
    expected = log_probs[..., good] - log_probs[..., bad]  # before the call: nothing it does counts
    got = check_tensor(run_learner(ex, "logit_difference", logits, good, bad,
                                   sizes=Sizes(0, n_tokens, vocab=vocab)), "logit_difference")
    check_shape(got, tuple(expected.shape), f"logit_difference of logits of shape {shape}",
                "one value per text: () for (T, vocab_size), (batch,) for a batch",
                diagnosis="logit-difference-shape-wrong")
    expect(got.dtype == torch.float32, "logit-difference-not-float32",
           f"on {logits.dtype} logits your function returned {got.dtype}: the metric is float32")
    check_close(got, expected, f"logit_difference of logits of shape {shape}, good {good}, bad {bad}",
                "log p(good) - log p(bad) at the last position" + repeat_hint(), atol=1e-4,
                diagnosis="logit-difference-wrong")


def patch_through_the_receiver(model, layer, position, vector):
    """A forward pre-hook that writes ``vector`` at ``position`` of what receives block
    ``layer``'s output (the next block, or the final norm after the last): the same patch as a
    hook on the block itself, made independently of the learner's hook."""
    receiver = (list(kata.blocks(model)[1:]) + [kata.final_norm(model)])[layer]

    def pre_hook(module, args, kwargs):
        hidden = (args[0] if args else kwargs["hidden_states"]).clone()
        hidden[:, position] = vector.to(hidden.dtype)
        if args:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    return receiver.register_forward_pre_hook(pre_hook, with_kwargs=True)


@secret_check("patch_hook")
def test_secret_patch_hook_on_toy_blocks_and_a_model_block(ex, tiny_gpt2, secret):
    x = secret.tensor(secret.integer(1, 4), secret.integer(2, 8), secret.integer(2, 9))
    n_tokens, d_model = x.shape[1], x.shape[2]
    position = secret.integer(-n_tokens, n_tokens - 1)
    new = secret.tensor(d_model)
    expected = 2 * x
    expected[:, position] = new
    for block in (TensorBlock(), TupleBlock()):
        output = learner_run(
            lambda: run_hooked(block, ex.patch_hook(position, new.clone()), x.clone()),
            "patch_hook", Sizes(0, n_tokens, d_model=d_model), "patch-hook",
            inputs=f"position {position} on a block output {tuple(x.shape)}" + repeat_hint())
        check_close(hidden_of(output), expected,
                    f"a {type(block).__name__}'s output of shape {tuple(x.shape)} patched at "
                    f"position {position}", "every row's position replaced, nothing else"
                    + repeat_hint(), diagnosis="patch-hook-wrong")
    model, tokenizer = tiny_gpt2
    ids = tokenizer(secret.text(), return_tensors="pt")["input_ids"]
    layer = secret.integer(0, len(kata.blocks(model)) - 1)
    position = secret.integer(0, ids.shape[1] - 1)
    vector = secret.tensor(model.config.n_embd)
    handle = patch_through_the_receiver(model, layer, position, vector)
    try:
        expected = reference_logits(model, ids)
    finally:
        handle.remove()
    handle = kata.blocks(model)[layer].register_forward_hook(ex.patch_hook(position, vector),
                                                             prepend=True)
    try:
        logits = learner_run(lambda: reference_logits(model, ids), "patch_hook",
                             lambda: Sizes.of(model, ids), "patch-hook",
                             inputs=f"position {position} of block {layer}'s output"
                             + repeat_hint())
    finally:
        handle.remove()
    check_close(logits, expected, f"the logits with block {layer}'s output patched at position "
                f"{position}", "the hook should write the vector into that position of the "
                "block's output" + repeat_hint(), atol=1e-4, diagnosis="patch-hook-wrong")


def secret_patching_case(secret):
    """A GPT-2 of random sizes (weights spread ten times GPT-2's, so that prompts lead to clearly
    different predictions) and a secret prompt pair for it: ``(model, reference)``."""
    model = secret.gpt2(layers=(1, 4), spread=0.2)
    args = secret.prompt_pair(model)
    return model, {"args": args, **patching_reference(model, *args)}


def describe_case(model, reference) -> str:
    clean, corrupted, good, bad = reference["args"]
    return (f"a GPT-2 of {model.config.n_layer} blocks, prompts {clean[0].tolist()} and "
            f"{corrupted[0].tolist()}, good {good}, bad {bad}")


@secret_check("patching_effect")
def test_secret_patching_effect_on_a_model_of_random_sizes(ex, secret):
    model, reference = secret_patching_case(secret)
    effect = run_map(ex, "patching_effect", model, reference["args"],
                     "on " + describe_case(model, reference) + repeat_hint())
    check_map(ex, model, effect, reference, "patching_effect",
              describe_case(model, reference) + repeat_hint())


@secret_check("fast_patching_effect")
def test_secret_fast_patching_effect_on_a_model_of_random_sizes(ex, secret):
    model, reference = secret_patching_case(secret)
    effect = run_map(ex, "fast_patching_effect", model, reference["args"],
                     "on " + describe_case(model, reference) + repeat_hint())
    check_map(ex, model, effect, reference, "fast_patching_effect",
              describe_case(model, reference) + repeat_hint())


@secret_check("plot_patching_effect")
def test_secret_figure_draws_a_secret_map(ex, secret, figures):
    n_layers, n_tokens = secret.integer(2, 30), secret.integer(2, 12)
    effect = secret.tensor(n_layers, n_tokens, scale=secret.number(0.3, 1.5))
    words = (secret.text() + " " + secret.text()).split()
    tokens = [secret.choice(["", " "]) + secret.choice(words) for _ in range(n_tokens)]
    expected = effect.numpy().copy()
    fig = run_learner(ex, "plot_patching_effect", effect.clone(), list(tokens),
                      sizes=Sizes(n_layers, n_tokens))
    expect(isinstance(fig, Figure), "patching-plot-not-a-figure",
           f"plot_patching_effect should return a matplotlib Figure, got {type(fig).__name__}")
    figures.append(fig)
    axes = heatmap_axes(fig)
    expect(bool(axes), "patching-plot-no-image", "no heatmap: draw the map with ax.imshow")
    ax, heatmap = axes[0], drawn_heatmaps(axes[0])[0]
    array = heatmap.values
    expect(array.shape == (n_layers, n_tokens) and np.allclose(array, expected, atol=1e-5),
           "patching-plot-transposed" if array.shape == (n_tokens, n_layers) else
           "patching-plot-wrong-data",
           f"the image should be the map itself, ({n_layers}, {n_tokens}), row l block l; got "
           f"an image of shape {array.shape}" + repeat_hint())
    expect(heatmap.cmap in DIVERGING, "patching-plot-not-diverging",
           f"the colormap {heatmap.cmap!r} is not diverging" + repeat_hint())
    expect(abs(float(heatmap.norm(0.0)) - 0.5) < 1e-6, "patching-plot-not-centred",
           f"0 is drawn at {float(heatmap.norm(0.0)):.2f} of the colormap, not its middle"
           + repeat_hint())
    xlabels = [label.get_text().strip() for label in ax.get_xticklabels()]
    expect(xlabels == [t.strip() for t in tokens], "patching-plot-token-labels",
           f"label the columns with the tokens {tokens}, got {xlabels}" + repeat_hint())
