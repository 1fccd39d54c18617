# Source of notebooks/ex8_tuned_lens.ipynb (jupytext percent format).
# Edit this file, then run `python grader.py generate`; the .ipynb is generated.

# %% [markdown]
# # Exercise 8 (bonus): the tuned lens, trained on your own CPU
#
# Exercise 5 ended on a cliffhanger: through the final norm and the unembedding, SmolLM2's middle
# hidden states look nearly blind. The tuned lens (Belrose et al. 2023) gives every hidden state
# but the last a small affine translator, `h + A h + b`, trained so that the lens's distribution
# matches the model's own output. `A` and `b` start at zero: the untrained tuned lens *is* the
# logit lens, and whatever it gains, training found. You write the functions in
# `exercises/ex8_tuned_lens.py`; a function you have not written yet does not crash a cell, the
# cell says which one to write. The last cell grades the exercise.

# %% tags=["setup"]
# (set-up: course/shared/notebook_setup.py)

# %%
import time

import torch

import kata
from course.ex8_tuned_lens.samples import load_samples
from grading.views.notebook import attempt, check, exercise, expect, load_model, show

ex = exercise(8)  # your exercises/ex8_tuned_lens.py (solutions/ with KATA_IMPL=solutions)
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2 (a trained model matters here)

# %% [markdown]
# ## The texts: the model's own
#
# 24 prompts written for the kata, each continued by SmolLM2 itself (seeded sampling, generated
# once and shipped with the exercise). `collect` reads them and keeps every hidden state of every
# position with the token that follows it; the last 6 texts are held out, to judge the lens on
# text it never trained on.

# %%
texts = load_samples(tokenizer, kata.context_length(model))
print(f"{len(texts)} texts; the first begins: {texts[0][:90]!r}...")
started = time.perf_counter()
data = ex.collect(model, tokenizer, texts)
print(f"collected in {time.perf_counter() - started:.1f} s")
for name in ("train", "held_out"):
    print(attempt(lambda: f"{name:>8}: hidden {tuple(data[name]['hidden'].shape)}, "
                          f"next ids {tuple(data[name]['next_ids'].shape)}"))
expect(
    smollm2="train: hidden (31, 2258, 576); held_out: hidden (31, 678, 576); a few seconds.",
    gpt2="13 hidden states of 768 numbers per position (GPT-2 tokenizes the texts its own way).",
    tiny="5 hidden states of 64 numbers; the texts are cut to the tiny model's 128 tokens.",
)

# %% [markdown]
# ## At the start, the tuned lens is the logit lens
#
# `make_translators` gives every translator `A = 0`, `b = 0`: `translate` then returns its input
# bit for bit. The held-out ranks of the true next token under these fresh translators are
# exercise 5's logit lens, on the model's own text.

# %%
fresh = ex.make_translators(model)
probe = min(10, len(kata.blocks(model)) - 1)  # a hidden state that has a translator
states = data["held_out"]["hidden"][probe]
translated = ex.translate(fresh, states, probe)
print("translate returns its input exactly:", attempt(lambda: torch.equal(translated, states)))
logit_ranks = ex.next_token_ranks(model, fresh, data["held_out"])
logit_medians = attempt(lambda: logit_ranks.float().median(dim=1).values)
print("logit lens, held-out median rank per hidden state:",
      attempt(lambda: logit_medians.int().tolist()))
expect(
    smollm2="True; about 5,400 at the embeddings, 286 to 104 through hidden states 1 to 19, "
            "93 at 20, 2 at the output.",
    gpt2="True; the ranks fall from the middle blocks on (GPT-2's logit lens reads early).",
    tiny="True; random weights: ranks in the tens of thousands everywhere.",
)

# %% [markdown]
# ## Training: every 5th hidden state, 200 steps of 32 tokens
#
# The translators are independent of each other (the loss is a sum, Adam works number by
# number), so training six of SmolLM2's thirty teaches at those six exactly what training all
# would, for a fifth of the time: about a minute on one CPU thread. The progress bar counts the
# steps. Interrupt the cell whenever you like (the stop button, or Ctrl-C): the result so far is
# kept, and the cell after it goes on from there.

# %%
LAYERS = list(range(0, len(kata.blocks(model)), 5))
STEPS = 200
started = time.perf_counter()
state = ex.train_tuned_lens(model, fresh, data, layers=LAYERS, steps=STEPS)
print(f"layers {LAYERS}: {time.perf_counter() - started:.0f} s")

