"""Exercise 6's checks: the model's own patching map, and what a wrong answer looks like.

The reference values come from ``course/shared/reference.py`` (block outputs caught by hooks, one
batched pass per block, the metric from torch's log-softmax), computed from the test's own inputs
before the code under test sees them; the code under test gets copies. Each ``check_*`` function
reads a result and, when it is wrong, names the mistake by the shape of its wrongness (a map's
shape: ``course/shared/maps.py``) or a library error by its likely cause
(``course/shared/library_errors.py``), with a stable diagnosis id the mistakes catalogue uses.
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
from course.shared.library_errors import Sizes, learner_run  # noqa: E402
from course.shared.maps import map_diagnosis  # noqa: E402
from course.shared.reference import patched_metrics, patching_reference  # noqa: E402
from course.shared.support import (  # noqa: E402
    TensorBlock,
    TupleBlock,
    check_shape,
    check_tensor,
    computed_once,
    drawn_heatmaps,
    expect,
    heatmap_axes,
)
from kata.models import EnvironmentFault  # noqa: E402

MAP_FUNCTIONS = ["patching_effect", "fast_patching_effect"]
DIVERGING = {"RdBu", "RdBu_r", "coolwarm", "coolwarm_r", "bwr", "bwr_r", "seismic", "seismic_r",
             "PiYG", "PiYG_r", "PRGn", "PRGn_r", "BrBG", "BrBG_r", "PuOr", "PuOr_r", "RdGy",
             "RdGy_r", "RdYlBu", "RdYlBu_r", "RdYlGn", "RdYlGn_r", "Spectral", "Spectral_r",
             "berlin", "managua", "vanimo"}
TOKENS = ["The", " E", "iffel", " Tower", " in", " of"]  # the figure's column labels

# ----------------------------------------------------------------------------- inputs and references


def subject_prompts(tokenizer):
    """The pair cut to its subjects, "The Eiffel Tower" / "The Colosseum": up to the position
    from which the two prompts are the same tokens (4 in SmolLM2, 5 in GPT-2). The subjects alone
    separate " Paris" from " Rome" far better than the whole prompts (by 5.8 against 0.37 on
    SmolLM2's first 4 blocks, 0.60 against 0.016 on the tiny GPT-2), and the normalisation divides
    by that; the loop also runs fewer, shorter passes (4 x 4 on SmolLM2's first blocks, 4 x 5 on
    the tiny GPT-2, instead of 4 x 10 and 4 x 11)."""
    clean, corrupted, good, bad = patching_prompts(tokenizer)
    differ = (clean[0] != corrupted[0]).nonzero()
    end = int(differ.max()) + 1
    return clean[:, :end], corrupted[:, :end], good, bad


def reference(model, tokenizer, name, pair=patching_prompts):
    """``{"args": (clean_ids, corrupted_ids, good_id, bad_id), **patching_reference(...)}``,
    computed once per process for ``name``."""

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


def copies(args):
    """The arguments with a copy of each tensor: the code under test never holds the tensors the
    test computes from."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def as_map(value, name):
    return check_tensor(value, name).detach().double().cpu()


def close(a, b, atol=1e-4):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    mask = ~torch.isnan(b)
    return a.shape == b.shape and bool(torch.allclose(a[mask], b[mask], atol=atol, rtol=1e-4))


# ----------------------------------------------------------------------------- running your code


def run_learner(ex, function, *args, sizes=None, **kwargs):
    """Your ``function`` on valid inputs (copies of them; not a map's: :func:`run_map`); a
    library error it raises is named with its likely cause (``course/shared/library_errors.py``).
    ``sizes``: the :class:`Sizes` of the inputs, which name an axis by its size."""
    shapes = ", ".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor))
    args = copies(args)
    return learner_run(lambda: getattr(ex, function)(*args, **kwargs), function,
                       sizes or Sizes(0, 0), function.replace("_", "-"),
                       inputs=f"tensors of shapes {shapes}" if shapes else "valid inputs")


