"""Everything generated from ``course/``: ``python grader.py generate`` writes it, ``--check``
names what is stale (a maintainer test fails on a stale file).

* **Stubs.** ``exercises/<module>.py`` from ``course/<module>/solution.py``
  (:mod:`grading.core.stubs` says how).
* **Notebooks.** ``notebooks/<module>.ipynb`` from ``course/<module>/notebook.py`` (jupytext's
  percent format), without outputs; the set-up cell every notebook starts with has one source,
  ``course/shared/notebook_setup.py``, put where a source has the marker cell.
* **Tables in the docs.** Each ``<!-- generated: NAME -->`` ... ``<!-- end NAME -->`` region of
  ``README.md`` and ``docs/*.md`` is rewritten from the declarations and from the constants
  that set the grader's limits (:data:`TABLES`), so no number they fix is written by hand
  (``tests/grader/test_docs.py`` holds the docs to that). ``docs/performance.md`` is not among
  them: ``benchmarks/run.py`` writes it whole.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from grading.core.stubs import StubError, stub_text

ROOT = Path(__file__).resolve().parents[2]


class GenerateError(ValueError):
    """A source the generator cannot turn into its generated file; the message says which."""


# --------------------------------------------------------------------------- notebooks

_CELL = re.compile(r"^# %%(?P<markdown> \[markdown\])?(?P<meta>.*)$")


def parse_percent(text: str) -> list[dict]:
    """Cells of a jupytext percent-format file: ``{"type", "source", "tags"}``.

    ``# %%`` starts a code cell, ``# %% [markdown]`` a markdown cell (its lines commented with
    ``# ``); ``tags=["figure"]`` after either sets the cell's tags. Lines before the first
    ``# %%`` are the file's own header and belong to no cell.
    """
    cells: list[dict] = []
    for line in text.splitlines():
        match = _CELL.match(line)
        if match:
            meta = match.group("meta").strip()
            found = re.fullmatch(r"tags=(\[.*\])", meta)
            if meta and not found:
                raise ValueError(f"cannot read cell options {meta!r} (only tags=[...])")
            cells.append({"type": "markdown" if match.group("markdown") else "code",
                          "lines": [], "tags": json.loads(found.group(1)) if found else []})
        elif cells:
            cells[-1]["lines"].append(line)
    for cell in cells:
        lines = cell.pop("lines")
        if cell["type"] == "markdown":
            lines = [line[2:] if line.startswith("# ") else line.lstrip("#") for line in lines]
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        cell["source"] = "\n".join(lines)
    return cells


SETUP_SOURCE = "course/shared/notebook_setup.py"
#: The one line of a source's ``setup``-tagged cell: the build replaces the cell with
#: :data:`SETUP_SOURCE`'s.
SETUP_MARKER = "# (set-up: course/shared/notebook_setup.py)"
SETUP_TAG = "setup"


def setup_cell(root: Path = ROOT) -> dict:
    """The set-up cell every notebook starts with (the one cell of :data:`SETUP_SOURCE`)."""
    cells = parse_percent((Path(root) / SETUP_SOURCE).read_text(encoding="utf-8"))
    if len(cells) != 1 or SETUP_TAG not in cells[0]["tags"]:
        raise GenerateError(f"{SETUP_SOURCE} must hold one cell tagged {SETUP_TAG!r}")
    return cells[0]


def source_cells(source: Path, root: Path = ROOT) -> list[dict]:
    """The cells of a notebook source, its set-up marker replaced by :func:`setup_cell`."""
    cells = parse_percent(source.read_text(encoding="utf-8"))
    for index, cell in enumerate(cells):
        if SETUP_TAG in cell["tags"]:
            if cell["source"].strip() != SETUP_MARKER:
                raise GenerateError(f"{source.relative_to(root)}: the cell tagged {SETUP_TAG!r} "
                                    f"must hold only {SETUP_MARKER!r} (its code is in "
                                    f"{SETUP_SOURCE})")
            cells[index] = setup_cell(root)
    return cells


def notebook_text(exercise, root: Path = ROOT) -> str:
    """The ``.ipynb`` text of ``exercise``'s notebook (no outputs, stable cell ids)."""
    try:
        import nbformat
    except ModuleNotFoundError:
        raise GenerateError("nbformat is missing: it comes with the kernel and notebook extras "
                            "(bash run.sh setup test, or pip install -e '.[notebook]')") from None
    source = Path(root) / exercise.folder / "notebook.py"
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                       "name": "python3"},
        "language_info": {"name": "python"},
        "kata": {"source": f"{exercise.folder}/notebook.py",
                 "generated_by": "python grader.py generate"},
    }
    for index, cell in enumerate(source_cells(source, root)):
        make = nbformat.v4.new_markdown_cell if cell["type"] == "markdown" else \
            nbformat.v4.new_code_cell
        made = make(cell["source"])
        made.id = f"{exercise.id}-{index:02d}"
        if cell["tags"]:
            made.metadata["tags"] = cell["tags"]
        nb.cells.append(made)
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


