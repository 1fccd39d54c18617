"""The class report: one self-contained HTML page about a whole batch of submissions.

``grader.py batch SUBMISSIONS... --report report.html`` writes it. The page needs nothing from
the network and runs no script: styles are inline and every plot is an SVG drawn here. It holds

* the score distribution (main part, in tenths of the maximum) and a few summary numbers;
* the status counts of every exercise (a stacked bar per exercise and the table behind it);
* the pass rate of every test, hardest first;
* the most frequent diagnosed mistakes across the class (:mod:`kata.diagnosis` ids): how many
  failing tests named each, the share of learners who made it, and one example message;
* a table of learners, each linking to the list of that learner's failures further down.

Like the JSON, it is rewritten (atomically) after every submission, so an interrupted batch still
has a report of everything graded so far: :class:`ClassReport` does that. Every number shown is
also carried by a ``data-*`` attribute, and the page embeds its figures as JSON
(``<script type="application/json" id="class-data">``, data only), so tests and scripts can read
them back without scraping text.

Everything a submission controls (its name, the messages its code raised) is escaped.
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kata.manifest import Exercise

from .records import Status, SubmissionResult, TestRecord

__all__ = ["ClassReport", "ClassSummary", "DiagnosisCount", "TestPassRate", "render_class_report",
           "summarize_class", "write_class_report"]

#: Score histogram: this many bins over 0..100 % of the main part's maximum.
SCORE_BINS = 10
#: Longest message shown in full (learners' code can raise anything, of any length).
MESSAGE_CHARS = 600
#: Colours of the statuses, in the order the stacked bars and tables list them.
STATUS_COLOURS = {
    Status.DONE: "#2e7d32", Status.IN_PROGRESS: "#9ccc65", Status.FAILING: "#ef6c00",
    Status.NOT_STARTED: "#bdbdbd", Status.ERROR: "#c62828", Status.TIMED_OUT: "#6a1b9a",
    Status.CRASHED: "#4e342e", Status.OUT_OF_MEMORY: "#ad1457", Status.MISSING: "#eeeeee",
    Status.ENVIRONMENT_ERROR: "#1565c0",
}


# --------------------------------------------------------------------------- the numbers


@dataclass(frozen=True)
class TestPassRate:
    """How many learners' runs of one test passed (skipped runs count neither way)."""

    __test__ = False  # not a pytest test class

    nodeid: str
    exercise: str | None
    name: str
    passed: int
    ran: int

    @property
    def rate(self) -> float:
        return self.passed / self.ran if self.ran else 0.0


@dataclass(frozen=True)
class DiagnosisCount:
    """One diagnosed mistake across the class."""

    id: str
    count: int  # failing tests that named it, over every learner
    learners: int  # learners with at least one such failure
    share: float  # learners / all learners
    example: str  # one message, from the first learner who made it
    exercises: tuple[str, ...]  # where it was diagnosed


@dataclass
class ClassSummary:
    """Everything the page shows, computed from the results alone."""

    learners: int
    max_points: float
    mean_points: float
    median_points: float
    all_done: int
    histogram: list[int]  # SCORE_BINS counts of main points as a share of the maximum
    status_counts: dict[str, dict[str, int]]  # exercise id -> status value -> learners
    tests: list[TestPassRate]  # hardest first
    diagnoses: list[DiagnosisCount]  # most frequent first
    undiagnosed_failures: int  # failing tests that named no diagnosis (stubs not counted)
    exercises: list[Exercise] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "learners": self.learners, "max_points": self.max_points,
            "mean_points": self.mean_points, "median_points": self.median_points,
            "all_done": self.all_done, "histogram": self.histogram,
            "status_counts": self.status_counts,
            "tests": [{"nodeid": t.nodeid, "exercise": t.exercise, "name": t.name,
                       "passed": t.passed, "ran": t.ran, "rate": round(t.rate, 4)}
                      for t in self.tests],
            "diagnoses": [{"id": d.id, "count": d.count, "learners": d.learners,
                           "share": round(d.share, 4), "example": d.example,
                           "exercises": list(d.exercises)} for d in self.diagnoses],
            "undiagnosed_failures": self.undiagnosed_failures,
        }


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def score_bin(points: float, maximum: float, bins: int = SCORE_BINS) -> int:
    """The histogram bin of a score: ``[0, 10) %`` is bin 0, ..., ``[90, 100] %`` the last."""
    if maximum <= 0:
        return 0
    return max(0, min(bins - 1, int(points / maximum * bins + 1e-9)))