def run_map(ex, function, model, args, where=""):
    """Your ``function`` on valid prompts (copies of them); a library error it raises is named
    with its likely cause, unless your patch_hook or logit_difference, which it may use, is
    wrong: that is named first."""

    def behind():
        check_hook_behind(ex, function)
        check_metric_behind(ex, function)

    given = copies(args)
    return learner_run(lambda: getattr(ex, function)(model, *given), function,
                       lambda: Sizes.of(model, args[0]), "patching", where, behind=behind)


# ----------------------------------------------------------------------------- logit_difference


def made_logits():
    generator = torch.Generator().manual_seed(6)
    return torch.randn(2, 5, 7, generator=generator) * 3  # (batch, T, vocab)


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
                "this is read at position 0: only the last position predicts the next token")
    return ("logit-difference-wrong",
            f"expected log p({good}) - log p({bad}) at the last position, {expected.tolist()}, "
            f"got {got.tolist()}")


def check_metric_behind(ex, name):
    """When the map is wrong, a wrong ``logit_difference`` is the cause to name first: the map
    divides by the metric, so a wrong metric can mimic a catalogued wrong map."""
    logits = made_logits()
    try:
        got = ex.logit_difference(logits.clone(), 3, 5)
        mistake = metric_mistake(torch.as_tensor(got), logits, 3, 5)
    except EnvironmentFault:  # the machine's fault is graded as the machine's, never as the map's
        raise
    except Exception:  # noqa: BLE001 - the metric's own tests name what is wrong with it
        return
    if mistake is not None:
        diagnose(mistake[0], f"{name} reads the metric with your logit_difference, which is "
                 f"wrong: {mistake[1]}")


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


def check_patch_hook_on_a_toy_block(ex, block_kind, position):
    """Your patch_hook on a block that returns a ``block_kind`` ("tensor" or "tuple") of shape
    (2, 4, 3), at ``position``: one position replaced in every row, nothing else, in the form the
    block returned; a wrong output is named by what changed."""
    block = TensorBlock() if block_kind == "tensor" else TupleBlock()
    x = toy_input()
    new = torch.tensor([-1.0, -2.0, -3.0])
    expected = 2 * x  # what the block returns, then the patch
    expected[:, position] = new
    hook = ex.patch_hook(position, new.clone())
    try:
        output = run_hooked(block, hook, x.clone())
    except (TypeError, AttributeError, IndexError, RuntimeError) as error:
        diagnose("patch-hook-output-form",
                 f"on a block that returns a {block_kind}, the hook raised "
                 f"{type(error).__name__}: {error}. A block returns a tensor (batch, T, d_model) "
                 "or a tuple with that tensor first: the hook must handle both")
    if block_kind == "tuple":
        expect(isinstance(output, tuple) and len(output) == 2 and output[1] is block.extra,
               "patch-hook-output-form",
               "on a block that returns a tuple, return a tuple with the patched hidden states "
               "first and the other elements unchanged")
    else:
        expect(isinstance(output, torch.Tensor), "patch-hook-output-form",
               f"on a block that returns a tensor, return a tensor, got {type(output).__name__}")
    hidden = check_tensor(hidden_of(output), "the patched output")
    check_shape(hidden, tuple(expected.shape), "the patched output",
                "(batch, T, d_model), as the block returned it", diagnosis="patch-hook-output-form")
    if torch.equal(hidden, expected):
        return
    unpatched = 2 * x
    changed = sorted({int(p) for p in (hidden != unpatched).any(-1).nonzero()[:, 1].tolist()})
    if len(changed) > 1 and (hidden == new).all(-1).all():
        diagnose("patch-hook-every-position",
                 "every position was replaced: a patch replaces one position and leaves the "
                 "others as the block computed them")
    target = position % x.shape[1]
    row = position % x.shape[0]
    if (hidden[row] == new).all() and not (hidden[1 - row] == new).all(-1).any():
        diagnose("patch-hook-wrong-position",
                 f"row {row} of the batch was replaced whole: the first axis of a block's output "
                 "is the batch, and the positions are the second axis")
    if changed and target not in changed:
        diagnose("patch-hook-wrong-position",
                 f"position {changed} was replaced instead of {position} (index {target}): the "
                 "positions are the second axis of the output, the batch the first")
    if torch.equal(hidden[0], expected[0]) and not torch.equal(hidden[1], expected[1]):
        diagnose("patch-hook-first-row-only",
                 "only the first row of the batch was patched: every row of the batch is a run, "
                 "and each gets the patch")
    diagnose("patch-hook-wrong",
             f"expected the block's output with position {position} replaced by {new.tolist()}, "
             f"got {hidden.tolist()}")


