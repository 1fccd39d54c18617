"""The instructor's second class (issue 49): the class report's first screen, read as an
instructor reads it.

A class part-way through the course (exercises 1 to 3 worked on, the others handed in as the
untouched stubs), built once for the module: eight submissions of
``benchmarks/make_submissions.py`` (a correct one, untouched stubs, an exercise that returns
nothing, an endless loop, a segfault, a syntax error, an import error) and eight written as
learners write, with the mistakes of the course's catalogue (``course/<module>/mistakes.py``):
one mistake shared by three learners, another by two, one made by a single learner, an
exercise 3 left half done with the function whose test catches ``RuntimeError`` still a stub,
and a second exercise 3 that does not import. Graded with the real command line
(``grader.py batch ... --report``, in the sandbox), then read:

* with an HTML parser (html5lib), what the first screen says: the shared mistakes and their
  learners, never an untouched stub as a mistake, the files that do not import as such, the
  numbers of the batch's JSON;
* in headless Chromium, at 1,400 pixels: "teach next" on the first screen, nothing wider than
  the window.

Takes a few minutes on two busy cores (it prints the batch's time).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grading.core import synthetic
from grading.core.declarations import load_exercises
from tests.end_to_end.test_class_grading import (Page, _chromium, _png_pixels, _shared,
                                                 check_report_against_json, chromium_layout,
                                                 CHROMIUM_FLAGS)

REPO = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()
BY_ID = {e.id: e for e in EXERCISES}
STARTED = ("ex1", "ex2", "ex3")
#: Of benchmarks/make_submissions.py's 20 submissions, the ones this class needs.
SYNTHETIC = ("correct-repo", "untouched-stubs", "first-done-rest-stubs", "one-exercise-wrong",
             "loops-forever", "segfaults", "syntax-error", "import-error")
SHARED_BY_THREE = ("ex1", "no-embedding-layer")  # embedding-layer-missing
SHARED_BY_TWO = ("ex2", "plain-dot-product")  # similarity-plain-dot-products
ALONE = ("ex3", "hook-returns-none")
#: The learners written by hand: {name: {exercise id: what their file is}}; an exercise not
#: named is correct among STARTED, the untouched stub after them. "stub": untouched; a
#: (exercise, mistake id) pair: the solution with that catalogued mistake; "half": every
#: function of exercise 3 but next_token_log_probs, still the stub (its secret check catches
#: RuntimeError around the call); "syntax": a colon forgotten.
LEARNERS = {
    "ana-ruiz": {"ex1": SHARED_BY_THREE, "ex3": "stub"},
    "ben-okafor": {"ex1": SHARED_BY_THREE, "ex3": "stub"},
    "chloe-martin": {"ex1": SHARED_BY_THREE, "ex3": "stub"},
    "dan-weber": {"ex2": SHARED_BY_TWO, "ex3": "stub"},
    "eve-lindqvist": {"ex2": SHARED_BY_TWO, "ex3": "stub"},
    "fay-nakamura": {"ex3": ALONE},
    "gus-moreau": {"ex3": "half"},
    "hal-kowalski": {"ex3": "syntax"},
}
HALF_DONE = "next_token_log_probs"


def _mistake(exercise_id: str, mistake_id: str):
    import importlib

    module = importlib.import_module(f"course.{BY_ID[exercise_id].module}.mistakes")
    return next(m for m in module.MISTAKES if m.id == mistake_id)


def _learner_file(exercise, kind) -> str:
    solution = (REPO / exercise.source("solutions")).read_text(encoding="utf-8")
    if kind == "correct":
        return solution
    if kind == "stub":
        return (REPO / exercise.source("exercises")).read_text(encoding="utf-8")
    if kind == "half":  # the learner's own stub: it raises where the handed-out one does
        return (solution + f"\n\ndef {HALF_DONE}(*args, **kwargs):\n"
                "    raise NotImplementedError\n")
    if kind == "syntax":
        return solution + f"\n\ndef {HALF_DONE}(model, input_ids)\n    return None\n"
    return solution + "\n\n" + _mistake(*kind).code


def _write_learner(folder: Path, files: dict) -> Path:
    (folder / "exercises").mkdir(parents=True)
    for exercise in EXERCISES:
        kind = files.get(exercise.id, "correct" if exercise.id in STARTED else "stub")
        (folder / exercise.source("exercises")).write_text(_learner_file(exercise, kind),
                                                           encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def second_class(tmp_path_factory):
    folder = tmp_path_factory.mktemp("second-class")
    subs = folder / "submissions"
    made = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "make_submissions.py"), str(subs),
         "--only", ",".join(SYNTHETIC), "--started", ",".join(STARTED)],
        capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    paths = [Path(line) for line in made.stdout.split()]
    assert [p.name.removesuffix(".zip") for p in paths] == list(SYNTHETIC)
    paths += [_write_learner(subs / name, files) for name, files in LEARNERS.items()]
    out = folder / "out"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.run(
        [sys.executable, "grader.py", "batch", *map(str, paths), "-j", "2",
         "--call-timeout", "10", "--json", str(out / "grades.json"),
         "--report", str(out / "report.html")],
        cwd=REPO, capture_output=True, text=True, timeout=3000,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    print(f"\nthe second class: {len(paths)} learners graded in {seconds:.0f} s, "
          f"{cpu / len(paths):.1f} CPU s a learner", flush=True)
    text = (out / "report.html").read_text(encoding="utf-8")
    data = json.loads((out / "grades.json").read_text())["submissions"]
    return {"path": out / "report.html", "text": text, "page": Page(text), "json": data,
            "by_name": {s["name"].removesuffix(".zip"): s for s in data}, "seconds": seconds}


def _status(second_class, name: str, exercise_id: str) -> str:
    row = next(r for r in second_class["by_name"][name]["exercises"] if r["id"] == exercise_id)
    return row["status"]


def test_every_planted_status(second_class):
    planted = {("loops-forever", "ex1"): "timed out", ("segfaults", "ex1"): "crashed",
               ("syntax-error", "ex2"): "does not import",
               ("import-error", "ex3"): "does not import",
               ("hal-kowalski", "ex3"): "does not import",
               ("untouched-stubs", "ex3"): "not started", ("ana-ruiz", "ex3"): "not started",
               ("correct-repo", "ex3"): "done", ("gus-moreau", "ex3"): "in progress"}
    for (name, exercise_id), status in planted.items():
        assert _status(second_class, name, exercise_id) == status, (name, exercise_id)
    for name, files in LEARNERS.items():
        for exercise_id, kind in files.items():
            if isinstance(kind, tuple):  # a catalogued mistake
                assert _status(second_class, name, exercise_id) in ("failing", "in progress")
    for submission in second_class["json"]:
        for row in submission["exercises"]:
            if row["id"] not in STARTED and row["status"] != "missing":
                assert row["status"] == "not started", (submission["name"], row["id"])


def test_the_report_numbers_match_the_json(second_class):
    check_report_against_json(second_class["page"], second_class["json"])


def _first_screen(text: str):
    """"Teach next", read with html5lib; it comes before the learners' table."""
    import html5lib

    document = html5lib.parse(text, namespaceHTMLElements=False)
    elements = list(document.find("body").iter())
    ids = [e.get("id") for e in elements]
    assert ids.index("teach-next") < ids.index("learners"), "teach next comes after the learners"
    return elements[ids.index("teach-next")]


