"""`grader.py figures`: tight figures, the reference beside yours, a contact sheet, legibility
warnings measured from the rendered figure, and what each figure should show on the model."""

import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from grading.views import figures  # noqa: E402
from grading.core.declarations import EXPECTATION_MODELS, load_exercises  # noqa: E402


ROOT = Path(__file__).resolve().parents[2]


def test_overlapping_layer_names_are_flagged_with_the_fix():
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(range(31), range(31))
    ax.set_xticks(range(31), [f"L{i}" for i in range(31)])
    problems = figures.legibility_problems(fig)
    plt.close(fig)
    assert len(problems) == 1 and "31 x tick labels do not fit" in problems[0]
    assert "labelrotation=90" in problems[0] and "every 5th" in problems[0]


def test_upright_names_that_still_collide_are_told_to_thin_out():
    fig, ax = plt.subplots(figsize=(2, 3))
    ax.plot(range(61), range(61))
    ax.set_xticks(range(61), [f"L{i}" for i in range(61)], rotation=90)
    problems = figures.legibility_problems(fig)
    plt.close(fig)
    assert len(problems) == 1 and "every 5th" in problems[0]
    assert "labelrotation" not in problems[0], "they already stand upright"


def test_rotated_or_thinned_names_are_fine():
    for ticks in (range(31), range(0, 31, 5)):
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(range(31), range(31))
        ax.set_xticks(list(ticks), [f"L{i}" for i in ticks])
        ax.tick_params(axis="x", labelrotation=90)
        fig.tight_layout()
        assert figures.legibility_problems(fig) == []
        plt.close(fig)


def test_upright_layer_names_of_two_panels_are_fine_as_the_post_draws_them():
    """31 names stood upright with plt.xticks(rotation=90) in the post's 12 x 4 figure, no
    tight_layout: the boxes touch but the names do not collide, and are not flagged."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax in axes:
        ax.plot(range(31), range(31), "s")
        plt.sca(ax)
        plt.xticks(range(31), ["Emb"] + [f"L{i}" for i in range(30)], rotation=90)
        ax.set_xlabel("layer")
    assert figures.legibility_problems(fig) == []
    plt.close(fig)


def test_a_label_beyond_the_figure_edge_is_fine_since_figures_are_saved_tight():
    """The kata saves (and Jupyter shows) figures with a tight bounding box, which takes in a
    long title or an x label below the edge: the PNG shows them whole, so no warning."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_title("a title far too long to fit into a figure only four inches wide " * 2)
    ax.set_xlabel("layer", labelpad=60)  # pushed below the figure's own edge
    assert figures.legibility_problems(fig) == []
    plt.close(fig)


def test_colliding_panels_are_flagged_with_the_fix():
    fig, axes = plt.subplots(1, 2, figsize=(5, 3))
    for k, ax in enumerate(axes):
        ax.set_title(f"panel {k}: a long title that runs into the other panel's")
    problems = figures.legibility_problems(fig)
    plt.close(fig)
    assert problems and "runs into panel 2" in problems[0] and "tight_layout" in problems[0]


def test_a_clipped_text_is_flagged():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.text(0.95, 0.5, "a text that the axes cut", clip_on=True, transform=ax.transAxes)
    problems = figures.legibility_problems(fig)
    plt.close(fig)
    assert problems and "cut off by its clip box" in problems[0]


