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
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch import nn  # noqa: E402
from transformers import BatchEncoding  # noqa: E402

import kata  # noqa: E402
from kata.hooks import hook_snapshot  # noqa: E402
from tests.helpers import check_close, check_tensor  # noqa: E402

# The sizes the kata documents for its models (kata/models.py), as model_summary must report them.
TINY_SUMMARY = {"n_layers": 4, "d_model": 64, "n_heads": 4, "vocab_size": 50257}
SMOLLM2_SUMMARY = {"n_layers": 30, "d_model": 576, "n_heads": 9, "vocab_size": 49152}
GPT2_SUMMARY = {"n_layers": 12, "d_model": 768, "n_heads": 12, "vocab_size": 50257}

FIGURE_TOKEN = 6  # " Penguins" in GPT-2's tokenization of the Penguin sentence


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


def compute_reference(model, tokenizer, text: str) -> Reference:
    tokens = tokenizer(text, return_tensors="pt")
    on_device = {name: value.to(model.device) for name, value in tokens.items()}
    caught = []

    def catch(module, inputs, output):
        caught.append(output[0] if isinstance(output, tuple) else output)

    handle = kata.blocks(model)[-1].register_forward_hook(catch)
    try:
        with torch.no_grad():
            outputs = model(**on_device, output_hidden_states=True)
    finally:
        handle.remove()
    with torch.no_grad():
        token_embeddings = model.get_input_embeddings()(on_device["input_ids"][0])
    return Reference(
        tokens=tokens,
        hidden=torch.stack(outputs.hidden_states)[:, 0].float().cpu(),
        raw_last=caught[0][0].float().cpu(),
        token_embeddings=token_embeddings.float().cpu(),
    )


@pytest.fixture(scope="module")
def tiny_reference(tiny_gpt2):
    return compute_reference(*tiny_gpt2, kata.PENGUIN_TEXT)


@pytest.fixture(scope="module")
def smollm2_reference(smollm2):
    return compute_reference(*smollm2, kata.PENGUIN_TEXT)


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
    return once(computed, ex, ("raw", model_name),
                lambda: ex.raw_last_block_output(model, reference.tokens))


# ----------------------------------------------------------------------------- assertion helpers


def close(a, b, atol=1e-4, rtol=1e-4) -> bool:
    a, b = torch.as_tensor(a).detach().float().cpu(), torch.as_tensor(b).detach().float().cpu()
    return a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=rtol)


def check_hidden_states_shape(hidden, n_layers: int, n_tokens: int, d_model: int) -> None:
    """The shape check with the message that names the likely mistake."""
    check_tensor(hidden, "get_hidden_states",
                    "stack the tuple of per-layer tensors into one with torch.stack")
    expected = (n_layers + 1, n_tokens, d_model)
    shape = tuple(hidden.shape)
    assert shape != (n_layers + 1, 1, n_tokens, d_model), (
        f"get_hidden_states has shape {shape}, expected {expected}: the batch dimension (size 1) "
        f"is still there; drop it after stacking, e.g. with [:, 0]"
    )
    assert len(shape) == 3, (
        f"get_hidden_states has shape {shape}, expected {expected}: "
        f"(hidden states, tokens, d_model), one hidden state per layer"
    )
    if shape[0] != n_layers + 1:
        why = (
            "index 0 is the embedding layer, before any block"
            if shape[0] == n_layers
            else f"the embedding layer plus one per block of the model's {n_layers}"
        )
        raise AssertionError(f"expected {n_layers + 1} hidden states, got {shape[0]}: {why}")
    assert shape == expected, (
        f"get_hidden_states has shape {shape}, expected {expected}: each hidden state should be "
        f"(T, d_model) = ({n_tokens}, {d_model}), one row per token"
    )