def _words(element) -> str:
    return " ".join("".join(element.itertext()).split())


def test_the_first_screen_names_the_shared_mistakes_and_their_learners(second_class):
    teach = _first_screen(second_class["text"])
    items = [li for li in teach.iter("li") if li.get("data-diagnosis")]
    shown = {li.get("data-diagnosis"): li for li in items}
    three, two, alone = (_mistake(*m).root_diagnosis for m in (SHARED_BY_THREE, SHARED_BY_TWO,
                                                                ALONE))
    assert three in shown and two in shown, list(shown)
    assert alone not in shown, "a mistake of one learner is not \"shared\""
    for diagnosis, exercise_id, mistake in ((three, *SHARED_BY_THREE), (two, *SHARED_BY_TWO)):
        names = {name for name, files in LEARNERS.items()
                 if files.get(exercise_id) == (exercise_id, mistake)}
        listed = {span.text for span in shown[diagnosis].iter("span")
                  if span.get("class") == "name"}
        assert names <= listed, (diagnosis, listed)
        assert int(shown[diagnosis].get("data-learners")) >= len(names)
    learners = [int(li.get("data-learners")) for li in items]
    assert learners == sorted(learners, reverse=True), "the most learners first"
    shared = _shared(len(second_class["json"]))
    assert all(n >= shared for n in learners)
    print(" | ".join(_words(li)[:160] for li in items))


