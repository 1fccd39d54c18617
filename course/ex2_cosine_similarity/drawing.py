"""Exercise 2's figures: the post's figures 7, 8 and 9 on the penguin sentence."""

import kata

from course.shared.inputs import spread


def fig07(f, inputs):
    tokens = inputs.tokens(kata.PENGUIN_TEXT)
    return f.plot_layer_similarity(inputs.hidden_states(kata.PENGUIN_TEXT),
                                   spread(len(tokens), 4), tokens)


def fig08(f, inputs):
    hidden = inputs.hidden_states(kata.PENGUIN_TEXT)
    return f.plot_token_similarity(hidden, spread(hidden.shape[0], 4),
                                   inputs.tokens(kata.PENGUIN_TEXT))


def fig09(f, inputs):
    return f.plot_laminar_profile(f.laminar_profile(inputs.hidden_states(kata.PENGUIN_TEXT)))
