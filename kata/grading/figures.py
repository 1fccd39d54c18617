"""Drawing the post's figures 6 to 11, and exercise 5's logit-lens figures 12 and 13, with the
learner's own functions.

``python grader.py figures DIR`` runs this module in a child process (so an endless loop in an
exercise cannot hang the grader) which loads the chosen model once and, for each figure, calls
the learner's functions on the post's texts. Inputs the figure only displays (the hidden states
of the penguin sentence) are computed here directly from the model, so that each figure depends
only on the functions of its own exercise. A figure whose function is not written yet (it raises
``NotImplementedError``) is skipped, and the output says so.

Which figures exist, their files and captions, and which exercise owns each, is in the manifest
(``figures = [{recipe, file, caption}]`` per exercise); this module holds only the drawing code,
one function per recipe name in :data:`DRAWINGS`, each given the exercise's module. An exercise
added later gets its figures by listing them in the manifest and adding its recipes here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import kata
from kata.impl import ImplementationImportError, import_implementation
from kata.manifest import Exercise, Figure, check_recipes, load_manifest

from .runner import child_environment, kill_group


class Inputs:
    """The model, its tokenizer and the post's texts, with forward passes computed once."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self._hidden_of = {}

    @property
    def penguin_hidden_states(self):
        """``(n_layers + 1, T, d_model)`` for the penguin sentence, straight from the model."""
        return self.hidden_states(kata.PENGUIN_TEXT)

    @property
    def penguin_tokens(self) -> list[str]:
        ids = self.tokenizer(kata.PENGUIN_TEXT)["input_ids"]
        return [self.tokenizer.decode([i]) for i in ids]

    def hidden_states(self, text):
        """``(n_layers + 1, T, d_model)`` for ``text``, straight from the model (computed once)."""
        if text not in self._hidden_of:
            import torch

            tokens = self.tokenizer(text, return_tensors="pt").to(self.model.device)
            with torch.no_grad():
                output = self.model(**tokens, output_hidden_states=True)
            self._hidden_of[text] = torch.stack(output.hidden_states)[:, 0].float().cpu()
        return self._hidden_of[text]

    def ids(self, text):
        return self.tokenizer(text, return_tensors="pt")["input_ids"]

    @property
    def kafka_ids(self):
        ids = self.tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
        return ids.to(self.model.device)


def _spread(n: int, count: int) -> list[int]:
    """``count`` indices spread evenly over ``range(n)``, first and last included."""
    count = min(count, n)
    return sorted({round(i * (n - 1) / max(count - 1, 1)) for i in range(count)})


def _figure6(f, inputs):
    tokens = inputs.penguin_tokens
    index = len(tokens) // 2
    return f.plot_token_activations(inputs.penguin_hidden_states, index, tokens[index])


def _figure7(f, inputs):
    tokens = inputs.penguin_tokens
    return f.plot_layer_similarity(inputs.penguin_hidden_states, _spread(len(tokens), 4), tokens)


def _figure8(f, inputs):
    hidden = inputs.penguin_hidden_states
    return f.plot_token_similarity(hidden, _spread(hidden.shape[0], 4), inputs.penguin_tokens)


def _figure9(f, inputs):
    return f.plot_laminar_profile(f.laminar_profile(inputs.penguin_hidden_states))


def _figure10(f, inputs):
    top = f.top_next_tokens(inputs.model, inputs.tokenizer, inputs.kafka_ids, 21)
    lines = [f"The {len(top)} most likely next tokens after the Kafka text (figure 10):", ""]
    lines += [f"{rank:3d}. {text!r:24} logit {logit:8.3f}" for rank, (text, logit) in
              enumerate(top, start=1)]
    return "\n".join(lines) + "\n"


def _figure11(f, inputs):
    target = f.target_token_id(inputs.tokenizer, kata.TARGET_WORD)
    values = f.scaling_experiment(inputs.model, inputs.kafka_ids, target)
    clean = float(f.next_token_log_probs(inputs.model, inputs.kafka_ids)[target])
    return f.plot_scaling_experiment(values, clean)


