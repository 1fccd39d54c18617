# Source of notebooks/ex5_logit_lens.ipynb (jupytext percent format).
# Edit this file, then run `python grader.py generate`; the .ipynb is generated.

# %% [markdown]
# # Exercise 5: the logit lens
#
# The post ends where a natural question begins. The last hidden state becomes a prediction in
# two steps: the final norm, then the unembedding (one logit per vocabulary entry). What would the
# *earlier* hidden states predict if we read them the same way? That reading is the logit lens.
# You write the functions in `exercises/ex5_logit_lens.py`; a function you have not written yet
# does not crash a cell, the cell says which one to write. The last cell grades the exercise.

# %% tags=["setup"]
# (set-up: course/shared/notebook_setup.py)

# %%
import kata
from grading.views.notebook import check, exercise, expect, hidden_states_of, load_model, show

ex = exercise(5)  # your exercises/ex5_logit_lens.py (its solution.py with KATA_IMPL=solutions)
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2 (a trained model matters here)

# %% [markdown]
# ## Every layer, read as if it were the last
#
# The hidden states come straight from the model (what your exercise 1 `get_hidden_states`
# returns). `logit_lens` sends each of them through the final norm and the unembedding and
# returns log-probabilities: one row per layer, one per position, one entry per vocabulary token.

# %%
text = kata.KAFKA_TEXT
input_ids = tokenizer(text, return_tensors="pt")["input_ids"]
hidden = hidden_states_of(model, tokenizer, text)
lens = ex.logit_lens(model, hidden)
print("lens:", lens.shape)
expect(
    gpt2="torch.Size([13, 22, 50257]): 13 layers, 22 positions, 50257 tokens.",
    smollm2="torch.Size([31, 23, 49152]): 31 layers, 23 positions, 49152 tokens.",
    tiny="torch.Size([5, 22, 50257]).",
)

# %% [markdown]
# ## What each layer would say next
#
# At the last position, the top tokens of every layer, from the embeddings up.

# %%
top = ex.top_tokens_by_layer(lens, tokenizer, position=-1, k=5)
for layer, tokens in enumerate(top):
    print(f"{'Emb' if layer == 0 else f'L{layer - 1}':>4}: {tokens}")
expect(
    gpt2="Guesses that make sense appear from the middle blocks on and sharpen towards the output.",
    smollm2="',' tops most layers: SmolLM2's lens is nearly blind until the last blocks. The "
            "output's top 5 are ',', ' spider', ' creature', ' dragon', ' human'.",
    tiny="Random weights: the same meaningless tokens at every layer.",
)

# %% [markdown]
# ## Figure: the logit lens
#
# Rows are layers, columns are positions; each cell shows the token that layer puts first at that
# position, coloured by its log-probability.

# %% tags=["figure"]
show(ex.plot_logit_lens(lens, tokenizer, input_ids))
expect(
    gpt2="The top row repeats the model's own predictions; going down, the guesses dissolve "
         "into unrelated tokens.",
    smollm2="Sensible tokens only in the top few rows; below them, mostly the same few tokens "
            "(',' and friends) at low log-probability.",
)

# %% [markdown]
# ## How far is " insect" from the top, layer by layer?

# %%
target_id = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]
print(f"rank of {kata.TARGET_WORD!r} per layer (0 = top):", ex.target_rank_by_layer(lens, target_id))
expect(
    smollm2="Ranks of 5,000 to 13,000 up to L26, 1,885 after L27 and 8 at the output (9th place).",
)

# %% [markdown]
# ## Figure: the true next token's rank, for two texts
#
# Every position predicts the token that follows it. `true_token_ranks` ranks the true one at
# every layer; the figure shows the median over the positions, layer by layer.

# %%
ranks = {"Kafka": ex.true_token_ranks(lens, input_ids)}
del lens  # (layers, positions, vocabulary) floats: one text's lens at a time
penguin_ids = tokenizer(kata.PENGUIN_TEXT, return_tensors="pt")["input_ids"]
penguin_lens = ex.logit_lens(model, hidden_states_of(model, tokenizer, kata.PENGUIN_TEXT))
ranks["penguin"] = ex.true_token_ranks(penguin_lens, penguin_ids)
del penguin_lens

# %% tags=["figure"]
show(ex.plot_rank_by_layer(ranks))
expect(
    gpt2="The median rank falls steadily from the middle blocks on.",
    smollm2="For the Kafka text: about 26,000 at the embeddings, 400 to 900 through the middle, "
            "21 after block L27 and 5 at the output. The plain lens reads a Llama-family model "
            "late; the tuned lens was made for that.",
)

# %% [markdown]
# ## Check your exercise
#
# The kata's tests for exercise 5, run on your saved file as the grader runs them. Edit
# `exercises/ex5_logit_lens.py`, save, and run this cell again.

# %% tags=["check"]
check(5)
