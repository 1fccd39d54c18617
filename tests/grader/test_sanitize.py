"""What a submission controls cannot break what the grader writes (issue 22, item 6, the output).

Unit tests of :mod:`grading.core.sanitize`, then hostile records (built here, no grading) through
the records' validation, the class summary, the report, the CSV, the JSON, the Gradescope file
and the terminal tables: a diagnosis id that is a list or NaN (``crashbatch``, ``nanjson``), a
message ``<!--<script>`` (``htmlblank``), a name ``=HYPERLINK(...)`` or with escape sequences.
"""

from __future__ import annotations

import csv
import json
import math
import os
import stat

import pytest

from grading.views import reports

from grading.core import sanitize
from grading.views.class_report import render_class_report, summarize_class, write_class_report
from grading.core.records import ExerciseResult, Outcome, Status, SubmissionResult, TestRecord
from grading.core.results import exercise_status
from grading.core.declarations import load_exercises

EXERCISES = load_exercises()


HOSTILE_MESSAGES = ["<!--<script>", "</script><script>alert(1)</script>", "<![CDATA[",
                    "-->", "a & b > c", "\u2028\u2029", "<!--", "</", "<script"]
ESCAPES = "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x9b2J"


def _strict_loads(text: str):
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


# --------------------------------------------------------------------------- the module


def test_finite_and_json_text_never_write_nan():
    data = {"a": math.nan, "b": [math.inf, -math.inf, 1.5, (2.0, math.nan)], "c": {"d": math.nan},
            1: "key", "ok": True, "n": None}
    text = sanitize.json_text(data)
    assert _strict_loads(text) == {"a": None, "b": [None, None, 1.5, [2.0, None]],
                                   "c": {"d": None}, "1": "key", "ok": True, "n": None}
    with pytest.raises(ValueError):
        json.dumps({"a": math.nan}, allow_nan=False)  # what json_text guards against


def test_script_json_has_no_markup_and_reads_back_the_same():
    data = {"messages": HOSTILE_MESSAGES, "nested": [{"m": "x</script>y"}]}
    text = sanitize.script_json(data)
    assert not set("<>&\u2028\u2029") & set(text)
    assert _strict_loads(text) == data


@pytest.mark.parametrize("cell, expected", [
    ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"),
    ("+1+2", "'+1+2"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"),
    ("\r=1", "'\r=1"), ("alice", "alice"), ("-1.5", "-1.5"), ("12", "12"), ("", ""),
    (3.5, 3.5), (True, True)])
def test_csv_cell_neutralises_formulas(cell, expected):
    assert sanitize.csv_cell(cell) == expected


def test_terminal_strips_controls_and_escape_sequences():
    text = sanitize.terminal(f"a\tb\nc\rd\x00e\x07f\x7fg\x85h {ESCAPES}")
    assert text.startswith("a\tb\ncdefgh ")
    assert "red" in text and "link" in text
    assert not any(ord(ch) < 32 and ch not in "\n\t" or 0x7f <= ord(ch) <= 0x9f for ch in text)
    assert "title" not in text and "http://x" not in text  # OSC strings go whole


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", None), ("hook-returns-none", "hook-returns-none"),
    (["a", "b"], sanitize.UNKNOWN_DIAGNOSIS), (math.nan, sanitize.UNKNOWN_DIAGNOSIS),
    (3, sanitize.UNKNOWN_DIAGNOSIS), ("<script>", sanitize.UNKNOWN_DIAGNOSIS),
    ("Hook-Returns-None", sanitize.UNKNOWN_DIAGNOSIS), ("a" * 65, sanitize.UNKNOWN_DIAGNOSIS),
    ({"id": "x"}, sanitize.UNKNOWN_DIAGNOSIS), ("trailing-", sanitize.UNKNOWN_DIAGNOSIS)])
def test_diagnosis_ids_are_validated(value, expected):
    assert sanitize.diagnosis_id(value) == expected


def test_bounded_messages():
    assert sanitize.bounded(None) == ""
    assert sanitize.bounded(["x"]) == "['x']"
    long = sanitize.bounded("x" * 10 ** 6)
    assert len(long) == sanitize.MESSAGE_LIMIT and long.endswith("(cut)")
    assert sanitize.bounded(long) == long  # idempotent: a record round-trips


# --------------------------------------------------------------------------- hostile records


def test_records_from_the_sandbox_are_validated():
    record = TestRecord.from_json({
        "event": "result", "nodeid": "course/ex1_hidden_states/test_public.py::test_x", "exercise": "ex1",
        "name": "test_x", "outcome": "failed", "message": "m" * 10 ** 6, "diagnosis": ["a", "b"],
        "duration": math.nan, "stub": "yes", "function": {"f": 1}})
    assert record.diagnosis == sanitize.UNKNOWN_DIAGNOSIS
    assert len(record.message) == sanitize.MESSAGE_LIMIT
    assert record.duration == 0.0 and record.stub is False and isinstance(record.function, str)
    assert TestRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    forged = TestRecord.validated({"nodeid": "n", "outcome": "passed!!"})
    assert forged.outcome is Outcome.FAILED and forged.name == "n"
    assert TestRecord.validated("not a mapping").nodeid == "?"


