"""The learner's side of trusted grading, and the plain-data channel both sides speak.

:mod:`kata.serve.server` runs in a submission's sandbox and answers the trusted side's calls of
the learner's functions; :mod:`kata.serve.codec` and :mod:`kata.serve.channel` are the bounded
frames and values between them; :mod:`kata.serve.figures` turns a figure into what is drawn and
back. Nothing here knows an answer: the tests and references stay on the trusted side
(:mod:`grading.box.remote`). Both sides' processes close descriptors and set their prctl(2)
options with the helpers here.
"""

from __future__ import annotations

import contextlib
import os

Pairs = list[tuple[int, int]]
#: How many learner processes an exercise may use in all: the first, and the ones that take over
#: after a call ended one (:mod:`kata.serve.channel`). A function that ended one is not called
#: again, so one more than an exercise's functions is always enough. Here, with the channels'
#: text form, so the grader's own process reads them without importing torch.
GENERATIONS = 8


def close_all(fds) -> None:
    """Close each descriptor of ``fds`` that is still open."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


#: prctl(2)'s options the kata sets: a signal when the parent ends; whether the process is
#: dumpable (0: no core file, and no ptrace or /proc/PID/mem of it by a process of the same user).
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4


def prctl(option: int, value: int) -> None:
    """Set one of this process's prctl(2) options (Linux; elsewhere nothing)."""
    with contextlib.suppress(Exception):  # not Linux: the grader kills what it started itself
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def format_pairs(pairs: Pairs) -> str:
    """``[(3, 4), (5, 6)]`` -> ``"3,4;5,6"``: an exercise's channels, as text."""
    return ";".join(f"{r},{w}" for r, w in pairs)


def parse_pairs(text: str) -> Pairs:
    """``"3,4;5,6"`` -> ``[(3, 4), (5, 6)]``."""
    pairs = [item.split(",") for item in text.split(";")]
    return [(int(read_fd), int(write_fd)) for read_fd, write_fd in pairs]
