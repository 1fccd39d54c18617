"""The class report: one self-contained HTML page about a whole batch of submissions.

``grader.py batch SUBMISSIONS... --report report.html`` writes it. The page needs nothing from
the network and runs no script: styles are inline and every plot is an SVG drawn here. It reads
top-down, the first screen first:

* the summary numbers, then "teach next": the *root* mistakes
  (:func:`grading.core.results.root_failure`) that several learners share
  (:func:`shared_threshold`), the most learners first, each with one anonymised example message,
  or a sentence saying none is shared; then the class's most common problems (:data:`PROBLEMS`),
  each with the learners' names. An untouched stub is never a mistake;
* the learners, sorted by score (and, folded, by status and by name), a short status word and the
  points per exercise, each linking to that learner's failures further down;
* the score distribution (tenths of the main part's maximum, and a bin of its own for 100 %) and
  the status counts of every exercise;
* every diagnosed mistake across the class (:mod:`course.shared.diagnosis` ids), roots and symptoms;
* the pass rate of every test over the learners who reached it
  (:attr:`~grading.core.records.TestRecord.reached`), the tests below 100 % first; skipped, never
  run, "not started" and not imported are each counted apart, not as failures;
* each learner's failures; a crash or an import error is one row, not one row per test.

:class:`ClassReport` rewrites it (atomically) after every submission, so an interrupted batch
still has a report of everything graded so far. Every number shown is also a ``data-*``
attribute, and the page embeds its figures as JSON (``<script type="application/json"
id="class-data">``, escaped by :func:`grading.core.sanitize.script_json`), so tests and scripts
can read them back. Everything a submission controls (its name, its messages) is escaped.
"""

from __future__ import annotations

import html
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from grading.core.declarations import Exercise

from grading.core import sanitize
from grading.core.records import Outcome, Status, SubmissionResult
from grading.views.reports import write_text_atomically
from grading.core.results import root_failure

__all__ = ["ClassProblem", "ClassReport", "ClassSummary", "DiagnosisCount", "RootMistake",
           "TestPassRate", "render_class_report", "shared_threshold", "summarize_class",
           "write_class_report"]

#: Score histogram: this many bins over [0, 100) % of the main part's maximum, then one more
#: bin for exactly 100 %.
SCORE_BINS = 10
#: Longest message shown in full (learners' code can raise anything, of any length).
MESSAGE_CHARS = 600
#: "Teach next" lists the root mistakes shared by at least this many learners, and by at least
#: this share of the class (:func:`shared_threshold`), at most :data:`TEACH_NEXT` of them.
SHARED_LEARNERS = 2
SHARED_SHARE = 0.10
TEACH_NEXT = 5
#: The statuses that make the class's common problems, in the order they are listed on a tie;
#: "not started" counts the main exercises only (a bonus nobody began is no problem).
PROBLEMS = (Status.NOT_IMPORTED, Status.TIMED_OUT, Status.CRASHED, Status.OUT_OF_MEMORY,
            Status.NOT_STARTED, Status.MISSING, Status.ERROR, Status.ENVIRONMENT_ERROR)
#: Most learners' names a problem lists per exercise before "and N more".
NAMES_SHOWN = 12
#: Colours of the statuses, in the order the stacked bars and tables list them.
STATUS_COLOURS = {
    Status.DONE: "#2e7d32", Status.IN_PROGRESS: "#9ccc65", Status.FAILING: "#ef6c00",
    Status.NOT_STARTED: "#bdbdbd", Status.NOT_IMPORTED: "#c62828", Status.TIMED_OUT: "#6a1b9a",
    Status.CRASHED: "#4e342e", Status.OUT_OF_MEMORY: "#ad1457", Status.MISSING: "#eeeeee",
    Status.ERROR: "#e53935", Status.ENVIRONMENT_ERROR: "#1565c0",
}
#: The statuses whose colour is light: written on in black, the others in white.
LIGHT = frozenset({Status.NOT_STARTED, Status.MISSING, Status.IN_PROGRESS})
#: The word a learner's cell shows for each status (the full status is its tooltip and is in
#: the legend above the table): short, so seven exercises fit a 1,400-pixel window.
STATUS_WORDS = {
    Status.DONE: "done", Status.IN_PROGRESS: "partial", Status.FAILING: "failing",
    Status.NOT_STARTED: "unstarted", Status.NOT_IMPORTED: "no import", Status.TIMED_OUT: "timeout",
    Status.CRASHED: "crash", Status.OUT_OF_MEMORY: "memory", Status.MISSING: "missing",
    Status.ERROR: "error", Status.ENVIRONMENT_ERROR: "machine",
}
#: The order of the learners table sorted by status: the most worrying first.
STATUS_RANK = {status: rank for rank, status in enumerate((
    Status.ENVIRONMENT_ERROR, Status.CRASHED, Status.TIMED_OUT,
    Status.OUT_OF_MEMORY, Status.NOT_IMPORTED, Status.ERROR, Status.MISSING, Status.NOT_STARTED,
    Status.FAILING, Status.IN_PROGRESS, Status.DONE))}


# --------------------------------------------------------------------------- the numbers


