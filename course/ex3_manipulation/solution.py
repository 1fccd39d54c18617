"""Exercise 3: manipulating hidden states with a scaling hook.

The post: "LLM breakdown 4/6: Transformer outputs (hidden states)", in Mike X Cohen's Substack
series *LLM breakdown*; his notebook for it is `MLonLLMs/LLMbreakdown_4_hiddenStates.ipynb` in the
public repository `mikexcohen/Substack`. This kata retells its demos in its own words.

Post: "Python demo 3: Manipulating hidden states" (figures 10 and 11).

The model reads the opening of Kafka's *The Metamorphosis*, cut just before the word it must
predict (``kata.KAFKA_TEXT``), and we watch the log-probability it gives to ``" insect"``. Then we
change the model while it runs: a forward hook multiplies one transformer block's output by 0.8, we
measure the target's log-probability again, remove the hook, and move on to the next block. The
result (figure 11) shows which blocks the prediction depends on.

You will write:

* ``text_stats`` and ``target_token_id``: what the text and the target look like as tokens;
* ``next_token_log_probs`` and ``top_next_tokens``: the clean prediction (figure 10);
* ``make_scaling_hook``: a hook that replaces a block's output with a scaled copy;
* ``scaling_experiment``: one scaled block at a time, every hook removed afterwards;
* ``plot_scaling_experiment``: figure 11.

Two facts about the library matter here. A GPT-2 block returns a tuple in transformers up to 5.2
and a plain tensor from 5.3 on (Llama-family blocks return a tensor), so the hook must handle both.
And a hook is global state on the module: one that is not removed, also when the forward pass
raises, keeps changing every later run of the model.
"""

import matplotlib.pyplot as plt  # for plot_scaling_experiment
import torch  # torch.no_grad, torch.log_softmax, torch.topk

import kata  # kata.blocks, kata.context_length


def text_stats(tokenizer, text):
    """Count the characters and the tokens of ``text``.

    Returns a dict with four ints: ``chars`` (characters), ``unique_chars`` (distinct characters),
    ``tokens`` (token ids the tokenizer makes of the text) and ``unique_tokens`` (distinct token
    ids).

    Hint: Count the characters of the text itself, and the token ids the tokenizer makes of it;
    a distinct one counts once however often it comes.

    On the models: for ``kata.KAFKA_TEXT``, GPT-2's tokenizer gives 109, 25, 22, 22 and SmolLM2's
    109, 25, 23, 23 (it makes 23 tokens).

    Post: demo 3, the text statistics printed before figure 10.
    """
    ids = tokenizer(text)["input_ids"]
    return {
        "chars": len(text),
        "unique_chars": len(set(text)),
        "tokens": len(ids),
        "unique_tokens": len(set(ids)),
    }


def target_token_id(tokenizer, word):
    """The id of the single token that spells ``word``.

    GPT-2-style tokenizers fold the space before a word into the token, so ``" insect"`` (id 12833
    in GPT-2) and ``"insect"`` (two pieces, ``"in"`` + ``"sect"``) differ. The experiment reads one
    log-probability, so the word must be exactly one token; a longer word is an error, never
    silently cut to its first piece. The pieces are those of the word alone, without the special
    tokens some tokenizers add around a text.

    Returns an ``int``. Raises ``ValueError`` for a word that is not exactly one token, with a
    message that lists the pieces the tokenizer made (``['in', 'sect']``), each as the text it
    decodes to.

    Hint: A target word must be exactly one token; mind the leading space, as in ' insect'.

    Post: demo 3, the target token " insect".
    """
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = [tokenizer.decode([token_id]) for token_id in ids]
        raise ValueError(
            f"{word!r} is {len(ids)} tokens, not one: {pieces}. "
            f"Pick a word that is a single token (mind the leading space, as in ' insect')."
        )
    return ids[0]


def _next_token_logits(model, input_ids):
    """The model's logits for the token that follows ``input_ids``: shape ``(vocab_size,)``.

    Shared by ``next_token_log_probs`` and ``top_next_tokens``. Accepts one sequence as
    ``(1, T)`` (what ``tokenizer(text, return_tensors="pt")`` gives) or ``(T,)``.
    """
    input_ids = kata.one_sequence(input_ids, model)  # (1, T) on the model's device, checked
    with torch.no_grad():  # no autograd graph: we only read the prediction
        logits = model(input_ids).logits  # (1, T, vocab_size)
    # Only the last position predicts the next token. (transformers can skip computing the
    # other positions with logits_to_keep=1; taking [0, -1] keeps this readable.)
    return logits[0, -1].float().cpu()


def next_token_log_probs(model, input_ids):
    """Log-probabilities of every possible next token after ``input_ids``.

    ``input_ids`` is one sequence, shape ``(1, T)`` as the tokenizer returns it, or ``(T,)``. The
    model's output ``.logits`` holds, for every position, one raw score per vocabulary token (a
    logit), shape ``(1, T, vocab_size)``. The prediction for the token after the text is at the
    *last* position; log-softmax over the vocabulary turns its logits into log-probabilities
    (softmax gives probabilities, and the post measures their logarithm). Nothing here needs
    gradients.

    Returns a float32 CPU tensor of shape ``(vocab_size,)`` whose ``exp()`` sums to 1, with no
    autograd graph. Raises ``ValueError`` for an empty input, one longer than the model's context
    (``kata.context_length``) or more than one sequence (``kata.one_sequence`` checks all three).

    Hint: The model's prediction for the next token is in the logits of the last position.

    On the models: the clean log-probability of " insect" after the Kafka text is about -4.71 on
    SmolLM2 (GPT-2's is in figure 11 of the post).

    Post: demo 3, the clean log-softmax value of " insect".
    """
    return torch.log_softmax(_next_token_logits(model, input_ids), dim=-1)


