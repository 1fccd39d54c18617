# Source of notebooks/ex6_activation_patching.ipynb (jupytext percent format).
# Edit this file, then run `python grader.py generate`; the .ipynb is generated.

# %% [markdown]
# # Exercise 6: activation patching, where the model keeps "Paris"
#
# The post's demo 3 scaled a block's whole output and watched one log-probability fall. Here we
# ask a sharper question: *which* hidden state carries a fact? Two prompts of the same length
# differ only in the landmark. We run the corrupted one, paste in one hidden state (one block, one
# position) from the clean run, and measure how much of the clean answer comes back. You write
# the functions in `exercises/ex6_activation_patching.py`; a function you have not written yet
# does not crash a cell, the cell says which one to write. The last cell grades the exercise.

# %% tags=["setup"]
# (set-up: course/shared/notebook_setup.py)

# %%
import torch

import kata
from grading.views.notebook import check, exercise, expect, load_model, show

ex = exercise(6)  # your exercises/ex6_activation_patching.py (its solution.py with KATA_IMPL=solutions)
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2 (a trained model matters here)

# %% [markdown]
# ## Two prompts, two answers, one metric
#
# The metric is `log p(" Paris") - log p(" Rome")` for the token after the prompt.

# %%
clean_ids = tokenizer(kata.CLEAN_PROMPT, return_tensors="pt")["input_ids"]
corrupted_ids = tokenizer(kata.CORRUPTED_PROMPT, return_tensors="pt")["input_ids"]
good_id = tokenizer(kata.CLEAN_ANSWER, add_special_tokens=False)["input_ids"][0]
bad_id = tokenizer(kata.CORRUPTED_ANSWER, add_special_tokens=False)["input_ids"][0]
print("clean:    ", [tokenizer.decode([i]) for i in clean_ids[0]])
print("corrupted:", [tokenizer.decode([i]) for i in corrupted_ids[0]])
with torch.no_grad():
    clean_logits, corrupted_logits = model(clean_ids).logits[0], model(corrupted_ids).logits[0]
print("metric on the clean prompt:    ", ex.logit_difference(clean_logits, good_id, bad_id).item())
print("metric on the corrupted prompt:", ex.logit_difference(corrupted_logits, good_id, bad_id).item())
expect(
    gpt2="11 tokens each; the clean metric positive, the corrupted one negative.",
    smollm2="10 tokens each; 4.81 on the clean prompt, -9.06 on the corrupted one.",
    tiny="11 tokens each; random weights, so the two metrics are small and mean nothing.",
)

# %% [markdown]
# ## The map: every (block, position), patched one at a time
#
# `patching_effect` runs the corrupted prompt once per cell (300 passes on SmolLM2: minutes on a
# laptop); `fast_patching_effect` gets the same numbers from one pass. The next cell times both,
# and counts the loop's forward passes as they happen (a hook of this notebook's own on the
# model, removed afterwards), so you see how far it is.

# %%
import time

from tqdm.auto import tqdm

started = time.perf_counter()
effect = ex.fast_patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id)
print(f"fast_patching_effect: {time.perf_counter() - started:.1f} s, shape {tuple(effect.shape)}")
passes = len(kata.blocks(model)) * clean_ids.shape[1] + 2  # one per cell, and the two prompts
with tqdm(total=passes, desc="patching_effect", unit="pass") as bar:

    def count_pass(module, inputs):
        bar.update(1)  # and return None: a pre-hook that returns a value replaces the inputs

    counting = model.register_forward_pre_hook(count_pass)
    try:
        started = time.perf_counter()
        slow = ex.patching_effect(model, clean_ids, corrupted_ids, good_id, bad_id)
    finally:
        counting.remove()
print(f"patching_effect:      {time.perf_counter() - started:.1f} s; largest difference "
      f"{(slow - effect).abs().max().item():.1e}")
expect(
    smollm2="The loop takes several times longer; the largest difference is below 1e-4.",
)

# %% [markdown]
# ## Figure 14: where the clean answer comes back

# %% tags=["figure"]
labels = [a if a == b else f"{a}/{b}" for a, b in zip(
    [tokenizer.decode([i]) for i in clean_ids[0]], [tokenizer.decode([i]) for i in corrupted_ids[0]])]
show(ex.plot_patching_effect(effect, labels))
expect(
    gpt2="The literature's pattern (Meng et al. 2022; not measured here): the subject's last token "
         "in the early and middle blocks, the last position in the late blocks.",
    smollm2="Two red stripes: ' iffel' restores 0.70-0.90 in blocks 0-22 (' Tower' about 0.30), "
            "then the last token ' of' 0.82-0.91 from block 23 on (' in' about 0.27). The fact is "
            "read at the subject first, and moved to the position that predicts between blocks "
            "22 and 23.",
)

# %% [markdown]
# ## Check your exercise
#
# The kata's tests for exercise 6, run on your saved file as the grader runs them. Edit
# `exercises/ex6_activation_patching.py`, save, and run this cell again.

# %% tags=["check"]
check(6)