def check_hook_behind(ex, name):
    """When a map is wrong, a wrong ``patch_hook`` is the cause to name first: the hook's own
    check, on toy blocks (a hook not written yet, or one that only raises, is left to its own
    tests)."""
    for block_kind in ("tensor", "tuple"):
        for position in (1, -1):
            try:
                check_patch_hook_on_a_toy_block(ex, block_kind, position)
            except EnvironmentFault:
                raise
            except Diagnosis as error:
                diagnose(error.id, f"{name} may use your patch_hook, which is wrong: "
                         f"{error.message}")
            except Exception:  # noqa: BLE001 - NotImplementedError included: not this test's
                return


# ----------------------------------------------------------------------------- the map


def wrong_maps(model, ref):
    """``(diagnosis, map, what it is, the idea)`` of the maps that catalogued mistakes give,
    computed from the model only when needed."""
    clean_ids, corrupted_ids, good, bad = ref["args"]
    clean, corrupted, raw = ref["clean"], ref["corrupted"], ref["raw"]
    normalised = ("a map is normalised by the two unpatched runs' metrics, so that 0 is the "
                  "corrupted run (the patch restored nothing) and 1 the clean one")
    yield "patching-not-normalised", raw, "the raw patched metric", normalised
    yield "patching-not-normalised", raw - corrupted, "the patched metric minus the corrupted one", \
        normalised
    yield "patching-normalised-wrong-way", (raw - clean) / (corrupted - clean), \
        "normalised with 0 at the clean run and 1 at the corrupted one", normalised
    yield "patching-normalised-wrong-way", (raw - corrupted) / (corrupted - clean), \
        "divided by corrupted - clean", normalised
    swapped = patched_metrics(model, clean_ids, ref["corrupted_outputs"], good, bad)
    pasted = ("patching pastes one vector of the clean run into the corrupted run, and measures "
              "how much of the clean answer it brings back")
    yield "patching-clean-corrupted-swapped", (swapped - clean) / (corrupted - clean), \
        "the corrupted states patched into the clean run", pasted
    yield "patching-clean-corrupted-swapped", (swapped - corrupted) / (clean - corrupted), \
        "the corrupted states patched into the clean run", pasted
    shifted = patched_metrics(model, corrupted_ids, ref["clean_outputs"], good, bad, shift=1)
    yield "patching-hidden-states-off-by-one", (shifted - corrupted) / (clean - corrupted), \
        "block l patched with hidden_states[l], the output of block l - 1", (
            "block l's output is hidden state l + 1: hidden state 0 is the embeddings, which no "
            "block outputs")


def late_binding_map(model, ref):
    """``(n_layers, T)``: the map of runs with every block patched with the *last* block's clean
    outputs, what hooks made in a loop give when they read the loop's variables after it ended
    (computed here, with the test's own hooks)."""
    clean_ids, corrupted_ids, good, bad = ref["args"]
    last = ref["clean_outputs"][-1]
    raw = patched_metrics(model, corrupted_ids, [last] * len(ref["clean_outputs"]), good, bad)
    return (raw - ref["corrupted"]) / (ref["clean"] - ref["corrupted"])


def shape_of_wrong_map(model, effect, ref, name, where):
    """Fail naming the shape of a wrong map (``course/shared/maps.py``), when it has one."""
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
    for diagnosis, wrong, what, idea in wrong_maps(model, ref):
        if close(effect, wrong, atol=1e-3):
            diagnose(diagnosis, f"your {name} on {where} gives {what}: {idea}")
    shape_of_wrong_map(model, effect, ref, name, where)
    difference = (effect - expected).abs()
    layer, position = divmod(int(difference.argmax()), n_tokens)
    diagnose(f"{name.replace('_', '-')}-values-wrong", (
        f"your {name} on {where}: block {layer}, position {position} gives "
        f"{effect[layer, position]:.4f}, but writing the clean output of block {layer} at "
        f"position {position} into the corrupted run restores {expected[layer, position]:.4f} "
        f"(largest difference {difference.max():.3g})"))