def _figure12(f, inputs):
    lens = f.logit_lens(inputs.model, inputs.hidden_states(kata.KAFKA_TEXT))
    return f.plot_logit_lens(lens, inputs.tokenizer, inputs.ids(kata.KAFKA_TEXT))


def _figure13(f, inputs):
    ranks = {}
    for label, text in (("penguin", kata.PENGUIN_TEXT), ("Kafka", kata.KAFKA_TEXT)):
        lens = f.logit_lens(inputs.model, inputs.hidden_states(text))
        ranks[label] = f.true_token_ranks(lens, inputs.ids(text))
        del lens  # (n_layers + 1, T, vocab_size) floats: one text's lens at a time
    return f.plot_rank_by_layer(ranks)


DRAWINGS: dict[str, Callable] = {  # recipe -> draw(module, inputs) -> a Figure or text
    "fig06": _figure6,
    "fig07": _figure7,
    "fig08": _figure8,
    "fig09": _figure9,
    "fig10": _figure10,
    "fig11": _figure11,
    "fig12": _figure12,
    "fig13": _figure13,
}


def planned_figures(exercises: list[Exercise] | None = None) -> list[tuple[Exercise, Figure]]:
    """Every figure in the manifest with the exercise that owns it, in the manifest's order."""
    exercises = load_manifest() if exercises is None else exercises
    check_recipes(exercises, DRAWINGS)
    return [(exercise, figure) for exercise in exercises for figure in exercise.figures]


def _unwritten(error: BaseException, module) -> str:
    """The learner function whose stub raised ``error`` (its innermost frame in ``module``)."""
    name, filename = "", getattr(module, "__file__", None)
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == filename:
            name = traceback.tb_frame.f_code.co_name
        traceback = traceback.tb_next
    return name


def draw_all(out: Path, impl: str, model_name: str | None, not_done: set[str],
             loaded: tuple | None = None) -> int:
    """Draw every figure the implementation can; returns how many were written.

    ``loaded`` is an already loaded ``(model, tokenizer)`` to use instead of ``model_name``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = loaded or kata.load_model(model_name)
    name = getattr(model, "kata_name", model_name)
    print(f"Drawing the post's figures with {impl}/ on {name} ({model.device}) into {out}/")
    inputs, written = Inputs(model, tokenizer), 0
    for exercise, figure in planned_figures():
        module = None
        try:
            module = import_implementation(exercise, impl)
            result = DRAWINGS[figure.recipe](module, inputs)
        except NotImplementedError as error:
            unwritten = _unwritten(error, module)
            print(f"  skipped  {figure.caption}: not written yet "
                  f"({exercise.id}{': ' + unwritten + '()' if unwritten else ''})")
            continue
        except ImplementationImportError as error:
            print(f"  skipped  {figure.caption}: {error}")
            continue
        except Exception as error:  # noqa: BLE001 - the learner's code may raise anything
            print(f"  failed   {figure.caption}: {type(error).__name__}: {error}")
            continue
        path = out / figure.file
        if isinstance(result, str):
            path.write_text(result, encoding="utf-8")
        else:
            result.savefig(path, dpi=120)
            plt.close(result)
        written += 1
        note = (f"  ({exercise.id} not done yet: check it against the tests)"
                if exercise.id in not_done else "")
        print(f"  wrote    {path}  ({figure.caption}){note}")
    return written


def render(root: Path, out: Path, impl: str, model_name: str | None, not_done: set[str],
           timeout: float) -> int:
    """Run :func:`draw_all` in a child process with a wall-clock limit; its output is shown."""
    command = [sys.executable, "-m", "kata.grading.figures", str(out), "--impl", impl,
               "--not-done", ",".join(sorted(not_done))]
    if model_name:
        command += ["--model", model_name]
    env = child_environment(root)
    child = subprocess.Popen(command, cwd=root, env=env, start_new_session=True)
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
