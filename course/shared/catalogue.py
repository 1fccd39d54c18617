"""The catalogues of each exercise: learner mistakes its tests must name, and correct variants
they must pass.

* ``course/<module>/mistakes.py`` holds ``MISTAKES``: plausible wrong versions of the solution's
  public functions, each with the diagnosis id (:mod:`course.shared.diagnosis`) the tests must
  report. ``tests/course/test_mistakes.py`` runs the exercise's tests against the solution with
  one mistake patched in and checks that the first failing test names that diagnosis.
* ``course/<module>/variants.py`` holds ``VARIANTS``: correct implementations written the ways
  learners write them (notebook-style matplotlib, Python loops, numpy round-trips,
  ``model.model.layers`` ...). Every test of the exercise must pass each one
  (``tests/course/test_variants.py``): a failure is a false alarm, and the fix goes into the test,
  which must read what is drawn or accept any equivalent correct result.

A mistake's or variant's ``code`` redefines public functions only; it may define its own private helpers, but
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
    #: tests (grading.core.results.root_failure), which the report ranks and the learner reads.
    root: str = ""

    @property
    def root_diagnosis(self) -> str:
        return self.root or self.diagnosis


@dataclass(frozen=True)
class Variant:
    id: str  # a short slug, unique within the exercise: "notebook-pyplot"
    exercise: str  # the exercise's id: "ex1"
    summary: str  # the learner style it shows, in plain words
    code: str  # replacement definition(s), executed in the solution module's namespace

    @property
    def name(self) -> str:
        return f"{self.exercise}-{self.id}"


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


def load(kind: str) -> list:
    """Every exercise's catalogued entries of one kind: ``"mistakes"`` (``MISTAKES`` of each
    ``course/<module>/mistakes.py``) or ``"variants"`` (``VARIANTS`` of each ``variants.py``)."""
    import importlib

    from grading.core.declarations import load_exercises

    entries = []
    for exercise in load_exercises():
        try:
            module = importlib.import_module(f"course.{exercise.module}.{kind}")
        except ModuleNotFoundError as error:
            if not f"course.{exercise.module}.{kind}".startswith(str(error.name)):
                raise
            continue
        entries += getattr(module, kind.upper())
    return entries
