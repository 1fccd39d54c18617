"""Library errors raised inside a learner's function, told with their likely cause
(``course/shared/library_errors.py``): real errors of torch and Python, each named by its kind, and the
wrapper that turns them into a diagnosis.
"""

from __future__ import annotations

import pytest
import torch

from course.shared.diagnosis import Diagnosis
from course.shared.library_errors import Sizes, cause_of, explained, learner_run, where_in_your_code


SIZES = Sizes(n_blocks=4, n_tokens=5, d_model=8, vocab=50, block_output="a plain tensor (1, T, d_model)")


def raised(call) -> BaseException:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the error is what is tested
        return error
    raise AssertionError("nothing was raised")


def not_in_graph():
    a = torch.ones(3, requires_grad=True)
    b = a * 2
    metric = b.sum()
    row = b[0]  # a slice made after the run: nothing the metric depends on
    return torch.autograd.grad(metric, row)


def gradient_none():
    a = torch.ones(3, requires_grad=True)
    b = a * 2
    metric = b.sum()
    (grad,) = torch.autograd.grad(metric, b[0], allow_unused=True)
    return b * grad


def no_graph():
    a = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        metric = (a * 2).sum()
    return torch.autograd.grad(metric, a)


def not_scalar():
    a = torch.ones(3, requires_grad=True)
    return torch.autograd.grad(a * 2, a)


@pytest.mark.parametrize("call, kind, words", [
    (not_in_graph, "not-in-graph", ["allow_unused=True, which the error suggests",
                                    "a plain tensor (1, T, d_model)"]),
    (no_graph, "no-graph", ["torch.no_grad()"]),
    (not_scalar, "autograd", ["one number"]),
    (gradient_none, "none", ["None"]),
    (lambda: torch.zeros(1, 5, 8)[1], "index", ["size 1", "batch axis"]),
    (lambda: torch.zeros(5, 8)[5], "index", ["T = 5 positions"]),
    (lambda: torch.nn.ModuleList([torch.nn.Identity()] * 4)[4], "index",
     ["0 to 3", "the embeddings first"]),
    (lambda: [1, 2][2], "index", ["fewer entries"]),
    (lambda: torch.zeros(21).reshape(-1, 5), "sizes", ["one more than the map's cells"]),
    (lambda: torch.zeros(19).reshape(-1, 5), "sizes", ["one fewer"]),
    (lambda: torch.cat([torch.zeros(2, 5), torch.zeros(2, 4)]), "sizes", ["5 (the T = 5"]),
    (lambda: torch.zeros(1, 5) + torch.zeros(1, 4), "sizes", ["against"]),
    (lambda: (lambda hidden, rest: None)(*torch.zeros(3, 2)), "other", []),
    (lambda: exec("hidden, rest = torch.zeros(3, 2)", {"torch": torch}), "output-form",
     ["a plain tensor"]),
    (lambda: int("x"), "value", ["valid"]),
])
def test_each_kind_of_error_gets_its_cause(call, kind, words):
    error = raised(call)
    got, cause = cause_of(error, SIZES, "two valid prompts")
    assert got == kind, (error, got, cause)
    for word in words:
        assert word in cause, (word, cause)


def test_explained_gives_the_prefix_id_the_head_and_the_exercise_s_own_words():
    error = raised(lambda: torch.zeros(1, 5, 8)[1])
    diagnosis, sentence = explained(error, "patching_effect", SIZES, "patching", "on the tiny GPT-2")
    assert diagnosis == "patching-index-out-of-range"
    # every frame is the kata's or torch's: no line of yours to name
    assert sentence.startswith("your patching_effect on the tiny GPT-2 raised IndexError (index 1")
    diagnosis, sentence = explained(error, "compare_estimates", SIZES, "compare",
                                    ids={"index": "compare-worst-index-arithmetic"},
                                    causes={"index": "a flat index taken apart wrongly"})
    assert diagnosis == "compare-worst-index-arithmetic"
    assert sentence.endswith(": a flat index taken apart wrongly")


def test_where_in_your_code_names_the_last_frame_outside_the_kata_and_the_libraries(tmp_path):
    source = tmp_path / "ex6_mine.py"
    source.write_text("import torch\n\ndef mine():\n    return torch.zeros(2)[3]\n")
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    error = raised(namespace["mine"])
    assert where_in_your_code(error) == "ex6_mine.py, line 4, in mine"
    error.kata_where = "exercises/ex6_activation_patching.py, line 9, in f"
    assert where_in_your_code(error) == "ex6_activation_patching.py, line 9, in f"  # the sandbox's


def test_learner_run_returns_lets_through_and_diagnoses():
    assert learner_run(lambda: 3, "f", SIZES, "patching") == 3
    for error in (NotImplementedError(), AssertionError("a test's own")):
        with pytest.raises(type(error)):
            learner_run(lambda: (_ for _ in ()).throw(error), "f", SIZES, "patching")

    class Injected(Exception):
        pass

    with pytest.raises(Injected):
        learner_run(lambda: (_ for _ in ()).throw(Injected()), "f", SIZES, "patching")
    with pytest.raises(Diagnosis) as caught:
        learner_run(lambda: [][0], "f", lambda: SIZES, "patching")
    assert caught.value.id == "patching-index-out-of-range"
    assert caught.value.__context__ is None  # the library's traceback is not the verdict

    def behind():
        raise Diagnosis("patch-hook-wrong", "your patch_hook first")

    with pytest.raises(Diagnosis) as caught:
        learner_run(lambda: [][0], "f", SIZES, "patching", behind=behind)
    assert caught.value.id == "patch-hook-wrong"


def test_sizes_name_every_axis_of_a_size():
    assert any("batch axis" in what for what in SIZES.axes(1))
    assert SIZES.axes(21) == ["the 21 rows of the grown batch (the corrupted run, then one per "
                              "block and position)"]
    assert SIZES.axes(7) == []
    square = Sizes(n_blocks=4, n_tokens=4)
    assert len(square.axes(4)) == 2  # the blocks or the positions: both are said


def test_sizes_of_a_model_see_what_its_blocks_return(tiny_gpt2):
    model, tokenizer = tiny_gpt2
    ids = tokenizer("The cat sat", return_tensors="pt")["input_ids"]
    sizes = Sizes.of(model, ids)
    assert (sizes.n_blocks, sizes.n_tokens, sizes.d_model) == (4, ids.shape[1], 64)
    assert sizes.block_output in ("a tuple (hidden, ...)", "a plain tensor (1, T, d_model)")
