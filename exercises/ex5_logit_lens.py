# Your exercise file: replace each `raise NotImplementedError` with your code.
# Generated from course/ex5_logit_lens/solution.py by `python grader.py generate`.
# (Maintainers: edit the solution and regenerate, not this file.)
"""Exercise 5: the logit lens: what each hidden state already predicts.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's Substack
series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb` in the
public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

The post stops where the next question begins. The last hidden state becomes the model's prediction
through two steps: the final norm (already applied to ``hidden_states[-1]``) and the unembedding,
the matrix ``model.get_output_embeddings()`` that gives one logit per vocabulary entry. What do the
*earlier* hidden states predict if we read them the same way? That reading is the logit lens
(nostalgebraist, 2020), one of the first tools of interpretability.

You will write:

* ``logit_lens``: the log-probabilities every layer's hidden state gives to every token;
* ``true_token_ranks`` and ``target_rank_by_layer``: how highly each layer ranks the token that
  really comes next, or a target such as ``" insect"``;
* ``top_tokens_by_layer``: what each layer would say, as text;
* ``plot_logit_lens``: the classic picture, layers by positions, each cell the top token;
* ``plot_rank_by_layer``: the median rank of the true next token, layer by layer.

Shapes: ``n_layers`` transformer blocks, so ``n_layers + 1`` hidden states (index 0 is the
embedding layer); T tokens; P chosen positions; ``vocab_size`` entries in the vocabulary. A rank is
the number of tokens the layer prefers to the one in question: 0 means top.

The lesson is in the numbers. On GPT-2 the lens reads sensible guesses from the middle blocks on.
On SmolLM2 (a Llama-family model) it is nearly blind until the last few blocks: the plain logit
lens works better on GPT-2 than on Llama-family models. Are the middle layers of SmolLM2 really
ignorant of the next token, or do they only speak another language than the output's? That
question is why the tuned lens (a learned translation per layer, which a later exercise trains)
exists.
"""

import matplotlib.pyplot as plt  # noqa: F401 - for the plots
import torch  # noqa: F401 - torch.no_grad, torch.log_softmax, torch.topk

import kata  # noqa: F401 - kata.blocks, kata.final_norm


def logit_lens(model, hidden_states, positions=None):
    """Read every hidden state through the final norm and the unembedding.

    ``hidden_states`` has shape ``(n_layers + 1, T, d_model)``, as exercise 1's
    ``get_hidden_states`` returns them; ``positions`` is ``None`` for every position, or a list of
    positions (negative ones count from the end, as in Python). Each hidden state but the last is
    read as the model reads its last one: the model's final norm (``kata.final_norm``), then the
    unembedding (``model.get_output_embeddings()``), then a log-softmax over the vocabulary. The
    last hidden state already went through the final norm inside the model, so it goes straight to
    the unembedding: norming it again would apply the norm twice. Its row then equals the model's
    own log-probabilities. Nothing here needs gradients. The result is large for a long text
    (GPT-2 on 1,024 tokens: 13 x 1024 x 50257 floats, 2.7 GB), so never hold more than one layer's
    logits at a time, and pass ``positions`` when you need only a few of them.

    Returns a float32 CPU tensor of shape ``(n_layers + 1, P, vocab_size)`` (P = T when
    ``positions`` is None), detached from autograd; ``result[i, p].exp()`` sums to 1. Raises
    ``ValueError`` when ``hidden_states`` is not ``(n_layers + 1, T, d_model)`` for this model; it
    raises ``IndexError`` naming the valid range when a position is not one of the T tokens
    (``kata.token_index`` checks a position and returns it counted from the start).

    Hint: Read hidden state i as the model reads its last one: final norm, then the unembedding,
    then log-softmax over the vocabulary.

    On the models: the last row reproduces the model's own log-probabilities (on SmolLM2 with the
    Kafka text, identical to float precision); the other rows are different readings.

    Post: after demo 1 (the final norm is applied to the last hidden state only) and demo 3
    (log-softmax of the next token); the logit lens itself is nostalgebraist's (2020).
    """
    raise NotImplementedError


def true_token_ranks(lens, input_ids):
    """The rank, at every layer and position, of the token that really comes next.

    ``lens`` is ``logit_lens`` for *all* positions, shape ``(n_layers + 1, T, vocab_size)``;
    ``input_ids`` the text's ids, ``(1, T)`` or ``(T,)``. Position ``t`` predicts token ``t + 1``,
    so the last position has nothing to be checked against. A rank is how many tokens get a
    strictly higher log-probability than the true one: 0 is the top token, 1 the second (never
    1-based). Counting over a whole lens at once takes memory in proportion to it: count a layer
    at a time.

    Returns an int64 tensor of shape ``(n_layers + 1, T - 1)``. Raises ``ValueError`` when ``lens``
    does not have one position per token of ``input_ids``.

    Hint: Position t predicts token t + 1: the predictions of positions 0 .. T - 2 are checked
    against tokens 1 .. T - 1.

    On the models: on SmolLM2 with the Kafka text the median rank is about 26,000 at the embedding
    layer, a few hundred in the middle blocks, about 20 after block L27 and 5 at the output: the
    lens is nearly blind until the last blocks. On GPT-2 the logit-lens literature shows the ranks
    falling steadily from the middle blocks on.

    Post: demo 3 measures one token's log-probability; here every true next token is ranked.
    """
    raise NotImplementedError


