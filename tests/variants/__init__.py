"""The catalogue of correct variants: the mirror image of the mistakes catalogue.

Each ``tests/variants/exN.py`` holds ``VARIANTS``: correct implementations of the solution's
public functions, written the ways learners write them (notebook-style matplotlib, Python loops,
numpy round-trips, ``torch.is_tensor`` hooks, ``model.model.layers`` ...). The exercise's tests
must pass every one of them: a failure is a false alarm in the tests (unless the variant is
wrong), and the fix goes into the test, which must read what is drawn or accept any equivalent
correct result. ``tests/maintainer/test_variants.py`` plants each variant on top of the solution
(``--kata-patch``, as for the mistakes) and requires every test of that exercise to pass.

A variant's ``code`` redefines public functions only; it may define its own private helpers,
but never calls the solution's private ones (they are not part of any contract).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    id: str  # a short slug, unique within the exercise: "notebook-pyplot"
    exercise: str  # the manifest id: "ex1"
    summary: str  # the learner style it shows, in plain words
    code: str  # replacement definition(s), executed in the solution module's namespace

    @property
    def name(self) -> str:
        return f"{self.exercise}-{self.id}"