def test_labels_of_neighbouring_points_that_run_into_each_other_are_flagged():
    """Figure 15 labels the cells its estimate misses most; two neighbours' labels once sat on
    top of each other ("L2" over "L4")."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], "o")
    ax.annotate("L2 Tower", (0.5, 0.5))
    ax.annotate("L4 Tower", (0.51, 0.51))
    problems = figures.legibility_problems(fig)
    plt.close(fig)
    assert problems and "run into each other" in problems[0] and "L2 Tower" in problems[0]
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], "o")
    ax.annotate("L2 Tower", (0.1, 0.1))
    ax.annotate("L4 Tower", (0.7, 0.8))
    assert figures.legibility_problems(fig) == []
    plt.close(fig)


def test_ticks_outside_the_view_are_not_counted():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.imshow([[0, 1], [1, 0]])
    fig.tight_layout()
    assert figures.legibility_problems(fig) == []
    plt.close(fig)


def _kata_with_every_exercise_done(target: Path) -> Path:
    """A copy of the kata whose ``exercises/`` hold the solutions: a learner who finished."""
    from grading.core import synthetic

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("kata", "grading", "course"):
        shutil.copytree(ROOT / folder, target / folder, ignore=ignore)
    synthetic.make_submission(ROOT, target, {}, load_exercises(), layout="exercises")
    shutil.copy2(ROOT / "exercises" / "__init__.py", target / "exercises" / "__init__.py")
    shutil.copy2(ROOT / "grader.py", target / "grader.py")
    return target


def test_the_figures_command_writes_each_figure_its_reference_and_a_contact_sheet(tmp_path,
                                                                                  capfd):
    """``grader.py figures DIR`` as a learner runs it once every exercise is done: the figures
    child draws each planned figure, the reference solution's beside it and the contact sheet
    of both, and finds every figure legible."""
    from grading.views import cli

    root = _kata_with_every_exercise_done(tmp_path / "kata")
    out = tmp_path / "figs"
    assert cli.main(["figures", str(out), "--model", "tiny-gpt2"], root=root) == 0
    planned = figures.planned_figures()
    written = {p.name for p in out.iterdir()}
    assert written == {f.file for _, f in planned} | {
        figures.reference_path(out / f.file).name for _, f in planned} | {"contact_sheet.png"}
    image = plt.imread(out / "contact_sheet.png")
    pngs = sum(1 for _, f in planned if f.file.endswith(".png"))
    assert image.shape[0] > image.shape[1] * (pngs - 1) / 2 * 0.5, "one row per figure"
    printed = capfd.readouterr().out
    assert printed.count("reference beside it") == len(planned), printed[-2000:]
    assert "hard to read" not in printed, "the reference figures must be legible"


def _figure_with(place: str, text: str):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="line")
    if place == "title":
        ax.set_title(text)
    elif place == "tick":
        ax.set_xticks([0, 1], ["fine", text])
    elif place == "legend":
        ax.legend([text])
    else:
        fig.suptitle(text)
    return fig


def _told(fig, error_type) -> str:
    """What :func:`course.shared.drawable.why_not_drawn` says of ``fig``, whose drawing must raise
    ``error_type``; the figure is closed."""
    from course.shared.drawable import why_not_drawn

    try:
        with pytest.raises(error_type) as error:
            fig.draw_without_rendering()
        return why_not_drawn(fig, error.value)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("place, where", [("title", "the title of panel 1"),
                                          ("tick", "an x tick label of panel 1"),
                                          ("legend", "the legend of panel 1"),
                                          ("suptitle", "the figure's title")])
def test_a_figure_that_cannot_be_drawn_is_told_by_the_text_that_stops_it(place, where):
    said = _told(_figure_with(place, r"$\lVert h \rVert$"), ValueError)
    assert said.startswith(f"your figure cannot be drawn: {where}, ") and "\\lVert" in said, said
    assert "mathtext" in said and "\\$" in said, said


def test_a_text_too_deep_for_the_parser_is_told_too_and_shortened():
    said = _told(_figure_with("title", "$" + "{" * 400 + "x" + "}" * 400 + "$"), RecursionError)
    assert said.startswith("your figure cannot be drawn: the title of panel 1, '${{{"), said
    assert "recursion" in said and len(said) < 500, said


def test_a_figure_that_fails_for_another_reason_names_matplotlib_s_error():
    from course.shared.drawable import why_not_drawn

    fig = _figure_with("title", "a $5 and a $6 bill")  # two '$': mathematics, but it parses
    try:
        said = why_not_drawn(fig, RuntimeError("no renderer"))
    finally:
        plt.close(fig)
    assert said.startswith("your figure cannot be drawn: matplotlib stops with RuntimeError: "
                           "no renderer."), said


def test_the_figures_command_skips_a_figure_it_cannot_draw_with_the_reason(
        tmp_path, capsys, monkeypatch, tiny_gpt2):
    monkeypatch.setattr(figures, "_draw", lambda *args: (_figure_with("title", r"$\tfrac{1}{2}$"),
                                                         ""))
    written = figures.draw_all(tmp_path / "figs", "solutions", "tiny-gpt2", set(), tiny_gpt2,
                               reference=False)
    printed = capsys.readouterr().out
    assert written == 0
    skipped = [line for line in printed.splitlines() if line.strip().startswith("skipped")]
    assert len(skipped) == len(figures.planned_figures()), printed
    assert all("the title of panel 1, '$\\\\tfrac{1}{2}$'" in line for line in skipped), printed


def test_every_figure_says_what_to_expect_on_both_trained_models():
    for exercise in load_exercises():
        for figure in exercise.figures:
            for model in ("gpt2", "smollm2"):
                assert figure.expectation(model), f"{figure.recipe}: no expectation for {model}"
    assert set(EXPECTATION_MODELS) >= {"gpt2", "smollm2"}


# --------------------------------------------------------------- silent on legible figures


def _model_data(model, tokenizer) -> dict:
    """What the figures plot, computed on ``model`` by the reference solutions (exercise 4's
    one-pass experiment stands in for the slow loop)."""
    import kata
    from course.shared.impl import import_implementation
    from grading.core.declarations import load_exercises as manifest

    solution = {e.id: import_implementation(e, "solutions") for e in manifest()}
    ex1, ex3, ex4, ex5 = (solution[f"ex{n}"] for n in (1, 3, 4, 5))
    tokens = ex1.tokenize(tokenizer, kata.PENGUIN_TEXT)
    hidden = ex1.get_hidden_states(model, tokens)
    kafka = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
    target = ex3.target_token_id(tokenizer, kata.TARGET_WORD)
    lens = ex5.logit_lens(model, ex1.get_hidden_states(model, {"input_ids": kafka}))
    return {
        "hidden": hidden, "labels": [tokenizer.decode([i]) for i in tokens["input_ids"][0].tolist()],
        "profile": solution["ex2"].laminar_profile(hidden),
        "values": ex4.fast_scaling_experiment(model, kafka, target),
        "clean": float(ex3.next_token_log_probs(model, kafka)[target]),
        "lens": lens, "kafka": kafka, "tokenizer": tokenizer,
        "ranks": {"penguin": ex5.true_token_ranks(ex5.logit_lens(model, hidden),
                                                  tokens["input_ids"]),
                  "Kafka": ex5.true_token_ranks(lens, kafka)},
    }


def _post_shaped_data(tokenizer) -> dict:
    """Data of the post's shapes, GPT-2's 12 blocks (GPT-2's weights are not here, its tokenizer
    is): random numbers whose spread grows with depth, as the figures' data do."""
    import torch

    import kata

    generator = torch.Generator().manual_seed(0)
    ids = tokenizer(kata.PENGUIN_TEXT, return_tensors="pt")["input_ids"]  # 10 tokens
    kafka = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]  # 22 tokens
    scale = torch.linspace(0.2, 5.0, 13)[:, None, None]
    hidden = torch.randn(13, ids.shape[1], 768, generator=generator) * scale
    hidden += torch.randn(1, 1, 768, generator=generator) * 2  # a shared direction
    logits = torch.randn(13, kafka.shape[1], len(tokenizer), generator=generator)
    logits[..., :256] -= 100  # the top tokens are merges: printable text
    lens = torch.log_softmax(logits, dim=-1)
    profile_hidden = hidden[:, 1:]
    unit = profile_hidden / profile_hidden.norm(dim=-1, keepdim=True)
    rows, cols = torch.triu_indices(unit.shape[1], unit.shape[1], offset=1)
    return {
        "hidden": hidden, "labels": [tokenizer.decode([i]) for i in ids[0].tolist()],
        "profile": (unit @ unit.transpose(1, 2))[:, rows, cols],
        "values": -4 - torch.rand(12, generator=generator), "clean": -4.2,
        "lens": lens, "kafka": kafka, "tokenizer": tokenizer,
        "ranks": {"penguin": torch.randint(0, 5000, (13, ids.shape[1] - 1), generator=generator),
                  "Kafka": torch.randint(0, 5000, (13, kafka.shape[1] - 1), generator=generator)},
    }


