# Source of notebooks/ex1_hidden_states.ipynb (jupytext percent format).
# Edit this file, then run `python grader.py generate`; the .ipynb is generated.

# %% [markdown]
# # Exercise 1: extracting and inspecting hidden states
#
# This notebook walks through the post's first demo ("Python demo 1: Inspecting hidden states",
# figure 6) with **your** functions from `exercises/ex1_hidden_states.py`. You write them in that
# file (open it in the Jupyter editor beside this notebook), save, and run the cells here again:
# every call re-imports the file when it changed. A function you have not written yet does not
# crash a cell; the cell says which function to write.
#
# The last cell grades the exercise with the kata's tests, as `python grader.py` does.

# %% tags=["setup"]
# (set-up: course/shared/notebook_setup.py)

# %%
import kata
from grading.views.notebook import attempt, check, exercise, expect, load_model, show, token_strings

ex = exercise(1)  # your exercises/ex1_hidden_states.py (its solution.py with KATA_IMPL=solutions)
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2; KATA_MODEL=tiny-gpt2 for speed

# %% [markdown]
# ## The model's size
#
# Everything a model is made of is listed in its config: how many transformer blocks it stacks,
# how long each token's vector is (`d_model`), how many attention heads each block has, and how
# many different tokens it knows. Your `model_summary` reads those four numbers.

# %%
summary = ex.model_summary(model)
print(summary)
expect(
    gpt2="{'n_layers': 12, 'd_model': 768, 'n_heads': 12, 'vocab_size': 50257}",
    smollm2="{'n_layers': 30, 'd_model': 576, 'n_heads': 9, 'vocab_size': 49152}",
    tiny="{'n_layers': 4, 'd_model': 64, 'n_heads': 4, 'vocab_size': 50257}: GPT-2's vocabulary "
         "and tokenizer, everything else shrunk.",
)

# %% [markdown]
# ## From text to tokens
#
# The post's sentence is `kata.PENGUIN_TEXT`. `tokenize` turns it into a batch of one: token ids
# and an attention mask, both of shape (1, T).

# %%
text = kata.PENGUIN_TEXT
tokens = ex.tokenize(tokenizer, text)
print(tokens)
labels = token_strings(tokenizer, text)  # the text of each token, for the figures
print(f"{len(labels)} tokens: {labels}")
expect(
    gpt2="10 tokens: ['A', ' wise', ' man', ' once', ' said', ':', ' Penguins', ' are', ' cute', "
         "'.']. The space before a word belongs to the word's token.",
    tiny="10 tokens: ['A', ' wise', ' man', ' once', ' said', ':', ' Penguins', ' are', ' cute', "
         "'.'], since the tiny model uses GPT-2's tokenizer.",
    smollm2="11 tokens: SmolLM2's tokenizer splits ' Penguins' into ' P' + 'enguins'.",
)

# %% [markdown]
# ## All the hidden states at once
#
# Asked for them, the model returns one hidden state per stage: the embedding layer's output,
# then the output of every block. `get_hidden_states` stacks them into one tensor of shape
# (n_layers + 1, T, d_model).

# %%
hidden = ex.get_hidden_states(model, tokens)
print(hidden.shape)
expect(
    gpt2="torch.Size([13, 10, 768]): the embeddings plus 12 blocks, 10 tokens, 768 numbers each.",
    smollm2="torch.Size([31, 11, 576]): the embeddings plus 30 blocks, 11 tokens, 576 numbers each.",
    tiny="torch.Size([5, 10, 64]): the embeddings plus 4 blocks.",
)

# %% [markdown]
# ## Where the first and the last hidden state come from
#
# Hidden state 0 is not computed by any block: it is the row of the token-embedding table for
# each token, plus (GPT-2 only) the row of the position-embedding table for its position. Build it
# by hand with `embedding_layer_output` and compare.
#
# The last hidden state is not the raw output of the last block either: the model applies its
# final norm first. `raw_last_block_output` catches the block's output with a forward hook.

# %%
by_hand = ex.embedding_layer_output(model, tokens["input_ids"])
print("hidden state 0 vs the embeddings by hand, largest difference:",
      (by_hand - hidden[0]).abs().max().item())

raw = ex.raw_last_block_output(model, tokens)
print("last hidden state vs the raw last block output:", (raw - hidden[-1]).abs().max().item())
normed = attempt(kata.final_norm(model), raw)  # attempt: runs unless raw waits for a function
print("... vs the final norm of that output:", (normed - hidden[-1]).abs().max().item())
expect(
    other="The embeddings by hand match hidden state 0 exactly (a difference of 0). The raw block "
          "output is far from the last hidden state, but its final norm matches it (a difference "
          "of 0, or a few 1e-7).",
    smollm2="The embeddings by hand match hidden state 0 exactly. The raw last block output "
            "differs from the last hidden state by thousands (SmolLM2's vectors grow very long "
            "before the final norm shrinks them); its final norm matches exactly.",
)

# %% [markdown]
# ## Figure 6: one token through the layers
#
# Follow one token, the post's ` cute` (`kata.FIGURE6_TOKEN`), from layer to layer: on the left
# every one of its activations as a dot, on the right how spread out they are (their variance).
# `kata.figure6_token(labels)` finds its index by its text: 8 on GPT-2, 9 on SmolLM2.

# %%
index = kata.figure6_token(labels)
variance = ex.activation_variance(hidden, index)
print(f"variance of token {index} ({labels[index]!r}) per layer:", variance)

# %% tags=["figure"]
show(ex.plot_token_activations(hidden, index, labels[index]))
expect(
    gpt2="The dots fan out layer after layer and the variance climbs with depth, a few "
         "dimensions standing far from the rest; after the final norm (the last layer) the spread "
         "shrinks again.",
    smollm2="The variance climbs from about 0.01 at the embeddings to about 840 at layer L28, "
            "then falls to about 3 at L29: the last hidden state has been through the final norm.",
    tiny="Random weights: the variance stays near 0.001 through the blocks and jumps to about 1 "
         "after the final norm, which rescales every vector. Nothing here is learned.",
)

# %% [markdown]
# ## Check your exercise
#
# The kata's tests for exercise 1, run on your saved file as the grader runs them. Edit
# `exercises/ex1_hidden_states.py`, save, and run this cell again.

# %% tags=["check"]
check(1)