# --------------------------------------------------------------------------- tables in the docs

_REGION = re.compile(r"(<!-- generated: (?P<name>[a-z-]+)[^>]*-->\n)(?P<body>.*?)(<!-- end (?P=name) -->)",
                     re.S)


def exercises_table(exercises) -> str:
    """Every exercise: its number, title and file, how many functions, the post's demo, points."""
    rows = ["| # | exercise | you write | post | points |", "|---|---|---|---|---|"]
    for e in exercises:
        points = f"{e.points} (bonus)" if e.bonus else str(e.points)
        count = len(e.functions)
        rows.append(f"| {e.number} | {e.title} (`{e.source()}`) | {count} "
                    f"function{'s' * (count != 1)} | {e.post} | {points} |")
    return "\n".join(rows)


def points_summary(exercises) -> str:
    """The maxima an instructor sets in Classroom or Gradescope, from the declarations."""
    main = [e for e in exercises if not e.bonus]
    bonus = [e for e in exercises if e.bonus]
    return (f"{len(exercises)} exercises: {len(main)} main, out of "
            f"**{sum(e.points for e in main)} points**, and {len(bonus)} bonus "
            f"({', '.join(str(e.number) for e in bonus)}), out of "
            f"**{sum(e.points for e in bonus)} extra points**.")


def _seconds(value: float) -> str:
    return f"{value:g} s"


def limits_table(exercises) -> str:
    """The time and memory limits of each way of grading, from the constants that set them (the
    command line's defaults, Gradescope's and Classroom's): what an instructor may change."""
    from grading.core.faults import CALL_SECONDS
    from grading.views.check import DEFAULT_TIMEOUT as CHECK_TIMEOUT
    from grading.views.classroom import CHECK_TIMEOUT_SECONDS, STEP_TIMEOUT_MINUTES
    from grading.box.runner import DEFAULT_BATCH_MEMORY_MB, DEFAULT_TIMEOUT
    from grading.views.gradescope import MEMORY_LIMIT_MB, TIMEOUT
    from kata.serve import GENERATIONS

    in_place = "none of its own: your code runs in the tests' process"
    rows = [
        "| grading | each exercise's tests | one call of a learner's function | memory of each "
        "test process |",
        "|---|---|---|---|",
        f"| `python grader.py`, `watch` | {_seconds(DEFAULT_TIMEOUT)} (`--timeout`; `watch "
        f"--warm`: none) | {in_place} | no limit (`--memory-limit`) |",
        f"| `python grader.py check N` | {_seconds(CHECK_TIMEOUT)} (`--timeout`) | {in_place} "
        "| no limit |",
        f"| `python grader.py batch` | {_seconds(DEFAULT_TIMEOUT)} (`--timeout`) | "
        f"{_seconds(CALL_SECONDS)} (`--call-timeout`) | {DEFAULT_BATCH_MEMORY_MB} MiB "
        "(`--memory-limit`; 0 for none, as on a GPU) |",
        f"| Gradescope (`gradescope-run`) | {_seconds(TIMEOUT)} | {_seconds(CALL_SECONDS)} "
        f"(`gradescope-bundle --call-timeout`) | {MEMORY_LIMIT_MB} MiB |",
        f"| Classroom (`classroom-step`) | {_seconds(CHECK_TIMEOUT_SECONDS)}, in a step of "
        f"{STEP_TIMEOUT_MINUTES} minutes | {_seconds(CALL_SECONDS)} | no limit |",
        "",
        f"Across the boundary (batch, Gradescope, Classroom) an exercise may use {GENERATIONS} "
        "learner processes: the first, and one more each time a call ends the one before.",
    ]
    return "\n".join(rows)