@dataclass(frozen=True)
class TestPassRate:
    """How many of the learners who reached one test passed it; the others apart."""

    __test__ = False  # not a pytest test class

    nodeid: str
    exercise: str | None
    name: str
    passed: int = 0
    ran: int = 0  # learners who reached the test (TestRecord.reached)
    skipped: int = 0
    not_run: int = 0  # never ran: the test process crashed or timed out before it
    not_started: int = 0  # stopped at an untouched stub
    not_imported: int = 0  # the exercise file does not import

    @property
    def rate(self) -> float:
        return self.passed / self.ran if self.ran else 0.0

    @property
    def all_passed(self) -> bool:
        """Every learner who reached it passed it (or nobody reached it): folded on the page."""
        return self.passed == self.ran


@dataclass(frozen=True)
class DiagnosisCount:
    """One diagnosed mistake across the class."""

    id: str
    count: int  # failing tests that named it, over every learner
    learners: int  # learners with at least one such failure
    share: float  # learners / all learners
    example: str  # one message, from the first learner who made it
    exercises: tuple[str, ...]  # where it was diagnosed
    roots: int = 0  # learners for whom it is the root mistake of an exercise


@dataclass(frozen=True)
class RootMistake:
    """A root mistake (:func:`grading.core.results.root_failure`) and the learners who made it."""

    id: str
    learners: int
    share: float
    exercises: tuple[str, ...]
    explained: int  # failing tests it explains, over those learners
    example: str  # one message, anonymised
    names: tuple[str, ...] = ()  # the learners who made it, in the batch's order


@dataclass(frozen=True)
class ClassProblem:
    """One of the class's common problems: the learners whose exercises stand at ``status``
    (not started, does not import, timed out, crashed, ...), exercise by exercise."""

    status: Status
    learners: int  # learners with at least one exercise at this status
    share: float
    exercises: tuple[tuple[str, tuple[str, ...]], ...]  # (exercise id, the learners' names)

    @property
    def cases(self) -> int:
        """Exercises at this status, over every learner."""
        return sum(len(names) for _, names in self.exercises)


@dataclass
class ClassSummary:
    """Everything the page shows, computed from the results alone."""

    learners: int
    max_points: float
    mean_points: float
    median_points: float
    all_done: int
    histogram: list[int]  # SCORE_BINS + 1 counts of main points as a share of the maximum
    status_counts: dict[str, dict[str, int]]  # exercise id -> status value -> learners
    tests: list[TestPassRate]  # hardest first; tests nobody reached last
    diagnoses: list[DiagnosisCount]  # most frequent first
    undiagnosed_failures: int  # failing tests that named no diagnosis (stubs not counted)
    exercises: list[Exercise] = field(default_factory=list)
    teach_next: list[RootMistake] = field(default_factory=list)  # shared by several learners
    roots: list[RootMistake] = field(default_factory=list)  # all of them, most learners first
    problems: list[ClassProblem] = field(default_factory=list)  # most learners first
    shared: int = SHARED_LEARNERS  # how many learners make a mistake "shared" (shared_threshold)

    def to_json(self) -> dict:
        return {
            "learners": self.learners, "max_points": self.max_points,
            "mean_points": self.mean_points, "median_points": self.median_points,
            "all_done": self.all_done, "histogram": self.histogram,
            "status_counts": self.status_counts, "shared": self.shared,
            "teach_next": [_json(r) for r in self.teach_next],
            "roots": [_json(r) for r in self.roots],
            "problems": [_json(p, status=p.status.value,
                               exercises={e: list(names) for e, names in p.exercises})
                         for p in self.problems],
            "tests": [_json(t, rate=t.rate) for t in self.tests],
            "diagnoses": [_json(d) for d in self.diagnoses],
            "undiagnosed_failures": self.undiagnosed_failures,
        }


def _json(record, **overrides) -> dict:
    """A summary record's fields and ``overrides`` as JSON: tuples as lists, shares and rates
    to four decimals."""
    return {key: round(value, 4) if key in ("share", "rate")
            else list(value) if isinstance(value, tuple) else value
            for key, value in {**asdict(record), **overrides}.items()}


def shared_threshold(learners: int) -> int:
    """How many learners must make a mistake for "teach next" to list it: at least
    :data:`SHARED_LEARNERS`, and at least :data:`SHARED_SHARE` of the class."""
    return max(SHARED_LEARNERS, math.ceil(SHARED_SHARE * learners - 1e-9))


def score_bin(points: float, maximum: float, bins: int = SCORE_BINS) -> int:
    """The histogram bin of a score: ``[0, 10) %`` is bin 0, ..., ``[90, 100) %`` bin 9, and the
    full maximum bin 10 (``bins`` itself)."""
    if maximum <= 0:
        return 0
    if points >= maximum - 1e-9:
        return bins
    return max(0, min(bins - 1, int(points / maximum * bins + 1e-9)))


def _unfinished(result: SubmissionResult) -> bool:
    """Whether the learner has something to see in the failures section."""
    return any(not row.done or row.failures for row in result.exercises)


