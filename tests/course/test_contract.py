"""Every promise in a docstring is tested (issue 12, item 5).

The docstrings of ``course/<module>/solution.py`` become the learners' stubs, so each public function's
"Returns ..." and "Raises ..." clauses are a contract. A naming rule, no manifest, maps each
clause to the tests that check it, in the exercise's own test code:

* **Returns**: some test reaches the function: the test, a helper or a module-level table it
  uses (followed through the exercise's test code) names it, as ``ex.<function>`` or as the string
  ``"<function>"`` (for ``getattr(ex, function)`` in parametrized tests).
* **Raises X** (``Raises ``X```, ``raise a ``X```, a ``Raises:`` section): some test reaches the
  function *and* expects that error: ``pytest.raises(X, ...)`` or the support helper
  ``raises_clearly(X, ...)``.

* **Prose promises** (:data:`PROSE_PROMISES`): a sentence such as "lists the pieces", "never
  scale in place", "detached from autograd", "float32", "on the CPU", "sums to 1", "never NaN",
  "names the valid range" or "every hook is removed" needs a test that reaches the function and
  looks at that property: it names the attribute, call or check that observes it
  (``requires_grad``, ``torch.float32``, ``"cpu"``, ``isnan``, ``check_message_names`` ...).

A clause without such a test fails here, naming the function and the clause.

The same docstrings follow **one layout** (checked here too): a summary line, what the function
does, then paragraphs that begin ``Returns``, ``Raises`` (when it raises), ``Hint:``,
``On the models:`` (when there is something to see on them) and ``Post:``, in that order; no
``Args:`` sections, no measurement notes ("Measured", "Memory", "not measured here"). And **one
bad-index rule**: a position, token index or layer argument out of range raises ``IndexError``
(``kata.token_index``, ``kata.layer_index``); a token id that is no token raises ``ValueError``
(``kata.token_id``).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from grading.core.declarations import load_exercises


EXERCISES = load_exercises()
BY_ID = {exercise.id: exercise for exercise in EXERCISES}
ROOT = Path(__file__).resolve().parents[2]

_ERROR = r"``?(?P<error>[A-Z]\w*(?:Error|Exception))``?"
_RAISES_SENTENCE = re.compile(rf"\b(?:[Rr]aises?|raising)\s+(?:an?\s+)?{_ERROR}")


def promised_errors(docstring: str) -> set[str]:
    """The exception types a docstring promises to raise."""
    errors = {m.group("error") for m in _RAISES_SENTENCE.finditer(docstring)}
    section = re.search(r"^\s*Raises:\s*\n((?:[ \t]+.*\n?)+)", docstring, flags=re.MULTILINE)
    if section:
        errors |= set(re.findall(r"^\s+([A-Z]\w*(?:Error|Exception)):", section.group(1),
                                 flags=re.MULTILINE))
    return errors


def promises(exercise) -> dict[str, dict]:
    """function -> {"returns": bool, "raises": {error types}} from the solution's docstrings."""
    tree = ast.parse((ROOT / exercise.source("solutions")).read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in exercise.functions:
            doc = ast.get_docstring(node) or ""
            found[node.name] = {"returns": bool(re.search(r"\bReturns?\b", doc)),
                                "raises": promised_errors(doc), "prose": promised_prose(doc)}
    return found


#: The files of an exercise's folder that hold no test code.
NOT_TEST_CODE = ("__init__.py", "solution.py", "mistakes.py", "variants.py", "notebook.py",
                 "drawing.py")


def exercise_test_code(folder: Path) -> list[Path]:
    """An exercise folder's test code: its ``test_*.py`` files and the helpers beside them."""
    return sorted(p for p in Path(folder).glob("*.py") if p.name not in NOT_TEST_CODE)


#: id(node) -> (node, every node under it): each module-level definition is walked once, not
#: once for every (function, clause) and test that reaches it.
_WALKED: dict[int, tuple[ast.AST, list[ast.AST]]] = {}


def walked(node: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(node))``, made once per node."""
    kept = _WALKED.get(id(node))
    if kept is None or kept[0] is not node:
        kept = _WALKED[id(node)] = (node, list(ast.walk(node)))
    return kept[1]


class ReachMap:
    """What each test function of an exercise reaches, following names through its test code
    (the test files and the helper modules beside them, as one namespace)."""

    def __init__(self, paths: list[Path]):
        self.definitions: dict[str, list[ast.AST]] = {}
        self.tests = []
        self._reached: dict[int, list[ast.AST]] = {}
        for path in paths:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    self.definitions.setdefault(node.name, []).append(node)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            self.definitions.setdefault(target.id, []).append(node)
            if path.name.startswith("test_"):
                self.tests += [node for node in tree.body if isinstance(node, ast.FunctionDef)
                               and node.name.startswith("test_")]

    def reachable(self, test: ast.FunctionDef) -> list[ast.AST]:
        """The test (with its decorators) and every module-level definition it reaches by name.

        Fixtures count too: a test's argument names the fixture function of the same name.
        Found once per test.
        """
        if id(test) in self._reached:
            return self._reached[id(test)]
        seen, queue, nodes = {test.name}, [test], []
        while queue:
            node = queue.pop()
            nodes.append(node)
            names = {n.id for n in walked(node) if isinstance(n, ast.Name)}
            if isinstance(node, ast.FunctionDef):
                names |= {a.arg for a in node.args.args}
            for name in names - seen:
                seen.add(name)
                queue += self.definitions.get(name, [])
        self._reached[id(test)] = nodes
        return nodes

    @staticmethod
    def names_function(nodes, function: str) -> bool:
        for node in nodes:
            for n in walked(node):
                if (isinstance(n, ast.Attribute) and n.attr == function
                        and isinstance(n.value, ast.Name) and n.value.id == "ex"):
                    return True
                if isinstance(n, ast.Constant) and n.value == function:
                    return True
        return False

    @staticmethod
    def expects_error(nodes, error: str) -> bool:
        for node in nodes:
            for n in walked(node):
                if not (isinstance(n, ast.Call) and n.args):
                    continue
                callee = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                first = n.args[0]
                if callee in ("raises", "raises_clearly") and isinstance(first, ast.Name) \
                        and first.id == error:
                    return True
        return False

    def tests_for(self, function: str, error: str | None = None) -> list[str]:
        found = []
        for test in self.tests:
            nodes = self.reachable(test)
            if self.names_function(nodes, function) and (
                    error is None or self.expects_error(nodes, error)):
                found.append(test.name)
        return found


#: (promise, docstring pattern, evidence): a test that checks the promise names one of the
#: evidence items: a name or attribute (``requires_grad``), a string constant equal to it
#: (``"cpu"``), or, for an item starting with ``~``, a string constant containing the rest.
PROSE_PROMISES = [
    ("lists the pieces", r"lists? the pieces", {"~should list the pieces"}),
    ("builds new tensors (never in place)", r"in place|out of place",
     {"_version", "data_ptr", "~in place"}),
    ("detached from autograd", r"detached|without gradients|no autograd",
     {"requires_grad", "grad_fn"}),
    ("float32", r"float32", {"float32"}),
    ("on the CPU", r"\bCPU\b", {"cpu"}),
    ("int64", r"int64", {"int64"}),
    ("sums to 1", r"sums? to 1", {"exp", "logsumexp"}),
    ("never NaN", r"\bNaN\b", {"isnan"}),
    ("names the valid range", r"nam\w+ the valid range|say ``?\"token id\"",
     {"check_message_names", "~valid range"}),
    ("every hook removed", r"\bremoved?\b.*\bhooks?\b|\bhooks?\b[^.]*\bremoved?\b",
     {"~hook", "hooks_before", "_forward_hooks"}),
    ("keeps the leading space", r"leading space", {"strip", "~leading space"}),
]


def promised_prose(docstring: str) -> list[str]:
    """The prose promises (by name) that a docstring makes."""
    flat = " ".join(docstring.split())
    return [name for name, pattern, _ in PROSE_PROMISES if re.search(pattern, flat)]


def shows_evidence(nodes, evidence: set[str]) -> bool:
    for node in nodes:
        for n in walked(node):
            if isinstance(n, ast.Name) and n.id in evidence:
                return True
            if isinstance(n, ast.Attribute) and n.attr in evidence:
                return True
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                if n.value in evidence or any(
                        item.startswith("~") and item[1:] in n.value for item in evidence):
                    return True
            if isinstance(n, ast.JoinedStr):
                text = "".join(v.value for v in n.values if isinstance(v, ast.Constant))
                if any(item.startswith("~") and item[1:] in text for item in evidence):
                    return True
    return False


@functools.cache
def exercise_contract(exercise_id: str) -> dict[tuple[str, str], list[str]]:
    """(function, clause) -> the tests of one exercise that check it; clause "Returns",
    "Raises X" or "promises: ..." (read once per process: it walks every test's reach)."""
    exercise = BY_ID[exercise_id]
    test_file = ReachMap(exercise_test_code(ROOT / exercise.folder))
    mapping = {}
    for function, promised in promises(exercise).items():
        if promised["returns"]:
            mapping[(function, "Returns")] = test_file.tests_for(function)
        for error in sorted(promised["raises"]):
            mapping[(function, f"Raises {error}")] = test_file.tests_for(function, error)
        for promise in promised["prose"]:
            evidence = next(e for name, _, e in PROSE_PROMISES if name == promise)
            mapping[(function, f"promises: {promise}")] = [
                test.name for test in test_file.tests
                if test_file.names_function(nodes := test_file.reachable(test), function)
                and shows_evidence(nodes, evidence)]
    return mapping


def contract_map() -> dict[tuple[str, str, str], list[str]]:
    """(exercise, function, clause) -> the tests that check it, for every exercise."""
    return {(exercise.id, function, clause): tests for exercise in EXERCISES
            for (function, clause), tests in exercise_contract(exercise.id).items()}


def test_the_docstring_parser_reads_both_styles():
    assert promised_errors("Raises ``ValueError`` for an empty text.") == {"ValueError"}
    assert promised_errors("otherwise raise a ``ValueError`` that lists") == {"ValueError"}
    assert promised_errors("Args:\n    x: y\n\nRaises:\n    IndexError: out of range\n") == {
        "IndexError"}
    assert promised_errors("Returns a tensor.") == set()


def test_every_public_function_with_a_docstring_promise_is_found():
    for exercise in EXERCISES:
        found = promises(exercise)
        missing = set(exercise.functions) - set(found)
        assert not missing, f"{exercise.id}: no docstring found for {sorted(missing)}"
    clauses = contract_map()
    assert sum(clause.startswith("Raises") for _, _, clause in clauses) >= 10, clauses


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_every_returns_and_raises_clause_and_prose_promise_has_a_test(exercise):
    untested = [f"{function}: {clause}" for (function, clause), tests
                in exercise_contract(exercise.id).items() if not tests]
    assert not untested, (
        f"{exercise.tests} has no test for these docstring promises of "
        f"{exercise.source('solutions')} (a test must reach ex.<function>; for Raises X use "
        f"pytest.raises(X) or raises_clearly(X, ...); for a prose promise, look at the property "
        f"it promises, see PROSE_PROMISES): {untested}")


def test_the_prose_promise_finder_reads_sentences_across_lines():
    assert promised_prose("raise a ``ValueError`` that lists\n    the pieces the tokenizer made") == [
        "lists the pieces"]
    assert "detached from autograd" in promised_prose("a float32 CPU tensor, detached from autograd")
    assert "every hook removed" in promised_prose("Every hook is removed before returning")
    assert promised_prose("Returns an int.") == []


# ----------------------------------------------------------------------------- one layout

#: The paragraphs a docstring may have after its description, in this order.
LAYOUT = ["Returns", "Raises", "Hint:", "On the models:", "Post:"]
REQUIRED = {"Returns", "Hint:", "Post:"}
FORBIDDEN = [r"^\s*Args:", r"^\s*Returns:\s*$", r"^\s*Raises:\s*$", r"^\s*Measured\b",
             r"^\s*Expected:", r"^\s*Memory:", r"not measured here"]


def layout_problems(doc: str) -> list[str]:
    """What keeps a docstring from the one layout (empty when it follows it)."""
    problems = [f"has {pattern!r}" for pattern in FORBIDDEN
                if re.search(pattern, doc, flags=re.MULTILINE)]
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", doc) if p.strip()]
    order = []
    for paragraph in paragraphs[1:]:
        head = next((h for h in LAYOUT if paragraph.startswith(h)), None)
        if head is not None:
            order.append(head)
        elif order and order[-1] != "Returns":
            problems.append(f"a paragraph after {order[-1]!r} that is none of {LAYOUT}: "
                            f"{paragraph[:50]!r}")
    for head in REQUIRED - set(order):
        problems.append(f"no paragraph beginning {head!r}")
    if order != sorted(order, key=LAYOUT.index):
        problems.append(f"paragraphs in the order {order}, expected the order {LAYOUT}")
    if len(order) != len(set(order)):
        problems.append(f"a paragraph heading repeated: {order}")
    return problems


def test_the_layout_check_knows_the_layout():
    good = ("One line.\n\nWhat it does.\n\nReturns a tensor.\nRaises ``ValueError`` for x.\n\n"
            "Hint: this.\n\nOn the models: that.\n\nPost: demo 1.")
    assert layout_problems(good) == []
    assert any("Args" in p for p in layout_problems(good.replace("What it does.", "Args:\n  x: y")))
    assert any("order" in p for p in layout_problems(good.replace("Hint: this.\n\nOn the models: that.",
                                                                  "On the models: that.\n\nHint: this.")))
    assert any("Post:" in p for p in layout_problems(good.replace("\n\nPost: demo 1.", "")))


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_every_docstring_follows_the_one_layout(exercise):
    tree = ast.parse((ROOT / exercise.source("solutions")).read_text(encoding="utf-8"))
    problems = [f"{node.name}: {problem}" for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name in exercise.functions
                for problem in layout_problems(ast.get_docstring(node) or "")]
    assert not problems, (
        f"{exercise.source('solutions')}: these docstrings leave the one layout (a description, "
        f"then {' / '.join(LAYOUT)}):\n" + "\n".join(problems))


# ----------------------------------------------------------------------------- bad indices

#: parameter -> the error a bad value must raise, by the kata's one rule.
INDEX_PARAMETERS = {"token_index": "IndexError", "position": "IndexError",
                    "positions": "IndexError", "layer": "IndexError", "target_id": "ValueError"}


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_bad_indices_follow_the_one_rule(exercise):
    tree = ast.parse((ROOT / exercise.source("solutions")).read_text(encoding="utf-8"))
    problems = []
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name in exercise.functions):
            continue
        promised = promised_errors(ast.get_docstring(node) or "")
        for argument in node.args.args:
            wanted = INDEX_PARAMETERS.get(argument.arg)
            if wanted and wanted not in promised:
                problems.append(f"{node.name}({argument.arg}=...) promises no {wanted}")
    assert not problems, (
        "a bad position, token index or layer raises IndexError (kata.token_index, "
        "kata.layer_index), a bad token id ValueError (kata.token_id); the docstring says so in "
        "a Raises sentence: " + "; ".join(problems))


# ----------------------------------------------------------------------------- the method is in the hints

#: Words of the method that belong in the hints, never in a function's docstring: how a hook is
#: attached and kept first, how it is removed, how a gradient is caught.
METHOD_WORDS = ("prepend", "finally", "requires_grad_", "register_forward_hook",
                "register_forward_pre_hook", "torch.no_grad", "detach()")
#: An index formula: two names or numbers multiplied, then added to (``1 + T*l + p``).
INDEX_FORMULA = re.compile(r"\w\s*\*\s*\w+\s*\+|\+\s*\w+\s*\*\s*\w")


def _spans(doc: str) -> list[str]:
    return re.findall(r"``(.+?)``", doc, flags=re.S)


def code_in(span: str) -> str | None:
    """What makes an inline code span a line of the method, not a name: a call with arguments,
    a slice, an assignment or a statement (None for a name, a literal, a shape)."""
    try:
        tree = ast.parse(" ".join(span.split()), mode="exec")
    except SyntaxError:
        return None  # prose in code marks ("-T..T-1", a token such as " P")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (node.args or node.keywords):
            return "a call with arguments"
        if isinstance(node, ast.Slice):
            return "a slice"
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.With, ast.Try, ast.For, ast.Lambda,
                             ast.Return, ast.If, ast.FunctionDef)):
            return f"a statement ({type(node).__name__.lower()})"
    return None


