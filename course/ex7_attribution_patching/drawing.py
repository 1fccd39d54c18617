"""Exercise 7's figure: attribution patching against the exact map, cell by cell (figure 15)."""


def fig15(f, inputs):
    pair, labels = inputs.patching_pair()
    # The exact map comes from course/shared/reference.py, so that figure 15 depends on exercise 7 alone.
    from course.shared.reference import patching_reference

    exact = patching_reference(inputs.model, *pair)["effect"].float()
    return f.plot_estimate_against_exact(exact, f.attribution_patching(inputs.model, *pair), labels)