def anonymised(message, name: str) -> str:
    """``message`` without the learner's name in it (paths may hold the submission's name)."""
    message = sanitize.bounded(message)
    if name and len(name) >= 3:
        message = message.replace(name, "<learner>")
    return message


def _pass_rate_tests(results: Sequence[SubmissionResult]) -> list[TestPassRate]:
    """Every test's pass rate over the learners who reached it, the hardest first (a tie in the
    order the tests were first met), the tests nobody reached last."""
    tally: dict[str, Counter] = {}  # node id -> learners per column of TestPassRate
    about: dict[str, tuple[str | None, str]] = {}
    for result in results:
        for row in result.exercises:
            for test in row.tests:
                about.setdefault(test.nodeid, (test.exercise or row.exercise.id, test.name))
                counts = tally.setdefault(test.nodeid, Counter())
                if not test.counted:
                    counts["skipped"] += 1
                elif test.outcome is Outcome.NOT_RUN:
                    counts["not_run"] += 1
                elif test.import_error:
                    counts["not_imported"] += 1
                elif test.stub:
                    counts["not_started"] += 1
                else:
                    counts["ran"] += 1
                    counts["passed"] += test.passed
    tests = [TestPassRate(nodeid, *about[nodeid], **counts) for nodeid, counts in tally.items()]
    return sorted(tests, key=lambda t: (not t.ran, t.rate, -t.ran))  # stable: first met first


@dataclass
class _Seen:
    """One diagnosis as the class is counted: who made it, where, an example, how often."""

    learners: set[int] = field(default_factory=set)
    exercises: dict[str, None] = field(default_factory=dict)  # in the order met
    example: str | None = None
    count: int = 0

    def add(self, learner: int, exercise_id: str, example: str, count: int = 1) -> None:
        self.learners.add(learner)
        self.exercises[exercise_id] = None
        self.example = example if self.example is None else self.example
        self.count += count


def summarize_class(results: Sequence[SubmissionResult],
                    exercises: Sequence[Exercise]) -> ClassSummary:
    """The class's numbers: what :func:`render_class_report` draws. Diagnosis ids are validated
    again here: a record is validated when it is read, and the summary must not depend on it."""
    exercises = list(exercises)
    n = len(results)
    maximum = results[0].max_points if results else float(
        sum(e.points for e in exercises if not e.bonus))
    main = [r.main_points for r in results]
    histogram = [0] * (SCORE_BINS + 1)
    for points in main:
        histogram[score_bin(points, maximum)] += 1
    status_counts = {e.id: Counter() for e in exercises}
    for result in results:
        for row in result.exercises:
            status_counts.setdefault(row.exercise.id, Counter())[row.status.value] += 1

    mistakes: dict[str, _Seen] = {}
    roots_seen: dict[str, _Seen] = {}
    undiagnosed = 0
    for index, result in enumerate(results):
        for row in result.exercises:
            for test in row.failures:
                diagnosis = None if test.stub else sanitize.diagnosis_id(test.diagnosis)
                if diagnosis:  # a stub is never a mistake
                    mistakes.setdefault(diagnosis, _Seen()).add(
                        index, row.exercise.id, anonymised(test.message, result.name))
                else:
                    undiagnosed += test.reached
            root = root_failure(row)
            if root is not None:
                diagnosis = sanitize.diagnosis_id(root.diagnosis)
                explained = sum(sanitize.diagnosis_id(t.diagnosis) == diagnosis
                                for t in row.failures)
                roots_seen.setdefault(diagnosis, _Seen()).add(
                    index, row.exercise.id, anonymised(root.message, result.name), explained)
    first_seen = {d: i for i, d in enumerate(mistakes)}
    diagnoses = [DiagnosisCount(d, m.count, len(m.learners), len(m.learners) / n, m.example,
                                tuple(m.exercises), len(roots_seen.get(d, _Seen()).learners))
                 for d, m in mistakes.items()]
    diagnoses.sort(key=lambda d: (-d.learners, -d.count))  # stable: first seen first on a tie
    roots = [RootMistake(d, len(r.learners), len(r.learners) / n, tuple(r.exercises), r.count,
                         r.example, tuple(results[i].name for i in sorted(r.learners)))
             for d, r in roots_seen.items()]
    roots.sort(key=lambda r: (-r.learners, -r.explained, first_seen.get(r.id, 0)))
    shared = shared_threshold(n)
    return ClassSummary(
        learners=n, max_points=maximum, mean_points=round(sum(main) / n, 2) if n else 0.0,
        median_points=round(statistics.median(main or [0.0]), 2),
        all_done=sum(r.all_done for r in results), histogram=histogram,
        status_counts=status_counts, tests=_pass_rate_tests(results), diagnoses=diagnoses,
        undiagnosed_failures=undiagnosed, exercises=exercises,
        teach_next=[r for r in roots if r.learners >= shared][:TEACH_NEXT], roots=roots,
        problems=class_problems(results, exercises), shared=shared)


