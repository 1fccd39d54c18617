"""Exercise 6's figure: the activation-patching map of the Eiffel / Colosseum pair (figure 14)."""


def fig14(f, inputs):
    pair, labels = inputs.patching_pair()
    return f.plot_patching_effect(f.fast_patching_effect(inputs.model, *pair), labels)
