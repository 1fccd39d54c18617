"""Exercise 5's figures: the logit lens of the Kafka text (figure 12) and the true next token's
median rank per layer (figure 13)."""

import kata


def fig12(f, inputs):
    lens = f.logit_lens(inputs.model, inputs.hidden_states(kata.KAFKA_TEXT))
    return f.plot_logit_lens(lens, inputs.tokenizer, inputs.ids(kata.KAFKA_TEXT))


def fig13(f, inputs):
    ranks = {}
    for label, text in (("penguin", kata.PENGUIN_TEXT), ("Kafka", kata.KAFKA_TEXT)):
        lens = f.logit_lens(inputs.model, inputs.hidden_states(text))
        ranks[label] = f.true_token_ranks(lens, inputs.ids(text))
        del lens  # (n_layers + 1, T, vocab_size) floats: one text's lens at a time
    return f.plot_rank_by_layer(ranks)