def _failures(result: SubmissionResult) -> list[tuple[str, TestRecord]]:
    """(exercise id, record) of every counted test that did not pass."""
    return [(row.exercise.id, t) for row in result.exercises for t in row.counted if not t.passed]


def _unfinished(result: SubmissionResult) -> bool:
    """Whether the learner has something to see in the failures section."""
    return any(not row.done for row in result.exercises) or bool(_failures(result))


def summarize_class(results: Sequence[SubmissionResult],
                    exercises: Sequence[Exercise]) -> ClassSummary:
    """The class's numbers: what :func:`render_class_report` draws."""
    exercises = list(exercises)
    n = len(results)
    maximum = results[0].max_points if results else float(
        sum(e.points for e in exercises if not e.bonus))
    main = [r.main_points for r in results]
    histogram = [0] * SCORE_BINS
    for points in main:
        histogram[score_bin(points, maximum)] += 1

    status_counts = {e.id: {} for e in exercises}
    for result in results:
        for row in result.exercises:
            counts = status_counts.setdefault(row.exercise.id, {})
            counts[row.status.value] = counts.get(row.status.value, 0) + 1

    order: dict[str, int] = {}
    passed: Counter = Counter()
    ran: Counter = Counter()
    about: dict[str, tuple[str | None, str]] = {}
    for result in results:
        for row in result.exercises:
            for test in row.counted:
                order.setdefault(test.nodeid, len(order))
                about.setdefault(test.nodeid, (test.exercise or row.exercise.id, test.name))
                ran[test.nodeid] += 1
                passed[test.nodeid] += test.passed
    tests = [TestPassRate(nodeid, *about[nodeid], passed[nodeid], ran[nodeid]) for nodeid in order]
    tests.sort(key=lambda t: (t.rate, -t.ran, order[t.nodeid]))

    counts: Counter = Counter()
    learners: dict[str, set[int]] = {}
    examples: dict[str, str] = {}
    where: dict[str, list[str]] = {}
    undiagnosed = 0
    for index, result in enumerate(results):
        for exercise_id, test in _failures(result):
            if not test.diagnosis:
                undiagnosed += not test.stub
                continue
            counts[test.diagnosis] += 1
            learners.setdefault(test.diagnosis, set()).add(index)
            examples.setdefault(test.diagnosis, test.message)
            places = where.setdefault(test.diagnosis, [])
            if exercise_id not in places:
                places.append(exercise_id)
    first_seen = {d: i for i, d in enumerate(examples)}
    diagnoses = [DiagnosisCount(d, counts[d], len(learners[d]), len(learners[d]) / n if n else 0.0,
                                examples[d], tuple(where[d])) for d in counts]
    diagnoses.sort(key=lambda d: (-d.learners, -d.count, first_seen[d.id]))

    return ClassSummary(
        learners=n, max_points=maximum,
        mean_points=round(sum(main) / n, 2) if n else 0.0,
        median_points=round(_median(main), 2), all_done=sum(r.all_done for r in results),
        histogram=histogram, status_counts=status_counts, tests=tests, diagnoses=diagnoses,
        undiagnosed_failures=undiagnosed, exercises=exercises)


# --------------------------------------------------------------------------- drawing


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _n(value: float) -> str:
    return f"{value:g}"