def class_problems(results: Sequence[SubmissionResult],
                   exercises: Sequence[Exercise]) -> list[ClassProblem]:
    """The class's common problems (:data:`PROBLEMS`), the most learners first, each with the
    learners' names per exercise; "not started" only for the main exercises."""
    bonus = {e.id for e in exercises if e.bonus}
    found: dict[Status, dict[str, list[str]]] = {}
    who: dict[Status, set[int]] = {}
    for index, result in enumerate(results):
        for row in result.exercises:
            if row.status not in PROBLEMS or (row.status is Status.NOT_STARTED
                                              and row.exercise.id in bonus):
                continue
            found.setdefault(row.status, {}).setdefault(row.exercise.id, []).append(result.name)
            who.setdefault(row.status, set()).add(index)
    order = {e.id: k for k, e in enumerate(exercises)}
    problems = [ClassProblem(status, len(who[status]), len(who[status]) / len(results),
                             tuple((e, tuple(names)) for e, names in sorted(
                                 found[status].items(), key=lambda item: order.get(item[0], 99))))
                for status in PROBLEMS if status in found]
    problems.sort(key=lambda p: (-p.learners, PROBLEMS.index(p.status)))
    return problems

# --------------------------------------------------------------------------- drawing


def _e(value) -> str:
    """Escaped for HTML, without control characters (invalid in HTML; a name may hold them)."""
    return html.escape(sanitize.terminal(value), quote=True)


def _n(value: float) -> str:
    return f"{value:g}"


def _short(text, limit: int = MESSAGE_CHARS) -> str:
    text = sanitize.bounded(text).strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def _bin_label(i: int, bins: int) -> str:
    return "100%" if i == bins else f"{i * 100 // bins}%"


def histogram_svg(histogram: Sequence[int], width: int = 560, height: int = 220) -> str:
    """Bars of learners per tenth of the maximum score (the last bar: exactly 100 %), with
    counts above them."""
    left, right, top, bottom = 40, 10, 16, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    tallest = max(max(histogram, default=0), 1)
    bar_w = plot_w / len(histogram)
    bins = len(histogram) - 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="score distribution" '
             f'class="plot" id="score-histogram">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
             'stroke="#333"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#333"/>']
    for tick in range(0, tallest + 1, max(1, tallest // 4)):
        y = top + plot_h - plot_h * tick / tallest
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
                     f'{tick}</text>')
    for i, count in enumerate(histogram):
        h = plot_h * count / tallest
        x = left + i * bar_w
        colour = "#2e7d32" if i == bins else "#1976d2"
        parts.append(f'<rect class="bin" data-bin="{i}" data-count="{count}" '
                     f'data-label="{_bin_label(i, bins)}" x="{x + 2:.1f}" '
                     f'y="{top + plot_h - h:.1f}" width="{bar_w - 4:.1f}" height="{h:.1f}" '
                     f'fill="{colour}"/>')
        if count:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h - h - 3:.1f}" '
                         f'font-size="11" text-anchor="middle">{count}</text>')
        parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 14}" font-size="10" '
                     f'text-anchor="middle">{_bin_label(i, bins)}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" font-size="11" '
                 'text-anchor="middle">main points, share of the maximum (bin start; the last '
                 'bin: full marks)</text>')
    return "".join(parts) + "</svg>"


def status_bars_svg(status_counts: dict[str, dict[str, int]], learners: int,
                    width: int = 560) -> str:
    """One stacked horizontal bar per exercise: how many learners stand at each status, with
    the number written on every segment wide enough to hold it."""
    row_h, left, top = 26, 60, 8
    legend = [s for s in STATUS_COLOURS if any(s.value in c for c in status_counts.values())]
    height = top + row_h * len(status_counts) + 22 * ((len(legend) + 3) // 4) + 8
    plot_w = width - left - 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="status per exercise" '
             f'class="plot" id="status-bars">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>']
    for row, (exercise_id, counts) in enumerate(status_counts.items()):
        y = top + row * row_h
        parts.append(f'<text x="{left - 8}" y="{y + 16}" font-size="12" text-anchor="end">'
                     f'{_e(exercise_id)}</text>')
        x = float(left)
        for status in STATUS_COLOURS:
            count = counts.get(status.value, 0)
            if not count or not learners:
                continue
            w = plot_w * count / learners
            parts.append(f'<rect class="segment" data-exercise="{_e(exercise_id)}" '
                         f'data-status="{_e(status.value)}" data-count="{count}" '
                         f'x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                         f'fill="{STATUS_COLOURS[status]}" stroke="#fff">'
                         f'<title>{_e(exercise_id)}: {count} {_e(status.value)}</title></rect>')
            if w >= 8 * len(str(count)) + 4:
                parts.append(f'<text x="{x + w / 2:.1f}" y="{y + 17}" font-size="11" '
                             f'text-anchor="middle" fill="{"#000" if status in LIGHT else "#fff"}"'
                             f'>{count}</text>')
            x += w
    y = top + row_h * len(status_counts) + 6
    for i, status in enumerate(legend):
        lx, ly = left + (i % 4) * 125, y + (i // 4) * 22
        parts.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" '
                     f'fill="{STATUS_COLOURS[status]}" stroke="#999"/>'
                     f'<text x="{lx + 16}" y="{ly + 11}" font-size="11">{_e(status.value)}</text>')
    return "".join(parts) + "</svg>"


