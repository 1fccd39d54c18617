"""The command line behind ``grader.py``: learner mode, hints, figures, watch, and batch grading."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kata.manifest import IMPLEMENTATIONS, load_manifest

from . import learner, reports
from .submissions import GradingOptions, grade_batch, grade_in_place, prepare_shared_model_cache

DEFAULT_TIMEOUT = 120.0
DEFAULT_BATCH_MEMORY_MB = 4096

EPILOG = """\
learner loop:
  python grader.py                 where you stand, the next failing test and a hint
  python grader.py --hint 2        the next hint for exercise 2 (one more each time)
  python grader.py --watch         re-grade every time you save an exercise file
  python grader.py --watch --warm  re-run the saved exercise's tests in a warm process (fastest)
  python grader.py --figures figures   draw the post's figures with your functions

instructors:
  python grader.py --submissions subs/* -j 2 --csv grades.csv --json grades.json
  python grader.py --submissions /autograder/submission \
                   --gradescope /autograder/results/results.json
"""


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="grader.py", description="Grade the hidden-states kata.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    learn = parser.add_argument_group("learners")
    learn.add_argument("--impl", choices=IMPLEMENTATIONS, default="exercises",
                       help="grade your exercises/ (default) or the reference solutions/")
    learn.add_argument("--hint", metavar="N", help="show exercise N's next hint and stop")
    learn.add_argument("--figures", metavar="DIR", type=Path,
                       help="also draw the post's figures 6-11 with your finished functions")
    learn.add_argument("--model", default=None,
                       help="model for --figures: auto (default: GPT-2 if cached, else SmolLM2), "
                            "gpt2, smollm2, tiny-gpt2")
    learn.add_argument("--watch", action="store_true",
                       help="re-grade whenever a file in exercises/ changes (Ctrl-C stops)")
    learn.add_argument("--warm", action="store_true",
                       help="with --watch: keep one process with the models loaded and re-run "
                            "only the saved exercise's tests in it (feedback in about a second; "
                            "no time limit: Ctrl-C stops an endless loop)")
    teach = parser.add_argument_group("instructors")
    teach.add_argument("--submissions", metavar="PATH", nargs="+", type=Path,
                       help="grade these submissions (folders or zips) in isolation")
    teach.add_argument("-j", "--jobs", type=int, default=1,
                       help="submissions graded in parallel (default 1)")
    teach.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                       help="wall-clock limit for each exercise's tests "
                            f"(default {DEFAULT_TIMEOUT:g})")
    teach.add_argument("--memory-limit", type=int, default=None, metavar="MB",
                       help="address-space limit of each test process in MiB; 0 for none "
                            f"(default {DEFAULT_BATCH_MEMORY_MB} with --submissions, else none; "
                            "use 0 on a GPU)")
    teach.add_argument("--csv", type=Path, metavar="FILE", help="one row per submission")
    teach.add_argument("--json", type=Path, metavar="FILE", help="every test's outcome and message")
    teach.add_argument("--gradescope", type=Path, metavar="FILE",
                       help="Gradescope results.json (for several submissions: a folder that "
                            "gets <name>.json each)")
    teach.add_argument("--keep", action="store_true", help="keep the temporary sandboxes")
    # --- class report hook (kata.grading.class_report) -----------------------------------
    teach.add_argument("--report", type=Path, metavar="FILE",
                       help="a self-contained HTML class report, rewritten after each submission")
    return parser.parse_args(argv)


def _options(args, batch: bool) -> GradingOptions:
    memory = args.memory_limit
    if memory is None:
        memory = DEFAULT_BATCH_MEMORY_MB if batch else 0
    return GradingOptions(timeout=args.timeout, memory_limit_mb=memory, keep=args.keep)


def _write_files(args, results, several: bool = False) -> None:
    if args.json:
        reports.write_atomically(args.json, reports.json_report(results))
    if args.gradescope:
        for result in results:
            path = reports.gradescope_path(args.gradescope, result.name, several)
            reports.write_atomically(path, reports.gradescope_results(result))


def learner_mode(args, root: Path, exercises) -> int:
    if args.hint:
        print(learner.reveal_next_hint(root, learner.find_exercise(exercises, args.hint)))
        return 0
    if args.watch and args.warm:
        from .warm import watch

        return watch(root, exercises, args.impl)
    options = _options(args, batch=False)
    prepare_shared_model_cache()

    def grade_once() -> int:
        print(f"Grading {args.impl}/ ...", file=sys.stderr, flush=True)
        result = grade_in_place(root, exercises, args.impl, options)
        title = f"Hidden-states kata: {args.impl}/ graded in {result.seconds:.0f} s"
        print(reports.learner_report(result, learner.hint_levels(root), title, args.impl))
        if args.csv:
            csv = reports.CsvReport(args.csv, exercises)
            csv.add(result)
            csv.close()
        _write_files(args, [result])
        if args.figures:
            print()
            not_done = {r.exercise.id for r in result.exercises if not r.done}
            from .figures import render

            render(root, args.figures, args.impl, args.model, not_done, args.timeout * 3)
        return 0 if result.all_done else 1

    if args.watch:
        return learner.watch(root, exercises, args.impl, grade_once)
    return grade_once()


def instructor_mode(args, root: Path, exercises) -> int:
    options = _options(args, batch=True)
    csv = reports.CsvReport(args.csv, exercises) if args.csv else None
    finished = []
    several = len(args.submissions) > 1
    started = time.monotonic()
    # --- class report hook (kata.grading.class_report) -----------------------------------
    class_report = None
    if args.report:
        from .class_report import ClassReport

        class_report = ClassReport(args.report, exercises, expected=len(args.submissions))

    def on_result(result):
        finished.append(result)
        if class_report:
            try:
                class_report.add(result)
            except OSError as error:
                print(f"could not write the class report: {error}", file=sys.stderr)
        print(f"[{len(finished)}/{len(args.submissions)}] {result.name}: "
              f"{reports.score(result)} ({result.seconds:.1f} s)", flush=True)
        try:
            if csv:
                csv.add(result)
            _write_files(args, finished, several)  # after each one: nothing is lost on a crash
        except OSError as error:
            print(f"could not write the results: {error}", file=sys.stderr)

    print(f"Grading {len(args.submissions)} submission(s), {args.jobs} at a time, "
          f"{options.timeout:g} s per exercise, memory limit "
          f"{options.memory_limit_mb or 'none'} MiB", flush=True)
    results = grade_batch(args.submissions, root, exercises, options, args.jobs, on_result)
    if csv:
        csv.close()
    _write_files(args, results, several)  # the final files list submissions in the order given
    if class_report:
        class_report.finish(results)
    print()
    print(reports.batch_table(results))
    print(f"\n{len(results)} submission(s) graded in {time.monotonic() - started:.1f} s "
          f"({reports.describe_environment(reports.environment(results[0] if results else None))})")
    return 0


def main(argv=None, root: Path | None = None) -> int:
    args = parse_args(argv)
    if args.warm and (not args.watch or args.submissions or args.figures or args.csv
                      or args.json or args.gradescope):
        raise SystemExit("grader.py: --warm goes with --watch alone (it re-runs tests in one "
                         "process and writes no reports or figures)")
    root = Path(root or Path(__file__).resolve().parents[2])
    exercises = load_manifest()
    if args.submissions:
        return instructor_mode(args, root, exercises)
    return learner_mode(args, root, exercises)
