"""The commands the kata prints, written so they work in the environment that printed them:
``python grader.py hint 2`` in an activated venv, else ``bash run.sh python grader.py hint 2``,
which sets up and uses the kata's venv (after ``bash run.sh grade`` without activating, say)."""

from __future__ import annotations

import os
import shutil
import sys


def python_command() -> str:
    """``python`` when typing it runs this very interpreter (an activated venv, or none needed),
    else the launcher that reaches the kata's venv."""
    found, here = shutil.which("python"), os.path.dirname(os.path.abspath(sys.executable))
    try:
        this_one = found is not None and (os.path.samefile(found, sys.executable)
                                          or os.path.dirname(os.path.abspath(found)) == here)
    except OSError:
        this_one = False
    return "python" if this_one else "bash run.sh python"


def grader_command(arguments: str = "") -> str:
    """``python grader.py <arguments>`` in the form that works where it is printed."""
    return f"{python_command()} grader.py {arguments}".rstrip()
