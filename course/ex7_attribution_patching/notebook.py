# Source of notebooks/ex7_attribution_patching.ipynb (jupytext percent format).
# Edit this file, then run `python grader.py generate`; the .ipynb is generated.

# %% [markdown]
# # Exercise 7 (bonus): attribution patching, the one-pass estimate and where it fails
#
# Exercise 6's map costs one forward pass per (block, position). Attribution patching estimates
# every cell at once from one forward and one backward pass of the corrupted run: the change a
# patch makes is about `(h_clean - h_corrupted) . dm/dh`. The patches here are large, so the
# estimate is cheap and wrong in instructive places. You write the functions in
# `exercises/ex7_attribution_patching.py`; the exact map comes from exercise 6 (yours).

# %% tags=["setup"]
# (set-up: course/shared/notebook_setup.py)

# %%
import time

import kata
from grading.views.notebook import check, exercise, expect, load_model, show

ex = exercise(7)  # your exercises/ex7_attribution_patching.py
ex6 = exercise(6)  # the exact map
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2

clean_ids = tokenizer(kata.CLEAN_PROMPT, return_tensors="pt")["input_ids"]
corrupted_ids = tokenizer(kata.CORRUPTED_PROMPT, return_tensors="pt")["input_ids"]
good_id = tokenizer(kata.CLEAN_ANSWER, add_special_tokens=False)["input_ids"][0]
bad_id = tokenizer(kata.CORRUPTED_ANSWER, add_special_tokens=False)["input_ids"][0]
args = (clean_ids, corrupted_ids, good_id, bad_id)

# %% [markdown]
# ## The estimate and the exact map

# %%
started = time.perf_counter()
estimate = ex.attribution_patching(model, *args)
print(f"attribution_patching: {time.perf_counter() - started:.2f} s, shape {tuple(estimate.shape)}")
exact = ex6.fast_patching_effect(model, *args)
summary = ex.compare_estimates(exact, estimate)
print(f"correlation {summary['correlation']:.2f}; {summary['same_sign']} of {summary['large_cells']} "
      "large cells with the right sign")
for block, position, x, y in summary["worst"]:
    print(f"  block {block:2d}, {tokenizer.decode([int(clean_ids[0, position])])!r:10}: "
          f"exact {x:+.2f}, estimate {y:+.2f}")
expect(
    smollm2="Correlation 0.59; 49 of 60 large cells with the right sign; the worst cells are the "
            "subject's in blocks 0 to 5 (block 0's 'iffel': exact +0.70, estimate -0.77).",
    gpt2="The literature's pattern (not measured here): good where a patch is small, poor at the "
         "first blocks and where the metric or the final norm saturates.",
)

# %% [markdown]
# ## Figure 15: the estimate against the exact value, cell by cell

# %% tags=["figure"]
labels = [tokenizer.decode([i]) for i in clean_ids[0]]
show(ex.plot_estimate_against_exact(exact, estimate, labels))
expect(
    smollm2="Most points near 0 on both axes; the subject's middle-block cells far below the line "
            "(0.16-0.37 against 0.72-0.83), the first blocks' below 0, and the late last-position "
            "cells below it too (0.47-0.78 against 0.82-1.00).",
)

# %% [markdown]
# ## Check your exercise

# %% tags=["check"]
check(7)
