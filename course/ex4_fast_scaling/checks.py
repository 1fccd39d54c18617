"""Exercise 4's checks: the loop the single pass must reproduce, and the work it must save.

The reference values come from exercise 3's experiment done the slow way, one forward pass per
block with that block's output scaled by a hook of its own (``course/shared/reference.py``),
computed from the test's own inputs before the function under test sees them. A
:class:`WorkCounter` watches what the model actually runs (calls and rows per block, positions
given to the unembedding), so that a right answer reached the slow way is told apart from the
single pass. Each ``check_*`` names a wrong result by the shape of its wrongness (the clean row
kept, a shift by one block...) through :func:`~course.shared.diagnosis.diagnose`, with the id the
mistakes catalogue uses.
"""

import pytest
import torch

import kata
from kata.hooks import hook_snapshot
from course.shared.diagnosis import diagnose
from course.shared.support import (
    check_shape,
    check_tensor,
    computed_once,
    expect,
    reference_log_probs,
    scaled_block_log_probs,
)

FACTOR = 0.8  # the public tests' scale (the secret checks draw theirs)


# ----------------------------------------------------------------------------- reference values


def kafka_reference(model, tokenizer) -> dict:
    """The Kafka text and its target, the loop's values at ``FACTOR`` and the clean value."""
    ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]  # (1, T)
    target_id = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]
    return {"ids": ids, "target_id": target_id,
            "expected": scaled_block_log_probs(model, ids, target_id, FACTOR),  # (n_layers,)
            "clean": reference_log_probs(model, ids)[target_id].item()}


@pytest.fixture(scope="module")
def tiny_reference(tiny_gpt2):
    return computed_once(("ex4-kafka-scaling", "tiny-gpt2"), lambda: kafka_reference(*tiny_gpt2))


@pytest.fixture(scope="module")
def first_blocks_reference(smollm2_first_blocks):
    return computed_once(("ex4-kafka-scaling", "smollm2-first-4-blocks"),
                         lambda: kafka_reference(*smollm2_first_blocks))


# ----------------------------------------------------------------------------- the values


def check_matches_the_loop(values, expected, model_name: str) -> None:
    """``values`` must be the loop's ``expected`` (n_layers,), float32, to 1e-4."""
    check_tensor(values, "fast_scaling_experiment", "one log-probability per block")
    check_shape(values, expected.shape, "fast_scaling_experiment",
                "one value per transformer block; the clean run is not one of them",
                diagnosis="fast-scaling-shape-wrong")
    expect(values.dtype == torch.float32, "fast-scaling-not-float32",
           f"fast_scaling_experiment returned {values.dtype}, expected torch.float32")
    values = values.detach().cpu()
    difference = (values - expected).abs()
    worst = int(difference.argmax())
    if difference.max() > 1e-4 and torch.allclose(values[1:], expected[:-1], atol=1e-4):
        diagnose("clean-row-kept", (
            "your values are shifted by one block: the batch's first row is the clean run, "
            "scaled nowhere, so the run scaled at block i is the row after it, and the clean "
            "row is not one of the answers"))
    expect(difference.max() <= 1e-4, "fast-scaling-values-wrong", (
        f"on {model_name}, block {worst} gives {values[worst]:.5f}, but scaling block {worst}'s "
        f"output alone gives {expected[worst]:.5f} (largest difference {difference.max():.2g}): "
        "each new row must be a scaled copy of the clean row, added after its own block only, "
        "so that no row is scaled twice"))


def check_factor_one(values, clean: float) -> None:
    """With ``factor = 1`` nothing is scaled: every entry is the clean log-probability."""
    check_tensor(values, "fast_scaling_experiment", "one log-probability per block")
    values = values.detach().cpu().float()
    expect(torch.allclose(values, torch.full_like(values, clean), atol=1e-4),
           "fast-scaling-by-one-changes", (
               f"with factor 1.0 nothing changes, so every entry should be the clean "
               f"{clean:.5f}; got {values.tolist()}"))


# ----------------------------------------------------------------------------- the work done


class WorkCounter:
    """Counts what a model runs: calls and rows per block, positions given to the unembedding."""

    def __init__(self, model):
        self.block_rows = []  # (block index, rows it ran on), one per call
        self.unembedded_shapes = []
        self.handles = [block.register_forward_pre_hook(self._block(i))
                        for i, block in enumerate(kata.blocks(model))]
        self.handles.append(model.get_output_embeddings().register_forward_pre_hook(self._unembed))

    def _block(self, index):
        def hook(module, args):
            hidden = args[0] if args else None
            self.block_rows.append((index, None if hidden is None else hidden.shape[0]))

        return hook

    def _unembed(self, module, args):
        self.unembedded_shapes.append(tuple(args[0].shape))

    def remove(self):
        for handle in self.handles:
            handle.remove()


@pytest.fixture
def work(ex, tiny_gpt2, tiny_reference):
    """What the model ran during one call of ``ex.fast_scaling_experiment`` on the Kafka text:
    ``(counter, number of blocks, number of tokens)``."""
    model, _ = tiny_gpt2
    ids = tiny_reference["ids"]
    counter = WorkCounter(model)
    try:
        ex.fast_scaling_experiment(model, ids.clone(), tiny_reference["target_id"], FACTOR)
    finally:
        counter.remove()
    return counter, len(kata.blocks(model)), ids.shape[1]


def check_one_pass(counter, on: str = "") -> None:
    """``on``: where the function ran, for the message (`` (on ...)``), or nothing."""
    calls = [index for index, _ in counter.block_rows]
    expect(calls.count(0) == 1, "loop-instead-of-batch", (
        f"block 0 ran {calls.count(0)} times{on}: rows of a batch never mix, so one forward pass "
        "whose row i is scaled at block i does the work of one pass per block"))


def check_rows_per_block(counter, n_blocks: int, on: str = "") -> None:
    rows = dict(counter.block_rows)
    expect(rows.get(0) == 1, "clean-prefix-recomputed", (
        f"block 0 ran on {rows.get(0)} rows{on}: before its own block a row is still the clean "
        "run, so the batch starts as the one clean row and grows by one row after each block"))
    per_block = [rows.get(j) for j in range(n_blocks)]
    expect(per_block == list(range(1, n_blocks + 1)), "rows-per-block-wrong", (
        f"rows per block {per_block}, expected {list(range(1, n_blocks + 1))}{on}: block j needs "
        "the clean row and the rows scaled at blocks 0 .. j-1, no more"))


def check_last_position_only(counter, on: str = "") -> None:
    expect(len(counter.unembedded_shapes) == 1, "unembedding-run-per-row",
           f"the unembedding ran {len(counter.unembedded_shapes)} times{on}: run it once, on "
           "every row together")
    shape = counter.unembedded_shapes[0]
    positions = shape[1] if len(shape) == 3 else 1
    expect(positions == 1, "unembeds-every-position", (
        f"the unembedding ran on {positions} positions (input shape {shape}){on}: only the last "
        "position predicts the next token, and the unembedding is the largest matrix of the "
        "model, so give it the last position's vectors alone"))


def check_no_hook_left(model, before, on: str = "") -> None:
    """No hook of the function may stay on ``model`` (``before``: its ``hook_snapshot``)."""
    expect(hook_snapshot(model) == before, "fast-scaling-hook-left", (
        f"fast_scaling_experiment left a hook on the model{on}: a hook stays until it is "
        "removed, and then changes every later run; remove every hook you register"))
