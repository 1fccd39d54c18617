"""Drawing the post's figures with the learner's own functions.

``python grader.py figures DIR`` runs this module in a child process (:func:`render`: an endless
loop in an exercise cannot hang the grader), which loads the chosen model once and, for each
figure, calls the learner's functions on the post's texts. Inputs a figure only displays are
computed here from the model, so each figure depends only on its own exercise's functions. A
figure whose function is still a stub is skipped, and the output says so. Each figure is saved
with a tight bounding box; the output says what it should show on the model in use (the
manifest's ``[exercise.expect.<recipe>]``), warns when its labels collide or are clipped
(:func:`legibility_problems`), and, for a learner's ``exercises/``, puts the reference
solution's drawing beside it (``fig06_..._reference.png``) and both into ``contact_sheet.png``.

Which figures exist, their files and captions, and which exercise owns each, is declared in each
``exercise.toml`` (``figures = [{recipe, file, caption}]``); each is drawn by a function named
after its recipe in the exercise's own ``drawing.py``: a new exercise needs no edit here.

The child parses its own few arguments (:func:`main`) because only :func:`render` starts it, in
a process of its own; the command a person types is ``python grader.py figures DIR``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import kata
from course.shared.drawable import why_not_drawn
from course.shared.inputs import Inputs, drawing
from course.shared.impl import ImplementationImportError, import_implementation, stub_reached
from grading.core.declarations import DeclarationError, Exercise, Figure, load_exercises

from grading.box.runner import child_environment, kill_group


def drawings(exercises: list[Exercise] | None = None) -> dict[str, Callable]:
    """``recipe -> draw(module, inputs)`` for every declared figure that has drawing code (the
    exercise's ``drawing.py``, a function named after the recipe)."""
    exercises = load_exercises() if exercises is None else exercises
    found = {figure.recipe: drawing(exercise, figure.recipe)
             for exercise in exercises for figure in exercise.figures}
    return {recipe: draw for recipe, draw in found.items() if draw is not None}


def planned_figures(exercises: list[Exercise] | None = None) -> list[tuple[Exercise, Figure]]:
    """Every declared figure with the exercise that owns it, in the exercises' order; a figure
    without drawing code raises :class:`DeclarationError`."""
    exercises = load_exercises() if exercises is None else exercises
    known = drawings(exercises)
    planned = [(exercise, figure) for exercise in exercises for figure in exercise.figures]
    for exercise, figure in planned:
        if figure.recipe not in known:
            raise DeclarationError(
                f"{exercise.folder}/exercise.toml: figure {figure.file} names recipe "
                f"{figure.recipe!r}, which {exercise.folder}/drawing.py does not draw")
    return planned


# --------------------------------------------------------------------------- legibility

#: Two labels collide when they share more than this fraction of the narrower one's width and
#: height: boxes that merely touch (a rotated label's box has some padding) are still readable.
OVERLAP_FRACTION = 0.25


def _collide(a, b) -> bool:
    """Whether two display boxes overlap by more than :data:`OVERLAP_FRACTION` both ways."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return (width > OVERLAP_FRACTION * min(a.width, b.width)
            and height > OVERLAP_FRACTION * min(a.height, b.height))


def _overlapping(boxes) -> int:
    """How many neighbouring boxes (sorted left to right) collide."""
    boxes = sorted(boxes, key=lambda box: box.x0)
    return sum(1 for left, right in zip(boxes, boxes[1:]) if _collide(left, right))


def _shown_tick_labels(axis) -> list:
    """The tick labels of ``axis`` that are drawn: visible, not empty, inside the view limits."""
    low, high = sorted(axis.get_view_interval())
    return _visible([tick.label1 for tick in axis.get_major_ticks()
                     if low <= tick.get_loc() <= high])


def _visible(texts) -> list:
    """The texts that are drawn and not empty."""
    return [t for t in texts if t.get_visible() and str(t.get_text()).strip()]


def _axes_texts(ax) -> list:
    """The texts that belong to one axes' frame: its title, axis labels and tick labels."""
    return _visible([ax.title, ax.xaxis.label, ax.yaxis.label,
                     *_shown_tick_labels(ax.xaxis), *_shown_tick_labels(ax.yaxis)])


def _shown_texts(fig) -> list:
    """Every piece of text a reader sees: titles, axis labels, tick labels, annotations."""
    suptitle = getattr(fig, "_suptitle", None)
    texts = [*fig.texts, *([suptitle] if suptitle is not None else [])]
    return _visible(texts) + [t for ax in fig.axes for t in _axes_texts(ax) + _visible(ax.texts)]


def _clipped(text, renderer) -> bool:
    """Whether ``text`` is drawn clipped: clipping is on and the text passes its clip box."""
    if not text.get_clip_on() or text.get_clip_box() is None:
        return False
    extent, clip = text.get_window_extent(renderer), text.get_clip_box()
    return (extent.x0 < clip.x0 - 1 or extent.x1 > clip.x1 + 1
            or extent.y0 < clip.y0 - 1 or extent.y1 > clip.y1 + 1)


def legibility_problems(fig) -> list[str]:
    """What a reader cannot read in ``fig``, each with its fix, measured on the drawn boxes of
    its texts (as ``grader.py figures`` and Jupyter save it: with a tight bounding box, so a
    label beyond the figure's edge is still seen whole): x tick labels of one axes that collide
    with their neighbours, texts of different panels that collide, annotations of one panel that
    run into each other, and a text cut off by its own clip box (``clip_on=True``)."""
    from matplotlib.text import Text

    if not hasattr(fig.canvas, "get_renderer"):  # a bare Figure(), made without pyplot
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    for n, ax in enumerate(fig.axes, start=1):
        labels = _shown_tick_labels(ax.xaxis)
        overlaps = _overlapping([t.get_window_extent(renderer) for t in labels])
        if overlaps:
            upright = all(abs(t.get_rotation() % 180 - 90) < 1 for t in labels)
            fix = ("label every 5th (ax.set_xticks(ticks[::5], names[::5])) or make the figure "
                   "wider" if upright else
                   "stand them upright (ax.tick_params(axis='x', labelrotation=90)) or label "
                   "every 5th (ax.set_xticks(ticks[::5], names[::5]))")
            problems.append(f"panel {n}: {len(labels)} x tick labels do not fit side by side "
                            f"({overlaps} collide with their neighbour): {fix}")
    boxes = [(n, t, t.get_window_extent(renderer))
             for n, ax in enumerate(fig.axes, start=1) for t in _axes_texts(ax)]
    for i, (n, text, box) in enumerate(boxes):
        other = next(((m, t) for m, t, b in boxes[i + 1:] if m != n and _collide(box, b)), None)
        if other is not None:
            problems.append(
                f"panel {n}'s {str(text.get_text())[:30]!r} runs into panel {other[0]}'s "
                f"{str(other[1].get_text())[:30]!r}: call fig.tight_layout() (or make the figure "
                "with layout='constrained') or make it larger")
            break
    for n, ax in enumerate(fig.axes, start=1):
        # the text's own box: an annotation's extent also takes in its arrow
        boxes = [(t, Text.get_window_extent(t, renderer)) for t in _visible(ax.texts)]
        pair = next(((a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1:]
                     if _collide(box, other)), None)
        if pair is not None:
            problems.append(
                f"panel {n}: the labels {str(pair[0].get_text())[:30]!r} and "
                f"{str(pair[1].get_text())[:30]!r} run into each other: place them apart (an "
                "offset that alternates between neighbours) or label fewer points")
    for text in _shown_texts(fig):
        if _clipped(text, renderer):
            problems.append(f"the text {str(text.get_text())[:30]!r} is cut off by its clip box: "
                            "move it inside the axes or draw it with clip_on=False")
            break
    return problems


# --------------------------------------------------------------------------- drawing


def _save(result, path: Path) -> Path:
    """Write a figure (tight bounding box) or a text result; returns the path written."""
    import matplotlib.pyplot as plt

    if isinstance(result, str):
        path = path.with_suffix(".txt") if path.suffix != ".txt" else path
        path.write_text(result, encoding="utf-8")
    else:
        result.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(result)
    return path


def reference_path(path: Path) -> Path:
    """``fig06_x.png`` -> ``fig06_x_reference.png``: the reference solution's drawing."""
    return path.with_name(f"{path.stem}_reference{path.suffix}")


def contact_sheet(pairs: list[tuple[str, Path, Path | None]], path: Path) -> Path | None:
    """One PNG with each figure (yours, left) beside the reference's (right), row by row."""
    import matplotlib.pyplot as plt

    rows = [(caption, yours, ref) for caption, yours, ref in pairs if yours.suffix == ".png"]
    if not rows:
        return None
    fig, axes = plt.subplots(len(rows), 2, figsize=(14, 4 * len(rows)), squeeze=False)
    for (caption, yours, ref), (left, right) in zip(rows, axes):
        for ax, image, title in ((left, yours, f"yours: {caption}"), (right, ref, "reference")):
            ax.axis("off")
            if image is not None and image.exists():
                ax.imshow(plt.imread(image))
                ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _draw(exercise: Exercise, figure: Figure, impl: str, inputs):
    """The figure drawn with ``impl``'s functions, or a sentence saying why it was not."""
    module = None
    try:
        module = import_implementation(exercise, impl)
        return drawing(exercise, figure.recipe)(module, inputs), ""
    except NotImplementedError as error:
        unwritten = stub_reached(error, Path(module.__file__).parent) if module else None
        return None, (f"not written yet ({exercise.id}"
                      f"{': ' + unwritten + '()' if unwritten else ''})")
    except ImplementationImportError as error:
        return None, str(error)
    except Exception as error:  # noqa: BLE001 - the learner's code may raise anything
        return None, f"{type(error).__name__}: {error}"


def draw_all(out: Path, impl: str, model_name: str | None, not_done: set[str],
             loaded: tuple | None = None, reference: bool | None = None) -> int:
    """Draw every figure the implementation can; returns how many were written.

    ``loaded`` is an already loaded ``(model, tokenizer)`` to use instead of ``model_name``.
    ``reference`` (default: when drawing ``exercises/`` and the solutions are there) also draws
    each figure with the reference solution beside yours, and a contact sheet of both.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = loaded or kata.load_model(model_name)
    name = getattr(model, "kata_name", model_name) or "the model"
    if reference is None:
        reference = impl == "exercises" and all(
            (Path(kata.__file__).parents[1] / e.source("solutions")).is_file()
            for e in load_exercises())
    print(f"Drawing the post's figures with {impl}/ on {name} ({model.device}) into {out}/")
    inputs, written, pairs = Inputs(model, tokenizer), 0, []
    for exercise, figure in planned_figures():
        result, why = _draw(exercise, figure, impl, inputs)
        if result is None:
            print(f"  skipped  {figure.caption}: {why}")
            continue
        if isinstance(result, str):
            problems = []
        else:
            try:
                problems = legibility_problems(result)  # draws the figure
            except Exception as error:  # noqa: BLE001 - a figure matplotlib cannot draw
                print(f"  skipped  {figure.caption}: {why_not_drawn(result, error)}")
                plt.close(result)
                continue
        path = _save(result, out / figure.file)
        written += 1
        note = (f"  ({exercise.id} not done yet: check it against the tests)"
                if exercise.id in not_done else "")
        print(f"  wrote    {path}  ({figure.caption}){note}")
        for problem in problems:
            print(f"           hard to read: {problem}")
        expected = figure.expectation(name)
        if expected:
            print(f"           what you should see on {name}: {expected}")
        ref = None
        if reference:
            drawn, _ = _draw(exercise, figure, "solutions", inputs)
            if drawn is not None:
                ref = _save(drawn, reference_path(out / figure.file))
                print(f"           reference beside it: {ref}")
        pairs.append((figure.caption, path, ref))
    if reference and pairs:
        sheet = contact_sheet(pairs, out / "contact_sheet.png")
        if sheet:
            print(f"  wrote    {sheet}  (yours and the reference, side by side)")
    return written


def render(root: Path, out: Path, impl: str, model_name: str | None, not_done: set[str],
           timeout: float) -> int:
    """Run :func:`draw_all` in a child process with a wall-clock limit; its output is shown."""
    command = [sys.executable, "-m", "grading.views.figures", str(out), "--impl", impl,
               "--not-done", ",".join(sorted(not_done))]
    if model_name:
        command += ["--model", model_name]
    child = subprocess.Popen(command, cwd=root, env=child_environment(root), start_new_session=True)
    try:
        return child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(child)
        print(f"Drawing the figures took longer than {timeout:g} s and was stopped "
              "(an endless loop in an exercise?).")
        return 1
    except KeyboardInterrupt:
        kill_group(child)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--impl", default="exercises")
    parser.add_argument("--model", default=None)
    parser.add_argument("--not-done", default="")
    args = parser.parse_args(argv)
    not_done = {x for x in args.not_done.split(",") if x}
    if os.environ.get("KATA_TORCH_THREADS"):
        import torch

        torch.set_num_threads(int(os.environ["KATA_TORCH_THREADS"]))
    try:
        draw_all(args.out, args.impl, args.model, not_done)
    except kata.ModelNotAvailable as error:
        print(f"cannot draw the figures: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
