# Your exercise file: replace each `raise NotImplementedError` with your code.
# Generated from course/ex8_tuned_lens/solution.py by `python grader.py generate`.
# (Maintainers: edit the solution and regenerate, not this file.)
"""Exercise 8 (bonus): the tuned lens, a translator per layer trained on your own CPU.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's Substack
series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb` in the
public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

Exercise 5 ended on a cliffhanger: read through the final norm and the unembedding, SmolLM2's
middle hidden states look nearly blind, the true next token ranked in the hundreds where the
output ranks it a few. Are they blind, or do they speak another dialect of the residual stream?
The tuned lens (Belrose et al. 2023, "Eliciting Latent Predictions from Transformers with the
Tuned Lens") answers by learning, for every hidden state but the last, one small affine
translator ``h -> h + A h + b`` and reading the translated vector exactly as the logit lens reads
``h``. ``A`` and ``b`` start at zero, so the untrained tuned lens *is* exercise 5's logit lens;
training moves each translator so that its lens's distribution matches the model's own final
one: KL(final || lens), the paper's loss.

You will write:

* ``collect``: the hidden states of a set of texts and the token that follows each position,
  split into a training part and a held-out part, by text;
* ``make_translators``: the translators at the start, all zero;
* ``translate``: one hidden state through its translator;
* ``lens_log_probs``: a hidden state read through its translator, the final norm and the
  unembedding, with autograd (training goes through it);
* ``kl_to_final``: the loss, KL(final || lens), averaged over the positions;
* ``train_tuned_lens``: a few hundred small Adam steps on the training part, seeded, with a
  progress bar, that you can interrupt and resume;
* ``next_token_ranks``: how each hidden state ranks the true next token under a lens (fresh
  translators: the logit lens; trained ones: the tuned lens);
* ``plot_tuned_lens``: figure 16, the two lenses' median ranks layer by layer, and the top token
  of one position through the layers under both.

Everything you write takes and returns plain data (tensors, numbers, lists and dicts), never a
module or an optimizer object: the translators are a dict of two lists of tensors, one of each
per layer, and training returns a new dict that holds its own progress too, so that calling it
again with that dict resumes.

Shapes: ``n_layers`` blocks, so ``n_layers + 1`` hidden states (0 is the embedding layer, the
last one already went through the final norm inside the model) and ``n_layers`` translators, one
for each hidden state but the last; N positions collected; ``vocab_size`` tokens. A rank is the
number of tokens a lens prefers to the true one: 0 is the top.

The texts are SmolLM2's own samples, 24 prompts written for the kata and the model's
continuations, generated once and shipped with the exercise
(``course/ex8_tuned_lens/samples.py`` loads them): text of the kind the model itself writes, so
the held-out ranks below are of that kind too (the model's own text is easier for it than
Kafka's sentence).

The paper's warning, and this exercise's design: a translator can carry information of its own,
and then the tuned lens shows what the translator knows rather than what the hidden state holds.
That is why it stays affine (a linear map re-expresses one vector, it cannot compute anything
new from it), why it starts at the identity (it begins as the logit lens and moves only as far as
the loss asks), and why it is judged on held-out texts. Your own numbers show why the last
matters: on the texts it was trained on, the same lens ranks the true token far better than on
the texts it never saw.
"""

import copy  # noqa: F401
import math  # noqa: F401

import matplotlib.pyplot as plt  # noqa: F401 - for plot_tuned_lens
import torch
import torch.nn.functional as F  # noqa: F401 - F.linear, F.kl_div
from tqdm.auto import tqdm  # noqa: F401 - the training's progress bar

import kata  # noqa: F401 - kata.blocks, kata.final_norm, kata.layer_index, kata.one_sequence