def check_dtype_device_and_graph(hidden) -> None:
    assert hidden.dtype == torch.float32, (
        f"get_hidden_states returned {hidden.dtype}, expected torch.float32 (use .float())"
    )
    assert hidden.device.type == "cpu", (
        f"get_hidden_states returned a tensor on {hidden.device}, expected the CPU (use .cpu())"
    )
    assert hidden.requires_grad is False and hidden.grad_fn is None, (
        "get_hidden_states returned a tensor that is still part of an autograd graph "
        f"(requires_grad={hidden.requires_grad}): run the model inside `with torch.no_grad():` "
        "so no graph is built (the model's weights require gradients)"
    )


def check_same_hidden_states(actual, expected, model_name: str) -> None:
    differing = [i for i in range(len(expected)) if not close(actual[i], expected[i])]
    if not differing:
        return
    worst = (actual - expected).abs().max().item()
    if differing == [len(expected) - 1]:
        hint = ("only the last one differs: the model's last hidden state has the final norm "
                "applied (take the hidden states from the model's output, not from block hooks)")
    elif close(actual[1:], expected[:-1]):
        hint = "they are shifted by one layer: index 0 must be the embedding layer"
    else:
        hint = "use model(**tokens, output_hidden_states=True).hidden_states, in order"
    raise AssertionError(
        f"get_hidden_states on {model_name} differs from the model's own output_hidden_states "
        f"at hidden states {differing} (largest difference {worst:.3g}): {hint}"
    )


def check_raises_clearly(error_type, call, situation: str, hint: str) -> str:
    """Run ``call``; it must raise ``error_type`` (not some deeper error). Returns the message."""
    try:
        call()
    except NotImplementedError:
        raise
    except error_type as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - any other error is the learner's bug to read about
        pytest.fail(
            f"{situation}: expected a {error_type.__name__} with a clear message, got "
            f"{type(error).__name__}: {error}. {hint}",
            pytrace=False,
        )
    pytest.fail(f"{situation}: expected a {error_type.__name__}, but nothing was raised. {hint}",
                pytrace=False)


# ----------------------------------------------------------------------------- model_summary


def check_summary(summary, expected: dict, model_name: str) -> None:
    assert isinstance(summary, Mapping), (
        f"model_summary should return a dict, got {type(summary).__name__}"
    )
    missing = sorted(set(expected) - set(summary))
    assert not missing, f"model_summary is missing the key(s) {missing}; it has {sorted(summary)}"
    for key, value in expected.items():
        got = summary[key]
        assert isinstance(got, int) and not isinstance(got, bool), (
            f"model_summary()[{key!r}] should be a plain int, got {type(got).__name__} {got!r}"
        )
        assert got == value, f"model_summary()[{key!r}] is {got} for {model_name}, expected {value}"


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
        pytest.fail(
            f"model_summary failed on SmolLM2's {type(model.config).__name__} ({error}): "
            "Llama-family configs name the sizes num_hidden_layers, hidden_size and "
            "num_attention_heads (GPT-2's config answers to those names as well)",
            pytrace=False,
        )
    check_summary(summary, SMOLLM2_SUMMARY, "SmolLM2")
    assert len(kata.blocks(model)) == SMOLLM2_SUMMARY["n_layers"]
    assert model.get_input_embeddings().weight.shape == (49152, 576)


# ----------------------------------------------------------------------------- tokenize


