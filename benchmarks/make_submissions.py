"""Build 20 synthetic submissions for timing and checking the batch grader.

    python benchmarks/make_submissions.py /tmp/submissions [--count 20]
    python grader.py batch /tmp/submissions/* -j 2 --csv grades.csv --json grades.json

They are the reference solutions with one thing changed (see grading/core/synthetic.py): some
correct in each layout the grader accepts (a copy of the repo, a folder holding exercises/, the
bare files, a zip), some partly done, and one of every fault the grader must survive: an endless
loop, sys.exit(), os._exit(), a segfault, a syntax error, an import error, a 6 GiB allocation,
megabytes of prints, a hostile conftest.py / pytest.ini / course/ (its own tests, solutions and
declarations), an import of the solutions, a missing file. Faults go to different exercises in
turn, whatever their number. With --count other than 20, the list is cut short or repeated
(copies get a number).
What each exercise file is (its kind) goes to <folder>-EXPECTED.json beside the folder.
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grading.core import synthetic  # noqa: E402
from grading.core.declarations import load_exercises  # noqa: E402


def plan(exercises):
    """(name, {exercise id: kind}, layout, ships hostile extras) for the 20 submissions."""
    ids = [e.id for e in exercises]

    def at(i, kind):  # the i-th exercise (wrapping around) gets this kind
        return {ids[i % len(ids)]: kind}

    everything = lambda kind: {i: kind for i in ids}  # noqa: E731
    return [
        ("correct-repo", {}, "repo", False),
        ("correct-zip", {}, "zip", False),
        ("correct-exercises-only", {}, "exercises", False),
        ("correct-bare-files", {}, "flat", False),
        ("untouched-stubs", everything("stub"), "repo", False),
        ("first-done-rest-stubs", {**everything("stub"), **at(0, "correct")}, "repo", False),
        ("last-one-function-left", at(-1, "stub_one"), "repo", False),
        ("one-exercise-wrong", at(1, "wrong"), "exercises", False),
        ("loops-forever", at(0, "loop"), "repo", False),
        ("calls-sys-exit", at(1, "sys_exit"), "repo", False),
        ("calls-os-exit", at(2, "os_exit"), "repo", False),
        ("segfaults", at(0, "segfault"), "zip", False),
        ("syntax-error", at(1, "syntax_error"), "repo", False),
        ("import-error", at(2, "import_error"), "flat", False),
        ("allocates-6-gib", at(0, "memory"), "repo", False),
        ("prints-megabytes", at(1, "prints"), "repo", False),
        ("ships-conftest-tests-solutions", everything("stub"), "repo", True),
        ("imports-the-solutions", at(0, "imports_solutions"), "repo", False),
        ("missing-a-file", at(-1, "missing"), "exercises", False),
        ("half-done-zip", {**everything("stub"), **at(0, "correct"), **at(1, "stub_one")},
         "zip", False),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args(argv)
    out = args.folder
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    exercises = load_exercises()
    submissions = plan(exercises)
    expected = {}
    for number in range(args.count):
        name, kinds, layout, extras = submissions[number % len(submissions)]
        if number >= len(submissions):
            name = f"{name}-{number // len(submissions) + 1}"
        path = synthetic.make_submission(ROOT, out / name, kinds, exercises, layout, extras)
        expected[path.name] = {e.id: kinds.get(e.id, "correct") for e in exercises}
        print(path)
    (out.parent / f"{out.name}-EXPECTED.json").write_text(json.dumps(expected, indent=1))


if __name__ == "__main__":
    main()