def collect(model, tokenizer, texts, held_out=0.25):
    """Every hidden state of every text, and the token that follows each position.

    The model reads each text once. Position ``t`` of a text of T tokens predicts token
    ``t + 1``, so a text gives T - 1 positions: its hidden states at positions 0 .. T - 2, each
    paired with the id of the token after it. The last texts, a share ``held_out`` of them
    rounded up (at least one, and at least one text is left to train on), are the held-out part,
    the others the training part: split by text, never by position, so that no held-out text
    was half-seen in training. Nothing here needs gradients.

    Returns ``{"train": part, "held_out": part}``, each part a dict with ``"hidden"``, a float32
    CPU tensor ``(n_layers + 1, N, d_model)`` detached from autograd (the positions of its texts
    one after the other, in the texts' order), and ``"next_ids"``, int64 ``(N,)``. Raises
    ``ValueError`` when there are fewer than 2 texts, when ``held_out`` is not strictly between 0
    and 1, or when a text has fewer than 2 tokens or more than the model reads
    (``kata.one_sequence`` checks that).

    Hint: The hidden states of positions 0 .. T - 2 predict the tokens 1 .. T - 1: drop the last
    position's states and the first token's id.

    On the models: the 24 shipped samples give 2,936 SmolLM2 positions, 2,258 from the first 18
    texts to train on and 678 from the last 6 held out (210 MB of hidden states), in about 6 s
    on one CPU thread.

    Post: demo 1's hidden states, for many texts at once; exercise 5 paired them with the next
    token the same way.
    """
    raise NotImplementedError


def make_translators(model):
    """The tuned lens's translators at the start: every ``A`` and every ``b`` zero.

    Translator ``i`` belongs to hidden state ``i``, for ``i`` from 0 (the embedding layer) to
    ``n_layers - 1``; the last hidden state gets none: it is the model's own output, already
    normed inside the model, nothing to translate. It maps ``h`` to ``h + A[i] h + b[i]``
    (``translate``), so zeros make it the identity, exactly, and the untrained tuned lens is
    exercise 5's logit lens.

    Returns ``{"A": A, "b": b}``: ``A`` a list of ``n_layers`` float32 tensors ``(d_model,
    d_model)`` and ``b`` a list of ``n_layers`` float32 tensors ``(d_model,)``, all zeros, on the
    model's device; ``A[i]`` and ``b[i]`` are translator ``i``.

    Hint: One d_model x d_model matrix and one d_model vector for each hidden state but the
    last: read n_layers from kata.blocks(model) and d_model from the unembedding.

    On the models: SmolLM2's 30 translators hold 576 x 577 numbers each, 10 M in all (40 MB).

    Post: the post reads the last hidden state only; a translator per hidden state lets each be
    read in the output's terms.
    """
    raise NotImplementedError


def translate(translators, hidden, layer):
    """Hidden states of one layer through that layer's translator: ``h + A h + b``.

    ``hidden`` is ``(..., d_model)``, states of hidden state ``layer`` (``0 .. n_layers - 1``,
    negative counts from the end of those: the last hidden state has no translator).
    ``A h`` is the matrix product with ``h`` as a column vector, as ``torch.nn.Linear`` reads
    its weight: row ``j`` of ``A`` makes entry ``j`` of the result. With ``make_translators``'
    zeros the result is ``hidden`` itself, bit for bit. Autograd is left on: training reaches
    ``A`` and ``b`` through it.

    Returns a tensor of the shape of ``hidden``. Raises ``IndexError`` naming the valid range
    for a layer that has no translator (``kata.layer_index`` checks it).

    Hint: A is applied like an nn.Linear weight, then the input is added back: the residual form
    keeps the identity at A = 0.

    On the models: at the start every translator returns exactly its input, so the lens of
    fresh translators equals exercise 5's logit lens value for value.

    Post: no demo of the post; the tuned lens paper writes the translator as A h + b, with the
    residual h added (Belrose et al. 2023).
    """
    raise NotImplementedError


def lens_log_probs(model, translators, hidden, layer):
    """Hidden states of one layer read through the tuned lens: translator, final norm,
    unembedding, log-softmax over the vocabulary.

    ``hidden`` is ``(..., d_model)``, states of hidden state ``layer`` (``0 .. n_layers``,
    negative counts from the end). Each hidden state but the last goes through its translator
    (``translate``), then the model's final norm (``kata.final_norm``) and the unembedding
    (``model.get_output_embeddings()``). The last hidden state is read as the model reads it:
    no translator and no norm (it was normed inside the model), so its log-probabilities are
    the model's own. Autograd is left on, so that a loss can reach the translators.

    Returns float32 log-probabilities ``(..., vocab_size)``: exp() of each row sums to 1.
    Raises ``IndexError`` naming the valid range for a layer that is not one of the
    ``n_layers + 1`` hidden states (``kata.layer_index`` checks it).

    Hint: Exercise 5's reading of one layer, with the translator applied first: translate, norm,
    unembed, log-softmax.

    On the models: with fresh translators this is exercise 5's ``logit_lens`` of the same
    states, value for value.

    Post: the post's demo 3 reads the output's log-probabilities; exercise 5 read every layer
    that way.
    """
    raise NotImplementedError


