"""Every catalogued correct variant passes its exercise's tests (the tests accept any right answer).

For each variant in ``tests/variants/exN.py``: run exercise N's tiny-model tests against the
solution with the variant patched in (``--kata-patch``) and check that no test fails. The
trained-model tests are left out to keep the suite fast; they check properties of the results,
which the tiny tests already pin down exactly.
"""

from __future__ import annotations

import importlib
import textwrap

import pytest

from kata.manifest import load_manifest

pytestmark = pytest.mark.maintainer

EXERCISES = {exercise.id: exercise for exercise in load_manifest()}


def catalogue():
    variants = []
    for exercise_id in EXERCISES:
        try:
            module = importlib.import_module(f"tests.variants.{exercise_id}")
        except ModuleNotFoundError:
            continue
        variants += module.VARIANTS
    return variants


VARIANTS = catalogue()


class Failures:
    def __init__(self):
        self.failures: dict[str, str] = {}
        self.passed = 0

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failures[report.nodeid] = report.longreprtext
        elif report.when == "call" and report.passed:
            self.passed += 1


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.exercise}-{v.id}")
def test_correct_variant_passes(variant, request, tmp_path, capsys):
    patch = tmp_path / f"{variant.exercise}_{variant.id}.py"
    patch.write_text(textwrap.dedent(variant.code))
    collector = Failures()
    pytest.main(
        [
            str(request.config.rootpath / EXERCISES[variant.exercise].tests), "--impl", "solutions",
            "-m", "not trained", f"--kata-patch={variant.exercise}={patch}",
            "-q", "-p", "no:cacheprovider", "-p", "no:unraisableexception", "--tb=native",
            "-o", "addopts=",
        ],
        plugins=[collector],
    )
    capsys.readouterr()
    assert collector.passed, f"no test of {variant.exercise} ran with the variant {variant.id}"
    assert not collector.failures, (
        f"the correct variant '{variant.summary}' fails:\n"
        + "\n".join(f"- {test}: {msg.strip().splitlines()[-1][:300]}" for test, msg in collector.failures.items())
    )