def _rate_bar(rate: float) -> str:
    colour = "#2e7d32" if rate >= 0.8 else "#f9a825" if rate >= 0.5 else "#c62828"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="120" height="12" class="rate">'
            f'<rect width="120" height="12" fill="#eee"/>'
            f'<rect width="{120 * rate:.1f}" height="12" fill="{colour}"/></svg>')


def learner_anchor(index: int, name: str) -> str:
    """A unique, URL-safe anchor per learner (names may repeat after slugging)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:40] or "learner"
    return f"learner-{index + 1}-{slug}"


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 16px auto;
       max-width: 1180px; color: #222; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 0.1em; }
h2 { margin: 1.1em 0 0.3em; border-bottom: 1px solid #ddd; font-size: 1.2em; }
table { border-collapse: collapse; margin: 0.4em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 2px 7px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.summary { margin: 0.3em 0; }
.summary span { display: inline-block; margin-right: 1.6em; font-size: 1.05em; }
.summary b { font-size: 1.3em; }
.status { padding: 0 5px; border-radius: 3px; white-space: nowrap; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; font-size: 0.88em;
      max-width: 640px; }
.muted { color: #777; } .plots { display: flex; flex-wrap: wrap; gap: 24px; }
td[data-exercise] { white-space: nowrap; }
td.name { max-width: 16em; overflow-wrap: anywhere; }
#teach-next { border-left: 6px solid #00838f; padding-left: 0.6em; margin: 0.3em 0; }
ol.teach { margin: 0.3em 0; padding-left: 1.6em; }
ol.teach li, ul.problems li { margin: 0.25em 0; }
ol.teach pre { color: #444; max-width: 1000px; max-height: 2.6em; overflow: hidden; }
p.teach { font-weight: bold; margin: 0.3em 0; }
h3 { font-size: 1em; margin: 0.6em 0 0.2em; }
ul.problems { margin: 0.2em 0; padding-left: 1.2em; }
.legend .status { margin-left: 0.6em; }
details { margin: 0.3em 0; } summary { cursor: pointer; color: #1565c0; }
"""


def _status_cell(status: Status, short: bool = False) -> str:
    """A status chip: the status in full, or (``short``) its short word with the status in
    full as its tooltip."""
    colour = STATUS_COLOURS.get(status, "#fff")
    word = STATUS_WORDS.get(status, status.value) if short else status.value
    title = f' title="{_e(status.value)}"' if short else ""
    return (f'<span class="status" style="background:{colour};color:'
            f'{"#000" if status in LIGHT else "#fff"}"{title}>{_e(word)}</span>')


def _overview(summary: ClassSummary) -> str:
    return (f'<p class="summary" id="summary" data-learners="{summary.learners}" '
            f'data-mean="{summary.mean_points}" data-median="{summary.median_points}" '
            f'data-all-done="{summary.all_done}" data-max="{_n(summary.max_points)}">'
            f"<span><b>{summary.learners}</b> learners</span>"
            f"<span>mean <b>{_n(summary.mean_points)}</b>/{_n(summary.max_points)}</span>"
            f"<span>median <b>{_n(summary.median_points)}</b></span>"
            f"<span><b>{summary.all_done}</b> all done</span>"
            f"<span><b>{summary.histogram[-1] if summary.histogram else 0}</b> full marks</span>"
            "</p>")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _names(names: Sequence[str], learners: int) -> str:
    """The learners' names (escaped), at most :data:`NAMES_SHOWN`; "all N learners" when it
    is every learner of the class."""
    if learners > 1 and len(names) == learners:
        return f'<span class="everyone">all {learners} learners</span>'
    shown = ", ".join(f'<span class="name">{_e(name)}</span>' for name in names[:NAMES_SHOWN])
    more = len(names) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _mistake_item(root: RootMistake, learners: int) -> str:
    return (f'<li data-diagnosis="{_e(root.id)}" data-learners="{root.learners}" '
            f'data-share="{root.share:.4f}" data-explained="{root.explained}"><b><code>'
            f'{_e(root.id)}</code></b> ({_e(", ".join(root.exercises))}): <b>{root.learners}</b> '
            f"learner{'s' if root.learners != 1 else ''} ({root.share:.0%}: "
            f"{_names(root.names, learners)}), explaining "
            f"{_plural(root.explained, 'failing test')}. For example:"
            f"<pre>{_e(_short(root.example, 240))}</pre></li>")


def _problem_item(problem: ClassProblem, learners: int) -> str:
    places = "; ".join(f'<span class="place" data-exercise="{_e(exercise)}" '
                       f'data-count="{len(names)}">{_e(exercise)}: {_names(names, learners)}</span>'
                       for exercise, names in problem.exercises)
    return (f'<li data-status="{_e(problem.status.value)}" data-learners="{problem.learners}" '
            f'data-cases="{problem.cases}">{_status_cell(problem.status)} '
            f"<b>{problem.learners}</b> learner{'s' if problem.learners != 1 else ''} "
            f"({problem.share:.0%}): {places}</li>")


