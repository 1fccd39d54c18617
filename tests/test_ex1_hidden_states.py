"""Exercise 1: extracting and inspecting hidden states (the post's demo 1 and figure 6).

Every expected value here comes straight from the model or from torch: the model's own
``output_hidden_states``, its embedding tables, a hook this file registers itself, ``torch.var``.
The code under test comes only from the ``ex`` fixture, so the same tests check a learner's
``exercises/`` and the reference ``solutions/``.

Speed: each model's forward pass for the reference, and each of the learner's functions on it,
runs once per module (the ``reference`` fixtures and the ``computed`` cache).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from transformers import BatchEncoding  # noqa: E402

import kata  # noqa: E402
from kata.diagnosis import diagnose  # noqa: E402
from kata.hooks import hook_snapshot  # noqa: E402
from tests.support import (  # noqa: E402
    CallOnlyTokenizer,
    ToyForwardError,
    ToyModel,
    check_close,
    check_tensor,
    close,
    computed_once,
    drawn_points,
    expect,
    figures,  # noqa: F401 - a fixture
    must_draw,
    once_per_implementation,
    raises_clearly,
    reference_hidden_states,
    reference_raw_last_block,
    shared_results,  # noqa: F401 - a fixture
)
from tests.secret import repeat_hint, secret, secret_check  # noqa: E402,F401 - secret: a fixture

# The sizes the kata documents for its models (kata/models.py), as model_summary must report them.
TINY_SUMMARY = {"n_layers": 4, "d_model": 64, "n_heads": 4, "vocab_size": 50257}
SMOLLM2_SUMMARY = {"n_layers": 30, "d_model": 576, "n_heads": 9, "vocab_size": 49152}
GPT2_SUMMARY = {"n_layers": 12, "d_model": 768, "n_heads": 12, "vocab_size": 50257}

FIGURE_TOKEN = 8  # " cute" in GPT-2's tokenization of the Penguin sentence: the post's figure 6


# ----------------------------------------------------------------------------- reference values


@dataclass
class Reference:
    """What the model itself says about one text, computed here without the code under test."""

    tokens: BatchEncoding  # the tokenizer's own output: input_ids, attention_mask, (1, T)
    hidden: torch.Tensor  # (n_layers + 1, T, d_model): model(..., output_hidden_states=True)
    raw_last: torch.Tensor  # (T, d_model): the last block's output, caught by a hook in this file
    token_embeddings: torch.Tensor  # (T, d_model): the token-embedding rows alone

    @property
    def n_tokens(self) -> int:
        return self.hidden.shape[1]


def compute_reference(model, tokenizer, text: str, model_name: str | None = None) -> Reference:
    """The reference for ``text``. With ``model_name``, its forward passes run once per process
    for that model and text (kept across the watcher's re-runs: ``computed_once``)."""
    tokens = tokenizer(text, return_tensors="pt")
    ids = tokens["input_ids"]

    def passes():
        with torch.no_grad():
            embeddings = model.get_input_embeddings()(ids[0].to(model.device))
        return {"hidden": reference_hidden_states(model, ids),
                "raw_last": reference_raw_last_block(model, ids),
                "token_embeddings": embeddings.float().cpu()}

    if model_name is None:
        return Reference(tokens=tokens, **passes())
    return Reference(tokens=tokens, **computed_once(("ex1-reference", model_name, text), passes))


@pytest.fixture(scope="module")
def tiny_reference(tiny_gpt2):
    return compute_reference(*tiny_gpt2, kata.PENGUIN_TEXT, "tiny-gpt2")


@pytest.fixture(scope="module")
def smollm2_reference(smollm2):
    return compute_reference(*smollm2, kata.PENGUIN_TEXT, "smollm2")


@pytest.fixture(scope="module")
def computed():
    """The code under test's results, kept for the module so each runs once.

    Every test still asks for the result it checks, so an unfinished stub fails every test.
    """
    return {}


def once(computed, ex, key, compute):
    key = (ex.__name__, *key)
    if key not in computed:
        computed[key] = compute()
    return computed[key]


def hidden_states_of(ex, computed, model_name, model, reference):
    return once(computed, ex, ("hidden", model_name),
                lambda: ex.get_hidden_states(model, reference.tokens))


def raw_output_of(ex, computed, model_name, model, reference):
    """``ex.raw_last_block_output`` on a real model; an exception from the learner's hook is named
    with the kind of output this model's blocks return in the installed transformers."""

    def call():
        try:
            return ex.raw_last_block_output(model, reference.tokens)
        except (NotImplementedError, AssertionError):
            raise
        except Exception as error:  # noqa: BLE001 - a bare library error is no verdict
            returns_tuple = last_block_returns_tuple(model, reference.tokens)
            kind = "a tuple (hidden, ...)" if returns_tuple else "a plain tensor (1, T, d_model)"
            diagnose("hook-assumes-tensor" if returns_tuple else "hook-assumes-tuple", (
                f"raw_last_block_output raised {type(error).__name__}: {error}, on {model_name}, "
                f"whose blocks return {kind} with this transformers version: take output[0] only "
                "when isinstance(output, tuple), use the output itself otherwise"))

    return once(computed, ex, ("raw", model_name), call)


def last_block_returns_tuple(model, tokens) -> bool:
    """Whether the model's last block returns a tuple (GPT-2 before transformers 5.3)."""
    seen = []
    handle = kata.blocks(model)[-1].register_forward_hook(
        lambda module, inputs, output: seen.append(isinstance(output, tuple)))
    try:
        with torch.no_grad():
            model(tokens["input_ids"].to(model.device))
    finally:
        handle.remove()
    return seen[0]


# ----------------------------------------------------------------------------- assertion helpers


def check_hidden_states_shape(hidden, n_layers: int, n_tokens: int, d_model: int) -> None:
    """The shape check with the message that names the likely mistake."""
    check_tensor(hidden, "get_hidden_states",
                 "stack the tuple of per-layer tensors into one with torch.stack")
    expected = (n_layers + 1, n_tokens, d_model)
    shape = tuple(hidden.shape)
    expect(shape != (n_layers + 1, 1, n_tokens, d_model), "batch-dimension-left-in", (
        f"get_hidden_states has shape {shape}, expected {expected}: the batch dimension (size 1) "
        f"is still there; drop it after stacking, e.g. with [:, 0]"
    ))
    expect(len(shape) == 3, "hidden-states-not-3d", (
        f"get_hidden_states has shape {shape}, expected {expected}: "
        f"(hidden states, tokens, d_model), one hidden state per layer"
    ))
    if shape[0] == n_layers:
        diagnose("embedding-layer-missing", f"expected {n_layers + 1} hidden states, got "
                 f"{shape[0]}: index 0 is the embedding layer, before any block")
    expect(shape[0] == n_layers + 1, "hidden-states-count-wrong", (
        f"expected {n_layers + 1} hidden states, got {shape[0]}: the embedding layer plus one per "
        f"block of the model's {n_layers}"))
    expect(shape == expected, "hidden-states-shape-wrong", (
        f"get_hidden_states has shape {shape}, expected {expected}: each hidden state should be "
        f"(T, d_model) = ({n_tokens}, {d_model}), one row per token"
    ))


def check_dtype_device_and_graph(hidden) -> None:
    expect(hidden.dtype == torch.float32, "hidden-states-not-float32",
           f"get_hidden_states returned {hidden.dtype}, expected torch.float32 (use .float())")
    expect(hidden.device.type == "cpu", "hidden-states-not-on-cpu",
           f"get_hidden_states returned a tensor on {hidden.device}, expected the CPU (use .cpu())")
    expect(hidden.requires_grad is False and hidden.grad_fn is None, "autograd-graph-kept", (
        "get_hidden_states returned a tensor that is still part of an autograd graph "
        f"(requires_grad={hidden.requires_grad}): run the model inside `with torch.no_grad():` "
        "so no graph is built (the model's weights require gradients)"
    ))


def check_float32_on_cpu(value, function: str) -> None:
    """The docstring's promise: a float32 tensor on the CPU (after the values are checked)."""
    expect(value.dtype == torch.float32, "output-not-float32",
           f"your {function} returned {value.dtype}, expected torch.float32 (use .float())")
    expect(value.device.type == "cpu", "output-not-on-cpu",
           f"your {function} returned a tensor on {value.device}, expected the CPU (use .cpu())")


def check_same_hidden_states(actual, expected, model_name: str) -> None:
    differing = [i for i in range(len(expected)) if not close(actual[i], expected[i], 1e-4)]
    if not differing:
        return
    worst = (actual - expected).abs().max().item()
    if differing == [len(expected) - 1]:
        id, hint = "final-norm-missing", (
            "only the last one differs: the model's last hidden state has the final norm "
            "applied (take the hidden states from the model's output, not from block hooks)")
    elif close(actual[1:], expected[:-1], 1e-4):
        id, hint = "hidden-states-shifted", (
            "they are shifted by one layer: index 0 must be the embedding layer")
    else:
        id, hint = "hidden-states-differ", (
            "use model(**tokens, output_hidden_states=True).hidden_states, in order")
    diagnose(id,
        f"get_hidden_states on {model_name} differs from the model's own output_hidden_states "
        f"at hidden states {differing} (largest difference {worst:.3g}): {hint}"
    )


# ----------------------------------------------------------------------------- model_summary


def check_summary(summary, expected: dict, model_name: str) -> None:
    expect(isinstance(summary, Mapping), "model-summary-not-a-dict",
           f"model_summary should return a dict, got {type(summary).__name__}")
    missing = sorted(set(expected) - set(summary))
    expect(not missing, "model-summary-key-missing",
           f"model_summary is missing the key(s) {missing}; it has {sorted(summary)}")
    for key, value in expected.items():
        got = summary[key]
        expect(isinstance(got, int) and not isinstance(got, bool), "model-summary-not-int",
               f"model_summary()[{key!r}] should be a plain int, got {type(got).__name__} {got!r}")
        expect(got == value, "model-summary-value-wrong",
               f"model_summary()[{key!r}] is {got} for {model_name}, expected {value}")


def test_model_summary_reads_gpt2_style_config(ex, tiny_gpt2):
    model, _ = tiny_gpt2
    check_summary(ex.model_summary(model), TINY_SUMMARY, "tiny-gpt2")
    # The documented sizes agree with the model's own tensors.
    assert len(kata.blocks(model)) == TINY_SUMMARY["n_layers"]
    assert model.get_input_embeddings().weight.shape == (50257, 64)


@pytest.mark.trained
def test_model_summary_reads_llama_style_config(ex, smollm2):
    model, _ = smollm2
    try:
        summary = ex.model_summary(model)
    except AttributeError as error:
        diagnose(
            "gpt2-config-names-on-llama",
            f"model_summary failed on SmolLM2's {type(model.config).__name__} ({error}): "
            "Llama-family configs name the sizes num_hidden_layers, hidden_size and "
            "num_attention_heads (GPT-2's config answers to those names as well)",
        )
    check_summary(summary, SMOLLM2_SUMMARY, "SmolLM2")
    assert len(kata.blocks(model)) == SMOLLM2_SUMMARY["n_layers"]
    assert model.get_input_embeddings().weight.shape == (49152, 576)


# ----------------------------------------------------------------------------- tokenize


def test_tokenize_gives_input_ids_and_attention_mask(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    try:  # the tokenizer object itself, called as the post does: it has no encode here
        tokens = ex.tokenize(CallOnlyTokenizer(tokenizer), kata.PENGUIN_TEXT)
    except AttributeError as error:
        if CallOnlyTokenizer.ENCODE_MESSAGE not in str(error):
            raise
        diagnose("tokenize-uses-encode", (
            "your tokenize calls tokenizer.encode, which gives a plain list of ids: call the "
            "tokenizer object itself, tokenizer(text, return_tensors='pt'), which gives the "
            "input_ids and the attention_mask together, already as (1, T) tensors (the post's "
            "figure 4). The tokenizer this test passes can only be called"))
    expected_ids = torch.tensor([tokenizer(kata.PENGUIN_TEXT)["input_ids"]])  # (1, T)
    expect(isinstance(tokens, Mapping), "tokenize-not-a-mapping", (
        f"tokenize should return a mapping with 'input_ids' and 'attention_mask', got "
        f"{type(tokens).__name__}: call the tokenizer object itself, "
        f"tokenizer(text, return_tensors='pt'), not tokenizer.encode"
    ))
    for key in ("input_ids", "attention_mask"):
        expect(key in tokens, "tokenize-key-missing", (
            f"tokenize's result has no {key!r} (it has {sorted(tokens)}): call the tokenizer "
            f"object itself, tokenizer(text, return_tensors='pt'), which gives both"
        ))
        value = tokens[key]
        expect(isinstance(value, torch.Tensor), "tokenize-not-tensors", (
            f"tokens[{key!r}] is a {type(value).__name__}, expected a torch.Tensor: "
            f"pass return_tensors='pt'"
        ))
        expect(tuple(value.shape) == tuple(expected_ids.shape), "tokenize-shape-wrong", (
            f"tokens[{key!r}] has shape {tuple(value.shape)}, expected {tuple(expected_ids.shape)}"
            f": (batch of 1 text, T tokens)"
        ))
        expect(value.dtype == torch.int64, "tokenize-not-int64",
               f"tokens[{key!r}] is {value.dtype}, expected int64")
    expect(torch.equal(tokens["input_ids"], expected_ids), "tokenize-ids-wrong", (
        f"tokens['input_ids'] is {tokens['input_ids'].tolist()}, but the tokenizer gives "
        f"{expected_ids.tolist()} for {kata.PENGUIN_TEXT!r}"
    ))
    expect(torch.all(tokens["attention_mask"] == 1), "attention-mask-not-ones",
           "a single text's attention mask is all ones")


def test_tokenize_rejects_an_empty_text(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    raises_clearly(
        ValueError, lambda: ex.tokenize(tokenizer, ""), "tokenize(tokenizer, '')",
        "An empty text has no tokens to run: raise ValueError('... empty text ...').",
        "empty-text-accepted",
    )


# ----------------------------------------------------------------------------- get_hidden_states


@pytest.mark.parametrize("model_name", ["tiny-gpt2", pytest.param("smollm2", marks=pytest.mark.trained)])
def test_hidden_states_shape_dtype_and_no_graph(ex, computed, request, model_name):
    fixture = {"tiny-gpt2": ("tiny_gpt2", "tiny_reference", 4, 64),
               "smollm2": ("smollm2", "smollm2_reference", 30, 576)}[model_name]
    (model, _), reference = request.getfixturevalue(fixture[0]), request.getfixturevalue(fixture[1])
    hidden = hidden_states_of(ex, computed, model_name, model, reference)
    check_hidden_states_shape(hidden, fixture[2], reference.n_tokens, fixture[3])
    check_dtype_device_and_graph(hidden)


def test_hidden_states_equal_the_models_own_on_tiny_gpt2(ex, computed, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    hidden = hidden_states_of(ex, computed, "tiny-gpt2", model, tiny_reference)
    check_hidden_states_shape(hidden, 4, tiny_reference.n_tokens, 64)
    check_same_hidden_states(hidden, tiny_reference.hidden, "tiny-gpt2")


@pytest.mark.trained
def test_hidden_states_equal_the_models_own_on_smollm2(ex, computed, smollm2, smollm2_reference):
    model, _ = smollm2
    hidden = hidden_states_of(ex, computed, "smollm2", model, smollm2_reference)
    check_hidden_states_shape(hidden, 30, smollm2_reference.n_tokens, 576)
    check_same_hidden_states(hidden, smollm2_reference.hidden, "SmolLM2")


def test_penguin_sentence_on_gpt2_gives_13_hidden_states_of_10_by_768(ex, gpt2):
    model, tokenizer = gpt2
    check_summary(ex.model_summary(model), GPT2_SUMMARY, "GPT-2")
    tokens = ex.tokenize(tokenizer, kata.PENGUIN_TEXT)
    hidden = ex.get_hidden_states(model, tokens)
    check_hidden_states_shape(hidden, 12, 10, 768)  # the post: 13 hidden states of 1x10x768
    check_dtype_device_and_graph(hidden)


@pytest.mark.parametrize("function", ["get_hidden_states", "embedding_layer_output",
                                      "raw_last_block_output"])
def test_a_text_longer_than_the_context_is_a_clear_value_error(ex, tiny_gpt2, function):
    model, tokenizer = tiny_gpt2
    tokens = tokenizer(" hello" * 200, return_tensors="pt")  # 200 tokens; tiny-gpt2 reads 128
    argument = tokens["input_ids"] if function == "embedding_layer_output" else tokens
    message = raises_clearly(
        ValueError, lambda: getattr(ex, function)(model, argument),
        f"{function} on a 200-token text (tiny-gpt2's context length is 128)",
        "Check the number of tokens against kata.context_length(model) before running the model "
        "(kata.one_sequence(input_ids, model) does).",
        "context-length-not-checked",
    )
    expect("128" in message, "context-length-not-in-message", (
        f"{function}'s ValueError should say how many tokens the model reads (128), "
        f"got: {message!r}"
    ))


# ----------------------------------------------------------------------------- embedding layer


def check_embedding_layer(output, reference: Reference, d_model: int, model_name: str) -> None:
    check_tensor(output, "embedding_layer_output", "look the token ids up in the tables")
    expected_shape = (reference.n_tokens, d_model)
    expect(tuple(output.shape) != (1, *expected_shape), "embedding-batch-dimension-left-in",
           f"embedding_layer_output has shape {tuple(output.shape)}, expected {expected_shape}: "
           "drop the batch dimension")
    expect(tuple(output.shape) == expected_shape, "embedding-shape-wrong",
           f"embedding_layer_output has shape {tuple(output.shape)}, expected {expected_shape}")
    if close(output, reference.hidden[0], atol=1e-4):
        return
    if close(output, reference.token_embeddings, atol=1e-4) and model_name == "tiny-gpt2":
        id, hint = "position-embeddings-missing", (
            "you returned the token embeddings only: GPT-2 adds learned position embeddings, "
            "the rows 0..T-1 of model.transformer.wpe, before block 0")
    else:
        id, hint = "embedding-output-wrong", (
            "hidden state 0 is the token embeddings plus, for GPT-2, the position embeddings "
            "of positions 0..T-1")
    diagnose(id,
        f"embedding_layer_output on {model_name} differs from the model's hidden state 0 "
        f"(largest difference {(output - reference.hidden[0]).abs().max().item():.3g}): {hint}"
    )


def test_embedding_layer_output_is_hidden_state_0_on_tiny_gpt2(ex, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    output = ex.embedding_layer_output(model, tiny_reference.tokens["input_ids"])
    check_embedding_layer(output, tiny_reference, 64, "tiny-gpt2")
    check_float32_on_cpu(output, "embedding_layer_output")


@pytest.mark.trained
def test_embedding_layer_output_is_hidden_state_0_on_smollm2(ex, smollm2, smollm2_reference):
    model, _ = smollm2
    try:
        output = ex.embedding_layer_output(model, smollm2_reference.tokens["input_ids"])
    except AttributeError as error:
        diagnose(
            "position-embeddings-assumed",
            f"embedding_layer_output failed on SmolLM2 ({error}): Llama-family models have no "
            "position-embedding table (their positions are rotary, applied inside attention); "
            "add position embeddings only where the model has them (model.transformer.wpe)",
        )
    check_embedding_layer(output, smollm2_reference, 576, "SmolLM2")


# ----------------------------------------------------------------------------- raw last block


def check_raw_output(raw, reference: Reference, model, model_name: str) -> None:
    expected_shape = tuple(reference.raw_last.shape)
    n_tokens, d_model = expected_shape
    check_tensor(raw, "raw_last_block_output",
                 "if the block returned a tuple, its first element is the hidden states")
    shape = tuple(raw.shape)
    if shape == (d_model,):
        diagnose(
            "hook-assumes-tuple",
            f"raw_last_block_output has shape {shape}, expected {expected_shape}: the block "
            "returned a plain tensor (1, T, d_model), as blocks do in newer transformers, and "
            "output[0] of a tensor already drops the batch dimension; take output[0] only when "
            "the output is a tuple"
        )
    expect(shape == expected_shape, "raw-output-shape-wrong",
           f"raw_last_block_output has shape {shape}, expected {expected_shape}"
           + (": drop the batch dimension" if shape == (1, n_tokens, d_model) else ""))
    last = reference.hidden[-1]
    expect(not close(raw, last, atol=1e-4), "raw-output-is-final-hidden-state", (
        f"raw_last_block_output on {model_name} equals hidden_states[-1], which already went "
        "through the final norm: capture the last block's own output with a forward hook on "
        "kata.blocks(model)[-1]"
    ))
    check_close(raw, reference.raw_last, f"raw_last_block_output on {model_name}",
                hint="it should be what kata.blocks(model)[-1] outputs, before the final norm",
                atol=1e-4, rtol=1e-4, diagnosis="raw-output-wrong")
    with torch.no_grad():
        normed = kata.final_norm(model)(raw.to(model.device)).float().cpu()
    check_close(normed, last, f"final_norm(raw_last_block_output) on {model_name}",
                hint="the final norm of the raw last block output should be hidden_states[-1]",
                atol=1e-4, rtol=1e-4, diagnosis="raw-output-not-before-final-norm")


def test_raw_last_block_output_is_the_last_hidden_state_before_the_final_norm(
    ex, computed, tiny_gpt2, tiny_reference
):
    model, _ = tiny_gpt2
    before = hook_snapshot(model)
    raw = raw_output_of(ex, computed, "tiny-gpt2", model, tiny_reference)
    expect(hook_snapshot(model) == before, "hook-left-on-model", (
        "raw_last_block_output left a forward hook on the model: keep the handle that "
        "register_forward_hook returns and call handle.remove() in a finally block"
    ))
    check_raw_output(raw, tiny_reference, model, "tiny-gpt2")
    check_float32_on_cpu(raw, "raw_last_block_output")


@pytest.mark.trained
def test_raw_last_block_output_on_smollm2(ex, computed, smollm2, smollm2_reference):
    model, _ = smollm2
    raw = raw_output_of(ex, computed, "smollm2", model, smollm2_reference)
    check_raw_output(raw, smollm2_reference, model, "SmolLM2")


def toy_tokens() -> BatchEncoding:
    ids = torch.tensor([[3, 1, 4, 1, 5, 9]])
    return BatchEncoding({"input_ids": ids, "attention_mask": torch.ones_like(ids)})


@pytest.mark.parametrize("returns_tuple", [True, False], ids=["tuple-blocks", "tensor-blocks"])
def test_raw_last_block_output_handles_tuple_and_tensor_blocks(ex, returns_tuple):
    toy, tokens = ToyModel(returns_tuple), toy_tokens()
    kind = ("a tuple (hidden, ...), as GPT-2's blocks do before transformers 5.3" if returns_tuple
            else "a plain tensor (1, T, d_model), as GPT-2's blocks do from transformers 5.3 on")
    with torch.no_grad():
        expected = toy(**tokens).last_block_output[0]  # (T, 4)
    hint = ("take output[0] only when isinstance(output, tuple), use the output itself otherwise, "
            "then drop the batch dimension")
    before = hook_snapshot(toy)
    try:
        raw = ex.raw_last_block_output(toy, tokens)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        diagnose("hook-assumes-tensor" if returns_tuple else "hook-assumes-tuple",
                 f"raw_last_block_output failed on a model whose blocks return {kind}: "
                 f"{type(error).__name__}: {error}. {hint}")
    expect(hook_snapshot(toy) == before, "hook-left-on-model", (
        "raw_last_block_output left a forward hook on the model: call handle.remove() in a "
        "finally block"
    ))
    check_tensor(raw, "raw_last_block_output", hint)
    expect(tuple(raw.shape) == tuple(expected.shape),
           "hook-assumes-tensor" if returns_tuple else "hook-assumes-tuple", (
               f"on a model whose blocks return {kind}, raw_last_block_output has shape "
               f"{tuple(raw.shape)}, expected {tuple(expected.shape)}: {hint}"))
    check_close(raw, expected, f"raw_last_block_output on a model whose blocks return {kind}",
                hint="it should be the last block's output as the hook receives it, before the "
                "final norm", diagnosis="raw-output-wrong")


def test_raw_last_block_output_removes_its_hook_when_the_forward_pass_fails(ex):
    toy = ToyModel(returns_tuple=False, fails=True)
    before = hook_snapshot(toy)
    with pytest.raises(ToyForwardError):
        ex.raw_last_block_output(toy, toy_tokens())
    expect(hook_snapshot(toy) == before, "hook-not-removed-on-error", (
        "raw_last_block_output left its hook on the last block when the forward pass raised: "
        "register the hook, then run the model inside try: ... finally: handle.remove()"
    ))


# ----------------------------------------------------------------------------- activation_variance


def check_not_population_variance(is_shown, hidden, token_index: int, what: str,
                                  then: str = "") -> None:
    """Name the catalogued mistake wherever a variance shows up (the function's value, the figure's
    squares): ``is_shown(values)`` says whether ``what`` shows these per-layer values, and here
    they are the population variance, which divides by d_model instead of d_model - 1."""
    d_model = hidden.shape[-1]
    population = torch.var(hidden[:, token_index, :], dim=-1, correction=0)
    expect(not is_shown(population), "population-variance", (
        f"{what} is the population variance (dividing by d_model = {d_model}); this exercise "
        "uses torch.var's default, the unbiased sample variance, which divides by "
        f"d_model - 1 = {d_model - 1}{then}"
    ))


def test_activation_variance_is_torch_var_over_d_model(ex, tiny_reference):
    hidden = tiny_reference.hidden  # (5, T, 64)
    n_hidden, _, d_model = hidden.shape
    for token_index in (0, FIGURE_TOKEN, -1):
        variance = ex.activation_variance(hidden, token_index)
        expected = torch.var(hidden[:, token_index, :], dim=-1, correction=1)  # unbiased
        check_tensor(variance, "activation_variance", "use torch.var")
        shape = tuple(variance.shape)
        expect(shape != (d_model,), "variance-over-layers", (
            f"activation_variance has shape {shape}, expected ({n_hidden},): that is one value "
            f"per dimension, a variance over the layers; take it over the {d_model} activations "
            "of each layer instead (dim=-1), not over the layers"
        ))
        expect(shape == (n_hidden,), "variance-shape-wrong", (
            f"activation_variance has shape {shape}, expected ({n_hidden},): one variance per "
            f"layer, over the d_model activations of token {token_index}"
        ))
        check_not_population_variance(
            lambda population: close(variance, population, atol=1e-8, rtol=1e-6),
            hidden, token_index, "activation_variance")
        check_close(variance, expected, f"activation_variance(hidden_states, {token_index})",
                    hint="compare with torch.var(hidden_states[:, token_index, :], dim=-1) "
                    "(unbiased, dividing by d_model - 1)", atol=1e-8, rtol=1e-5,
                    diagnosis="variance-wrong")


@pytest.mark.parametrize("offset", [2, None], ids=["past-the-end", "too-negative"])
def test_activation_variance_rejects_a_token_index_out_of_range(ex, tiny_reference, offset):
    n_tokens = tiny_reference.n_tokens
    token_index = n_tokens + offset if offset is not None else -n_tokens - 1
    message = raises_clearly(
        IndexError, lambda: ex.activation_variance(tiny_reference.hidden, token_index),
        f"activation_variance with token_index={token_index} for a {n_tokens}-token text",
        "Check token_index before indexing (kata.token_index(token_index, T) does).",
        "token-index-not-checked",
    )
    expect("out of bounds for dimension" not in message, "token-index-not-checked", (
        f"activation_variance let torch's own IndexError through ({message!r}), which names no "
        f"token and no valid range: check token_index yourself first (kata.token_index does), "
        f"and say the range -{n_tokens}..{n_tokens - 1}"))
    expect("token" in message.lower() and str(n_tokens - 1) in message,
           "token-index-message-without-range", (
               f"activation_variance raised IndexError({message!r}) for token_index="
               f"{token_index}, but the message should name the problem and the valid range "
               f"(-{n_tokens}..{n_tokens - 1}), e.g. 'token_index {token_index} is out of range "
               f"for {n_tokens} tokens (-{n_tokens}..{n_tokens - 1})': check token_index yourself "
               "before indexing, or use kata.token_index"))


@pytest.mark.trained
def test_variance_of_a_mid_sentence_token_rises_into_the_middle_layers_on_smollm2(
    ex, smollm2_reference
):
    hidden = smollm2_reference.hidden  # (31, T, 576)
    token_index = smollm2_reference.n_tokens // 2
    variance = ex.activation_variance(hidden, token_index)
    check_tensor(variance, "activation_variance", "use torch.var")
    expect(tuple(variance.shape) == (31,), "variance-shape-wrong",
           f"activation_variance has shape {tuple(variance.shape)}, expected (31,): one per layer")
    middle = (len(variance) - 1) // 2
    values = ", ".join(f"{v:.3g}" for v in variance[: middle + 1].tolist())
    first = variance[0]
    rises = variance[middle] > 100 * first and torch.all(variance[1 : middle + 1] > first)
    expect(rises, "variance-profile-wrong", (
        f"on SmolLM2 the variance of token {token_index} should grow from the embedding layer to "
        f"the middle layers (the post's figure 6); layers 0..{middle} gave {values}"
    ))


# ----------------------------------------------------------------------------- the figure


def draw(ex, reference: Reference, figures, token_index=FIGURE_TOKEN, label=" cute"):
    fig = ex.plot_token_activations(reference.hidden, token_index, label)
    if isinstance(fig, Figure):
        figures.append(fig)
    expect(isinstance(fig, Figure), "figure-not-returned", (
        f"plot_token_activations should return a matplotlib Figure, got {type(fig).__name__} "
        "(fig, axes = plt.subplots(1, 2); ...; return fig)"
    ))
    expect(len(fig.axes) == 2, "figure-panel-count-wrong",
           f"the figure should have 2 panels (axes), got {len(fig.axes)}: plt.subplots(1, 2)")
    return fig, sorted(fig.axes, key=lambda ax: ax.get_position().x0)


def figure_6(ex, reference: Reference):
    """``draw(ex, reference)``, drawn once per module under test for the tests that only read
    the figure (each would otherwise build the same figure again)."""

    def compute():
        made = []
        try:
            return draw(ex, reference, made)
        except Exception:
            for fig in made:
                plt.close(fig)
            raise

    return once_per_implementation(ex, "ex1-figure-6", compute)


def layer_labels(n_hidden: int) -> list[str]:
    return ["Emb"] + [f"L{i}" for i in range(n_hidden - 1)]


def test_figure_has_two_labelled_panels_with_layer_ticks_and_a_title(ex, tiny_reference):
    fig, axes = figure_6(ex, tiny_reference)
    n_hidden = tiny_reference.hidden.shape[0]
    for side, ax in zip(("left", "right"), axes):
        expect(ax.get_xlabel() and ax.get_ylabel(), "figure-axis-labels-missing",
               f"label both axes of the {side} panel (x: {ax.get_xlabel()!r}, "
               f"y: {ax.get_ylabel()!r})")
        ticks = [float(t) for t in ax.get_xticks()]
        labels = [t.get_text() for t in ax.get_xticklabels()]
        expect(ticks == list(range(n_hidden)) and labels == layer_labels(n_hidden),
               "figure-layer-ticks-wrong", (
            f"the {side} panel's x ticks should be the layers 0..{n_hidden - 1} labelled "
            f"{layer_labels(n_hidden)} (index 0 is the embedding layer 'Emb', then the blocks "
            f"from L0), got ticks {ticks} "
            f"labelled {labels}"
        ))
    suptitle = fig.get_suptitle() if hasattr(fig, "get_suptitle") else ""
    titles = " ".join([suptitle] + [ax.get_title() for ax in axes])
    expect("cute" in titles, "figure-title-without-token",
           f"the title should name the token (' cute' here), got {titles.strip()!r}")


def test_figure_left_panel_dots_are_the_tokens_activations_per_layer(ex, tiny_reference):
    _, (left, _) = figure_6(ex, tiny_reference)
    hidden = tiny_reference.hidden
    n_hidden, _, d_model = hidden.shape
    dots = drawn_points(left, marked_only=True)
    expect(dots, "figure-dots-missing",
           "the left panel has no dots: draw them with ax.scatter or ax.plot(x, y, 'o')")
    xy = torch.cat([torch.as_tensor(d) for d in dots])  # (number of dots, 2)
    expect(len(xy) == n_hidden * d_model, "figure-dot-count-wrong", (
        f"the left panel has {len(xy)} dots, expected {n_hidden} layers x {d_model} activations "
        f"= {n_hidden * d_model}: one dot per activation of the token at every layer"
    ))
    nearest_layer = xy[:, 0].round()
    for layer, name in enumerate(layer_labels(n_hidden)):
        at_layer = nearest_layer == layer
        expect(at_layer.sum() == d_model, "figure-dots-at-wrong-layer", (
            f"layer {layer} ({name!r}) should have {d_model} dots near x = {layer}, found "
            f"{int(at_layer.sum())}: put layer i's dots at x = i plus a jitter smaller than 0.5"
        ))
        y = xy[at_layer, 1].sort().values
        expected = hidden[layer, FIGURE_TOKEN, :].double().sort().values
        expect(torch.allclose(y, expected, rtol=1e-5, atol=1e-6), "figure-dots-not-activations", (
            f"the dots at layer {name!r} are not token {FIGURE_TOKEN}'s activations at that layer: "
            "plot hidden_states[layer, token_index, :] at each layer"
        ))
        spread = xy[at_layer, 0] - layer
        expect(spread.std() > 0, "figure-dots-without-jitter", (
            f"all dots of layer {name!r} sit at x = {layer}: spread them sideways with a small "
            "random jitter (smaller than 0.5), as in figure 6"
        ))


def test_figure_right_panel_shows_the_variance_per_layer_as_squares(ex, tiny_reference):
    _, (_, right) = figure_6(ex, tiny_reference)
    hidden = tiny_reference.hidden
    layers = list(range(hidden.shape[0]))
    expected = torch.var(hidden[:, FIGURE_TOKEN, :], dim=-1).double()
    points = drawn_points(right, marked_only=True)  # scatter dots and line markers alike
    xy = np.concatenate(points) if points else np.zeros((0, 2))
    found = [(round(float(x), 3), round(float(y), 6)) for x, y in xy[:40]]

    def shown(layer, value):
        return bool(np.any(np.isclose(xy[:, 0], layer, atol=1e-6)
                           & np.isclose(xy[:, 1], value, rtol=1e-4, atol=1e-8)))

    missing = [layer for layer, value in zip(layers, expected.tolist()) if not shown(layer, value)]
    check_not_population_variance(
        lambda population: bool(missing) and all(map(shown, layers, population.tolist())),
        hidden, FIGURE_TOKEN, "what the right panel's squares show")
    expect(not missing, "figure-variance-missing", (
        f"the right panel should show token {FIGURE_TOKEN}'s activation variance at layers "
        f"{layers} (x = layer index), one marker each: expected y = "
        f"{[round(v, 6) for v in expected.tolist()]}; layers {missing} have no marker at their "
        f"variance. Points found (x, y): {found}"
    ))
    markers = {line.get_marker() for line in right.lines
               if any(shown(x, y) for x, y in zip(np.asarray(line.get_xdata(), dtype=float),
                                                  np.asarray(line.get_ydata(), dtype=float)))}
    expect(markers <= {"s"}, "figure-variance-not-squares", (
        f"draw the variances with square markers, e.g. ax.plot(layers, variance, 's'); "
        f"the marker is {sorted(map(str, markers))}"
    ))


def test_figure_saves_to_png_without_a_display(ex, tiny_reference, figures, tmp_path):
    fig, _ = draw(ex, tiny_reference, figures)
    path = tmp_path / "figure6.png"
    must_draw(fig, lambda: fig.savefig(path))
    expect(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "figure-not-png",
           "the saved figure is not a PNG file")


def test_figure_rejects_a_token_index_out_of_range(ex, tiny_reference):
    n_tokens = tiny_reference.n_tokens
    open_before = plt.get_fignums()
    raises_clearly(
        IndexError,
        lambda: ex.plot_token_activations(tiny_reference.hidden, n_tokens, "?"),
        f"plot_token_activations with token_index={n_tokens} for a {n_tokens}-token text",
        "Check token_index before drawing (activation_variance already does).",
        "figure-token-index-not-checked",
    )
    for number in set(plt.get_fignums()) - set(open_before):
        plt.close(number)


# ----------------------------------------------------------------------------- secret checks
# Every public function again, on inputs drawn from a seed only the grader knows (tests/secret.py):
# a text from a pool, models and tensors of random sizes. Their points count only if these pass.


@secret_check("model_summary")
def test_secret_model_summary_of_a_model_of_random_sizes(ex, secret):
    model = secret.gpt2(layers=(1, 3))
    c = model.config
    check_summary(ex.model_summary(model), {"n_layers": c.n_layer, "d_model": c.n_embd,
                                            "n_heads": c.n_head, "vocab_size": c.vocab_size},
                  "a GPT-2 of random sizes")


@secret_check("tokenize")
def test_secret_tokenize_of_a_secret_text(ex, tiny_gpt2, secret):
    _, tokenizer = tiny_gpt2
    text = secret.text()
    tokens = ex.tokenize(CallOnlyTokenizer(tokenizer), text)
    expected = torch.tensor([tokenizer(text)["input_ids"]])
    expect(isinstance(tokens, Mapping) and "input_ids" in tokens and "attention_mask" in tokens,
           "tokenize-key-missing", "tokenize should return the tokenizer's input_ids and "
           "attention_mask" + repeat_hint())
    expect(isinstance(tokens["input_ids"], torch.Tensor)
           and torch.equal(tokens["input_ids"].cpu(), expected), "tokenize-ids-wrong",
           f"tokenize({text!r}) gave input_ids {tokens['input_ids']!r}, but the tokenizer gives "
           f"{expected.tolist()}" + repeat_hint())
    expect(torch.equal(torch.as_tensor(tokens["attention_mask"]), torch.ones_like(expected)),
           "attention-mask-not-ones", "a single text's attention mask is all ones")


@secret_check("get_hidden_states", "embedding_layer_output", "raw_last_block_output")
def test_secret_hidden_states_of_a_secret_text(ex, tiny_gpt2, secret):
    model, tokenizer = tiny_gpt2
    reference = compute_reference(model, tokenizer, secret.text())
    ids = reference.tokens["input_ids"]
    hidden = ex.get_hidden_states(model, reference.tokens)
    check_hidden_states_shape(hidden, 4, ids.shape[1], 64)
    check_same_hidden_states(hidden, reference.hidden, "tiny-gpt2")
    check_embedding_layer(ex.embedding_layer_output(model, ids), reference, 64, "tiny-gpt2")
    check_raw_output(ex.raw_last_block_output(model, reference.tokens), reference, model,
                     "tiny-gpt2")


@secret_check("activation_variance")
def test_secret_activation_variance_of_random_hidden_states(ex, secret):
    hidden = secret.hidden_states()
    token_index = secret.integer(-hidden.shape[1], hidden.shape[1] - 1)
    variance = ex.activation_variance(hidden, token_index)
    check_tensor(variance, "activation_variance", "use torch.var")
    check_not_population_variance(
        lambda population: variance.shape == population.shape
        and close(variance, population, atol=1e-8, rtol=1e-6),
        hidden, token_index, "activation_variance", repeat_hint())
    check_close(variance, torch.var(hidden[:, token_index, :], dim=-1),
                f"activation_variance of a {tuple(hidden.shape)} stack, token {token_index}",
                hint="torch.var over the d_model activations of each layer" + repeat_hint(),
                atol=1e-6, rtol=1e-5, diagnosis="variance-wrong")


@secret_check("plot_token_activations")
def test_secret_figure_draws_the_secret_tokens_activations_and_variance(ex, secret, figures):
    hidden = secret.hidden_states()
    token_index = secret.integer(0, hidden.shape[1] - 1)
    fig = ex.plot_token_activations(hidden, token_index, "token")
    expect(isinstance(fig, Figure) and len(fig.axes) == 2, "figure-panel-count-wrong",
           "plot_token_activations should return a Figure with 2 panels")
    figures.append(fig)
    left, right = sorted(fig.axes, key=lambda ax: ax.get_position().x0)
    dots = drawn_points(left, marked_only=True)
    xy = torch.cat([torch.as_tensor(d) for d in dots]) if dots else torch.zeros(0, 2)
    for layer in range(hidden.shape[0]):
        y = xy[xy[:, 0].round() == layer, 1].sort().values
        expected = hidden[layer, token_index, :].double().sort().values
        expect(y.shape == expected.shape and torch.allclose(y, expected, rtol=1e-5, atol=1e-6),
               "figure-dots-not-activations",
               f"the left panel's dots at layer {layer} are not token {token_index}'s activations "
               "there: plot hidden_states[layer, token_index, :] at each layer" + repeat_hint())
    squares = np.concatenate(drawn_points(right, marked_only=True) or [np.zeros((0, 2))])

    def shown(layer, value):
        return bool(np.any(np.isclose(squares[:, 0], layer, atol=1e-6)
                           & np.isclose(squares[:, 1], value, rtol=1e-4, atol=1e-8)))

    variance = torch.var(hidden[:, token_index, :], dim=-1).tolist()
    layers = range(hidden.shape[0])
    check_not_population_variance(
        lambda population: not all(map(shown, layers, variance))
        and all(map(shown, layers, population.tolist())),
        hidden, token_index, "what the right panel's squares show", repeat_hint())
    for layer, value in enumerate(variance):
        expect(shown(layer, value), "figure-variance-missing",
               f"the right panel has no marker at layer {layer}'s variance {value:.4g} of token "
               f"{token_index}" + repeat_hint())
