"""The commands the kata prints, written so they work in the environment that printed them.

The README's learner loop runs ``python grader.py ...`` in an activated venv. Someone who ran
``bash run.sh grade`` or ``.venv/bin/python -m pytest`` without activating gets
``bash run.sh python grader.py ...`` instead, which sets up and uses the kata's venv::

    from grading.views.commands import grader_command
    grader_command("hint 2")   # 'python grader.py hint 2', or 'bash run.sh python grader.py hint 2'
"""

from __future__ import annotations

import os
import shutil
import sys


def python_on_path_is_this_one() -> bool:
    """True when typing ``python`` runs this very interpreter (an activated venv, or none needed)."""
    found = shutil.which("python")
    if found is None:
        return False
    try:
        return os.path.samefile(os.path.realpath(found), os.path.realpath(sys.executable)) or (
            os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(sys.executable)))
    except OSError:
        return False


def python_command() -> str:
    """``python``, or the launcher that reaches the kata's venv when typing ``python`` would not."""
    return "python" if python_on_path_is_this_one() else "bash run.sh python"


def grader_command(arguments: str = "") -> str:
    """``python grader.py <arguments>`` in the form that works where it is printed."""
    return f"{python_command()} grader.py {arguments}".rstrip()
