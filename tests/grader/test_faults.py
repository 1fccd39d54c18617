"""A call that ends the learner's process costs its own function, never the exercise (issue 47).

Across the trust boundary each call of a learner's function has a deadline; a call that runs
past it, crashes, exits or runs out of memory fails with the grader's one sentence for that kind
of end (``grading.core.faults``), the next learner process takes over, and the other functions
are still called. A function that ended a process is not called again. Here the learner's side
is forked from this process (``--kata-remote fork``'s boundary); the batch's sandboxed server
does the same with its generations (``tests/end_to_end/test_sandbox.py``).
"""

from __future__ import annotations

import signal
import time
import types

import pytest

from grading.box.remote import RemoteExercise, fork_learner
from grading.core.faults import (CALL_SECONDS_VARIABLE, CRASHED, EXITED, OUT_OF_MEMORY, TIMED_OUT,
                                 Ended, LearnerFault, kind_of, sentence)

LEARNER = '''
import ctypes, os


def fine(x):
    return 2 * x


def loops(x):
    while True:
        pass


def segfaults(x):
    ctypes.string_at(0)


def exits(x):
    os._exit(3)


def calls_loops(x):
    return loops(x)
'''
FUNCTIONS = ["fine", "loops", "segfaults", "exits", "calls_loops"]


@pytest.fixture
def learner(monkeypatch, tmp_path):
    """The module above, served across the boundary with a 1-second deadline per call."""
    monkeypatch.setenv(CALL_SECONDS_VARIABLE, "1")
    module = types.ModuleType("exercises.ex_faults")
    module.__file__ = str(tmp_path / "ex_faults.py")
    exec(compile(LEARNER, module.__file__, "exec"), module.__dict__)
    session = fork_learner(module, tmp_path)
    yield RemoteExercise(session, "exercises.ex_faults", FUNCTIONS)
    session.bye()


def test_each_kind_of_end_costs_its_call_and_the_next_process_answers(learner):
    started = time.monotonic()
    for function, kind in (("loops", TIMED_OUT), ("segfaults", CRASHED), ("exits", EXITED)):
        with pytest.raises(LearnerFault) as caught:
            getattr(learner, function)(1)
        assert caught.value.kind == kind and caught.value.function == function
        assert f"`{function}`" in str(caught.value) and "the other functions were graded" in \
            str(caught.value)
        assert learner.fine(21) == 42  # a fresh learner process answers the next call
    assert time.monotonic() - started < 20  # one deadline, not the exercise's time


def test_a_function_that_ended_a_process_fails_at_once_when_called_again(learner):
    with pytest.raises(LearnerFault):
        learner.loops(1)
    started = time.monotonic()
    with pytest.raises(LearnerFault) as caught:
        learner.loops(2)
    assert time.monotonic() - started < 0.5 and caught.value.again
    assert "earlier in this exercise, so it was not run again" in str(caught.value)
    with pytest.raises(LearnerFault) as caught:  # another function that calls it runs into it
        learner.calls_loops(1)
    assert caught.value.function == "calls_loops" and caught.value.kind == TIMED_OUT


def test_a_fault_is_no_exception_a_tests_except_exception_catches():
    """A test's ``except Exception`` around a learner's call (to name a library error) must never
    turn the grader's sentence into a diagnosis of its own."""
    assert not issubclass(LearnerFault, Exception)
    try:
        try:
            raise LearnerFault(TIMED_OUT, "f")
        except Exception:  # noqa: BLE001 - what a test writes around a learner's call
            pytest.fail("a test's except Exception caught the fault")
    except LearnerFault:
        pass


@pytest.mark.parametrize("ended, memory, kind", [
    (Ended(signal=signal.SIGALRM), 0, TIMED_OUT),
    (Ended(signal=signal.SIGXCPU), 0, TIMED_OUT),
    (Ended(signal=signal.SIGKILL, killed_by_grader=True), 0, TIMED_OUT),
    (Ended(signal=signal.SIGKILL, max_rss_mb=3900), 4096, OUT_OF_MEMORY),
    (Ended(signal=signal.SIGKILL, max_rss_mb=100), 4096, CRASHED),
    (Ended(signal=signal.SIGSEGV), 0, CRASHED),
    (Ended(code=0), 0, EXITED),
    (Ended(code=3), 0, EXITED),
])
def test_how_a_process_ended_is_read_as_one_kind(ended, memory, kind):
    assert kind_of(ended, memory)[0] == kind


def test_the_ended_message_from_the_learners_side_is_read_within_bounds():
    assert Ended.from_message({"signal": 11, "max_rss_mb": 12.5}) == Ended(signal=11, max_rss_mb=12.5)
    hostile = Ended.from_message({"signal": "11", "code": 2**40, "killed": "yes", "max_rss_mb": []})
    assert hostile == Ended()


def test_one_sentence_per_kind_names_the_function():
    for kind in (TIMED_OUT, CRASHED, OUT_OF_MEMORY, EXITED):
        text = sentence(kind, "laminar_profile", "detail")
        assert "`laminar_profile`" in text and "\n" not in text
        assert "your code" in sentence(kind, None, "detail")
