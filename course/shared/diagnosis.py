"""Diagnoses: a test that recognises a learner's mistake names it with one stable id.

A diagnosis is an ``AssertionError`` that carries an id, so pytest shows it like any failed
assertion, and the grader's recorder (``grading.core.recorder``) copies the id into its records.
The mistakes catalogue (``tests/mistakes/``), the grader's reports and the class report all speak
of the same ids::

    from course.shared.diagnosis import diagnose
    if len(hidden_states) == n_layers:
        diagnose("embedding-layer-missing",
                 f"expected {n_layers + 1} hidden states, got {n_layers}: index 0 is the embedding layer")

Ids are kebab-case and unique across the kata (``embedding-layer-missing``, ``unique-sorts-pairs``).
"""

from __future__ import annotations

import re
from typing import NoReturn

_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class Diagnosis(AssertionError):
    """A failed check that names the learner's likely mistake by ``id``."""

    def __init__(self, id: str, message: str):
        if not _ID.match(id):
            raise ValueError(f"a diagnosis id is kebab-case, like 'embedding-layer-missing': got {id!r}")
        super().__init__(message)
        self.id = id
        self.message = message


def diagnose(id: str, message: str) -> NoReturn:
    """Fail the current test with ``message``, naming the mistake ``id``."""
    raise Diagnosis(id, message)


def diagnosis_of(error: BaseException | None) -> Diagnosis | None:
    """The diagnosis behind ``error`` (itself, or what it was raised from), if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, Diagnosis):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