def _teach_next(summary: ClassSummary) -> str:
    """What to teach: the mistakes several learners share, else a sentence that says none is;
    then the class's common problems, with the learners' names."""
    if not summary.learners:
        return '<div id="teach-next"><p class="muted">No submission graded yet.</p></div>'
    alone = [r for r in summary.roots if r.learners < summary.shared]
    alone_note = (f" {_plural(len(alone), 'other root mistake')}, made by fewer learners, "
                  'are listed <a href="#diagnoses">below</a>.' if alone else "")
    if summary.teach_next:
        mistakes = (f'<ol class="teach" id="teach-mistakes">'
                    f'{"".join(_mistake_item(r, summary.learners) for r in summary.teach_next)}'
                    "</ol>"
                    f'<p class="muted">Root mistakes (per learner and exercise, the diagnosis '
                    f"that explains the most failing tests) made by at least {summary.shared} "
                    f"learners, the most learners first.{alone_note}</p>")
    else:
        mistakes = (f'<p class="teach" id="no-shared-mistake" data-shared="{summary.shared}">'
                    f"No mistake is shared: none was made by {summary.shared} learners or more."
                    f"{alone_note} The class's most common problems come first instead.</p>")
    if summary.problems:
        problems = ('<h3 id="problems-title">The class\'s most common problems</h3>'
                    '<ul class="problems" id="class-problems">'
                    + "".join(_problem_item(p, summary.learners) for p in summary.problems)
                    + "</ul>")
    else:
        problems = ('<p class="muted" id="class-problems">No exercise is unstarted, broken, '
                    "timed out or crashed.</p>")
    return f'<div id="teach-next">{mistakes}{problems}</div>'


def _status_table(summary: ClassSummary) -> str:
    statuses = [s for s in STATUS_COLOURS
                if any(s.value in c for c in summary.status_counts.values())]
    titles = {e.id: e.title for e in summary.exercises}
    head = "".join(f"<th>{_status_cell(s, short=True)}</th>" for s in statuses)
    rows = []
    for exercise_id, counts in summary.status_counts.items():
        cells = "".join(f'<td class="num" data-status="{_e(s.value)}">{counts.get(s.value, 0)}</td>'
                        for s in statuses)
        rows.append(f'<tr data-exercise="{_e(exercise_id)}"><td>{_e(exercise_id)} '
                    f'{_e(titles.get(exercise_id, ""))}</td>{cells}</tr>')
    return (f'<table id="status-table"><tr><th>exercise</th>{head}</tr>{"".join(rows)}</table>')


def _test_row(t: TestPassRate) -> str:
    apart = ", ".join(f"{count} {label}" for count, label in (
        (t.not_started, "not started"), (t.not_imported, "do not import"),
        (t.not_run, "not run"), (t.skipped, "skipped")) if count)
    rate = f"{t.rate:.0%}" if t.ran else "-"
    return (f'<tr data-nodeid="{_e(t.nodeid)}" data-passed="{t.passed}" '
            f'data-ran="{t.ran}" data-skipped="{t.skipped}" data-not-run="{t.not_run}" '
            f'data-not-started="{t.not_started}" data-not-imported="{t.not_imported}">'
            f"<td>{_e(t.exercise or '')}</td><td>{_e(t.name)}</td>"
            f'<td class="num">{t.passed}/{t.ran}</td><td class="num">{rate}</td>'
            f"<td>{_rate_bar(t.rate) if t.ran else ''}</td>"
            f'<td class="muted">{_e(apart)}</td></tr>')


def _tests_table(summary: ClassSummary) -> str:
    """The tests below 100 % (hardest first), then, folded, those every learner who reached
    them passed and those nobody reached."""
    if not summary.tests:
        return '<p class="muted">No test ran yet.</p>'
    head = ('<tr><th>exercise</th><th>test</th><th>passed</th><th>rate</th><th></th>'
            '<th>not reached</th></tr>')
    below = [t for t in summary.tests if not t.all_passed]
    rest = [t for t in summary.tests if t.all_passed]
    table = (f'<table id="tests-table">{head}{"".join(_test_row(t) for t in below)}</table>'
             if below else '<p class="muted" id="tests-table">Every test passed for every '
                           "learner who reached it.</p>")
    folded = (f'<details id="tests-passed"><summary>{_plural(len(rest), "more test")} that '
              "every learner who reached it passed (or that nobody reached)</summary>"
              f'<table id="tests-table-passed">{head}{"".join(_test_row(t) for t in rest)}'
              "</table></details>" if rest else "")
    return ('<p class="muted">Over the learners whose code reached the test, the tests below '
            '100 % first. Not counted, and shown apart: untouched stubs ("not started"), files '
            "that do not import, tests that never ran after a crash or a time-out, and skipped "
            f"tests.</p>{table}{folded}")


