"""The command line behind ``grader.py``: one subcommand per job.

    grader.py [status]            where you stand, the next failing test and a hint
    grader.py hint N [FUNCTION]   the next hint for exercise N (one level more each time)
    grader.py watch [--warm]      re-grade (or re-run the tests) each time you save
    grader.py figures DIR         draw the post's figures with your functions
    grader.py batch SUBMISSIONS   grade submissions in isolation (instructors)
    grader.py reset N [--yes]     restore exercise N's untouched stub (your file is kept)

The old flags (``--hint N``, ``--watch``, ``--figures DIR``, ``--submissions ...``) still work,
with a one-line notice naming the subcommand that replaces them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kata.manifest import IMPLEMENTATIONS, ManifestError, load_manifest

from . import learner, reports
from .submissions import GradingOptions, grade_batch, grade_in_place, prepare_shared_model_cache

DEFAULT_TIMEOUT = 120.0
DEFAULT_BATCH_MEMORY_MB = 4096
COMMANDS = ("status", "hint", "watch", "figures", "batch", "reset", "check", "classroom",
            "gradescope-bundle")

EPILOG = """\
learner loop:
  python grader.py                     where you stand, the next failing test and a hint
  python grader.py hint 2              the next hint for exercise 2 (one more each time)
  python grader.py watch --warm        re-run the saved exercise's tests in a warm process
  python grader.py figures figures     draw the post's figures with your functions
  python grader.py reset 2             start exercise 2 again (your file goes to exercises/.backup/)

