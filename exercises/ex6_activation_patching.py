# Your exercise file: replace each `raise NotImplementedError` with your code.
# Generated from course/ex6_activation_patching/solution.py by `python grader.py generate`.
# (Maintainers: edit the solution and regenerate, not this file.)
"""Exercise 6: activation patching: where the model keeps "Paris".

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's
Substack series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb`
in the public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

The post's demo 3 scales one block's output and watches one log-probability fall: a blunt
intervention. Interpretability's standard tool for asking *where* a hidden state carries a fact
is activation patching, also called causal tracing (Meng et al. 2022, "Locating and Editing
Factual Associations in GPT"; Heimersheim and Nanda 2024, "How to use and interpret activation
patching"). Two prompts of the same length differ only in the fact:

* clean: "The Eiffel Tower is located in the city of" (``kata.CLEAN_PROMPT``) -> " Paris";
* corrupted: "The Colosseum is located in the city of" (``kata.CORRUPTED_PROMPT``) -> " Rome".

Run the corrupted prompt, paste in one hidden state from the clean run (the output of block
``l`` at position ``p``), and measure how much of the clean answer comes back. The measure is
the logit difference ``log p(" Paris") - log p(" Rome")`` at the last position, normalised so
that 0 is the corrupted run and 1 the clean one. One number per (block, position): a map of
where the fact lives.

You will write:

* ``logit_difference``: the metric, from the logits;
* ``patch_hook``: a forward hook that replaces one position of a block's output;
* ``patching_effect``: the map, one patched run per (block, position), every hook removed;
* ``fast_patching_effect``: the same map from two forward passes that reuse what no patch changes;
* ``plot_patching_effect``: figure 14, the map as a heatmap.

Shapes: ``n_layers`` blocks, T tokens (the same T for both prompts), ``d_model`` numbers per
vector. "Block ``l``'s output" is hidden state ``l + 1``: ``hidden_states[0]`` is the embeddings.

The patching tests run many forward passes, and a fresh ``pytest`` loads the models and
computes the expected maps first: on a busy machine that takes a while. ``python grader.py watch
--warm`` keeps them loaded and runs the tests again each time you save (here and in exercise 7).
"""

import matplotlib.pyplot as plt  # noqa: F401 - for plot_patching_effect
import torch  # noqa: F401

import kata  # noqa: F401 - kata.blocks, kata.one_sequence, kata.token_id


def logit_difference(logits, good_id, bad_id):
    """The metric: ``log p(good) - log p(bad)`` for the token after the text.

    ``logits``: the model's output logits, ``(T, vocab_size)`` for one text or
    ``(batch, T, vocab_size)`` for a batch. Only the last position predicts the next token. The
    log-softmax subtracts the same number from every logit of a row, so the difference of the two
    log-probabilities is also the difference of the two raw logits; the difference of two
    *probabilities* is a different metric.

    Returns a float32 tensor: shape ``()`` for ``(T, vocab_size)`` logits, ``(batch,)`` for a
    batch; positive when the model prefers ``good_id``.
    Raises ``ValueError`` when ``logits`` has fewer than 2 dimensions, or when ``good_id`` or
    ``bad_id`` is not a token id (``0 .. vocab_size - 1``).

    Hint: The metric compares two next tokens, so it is read where the next token is predicted: the
    last position.

    On the models: on SmolLM2 the clean prompt gives 4.81 (" Paris" is its top token, log-prob
    -0.35) and the corrupted one -9.06 (" Rome", -0.32).

    Post: demo 3 measures one token's log-softmax; here, two tokens' difference.
    """
    raise NotImplementedError


def patch_hook(position, new_hidden):
    """A forward hook that writes ``new_hidden`` into one position of a block's output.

    ``position``: a token position (negative counts from the end); ``new_hidden``: the vector to
    write there, ``(d_model,)``, e.g. the clean run's output of the same block at that position.
    Registered on a block as a forward hook, it makes the block's output the same output with
    position ``position`` replaced by ``new_hidden`` in every row of the batch, every other
    position unchanged. Like exercise 3's scaling hook it handles both output forms (a tensor
    ``(batch, T, d_model)``, or a tuple with that tensor first) and works out of place: it builds
    a new tensor, because the block's output is also held by the tensor the model passes on, by
    other hooks and by any cache made from it.

    Returns the hook, a function of ``(module, inputs, output)``. When it runs, it raises
    ``IndexError`` if the output has no such position (``kata.token_index`` checks a position)
    and ``ValueError`` if ``new_hidden`` does not have the output's ``d_model``. Raises
    ``ValueError`` at once when ``new_hidden`` is not one vector.

    Hint: A forward hook that returns a value replaces the block's output: return the output with
    one position replaced, every other position as it was.

    Post: demo 3's hook replaced a block's whole output; this one replaces one position.
    """
    raise NotImplementedError


def patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id):
    """The activation-patching map: how much of the clean answer each (block, position) restores.

    Cell ``(l, p)`` answers one question: run the corrupted prompt with the output of block ``l``
    at position ``p`` replaced by the clean run's (``patch_hook``); how much of the clean answer
    comes back? The metric is ``logit_difference``, read on the clean run, on the corrupted run
    and on each patched run, and every cell is normalised as ``(patched - corrupted) / (clean -
    corrupted)``: 0 means the patch restored nothing, 1 that it restored the whole clean answer.

    The clean vectors are the blocks' own outputs: not ``output_hidden_states``, whose index 0 is
    the embeddings (block ``l``'s output is its entry ``l + 1``), and whose last entry has the
    final norm applied.

    Returns a float32 CPU tensor ``(n_layers, T)``: row ``l`` is block ``l``, column ``p`` the
    position. Every hook it adds is removed before it returns, also when a forward pass raises,
    so that the model's hooks end exactly as they were.
    Raises ``ValueError`` when the two prompts have different numbers of tokens (patching pairs
    position with position, so never truncate one), when the clean and the corrupted metrics are
    equal (nothing to restore), or when ``good_id`` or ``bad_id`` is not a token id.

    Hint: Three runs' worth of numbers: the clean run's block outputs (the cache) and its metric,
    the corrupted run's metric, then one corrupted run per (block, position) with one clean vector
    pasted in.

    On the models: on SmolLM2 (clean 4.81, corrupted -9.06), position 2 (``iffel`` / ``osse``)
    restores 0.70 to 0.90 in blocks 0 to 22 and position 3 (`` Tower`` / ``um``) about 0.30; from
    block 23 on the last position (`` of``) restores 0.82 to 0.91 (1.00 at the last block, where
    nothing is left to change it) and `` in`` about 0.27; position 1 restores 0.23 at block 0 only,
    and every other cell is within +-0.07. The fact sits at the subject's tokens early and moves
    to the last position between blocks 22 and 23. For GPT-2 the literature (Meng et al. 2022)
    reports the same pattern: the subject's last token in the early and middle blocks, the last
    position in the late ones.

    Post: demo 3 changed one block's whole output; patching changes one vector and asks what it
    carried.
    """
    raise NotImplementedError


def fast_patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id):
    """``patching_effect``'s map from two forward passes that never repeat a computation.

    Exercise 4's tricks, for patching:

    1. **Rows of a batch do not interact**, so every patched run can be one row of one batch.
    2. **Before block ``l`` a run patched at block ``l`` is still the corrupted run.** So nothing
       is computed twice: one run of the clean prompt gives the vectors to paste in, and one run
       of the corrupted prompt grows its batch as it goes: after each block, the runs patched
       there (one per position) join the rows it passes on, and the first row stays the
       corrupted run itself.
    3. **Only the last position predicts the next token**, so only the last position of each row
       needs unembedding.

    The map is normalised as ``patching_effect``'s is, with the clean metric and the corrupted
    row's.

    Returns a float32 CPU tensor ``(n_layers, T)``, equal to ``patching_effect``'s to 1e-4;
    every hook is removed before returning, also when a forward pass raises.
    Raises ``ValueError`` in the same cases as ``patching_effect``: prompts of different
    lengths, nothing to restore, an id that is not a token.

    Hint: As in exercise 4: a batch's rows never interact, and before block l a run patched at
    block l is still the corrupted run.

    On the models: on SmolLM2 the loop takes 300 forward passes; these two do about 40% of its
    arithmetic (the loop re-runs every block before the patch, and unembeds every position) and
    run at least 3 times faster.

    Post: demo 3's loop, made fast as in exercise 4.
    """
    raise NotImplementedError


def plot_patching_effect(effect, tokens):
    """Figure 14: the patching map as a heatmap, blocks by positions.

    ``effect``: ``(n_layers, T)`` from ``patching_effect``; ``tokens``: the T token texts of the
    prompt (each id decoded on its own; for two prompts that differ, such as ``"iffel/osse"``,
    any label will do). Draw ``effect`` as it is, one cell per (block, position), row ``l`` block
    ``l``, the last block at the top, with a diverging colormap centred on 0 (colour limits
    ``-m`` and ``m``, ``m`` the largest absolute value, at least 1): a patch that makes things
    worse is then blue and one that restores the answer red. Label the columns with the tokens
    (rotated 90 degrees), the rows ``"L0", "L1", ...``, the x axis "Position (token)", the y axis
    "Block", and add a colorbar labelled with what 0 and 1 mean.

    It must stay legible for 30 blocks: about 0.25 inch per block tall (and at least 4 inches,
    so that a model of a few blocks still has room for the colorbar's label).

    Returns the ``matplotlib.figure.Figure``.

    Hint: One image, blocks by positions, with a colormap that is neutral at 0: restoring is one
    colour, hurting the other.

    On the models: on SmolLM2 two red stripes: the subject's token ``iffel`` from block 0 to
    22, and the last token `` of`` from block 23 on, with fainter ones beside them (`` Tower``
    early, `` in`` late): the classic picture of Meng et al. 2022, which shows it on GPT-2.

    Post: a heatmap in the style of the post's similarity matrices (figures 7 and 8).
    """
    raise NotImplementedError
