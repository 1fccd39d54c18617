# Source of notebooks/ex4_fast_scaling.ipynb (jupytext percent format).
# Edit this file, then run `python grader.py generate`; the .ipynb is generated.

# %% [markdown]
# # Exercise 4 (bonus): the scaling experiment in one forward pass
#
# Exercise 3's `scaling_experiment` runs the whole model once per block. Three facts make one
# pass enough: the rows of a batch never mix; before block i, the row to be scaled at block i is
# still the clean run; and only the last position's logits matter. You write
# `fast_scaling_experiment` in `exercises/ex4_fast_scaling.py`; this notebook times it against
# your exercise 3 loop, checks that both agree, and draws figure 11 from the fast values. The last
# cell grades the exercise.

# %% tags=["setup"]
# (set-up: course/shared/notebook_setup.py)

# %%
import time

import kata
from grading.views.notebook import check, exercise, expect, load_model, show

ex = exercise(4)  # your exercises/ex4_fast_scaling.py (its solution.py with KATA_IMPL=solutions)
ex3 = exercise(3)  # the loop and the plot from exercise 3
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2; KATA_MODEL=tiny-gpt2 for speed

input_ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
target_id = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]
print(f"{input_ids.shape[1]} tokens, target {kata.TARGET_WORD!r} = token {target_id}")

# %% [markdown]
# ## The loop and the single pass, side by side

# %%
started = time.perf_counter()
slow = ex3.scaling_experiment(model, input_ids, target_id)
slow_seconds = time.perf_counter() - started

started = time.perf_counter()
fast = ex.fast_scaling_experiment(model, input_ids, target_id)
fast_seconds = time.perf_counter() - started

print(f"loop (exercise 3): {slow_seconds:.2f} s, one pass: {fast_seconds:.2f} s")
print("largest difference:", (fast - slow).abs().max().item())
expect(
    other="The same values (a largest difference of 0, or below 1e-4) in a fraction of the time.",
    smollm2="The same values (a largest difference of 0, or below 1e-4); on two CPU cores about "
            "2.8 s for the loop against 0.5 s for the single pass.",
    tiny="The same values; the tiny model is so fast that both take a few hundredths of a second.",
)

# %% [markdown]
# ## Figure 11, from the single pass
#
# The clean log-probability is computed here from the model itself, so only the plot comes from
# your exercise 3.

# %%
import torch

with torch.no_grad():
    clean = torch.log_softmax(model(input_ids).logits[0, -1], dim=-1)[target_id].item()
print(f"clean log-probability of {kata.TARGET_WORD!r}: {clean:.3f}")

# %% tags=["figure"]
show(ex3.plot_scaling_experiment(fast, clean))
expect(
    other="The same figure as exercise 3's: one marker per block against the dashed clean line.",
    smollm2="The same figure as exercise 3's: 27 of the 30 blocks lower the log-probability of "
            "' insect', and the last block leaves it at the clean -4.71.",
)

# %% [markdown]
# ## Check your exercise
#
# The kata's tests for exercise 4, run on your saved file as the grader runs them. Edit
# `exercises/ex4_fast_scaling.py`, save, and run this cell again.

# %% tags=["check"]
check(4)
