"""Every message a learner can read from a test renders: no ``{placeholder}`` is left over.

A message written as a plain string where an f-string was meant (``"to get ({n}, 1)"``) shows its
braces to the learner. This test finds every message the exercise tests and their support code
can show -- the message arguments of ``diagnose``, ``expect``, the ``check_*`` helpers,
``raises_clearly``, ``learner_call``, ``pytest.fail`` and ``assert`` -- renders each one with
sample values standing for every name it uses, and fails on a ``{name}`` left in the text,
naming the file and the line. The same messages speak to the learner ("your function"), never
about them ("the learner's code").
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
#: Every exercise's test code (its test files and the checks beside them, together), and the
#: shared code that words what a test shows (each group must hold messages: a rename of a
#: helper shows here).
SOURCES = {**{folder.name: sorted(p for p in folder.glob("*.py")
                                  if p.name.startswith("test_") or p.name == "checks.py")
              for folder in sorted((ROOT / "course").glob("ex*"))},
           **{f"shared/{name}": [ROOT / "course" / "shared" / name]
              for name in ("support.py", "secret.py", "plugin.py")}}
# The errors the learner kit and the reference solutions raise reach the learner too.
RAISING = sorted((ROOT / "kata").rglob("*.py")) + sorted((ROOT / "course").glob("ex*/solution.py"))

# callee name -> the positions and keywords of its arguments that a learner reads
MESSAGE_ARGUMENTS = {
    "diagnose": ((1,), ("message",)),
    "expect": ((2,), ("message",)),
    "_fail": ((1,), ("message",)),
    "check_tensor": ((1, 2), ("name", "hint")),
    "check_shape": ((2, 3), ("name", "hint")),
    "check_close": ((2, 3), ("name", "hint")),
    "check_similarity": ((2,), ("name",)),
    "check_profile": ((3,), ("name",)),
    "raises_clearly": ((2, 3), ("situation", "hint")),
    "check_message_names": ((3,), ("what",)),
    "learner_call": ((3,), ("advice",)),
    "fail": ((0,), ("reason", "msg")),
}
LEFTOVER = re.compile(r"\{[A-Za-z_][\w.]*(?:\[[^\]]*\])?(?:![rsa])?(?::[^{}]*)?\}")
# Code shown to the learner as an f-string, label=f'clean: {clean_value:.3f}', keeps its braces.
SHOWN_F_STRING = re.compile(r"\bf'[^']*'" + r'|\bf"[^"]*"')


def leftover(text: str):
    """The first placeholder left in ``text`` outside the f-strings it shows as code, or None."""
    return LEFTOVER.search(SHOWN_F_STRING.sub("f''", text))


class Sample:
    """Stands for any value a message interpolates: every operation gives another sample."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Sample()

    def __call__(self, *args, **kwargs):
        return Sample()

    def __getitem__(self, key):
        return Sample()

    def __iter__(self):
        return iter((Sample(), Sample()))

    def __len__(self):
        return 2

    def __index__(self):
        return 2

    __int__ = __index__

    def __float__(self):
        return 0.5

    def __bool__(self):
        return True

    def __format__(self, spec):
        try:
            return format(0.5, spec)
        except ValueError:
            return "sample"

    def __str__(self):
        return "sample"

    def __repr__(self):
        return "'sample'"

    def __eq__(self, other):
        return False

    def __hash__(self):
        return 0

    def _same(self, *args):
        return Sample()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __pow__ = _same
    __neg__ = __abs__ = __lt__ = __le__ = __gt__ = __ge__ = __and__ = __or__ = _same

    def __round__(self, digits=None):
        return 0.5


class AnyName(dict):
    """A namespace in which every name is a sample (the builtins too)."""

    def __missing__(self, name):
        return Sample()


