"""Secret checks: each exercise's public functions, run again on inputs nobody prepared for.

The public tests use fixed inputs (the Penguin sentence, token 8, a factor of 0.5...), so an
answer table written for those inputs could pass them. Every public function therefore also has
a **secret check** of its own: a test marked with :func:`secret_check` naming that one function,
which draws its inputs from a :class:`SecretInputs` and compares the function's answer with a
reference computed in the test, from the test's own inputs, before the call.

Every secret check draws at least one input from a space no table can hold
(:data:`grading.core.declarations.LARGE_DRAWS`: a model of random sizes and weights, a text of random words, tensors of
random sizes and values, random token ids). A pool of texts on a fixed model is not enough on its
own: a table made beforehand would hold every answer. ``grader.py batch`` refuses an exercise
with a function whose checks draw from no such space
(:func:`grading.core.declarations.weak_checks`), as it refuses one with no check at all.

The draws come from one seed. The grader makes a fresh seed per batch (``KATA_SECRET_SEED`` in
the trusted worker's environment, never in the learner's sandbox), so the inputs are known only
once the learner's code is already running. A learner's own ``pytest`` draws a new seed each
session; a failing check prints its seed so that ``KATA_SECRET_SEED=N pytest ...`` repeats it.

Points: an exercise's points are capped by the share of its public functions whose secret checks
all pass (:attr:`grading.core.records.ExerciseResult.points`); one check confirms one function,
so one wrong function never hides a right one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random

import pytest
import torch

# Where the grader puts the batch's seed: the test process's environment, never the learner's.
from grading.box.runner import SECRET_SEED_VARIABLE as SEED_VARIABLE
#: The learner's own pytest session: a new seed each session, unless SEED_VARIABLE is set.
_SESSION_SEED = random.SystemRandom().randrange(2**62)

# The methods of SecretInputs that draw from a space too large to tabulate (a secret check must
# call at least one) are named once, where the grader reads them: declarations.LARGE_DRAWS.


@functools.cache
def _words() -> tuple[str, ...]:
    """Plain English words (lower-case letters, 3 to 9 of them) from GPT-2's vocabulary, which
    the kata ships: some tens of thousands, so a text of ten of them is one of more than 10^40."""
    from kata.models import GPT2_BPE_DIR

    vocabulary = json.loads((GPT2_BPE_DIR / "encoder.json").read_text(encoding="utf-8"))
    return tuple(sorted(token[1:] for token in vocabulary
                        if token.startswith("\u0120") and 3 <= len(token) - 1 <= 9
                        and token[1:].isascii() and token[1:].isalpha() and token[1:].islower()))


def test_seed(nodeid: str) -> int:
    """The seed of one test's draws: the session's seed mixed with the test's node id."""
    digest = hashlib.sha256(f"{session_seed()}:{nodeid}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


test_seed.__test__ = False  # a helper, not a test


def session_seed() -> int:
    """The grader's seed for this batch, else this pytest session's own."""
    value = os.environ.get(SEED_VARIABLE, "").strip()
    return int(value) if value.isdigit() else _SESSION_SEED


class SecretInputs:
    """Random inputs for one secret check, all drawn from one seed."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.generator = torch.Generator().manual_seed(seed % 2**63)

    def integer(self, low: int, high: int) -> int:
        """A whole number from ``low`` to ``high``, both included."""
        return self.rng.randint(low, high)

    def number(self, low: float, high: float) -> float:
        """A number between ``low`` and ``high``, rounded to 3 decimals."""
        return round(self.rng.uniform(low, high), 3)

    def choice(self, options):
        return self.rng.choice(list(options))

    def some(self, options, most: int = 3) -> list:
        """From 1 to ``most`` distinct elements of ``options`` (never more than there are), in
        their order."""
        options = list(options)
        chosen = set(self.rng.sample(range(len(options)), self.integer(1, min(most, len(options)))))
        return [option for k, option in enumerate(options) if k in chosen]

    def words(self, count: int) -> list[str]:
        """``count`` words drawn at random from tens of thousands."""
        return [self.rng.choice(_words()) for _ in range(count)]

    def text(self, words: tuple[int, int] = (4, 12)) -> str:
        """A sentence of a random number of random words, capitalised, ending in a full stop:
        ``"Orbit lantern quietly ... harbour."``."""
        chosen = self.words(self.integer(*words))
        return " ".join([chosen[0].capitalize(), *chosen[1:]]) + "."

    def token_ids(self, vocab_size: int, length: int) -> torch.Tensor:
        """``(1, length)`` random token ids below ``vocab_size``."""
        return self.integers(vocab_size, 1, length)

    def integers(self, high: int, *shape: int) -> torch.Tensor:
        """Random whole numbers from 0 to ``high - 1``, as an int64 tensor of ``shape``."""
        return torch.randint(0, high, shape, generator=self.generator)

    def tensor(self, *shape: int, scale: float | None = None) -> torch.Tensor:
        """Normal float32 values of ``shape``, with a random scale unless ``scale`` is given."""
        scale = self.number(0.2, 5.0) if scale is None else scale
        return torch.randn(*shape, generator=self.generator) * scale

    def hidden_states(self, layers=(2, 7), tokens=(3, 9), width=(4, 24)) -> torch.Tensor:
        """A made-up ``(n_layers + 1, T, d_model)`` stack, each size drawn from its range."""
        return self.tensor(self.integer(*layers), self.integer(*tokens), self.integer(*width))

    def gpt2(self, layers=(1, 5), spread: float = 0.02):
        """A freshly initialised GPT-2 of random sizes (blocks, heads, width, vocabulary), in
        eval mode; torch's global random state is left as it was. ``spread``: the weights'
        standard deviation (GPT-2's own 0.02 gives logits that barely differ; 0.2 gives a model
        whose prompts lead to clearly different predictions)."""
        from transformers import GPT2Config, GPT2LMHeadModel

        heads = self.integer(1, 4)
        # at least 4 channels: a layer norm over 2 channels gives nearly the same vector for
        # every input (x - mean is +-d), so every position would predict alike
        config = GPT2Config(n_layer=self.integer(*layers), n_head=heads,
                            n_embd=heads * self.integer(4 if heads == 1 else 2, 6), vocab_size=self.integer(60, 400),
                            n_positions=64, initializer_range=spread, bos_token_id=0,
                            eos_token_id=0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.rng.getrandbits(63))  # weights from a space no table holds
            return GPT2LMHeadModel(config).eval()

    def prompt_pair(self, model, min_gap: float = 0.5):
        """Two prompts of one random length for ``model`` that differ at a few random positions,
        and two answers whose log-probability difference separates them: ``(clean_ids,
        corrupted_ids, good_id, bad_id)``, the ids ``(1, T)``. Prompts are drawn again until the
        two metrics (``log p(good) - log p(bad)`` at the last position) differ by ``min_gap``,
        so that a map normalised by that gap does not blow float noise up."""
        from course.shared.reference import reference_logits

        vocab = model.config.vocab_size
        for _ in range(50):
            n_tokens = self.integer(2, 7)
            clean = torch.randint(0, vocab, (1, n_tokens), generator=self.generator)
            corrupted = clean.clone()
            for position in self.some(range(n_tokens)):
                corrupted[0, position] = (clean[0, position] + self.integer(1, vocab - 1)) % vocab
            gap = (torch.log_softmax(reference_logits(model, clean)[-1], -1)
                   - torch.log_softmax(reference_logits(model, corrupted)[-1], -1))
            good = self.choice(torch.topk(gap, 3).indices.tolist())
            bad = self.choice(torch.topk(-gap, 3).indices.tolist())
            if gap[good] - gap[bad] >= min_gap:
                break
        return clean, corrupted, good, bad

    def __repr__(self) -> str:
        return f"secret inputs of seed {self.seed}"


def secret_check(function: str):
    """Mark a test as the secret check of one public function, the one it confirms:
    ``@secret_check("layer_similarity")`` above a test that takes ``secret``. A check that
    needs another function's result gets it from the test's own reference, never from the
    learner's other function, so that one wrong function never hides a right one."""
    if not isinstance(function, str) or not function.isidentifier():
        raise TypeError("secret_check names the one public function it checks")
    return pytest.mark.secret_check(function)


@pytest.fixture
def secret(request) -> SecretInputs:
    """The secret check's inputs (import it into a test module with ``secret_check``).

    Under the grader the learner's code may not change these inputs in place: the check computes
    its expected values from them after the call, so overwriting them with a constant whose
    answer is known would pass it (:func:`grading.box.remote.guard_inputs`)."""
    guarded = bool(request.config.getoption("--kata-remote", None))
    if guarded:
        from grading.box.remote import guard_inputs

        guard_inputs(True)
    try:
        yield SecretInputs(test_seed(request.node.nodeid))
    finally:
        if guarded:
            guard_inputs(False)


def repeat_hint() -> str:
    """How to draw the same inputs again, for a failing check's message (nothing under the
    grader, whose seed is the batch's)."""
    if os.environ.get(SEED_VARIABLE):
        return ""
    return f" ({SEED_VARIABLE}={session_seed()} pytest ... draws the same inputs again)"
