"""Exercise 1: extracting and inspecting hidden states.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's Substack
series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb` in the
public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

Follows the post's "Python demo 1: Inspecting hidden states" and its figure 6.

A language model turns every token into a vector of d_model numbers, and each transformer block
nudges every vector a little. The vectors at each stage are the model's *hidden states*: the
embedding layer's output first, then the output of every block, so a model with n_layers blocks has
n_layers + 1 of them. Here you read the model's size from its config, tokenize a text, collect its
hidden states, check where the first and the last of them come from (the embeddings, and the last
block followed by the final norm), and plot how one token's activations spread out as the vector
travels deeper into the model. The *final norm* is the normalisation (LayerNorm in GPT-2, RMSNorm
in SmolLM2) that the model applies to the last block's output before turning it into a prediction;
``kata.final_norm(model)`` is that module.

One new tool: the *forward hook* (``raw_last_block_output``), a function PyTorch calls after a
module runs, ``hook(module, inputs, output)``, to look at (or, in exercise 3, replace) what the
module returned. ``module.register_forward_hook(hook)`` attaches it and returns a handle whose
``remove()`` detaches it again.

Every docstring says what the function does, then what it returns and raises, a first hint
(``python grader.py hint 1`` gives more), what to expect on the models, and where the post shows
it. Shapes: T is the number of tokens, d_model the length of each vector.
"""

import matplotlib.pyplot as plt  # for plot_token_activations
import torch

import kata  # kata.blocks, kata.final_norm, kata.context_length


# ----------------------------------------------------------------------------- model and input


def model_summary(model) -> dict:
    """The model's size, read from its configuration.

    ``model.config`` holds the numbers that fix the model's architecture, read from the
    checkpoint (the post's figure 3 lists GPT-2's).

    Returns ``{"n_layers", "d_model", "n_heads", "vocab_size"}``, all ints: the number of
    transformer blocks, the length of every token vector, the attention heads per block and the
    number of tokens the model knows.

    Hint: Everything about the model's size is in model.config; SmolLM2's (Llama-style) names are
    num_hidden_layers, hidden_size, num_attention_heads and vocab_size.

    On the models: SmolLM2-135M has 30 blocks, d_model 576, 9 heads, 49,152 tokens; GPT-2 12
    blocks, d_model 768, 12 heads, 50,257 tokens. GPT-2's own config names are ``n_layer``,
    ``n_embd``, ``n_head``, and it answers to the Llama-style names too, so those work for both.

    Post: Python demo 1, "model.config" (figure 3).
    """
    config = model.config
    return {
        "n_layers": config.num_hidden_layers,
        "d_model": config.hidden_size,
        "n_heads": config.num_attention_heads,
        "vocab_size": config.vocab_size,
    }


def tokenize(tokenizer, text: str):
    """Tokenize one text for the model, as the post does: by calling the tokenizer object itself.

    Calling the tokenizer gives a mapping (a ``BatchEncoding``) with the token ids and the
    attention mask together; its ``encode`` method would give only a plain list of ids.

    Returns a mapping with ``input_ids`` (the token indices) and ``attention_mask`` (all ones for a
    single text), both int64 tensors of shape (1, T). Raises ``ValueError`` for an empty text,
    which has no tokens to run.

    Hint: The tokenizer is callable: calling it gives the input_ids and the attention_mask
    together, as PyTorch tensors when you ask for them.

    On the models: the penguin sentence is 10 tokens for GPT-2 and 11 for SmolLM2, whose tokenizer
    cuts the word Penguins in two (``" P"`` + ``"enguins"``).

    Post: Python demo 1, the tokens (figure 4).
    """
    if not text:
        raise ValueError("cannot tokenize an empty text: give at least one character")
    return tokenizer(text, return_tensors="pt")


# ----------------------------------------------------------------------------- hidden states