def _diagnoses_table(summary: ClassSummary) -> str:
    note = (f'<p class="muted">{summary.undiagnosed_failures} other failing test(s) named no '
            "diagnosis; untouched stubs and tests that never ran are not counted.</p>")
    if not summary.diagnoses:
        return '<p class="muted" id="no-diagnoses">No diagnosed mistake yet.</p>' + note
    rows = [f'<tr data-diagnosis="{_e(d.id)}" data-count="{d.count}" '
            f'data-learners="{d.learners}" data-share="{d.share:.4f}" data-roots="{d.roots}">'
            f"<td><code>{_e(d.id)}</code></td><td>{_e(', '.join(d.exercises))}</td>"
            f'<td class="num">{d.count}</td><td class="num">{d.learners} ({d.share:.0%})</td>'
            f'<td class="num">{d.roots}</td>'
            f"<td><pre>{_e(_short(d.example))}</pre></td></tr>" for d in summary.diagnoses]
    return ('<table id="diagnoses-table"><tr><th>diagnosis</th><th>exercise</th>'
            '<th>failing tests</th><th>learners (share)</th><th>as the root</th>'
            f'<th>example message</th></tr>{"".join(rows)}</table>' + note)


def _learner_rows(results: Sequence[SubmissionResult], exercises: Sequence[Exercise],
                  order: Sequence[int], primary: bool) -> str:
    rows = []
    for index in order:
        result = results[index]
        anchor = learner_anchor(index, result.name)
        by_id = {r.exercise.id: r for r in result.exercises}
        cells = "".join(
            f'<td data-exercise="{_e(e.id)}" data-status="{_e(by_id[e.id].status.value)}" '
            f'data-points="{_n(by_id[e.id].points)}">'
            f"{_status_cell(by_id[e.id].status, short=True)} {_n(by_id[e.id].points)}</td>"
            if e.id in by_id else "<td></td>" for e in exercises)
        failures = sum(t.reached for row in result.exercises for t in row.failures)
        text = (_plural(failures, "failing test") if failures
                else f"{sum(not row.done for row in result.exercises)} not done")
        link = f'<a href="#{anchor}">{text}</a>' if _unfinished(result) else "none"
        data = (f'class="learner" data-name="{_e(result.name)}" '
                f'data-main="{_n(result.main_points)}" data-bonus="{_n(result.bonus_points)}" '
                f'data-points="{_n(result.points)}" data-all-done="{result.all_done}"'
                if primary else f'class="learner-alt" data-name="{_e(result.name)}"')
        rows.append(f'<tr {data}><td class="name">{_e(result.name)}</td><td class="num">'
                    f'{_n(result.main_points)}/{_n(result.max_points)}</td><td class="num">'
                    f'{_n(result.bonus_points)}</td>{cells}<td>{link}</td></tr>')
    head = "".join(f"<th>{_e(e.id)}{' bonus' if e.bonus else ''}</th>" for e in exercises)
    return (f'<tr><th>learner</th><th>main</th><th>bonus</th>{head}<th>failures</th></tr>'
            + "".join(rows))


def learner_orders(results: Sequence[SubmissionResult]) -> dict[str, list[int]]:
    """Indexes of ``results`` in each order the page offers: by score (highest first), by
    status (the most worrying first), by name."""
    indexes = range(len(results))

    def worst(result: SubmissionResult) -> tuple:
        ranks = sorted(STATUS_RANK.get(r.status, 99) for r in result.exercises)
        return (*ranks, result.main_points)

    return {
        "score": sorted(indexes, key=lambda i: (-results[i].main_points, -results[i].bonus_points,
                                                results[i].name.lower(), i)),
        "status": sorted(indexes, key=lambda i: (worst(results[i]), results[i].name.lower(), i)),
        "name": sorted(indexes, key=lambda i: (results[i].name.lower(), i)),
    }


def _learners_table(results: Sequence[SubmissionResult], exercises: Sequence[Exercise]) -> str:
    orders = learner_orders(results)
    primary = (f'<table id="learners-table" data-order="score">'
               f'{_learner_rows(results, exercises, orders["score"], True)}</table>')
    others = "".join(
        f'<details id="learners-by-{key}"><summary>the learners {label}</summary>'
        f'<table data-order="{key}">{_learner_rows(results, exercises, orders[key], False)}'
        "</table></details>"
        for key, label in (("status", "by status, the most worrying first"),
                           ("name", "by name")))
    legend = " ".join(f"{_status_cell(status, short=True)} {_e(status.value)}"
                      for status in STATUS_COLOURS
                      if any(r.status is status for result in results for r in result.exercises))
    return ('<p class="muted">Highest main score first; the same table by status and by name '
            f'is folded below it. Each exercise: its status and points.</p>'
            f'<p class="legend" id="status-legend">{legend}</p>{primary}{others}')


