"""Build 20 synthetic submissions for timing and checking the batch grader.

    python benchmarks/make_submissions.py /tmp/submissions [--count 20]
    python grader.py batch /tmp/submissions/* -j 2 --csv grades.csv --json grades.json

    # a class part-way through the course: only exercises 1 to 3 worked on, a few submissions
    python benchmarks/make_submissions.py /tmp/class --started ex1,ex2,ex3 \
        --only correct-repo,untouched-stubs,syntax-error

They are the reference solutions with one thing changed (see grading/core/synthetic.py): some
correct in each layout the grader accepts (a copy of the repo, a folder holding exercises/, the
bare files, a zip), some partly done, and one of every fault the grader must survive: an endless
loop, sys.exit(), os._exit(), a segfault, a syntax error, an import error, a 6 GiB allocation,
megabytes of prints, a hostile conftest.py / pytest.ini / course/ (its own tests, solutions and
declarations), an import of the solutions, a missing file. Faults go to different exercises in
turn, whatever their number. With --count other than 20, the list is cut short or repeated
(copies get a number). ``--only`` keeps the named submissions of the 20, and ``--started`` the
exercises worked on: every other exercise is handed in as the untouched stub (a class part-way
through the course, whose untouched stubs a batch grades once for all).
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


def started_only(kinds: dict[str, str], started: set[str], exercises) -> dict[str, str]:
    """``kinds`` for a class that worked on the ``started`` exercises only: every other one is
    the untouched stub (a missing file stays missing)."""
    return {e.id: (kinds.get(e.id, "correct") if e.id in started
                   or kinds.get(e.id) == "missing" else "stub") for e in exercises}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=None,
                        help="how many submissions (default: 20, or those --only names)")
    parser.add_argument("--only", default=None, metavar="NAMES",
                        help="only these of the 20 submissions, comma-separated")
    parser.add_argument("--started", default=None, metavar="IDS",
                        help="the exercises worked on, comma-separated; the others are handed "
                             "in as the untouched stubs")
    args = parser.parse_args(argv)
    out = args.folder
    exercises = load_exercises()
    submissions = plan(exercises)
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {name for name, *_ in submissions})
        if unknown:
            parser.error(f"no submission named {', '.join(unknown)}")
        submissions = [s for s in submissions if s[0] in wanted]
    if args.started:
        started = set(args.started.split(","))
        unknown = sorted(started - {e.id for e in exercises})
        if unknown:
            parser.error(f"no exercise {', '.join(unknown)}")
        submissions = [(name, started_only(kinds, started, exercises), layout, extras)
                       for name, kinds, layout, extras in submissions]
    count = len(submissions) if args.count is None else args.count
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    expected = {}
    for number in range(count):
        name, kinds, layout, extras = submissions[number % len(submissions)]
        if number >= len(submissions):
            name = f"{name}-{number // len(submissions) + 1}"
        path = synthetic.make_submission(ROOT, out / name, kinds, exercises, layout, extras)
        expected[path.name] = {e.id: kinds.get(e.id, "correct") for e in exercises}
        print(path)
    (out.parent / f"{out.name}-EXPECTED.json").write_text(json.dumps(expected, indent=1))


if __name__ == "__main__":
    main()
