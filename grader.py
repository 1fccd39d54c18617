"""The hidden-states kata's one command line: ``python grader.py [COMMAND] [ARGUMENTS]``.

Learners grade and get hints (``status``, ``hint``, ``watch``, ``figures``, ``reset``, ``check``),
instructors grade a class (``batch``, ``classroom``, ``gradescope-bundle``), maintainers
regenerate what is generated (``generate``). ``python grader.py --help`` lists every command;
they are parsed in ``grading/views/cli.py``.
"""

import sys
from pathlib import Path

from grading.views.cli import main

if __name__ == "__main__":
    sys.exit(main(root=Path(__file__).resolve().parent))