def kl_to_final(lens_log_probs, final_log_probs):
    """The tuned lens's loss: KL(final || lens), summed over the vocabulary, averaged over the
    positions.

    Both arguments are log-probabilities of the same shape ``(..., vocab_size)``: the lens's
    and the model's final ones at the same positions. ``KL(final || lens)`` is the sum over
    tokens ``v`` of ``p_final(v) * (log p_final(v) - log p_lens(v))``: an expectation under the
    model's own distribution, so the lens pays most where the model puts its mass (the paper's
    direction; the other one, KL(lens || final), pays where the lens puts its mass). It is 0
    when the two distributions agree and positive otherwise. Every dimension but the last counts
    as positions, and the result is their mean.

    Returns a 0-d float tensor, differentiable in ``lens_log_probs``. Raises ``ValueError`` when
    the two shapes differ.

    Hint: torch's F.kl_div computes KL(target || input) from log-probabilities: the lens is its
    input, the model's final distribution the target, and batchmean averages over positions.

    On the models: on SmolLM2's held-out samples the logit lens is 14 to 17 nats from the
    model's output at hidden states 5 to 20 (104 at the embeddings); the recipe's trained
    translators bring that to 3 to 5 nats (6 at the embeddings).

    Post: the post compares log-probabilities one token at a time; a KL divergence compares two
    whole distributions.
    """
    raise NotImplementedError