def top_next_tokens(model, tokenizer, input_ids, k=21):
    """The ``k`` most likely next tokens after ``input_ids``, as figure 10 lists them.

    The same forward pass as ``next_token_log_probs``, read before log-softmax: the last position's
    raw logits, the ``k`` largest first, with the tokens they belong to. (A small helper shared by
    the two functions keeps the input checks in one place.)

    Returns a list of ``k`` pairs ``(token text, logit)``, highest logit first, e.g. ``(" insect",
    9.93)`` for SmolLM2. The text is the token decoded on its own, which keeps its leading space;
    the logit is a Python float.

    Hint: The same last-position logits as next_token_log_probs, ranked.

    On the models: " insect" is 15th of 21 on GPT-2 and 9th on SmolLM2, in lists full of creatures
    (" spider", " creature", " dragon", " worm" on SmolLM2).

    Post: demo 3, figure 10.
    """
    logits = _next_token_logits(model, input_ids)  # (vocab_size,)
    top = torch.topk(logits, k)
    return [
        (tokenizer.decode([token_id]), value)
        for token_id, value in zip(top.indices.tolist(), top.values.tolist())
    ]


def make_scaling_hook(factor):
    """A forward hook that replaces a block's output with the output times ``factor``.

    Exercise 1's hooks only looked at a block's output; a forward hook that *returns* a value
    replaces it: PyTorch calls the hook with the module, its inputs and its output after the block
    runs, and what the hook returns is what the block outputs. The block's output may be

    * a tensor ``(batch, T, d_model)`` (GPT-2 from transformers 5.3, Llama-family models): the
      hook returns that tensor times ``factor``;
    * a tuple whose first element is that tensor (GPT-2 up to transformers 5.2): the hook returns
      a tuple with the first element scaled and the others unchanged.

    The hook builds new tensors out of place: scaling in place (``mul_``, ``*=``) would also change
    the tensor the block and other hooks still hold. Tell the two kinds of output apart by their
    type: the first element of a tensor is the first row of the batch, not "the hidden states".

    Returns the hook, a function of ``(module, inputs, output)``.

    Hint: A forward hook that returns a value replaces the module's output.

    Post: demo 3, the hook function (steps 3a-3c).
    """

    def scale_output(module, inputs, output):
        if isinstance(output, tuple):
            return (output[0] * factor, *output[1:])
        return output * factor

    return scale_output


def scaling_experiment(model, input_ids, target_id, factor=0.8):
    """The target's log-probability with each block's output scaled, one block at a time.

    Entry i is the log-probability of ``target_id`` (``next_token_log_probs``) while block i of
    ``kata.blocks`` has its output scaled by ``factor`` (``make_scaling_hook``): only that one
    block is scaled in that run. Hooks already on a block see its scaled output: transformers 5
    keeps hooks of its own on the blocks to record ``output_hidden_states``, and they must record
    what the scaled run computed. Every hook it adds is removed before it returns, even when a
    forward pass raises, so the model's hooks end exactly as they were, and the error passes on.
    Scaling the *last* block barely changes anything: the final norm divides its input by its own
    size, so a global factor cancels out (up to the norm's epsilon).

    Returns a float32 tensor of shape ``(n_layers,)``, one value per block, with no autograd graph.
    Raises ``ValueError`` if ``target_id`` is not a token id of the model (``kata.token_id``
    checks it).

    Hint: One run per block: scale that block's output only, measure the target's log-probability,
    undo the hook.

    On the models: on GPT-2 most blocks, scaled by 0.8, lower the target's log-probability; on
    SmolLM2 27 of 30 do (the biggest drops come from blocks 19 to 27), and the last block changes
    nothing, because the final norm undoes any scale.

    Post: demo 3, the experiment loop (steps 1-7) and figure 11.
    """
    target_id = kata.token_id(target_id, model.config.vocab_size)  # ValueError if no token
    hook = make_scaling_hook(factor)
    model_blocks = kata.blocks(model)
    values = torch.empty(len(model_blocks), dtype=torch.float32)
    for i, block in enumerate(model_blocks):
        handle = block.register_forward_hook(hook, prepend=True)
        try:
            values[i] = next_token_log_probs(model, input_ids)[target_id]
        finally:
            handle.remove()
    return values


def plot_scaling_experiment(values, clean_value):
    """Figure 11: the target's log-probability for each scaled block, against the clean run.

    ``values``: shape ``(n_layers,)``, from ``scaling_experiment``; ``clean_value``: the target's
    log-probability without any hook. One marker per block at x = block index (0, 1, ...), and a
    dashed horizontal line at ``clean_value`` whose label, shown in a legend, gives the number; x
    label "Transformer block", y label "Log softmax". A wide figure, about 9 by 3 inches.

    Returns the ``matplotlib.figure.Figure``.

    Hint: One marker per block, and a dashed line at the clean value to compare with.

    Post: demo 3, figure 11.
    """
    values = [float(v) for v in values]
    blocks = list(range(len(values)))
    fig, ax = plt.subplots(figsize=(9, 3))
    ax.plot(blocks, values, "o", markersize=8, label="one block's output scaled")
    ax.axhline(clean_value, linestyle="--", color="gray", label=f"clean: {clean_value:.3f}")
    ax.set_xticks(blocks)
    ax.set_xlabel("Transformer block")
    ax.set_ylabel("Log softmax")
    ax.set_title("Log softmax of the target token when one block's output is scaled")
    ax.legend()
    fig.tight_layout()
    return fig