def _learner_sections(results: Sequence[SubmissionResult]) -> str:
    sections = []
    for index, result in enumerate(results):
        if not _unfinished(result):
            continue
        anchor = learner_anchor(index, result.name)
        items = []
        for row in result.exercises:
            failures = row.failures
            if row.done and not failures:
                continue
            root = root_failure(row)
            root_note = (f' <span class="muted">root mistake:</span> <code>'
                         f'{_e(sanitize.diagnosis_id(root.diagnosis))}</code>'
                         if root is not None else "")
            items.append(f'<tr class="exercise-row" data-exercise="{_e(row.exercise.id)}">'
                         f'<td>{_e(row.exercise.id)}</td><td colspan="3">'
                         f"{_status_cell(row.status)} {_e(_short(row.message, 300))}"
                         f"{root_note}</td></tr>")
            stubs = [t for t in failures if t.stub]
            not_run = [t for t in failures if t.outcome is Outcome.NOT_RUN]
            broken = [t for t in failures if t.import_error and not t.stub]
            for test in failures:
                if not test.reached:
                    continue
                diagnosis = (f"<code>{_e(sanitize.diagnosis_id(test.diagnosis))}</code>"
                             if test.diagnosis else "")
                items.append(f'<tr class="failure" data-nodeid="{_e(test.nodeid)}"><td></td>'
                             f"<td>{_e(test.name)}<br><span class=\"muted\">"
                             f"{_e(test.outcome.value)}</span></td><td>{diagnosis}</td>"
                             f"<td><pre>{_e(_short(test.message))}</pre></td></tr>")
            functions = ", ".join(dict.fromkeys(f"{t.function or '?'}()" for t in stubs))
            # one line for all the tests that reached an untouched stub; for a file that does not
            # import (every test says so, once is enough); after a crash or a time-out
            for kind, data, tests, noun, what in (
                    ("stubs", "stubs", stubs, "test", f" reached untouched stubs: {functions}"),
                    ("not-imported", "count", broken, "test",
                     " could not import the file (the message above)"),
                    ("not-run", "not-run", not_run, "more test", f" never ran ({row.status})")):
                if tests:
                    items.append(f'<tr class="{kind}" data-{data}="{len(tests)}"><td></td>'
                                 f'<td colspan="3">{_plural(len(tests), noun)}{_e(what)}</td></tr>')
        sections.append(f'<section class="learner-failures" id="{anchor}" '
                        f'data-name="{_e(result.name)}"><h3>{_e(result.name)}: '
                        f'{_n(result.main_points)}/{_n(result.max_points)}</h3>'
                        f'<table><tr><th>exercise</th><th>test</th><th>diagnosis</th>'
                        f'<th>message</th></tr>{"".join(items)}</table>'
                        '<p><a href="#learners">back to the learners</a></p></section>')
    return "".join(sections) or '<p class="muted">Nobody has a failure.</p>'


def render_class_report(results: Sequence[SubmissionResult], exercises: Sequence[Exercise],
                        title: str = "Hidden-states kata: class report",
                        expected: int | None = None) -> str:
    """The whole page as a string. ``expected``: how many submissions the batch holds (the page
    then says how many are graded so far)."""
    results = list(results)
    exercises = list(exercises)
    summary = summarize_class(results, exercises)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    progress = (f"{len(results)} of {expected} submissions graded"
                if expected is not None and expected != len(results)
                else f"{_plural(len(results), 'submission')} graded")
    data = sanitize.script_json(summary.to_json())  # no "<", ">" or "&": nothing can close it
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted" id="progress" data-graded="{len(results)}" '
        f'data-expected="{expected if expected is not None else len(results)}">{_e(progress)}, '
        f"{stamp}. Bonus points are extra credit, apart from the main part.</p>",
        _overview(summary),
        '<h2 id="teach">Teach next: the mistakes several learners share, and the class\'s '
        "most common problems</h2>",
        _teach_next(summary),
        '<h2 id="learners">Learners</h2>',
        _learners_table(results, exercises),
        '<h2 id="scores">Score distribution and status per exercise</h2><div class="plots">',
        histogram_svg(summary.histogram),
        status_bars_svg(summary.status_counts, summary.learners), "</div>",
        _status_table(summary),
        '<h2 id="diagnoses">Every diagnosed mistake</h2>',
        _diagnoses_table(summary),
        '<h2 id="tests">Pass rate of the tests, over the learners who reached them</h2>',
        _tests_table(summary),
        '<h2 id="failures">Failures, learner by learner</h2>',
        _learner_sections(results),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{STYLE}</style>"
            f'<script type="application/json" id="class-data">{data}</script>'
            f"</head><body>{''.join(body)}</body></html>\n")


def write_class_report(results: Iterable[SubmissionResult], path: Path | str,
                       exercises: Sequence[Exercise], expected: int | None = None) -> Path:
    """Write the class report of ``results`` to ``path`` (atomically, readable by the group:
    :func:`grading.views.reports.write_text_atomically`) and return the path."""
    return write_text_atomically(path, render_class_report(results, exercises, expected=expected))


class ClassReport:
    """A class report rewritten after every submission (``add(result)`` as each one finishes),
    listing them in the order they finished; :meth:`finish` rewrites it in the order given."""

    def __init__(self, path: Path | str, exercises: Sequence[Exercise],
                 expected: int | None = None):
        self.path = Path(path)
        self.exercises = list(exercises)
        self.expected = expected
        self.finish([])

    def add(self, result: SubmissionResult) -> None:
        self.finish([*self.results, result])

    def finish(self, results: Sequence[SubmissionResult] | None = None) -> None:
        if results is not None:
            self.results = list(results)
        write_class_report(self.results, self.path, self.exercises, self.expected)