# ----------------------------------------------------------------------------- hooks when a pass fails


class InjectedFailure(Exception):
    pass


class FailingPass:
    """A pre-hook for the final norm that counts the forward passes and raises in pass number
    ``at`` (never when ``at`` is None). It counts every pass, hooked or not: under the grader
    the code under test's hooks live on the other side of the boundary, where this hook cannot
    see them."""

    def __init__(self, model, at=None):
        self.model, self.at, self.count = model, at, 0

    def __call__(self, module, args):
        self.count += 1
        if self.count == self.at:
            raise InjectedFailure("the forward pass failed (injected by the test)")


def run_with(model, call, at):
    """``call()`` with forward pass number ``at`` failing: ``(the counter, whether it raised)``."""
    failing = FailingPass(model, at)
    handle = kata.final_norm(model).register_forward_pre_hook(failing)
    try:
        call()
    except InjectedFailure:
        return failing, True
    finally:
        handle.remove()
    return failing, False


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
    """What your fast_patching_effect ran on the tiny GPT-2: ``(counter, blocks, T)``."""
    model, _ = tiny_gpt2
    counter = WorkCounter(model, *tiny["args"][:2])
    try:
        run_map(ex, "fast_patching_effect", model, tiny["args"], "on the tiny GPT-2")
    finally:
        counter.remove()
    return counter, len(kata.blocks(model)), tiny["args"][0].shape[1]


# ----------------------------------------------------------------------------- the figure


def made_effect():
    generator = torch.Generator().manual_seed(14)
    return torch.rand(30, 6, generator=generator) * 1.4 - 0.3  # (n_layers, T), some negative


def check_heatmap(fig, expected, tokens, figures, where=""):
    """Your figure 14 of a map whose values are ``expected`` ``(n_layers, T)`` (numpy) and whose
    columns are ``tokens``: the map itself as a heatmap, a diverging colormap centred on 0, the
    tokens as column labels. Returns ``(ax, heatmap)``."""
    expect(isinstance(fig, Figure), "patching-plot-not-a-figure",
           f"plot_patching_effect should return a matplotlib Figure, got {type(fig).__name__}")
    figures.append(fig)
    n_layers, n_tokens = expected.shape
    axes = heatmap_axes(fig)
    expect(bool(axes), "patching-plot-no-image",
           "the figure has no heatmap: the map is drawn as an image, one cell per (block, "
           "position)" + where)
    ax, heatmap = axes[0], drawn_heatmaps(axes[0])[0]
    array = heatmap.values
    right = array.shape == (n_layers, n_tokens) and np.allclose(array, expected, atol=1e-5)
    if not right and array.shape == (n_tokens, n_layers) and (
            n_tokens != n_layers or np.allclose(array, expected.T, atol=1e-5)):
        diagnose("patching-plot-transposed",
                 f"the image has the positions as rows, shape {array.shape}: rows are blocks, "
                 f"columns positions, shape ({n_layers}, {n_tokens})" + where)
    expect(right, "patching-plot-wrong-data",
           f"the image should be the map itself, ({n_layers}, {n_tokens}), row l block l; got "
           f"an image of shape {array.shape}" + where)
    expect(heatmap.cmap in DIVERGING, "patching-plot-not-diverging", (
        f"the colormap {heatmap.cmap!r} is not diverging: a patch can restore (positive) or hurt "
        "(negative), so the colormap must be neutral at 0, such as 'RdBu_r' or 'coolwarm'" + where))
    expect(abs(float(heatmap.norm(0.0)) - 0.5) < 1e-6, "patching-plot-not-centred", (
        f"0 is drawn at {float(heatmap.norm(0.0)):.2f} of the colormap, not its middle: with colour "
        "limits symmetric about 0, 'no effect' is the neutral colour" + where))
    xlabels = [label.get_text().strip() for label in ax.get_xticklabels()]
    expect(xlabels == [t.strip() for t in tokens], "patching-plot-token-labels",
           f"label the columns with the tokens {list(tokens)}, got {xlabels}" + where)
    return ax, heatmap
