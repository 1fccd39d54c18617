"""`grader.py figures`: tight figures, the reference beside yours, a contact sheet, legibility
warnings measured from the rendered figure, and what each figure should show on the model."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from kata.grading import figures  # noqa: E402
from kata.manifest import EXPECTATION_MODELS, load_manifest  # noqa: E402

pytestmark = pytest.mark.maintainer


def test_overlapping_layer_names_are_flagged_with_the_fix():
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(range(31), range(31))
    ax.set_xticks(range(31), [f"L{i}" for i in range(31)])
    problems = figures.legibility_problems(fig)
    plt.close(fig)
    assert len(problems) == 1 and "31 x tick labels do not fit" in problems[0]
    assert "labelrotation=90" in problems[0] and "every 5th" in problems[0]


def test_rotated_or_thinned_names_are_fine():
    for ticks in (range(31), range(0, 31, 5)):
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(range(31), range(31))
        ax.set_xticks(list(ticks), [f"L{i}" for i in ticks])
        ax.tick_params(axis="x", labelrotation=90)
        fig.tight_layout()
        assert figures.legibility_problems(fig) == []
        plt.close(fig)


def test_a_label_cut_off_at_the_edge_is_flagged():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_title("a title far too long to fit into a figure only four inches wide " * 2)
    problems = figures.legibility_problems(fig)
    plt.close(fig)
    assert problems and "cut off at the figure's edge" in problems[0]


def test_ticks_outside_the_view_are_not_counted():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.imshow([[0, 1], [1, 0]])
    fig.tight_layout()
    assert figures.legibility_problems(fig) == []
    plt.close(fig)


def test_the_reference_figures_and_a_contact_sheet_are_written(tmp_path, capsys, tiny_gpt2):
    out = tmp_path / "figs"
    written = figures.draw_all(out, "solutions", "tiny-gpt2", set(), tiny_gpt2, reference=True)
    planned = figures.planned_figures()
    assert written == len(planned)
    for _, figure in planned:
        assert (out / figure.file).is_file()
        assert figures.reference_path(out / figure.file).is_file()
    sheet = out / "contact_sheet.png"
    assert sheet.is_file()
    image = plt.imread(sheet)
    pngs = sum(1 for _, f in planned if f.file.endswith(".png"))
    assert image.shape[0] > image.shape[1] * (pngs - 1) / 2 * 0.5, "one row per figure"
    printed = capsys.readouterr().out
    assert "hard to read" not in printed, "the reference figures must be legible"


def test_every_figure_says_what_to_expect_on_both_trained_models():
    for exercise in load_manifest():
        for figure in exercise.figures:
            for model in ("gpt2", "smollm2"):
                assert figure.expectation(model), f"{figure.recipe}: no expectation for {model}"
    assert set(EXPECTATION_MODELS) >= {"gpt2", "smollm2"}