def sandbox_caps_table(exercises) -> str:
    """The sandbox's caps on a submission's learner side, from the constants that set them."""
    from grading.box.learner_box import CPU_MARGIN_SECONDS
    from grading.box.sandbox import MAX_FILE_MB, MAX_PROCESSES, SHM_MB, TMP_MB, UNPRIVILEGED

    rows = [
        "| cap | value | how |",
        "|---|---|---|",
        f"| processes and threads of one submission at once | {MAX_PROCESSES} | the submission's "
        "cgroup (`pids.max`), else `RLIMIT_NPROC` in each process |",
        "| memory | the grading's memory limit (`--memory-limit`) | over all the submission's "
        "processes (its cgroup), else `RLIMIT_AS` in each process |",
        f"| largest file a process may write | {MAX_FILE_MB} MiB | `RLIMIT_FSIZE` |",
        f"| the private `/tmp` | {TMP_MB} MiB | a tmpfs of the sandbox's own |",
        f"| the private `/dev/shm` | {SHM_MB} MiB | a tmpfs of the sandbox's own |",
        f"| CPU time of an exercise's learner process | the exercise's time limit + "
        f"{CPU_MARGIN_SECONDS} s | `RLIMIT_CPU` |",
        f"| user | uid {UNPRIVILEGED} when the grader runs as root | `setuid` before any learner "
        "file is imported |",
    ]
    return "\n".join(rows)


#: What a ``<!-- generated: NAME -->`` region holds: NAME -> a function of the exercises.
TABLES = {"exercises-table": exercises_table, "points": points_summary,
          "limits": limits_table, "sandbox-caps": sandbox_caps_table}


def with_tables(text: str, exercises) -> str:
    """``text`` with every generated region rewritten; an unknown name raises."""
    def fill(match: re.Match) -> str:
        name = match.group("name")
        if name not in TABLES:
            raise GenerateError(f"no table named {name!r} (known: {', '.join(TABLES)})")
        return f"{match.group(1)}{TABLES[name](exercises)}\n{match.group(4)}"

    return _REGION.sub(fill, text)


# --------------------------------------------------------------------------- all of it


def wanted_files(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file, and the text it should hold."""
    from grading.core.declarations import load_exercises

    root = Path(root)
    exercises = load_exercises(root)
    wanted = {}
    for exercise in exercises:
        try:
            wanted[root / exercise.source()] = stub_text(exercise, root)
        except (OSError, SyntaxError, StubError) as error:
            raise GenerateError(f"{exercise.source('solutions')}: {error}") from None
        wanted[root / "notebooks" / f"{exercise.module}.ipynb"] = notebook_text(exercise, root)
    for document in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if document.is_file():
            wanted[document] = with_tables(document.read_text(encoding="utf-8"), exercises)
    return wanted


def generate(root: Path = ROOT, check_only: bool = False) -> list[Path]:
    """Write every generated file that is stale (``check_only``: write nothing); the stale ones."""
    stale = []
    for path, text in wanted_files(root).items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not check_only:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    return stale
