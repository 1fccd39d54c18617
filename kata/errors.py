"""How the kata describes an exception of a learner's code: an import that fails, an untouched stub.

Shared by the learner's own ``pytest`` (in one process) and the grader, where the learner's code
runs in a sandbox (:mod:`kata.serve.server`) and these facts cross back as plain data: an
exception rebuilt on the trusted side carries them as ``kata_stub`` and ``kata_where``.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path


def import_error_sentence(source: str, error: BaseException) -> str:
    """``"exercises/ex1_hidden_states.py does not import (line 12): SyntaxError: ..."``."""
    first_line = (traceback.format_exception_only(type(error), error)[-1]).strip()
    if isinstance(error, SyntaxError) and error.lineno is not None:
        where = f"line {error.lineno}"
        first_line = f"{type(error).__name__}: {error.msg}"
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith(source)]
        where = f"line {frames[-1].lineno}" if frames else "at import"
    return f"{source} does not import ({where}): {first_line}"


def exception_chain(error: BaseException | None):
    """``error``, then what it was raised from or while handling, without looping."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def stub_reached(error: BaseException, impl_dir: Path) -> str | None:
    """The function of ``impl_dir`` whose ``raise NotImplementedError`` ``error`` came from, if any.

    That is how the kata tells an untouched stub ("not started") from a real failure: the
    ``NotImplementedError`` (itself, or what the failure was raised from) was raised in a file of
    the code under test, and the function that raised it is the stub. An exception that crossed
    from the grader's sandbox says so itself (``kata_stub``).
    """
    prefix = str(Path(impl_dir).resolve()) + os.sep
    for exc in exception_chain(error):
        remote = getattr(exc, "kata_stub", None)
        if isinstance(remote, str):
            return remote
        if isinstance(exc, NotImplementedError):
            traceback_ = exc.__traceback__
            last = None
            while traceback_ is not None:
                last, traceback_ = traceback_.tb_frame.f_code, traceback_.tb_next
            if last is not None and str(Path(last.co_filename).resolve()).startswith(prefix):
                return last.co_name
    return None
