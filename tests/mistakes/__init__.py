"""The catalogue of learner mistakes that the exercise tests must catch and name.

Each ``tests/mistakes/exN.py`` holds ``MISTAKES``: plausible wrong versions of the solution's
public functions, each with the diagnosis id (``kata.diagnosis``) the tests must report.
``tests/maintainer/test_mistakes.py`` runs each exercise's tests against the solutions with one
mistake patched in and checks that the first failing test names that diagnosis.

A mistake's ``code`` redefines public functions only; it may define its own private helpers, but
never calls the solution's private ones (they are not part of any contract and may be renamed).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    id: str  # a short slug, unique within the exercise: "no-embedding-layer"
    exercise: str  # the manifest id: "ex1"
    summary: str  # what the learner did wrong, in plain words
    diagnosis: str  # the diagnosis id the first failing test must report
    code: str  # replacement definition(s), executed in the solution module's namespace
