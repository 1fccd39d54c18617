# Your exercise file: replace each `raise NotImplementedError` with your code.
# Generated from course/ex4_fast_scaling/solution.py by `python grader.py generate`.
# (Maintainers: edit the solution and regenerate, not this file.)
"""Exercise 4 (bonus): the scaling experiment in one forward pass.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's Substack
series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb` in the
public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

Post: "Python demo 3: Manipulating hidden states" (figure 11), made fast.

Exercise 3's ``scaling_experiment`` runs the whole model once per block: 30 forward passes for
SmolLM2, each computing logits for every position. Three observations make it much cheaper without
changing a single result:

1. **Rows of a batch do not interact.** A transformer attends only within its own sequence, so a
   batch whose row ``i`` is scaled at block ``i`` gives row ``i`` exactly what a separate run
   would. One batched pass replaces the loop.
2. **Before block ``i`` a row is still the clean run.** Scaling happens at the output of block
   ``i``, so every block before it computes the same numbers as the clean model. Start with the
   one clean row and, after each block, append a scaled copy of the clean row: block ``j``
   processes only the rows that have already diverged, plus the clean one.
3. **Only the last position predicts the next token.** The unembedding (``d_model x vocab``) is
   the single largest matrix; apply it to the last position's vector only.

You will write ``fast_scaling_experiment``; it must agree with ``scaling_experiment`` to 1e-4.
"""

import torch  # noqa: F401

import kata  # noqa: F401


def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    """``scaling_experiment``'s values, from one forward pass that grows its batch block by block.

    ``input_ids`` is one sequence, ``(1, T)`` or ``(T,)``; ``target_id`` the token whose
    log-probability is measured; ``factor`` the scale applied to one block's output per row. The
    batch starts as the one clean sequence, and a forward hook on every block adds one row to what
    the block outputs: a copy of the clean row (row 0) times ``factor``. After block ``j`` the
    batch holds the clean row followed by the rows scaled at blocks ``0 .. j``, so block ``j`` runs
    on ``j + 1`` rows, never on a row that would only repeat the clean one (trick 2). Rows never
    mix (trick 1). Only the last position's vectors go through the unembedding (trick 3); each
    row's log-softmax then gives one value, and the clean row is not one of the answers. A block
    may return a tuple (transformers up to 5.2) or a tensor.

    Returns a float32 CPU tensor of shape ``(n_layers,)``: entry ``i`` is the target's
    log-probability with block ``i``'s output scaled, as in ``scaling_experiment``. Every hook is
    removed before returning, also when the forward pass raises. Raises ``ValueError`` when
    ``target_id`` is not a token id of the model (say "token id" in the message) or when the input
    is empty or longer than the model's context (``kata.one_sequence`` checks the input for you,
    ``kata.token_id`` the id).

    Hint: Rows of a batch never interact, and before block i a row is still the clean run: start
    with one clean row and, after each block, append a scaled copy of the clean row.

    On the models: it agrees with ``scaling_experiment`` to 1e-4, at a fraction of its cost.

    Post: demo 3, the experiment loop and figure 11.
    """
    raise NotImplementedError
