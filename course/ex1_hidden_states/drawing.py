"""Exercise 1's figure: one token's activations across the layers (the post's figure 6)."""

import kata


def fig06(f, inputs):
    tokens = inputs.tokens(kata.PENGUIN_TEXT)
    index = kata.figure6_token(tokens)  # the post's ' cute', found by its text
    return f.plot_token_activations(inputs.hidden_states(kata.PENGUIN_TEXT), index, tokens[index])
