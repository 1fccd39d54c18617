"""The catalogue of correct variants: other right ways to write a solution function.

Each ``tests/variants/exN.py`` holds ``VARIANTS``; ``tests/maintainer/test_variants.py`` runs
exercise N's tests with each one patched into the solution and checks that every test passes, so
that the tests accept every correct answer, not just the reference's way of writing it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    id: str  # a short slug, unique within the exercise
    exercise: str  # the manifest id: "ex5"
    summary: str  # how it differs from the reference
    code: str  # replacement definition(s), executed in the solution module's namespace
