"""The catalogue's harness runs, for each planted entry, only the tests its code can reach
(``tests/course/planting.py``): what it may leave out, and that leaving it out changes no
verdict."""

from __future__ import annotations

import pytest

from course.shared.catalogue import load

from tests.course.planting import _REACH, recorded_runs, replaced_functions



@pytest.mark.parametrize("code, replaced", [
    ("def compare_estimates(exact, estimate, threshold=0.2, k=5):\n    return None\n",
     {"compare_estimates"}),
    ('"""A docstring."""\nimport torch\nimport torch.nn.functional as F\n'
     "SCALE = 2.0\n\ndef _helper(x):\n    return x\n\n"
     "def attribution_patching(model, clean_ids, corrupted_ids, good_id, bad_id):\n"
     "    return _helper(None)\n", {"attribution_patching"}),
], ids=["one-function", "imports-constants-helpers"])
def test_an_entry_that_only_defines_replaces_the_functions_it_names(code, replaced):
    assert replaced_functions(code, "ex7") == replaced


@pytest.mark.parametrize("code, why", [
    ("import torch\ntorch.manual_seed(0)\n", "a statement that changes the process"),
    ("def _metric(logits, good_id, bad_id):\n    return 0.0\n", "a helper the solution calls"),
    ("import numpy as torch\n", "another object under a name the solution reads"),
    ("def len(x):\n    return 0\n", "a builtin the solution may call"),
    ("SCALE = torch.ones(1)\n", "an assignment that runs code"),
    ("from math import *\n", "names that cannot be told"),
], ids=["statement", "solution-helper", "other-object", "builtin", "code-assigned", "star-import"])
def test_an_entry_that_may_change_more_runs_every_test(code, why):
    assert replaced_functions(code, "ex7") is None, why


#: The mistakes each check plants: all of exercise 7's (the fast passes' cut), and two of
#: exercise 1's that only SmolLM2 shows (the cut of a pass that goes on to every test).
LEFT_OUT_CASES = [("ex7", None), ("ex1", ("position-embeddings-assumed", "gpt2-config-names-only"))]


@pytest.mark.parametrize("exercise, chosen", LEFT_OUT_CASES, ids=["ex7-fast", "ex1-trained"])
def test_the_tests_left_out_change_no_verdict(exercise, chosen, request, monkeypatch, tmp_path,
                                              capsys):
    """Mistakes planted with every test and with the tests each one reaches: the same record
    for every test (the left-out ones keep the solution's, in the order the tests were
    collected). The grader's boundary leaves out the same tests (``planting.EveryEntry``)."""
    mistakes = [m for m in load("mistakes")
                if m.exercise == exercise and (chosen is None or m.id in chosen)]
    assert chosen is None or len(mistakes) == len(chosen), "a chosen mistake left the catalogue"
    root = request.config.rootpath
    seen = {}
    for every_test in ("1", "0"):
        monkeypatch.setenv("KATA_PLANT_EVERY_TEST", every_test)
        folder = tmp_path / f"every-{every_test}"
        folder.mkdir()
        runs = recorded_runs(mistakes, root, folder)
        seen[every_test] = {m.id: [(t.nodeid, t.outcome, t.diagnosis, t.message)
                                   for t in runs[m.id].records] for m in mistakes}
    capsys.readouterr()
    reach = _REACH[exercise]
    assert any(len(tests) < len(reach.solution) for tests in reach.by_function.values()), \
        f"some function of {exercise} reaches fewer than all its fast tests: the cut is tried"
    if chosen:
        fast = {record.nodeid for record in reach.solution}
        assert all(any(nodeid not in fast for nodeid, *_ in seen["0"][key]) for key in chosen), \
            "each chosen mistake passes the fast tests and goes on to the trained ones"
    changed = [key for key in seen["1"] if seen["1"][key] != seen["0"][key]]
    assert not changed, f"leaving out the tests these mistakes cannot reach changed: {changed}"
