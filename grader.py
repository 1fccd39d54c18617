"""The hidden-states kata's one command line: ``python grader.py [COMMAND] [ARGUMENTS]``.

Learners grade and get hints (``status``, ``hint``, ``watch``, ``figures``, ``reset``, ``check``),
instructors grade a class (``batch``, ``classroom``, ``gradescope-bundle``), maintainers
regenerate what is generated (``stubs``, ``notebooks``, ``readme-table``). Run
``python grader.py --help`` for every command, ``python grader.py COMMAND --help`` for its
options; the commands are parsed in ``kata/grading/cli.py`` and done in ``kata/``.
"""

import sys
from pathlib import Path

from kata.grading.cli import main

if __name__ == "__main__":
    sys.exit(main(root=Path(__file__).resolve().parent))