def get_hidden_states(model, tokens) -> torch.Tensor:
    """All hidden states of one text, stacked into one tensor.

    The model can hand back, besides its logits, the hidden state after every stage: the
    embedding layer first, then each block. Nothing here needs gradients, so autograd need not
    record the forward pass.

    Returns a float32 CPU tensor of shape (n_layers + 1, T, d_model), detached from autograd: index
    0 is the embedding layer's output (the input of block 0), index i + 1 the output of block i,
    and the last one has the model's final norm applied. Raises ``ValueError`` when the text is
    longer than the model's context (``kata.one_sequence`` checks it, the kata's one rule).

    Hint: Ask the model for its hidden states when you run it: they come as a tuple of
    n_layers + 1 tensors of shape (1, T, d_model), and index 0 is the embedding layer.

    On the models: for the penguin sentence, (13, 10, 768) on GPT-2 and (31, 11, 576) on SmolLM2.
    On SmolLM2 the first token's vector grows far longer than the others (about 25,000 against
    about 170 in the middle blocks): it is an "attention sink", a token on which the model parks
    the attention it does not need elsewhere. Its vector carries little meaning about the text,
    which is why the post sets the first token aside.

    Post: Python demo 1, "13 hidden states, each 1x10x768" (figure 5).
    """
    input_ids = kata.one_sequence(tokens["input_ids"], model)  # (1, T), checked
    with torch.no_grad():
        outputs = model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),  # one text: every token is real
            output_hidden_states=True,
        )
    hidden_states = torch.stack(outputs.hidden_states)  # (n_layers + 1, 1, T, d_model)
    return hidden_states[:, 0].float().cpu()  # (n_layers + 1, T, d_model)