# Given: the positions each training step reads, the same for everyone.
def _batch_positions(n_positions, tokens_per_step, seed, step):
    """The positions (an int64 tensor of ``min(tokens_per_step, n_positions)`` distinct indices
    into the training part) that step ``step`` of a run seeded ``seed`` trains on: a function of
    these four numbers only, so that a resumed run reads what an uninterrupted one would have."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randperm(n_positions, generator=generator)[:tokens_per_step]


def train_tuned_lens(model, translators, data, layers=None, steps=200, tokens_per_step=32,
                     lr=3e-3, seed=0, progress=True):
    """Train the translators of ``layers`` so that each one's lens matches the model's output.

    ``data`` is ``collect``'s result; training reads ``data["train"]`` only (the held-out part
    is for judging the lens). ``layers`` lists the hidden states to train (each has a
    translator, ``0 .. n_layers - 1``; default: all of them); the others stay as they are. Step
    ``s`` reads the training positions that the given ``_batch_positions`` draws for
    ``(N, tokens_per_step, seed, s)``. From the last hidden state at those positions it reads the
    model's final log-probabilities (no gradient there); for each trained layer it reads that
    layer's ``lens_log_probs``; the step's loss is the sum over the trained layers of
    ``kl_to_final``, and one Adam step (learning rate ``lr``) moves the trained translators,
    never the model. A progress bar (tqdm, shown when ``progress``) counts the steps.

    ``steps`` is the total number of steps of the run. ``translators`` may be fresh
    (``make_translators``) or a result of this function: training then goes on from where that
    one stopped, its Adam state included, up to ``steps`` in all (a finished run does nothing);
    resumed in any number of calls it gives what one call gives. Ctrl-C ends the call after the
    step it is in, returning everything done so far: call again with that to go on. The dict
    given is never changed in place, and the model is left as it was: no ``.grad`` on its
    parameters, their ``requires_grad`` as they were.

    Returns a new dict of plain data: ``"A"`` and ``"b"``, new lists of new tensors as
    ``make_translators`` makes them, the trained layers' moved; ``"layers"``, the trained hidden
    states, sorted; ``"steps_done"``, an int; ``"losses"``, the loss of every step done so far
    (floats); ``"optimizer"``, Adam's state, as tensors, numbers and dicts (``state_dict()``
    gives it). Raises ``ValueError`` when
    ``layers`` is empty, when ``tokens_per_step`` is below 1, or when a run is resumed with
    other ``layers`` than it was started with; ``IndexError`` naming the valid range for a layer
    that has no translator.

    Hint: Adam needs leaf tensors of its own that require grad: copies of the chosen layers'
    A and b, which the lens reads in place of the given ones.

    On the models: figure 16's recipe trains hidden states 0, 5, 10, 15, 20 and 25 of SmolLM2
    for 200 steps of 32 tokens at a learning rate of 3e-3, seed 0: about a minute on one CPU
    thread. Each translator's training is independent of the others' (the loss is a sum, Adam
    works number by number, the batches depend on the seed and the step only), so training 6
    layers teaches at those 6 exactly what training all 30 would. The loss, summed over the 6,
    falls from about 160 to about 14.

    Post: beyond the post: the paper's recipe (Belrose et al. 2023) at the scale of a laptop.
    """
    raise NotImplementedError


def next_token_ranks(model, translators, part):
    """How each hidden state ranks the true next token under a lens, at every position of a part.

    ``part`` is one part of ``collect``'s result (``"held_out"`` to judge a lens, ``"train"`` to
    see what it memorised). Each hidden state is read with ``lens_log_probs`` under these
    translators: fresh ones (``make_translators``) make it the logit lens, trained ones the tuned
    lens. A rank counts the tokens with a strictly higher log-probability than the true next
    token (0 is the top). Nothing here needs gradients, and the logits of all layers and
    positions at once would not fit in memory (SmolLM2's held-out part: 31 x 678 x 49,152
    floats, 4 GB): read a few hundred positions of one layer at a time.

    Returns an int64 tensor ``(n_layers + 1, N)``.

    Hint: Exercise 5's true_token_ranks, with the lens of each layer read from the part's own
    hidden states and next ids.

    On the models: on SmolLM2's held-out samples the logit lens's median rank is 164, 130 and
    93 at hidden states 10, 15 and 20 (after blocks L9, L14 and L19); with figure 16's recipe
    the tuned lens's is at least 2 times lower there (measured: 52, 36 and 18), and at least 20
    times lower at the embeddings (5,416 against 135). On the 18 texts it was trained on, the
    same tuned lens ranks the true token 13, 3 and 2 at the embeddings and hidden states 10 and
    20: far better than on texts it never saw, which is why a lens is judged on held-out text.

    Post: exercise 5's figure 13, for many texts and two lenses.
    """
    raise NotImplementedError


# Given: the tick labels of exercise 1.
def _layer_names(n_hidden_states):
    """``["Emb", "L0", "L1", ...]``: the hidden state after block i is called Li."""
    return ["Emb"] + [f"L{block}" for block in range(n_hidden_states - 1)]


def plot_tuned_lens(logit_ranks, tuned_ranks, logit_row, tuned_row, tokenizer, layers=None,
                    position_label=""):
    """Figure 16: the logit lens against the tuned lens.

    Left panel: the median rank of the true next token plus 1 (a log axis cannot show 0) per
    hidden state, from ``next_token_ranks`` ``(n_layers + 1, N)`` of each lens, on a logarithmic
    y axis: the logit lens at every hidden state (x = 0 .. n_layers), the tuned lens at the
    hidden states it was trained at (``layers``, default every one but the last) and at the last
    one, where both lenses are the model's output. Both lines are labelled ("logit lens", "tuned
    lens") in a legend; the x ticks are ``"Emb", "L0", "L1", ...``. Right panel: one position
    read through the same drawn layers, ``logit_row`` and ``tuned_row`` its log-probabilities
    ``(n_layers + 1, vocab_size)`` under each lens: an image of two columns (the logit lens,
    then the tuned lens) and one row per drawn layer, the first at the bottom, each cell the top
    log-probability, with the top token's text (cut to 8 characters) written in it, and a
    colorbar; ``position_label`` goes into its title.

    Returns the ``matplotlib.figure.Figure``. Raises ``IndexError`` naming the valid range for a
    layer that is not a hidden state (``kata.layer_index`` checks it).

    Hint: Two panels side by side; the right one is exercise 5's logit-lens picture with the two
    lenses as its columns and only the drawn layers as its rows.

    On the models: on SmolLM2 the tuned curve lies under the logit curve at every trained layer,
    40 times lower at the embeddings and 3 to 5 times in the middle blocks; at the Kafka text's
    last position the logit lens says punctuation from L4 to L24 ("," but "-" after L14), the
    tuned lens words (" of", " valu", " red", " white", " man").

    Post: figures 12 and 13 of exercise 5, with the tuned lens beside the logit lens.
    """
    raise NotImplementedError
