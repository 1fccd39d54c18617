# Source of notebooks/ex2_cosine_similarity.ipynb (jupytext percent format).
# Edit this file, then run `python grader.py generate`; the .ipynb is generated.

# %% [markdown]
# # Exercise 2: cosine similarities within and across layers
#
# The post's second demo (figures 7, 8 and 9) compares hidden states by their *direction*.
# Cosine similarity is +1 for two vectors pointing the same way, 0 for perpendicular ones and -1
# for opposite ones, whatever their lengths. You write the functions in
# `exercises/ex2_cosine_similarity.py`; this notebook runs them on the post's sentence and draws
# the three figures. A function you have not written yet does not crash a cell: the cell says
# which function to write. The last cell grades the exercise.

# %% tags=["setup"]
# (set-up: course/shared/notebook_setup.py)

# %%
import torch

import kata
from grading.views.notebook import check, exercise, expect, hidden_states_of, load_model, show, \
    token_strings

ex = exercise(2)  # your exercises/ex2_cosine_similarity.py (its solution.py with KATA_IMPL=solutions)
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2; KATA_MODEL=tiny-gpt2 for speed

# %% [markdown]
# ## Cosine similarity, on vectors you can check by eye
#
# `cosine_similarity_matrix` compares every row of a matrix with every other row. Three rows: a
# vector, the same vector twice as long, and its opposite; and a fourth row of zeros, which has no
# direction at all.

# %%
vectors = torch.tensor([[1.0, 2.0], [2.0, 4.0], [-1.0, -2.0], [0.0, 0.0]])
print(ex.cosine_similarity_matrix(vectors))
expect(other="Rows 0 and 1 give 1 (same direction, lengths do not matter), rows 0 and 2 give -1, "
             "and the zero row gives 0 with everything, itself included: never NaN.")

# %% [markdown]
# ## The post's sentence, layer by layer
#
# The hidden states come straight from the model here (they are what your exercise 1
# `get_hidden_states` returns), so this notebook only needs exercise 2's functions.

# %%
text = kata.PENGUIN_TEXT
hidden = hidden_states_of(model, tokenizer, text)  # (n_layers + 1, T, d_model)
labels = token_strings(tokenizer, text)
n_hidden, n_tokens = hidden.shape[0], hidden.shape[1]
print(f"{n_hidden} hidden states, {n_tokens} tokens: {labels}")

# %% [markdown]
# ## Figure 7: each token compared with itself across the layers
#
# `layer_similarity` takes one token's vector at every layer and compares them all: entry
# [a, b] says how much the token's direction changed between layer a and layer b. The post shows
# four tokens spread over the sentence.

# %%
chosen_tokens = sorted({round(i * (n_tokens - 1) / 3) for i in range(4)})
print("tokens shown:", [(t, labels[t]) for t in chosen_tokens])
print("token", chosen_tokens[1], "layer 0 vs every layer:", ex.layer_similarity(hidden, chosen_tokens[1])[0])

# %% tags=["figure"]
show(ex.plot_layer_similarity(hidden, chosen_tokens, labels))
expect(
    gpt2="Bright blocks near the diagonal: a block turns a token's vector only a little, so "
         "neighbouring layers stay similar. The embedding layer (row and column 0) stands apart "
         "from the rest, and the first token differs most.",
    smollm2="Neighbouring layers are very similar (0.95 to 0.99) except at both ends: the "
            "embeddings (layer 0) barely resemble layer 1, and the last layer, after the final "
            "norm, turns away from layer 29. The first token ('A') is an outlier with a huge norm.",
    tiny="Random weights: similarities stay high (about 0.95 between neighbours) because each "
         "block adds only a small random change to its input. The pattern means nothing here.",
)

# %% [markdown]
# ## Figure 8: all tokens compared with each other inside a layer
#
# `token_similarity` does the opposite cut: one layer, every token against every other token.

# %%
chosen_layers = sorted({round(i * (n_hidden - 1) / 3) for i in range(4)})
print("layers shown:", chosen_layers)

# %% tags=["figure"]
show(ex.plot_token_similarity(hidden, chosen_layers, labels))
expect(
    gpt2="At the embeddings (layer 0) the tokens are nearly unrelated; deeper in, they point more "
         "and more the same way, so the squares grow brighter. The first token stays apart.",
    smollm2="At the embeddings the tokens are nearly unrelated (dark); from the first blocks on, "
            "most pairs are similar (0.5 to 0.8), except the first token, which stays apart.",
    tiny="Random weights: the tokens stay nearly unrelated at every layer.",
)

# %% [markdown]
# ## Figure 9: the laminar profile
#
# Every pair of different tokens, at every layer, as one dot (the first token is left out: it has
# no context and behaves as an outlier). `laminar_profile` collects the pairs, each exactly once,
# and `plot_laminar_profile` draws them with the mean per layer.

# %%
profile = ex.laminar_profile(hidden)
print("pairs per layer:", profile.shape)
print("mean similarity per layer:", profile.mean(dim=1))

# %% tags=["figure"]
show(ex.plot_laminar_profile(profile))
expect(
    gpt2="The post's \"smile\": the pairs are spread out at the embeddings, similar in the early "
         "blocks, lower in the middle and higher again towards the end.",
    smollm2="Near 0 at the embeddings, about 0.6 from layer 2 on, rising slowly to about 0.7 "
            "towards layer 29, and down to about 0.5 after the final norm.",
    tiny="Random weights: the pairs stay near 0 at every layer, with a slight drift. No smile.",
)

# %% [markdown]
# ## Check your exercise
#
# The kata's tests for exercise 2, run on your saved file as the grader runs them. Edit
# `exercises/ex2_cosine_similarity.py`, save, and run this cell again.

# %% tags=["check"]
check(2)
