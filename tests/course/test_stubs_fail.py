"""The untouched stubs in exercises/ must fail every exercise test, each by reaching a stub.

A test that passes against a stub cannot fail, so it teaches nothing (a defect); a test that fails
at import or collection would show the learner a crash instead of the lesson.
"""

import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from grading.core.declarations import load_exercises


EXERCISES = load_exercises()


@pytest.fixture(scope="module")
def stub_results(request, tmp_path_factory):
    """Run every exercise's tests against exercises/ once, in a subprocess; parse JUnit XML."""
    root = request.config.rootpath
    report = tmp_path_factory.mktemp("stubs") / "junit.xml"
    command = [
        sys.executable, "-m", "pytest", *[e.tests for e in EXERCISES],
        "--impl", "exercises", "-p", "no:cacheprovider", "-q", "--tb=native", f"--junitxml={report}",
    ]
    run = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600)
    assert report.exists(), f"pytest did not run:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run, ET.parse(report).getroot()


def test_stub_run_reaches_the_tests_instead_of_crashing(stub_results):
    run, _ = stub_results
    assert run.returncode == 1, (
        f"pytest exited {run.returncode} on the untouched stubs (1 = tests failed; 2 = an import "
        f"or collection error):\n{run.stdout[-3000:]}"
    )


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_every_exercise_test_fails_on_the_untouched_stub(stub_results, exercise):
    _, junit = stub_results
    module = exercise.tests.removesuffix(".py").replace("/", ".")
    cases = [c for c in junit.iter("testcase") if c.get("classname", "").startswith(module)]
    assert cases, f"no test of {exercise.tests} ran against the stubs"
    for case in cases:
        name = f"{exercise.tests}::{case.get('name')}"
        skipped = case.find("skipped")
        if skipped is not None:
            assert "GPT-2" in skipped.get("message", ""), f"{name} was skipped: {skipped.get('message')}"
            continue
        problems = case.findall("failure") + case.findall("error")
        assert problems, f"{name} passes against the untouched stub: it cannot fail"
        text = " ".join((p.get("message") or "") + (p.text or "") for p in problems)
        assert "NotImplementedError" in text, (
            f"{name} fails on the stub without reaching it (no NotImplementedError):\n{text[:1500]}"
        )
