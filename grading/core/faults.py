"""When the learner's code ends the process running it: the words for it, said once.

A call of a learner's function can end its process instead of returning or raising: an endless
loop runs into the call's deadline, a crash in C code ends it by a signal, ``os._exit`` ends it
outright, and a huge allocation runs into the memory limit. Across the grader's trust boundary
each of these costs the function it happens in, never its exercise: the call fails, a fresh
learner process takes over, and the exercise's other functions are still graded
(:mod:`grading.box.remote`). The same event gets the same words in the batch, on Gradescope and
in Classroom: this module is where they are written, and where an ended process's exit status
is read as one of these kinds.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

#: The trusted environment's variables that say a call's deadline and the memory limit (the
#: runner sets them; the learner's sandbox enforces the first itself, the trusted side waits a
#: little longer before it gives up on the learner's process, :mod:`grading.box.remote`).
CALL_SECONDS_VARIABLE = "KATA_CALL_SECONDS"
MEMORY_LIMIT_VARIABLE = "KATA_MEMORY_LIMIT_MB"
#: The deadline of one call of a learner's function, unless the grader is told another.
CALL_SECONDS = 30.0

TIMED_OUT = "timed out"
CRASHED = "crashed"
OUT_OF_MEMORY = "out of memory"
EXITED = "exited"
KINDS = (TIMED_OUT, CRASHED, OUT_OF_MEMORY, EXITED)
_PAST = {TIMED_OUT: "timed out", CRASHED: "crashed", OUT_OF_MEMORY: "ran out of memory",
         EXITED: "ended its process"}

#: A process killed outright (SIGKILL) that had used at least this share of the memory limit ran
#: out of memory (the kernel's out-of-memory killer sends nothing else).
MEMORY_SHARE = 0.8


class LearnerFault(BaseException):
    """A call of the learner's ``function`` ended the process running it (``kind``, one of
    :data:`KINDS`); the message says so in the grader's words (:func:`sentence`).

    A ``BaseException``, as ``KeyboardInterrupt`` is: a test's ``except Exception`` around a
    learner's call (to name a library error) never mistakes it for the learner's own error, and
    pytest still records the test as failed."""

    def __init__(self, kind: str, function: str, detail: str = "", again: bool = False):
        self.kind, self.function, self.detail, self.again = kind, function, detail, again
        super().__init__(sentence(kind, function, detail, again))


@dataclass(frozen=True)
class Ended:
    """How a learner process ended: by a signal, or with an exit status; and its peak memory."""

    signal: int | None = None
    code: int | None = None
    max_rss_mb: float = 0.0
    killed_by_grader: bool = False  # the trusted side gave up waiting for it

    @classmethod
    def from_message(cls, message: dict) -> Ended:
        """From the learner server's ``ended`` message (plain, bounded values only)."""
        def number(key):
            value = message.get(key)
            return value if type(value) in (int, float) and abs(value) < 2**31 else None

        return cls(signal=number("signal"), code=number("code"),
                   max_rss_mb=float(number("max_rss_mb") or 0.0),
                   killed_by_grader=message.get("killed") is True)


def kind_of(ended: Ended, memory_limit_mb: int = 0) -> tuple[str, str]:
    """``(kind, detail)`` for a learner process that ended in the middle of a call."""
    if ended.killed_by_grader or ended.signal in (signal.SIGALRM, signal.SIGXCPU):
        return TIMED_OUT, ""
    if ended.signal == signal.SIGKILL and memory_limit_mb \
            and ended.max_rss_mb >= MEMORY_SHARE * memory_limit_mb:
        return OUT_OF_MEMORY, f"it used {ended.max_rss_mb:.0f} MiB of the {memory_limit_mb} allowed"
    if ended.signal is not None:
        return CRASHED, signal_name(ended.signal)
    return EXITED, f"exit status {ended.code}"


def signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; ``signal 99`` for a number no signal has."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def sentence(kind: str, function: str | None, detail: str = "", again: bool = False) -> str:
    """The one sentence for ``kind`` happening in ``function`` (None: somewhere in the
    learner's code, when the grader cannot tell which function)."""
    where = f"`{function}`" if function else "your code"
    if again:
        return (f"{where} {_PAST[kind]} earlier in this exercise, so it was not run again here: "
                "fix that first")
    if kind == TIMED_OUT:
        return (f"timed out in {where}: the call ran past its deadline (an endless loop, or far "
                "too much work?); its process was stopped and the other functions were graded")
    if kind == OUT_OF_MEMORY:
        return (f"ran out of memory in {where}" + (f" ({detail})" if detail else "")
                + "; the other functions were graded")
    if kind == CRASHED:
        return (f"crashed in {where}: its process died by {detail} (a crash in C code, or a "
                "signal it sent itself); the other functions were graded")
    return (f"{where} ended its process ({detail}: os._exit, or an exit in C code?) instead of "
            "returning" + ("; the other functions were graded" if function else ""))