def _hostile_result(name: str, diagnosis, message: str) -> SubmissionResult:
    rows = []
    for exercise in EXERCISES:
        tests = []
        for k, function in enumerate(exercise.functions):
            nodeid = f"{exercise.folder}/test_public.py::test_{function}"
            if k == 0:
                # the record's fields set after construction, as a recorder patched inside the
                # sandbox could write them: bypass the validation to prove the summary copes too
                test = TestRecord(nodeid, exercise.id, f"test_{function}", Outcome.FAILED, "x")
                object.__setattr__(test, "diagnosis", diagnosis)
                object.__setattr__(test, "message", message)
                object.__setattr__(test, "duration", math.nan)
            else:
                test = TestRecord(nodeid, exercise.id, f"test_{function}", Outcome.FAILED,
                                  message, diagnosis=diagnosis if k == 1 else None)
            tests.append(test)
        status, why = exercise_status(tests)
        rows.append(ExerciseResult(exercise, status, tests, why))
    return SubmissionResult(name, rows, {"torch": "2.13.0", "bad": math.nan}, math.inf)


def _hostile_class() -> list[SubmissionResult]:
    honest_rows = [ExerciseResult(e, Status.DONE, [TestRecord(
        f"{e.folder}/test_public.py::test_ok", e.id, "test_ok")]) for e in EXERCISES]
    return [
        _hostile_result("crashbatch", ["a", "list"], "an id that is a list"),
        _hostile_result("nanjson", math.nan, "an id that is NaN"),
        _hostile_result("htmlblank", "hook-returns-none", "<!--<script>"),
        _hostile_result("closer", "x-y", "</script><script>alert(1)</script><!--"),
        _hostile_result('=HYPERLINK("http://evil","x")', None, "@SUM(1)"),
        _hostile_result(f"escapes{ESCAPES}", {"id": 1}, f"msg {ESCAPES}"),
        SubmissionResult("honest", honest_rows, {}, 1.0),
    ]


def test_summarize_class_survives_hostile_diagnoses():
    summary = summarize_class(_hostile_class(), EXERCISES)
    ids = {d.id for d in summary.diagnoses}
    assert sanitize.UNKNOWN_DIAGNOSIS in ids
    assert all(isinstance(i, str) and sanitize.DIAGNOSIS_ID.fullmatch(i) for i in ids)
    _strict_loads(sanitize.json_text(summary.to_json()))


def test_the_report_body_shows_every_learner_to_an_html5_parser(tmp_path):
    html5lib = pytest.importorskip("html5lib", reason="pip install html5lib (the dev extra)")
    results = _hostile_class()
    path = write_class_report(results, tmp_path / "report.html", EXERCISES)
    text = path.read_text(encoding="utf-8")
    document = html5lib.parse(text, namespaceHTMLElements=False)
    body = document.find("body")
    assert body is not None and len(list(body.iter())) > 100
    scripts = document.findall(".//script")
    assert len(scripts) == 1 and scripts[0].get("type") == "application/json"
    data = _strict_loads(scripts[0].text)
    assert data["learners"] == len(results)
    rows = [tr for tr in body.iter("tr") if tr.get("class") == "learner"]
    names = [sanitize.terminal(r.name) for r in results]  # no control character in HTML
    assert sorted(tr.get("data-name") for tr in rows) == sorted(names)
    sections = {s.get("data-name") for s in body.iter("section")}
    assert sections == set(names) - {"honest"}
    shown = "".join(body.itertext())
    assert "<!--<script>" in shown, "the message is shown as text, not parsed as markup"
    assert "\x1b" not in text


def test_json_gradescope_and_csv_of_hostile_results(tmp_path):
    results = _hostile_class()
    reports.write_atomically(tmp_path / "grades.json", reports.json_report(results))
    data = _strict_loads((tmp_path / "grades.json").read_text())
    assert len(data["submissions"]) == len(results)
    for result in results:
        text = sanitize.json_text(reports.gradescope_results(result))
        _strict_loads(text)
    table = reports.CsvReport(tmp_path / "grades.csv", EXERCISES)
    for result in results:
        table.add(result)
    table.close()
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    for row in rows[1:]:
        for cell in row:
            assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
            assert not (cell.startswith("-") and not sanitize._NUMBER.fullmatch(cell)), cell
    assert rows[5][0] == "'" + results[4].name


def test_terminal_tables_print_no_control_characters():
    results = _hostile_class()
    texts = [reports.batch_table(results), *(reports.exercise_table(r) for r in results),
             *(reports.learner_report(r, {}, "title") for r in results[:2]),
             *(reports.terminal_name(r) for r in results)]
    for text in texts:
        assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text


def test_files_are_readable_by_the_group(tmp_path):
    old = os.umask(0o022)
    try:
        report = write_class_report(_hostile_class(), tmp_path / "report.html", EXERCISES)
        reports.write_atomically(tmp_path / "grades.json", {"a": 1})
        table = reports.CsvReport(tmp_path / "grades.csv", EXERCISES)
        table.close()
    finally:
        os.umask(old)
    for path in (report, tmp_path / "grades.json", tmp_path / "grades.csv"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert not list(tmp_path.glob(".*")), "no temporary file is left behind"


def test_the_report_of_hostile_results_renders_the_same_twice():
    results = _hostile_class()
    one = render_class_report(results, EXERCISES).split("UTC", 1)[1]
    two = render_class_report(results, EXERCISES).split("UTC", 1)[1]
    assert one == two