def _short(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def histogram_svg(histogram: Sequence[int], width: int = 560, height: int = 220) -> str:
    """Bars of learners per tenth of the maximum score, with counts above them."""
    left, right, top, bottom = 40, 10, 16, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    tallest = max(max(histogram, default=0), 1)
    bar_w = plot_w / len(histogram)
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
        parts.append(f'<rect class="bin" data-bin="{i}" data-count="{count}" x="{x + 2:.1f}" '
                     f'y="{top + plot_h - h:.1f}" width="{bar_w - 4:.1f}" height="{h:.1f}" '
                     'fill="#1976d2"/>')
        if count:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h - h - 3:.1f}" '
                         f'font-size="11" text-anchor="middle">{count}</text>')
        parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 14}" font-size="10" '
                     f'text-anchor="middle">{i * 100 // len(histogram)}%</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" font-size="11" '
                 'text-anchor="middle">main points, share of the maximum (bin start)</text>')
    parts.append("</svg>")
    return "".join(parts)


def status_bars_svg(status_counts: dict[str, dict[str, int]], learners: int,
                    width: int = 560) -> str:
    """One stacked horizontal bar per exercise: how many learners stand at each status."""
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
            parts.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                         f'fill="{STATUS_COLOURS[status]}" stroke="#fff">'
                         f'<title>{_e(exercise_id)}: {count} {_e(status.value)}</title></rect>')
            x += w
    y = top + row_h * len(status_counts) + 6
    for i, status in enumerate(legend):
        lx, ly = left + (i % 4) * 125, y + (i // 4) * 22
        parts.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" '
                     f'fill="{STATUS_COLOURS[status]}" stroke="#999"/>'
                     f'<text x="{lx + 16}" y="{ly + 11}" font-size="11">{_e(status.value)}</text>')
    parts.append("</svg>")
    return "".join(parts)


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
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
       max-width: 1100px; color: #222; background: #fff; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.summary span { display: inline-block; margin-right: 1.6em; font-size: 1.05em; }