def test_no_untouched_stub_is_diagnosed(second_class):
    """Issue 49: every untouched exercise 3 (and the half-done one's stub) reached a test that
    catches RuntimeError around next_token_log_probs; none of them is a mistake."""
    page = second_class["page"]
    stub_records = [(s["name"], t) for s in second_class["json"] for r in s["exercises"]
                    for t in r["tests"] if t["stub"]]
    assert stub_records and all(t["diagnosis"] is None for _, t in stub_records)
    caught = [t for name, t in stub_records if t["function"] == HALF_DONE
              and "test_secret_next_token_log_probs" in t["name"]]
    assert len({name for name, t in stub_records if t in caught}) >= 6, "the untouched ex3s"
    half = next(r for r in second_class["by_name"]["gus-moreau"]["exercises"] if r["id"] == "ex3")
    assert any(t["stub"] and t["function"] == HALF_DONE for t in half["tests"])
    named = {t["diagnosis"] for s in second_class["json"] for r in s["exercises"]
             for t in r["tests"] if t["diagnosis"] and t["outcome"] != "passed"}
    listed = {row["data-diagnosis"] for row in page.having("tr", "data-diagnosis")}
    assert listed == named, "the diagnoses listed are those of failures that reached no stub"
    teach = _first_screen(second_class["text"])
    for li in teach.iter("li"):
        if li.get("data-diagnosis"):
            learners = {span.text for span in li.iter("span") if span.get("class") == "name"}
            for name in learners:
                rows = second_class["by_name"][name]["exercises"]
                assert any(t["diagnosis"] == li.get("data-diagnosis") and not t["stub"]
                           for r in rows for t in r["tests"]), (name, li.get("data-diagnosis"))


def test_the_first_screen_lists_the_files_that_do_not_import_as_such(second_class):
    teach = _first_screen(second_class["text"])
    problems = {li.get("data-status"): li for li in teach.iter("li") if li.get("data-status")}
    broken = problems["does not import"]
    places = {span.get("data-exercise"): {n.text for n in span.iter("span")
                                          if n.get("class") == "name"}
              for span in broken.iter("span") if span.get("class") == "place"}
    assert places == {"ex2": {"syntax-error"}, "ex3": {"import-error", "hal-kowalski"}}, places
    assert int(broken.get("data-learners")) == 3
    for status in ("timed out", "crashed", "not started"):
        assert status in problems, list(problems)
    not_started = {span.get("data-exercise"): {n.text for n in span.iter("span")
                                               if n.get("class") == "name"}
                   for span in problems["not started"].iter("span")
                   if span.get("class") == "place"}
    assert not not_started["ex3"] & places["ex3"], "a file that does not import is not \"not started\""
    # the status table and the pass rates count them apart from the stubs
    counts = second_class["page"].data()["status_counts"]["ex3"]
    statuses = [r["status"] for s in second_class["json"] for r in s["exercises"]
                if r["id"] == "ex3"]
    assert counts["does not import"] == statuses.count("does not import") == 2
    assert counts["not started"] == statuses.count("not started")
    # the tests that import the learner's file count the two apart, never as "not started"
    tests = [t for t in second_class["page"].data()["tests"] if t["exercise"] == "ex3"]
    assert max(t["not_imported"] for t in tests) == 2
    assert all(t["not_imported"] in (0, 2) for t in tests)


def test_the_first_screen_fits_1400_pixels_in_chromium(second_class, tmp_path):
    layout = chromium_layout(second_class["path"], tmp_path,
                             ["teach-next", "teach-mistakes", "class-problems", "learners-table"])
    print(layout)
    assert layout["width"] == 1400
    assert layout["scrollWidth"] <= layout["width"], "the page scrolls sideways"
    boxes = layout["boxes"]
    for key in ("teach-mistakes", "class-problems"):
        assert boxes[key]["bottom"] <= layout["height"], f"{key} is not on the first screen"
        assert boxes[key]["right"] <= layout["width"]
    assert boxes["learners-table"]["right"] <= layout["width"], "the learners table is clipped"
    browser = _chromium()
    screenshot = tmp_path / "first-screen.png"
    subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={screenshot}", "--window-size=1400,1000",
                    second_class["path"].resolve().as_uri()],
                   capture_output=True, text=True, timeout=120)
    _, _, rows = _png_pixels(screenshot)
    colours = {row[i:i + 3] for row in rows[::2] for i in range(0, len(row), 6)}
    assert bytes.fromhex("00838f") in colours, "teach next is not on the first screen"
    assert bytes.fromhex("c62828") in colours, "\"does not import\" is not on the first screen"


def test_synthetic_kinds_are_what_the_class_needs():
    """The kinds this class plants exist (a renamed kind must not silently leave the class
    without its faults)."""
    for kind in ("stub", "wrong", "loop", "segfault", "syntax_error", "import_error"):
        assert kind in synthetic.KINDS
