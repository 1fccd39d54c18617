# Your exercise file: replace each `raise NotImplementedError` with your code.
# Generated from solutions/ex1_hidden_states.py by `python -m kata.stubs`.
# (Maintainers: edit the solution and regenerate, not this file.)
"""Exercise 1: extracting and inspecting hidden states.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's
Substack series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb`
in the public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

Follows the post's "Python demo 1: Inspecting hidden states" and its figure 6.

A language model turns every token into a vector of d_model numbers, and each transformer block
nudges every vector a little. The vectors at each stage are the model's *hidden states*: the
embedding layer's output first, then the output of every block, so a model with n_layers blocks
has n_layers + 1 of them. Here you read the model's size from its config, tokenize a text, collect
its hidden states, check where the first and the last of them come from (the embeddings, and the
last block followed by the final norm), and plot how one token's activations spread out as the
vector travels deeper into the model.

Shapes: T is the number of tokens, d_model the length of each vector.
"""

import matplotlib.pyplot as plt  # noqa: F401 - for plot_token_activations
import torch

import kata  # noqa: F401 - kata.blocks, kata.final_norm, kata.context_length


# ----------------------------------------------------------------------------- model and input


def model_summary(model) -> dict:
    """The model's size, read from ``model.config``.

    Returns ``{"n_layers", "d_model", "n_heads", "vocab_size"}``, all ints: the number of
    transformer blocks, the length of every token vector, the attention heads per block and the
    number of tokens the model knows.

    Hint: GPT-2's config calls them ``n_layer``, ``n_embd``, ``n_head``; Llama-family configs
    (SmolLM2) call them ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``. Both kinds
    of config answer to the Llama-style names.

    On the models: GPT-2 gives 12 blocks, d_model 768, 12 heads, 50,257 tokens; SmolLM2-135M
    30 blocks, d_model 576, 9 heads, 49,152 tokens.

    Post: Python demo 1, "model.config" (figure 3).
    """
    raise NotImplementedError


def tokenize(tokenizer, text: str):
    """Tokenize one text for the model.

    Returns a mapping with ``input_ids`` (the token indices) and ``attention_mask`` (all ones for a
    single text), both int64 tensors of shape (1, T). Raises ``ValueError`` for an empty text,
    which has no tokens to run.

    Hint: call the tokenizer object itself, not ``tokenizer.encode``, and ask for PyTorch tensors
    with ``return_tensors="pt"``.

    On the models: the penguin sentence is 10 tokens for GPT-2 and 11 for SmolLM2.

    Post: Python demo 1, the tokens (figure 4).
    """
    raise NotImplementedError


# ----------------------------------------------------------------------------- hidden states


def get_hidden_states(model, tokens) -> torch.Tensor:
    """All hidden states of one text, stacked into one tensor.

    Returns a float32 CPU tensor of shape (n_layers + 1, T, d_model), detached from autograd:
    index 0 is the embedding layer's output (the input of block 0), index i + 1 the output of
    block i, and the last one has the model's final norm applied. Raises ``ValueError`` when the
    text is longer than ``kata.context_length(model)``.

    Hint: ``model(**tokens, output_hidden_states=True).hidden_states`` is a tuple of
    n_layers + 1 tensors, each (1, T, d_model); stack them and drop the batch dimension.

    On the models: for the penguin sentence, (13, 10, 768) on GPT-2 and (31, 11, 576) on SmolLM2.
    On SmolLM2 the first token is an outlier: its vector's length reaches about 25,000 in the
    middle blocks against about 170 for the other tokens (an "attention sink"). ``torch.no_grad()``
    around the forward pass keeps autograd from recording it: nothing here needs gradients.

    Post: Python demo 1, "13 hidden states, each 1x10x768" (figure 5).
    """
    raise NotImplementedError