def messages(path: Path):
    """(line, expression) for every message argument in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assert) and node.msg is not None:
            yield node.lineno, node.msg
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if callee.endswith(("Error", "Exception", "Exit")) and node.args:
            yield node.lineno, node.args[0]  # raise SomeError(message)
            continue
        if callee not in MESSAGE_ARGUMENTS:
            continue
        positions, keywords = MESSAGE_ARGUMENTS[callee]
        for position in positions:
            if position < len(node.args):
                yield node.lineno, node.args[position]
        for keyword in node.keywords:
            if keyword.arg in keywords:
                yield keyword.lineno, keyword.value


def has_text(expression: ast.AST) -> bool:
    return any(isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str))
               for n in ast.walk(expression))


def render(expression: ast.AST) -> str:
    """The message with a sample for every name; the literal text alone if it cannot run."""
    try:
        code = compile(ast.Expression(expression), "<message>", "eval")
        return str(eval(code, AnyName(__builtins__={}), AnyName()))  # noqa: S307 - our own test code
    except Exception:  # noqa: BLE001 - a message too clever for samples: check its literal parts
        parts = [n.value for n in ast.walk(expression)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        return " ".join(parts)


def test_the_renderer_finds_a_forgotten_f_prefix():
    broken = ast.parse('("to get " f"({n}, 1)" "; or ({n}, 1)")', mode="eval").body
    assert leftover(render(broken)).group() == "{n}"
    shown = ast.parse('"(label=f\'clean: {clean_value:.3f}\')"', mode="eval").body
    assert leftover(render(shown)) is None
    fine = ast.parse('f"a {x!r} of {len(y)} and {z:.3g} " f"{[round(v, 3) for v in w]}"',
                     mode="eval").body
    assert leftover(render(fine)) is None, render(fine)
    assert not math.isnan(float(Sample()))


@pytest.mark.parametrize("group", SOURCES)
def test_every_message_renders_without_a_leftover_placeholder(group):
    found = [(path, line, expression) for path in SOURCES[group]
             for line, expression in messages(path) if has_text(expression)]
    assert found, f"no messages found in {group}: has the helpers' naming changed?"
    leftovers, third_person = [], []
    for path, line, expression in found:
        text = render(expression)
        match = leftover(text)
        if match:
            leftovers.append(f"{path.name}:{line}: {match.group()} in {text[:160]!r}")
        if re.search(r"\blearners?\b|\blearner's\b", text, flags=re.IGNORECASE):
            third_person.append(f"{path.name}:{line}: {text[:160]!r}")
    assert not third_person, (
        "these messages speak about the learner to the learner: say 'you', 'your function':\n"
        + "\n".join(third_person))
    assert not leftovers, (
        "these messages show a placeholder to the learner (an f prefix forgotten, or braces "
        "meant literally?):\n" + "\n".join(leftovers))


@pytest.mark.parametrize("path", RAISING, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_error_the_kata_raises_renders_without_a_leftover_placeholder(path):
    leftovers = []
    for line, expression in messages(path):
        if not has_text(expression):
            continue
        text = render(expression)
        match = leftover(text)
        if match:
            leftovers.append(f"{path.name}:{line}: {match.group()} in {text[:160]!r}")
    assert not leftovers, "these errors show a placeholder:\n" + "\n".join(leftovers)


# The modules that build the sentences the tests report and return them (the shape of a wrong map,
# a library error's likely cause): every text in them is a message, or part of one.
SENTENCE_MODULES = [ROOT / "course" / "shared" / "maps.py",
                    ROOT / "course" / "shared" / "library_errors.py"]


def texts(path: Path):
    """(line, expression) for every text of ``path``: each f-string, and each plain string that
    is neither a docstring nor part of an f-string."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = {id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
              for value in ast.walk(node) if value is not node}
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    for node in ast.walk(tree):
        if id(node) in inside or id(node) in docstrings:
            continue
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                               and isinstance(node.value, str)):
            yield node.lineno, node


@pytest.mark.parametrize("path", SENTENCE_MODULES, ids=lambda p: p.name)
def test_every_sentence_a_module_builds_renders_and_speaks_to_you(path):
    found = list(texts(path))
    assert found, f"no texts found in {path.name}"
    leftovers, third_person = [], []
    for line, expression in found:
        text = render(expression)
        match = leftover(text)
        if match:
            leftovers.append(f"{path.name}:{line}: {match.group()} in {text[:160]!r}")
        if re.search(r"\blearners?\b|\blearner's\b", text, flags=re.IGNORECASE):
            third_person.append(f"{path.name}:{line}: {text[:160]!r}")
    assert not third_person, "these texts speak about the learner:\n" + "\n".join(third_person)
    assert not leftovers, "these texts show a placeholder:\n" + "\n".join(leftovers)