# %% [markdown]
# Run this cell to go on after an interruption; on a finished run it does nothing.

# %%
state = ex.train_tuned_lens(model, state, data, layers=LAYERS, steps=STEPS)
losses = attempt(lambda: state["losses"])
print(attempt(lambda: f"{state['steps_done']} steps; loss {losses[0]:.1f} at the first, "
                      f"{sum(losses[-20:]) / len(losses[-20:]):.1f} over the last 20"))
expect(
    smollm2="200 steps; the loss (summed over the 6 layers) falls from about 160 to about 14.",
    tiny="200 steps at hidden state 0; random weights, so there is little to learn.",
)

# %% [markdown]
# ## On held-out text: the tuned lens against the logit lens

# %%
tuned_ranks = ex.next_token_ranks(model, state, data["held_out"])
tuned_medians = attempt(lambda: tuned_ranks.float().median(dim=1).values)
for layer in LAYERS + [len(kata.blocks(model))]:
    print(attempt(lambda: f"hidden state {layer:2d}: logit lens {logit_medians[layer]:6.0f}, "
                          f"tuned lens {tuned_medians[layer]:5.0f}, "
                          f"{logit_medians[layer] / tuned_medians[layer].clamp(min=1):4.1f}x lower"))
expect(
    smollm2="The tuned lens at least 2 times lower at hidden states 10, 15 and 20 (about 52, 36 "
            "and 18 against 164, 130 and 93), 40 times at the embeddings (135 against 5,416); "
            "the same at the output, where both lenses are the model.",
)

# %% [markdown]
# ## What a translator learns by heart
#
# The paper's warning: a translator can carry information of its own. Each of SmolLM2's has
# 332,352 numbers for 2,258 training positions. On (the first 678 positions of) the texts it was
# trained on, the same lens ranks the true token far better than on the held-out texts: that is
# memorising, and why a lens is judged on text it never saw.

# %%
seen = attempt(lambda: {"hidden": data["train"]["hidden"][:, :678],
                        "next_ids": data["train"]["next_ids"][:678]})
seen_medians = attempt(lambda: ex.next_token_ranks(model, state, seen).float().median(dim=1).values)
for layer in LAYERS:
    print(attempt(lambda: f"hidden state {layer:2d}: held out {tuned_medians[layer]:5.0f}, "
                          f"trained on {seen_medians[layer]:5.0f}"))
expect(
    smollm2="Held out 135, 91, 52, 36, 18, 7; on the texts trained on, 20, 3, 3, 2, 2, 2.",
)

# %% [markdown]
# ## Figure 16: the two lenses, layer by layer
#
# Left, the median rank of the true next token on the held-out texts (1 = top, log scale); the
# tuned lens is drawn where it was trained. Right, the Kafka text's last position ("...into a
# gigantic") read through the same layers under both lenses, like exercise 5's figure 12.

# %% tags=["figure"]
ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
with torch.no_grad():
    last = torch.stack(model(ids, output_hidden_states=True).hidden_states)[:, 0, -1]


def position_rows(translators):
    """The last position under a lens: one row of log-probabilities per hidden state."""
    with torch.no_grad():
        return torch.stack([ex.module.lens_log_probs(model, translators, h, i)
                            for i, h in enumerate(last)])


logit_row, tuned_row = attempt(position_rows, fresh), attempt(position_rows, state)
show(ex.plot_tuned_lens(logit_ranks, tuned_ranks, logit_row, tuned_row, tokenizer, layers=LAYERS,
                        position_label='after "...into a gigantic"'))
expect(
    smollm2="The tuned curve under the logit curve at every trained layer. At the Kafka text's "
            "last position the logit lens says punctuation from L4 to L24 (',' but '-' after "
            "L14); the tuned lens says words (' of', ' valu', ' red', ' white', ' man'), though "
            "not yet ' insect' (its rank improves from 12,604 to 7,990 after L14, no more).",
)

# %% [markdown]
# ## Check your exercise
#
# The kata's tests for exercise 8, run on your saved file as the grader runs them. Edit
# `exercises/ex8_tuned_lens.py`, save, and run this cell again.

# %% tags=["check"]
check(8)
