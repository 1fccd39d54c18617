"""The kata's one command line: every command a person types is a subcommand of ``grader.py``.

Each command's arguments are parsed here, once (:func:`build_parser`), and its handler calls the
module that does the work with plain values. Only the processes the grader starts itself parse
arguments of their own (the warm worker, the sandboxed server, the figures child), and so does
``kata/requirements.py --floors``, which set-up runs with the system Python before anything is
installed; ``tests/grader/test_cli.py`` keeps that list and fails on any other parser.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
from pathlib import Path

from grading.core.faults import CALL_SECONDS
from grading.views.commands import grader_command
from grading.core.declarations import IMPLEMENTATIONS, DeclarationError, load_exercises

from grading.views import learner, reports
from grading.views.check import DEFAULT_TIMEOUT as CHECK_TIMEOUT
from grading.views.classroom import CHECK_TIMEOUT_SECONDS as STEP_TIMEOUT
from grading.views.gradescope import MEMORY_LIMIT_MB as GRADESCOPE_MEMORY_MB
from grading.views.gradescope import TIMEOUT as GRADESCOPE_TIMEOUT
from grading.box.runner import DEFAULT_BATCH_MEMORY_MB, DEFAULT_TIMEOUT
from grading.box.submissions import GradingOptions, grade_batch, grade_in_place, prepare_shared_model_cache

ROOT = Path(__file__).resolve().parents[2]

#: Who types which command, in the order ``grader.py --help`` lists them.
GROUPS = {
    "learners": ("status", "hint", "watch", "figures", "reset", "check"),
    "instructors": ("batch", "classroom", "gradescope-bundle", "cpus"),
    "autograders (the generated workflow and bundle run these)": ("classroom-step",
                                                                  "gradescope-run"),
    "maintainers": ("generate", "requirements"),
}
COMMANDS = tuple(name for names in GROUPS.values() for name in names)

EPILOG = """\
learner loop:
  python grader.py                     where you stand, the next failing test and a hint
  python grader.py hint 2              the next hint for exercise 2 (one more each time)
  python grader.py watch --warm        re-run the saved exercise's tests in a warm process
  python grader.py figures figures     draw the post's figures with your functions
  python grader.py reset 2             start exercise 2 again (your file goes to exercises/.backup/)