def embedding_layer_output(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The vectors that enter block 0, built by hand from the embedding tables.

    Each token's row of the token-embedding table, plus, for models with learned position
    embeddings (GPT-2), the row of the position-embedding table for its position 0, 1, ..., T - 1.
    Llama-family models such as SmolLM2 encode positions inside attention instead (rotary
    embeddings), so for them it is the token embeddings alone.

    Returns (T, d_model) for ``input_ids`` of shape (1, T), float32 on the CPU, equal to hidden
    state 0. Raises ``ValueError`` for a text longer than the model's context
    (``kata.one_sequence`` checks it).

    Hint: Hidden state 0 is the embedding layer: the token embeddings, plus position embeddings for
    GPT-2 only.

    Post: Python demo 1, "the hidden state of the embeddings ... plus the position embeddings".
    """
    token_ids = kata.one_sequence(input_ids, model)[0]  # (T,), checked
    with torch.no_grad():
        vectors = model.get_input_embeddings()(token_ids)  # (T, d_model)
        position_table = getattr(getattr(model, "transformer", None), "wpe", None)
        if position_table is not None:
            positions = torch.arange(len(token_ids), device=token_ids.device)  # 0, 1, ..., T - 1
            vectors = vectors + position_table(positions)
    return vectors.float().cpu()


def raw_last_block_output(model, tokens) -> torch.Tensor:
    """What the last transformer block outputs, before the model's final norm.

    The model's last hidden state is *not* this: the model applies its final norm
    (``kata.final_norm``) to the last block's output first. To see the block's own output, catch
    it with a *forward hook*: a function PyTorch calls right after a module runs, with the module,
    its inputs and what it returned. A hook stays on the model until it is removed, changing or
    watching every later run, so it must never outlive this call, not even when the forward pass
    fails. A block returns a tuple ``(hidden, ...)`` in older transformers and a plain
    (1, T, d_model) tensor in newer ones: your hook sees either.

    Returns (T, d_model), float32 on the CPU. Raises ``ValueError`` for a text longer than the
    model's context (``kata.one_sequence`` checks it).

    Hint: Attach a forward hook to the last block (``kata.blocks``): PyTorch hands it the
    block's output, before the final norm ever sees it.

    Post: Python demo 1 (hooks) and demo 2, "the hidden state of the last transformer includes a
    final normalization".
    """
    input_ids = kata.one_sequence(tokens["input_ids"], model)  # (1, T), checked
    captured = {}

    def keep_output(module, inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output  # (1, T, d_model)
        captured["hidden"] = hidden.detach()

    handle = kata.blocks(model)[-1].register_forward_hook(keep_output)
    try:
        with torch.no_grad():
            model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    finally:
        handle.remove()
    return captured["hidden"][0].float().cpu()  # (T, d_model)


# ----------------------------------------------------------------------------- one token


def activation_variance(hidden_states: torch.Tensor, token_index: int) -> torch.Tensor:
    """How spread out one token's activations are, at every layer.

    ``hidden_states`` is (n_layers + 1, T, d_model); the variance is taken over the token's d_model
    numbers at each layer, not across the layers. It is the sample (unbiased) variance, dividing by
    d_model - 1, which is what ``torch.var`` computes by default. A negative ``token_index`` counts
    from the end, as in Python.

    Returns (n_layers + 1,): entry i is the variance of token ``token_index`` at layer i. Raises
    ``IndexError`` naming the valid range (``-T..T-1``) when ``token_index`` is not a token
    (``kata.token_index`` makes that check, the kata's one rule for positions).

    Hint: The variance is over one token's d_model numbers at each layer, not over the layers.

    On the models: on SmolLM2 the variance of " cute" (the token of figure 6) grows from about 0.01
    at the embeddings to 836 at L28, then drops to about 3 after the final norm; on GPT-2 it grows
    with depth too.

    Post: Python demo 1, figure 6, right panel.
    """
    token_index = kata.token_index(token_index, hidden_states.shape[1])  # IndexError if no token
    token_vectors = hidden_states[:, token_index, :]  # (n_layers + 1, d_model)
    return token_vectors.var(dim=-1)  # (n_layers + 1,)


def _layer_names(n_hidden_states: int) -> list[str]:
    """Tick labels for the hidden states: ``["Emb", "L0", "L1", ...]`` (block numbers from 0)."""
    return ["Emb"] + [f"L{block}" for block in range(n_hidden_states - 1)]


def plot_token_activations(hidden_states: torch.Tensor, token_index: int, token_label: str):
    """Figure 6: one token's activations at every layer, and their variance.

    ``hidden_states`` is (n_layers + 1, T, d_model); the post follows the token " cute"
    (``kata.FIGURE6_TOKEN``; ``kata.figure6_token`` finds its index). Left: for each layer i, the
    token's d_model activations as dots at x = i plus a small random jitter (less than 0.5, so the
    layers stay apart), coloured by layer. Right: the token's activation variance at each layer,
    as square markers. Both x axes have one tick per layer labelled "Emb", "L0", "L1", ...; all
    axes are labelled and the title names the token. Two panels side by side, 12 by 4 inches.

    Returns a matplotlib ``Figure`` with two axes. Raises ``IndexError`` when ``token_index`` is
    not a token.

    Hint: Two panels side by side: every activation of the token per layer, and the variance per
    layer.

    On the models: GPT-2's 13 layer names fit side by side; SmolLM2's 31 do not, so stand them
    upright or label every 5th layer.

    Post: Python demo 1, figure 6.
    """
    variance = activation_variance(hidden_states, token_index)  # also checks token_index
    token_vectors = hidden_states[:, token_index, :].detach().float()  # (n_layers + 1, d_model)
    n_hidden, d_model = token_vectors.shape
    layers = list(range(n_hidden))
    colours = plt.cm.plasma(torch.linspace(0, 0.9, n_hidden).tolist())
    jitter = torch.Generator().manual_seed(0)  # the same figure every time

    fig, (dots_ax, variance_ax) = plt.subplots(1, 2, figsize=(12, 4))
    for layer in layers:
        x = layer + (torch.rand(d_model, generator=jitter) - 0.5) * 0.5  # within +-0.25
        y = token_vectors[layer].cpu().numpy()
        dots_ax.scatter(x.numpy(), y, s=4, alpha=0.5, color=colours[layer])
    dots_ax.set_ylabel("Activation value")
    dots_ax.set_title("Every activation of the token")

    variance_ax.plot(layers, variance.tolist(), "s", color="black", markersize=7)
    variance_ax.set_ylabel("Variance across dimensions")
    variance_ax.set_title("Variance of the activations")

    for ax in (dots_ax, variance_ax):
        # GPT-2's 13 names fit side by side; SmolLM2's 31 need to stand upright.
        ax.set_xticks(layers, _layer_names(n_hidden), rotation=90 if n_hidden > 16 else 0)
        ax.set_xlabel("Layer")
    fig.suptitle(f"Hidden states of token {token_label!r} (index {token_index})")
    fig.tight_layout()
    return fig