def _plot_calls(data: dict) -> dict:
    """recipe -> (exercise id, plot function, draw(module)): each figure's plot on ``data``."""
    import kata

    hidden, labels, tokenizer = data["hidden"], data["labels"], data["tokenizer"]
    n = hidden.shape[0]
    spread = sorted({round(i * (len(labels) - 1) / 3) for i in range(4)})
    layers = sorted({round(i * (n - 1) / 3) for i in range(4)})
    token = kata.figure6_token(labels)
    return {
        "fig06": ("ex1", "plot_token_activations",
                  lambda m: m.plot_token_activations(hidden, token, labels[token])),
        "fig07": ("ex2", "plot_layer_similarity",
                  lambda m: m.plot_layer_similarity(hidden, spread, labels)),
        "fig08": ("ex2", "plot_token_similarity",
                  lambda m: m.plot_token_similarity(hidden, layers, labels)),
        "fig09": ("ex2", "plot_laminar_profile", lambda m: m.plot_laminar_profile(data["profile"])),
        "fig11": ("ex3", "plot_scaling_experiment",
                  lambda m: m.plot_scaling_experiment(data["values"], data["clean"])),
        "fig12": ("ex5", "plot_logit_lens",
                  lambda m: m.plot_logit_lens(data["lens"], tokenizer, data["kafka"])),
        "fig13": ("ex5", "plot_rank_by_layer", lambda m: m.plot_rank_by_layer(data["ranks"])),
    }


