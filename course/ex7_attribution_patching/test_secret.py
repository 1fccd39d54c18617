"""Exercise 7's secret checks: each public function again, on inputs nobody prepared for.

One check per function, each on inputs drawn from a seed only the grader knows and from spaces
no table can hold (``course/shared/secret.py``): a GPT-2 of random sizes and weights with two
random prompts, two random maps to compare and to draw, random words for their tokens. The
expected values are computed here, from those inputs, before the function sees them (it gets
copies). A function's points count only if its check passes.
"""

from course.shared.reference import attribution_reference
from course.shared.secret import repeat_hint, secret, secret_check  # noqa: F401 - a fixture
from course.shared.support import check_tensor, expect, figures  # noqa: F401 - a fixture

from .checks import (
    call_attribution,
    check_estimate_figure,
    check_estimate_shape,
    check_summary,
    clear_grads,
    metrics_of,
    name_wrong_estimate,
    run_compare,
    run_plot,
)


@secret_check("attribution_patching")
def test_secret_attribution_patching_on_a_model_of_random_sizes(ex, secret):
    model = secret.gpt2(layers=(1, 4), spread=0.2)
    args = secret.prompt_pair(model)
    expected = attribution_reference(model, *args)
    clean, corrupted = metrics_of(model, args)
    where = (f"on a GPT-2 of {model.config.n_layer} blocks, prompts {args[0][0].tolist()} and "
             f"{args[1][0].tolist()}, good {args[2]}, bad {args[3]}" + repeat_hint())
    try:
        estimate = check_tensor(call_attribution(ex, model, args), "attribution_patching")
        left = sum(p.grad is not None for p in model.parameters())
    finally:
        clear_grads(model)
    check_estimate_shape(estimate, expected, f"attribution_patching {where}")
    estimate = estimate.detach().double()
    if (estimate - expected).abs().max().item() >= 1e-3:
        name_wrong_estimate(estimate, expected, clean - corrupted, where)
    expect(left == 0, "attribution-grad-left-on-parameters",
           f"{left} parameters have a .grad after the call {where}: only the block outputs' "
           "gradients are needed, and autograd can return those alone")


def random_maps(secret):
    """Two random maps of one random shape, the estimate a noisy, shrunk copy of the exact one."""
    shape = (secret.integer(2, 12), secret.integer(2, 10))
    exact = secret.tensor(*shape, scale=secret.number(0.2, 1.0))
    estimate = exact * secret.number(-0.5, 1.0) + secret.tensor(*shape, scale=secret.number(0.05, 0.5))
    return exact, estimate


@secret_check("compare_estimates")
def test_secret_compare_estimates_of_random_maps(ex, secret):
    exact, estimate = random_maps(secret)
    threshold, k = secret.number(0.05, 0.6), secret.integer(1, 6)
    x, y = exact.double().numpy().copy(), estimate.double().numpy().copy()
    summary = run_compare(ex, exact, estimate, threshold, k)
    check_summary(summary, x, y, threshold, k, repeat_hint())


@secret_check("plot_estimate_against_exact")
def test_secret_figure_draws_random_maps(ex, secret, figures):
    exact, estimate = random_maps(secret)
    words = (secret.text() + " " + secret.text()).split()
    tokens = [" " + secret.choice(words) for _ in range(exact.shape[1])]
    k = secret.integer(1, 4)
    fig = run_plot(ex, exact, estimate, tokens, k)
    check_estimate_figure(ex, fig, exact, estimate, tokens, k, figures, repeat_hint())