def embedding_layer_output(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The vectors that enter block 0, built by hand from the embedding tables.

    Returns (T, d_model) for ``input_ids`` of shape (1, T), float32 on the CPU: each token's row of
    the token-embedding table, plus, for models with learned position embeddings (GPT-2), the row
    of the position-embedding table for its position 0, 1, ..., T - 1. Llama-family models encode
    positions inside attention instead (rotary embeddings), so for them it is the token
    embeddings alone. Equals hidden state 0. Raises ``ValueError`` for a text longer than the
    model's context.

    Hint: ``model.get_input_embeddings()`` is the token table for any model; GPT-2 keeps its
    position table at ``model.transformer.wpe``.

    Post: Python demo 1, "the hidden state of the embeddings ... plus the position embeddings".
    """
    raise NotImplementedError


def raw_last_block_output(model, tokens) -> torch.Tensor:
    """What the last transformer block outputs, before the model's final norm.

    Returns (T, d_model), float32 on the CPU. ``hidden_states[-1]`` is *not* this: the model
    applies its final norm (``kata.final_norm(model)``) first. Capture the block's output with a
    temporary forward hook on ``kata.blocks(model)[-1]``, and remove the hook in a ``finally``
    block so it never outlives this call, even when the forward pass fails. Raises ``ValueError``
    for a text longer than the model's context (``kata.one_sequence(input_ids, model)`` checks
    the token ids of one text and returns them as (1, T) on the model's device).

    Hint: a block returns a tuple ``(hidden, ...)`` in older transformers and a plain tensor
    (1, T, d_model) in newer ones: take ``output[0]`` only when the output is a tuple.

    Post: Python demo 1 (hooks) and demo 2, "the hidden state of the last transformer includes
    a final normalization".
    """
    raise NotImplementedError


# ----------------------------------------------------------------------------- one token


def activation_variance(hidden_states: torch.Tensor, token_index: int) -> torch.Tensor:
    """How spread out one token's activations are, at every layer.

    ``hidden_states`` is (n_layers + 1, T, d_model). Returns (n_layers + 1,): entry i is the
    variance of the d_model numbers of token ``token_index`` at layer i. This is the sample
    (unbiased) variance, dividing by d_model - 1, which is what ``torch.var`` computes by
    default. A negative ``token_index`` counts from the end, as in Python. Raises ``IndexError``
    naming the valid range (``-T..T-1``) when ``token_index`` is not a token:
    ``kata.token_index(token_index, T)`` makes that check, the kata's one rule for token indices.

    Hint: select the token first (``hidden_states[:, token_index, :]`` is (n_layers + 1,
    d_model)), then take the variance along the last dimension, not across the layers.

    On the models: on SmolLM2 the variance of a mid-sentence token grows from about 0.01 at the
    embeddings to several hundred in the last blocks (939 at L28 for token 8 of the penguin
    sentence), then drops to a few units after the final norm; on GPT-2 it grows with depth too.

    Post: Python demo 1, figure 6, right panel.
    """
    raise NotImplementedError


def plot_token_activations(hidden_states: torch.Tensor, token_index: int, token_label: str):
    """Figure 6: one token's activations at every layer, and their variance.

    ``hidden_states`` is (n_layers + 1, T, d_model). Returns a matplotlib ``Figure`` with two axes.
    Left: for each layer i, the token's d_model activations as dots at x = i plus a small random
    jitter (less than 0.5, so the layers stay apart), coloured by layer. Right: the token's
    activation variance at each layer, as square markers. Both x axes have one tick per layer
    labelled "Emb", "L0", "L1", ...; all axes are labelled and the title names the token.
    Raises ``IndexError`` when ``token_index`` is not a token.

    Hint: one ``ax.scatter`` call per layer keeps each layer's dots (and colour) together.

    Legibility: GPT-2's 13 layer names fit side by side; SmolLM2's 31 do not, so stand them
    upright (``ax.tick_params(axis="x", labelrotation=90)``) or label every 5th layer. Make the
    panels with ``fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))``; a tensor goes into
    matplotlib as ``tensor.numpy()`` (on the CPU, without gradients).

    Post: Python demo 1, figure 6.
    """
    raise NotImplementedError
