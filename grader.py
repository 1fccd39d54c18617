"""Grade the hidden-states kata: ``python grader.py [status|hint|watch|figures|reset]`` (learners)
or ``python grader.py batch SUBMISSIONS...`` (instructors).

Run ``python grader.py --help`` (or ``python grader.py COMMAND --help``) for every option; the
work is done in ``kata/grading/``.
"""

import sys
from pathlib import Path

from kata.grading.cli import main

if __name__ == "__main__":
    sys.exit(main(root=Path(__file__).resolve().parent))