instructors:
  python grader.py batch subs/* -j 2 --csv grades.csv --json grades.json
  python grader.py classroom DIR --template
  python grader.py gradescope-bundle autograder.zip

maintainers, after changing anything in course/:
  python grader.py generate            the stubs, notebooks and tables made from course/
  python grader.py generate --check    write nothing; exit 1 naming what is stale

`python grader.py COMMAND --help` describes each command.
"""


class Parser(argparse.ArgumentParser):
    """argparse, with errors on one line and no usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_impl(parser):
    parser.add_argument("--impl", choices=IMPLEMENTATIONS, default="exercises",
                        help="your exercises/ (default) or the reference solutions")


def _add_timeout(parser, default: float, what: str = "each exercise's tests"):
    parser.add_argument("--timeout", type=float, default=default, metavar="SECONDS",
                        help=f"wall-clock limit for {what} (default {default:g})")


def _add_limits(parser, batch: bool = False):
    _add_timeout(parser, DEFAULT_TIMEOUT)
    default = f"{DEFAULT_BATCH_MEMORY_MB}" if batch else "none"
    parser.add_argument("--memory-limit", type=int, default=None, metavar="MB",
                        help="address-space limit of each test process in MiB; 0 for none "
                             f"(default {default}; use 0 on a GPU)")
    if batch:
        _add_call_timeout(parser)


def _add_call_timeout(parser):
    parser.add_argument("--call-timeout", type=float, default=CALL_SECONDS, metavar="SECONDS",
                        help="how long one call of a learner's function may run before it "
                             f"fails as timed out and the exercise goes on (default "
                             f"{CALL_SECONDS:g})")


def _add_reports(parser):
    parser.add_argument("--csv", type=Path, metavar="FILE", help="one row per submission")
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="every test's outcome and message")
    parser.add_argument("--gradescope", type=Path, metavar="FILE",
                        help="Gradescope results.json (for several submissions: a folder that "
                             "gets <name>.json each)")


def _add_exercise(parser):
    parser.add_argument("exercise", metavar="N", help="the exercise: 1, ex1 or its module name")


def _add_exercise_ids(parser):
    parser.add_argument("--exercises", default=None, metavar="IDS",
                        help="grade only these exercises, comma-separated (default: all)")


def _sha256(value: str) -> str:
    """A SHA-256 in hex, as ``--untouched`` takes it."""
    if len(value) != 64 or any(c not in "0123456789abcdefABCDEF" for c in value):
        raise argparse.ArgumentTypeError(f"not a SHA-256 (64 hex digits): {value[:80]!r}")
    return value.lower()


def _command_listing(summaries: dict[str, str], columns: int = 100) -> str:
    """The commands by who types them, for ``grader.py --help``."""
    indent = " " * (max(map(len, summaries)) + 4)
    blocks = []
    for group, names in GROUPS.items():
        rows = [textwrap.fill(summaries[name], columns, initial_indent=f"  {name:<{len(indent) - 2}}",
                              subsequent_indent=indent) for name in names]
        blocks.append(f"{group}:\n" + "\n".join(rows))
    return "\n\n".join(blocks)


def build_parser() -> Parser:
    """The whole command line: every subcommand and its arguments."""
    parser = Parser(prog="grader.py", usage="%(prog)s [COMMAND] [ARGUMENTS]", epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser,
                                     prog="grader.py", help=argparse.SUPPRESS)
    summaries: dict[str, str] = {}

    def command(name: str, summary: str, *options) -> Parser:
        """The parser of command ``name``, with the shared ``options`` (``_add_*``) added."""
        summaries[name] = summary
        made = commands.add_parser(name, description=summary[0].upper() + summary[1:] + ".")
        for add in options:
            add(made)
        return made

    # ------------------------------------------------------------------ learners
    command("status", "where you stand, the next failing test and a hint (the default)",
            _add_impl, _add_limits, _add_reports)

    hint = command("hint", "the next hint for exercise N, one level more each time",
                   _add_exercise, _add_impl)
    hint.add_argument("function", metavar="FUNCTION", nargs="?",
                      help="the function to help with (default: the one whose test fails first)")

    watch = command("watch", "grade again each time you save an exercise file",
                    _add_impl, _add_limits)
    watch.add_argument("--warm", action="store_true",
                       help="keep one process with the models loaded and re-run only the saved "
                            "exercise's tests in it (about a second; no time limit: Ctrl-C "
                            "stops an endless loop)")

    figures = command("figures", "draw the kata's figures with your functions into DIR",
                      _add_impl)
    figures.add_argument("out", metavar="DIR", type=Path, help="folder for the figures")
    figures.add_argument("--model", default=None,
                         help="auto (default: GPT-2 if cached, else SmolLM2), gpt2, smollm2, "
                              "tiny-gpt2")
    _add_timeout(figures, DEFAULT_TIMEOUT * 3, "drawing")

    reset = command("reset", "restore exercise N's untouched stub (your file is kept in "
                             "exercises/.backup/)", _add_exercise)
    reset.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    check = command("check", "grade exercise N only; exit status 0 when it is done (a "
                             "pass/fail autograder step)", _add_exercise, _add_impl)
    _add_timeout(check, CHECK_TIMEOUT, "the exercise's tests")

    # ------------------------------------------------------------------ instructors
    batch = command("batch", "grade submissions (folders or zips) in isolation", _add_reports)
    batch.add_argument("submissions", metavar="SUBMISSION", nargs="+", type=Path)
    batch.add_argument("-j", "--jobs", type=int, default=1,
                       help="submissions graded in parallel (default 1)")
    _add_limits(batch, batch=True)
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

    classroom = command("classroom", "write DIR/.github/workflows/classroom.yml for GitHub "
                                     "Classroom")
    classroom.add_argument("dir", metavar="DIR", type=Path,
                           help="the template repository's checkout")
    classroom.add_argument("--template", action="store_true",
                           help="first copy into DIR what learners may see (no solutions, "
                                "variants, mistakes or maintainer tests)")

    bundle = command("gradescope-bundle", "build the Gradescope autograder zip (without "
                                          "solutions)", _add_exercise_ids, _add_call_timeout)
    bundle.add_argument("zip", metavar="ZIP", type=Path,
                        help="the zip to write, e.g. autograder.zip")

    command("cpus", "how many CPUs the grader may use here (a container's quota, not the host's "
                    "cores; KATA_CPUS overrides it), which sets batch's default --lanes")

    # ------------------------------------------------------------------ autograders
    step = command("classroom-step", "grade exercise N as a step of the Classroom workflow and "
                                     "write the step's result for the reporter", _add_exercise)
    _add_timeout(step, STEP_TIMEOUT, "the exercise's tests")
    step.add_argument("--output", type=Path, default=None, metavar="FILE",
                      help="the file to append result=... to (default: $GITHUB_OUTPUT; without "
                           "either, the result's JSON is printed)")
    step.add_argument("--untouched", default=None, metavar="SHA256", type=_sha256,
                      help="the SHA-256 of the exercise file as the template hands it out: a "
                           "file still exactly that is 'not started' without running its tests")

    run = command("gradescope-run", "grade ROOT/submission and write ROOT/results/results.json "
                                    "(what the bundle's run_autograder runs)",
                  _add_exercise_ids, _add_call_timeout)
    run.add_argument("--root", type=Path, default=None, metavar="ROOT",
                     help="Gradescope's folder, holding source/ and submission/ (default: "
                          "$KATA_AUTOGRADER_ROOT, else /autograder)")
    _add_timeout(run, GRADESCOPE_TIMEOUT)
    run.add_argument("--memory-limit", type=int, default=GRADESCOPE_MEMORY_MB, metavar="MB",
                     help="address-space limit of each test process in MiB "
                          f"(default {GRADESCOPE_MEMORY_MB})")

    # ------------------------------------------------------------------ maintainers
    command("generate", "write what is generated from course/: the stubs in exercises/, the "
                        "notebooks, the tables in the docs").add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming the files that would "
                                             "change")
    versions = command("requirements", "check that every dependency is within the range "
                                       "pyproject.toml declares")
    versions.add_argument("--floors", action="store_true",
                          help="print the declared floors as pins instead, one per line")
    parser.description = ("The hidden-states kata's command line.\n\n"
                          + _command_listing(summaries))
    return parser


# --------------------------------------------------------------------------- the arguments


def normalise(argv: list[str]) -> list[str]:
    """Subcommand arguments for ``argv``: ``status`` made explicit when no command is named."""
    argv = list(argv)
    if "--warm" in argv and (not argv or argv[0] != "watch"):
        raise learner.UsageError("grader.py: --warm goes with `grader.py watch` "
                                 "(it re-runs tests in one process and writes no reports)")
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["status", *argv]
    return argv


# --------------------------------------------------------------------------- learners


def _write_files(args, results, several: bool = False) -> None:
    if getattr(args, "json", None):
        reports.write_atomically(args.json, reports.json_report(results))
    if getattr(args, "gradescope", None):
        for result in results:
            path = reports.gradescope_path(args.gradescope, result.name, several)
            reports.write_atomically(path, reports.gradescope_results(result))


def _environment_ok(quick: bool) -> bool:
    """Run the preflight checks; print every problem found (they are not the learner's)."""
    from grading.box.preflight import preflight

    problems = preflight(quick=quick)
    for problem in problems:
        print(f"grader.py: environment problem (not your code): {problem}", file=sys.stderr)
    return not problems


def status(args, root: Path) -> int:
    prepare_shared_model_cache()
    exercises = load_exercises()
    options = GradingOptions(timeout=args.timeout, memory_limit_mb=args.memory_limit or 0)
    if not _environment_ok(quick=True):
        return 2
    print(f"Grading {args.impl}/ ...", file=sys.stderr, flush=True)
    result = grade_in_place(root, exercises, args.impl, options)
    current = None
    if args.impl == "exercises":
        learner.remember_first_failures(root, result)
        current = learner.changed_last(root, result, args.impl)
    title = f"Hidden-states kata: {args.impl}/ graded in {result.seconds:.0f} s"
    print(reports.learner_report(result, learner.hint_levels(root), title, args.impl, current))
    if getattr(args, "csv", None):
        csv = reports.CsvReport(args.csv, exercises)
        csv.add(result)
        csv.close()
    _write_files(args, [result])
    return 0 if result.all_done else 1


def hint(args, root: Path) -> int:
    exercise = learner.find_exercise(load_exercises(), args.exercise)
    print(learner.reveal_next_hint(root, exercise, args.function, args.impl))
    return 0


def watch(args, root: Path) -> int:
    if args.warm:
        from grading.views.warm import watch as warm_watch

        return warm_watch(root, load_exercises(), args.impl)

    def grade(changed) -> int:
        graded = status(args, root)
        print("\nWatching the exercise files; save a file to re-grade, Ctrl-C to stop.", flush=True)
        return graded

    return learner.watch(root, load_exercises(), args.impl, grade)


def _refuse_a_file(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise learner.UsageError(f"grader.py: {path} is a file, not a folder")


def figures(args, root: Path) -> int:
    _refuse_a_file(args.out)
    from grading.views.figures import render

    return render(root, args.out, args.impl, args.model, set(), args.timeout)


def reset(args, root: Path) -> int:
    exercise = learner.find_exercise(load_exercises(), args.exercise)
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


def check(args, root: Path) -> int:
    from grading.views.check import grade_exercise

    result = grade_exercise(args.exercise, root, args.impl, args.timeout)
    print(reports.exercise_summary(result, learner.hint_levels(root), args.impl), flush=True)
    return 0 if result.exercises[0].done else 1


# --------------------------------------------------------------------------- instructors


def batch(args, root: Path) -> int:
    exercises = load_exercises()
    memory = DEFAULT_BATCH_MEMORY_MB if args.memory_limit is None else args.memory_limit
    options = GradingOptions(timeout=args.timeout, memory_limit_mb=memory,
                             call_seconds=args.call_timeout, keep=args.keep,
                             sandbox=not args.no_sandbox, lanes=max(0, args.lanes))
    if options.sandbox:
        from grading.box.sandbox import sandbox_available

        ok, why = sandbox_available()
        if not ok:
            raise SystemExit(
                f"grader.py: refusing to grade submissions without a sandbox: {why}.\n"
                "Submitted code could read the solutions, change the tests or the model cache, "
                "and forge its results. To grade anyway (trusted code only), pass --no-sandbox; "
                "the reports will say the batch ran unsandboxed.")
    if not _environment_ok(quick=False):
        return 2
    if args.canary:
        from grading.box.preflight import canary

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
    class_report = None
    if args.report:
        from grading.views.class_report import ClassReport

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
    from grading.box.runner import stopping

    if stopping():
        print(f"grader.py: interrupted: {len(graded)} of {len(results)} submission(s) graded; "
              "the others are listed as not graded", file=sys.stderr)
        return 130
    return 0


def classroom(args, root: Path) -> int:
    from grading.views.classroom import write_classroom_template, write_classroom_workflow

    _refuse_a_file(args.dir)
    path = (write_classroom_template(args.dir, root) if args.template
            else write_classroom_workflow(args.dir))
    print(f"wrote {path}")
    return 0


def _exercise_ids(text: str | None, checked: bool = True) -> list[str] | None:
    """``"ex1, ex2"`` -> ``["ex1", "ex2"]``, each checked against the manifest when ``checked``;
    None (every exercise) for none."""
    ids = [i.strip() for i in (text or "").split(",") if i.strip()]
    for wanted in ids if checked else []:
        learner.find_exercise(load_exercises(), wanted)
    return ids or None


def gradescope_bundle(args, root: Path) -> int:
    import zipfile

    from grading.views.gradescope import build_gradescope_bundle

    path = build_gradescope_bundle(args.zip, source_root=root,
                                   exercises=_exercise_ids(args.exercises),
                                   call_seconds=args.call_timeout)
    with zipfile.ZipFile(path) as archive:
        count = len(archive.namelist())
    print(f"wrote {path} ({count} files, no solutions): upload it as the autograder")
    return 0


def cpus(args, root: Path) -> int:
    from grading.box.cpus import available_cpus

    print(available_cpus())
    return 0


# --------------------------------------------------------------------------- autograders


def classroom_step(args, root: Path) -> int:
    """Exit status 0 whatever the grade: the workflow's reporter decides what failed."""
    from grading.core import sanitize
    from grading.views.classroom import grade_step

    output = args.output
    if output is None and os.environ.get("GITHUB_OUTPUT"):
        output = Path(os.environ["GITHUB_OUTPUT"])
    result = grade_step(args.exercise, root, args.timeout, output, args.untouched)
    if output is None:
        print(sanitize.json_text(result, indent=1))
    return 0


def gradescope_run(args, root: Path) -> int:
    """Reads the manifest of ROOT/source itself, so that whatever fails, results.json is
    written (:func:`grading.views.gradescope.grade_for_gradescope`)."""
    from grading.views.gradescope import grade_for_gradescope

    autograder = args.root or Path(os.environ.get("KATA_AUTOGRADER_ROOT", "/autograder"))
    ids = _exercise_ids(args.exercises, checked=False)  # ROOT/source's manifest, not this one
    result = grade_for_gradescope(autograder, ids, args.timeout, args.memory_limit,
                                  args.call_timeout)
    return 0 if result is not None else 1


# --------------------------------------------------------------------------- maintainers


def generate(args, root: Path) -> int:
    """Write (or, ``--check``, list) every file generated from ``course/``; exit status 1 when
    ``--check`` finds one stale, 2 when a source cannot be read."""
    from grading.views import generate as generator

    try:
        stale = generator.generate(root, check_only=args.check)
    except generator.GenerateError as error:
        print(f"grader.py generate: error: {error}", file=sys.stderr)
        return 2
    for path in stale:
        relative = path.relative_to(root).as_posix()
        print(f"stale: {relative} (run `{grader_command('generate')}`)" if args.check
              else f"wrote {relative}")
    if not stale:
        print("every generated file is up to date")
    return 1 if args.check and stale else 0


def requirements(args, root: Path) -> int:
    from kata import requirements as versions

    return versions.print_floors() if args.floors else versions.report()


#: Each command's handler: the function of its name (``gradescope-run``: :func:`gradescope_run`).
HANDLERS = {name: globals()[name.replace("-", "_")] for name in COMMANDS}


def main(argv=None, root: Path | None = None) -> int:
    """Run one command; its exit status. ``root`` is the kata's folder (grader.py's)."""
    parser = build_parser()
    command = None
    try:
        argv = normalise(sys.argv[1:] if argv is None else argv)
        args = parser.parse_args(argv)
        command = args.command
        return HANDLERS[command](args, Path(root or ROOT))
    except learner.UsageError as error:
        message = str(error.code).removeprefix("grader.py: ")
        if not message.startswith("grader.py"):
            message = f"grader.py{' ' + command if command else ''}: error: {message}"
        print(message, file=sys.stderr)
        return 2
    except DeclarationError as error:
        print(f"grader.py: error: an exercise's declaration is broken: {error}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
