"""Exercise 8's figure: the logit lens against the tuned lens on held-out text (figure 16).

The figure's recipe: the shipped samples (``samples.py``), collected; the translators of every
5th hidden state (0, 5, 10, 15, 20 and 25 on SmolLM2) trained for 200 steps of 32 tokens at a
learning rate of 3e-3, seed 0 (about a minute on one CPU thread); both lenses' ranks on the
held-out texts; and the Kafka text's last position read through both. The tiny GPT-2, whose
weights are random, gets 20 steps: the machinery runs, there is nothing to learn.
"""

import torch

import kata
from course.ex8_tuned_lens.samples import load_samples

#: Figure 16's training, on a trained model.
RECIPE = {"steps": 200, "tokens_per_step": 32, "lr": 3e-3, "seed": 0}
EVERY = 5  # figure 16 trains every 5th hidden state that has a translator
POSITION_LABEL = 'after "...into a gigantic"'


def fig16(f, inputs):
    model, tokenizer = inputs.model, inputs.tokenizer
    data = f.collect(model, tokenizer, load_samples(tokenizer, kata.context_length(model)))
    layers = list(range(0, len(kata.blocks(model)), EVERY))  # 0, 5, 10, ...
    steps = 20 if getattr(model, "kata_name", "") == "tiny-gpt2" else RECIPE["steps"]
    state = f.train_tuned_lens(model, f.make_translators(model), data, layers=layers,
                               **{**RECIPE, "steps": steps})
    fresh = f.make_translators(model)
    logit_ranks = f.next_token_ranks(model, fresh, data["held_out"])
    tuned_ranks = f.next_token_ranks(model, state, data["held_out"])
    last = inputs.hidden_states(kata.KAFKA_TEXT)[:, -1]  # (n_layers + 1, d_model)
    with torch.no_grad():
        logit_row = torch.stack([f.lens_log_probs(model, fresh, h, i) for i, h in enumerate(last)])
        tuned_row = torch.stack([f.lens_log_probs(model, state, h, i) for i, h in enumerate(last)])
    return f.plot_tuned_lens(logit_ranks, tuned_ranks, logit_row, tuned_row, tokenizer,
                             layers=layers, position_label=POSITION_LABEL)