.summary b { font-size: 1.4em; }
.status { padding: 0 6px; border-radius: 3px; white-space: nowrap; }
pre { white-space: pre-wrap; margin: 0; font-size: 0.9em; max-width: 640px; }
.muted { color: #777; } .plots { display: flex; flex-wrap: wrap; gap: 24px; }
"""


def _status_cell(status: Status) -> str:
    colour = STATUS_COLOURS.get(status, "#fff")
    light = status in (Status.NOT_STARTED, Status.MISSING, Status.IN_PROGRESS)
    return (f'<span class="status" style="background:{colour};color:'
            f'{"#000" if light else "#fff"}">{_e(status.value)}</span>')


def _overview(summary: ClassSummary) -> str:
    return (f'<p class="summary" id="summary" data-learners="{summary.learners}" '
            f'data-mean="{summary.mean_points}" data-median="{summary.median_points}" '
            f'data-all-done="{summary.all_done}" data-max="{_n(summary.max_points)}">'
            f"<span><b>{summary.learners}</b> learners</span>"
            f"<span>mean <b>{_n(summary.mean_points)}</b>/{_n(summary.max_points)}</span>"
            f"<span>median <b>{_n(summary.median_points)}</b></span>"
            f"<span><b>{summary.all_done}</b> all done</span></p>")


def _status_table(summary: ClassSummary) -> str:
    statuses = [s for s in STATUS_COLOURS
                if any(s.value in c for c in summary.status_counts.values())]
    titles = {e.id: e.title for e in summary.exercises}
    head = "".join(f"<th>{_status_cell(s)}</th>" for s in statuses)
    rows = []
    for exercise_id, counts in summary.status_counts.items():
        cells = "".join(f'<td class="num" data-status="{_e(s.value)}">{counts.get(s.value, 0)}</td>'
                        for s in statuses)
        rows.append(f'<tr data-exercise="{_e(exercise_id)}"><td>{_e(exercise_id)} '
                    f'{_e(titles.get(exercise_id, ""))}</td>{cells}</tr>')
    return (f'<table id="status-table"><tr><th>exercise</th>{head}</tr>{"".join(rows)}</table>')


def _tests_table(summary: ClassSummary) -> str:
    rows = [f'<tr data-nodeid="{_e(t.nodeid)}" data-passed="{t.passed}" data-ran="{t.ran}">'
            f"<td>{_e(t.exercise or '')}</td><td>{_e(t.name)}</td>"
            f'<td class="num">{t.passed}/{t.ran}</td><td class="num">{t.rate:.0%}</td>'
            f"<td>{_rate_bar(t.rate)}</td></tr>" for t in summary.tests]
    if not rows:
        return '<p class="muted">No test ran yet.</p>'
    return ('<table id="tests-table"><tr><th>exercise</th><th>test</th><th>passed</th>'
            f'<th>rate</th><th></th></tr>{"".join(rows)}</table>')


def _diagnoses_table(summary: ClassSummary) -> str:
    note = (f'<p class="muted">{summary.undiagnosed_failures} other failing test(s) named no '
            "diagnosis; untouched stubs are not counted.</p>")
    if not summary.diagnoses:
        return '<p class="muted" id="no-diagnoses">No diagnosed mistake yet.</p>' + note
    rows = [f'<tr data-diagnosis="{_e(d.id)}" data-count="{d.count}" '
            f'data-learners="{d.learners}" data-share="{d.share:.4f}">'
            f"<td><code>{_e(d.id)}</code></td><td>{_e(', '.join(d.exercises))}</td>"
            f'<td class="num">{d.count}</td><td class="num">{d.learners} ({d.share:.0%})</td>'
            f"<td><pre>{_e(_short(d.example))}</pre></td></tr>" for d in summary.diagnoses]
    return ('<table id="diagnoses-table"><tr><th>diagnosis</th><th>exercise</th>'
            '<th>failing tests</th><th>learners (share)</th><th>example message</th></tr>'
            f'{"".join(rows)}</table>' + note)


def _learners_table(results: Sequence[SubmissionResult], exercises: Sequence[Exercise]) -> str:
    head = "".join(f"<th>{_e(e.id)}{' (bonus)' if e.bonus else ''}</th>" for e in exercises)
    rows = []
    for index, result in enumerate(results):
        anchor = learner_anchor(index, result.name)
        by_id = {r.exercise.id: r for r in result.exercises}
        cells = "".join(
            f'<td data-exercise="{_e(e.id)}" data-status="{_e(by_id[e.id].status.value)}">'
            f"{_status_cell(by_id[e.id].status)} {_n(by_id[e.id].points)}</td>"
            if e.id in by_id else "<td></td>" for e in exercises)
        failures = len(_failures(result))
        unfinished = sum(not row.done for row in result.exercises)
        text = (f"{failures} failing test{'s' if failures != 1 else ''}" if failures
                else f"{unfinished} not done")
        link = f'<a href="#{anchor}">{text}</a>' if _unfinished(result) else "none"
        rows.append(f'<tr class="learner" data-name="{_e(result.name)}" '
                    f'data-main="{_n(result.main_points)}" data-bonus="{_n(result.bonus_points)}" '
                    f'data-points="{_n(result.points)}" data-all-done="{result.all_done}">'
                    f'<td>{_e(result.name)}</td><td class="num">{_n(result.main_points)}/'
                    f'{_n(result.max_points)}</td><td class="num">{_n(result.bonus_points)}</td>'
                    f"{cells}<td>{link}</td></tr>")
    return ('<table id="learners-table"><tr><th>learner</th><th>main</th><th>bonus</th>'
            f'{head}<th>failures</th></tr>{"".join(rows)}</table>')


def _learner_sections(results: Sequence[SubmissionResult]) -> str:
    sections = []
    for index, result in enumerate(results):
        if not _unfinished(result):
            continue
        anchor = learner_anchor(index, result.name)
        items = []
        for row in result.exercises:
            failures = [t for t in row.counted if not t.passed]
            if row.done and not failures:
                continue
            items.append(f"<tr><td>{_e(row.exercise.id)}</td><td colspan=\"3\">"
                         f"{_status_cell(row.status)} {_e(_short(row.message, 300))}</td></tr>")
            stubs = [t for t in failures if t.stub]
            for test in failures:
                if test.stub:
                    continue
                diagnosis = f"<code>{_e(test.diagnosis)}</code>" if test.diagnosis else ""
                items.append(f'<tr class="failure" data-nodeid="{_e(test.nodeid)}"><td></td>'
                             f"<td>{_e(test.name)}<br><span class=\"muted\">"
                             f"{_e(test.outcome.value)}</span></td><td>{diagnosis}</td>"
                             f"<td><pre>{_e(_short(test.message))}</pre></td></tr>")
            if stubs:  # one line for all the tests that reached an untouched stub
                functions = list(dict.fromkeys(t.function or "?" for t in stubs))
                items.append(f'<tr class="stubs" data-stubs="{len(stubs)}"><td></td>'
                             f'<td colspan="3">{len(stubs)} test{"s" if len(stubs) != 1 else ""}'
                             " reached untouched stubs: "
                             f"{_e(', '.join(f + '()' for f in functions))}</td></tr>")
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
                else f"{len(results)} submission{'s' if len(results) != 1 else ''} graded")
    data = json.dumps(summary.to_json()).replace("</", "<\\/")  # never closes the script element
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted" id="progress" data-graded="{len(results)}" '
        f'data-expected="{expected if expected is not None else len(results)}">{_e(progress)}, '
        f"{stamp}. Bonus points are extra credit, apart from the main part.</p>",
        _overview(summary),
        '<h2 id="scores">Score distribution and status per exercise</h2><div class="plots">',
        histogram_svg(summary.histogram),
        status_bars_svg(summary.status_counts, summary.learners), "</div>",
        _status_table(summary),
        '<h2 id="tests">Pass rate of every test, hardest first</h2>',
        _tests_table(summary),
        '<h2 id="diagnoses">Most frequent diagnosed mistakes</h2>',
        _diagnoses_table(summary),
        '<h2 id="learners">Learners</h2>',
        _learners_table(results, exercises),
        '<h2 id="failures">Failures, learner by learner</h2>',
        _learner_sections(results),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{STYLE}</style>"
            f'<script type="application/json" id="class-data">{data}</script>'
            f"</head><body>{''.join(body)}</body></html>\n")


def _write_text_atomically(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


def write_class_report(results: Iterable[SubmissionResult], path: Path | str,
                       exercises: Sequence[Exercise], expected: int | None = None) -> Path:
    """Write the class report of ``results`` to ``path`` (atomically) and return the path."""
    path = Path(path)
    _write_text_atomically(path, render_class_report(list(results), exercises,
                                                     expected=expected))
    return path


class ClassReport:
    """A class report rewritten after every submission: ``add(result)`` as each one finishes.

    The page lists submissions in the order they finished; :meth:`finish` rewrites it in the
    order given (the batch's order).
    """

    def __init__(self, path: Path | str, exercises: Sequence[Exercise],
                 expected: int | None = None):
        self.path = Path(path)
        self.exercises = list(exercises)
        self.expected = expected
        self.results: list[SubmissionResult] = []
        write_class_report(self.results, self.path, self.exercises, expected)

    def add(self, result: SubmissionResult) -> None:
        self.results.append(result)
        write_class_report(self.results, self.path, self.exercises, self.expected)

    def finish(self, results: Sequence[SubmissionResult] | None = None) -> None:
        if results is not None:
            self.results = list(results)
        write_class_report(self.results, self.path, self.exercises, self.expected)
