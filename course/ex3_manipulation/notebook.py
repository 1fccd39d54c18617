# Source of notebooks/ex3_manipulation.ipynb (jupytext percent format).
# Edit this file, then run `python grader.py generate`; the .ipynb is generated.

# %% [markdown]
# # Exercise 3: manipulating hidden states with a scaling hook
#
# The post's third demo (figures 10 and 11) stops watching the model and starts changing it. The
# model reads the opening of Kafka's *The Metamorphosis*, cut just before the word it should
# predict, and we follow the log-probability it gives to `" insect"`. Then a forward hook
# multiplies one block's output by 0.8 while the model runs, and we see how much the prediction
# depends on that block. You write the functions in `exercises/ex3_manipulation.py`; a function
# you have not written yet does not crash a cell, the cell says which one to write. The last cell
# grades the exercise.

# %% tags=["setup"]
# (set-up: course/shared/notebook_setup.py)

# %%
import kata
from grading.views.notebook import attempt, check, exercise, expect, load_model, show

ex = exercise(3)  # your exercises/ex3_manipulation.py (its solution.py with KATA_IMPL=solutions)
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2 (a trained model matters here)

# %% [markdown]
# ## The text and the target, as tokens

# %%
text = kata.KAFKA_TEXT
print(text)
print(ex.text_stats(tokenizer, text))
target_id = ex.target_token_id(tokenizer, kata.TARGET_WORD)
print(f"target {kata.TARGET_WORD!r}: token id {target_id}")
expect(
    gpt2="{'chars': 109, 'unique_chars': 25, 'tokens': 22, 'unique_tokens': 22}; ' insect' is "
         "token 12833.",
    tiny="{'chars': 109, 'unique_chars': 25, 'tokens': 22, 'unique_tokens': 22} (GPT-2's "
         "tokenizer); ' insect' is token 12833.",
    smollm2="{'chars': 109, 'unique_chars': 25, 'tokens': 23, 'unique_tokens': 23}; ' insect' is "
            "token 4783.",
)

# %% [markdown]
# ## Figure 10: what the model expects next
#
# The prediction for the next token sits at the last position. `next_token_log_probs` turns its
# logits into log-probabilities; `top_next_tokens` lists the most likely candidates with their
# raw logits.

# %%
input_ids = tokenizer(text, return_tensors="pt")["input_ids"]
log_probs = ex.next_token_log_probs(model, input_ids)
clean = attempt(lambda: log_probs[target_id].item())  # waits for both functions above
print(f"clean log-probability of {kata.TARGET_WORD!r}: {clean}")
for rank, (token, logit) in enumerate(ex.top_next_tokens(model, tokenizer, input_ids, k=21), 1):
    print(f"{rank:3d}. {token!r:16} logit {logit:7.3f}")
expect(
    gpt2="A list full of creatures; ' insect' is 15th of the 21.",
    smollm2="',' first, then ' spider', ' creature', ' dragon', ' human', ' worm' ...; ' insect' is "
            "9th (logit 9.93). Its clean log-probability is about -4.71.",
    tiny="Random weights: 21 unrelated tokens with nearly equal logits (about 0.5 to 0.6), and "
         "' insect' at about -11, the log of 1 / 50257. Use a trained model for this figure.",
)

# %% [markdown]
# ## A hook that scales a block's output
#
# `make_scaling_hook(0.8)` returns a function PyTorch calls after the block runs; what it returns
# replaces the block's output. Registered on one block, it changes every forward pass until it is
# removed: so remove it in a `finally` block.

# %%
from kata.hooks import hook_snapshot, restore_hooks

clean_hooks = hook_snapshot(model)  # to see, at the end, whether a hook was left behind
hook = ex.make_scaling_hook(0.8)
block = kata.blocks(model)[0]
handle = attempt(block.register_forward_hook, hook, prepend=True)
try:
    scaled = ex.next_token_log_probs(model, input_ids)
finally:
    attempt(lambda: handle.remove())
print(f"{kata.TARGET_WORD!r} with block 0 scaled by 0.8:", attempt(lambda: scaled[target_id].item()))
print("hooks left behind:", restore_hooks(model, clean_hooks) or "none")

# %% [markdown]
# ## Figure 11: one block at a time
#
# `scaling_experiment` repeats that for every block: hook, forward pass, remove. Scaling the last
# block changes (almost) nothing: the final norm divides its input by its own size, so a global
# factor cancels out.

# %%
values = ex.scaling_experiment(model, input_ids, target_id)
print(values)
print("hooks left behind:", restore_hooks(model, clean_hooks) or "none")  # and removed, if any

# %% tags=["figure"]
show(ex.plot_scaling_experiment(values, clean))
expect(
    gpt2="Most blocks lower the log-probability of ' insect' when scaled, some by much more than "
         "others; the last block leaves it where it was.",
    smollm2="27 of the 30 blocks lower the log-probability of ' insect' (down to about -5.3 at "
            "block 22), block 28 raises it to about -4.07, and block 29, the last, leaves it at "
            "-4.71: the final norm cancels the factor.",
    tiny="Random weights: every value is within 0.02 of the clean -11.09. The hooks work, the "
         "model knows nothing. Use a trained model to see the post's picture.",
)

# %% [markdown]
# ## Check your exercise
#
# The kata's tests for exercise 3, run on your saved file as the grader runs them. Edit
# `exercises/ex3_manipulation.py`, save, and run this cell again.

# %% tags=["check"]
check(3)