def test_tokenize_gives_input_ids_and_attention_mask(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    tokens = ex.tokenize(tokenizer, kata.PENGUIN_TEXT)
    expected_ids = torch.tensor([tokenizer(kata.PENGUIN_TEXT)["input_ids"]])  # (1, T)
    assert isinstance(tokens, Mapping), (
        f"tokenize should return a mapping with 'input_ids' and 'attention_mask', got "
        f"{type(tokens).__name__}: call the tokenizer object itself, "
        f"tokenizer(text, return_tensors='pt'), not tokenizer.encode"
    )
    for key in ("input_ids", "attention_mask"):
        assert key in tokens, (
            f"tokenize's result has no {key!r} (it has {sorted(tokens)}): call the tokenizer "
            f"object itself, tokenizer(text, return_tensors='pt'), which gives both"
        )
        value = tokens[key]
        assert isinstance(value, torch.Tensor), (
            f"tokens[{key!r}] is a {type(value).__name__}, expected a torch.Tensor: "
            f"pass return_tensors='pt'"
        )
        assert tuple(value.shape) == tuple(expected_ids.shape), (
            f"tokens[{key!r}] has shape {tuple(value.shape)}, expected {tuple(expected_ids.shape)}"
            f": (batch of 1 text, T tokens)"
        )
        assert value.dtype == torch.int64, f"tokens[{key!r}] is {value.dtype}, expected int64"
    assert torch.equal(tokens["input_ids"], expected_ids), (
        f"tokens['input_ids'] is {tokens['input_ids'].tolist()}, but the tokenizer gives "
        f"{expected_ids.tolist()} for {kata.PENGUIN_TEXT!r}"
    )
    assert torch.all(tokens["attention_mask"] == 1), "a single text's attention mask is all ones"


def test_tokenize_rejects_an_empty_text(ex, tiny_gpt2):
    _, tokenizer = tiny_gpt2
    check_raises_clearly(
        ValueError, lambda: ex.tokenize(tokenizer, ""), "tokenize(tokenizer, '')",
        "An empty text has no tokens to run: raise ValueError('... empty text ...').",
    )


# ----------------------------------------------------------------------------- get_hidden_states


def test_hidden_states_shape_dtype_and_no_graph_on_tiny_gpt2(
    ex, computed, tiny_gpt2, tiny_reference
):
    model, _ = tiny_gpt2
    hidden = hidden_states_of(ex, computed, "tiny-gpt2", model, tiny_reference)
    check_hidden_states_shape(hidden, 4, tiny_reference.n_tokens, 64)
    check_dtype_device_and_graph(hidden)


@pytest.mark.trained
def test_hidden_states_shape_dtype_and_no_graph_on_smollm2(
    ex, computed, smollm2, smollm2_reference
):
    model, _ = smollm2
    hidden = hidden_states_of(ex, computed, "smollm2", model, smollm2_reference)
    check_hidden_states_shape(hidden, 30, smollm2_reference.n_tokens, 576)
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
    message = check_raises_clearly(
        ValueError, lambda: getattr(ex, function)(model, argument),
        f"{function} on a 200-token text (tiny-gpt2's context length is 128)",
        "Check the number of tokens against kata.context_length(model) before running the model.",
    )
    assert "128" in message, (
        f"{function}'s ValueError should say how many tokens the model reads (128), "
        f"got: {message!r}"
    )


# ----------------------------------------------------------------------------- embedding layer


def check_embedding_layer(output, reference: Reference, d_model: int, model_name: str) -> None:
    check_tensor(output, "embedding_layer_output", "look the token ids up in the tables")
    expected_shape = (reference.n_tokens, d_model)
    assert tuple(output.shape) != (1, *expected_shape), (
        f"embedding_layer_output has shape {tuple(output.shape)}, expected {expected_shape}: "
        "drop the batch dimension"
    )
    assert tuple(output.shape) == expected_shape, (
        f"embedding_layer_output has shape {tuple(output.shape)}, expected {expected_shape}"
    )
    if close(output, reference.hidden[0]):
        return
    if close(output, reference.token_embeddings) and model_name == "tiny-gpt2":
        hint = ("you returned the token embeddings only: GPT-2 adds learned position embeddings, "
                "the rows 0..T-1 of model.transformer.wpe, before block 0")
    else:
        hint = ("hidden state 0 is the token embeddings plus, for GPT-2, the position embeddings "
                "of positions 0..T-1")
    raise AssertionError(
        f"embedding_layer_output on {model_name} differs from the model's hidden state 0 "
        f"(largest difference {(output - reference.hidden[0]).abs().max().item():.3g}): {hint}"
    )


def test_embedding_layer_output_is_hidden_state_0_on_tiny_gpt2(ex, tiny_gpt2, tiny_reference):
    model, _ = tiny_gpt2
    output = ex.embedding_layer_output(model, tiny_reference.tokens["input_ids"])
    check_embedding_layer(output, tiny_reference, 64, "tiny-gpt2")


@pytest.mark.trained
def test_embedding_layer_output_is_hidden_state_0_on_smollm2(ex, smollm2, smollm2_reference):
    model, _ = smollm2
    try:
        output = ex.embedding_layer_output(model, smollm2_reference.tokens["input_ids"])
    except AttributeError as error:
        pytest.fail(
            f"embedding_layer_output failed on SmolLM2 ({error}): Llama-family models have no "
            "position-embedding table (their positions are rotary, applied inside attention); "
            "add position embeddings only where the model has them (model.transformer.wpe)",
            pytrace=False,
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
        raise AssertionError(
            f"raw_last_block_output has shape {shape}, expected {expected_shape}: the block "
            "returned a plain tensor (1, T, d_model), as blocks do in newer transformers, and "
            "output[0] of a tensor already drops the batch dimension; take output[0] only when "
            "the output is a tuple"
        )
    assert shape == expected_shape, (
        f"raw_last_block_output has shape {shape}, expected {expected_shape}"
        + (": drop the batch dimension" if shape == (1, n_tokens, d_model) else "")
    )
    last = reference.hidden[-1]
    assert not close(raw, last), (
        f"raw_last_block_output on {model_name} equals hidden_states[-1], which already went "
        "through the final norm: capture the last block's own output with a forward hook on "
        "kata.blocks(model)[-1]"
    )
    check_close(raw, reference.raw_last, f"raw_last_block_output on {model_name}",
                hint="it should be what kata.blocks(model)[-1] outputs, before the final norm",
                atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        normed = kata.final_norm(model)(raw.to(model.device)).float().cpu()
    check_close(normed, last, f"final_norm(raw_last_block_output) on {model_name}",
                hint="the final norm of the raw last block output should be hidden_states[-1]",
                atol=1e-4, rtol=1e-4)


def test_raw_last_block_output_is_the_last_hidden_state_before_the_final_norm(
    ex, computed, tiny_gpt2, tiny_reference
):
    model, _ = tiny_gpt2
    before = hook_snapshot(model)
    raw = raw_output_of(ex, computed, "tiny-gpt2", model, tiny_reference)
    assert hook_snapshot(model) == before, (
        "raw_last_block_output left a forward hook on the model: keep the handle that "
        "register_forward_hook returns and call handle.remove() in a finally block"
    )
    check_raw_output(raw, tiny_reference, model, "tiny-gpt2")


@pytest.mark.trained
def test_raw_last_block_output_on_smollm2(ex, computed, smollm2, smollm2_reference):
    model, _ = smollm2
    raw = raw_output_of(ex, computed, "smollm2", model, smollm2_reference)
    check_raw_output(raw, smollm2_reference, model, "SmolLM2")


class ToyForwardError(Exception):
    """Raised on purpose by the toy model's forward pass."""


class ToyBlock(nn.Module):
    def __init__(self, returns_tuple: bool):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.returns_tuple = returns_tuple

    def forward(self, x):  # (1, T, 4) -> (1, T, 4), or a tuple with it first
        y = x + self.linear(x)
        return (y, None) if self.returns_tuple else y


class ToyModel(nn.Module):
    """Just enough of a GPT-2-shaped model for kata.blocks, kata.final_norm, kata.context_length.

    Its blocks return a tuple (like GPT-2's before transformers 5.3) or a plain tensor (like
    GPT-2's from 5.3 on and Llama's), whichever transformers version runs the tests.
    """

    def __init__(self, returns_tuple: bool, fails: bool = False):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.config = SimpleNamespace(n_positions=16)
            self.transformer = nn.Module()
            self.transformer.wte = nn.Embedding(20, 4)
            self.transformer.h = nn.ModuleList([ToyBlock(returns_tuple) for _ in range(2)])
            self.transformer.ln_f = nn.LayerNorm(4)
        self.fails = fails

    @property
    def device(self):
        return self.transformer.wte.weight.device

    def get_input_embeddings(self):
        return self.transformer.wte

    def forward(self, input_ids=None, attention_mask=None, output_hidden_states=False, **kwargs):
        if self.fails:
            raise ToyForwardError("the toy model's forward pass fails on purpose")
        x = self.transformer.wte(input_ids)
        hidden_states = [x]
        for block in self.transformer.h:
            output = block(x)
            x = output[0] if isinstance(output, tuple) else output
            hidden_states.append(x)
        hidden_states[-1] = self.transformer.ln_f(x)  # as real models do
        return SimpleNamespace(
            logits=hidden_states[-1],  # a real model would unembed; no test reads the logits
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            last_block_output=x,
        )


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
        pytest.fail(f"raw_last_block_output failed on a model whose blocks return {kind}: "
                    f"{type(error).__name__}: {error}. {hint}", pytrace=False)
    assert hook_snapshot(toy) == before, (
        "raw_last_block_output left a forward hook on the model: call handle.remove() in a "
        "finally block"
    )
    check_tensor(raw, "raw_last_block_output", hint)
    assert tuple(raw.shape) == tuple(expected.shape), (
        f"on a model whose blocks return {kind}, raw_last_block_output has shape "
        f"{tuple(raw.shape)}, expected {tuple(expected.shape)}: {hint}"
    )
    check_close(raw, expected, f"raw_last_block_output on a model whose blocks return {kind}",
                hint="it should be the last block's output as the hook receives it, before the "
                "final norm")


def test_raw_last_block_output_removes_its_hook_when_the_forward_pass_fails(ex):
    toy = ToyModel(returns_tuple=False, fails=True)
    before = hook_snapshot(toy)
    with pytest.raises(ToyForwardError):
        ex.raw_last_block_output(toy, toy_tokens())
    assert hook_snapshot(toy) == before, (
        "raw_last_block_output left its hook on the last block when the forward pass raised: "
        "register the hook, then run the model inside try: ... finally: handle.remove()"
    )


# ----------------------------------------------------------------------------- activation_variance


def test_activation_variance_is_torch_var_over_d_model(ex, tiny_reference):
    hidden = tiny_reference.hidden  # (5, T, 64)
    n_hidden, _, d_model = hidden.shape
    for token_index in (0, FIGURE_TOKEN, -1):
        variance = ex.activation_variance(hidden, token_index)
        expected = torch.var(hidden[:, token_index, :], dim=-1, correction=1)  # unbiased
        check_tensor(variance, "activation_variance", "use torch.var")
        shape = tuple(variance.shape)
        assert shape != (d_model,), (
            f"activation_variance has shape {shape}, expected ({n_hidden},): that is one value "
            f"per dimension, a variance over the layers; take it over the {d_model} activations "
            "of each layer instead (dim=-1), not over the layers"
        )
        assert shape == (n_hidden,), (
            f"activation_variance has shape {shape}, expected ({n_hidden},): one variance per "
            f"layer, over the d_model activations of token {token_index}"
        )
        population = torch.var(hidden[:, token_index, :], dim=-1, correction=0)
        assert not close(variance, population, atol=1e-8, rtol=1e-6), (
            f"activation_variance is the population variance (dividing by d_model = {d_model}); "
            "this exercise uses torch.var's default, the unbiased sample variance, which divides "
            f"by d_model - 1 = {d_model - 1}"
        )
        check_close(variance, expected, f"activation_variance(hidden_states, {token_index})",
                    hint="compare with torch.var(hidden_states[:, token_index, :], dim=-1) "
                    "(unbiased, dividing by d_model - 1)", atol=1e-8, rtol=1e-5)


@pytest.mark.parametrize("offset", [2, None], ids=["past-the-end", "too-negative"])
def test_activation_variance_rejects_a_token_index_out_of_range(ex, tiny_reference, offset):
    n_tokens = tiny_reference.n_tokens
    token_index = n_tokens + offset if offset is not None else -n_tokens - 1
    message = check_raises_clearly(
        IndexError, lambda: ex.activation_variance(tiny_reference.hidden, token_index),
        f"activation_variance with token_index={token_index} for a {n_tokens}-token text",
        "Check token_index before indexing.",
    )
    assert "token" in message.lower() and str(n_tokens - 1) in message, (
        f"activation_variance raised IndexError({message!r}) for token_index={token_index}, but "
        f"the message should name the problem and the valid range (0 to {n_tokens - 1}), e.g. "
        f"'token_index {token_index} is out of range for {n_tokens} tokens (0 to {n_tokens - 1})'"
        ": check token_index yourself before indexing"
    )


@pytest.mark.trained
def test_variance_of_a_mid_sentence_token_rises_into_the_middle_layers_on_smollm2(
    ex, smollm2_reference
):
    hidden = smollm2_reference.hidden  # (31, T, 576)
    token_index = smollm2_reference.n_tokens // 2
    variance = ex.activation_variance(hidden, token_index)
    check_tensor(variance, "activation_variance", "use torch.var")
    assert tuple(variance.shape) == (31,), (
        f"activation_variance has shape {tuple(variance.shape)}, expected (31,): one per layer"
    )
    middle = (len(variance) - 1) // 2
    values = ", ".join(f"{v:.3g}" for v in variance[: middle + 1].tolist())
    first = variance[0]
    rises = variance[middle] > 100 * first and torch.all(variance[1 : middle + 1] > first)
    assert rises, (
        f"on SmolLM2 the variance of token {token_index} should grow from the embedding layer to "
        f"the middle layers (the post's figure 6); layers 0..{middle} gave {values}"
    )


# ----------------------------------------------------------------------------- the figure


@pytest.fixture
def figures():
    """Figures a test makes, closed when it ends."""
    made = []
    yield made
    for fig in made:
        plt.close(fig)


def draw(ex, reference: Reference, figures, token_index=FIGURE_TOKEN, label=" Penguins"):
    fig = ex.plot_token_activations(reference.hidden, token_index, label)
    if isinstance(fig, Figure):
        figures.append(fig)
    assert isinstance(fig, Figure), (
        f"plot_token_activations should return a matplotlib Figure, got {type(fig).__name__} "
        "(fig, axes = plt.subplots(1, 2); ...; return fig)"
    )
    assert len(fig.axes) == 2, (
        f"the figure should have 2 panels (axes), got {len(fig.axes)}: plt.subplots(1, 2)"
    )
    return fig, sorted(fig.axes, key=lambda ax: ax.get_position().x0)


def layer_labels(n_hidden: int) -> list[str]:
    return ["Emb"] + [f"L{i}" for i in range(n_hidden - 1)]


def test_figure_has_two_labelled_panels_with_layer_ticks_and_a_title(ex, tiny_reference, figures):
    fig, axes = draw(ex, tiny_reference, figures)
    n_hidden = tiny_reference.hidden.shape[0]
    for side, ax in zip(("left", "right"), axes):
        assert ax.get_xlabel() and ax.get_ylabel(), (
            f"label both axes of the {side} panel (x: {ax.get_xlabel()!r}, y: {ax.get_ylabel()!r})"
        )
        ticks = [float(t) for t in ax.get_xticks()]
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks == list(range(n_hidden)) and labels == layer_labels(n_hidden), (
            f"the {side} panel's x ticks should be the layers 0..{n_hidden - 1} labelled "
            f"{layer_labels(n_hidden)} (index 0 is the embedding layer 'Emb', then the blocks "
            f"from L0), got ticks {ticks} "
            f"labelled {labels}"
        )
    suptitle = fig.get_suptitle() if hasattr(fig, "get_suptitle") else ""
    titles = " ".join([suptitle] + [ax.get_title() for ax in axes])
    assert "Penguins" in titles, (
        f"the title should name the token (' Penguins' here), got {titles.strip()!r}"
    )


def test_figure_left_panel_dots_are_the_tokens_activations_per_layer(ex, tiny_reference, figures):
    _, (left, _) = draw(ex, tiny_reference, figures)
    hidden = tiny_reference.hidden
    n_hidden, _, d_model = hidden.shape
    dots = [c.get_offsets() for c in left.collections if isinstance(c, PathCollection)]
    assert dots, "the left panel has no dots: draw them with ax.scatter"
    xy = torch.cat([torch.as_tensor(np.asarray(d), dtype=torch.float64)
                    for d in dots])  # (number of dots, 2)
    assert len(xy) == n_hidden * d_model, (
        f"the left panel has {len(xy)} dots, expected {n_hidden} layers x {d_model} activations "
        f"= {n_hidden * d_model}: one dot per activation of the token at every layer"
    )
    nearest_layer = xy[:, 0].round()
    for layer, name in enumerate(layer_labels(n_hidden)):
        at_layer = nearest_layer == layer
        assert at_layer.sum() == d_model, (
            f"layer {layer} ({name!r}) should have {d_model} dots near x = {layer}, found "
            f"{int(at_layer.sum())}: put layer i's dots at x = i plus a jitter smaller than 0.5"
        )
        y = xy[at_layer, 1].sort().values
        expected = hidden[layer, FIGURE_TOKEN, :].double().sort().values
        assert torch.allclose(y, expected, rtol=1e-5, atol=1e-6), (
            f"the dots at layer {name!r} are not token {FIGURE_TOKEN}'s activations at that layer: "
            "plot hidden_states[layer, token_index, :] at each layer"
        )
        spread = xy[at_layer, 0] - layer
        assert spread.std() > 0, (
            f"all dots of layer {name!r} sit at x = {layer}: spread them sideways with a small "
            "random jitter (smaller than 0.5), as in figure 6"
        )


def test_figure_right_panel_shows_the_variance_per_layer_as_squares(ex, tiny_reference, figures):
    _, (_, right) = draw(ex, tiny_reference, figures)
    hidden = tiny_reference.hidden
    layers = list(range(hidden.shape[0]))
    expected = torch.var(hidden[:, FIGURE_TOKEN, :], dim=-1).double()
    series = [(line.get_xdata(), line.get_ydata(), line.get_marker()) for line in right.lines]
    series += [(c.get_offsets()[:, 0], c.get_offsets()[:, 1], None)
               for c in right.collections if isinstance(c, PathCollection)]
    matching = [
        marker for x, y, marker in series
        if len(y) == len(layers)
        and torch.allclose(torch.as_tensor(x, dtype=torch.float64), torch.tensor(layers).double())
        and torch.allclose(torch.as_tensor(y, dtype=torch.float64), expected, rtol=1e-4, atol=1e-8)
    ]
    found = [list(torch.as_tensor(y, dtype=torch.float64).tolist()) for _, y, _ in series]
    assert matching, (
        f"the right panel should show token {FIGURE_TOKEN}'s activation variance at layers "
        f"{layers} (x = layer index): expected y = {[round(v, 6) for v in expected.tolist()]}, "
        f"found data {found}"
    )
    assert matching[0] in (None, "s"), (
        f"draw the variances with square markers, e.g. ax.plot(layers, variance, 's'); "
        f"the marker is {matching[0]!r}"
    )


def test_figure_saves_to_png_without_a_display(ex, tiny_reference, figures, tmp_path):
    fig, _ = draw(ex, tiny_reference, figures)
    path = tmp_path / "figure6.png"
    fig.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "the saved figure is not a PNG file"


def test_figure_rejects_a_token_index_out_of_range(ex, tiny_reference):
    n_tokens = tiny_reference.n_tokens
    open_before = plt.get_fignums()
    check_raises_clearly(
        IndexError,
        lambda: ex.plot_token_activations(tiny_reference.hidden, n_tokens, "?"),
        f"plot_token_activations with token_index={n_tokens} for a {n_tokens}-token text",
        "Check token_index before drawing (activation_variance already does).",
    )
    for number in set(plt.get_fignums()) - set(open_before):
        plt.close(number)
