"""The catalogue of learner mistakes that the exercise tests must catch and name.

Each ``tests/mistakes/exN.py`` holds ``MISTAKES``: plausible wrong versions of solution functions,
with the words a learner must read when the tests fail. ``tests/maintainer/test_mistakes.py``
runs each exercise's tests against the solutions with one mistake patched in and checks that a
test fails with a message containing those words.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    id: str  # a short slug, unique within the exercise: "no-embedding-layer"
    exercise: str  # the manifest id: "ex1"
    summary: str  # what the learner did wrong, in plain words
    message: str  # words that must appear in the message of at least one failing test
    code: str  # replacement definition(s), executed in the solution module's namespace
    # the id the tests must diagnose (kata.diagnosis); "" for entries written before diagnoses
    diagnosis: str = ""
