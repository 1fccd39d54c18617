"""Drawing the post's figures 6 to 11, and exercise 5's logit-lens figures 12 and 13, with the
learner's own functions.

``python grader.py --figures DIR`` runs this module in a child process (so an endless loop in an
exercise cannot hang the grader) which loads the chosen model once and, for each figure, calls
the learner's functions on the post's texts. Inputs the figure only displays (the hidden states
of the penguin sentence) are computed here directly from the model, so that each figure depends
only on the functions of its own exercise. A figure whose function is not written yet (it raises
``NotImplementedError``) is skipped, and the output says so.

A recipe names the functions it calls; the manifest says which exercise owns each function, so
nothing here depends on the number or order of the exercises. An exercise added later gets its
figures by adding a recipe to :data:`RECIPES`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import kata
from kata.impl import ImplementationImportError, import_implementation
from kata.manifest import load_manifest

from .runner import child_environment, kill_group


@dataclass(frozen=True)
class Recipe:
    filename: str  # written in the output folder
    caption: str
    functions: tuple[str, ...]  # the learner functions it calls
    draw: Callable  # draw(functions: dict[name, function], inputs: Inputs) -> Figure or text


class Inputs:
    """The model, its tokenizer and the post's texts, with forward passes computed once."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self._hidden = None
        self._hidden_of = {}

    @property
    def penguin_hidden_states(self):
        """``(n_layers + 1, T, d_model)`` for the penguin sentence, straight from the model."""
        if self._hidden is None:
            import torch

            tokens = self.tokenizer(kata.PENGUIN_TEXT, return_tensors="pt").to(self.model.device)
            with torch.no_grad():
                output = self.model(**tokens, output_hidden_states=True)
            self._hidden = torch.stack(output.hidden_states)[:, 0].float().cpu()
        return self._hidden

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
    return f["plot_token_activations"](inputs.penguin_hidden_states, index, tokens[index])


def _figure7(f, inputs):
    tokens = inputs.penguin_tokens
    return f["plot_layer_similarity"](inputs.penguin_hidden_states, _spread(len(tokens), 4), tokens)


def _figure8(f, inputs):
    hidden = inputs.penguin_hidden_states
    return f["plot_token_similarity"](hidden, _spread(hidden.shape[0], 4), inputs.penguin_tokens)


def _figure9(f, inputs):
    return f["plot_laminar_profile"](f["laminar_profile"](inputs.penguin_hidden_states))


def _figure10(f, inputs):
    top = f["top_next_tokens"](inputs.model, inputs.tokenizer, inputs.kafka_ids, 21)
    lines = [f"The {len(top)} most likely next tokens after the Kafka text (figure 10):", ""]
    lines += [f"{rank:3d}. {text!r:24} logit {logit:8.3f}" for rank, (text, logit) in
              enumerate(top, start=1)]
    return "\n".join(lines) + "\n"


def _figure11(f, inputs):
    target = f["target_token_id"](inputs.tokenizer, kata.TARGET_WORD)
    values = f["scaling_experiment"](inputs.model, inputs.kafka_ids, target)
    clean = float(f["next_token_log_probs"](inputs.model, inputs.kafka_ids)[target])
    return f["plot_scaling_experiment"](values, clean)


def _figure12(f, inputs):
    lens = f["logit_lens"](inputs.model, inputs.hidden_states(kata.KAFKA_TEXT))
    return f["plot_logit_lens"](lens, inputs.tokenizer, inputs.ids(kata.KAFKA_TEXT))


def _figure13(f, inputs):
    ranks = {}
    for label, text in (("penguin", kata.PENGUIN_TEXT), ("Kafka", kata.KAFKA_TEXT)):
        lens = f["logit_lens"](inputs.model, inputs.hidden_states(text))
        ranks[label] = f["true_token_ranks"](lens, inputs.ids(text))
        del lens  # (n_layers + 1, T, vocab_size) floats: one text's lens at a time
    return f["plot_rank_by_layer"](ranks)


RECIPES = (
    Recipe("fig06_token_activations.png", "figure 6: one token's activations across the layers",
           ("plot_token_activations",), _figure6),
    Recipe("fig07_layer_similarity.png", "figure 7: each token compared across layers",
           ("plot_layer_similarity",), _figure7),
    Recipe("fig08_token_similarity.png", "figure 8: the tokens compared within layers",
           ("plot_token_similarity",), _figure8),
    Recipe("fig09_laminar_profile.png", "figure 9: the laminar profile",
           ("laminar_profile", "plot_laminar_profile"), _figure9),
    Recipe("fig10_top_next_tokens.txt", "figure 10: the most likely next tokens",
           ("top_next_tokens",), _figure10),
    Recipe("fig11_scaling_experiment.png", "figure 11: scaling one block at a time",
           ("target_token_id", "scaling_experiment", "next_token_log_probs",
            "plot_scaling_experiment"), _figure11),
    Recipe("fig12_logit_lens.png", "figure 12: the logit lens on the Kafka text (exercise 5)",
           ("logit_lens", "plot_logit_lens"), _figure12),
    Recipe("fig13_rank_by_layer.png", "figure 13: the true next token's median rank per layer "
           "(exercise 5)", ("logit_lens", "true_token_ranks", "plot_rank_by_layer"), _figure13),
)


def _learner_functions(impl: str, names: tuple[str, ...]):
    """``({name: function}, exercise ids)`` from whichever exercises list those functions."""
    functions, owners = {}, []
    for exercise in load_manifest():
        wanted = [n for n in names if n in exercise.functions]
        if wanted:
            module = import_implementation(exercise, impl)
            functions.update({n: getattr(module, n) for n in wanted})
            owners.append(exercise.id)
    missing = set(names) - set(functions)
    if missing:
        raise LookupError(f"no exercise in the manifest lists {', '.join(sorted(missing))}")
    return functions, owners


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
    for recipe in RECIPES:
        try:
            functions, owners = _learner_functions(impl, recipe.functions)
            result = recipe.draw(functions, inputs)
        except NotImplementedError:
            print(f"  skipped  {recipe.caption}: not written yet "
                  f"({', '.join(recipe.functions)})")
            continue
        except ImplementationImportError as error:
            print(f"  skipped  {recipe.caption}: {error}")
            continue
        except Exception as error:  # noqa: BLE001 - the learner's code may raise anything
            print(f"  failed   {recipe.caption}: {type(error).__name__}: {error}")
            continue
        path = out / recipe.filename
        if isinstance(result, str):
            path.write_text(result, encoding="utf-8")
        else:
            result.savefig(path, dpi=120)
            plt.close(result)
        written += 1
        caveat = [o for o in owners if o in not_done]
        note = f"  ({', '.join(caveat)} not done yet: check it against the tests)" if caveat else ""
        print(f"  wrote    {path}  ({recipe.caption}){note}")
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