def _drawing_modules(exercise_id, function: str, variants: bool = True):
    """(name, module): the reference solution, then (with ``variants``) each variant that
    redefines ``function``."""
    import tempfile
    from pathlib import Path

    from course.shared.catalogue import load
    from course.shared.impl import import_implementation, patched_solution
    from grading.core.declarations import load_exercises as manifest

    exercise = next(e for e in manifest() if e.id == exercise_id)
    yield "reference", import_implementation(exercise, "solutions")
    if not variants:
        return
    for variant in (v for v in load("variants") if v.exercise == exercise_id):
        if f"def {function}(" not in variant.code:
            continue
        with tempfile.TemporaryDirectory() as folder:
            patch = Path(folder) / f"{variant.exercise}_{variant.id}.py"
            patch.write_text(variant.code)
            yield f"variant {variant.name}", patched_solution(exercise, patch)


def _problems_of_every_drawing(data: dict, variants: bool) -> list[str]:
    found = []
    for recipe, (exercise_id, function, draw) in _plot_calls(data).items():
        for name, module in _drawing_modules(exercise_id, function, variants):
            fig = draw(module)
            found += [f"{recipe} by the {name}: {p}" for p in figures.legibility_problems(fig)]
            plt.close("all")
    return found


def test_the_warnings_are_silent_on_the_reference_and_variant_figures_in_the_posts_shapes(
        tiny_gpt2):
    """The post's figures (GPT-2: 13 hidden states, 10 and 22 tokens), drawn by the reference
    and by every correct variant, the post's own notebook style included: no warning."""
    problems = _problems_of_every_drawing(_post_shaped_data(tiny_gpt2[1]), variants=True)
    assert not problems, "\n".join(problems)


@pytest.mark.trained
def test_the_warnings_are_silent_on_the_reference_figures_of_smollm2(smollm2):
    """SmolLM2's 31 hidden states are where names crowd: the reference figures still read.
    (The post-style variants keep GPT-2's 13 names side by side, which do not fit 31 times:
    for them the warning is right.)"""
    problems = _problems_of_every_drawing(_model_data(*smollm2), variants=False)
    assert not problems, "\n".join(problems)