def target_rank_by_layer(lens, target_id, position=-1):
    """The rank of one token at one position, layer by layer.

    ``lens`` has shape ``(n_layers + 1, P, vocab_size)``; ``target_id`` is a token id (from
    exercise 3's ``target_token_id``); ``position`` one of the P positions (default the last: the
    prediction for the token after the text). At each layer the rank counts the tokens whose
    log-probability at that position is strictly higher than the target's, so rank 0 is the top
    token.

    Returns an int64 tensor of shape ``(n_layers + 1,)``. Raises ``ValueError`` if ``target_id`` is
    not a token id (``kata.token_id`` checks it); it raises ``IndexError`` naming the valid range
    if ``position`` is not one of the P positions (``kata.token_index`` checks it).

    Hint: A rank counts the tokens a layer prefers: the log-probabilities strictly higher than the
    target's at that position.

    On the models: with the Kafka text on SmolLM2, " insect" ranks 5,000 to 13,000 in every block
    up to L26, 1,885 after block L27 and 8 (the 9th most likely token) at the output.

    Post: demo 3's target, " insect", read at every layer instead of only at the output.
    """
    raise NotImplementedError


def top_tokens_by_layer(lens, tokenizer, position=-1, k=5):
    """The ``k`` tokens each layer finds most likely at one position, as text.

    Each layer's ``k`` largest log-probabilities at ``position`` give ``k`` token ids, most likely
    first; each id becomes its text as the tokenizer decodes it, which keeps the token's leading
    space (``" insect"``, not ``"insect"`` or the tokenizer's internal piece ``"Ġinsect"``).

    Returns a list of ``n_layers + 1`` lists (one per layer, embedding layer first), each of ``k``
    strings, most likely first. Raises ``IndexError`` naming the valid range if ``position`` is not
    one of the positions of ``lens`` (``kata.token_index`` checks it).

    Hint: Each layer's k largest log-probabilities at that position, turned into text.

    On the models: on SmolLM2 with the Kafka text, last position, the top token is "," at 23 of the
    31 layers; the output's top 5 are ",", " spider", " creature", " dragon", " human".

    Post: figure 10's list of likely next tokens, for every layer.
    """
    raise NotImplementedError


# Given: the tick labels of exercise 1.
def _layer_names(n_hidden_states):
    """``["Emb", "L0", "L1", ...]``: the hidden state after block i is called Li."""
    return ["Emb"] + [f"L{block}" for block in range(n_hidden_states - 1)]


def plot_logit_lens(lens, tokenizer, input_ids):
    """The classic logit-lens picture: rows are layers, columns are positions.

    ``lens`` is ``logit_lens`` for every position of ``input_ids``, ``(n_layers + 1, T,
    vocab_size)``. Draw an image (``ax.imshow``) whose row ``i``, column ``t`` is the top
    log-probability of layer ``i`` at position ``t``, the maximum over the vocabulary (an array of
    shape ``(n_layers + 1, T)``), with the embedding layer as the bottom row and the output as the
    top one, the layers climbing towards it as the model computes them. Add a colorbar, and write
    in every cell the top token's text, cut to 8 characters. Label the columns with the input
    tokens (position ``t`` predicts what follows token ``t``), the rows ``"Emb", "L0", "L1", ...``,
    the x axis "Input token", the y axis "Layer".

    Returns the ``matplotlib.figure.Figure``.

    Hint: The maximum over the vocabulary gives both the colours (its values) and the texts (its
    indices), each (n_layers + 1, T).

    On the models: it must stay legible for SmolLM2's 31 layers: make the figure about 0.3 inch per
    layer tall and about 0.8 inch per position wide, with small (about 7 point) cell texts.

    Post: the figure the logit lens is known for (nostalgebraist, 2020).
    """
    raise NotImplementedError


def plot_rank_by_layer(ranks_by_text):
    """The median rank of the true next token per layer, one line per text, on a log axis.

    ``ranks_by_text`` is a dict ``{label: ranks}`` with ``ranks`` from ``true_token_ranks``, shape
    ``(n_layers + 1, T - 1)``, e.g. ``{"penguin": ..., "Kafka": ...}``. For each text draw one line
    with ``x = 0 .. n_layers`` and ``y`` the median rank over the positions plus 1 (a log axis
    cannot show 0, so the top token is drawn at 1), labelled with the text's label, and add a
    legend. Use a logarithmic y axis, the x ticks ``"Emb", "L0", "L1", ...``, the y label "Median
    rank of the true next token (1 = top)", the x label "Layer".

    Returns the ``matplotlib.figure.Figure``.

    Hint: One line per text, labelled, on a logarithmic y axis; the median, not the mean, which
    one badly ranked token drags up.

    Post: a summary of ``plot_logit_lens`` for the penguin and Kafka texts of demos 1 and 3.
    """
    raise NotImplementedError