def method_in_docstring(doc: str) -> list[str]:
    """What of the method a docstring holds (empty when it states the contract and the idea)."""
    found = [f"``{span}`` is {why}" for span in _spans(doc) if (why := code_in(span))]
    flat = " ".join(doc.split())
    found += [f"names {word!r}" for word in METHOD_WORDS if word in flat]
    found += [f"holds an index formula {m.group(0)!r}" for m in INDEX_FORMULA.finditer(
        re.sub(r"\(([^()]*)\)", lambda s: "" if "," in s.group(1) else s.group(0), flat))]
    return found


def test_the_method_check_tells_the_idea_from_the_method():
    assert method_in_docstring("Returns (n_layers + 1, T, d_model); ``kata.token_index`` checks "
                               "it, ``hidden_states[-1]`` is the last, ``-T..T-1``.") == []
    for doc, found in [("run ``model(ids, output_hidden_states=True)``", "a call with arguments"),
                       ("take ``output[:, 0]``", "a slice"),
                       ("register it with prepend=True", "'prepend'"),
                       ("remove it in a finally block", "'finally'"),
                       ("row 1 + T*l + p holds it", "index formula")]:
        assert any(found in problem for problem in method_in_docstring(doc)), doc


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_docstrings_leave_the_method_to_the_hints(exercise):
    """A docstring states the contract and the idea, and one first hint; the steps of the method
    (calls, index formulas, which hook and how it is kept and removed) are hint levels 2 and 3,
    which ``grader.py hint`` gives one at a time."""
    tree = ast.parse((ROOT / exercise.source("solutions")).read_text(encoding="utf-8"))
    problems = [f"{node.name}: {problem}" for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name in exercise.functions
                for problem in method_in_docstring(ast.get_docstring(node) or "")]
    assert not problems, (
        f"{exercise.source('solutions')}: these docstrings give the method away; move it to the "
        f"hint levels in {exercise.folder}/exercise.toml:\n" + "\n".join(problems))
