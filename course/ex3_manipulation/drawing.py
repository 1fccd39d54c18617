"""Exercise 3's figures: the Kafka text's most likely next tokens (figure 10, as text) and the
scaling experiment (figure 11)."""

import kata


def fig10(f, inputs):
    ids = inputs.ids(kata.KAFKA_TEXT).to(inputs.model.device)
    top = f.top_next_tokens(inputs.model, inputs.tokenizer, ids, 21)
    lines = [f"The {len(top)} most likely next tokens after the Kafka text (figure 10):", ""]
    lines += [f"{rank:3d}. {text!r:24} logit {logit:8.3f}" for rank, (text, logit) in
              enumerate(top, start=1)]
    return "\n".join(lines) + "\n"


def fig11(f, inputs):
    ids = inputs.ids(kata.KAFKA_TEXT).to(inputs.model.device)
    target = f.target_token_id(inputs.tokenizer, kata.TARGET_WORD)
    values = f.scaling_experiment(inputs.model, ids, target)
    clean = float(f.next_token_log_probs(inputs.model, ids)[target])
    return f.plot_scaling_experiment(values, clean)