instructors:
  python grader.py batch subs/* -j 2 --csv grades.csv --json grades.json
  python grader.py batch /autograder/submission --gradescope /autograder/results/results.json

`python grader.py COMMAND --help` describes each command.
"""


class Parser(argparse.ArgumentParser):
    """argparse, with errors on one line and no usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_impl(parser):
    parser.add_argument("--impl", choices=IMPLEMENTATIONS, default="exercises",
                        help="your exercises/ (default) or the reference solutions/")


def _add_limits(parser, batch: bool):
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"wall-clock limit for each exercise's tests (default {DEFAULT_TIMEOUT:g})")
    default = f"{DEFAULT_BATCH_MEMORY_MB}" if batch else "none"
    parser.add_argument("--memory-limit", type=int, default=None, metavar="MB",
                        help="address-space limit of each test process in MiB; 0 for none "
                             f"(default {default}; use 0 on a GPU)")


def _add_reports(parser):
    parser.add_argument("--csv", type=Path, metavar="FILE", help="one row per submission")
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="every test's outcome and message")
    parser.add_argument("--gradescope", type=Path, metavar="FILE",
                        help="Gradescope results.json (for several submissions: a folder that "
                             "gets <name>.json each)")


def build_parser() -> Parser:
    parser = Parser(prog="grader.py", description="Grade the hidden-states kata.", epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    status = commands.add_parser("status", help="where you stand (the default command)")
    _add_impl(status)
    _add_limits(status, batch=False)
    _add_reports(status)

    hint = commands.add_parser("hint", help="the next hint for exercise N, one level at a time")
    hint.add_argument("exercise", metavar="N", help="the exercise: 1, ex1 or its module name")
    hint.add_argument("function", metavar="FUNCTION", nargs="?",
                      help="the function to help with (default: the one whose test fails first)")
    _add_impl(hint)

    watch = commands.add_parser("watch", help="re-grade each time you save an exercise file")
    watch.add_argument("--warm", action="store_true",
                       help="keep one process with the models loaded and re-run only the saved "
                            "exercise's tests in it (about a second; no time limit: Ctrl-C "
                            "stops an endless loop)")
    _add_impl(watch)
    _add_limits(watch, batch=False)

    figures = commands.add_parser("figures", help="draw the post's figures (6-11, and 12-13 of the logit lens) with your code")
    figures.add_argument("out", metavar="DIR", type=Path, help="folder for the figures")
    figures.add_argument("--model", default=None,
                         help="auto (default: GPT-2 if cached, else SmolLM2), gpt2, smollm2, "
                              "tiny-gpt2")
    figures.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT * 3, metavar="SECONDS",
                         help=f"wall-clock limit for drawing (default {DEFAULT_TIMEOUT * 3:g})")
    _add_impl(figures)

    batch = commands.add_parser("batch", help="grade submissions (folders or zips) in isolation")
    batch.add_argument("submissions", metavar="SUBMISSION", nargs="+", type=Path)
    batch.add_argument("-j", "--jobs", type=int, default=1,
                       help="submissions graded in parallel (default 1)")
    _add_limits(batch, batch=True)
    _add_reports(batch)
    batch.add_argument("--lanes", type=int, default=0, metavar="N",
                       help="exercises graded at once within each submission (forked children "
                            "of its warm worker; default: the CPU cores divided by --jobs)")
    batch.add_argument("--keep", action="store_true", help="keep the temporary sandboxes")
    batch.add_argument("--report", type=Path, metavar="FILE",
                       help="a self-contained HTML class report, rewritten after each submission")
    batch.add_argument("--no-sandbox", action="store_true",
                       help="grade without the bwrap sandbox (only where none is available; the "
                            "reports then say the batch ran unsandboxed)")
    batch.add_argument("--canary", action="store_true",
                       help="grade the reference solutions once, in the sandbox, before the "
                            "batch; stop unless they get full marks")

    reset = commands.add_parser("reset", help="restore exercise N's untouched stub")
    reset.add_argument("exercise", metavar="N", help="the exercise: 1, ex1 or its module name")
    reset.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    check = commands.add_parser("check", help="grade exercise N only; exit status 0 when done "
                                              "(what an autograder step runs)")
    check.add_argument("exercise", metavar="N", help="the exercise: 1, ex1 or its module name")
    check.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                       help="wall-clock limit for the exercise's tests (default 300)")
    _add_impl(check)

    classroom = commands.add_parser("classroom", help="write DIR/.github/workflows/classroom.yml "
                                                      "for GitHub Classroom")
    classroom.add_argument("dir", metavar="DIR", type=Path, help="the template repository's checkout")
    classroom.add_argument("--template", action="store_true",
                           help="first copy the kata into DIR without solutions/ (grading only)")

    bundle = commands.add_parser("gradescope-bundle", help="build the Gradescope autograder zip "
                                                           "(without solutions/)")
    bundle.add_argument("zip", metavar="ZIP", type=Path, help="the zip to write, e.g. autograder.zip")
    bundle.add_argument("--exercises", default=None, metavar="IDS",
                        help="grade only these exercises, comma-separated (default: all)")
    return parser


# --------------------------------------------------------------------------- the old flags

LEGACY = {  # old flag -> (subcommand, how many values it takes: 1, or "+" for the rest)
    "--submissions": ("batch", "+"),
    "--hint": ("hint", 1),
    "--watch": ("watch", 0),
    "--figures": ("figures", 1),
}


def translate_legacy(argv: list[str]) -> tuple[list[str], list[str]]:
    """Old-style arguments -> subcommand arguments, and the notices to print."""
    if argv and argv[0] in COMMANDS:
        return argv, []
    found = [a.split("=", 1)[0] for a in argv if a.split("=", 1)[0] in LEGACY]
    if not found:
        return argv, []
    if len(set(found)) > 1:
        raise learner.UsageError(f"grader.py: {' and '.join(sorted(set(found)))} "
                                 "cannot be combined; use one subcommand")
    flag = found[0]
    command, count = LEGACY[flag]
    rest, values, i = [], [], 0
    while i < len(argv):
        argument = argv[i]
        name, equals, value = argument.partition("=")
        if name != flag:
            rest.append(argument)
            i += 1
            continue
        if equals:
            values.append(value)
            i += 1
        elif count == 1:
            if i + 1 >= len(argv):
                raise learner.UsageError(f"grader.py: {flag} needs a value")
            values.append(argv[i + 1])
            i += 2
        else:
            i += 1
            if count == "+":  # the paths that follow, up to the next option
                while i < len(argv) and not argv[i].startswith("-"):
                    values.append(argv[i])
                    i += 1
    example = " ".join(["python grader.py", command, *(values[:1] if count else [])])
    notice = (f"grader.py: {flag} is deprecated and will go; use `{example}"
              f"{' ...' if count == '+' and len(values) > 1 else ''}`")
    return [command, *values, *rest], [notice]


def normalise(argv: list[str]) -> tuple[list[str], list[str]]:
    """Subcommand arguments for ``argv``: old flags translated, ``status`` made explicit."""
    argv, notices = translate_legacy(list(argv))
    if "--warm" in argv and (not argv or argv[0] != "watch"):
        raise learner.UsageError("grader.py: --warm goes with `grader.py watch` "
                                 "(it re-runs tests in one process and writes no reports)")
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["status", *argv]
    return argv, notices


# --------------------------------------------------------------------------- the commands


def _options(args, batch: bool) -> GradingOptions:
    memory = args.memory_limit
    if memory is None:
        memory = DEFAULT_BATCH_MEMORY_MB if batch else 0
    return GradingOptions(timeout=args.timeout, memory_limit_mb=memory,
                          keep=getattr(args, "keep", False),
                          sandbox=batch and not getattr(args, "no_sandbox", False),
                          lanes=max(0, getattr(args, "lanes", 0) or 0))


def _write_files(args, results, several: bool = False) -> None:
    if getattr(args, "json", None):
        reports.write_atomically(args.json, reports.json_report(results))
    if getattr(args, "gradescope", None):
        for result in results:
            path = reports.gradescope_path(args.gradescope, result.name, several)
            reports.write_atomically(path, reports.gradescope_results(result))


def _environment_ok(quick: bool) -> bool:
    """Run the preflight checks; print every problem found (they are not the learner's)."""
    from .preflight import preflight

    problems = preflight(quick=quick)
    for problem in problems:
        print(f"grader.py: environment problem (not your code): {problem}", file=sys.stderr)
    return not problems


def _grade_once(args, root: Path, exercises) -> int:
    options = _options(args, batch=False)
    if not _environment_ok(quick=True):
        return 2
    print(f"Grading {args.impl}/ ...", file=sys.stderr, flush=True)
    result = grade_in_place(root, exercises, args.impl, options)
    if args.impl == "exercises":
        learner.remember_first_failures(root, result)
    title = f"Hidden-states kata: {args.impl}/ graded in {result.seconds:.0f} s"
    print(reports.learner_report(result, learner.hint_levels(root), title, args.impl))
    if getattr(args, "csv", None):
        csv = reports.CsvReport(args.csv, exercises)
        csv.add(result)
        csv.close()
    _write_files(args, [result])
    return 0 if result.all_done else 1


def status(args, root: Path, exercises) -> int:
    prepare_shared_model_cache()
    return _grade_once(args, root, exercises)


def hint(args, root: Path, exercises) -> int:
    exercise = learner.find_exercise(exercises, args.exercise)
    print(learner.reveal_next_hint(root, exercise, args.function, args.impl))
    return 0


def watch(args, root: Path, exercises) -> int:
    if args.warm:
        from .warm import watch as warm_watch

        return warm_watch(root, exercises, args.impl)
    prepare_shared_model_cache()
    return learner.watch(root, exercises, args.impl, lambda: _grade_once(args, root, exercises))


def figures(args, root: Path, exercises) -> int:
    if args.out.exists() and not args.out.is_dir():
        raise learner.UsageError(f"grader.py: {args.out} is a file, not a folder")
    from .figures import render

    return render(root, args.out, args.impl, args.model, set(), args.timeout)


def batch(args, root: Path, exercises) -> int:
    options = _options(args, batch=True)
    if options.sandbox:
        from .sandbox import sandbox_available

        ok, why = sandbox_available()
        if not ok:
            raise SystemExit(
                f"grader.py: refusing to grade submissions without a sandbox: {why}.\n"
                "Submitted code could read the solutions, change the tests or the model cache, "
                "and forge its results. To grade anyway (trusted code only), pass --no-sandbox; "
                "the reports will say the batch ran unsandboxed.")
    if not _environment_ok(quick=False):
        return 2
    if getattr(args, "canary", False):
        from .preflight import canary

        print("Canary: grading the reference solutions first ...", flush=True)
        prepare_shared_model_cache()
        ok, why = canary(root, exercises, options)
        print(f"Canary: {why}", flush=True)
        if not ok:
            print("grader.py: stopping before any submission is graded.", file=sys.stderr)
            return 2
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
        print(f"[{len(finished)}/{len(args.submissions)}] {reports.terminal_name(result)}: "
              f"{reports.score(result)} ({result.seconds:.1f} s)", flush=True)
        try:
            if csv:
                csv.add(result)
            _write_files(args, finished, several)  # after each one: nothing is lost on a crash
        except OSError as error:
            print(f"could not write the results: {error}", file=sys.stderr)

    print(f"Grading {len(args.submissions)} submission(s), {args.jobs} at a time, "
          f"{options.timeout:g} s per exercise, memory limit "
          f"{options.memory_limit_mb or 'none'} MiB, "
          f"{'sandboxed (bwrap)' if options.sandbox else 'WITHOUT a sandbox (--no-sandbox)'}",
          flush=True)
    results = grade_batch(args.submissions, root, exercises, options, args.jobs, on_result)
    if csv:
        csv.close()
    _write_files(args, results, several)  # the final files list submissions in the order given
    if class_report:
        class_report.finish(results)
    print()
    print(reports.batch_table(results))
    graded = [r for r in results if not r.interrupted]
    print(f"\n{len(graded)} submission(s) graded in {time.monotonic() - started:.1f} s "
          f"({reports.describe_environment(reports.environment(graded[0] if graded else None))})")
    from .runner import stopping

    if stopping():
        print(f"grader.py: interrupted: {len(graded)} of {len(results)} submission(s) graded; "
              "the others are listed as not graded", file=sys.stderr)
        return 130
    return 0


def reset(args, root: Path, exercises) -> int:
    exercise = learner.find_exercise(exercises, args.exercise)
    target = exercise.source()
    if not args.yes and not learner.is_untouched(root, exercise):
        question = (f"Replace {target} with the untouched stub? Your version is kept in "
                    f"{learner.BACKUP_DIR}/. [y/N] ")
        try:
            answer = input(question)
        except EOFError:
            print()
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("Nothing changed.")
            return 1
    path, backup = learner.restore_stub(root, exercise)
    kept = (f"; your version is in {backup.relative_to(root).as_posix()}" if backup
            else " (it was untouched)")
    print(f"Restored {target}{kept}. Hints for {exercise.id} start again from the first.")
    return 0


def check(args, root: Path, exercises) -> int:
    from .check import DEFAULT_TIMEOUT, check_exercise

    learner.find_exercise(exercises, args.exercise)  # a clear error for a wrong N
    return check_exercise(args.exercise, root, args.impl, args.timeout or DEFAULT_TIMEOUT)


def classroom(args, root: Path, exercises) -> int:
    from .classroom import write_classroom_template, write_classroom_workflow

    if args.dir.exists() and not args.dir.is_dir():
        raise learner.UsageError(f"grader.py: {args.dir} is a file, not a folder")
    path = write_classroom_template(args.dir, root) if args.template else write_classroom_workflow(args.dir)
    print(f"wrote {path}")
    return 0


def gradescope_bundle(args, root: Path, exercises) -> int:
    from .gradescope import build_gradescope_bundle

    ids = [i.strip() for i in args.exercises.split(",") if i.strip()] if args.exercises else None
    for wanted in ids or []:
        learner.find_exercise(exercises, wanted)
    path = build_gradescope_bundle(args.zip, source_root=root, exercises=ids)
    print(f"wrote {path} (no solutions/): upload it as the autograder")
    return 0


HANDLERS = {"status": status, "hint": hint, "watch": watch, "figures": figures, "batch": batch,
            "reset": reset, "check": check, "classroom": classroom,
            "gradescope-bundle": gradescope_bundle}


def main(argv=None, root: Path | None = None) -> int:
    parser = build_parser()
    command = None
    try:
        argv, notices = normalise(sys.argv[1:] if argv is None else argv)
        for notice in notices:
            print(notice, file=sys.stderr)
        args = parser.parse_args(argv)
        command = args.command
        root = Path(root or Path(__file__).resolve().parents[2])
        exercises = load_manifest()
        return HANDLERS[command](args, root, exercises)
    except learner.UsageError as error:
        message = str(error.code).removeprefix("grader.py: ")
        if not message.startswith("grader.py"):
            message = f"grader.py{' ' + command if command else ''}: error: {message}"
        print(message, file=sys.stderr)
        return 2
    except ManifestError as error:
        print(f"grader.py: error: kata/exercises.toml is broken: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
