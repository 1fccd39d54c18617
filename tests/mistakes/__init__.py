"""The catalogue of learner mistakes that the exercise tests must catch and name.

Each ``tests/mistakes/exN.py`` holds ``MISTAKES``: plausible wrong versions of the solution's
public functions, each with the diagnosis id (``kata.diagnosis``) the tests must report.
``tests/maintainer/test_mistakes.py`` runs each exercise's tests against the solutions with one
mistake patched in and checks that the first failing test names that diagnosis.

A mistake's ``code`` redefines public functions only; it may define its own private helpers, but
never calls the solution's private ones (they are not part of any contract and may be renamed).
Mistakes are built with :func:`catalogue` from small :func:`template` strings (and
:func:`wrapped_figure` for a figure drawn right, then spoiled), so each states only what differs.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    id: str  # a short slug, unique within the exercise: "no-embedding-layer"
    exercise: str  # the manifest id: "ex1"
    summary: str  # what the learner did wrong, in plain words
    diagnosis: str  # the diagnosis id the first failing test must report
    code: str  # replacement definition(s), executed in the solution module's namespace
    #: The root diagnosis, when it is not ``diagnosis``: the one that explains the most failing
    #: tests (kata.grading.results.root_failure), which the report ranks and the learner reads.
    root: str = ""

    @property
    def root_diagnosis(self) -> str:
        return self.root or self.diagnosis


def catalogue(exercise: str, *entries: tuple[str, ...]) -> list[Mistake]:
    """``Mistake``s of ``exercise`` from ``(id, summary, diagnosis, code)`` rows, or
    ``(id, summary, diagnosis, code, root)`` when the root diagnosis differs."""
    return [Mistake(id=entry[0], exercise=exercise, summary=entry[1], diagnosis=entry[2],
                    code=entry[3], root=entry[4] if len(entry) > 4 else "")
            for entry in entries]


def template(code: str, **defaults: str):
    """A code template: ``template(code, SLOT=default)(SLOT=...)`` gives ``code`` with each
    ``{SLOT}`` filled, so a mistake states only what differs from the correct shape.

    Slots are filled in the order of ``defaults``, so a filling may itself name a later slot
    (``READ="torch.softmax(unembed({NORMED}), dim=-1)"``). A slot alone on its line takes a
    block of lines, indented like the slot; an empty filling removes the line. Braces that name
    no slot (f-strings, ``{}``) are left alone.
    """

    def fill(**slots: str) -> str:
        unknown = set(slots) - set(defaults)
        if unknown:
            raise TypeError(f"the template has no slot {sorted(unknown)}")
        text = code
        for name, value in {**defaults, **slots}.items():
            value = textwrap.dedent(value).strip("\n")
            lines = []
            for line in text.split("\n"):
                if line.strip() == "{" + name + "}":
                    pad = line[: len(line) - len(line.lstrip())]
                    lines += [pad + part if part else part for part in value.split("\n") if value]
                else:
                    lines.append(line.replace("{" + name + "}", value))
            text = "\n".join(lines)
        return text

    return fill


def wrapped_figure(function: str, parameters: str, change: str, before: str = "") -> str:
    """A mistake that draws the solution's figure with ``function(parameters)``, then ``change``s
    it (lines run with ``fig`` bound; ``before``: code ahead of the wrapper, such as helpers)."""
    arguments = ", ".join(p.split("=")[0].strip() for p in parameters.split(","))
    return template('''
{BEFORE}
_solution_{FUNCTION} = {FUNCTION}


def {FUNCTION}({PARAMETERS}):
    fig = _solution_{FUNCTION}({ARGUMENTS})
    {CHANGE}
    return fig
''', BEFORE="", FUNCTION="", PARAMETERS="", ARGUMENTS="", CHANGE="")(
        BEFORE=before, FUNCTION=function, PARAMETERS=parameters, ARGUMENTS=arguments,
        CHANGE=change)
