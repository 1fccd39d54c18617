"""What the grader writes: the learner's table, the class summary, CSV, JSON and Gradescope files.

Everything here reads :class:`~grading.core.results.SubmissionResult` objects; nothing runs tests.
Files are written so that a crash half-way through a batch loses nothing already graded: the CSV
gets one flushed row per finished submission, and the JSON files are rewritten atomically (a
temporary file renamed into place) after every submission.
"""

from __future__ import annotations

import csv
import os
import platform
import tempfile
from pathlib import Path

from grading.views.commands import grader_command

from grading.core import sanitize
from grading.views.learner import function_of
from grading.core.records import ExerciseResult, Outcome, Status, SubmissionResult
from grading.core.results import root_failure

BAR_WIDTH = 30
MESSAGE_LINES = 6


def environment(result: SubmissionResult | None = None) -> dict:
    """torch and transformers versions, the device and the models the tests used."""
    from importlib.metadata import version

    import torch

    from kata.models import default_device

    info = {"torch": torch.__version__, "transformers": version("transformers"),
            "device": str(default_device()), "models": [], "python": platform.python_version()}
    if result is not None:
        info.update(result.environment)
    return info


def describe_environment(info: dict) -> str:
    models = ", ".join(info.get("models") or []) or "none loaded"
    text = (f"torch {info['torch']}, transformers {info['transformers']}, "
            f"{info['device']}; models: {models}")
    if info.get("sandbox"):
        text += f"; sandbox: {info['sandbox']}"
    return text


def _points(value: float) -> str:
    return f"{value:g}"


def terminal_name(result: SubmissionResult) -> str:
    """The submission's name as printed: without terminal control characters."""
    return sanitize.terminal(result.name)


def score(result: SubmissionResult) -> str:
    """The main part and the bonus apart: ``97.4/100 points, bonus 10/10``."""
    text = f"{_points(result.main_points)}/{_points(result.max_points)} points"
    if result.bonus:
        text += f", bonus {_points(result.bonus_points)}/{_points(result.max_bonus_points)}"
    return text


def progress_bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


# --------------------------------------------------------------------------- learners


def exercise_table(result: SubmissionResult) -> str:
    """One row per exercise: status, tests passed / total, points; then the progress bar."""
    titles = [r.exercise.title + (" (bonus)" if r.exercise.bonus and "bonus" not in
                                  r.exercise.title.lower() else "") for r in result.exercises]
    width = max(len(t) for t in titles)
    status_width = max(13, *(len(r.status.value) for r in result.exercises))
    lines = [f"      {'exercise':<{width}}  {'status':<{status_width}}  {'tests':>7}  "
             f"{'points':>9}"]
    for row, title in zip(result.exercises, titles):
        tests = f"{row.passed}/{row.total}" if row.tests else "-"
        points = f"{_points(row.points)}/{_points(row.max_points)}"
        lines.append(f"  {row.exercise.id:<4}{title:<{width}}  {row.status:<{status_width}}  "
                     f"{tests:>7}  {points:>9}")
    core = result.core
    done = sum(r.done for r in core)
    fraction = result.main_points / result.max_points if result.max_points else 0.0
    skipped = [t for r in result.exercises for t in r.tests if t.outcome is Outcome.SKIPPED]
    if skipped:
        reason = skipped[0].message.split(";")[0].split(" (")[0]
        lines.append(f"  ({len(skipped)} skipped, counted neither for nor against: {reason})")
    lines += ["", f"  progress {progress_bar(fraction)}  {score(result)}, {done} of {len(core)} "
                  "exercises done"]
    return sanitize.terminal("\n".join(lines))


def _indent(text: str, prefix: str = "    ", lines: int = MESSAGE_LINES) -> str:
    kept = text.strip().splitlines()
    more = ["..."] if len(kept) > lines else []
    return "\n".join(prefix + line for line in kept[:lines] + more)


def next_step(result: SubmissionResult, hint_levels: dict[str, dict[str, int]],
              impl: str = "exercises", current: str | None = None) -> str:
    """Under the table: the exercise to work on, its first failing test, and a hint for the
    function that test is about (at the level the learner has reached with ``grader.py hint``).

    The exercise is ``current`` (the unfinished one the learner changed last,
    :func:`grading.views.learner.changed_last`) when there is one, and then the earlier main
    exercises still open are named too; else the first unfinished exercise."""
    first = result.first_unfinished()
    row = next((r for r in result.exercises if r.exercise.id == current and not r.done), first)
    if row is None:
        return ("All exercises are done. See your results as the post's figures:\n"
                f"    {grader_command('figures figures')}")
    exercise = row.exercise
    working = row is not first
    lines = [f"Next: {exercise.id} {exercise.title} (edit {exercise.source(impl)}"
             + ("; the exercise you changed last)" if working else ")"),
             f"  post: {exercise.post}"]
    if working:
        index = result.exercises.index(row)
        earlier = [r for r in result.exercises[:index] if not r.done and not r.exercise.bonus]
        if earlier:
            lines.append("  still open before it: " + ", ".join(
                f"{r.exercise.id} {r.exercise.title} ({r.status})" for r in earlier)
                + f"; `{grader_command(f'check {earlier[0].exercise.number}')}` grades "
                  f"{earlier[0].exercise.id} alone")
    first = row.first_failure()
    failure = root_failure(row) or first
    function = None
    if row.status is Status.NOT_STARTED:
        function = exercise.functions[0]
        lines.append(f"  start with {function}(): every function still raises "
                     "NotImplementedError.")
    elif row.status in (Status.NOT_IMPORTED, Status.ERROR, Status.MISSING) or failure is None:
        lines.append(f"  {row.status}:")
        lines.append(_indent(row.message))
    elif failure is not first:  # the root mistake is not what the first failing test shows
        root = sanitize.diagnosis_id(failure.diagnosis)
        explained = sum(sanitize.diagnosis_id(t.diagnosis) == root for t in row.failures)
        lines.append(f"  the mistake behind most failures ({explained} of {len(row.failures)} "
                     f"failing tests): {root}, as {failure.name} says ({exercise.tests})")
        lines.append(_indent(failure.message or failure.outcome))
    else:
        lines.append(f"  first failing test: {failure.name} ({exercise.tests})")
        lines.append(_indent(failure.message or failure.outcome))
        function = function_of(exercise, failure.name, failure.function)
    hints = exercise.hints_for(function) if function else ()
    if hints:
        seen = hint_levels.get(exercise.id, {})
        level = max(1, min(seen.get(function, 0) if isinstance(seen, dict) else 0, len(hints)))
        lines.append(f"  {function}() hint {level} of {len(hints)}: {hints[level - 1]}")
        if level < len(hints):
            lines.append(f"  more help: {grader_command(f'hint {exercise.number}')}")
    return "\n".join(lines)


def exercise_summary(result: SubmissionResult, hint_levels: dict[str, dict[str, int]],
                     impl: str = "exercises") -> str:
    """Where one graded exercise stands, as ``grader.py check`` and the warm watcher show it:
    its status line, then the next step (first failing test, message, hint) or "done"."""
    row = result.exercises[0]
    skipped = f", {row.skipped} skipped" if row.skipped else ""
    tests = f"{row.passed}/{row.total} tests pass{skipped}, " if row.total or row.skipped else ""
    lines = [f"{row.exercise.id} {row.exercise.title}: {row.status}, {tests}"
             f"{row.points:g}/{row.max_points:g} points", ""]
    lines.append(f"{row.exercise.id} is done: {row.passed}/{row.total} tests pass." if row.done
                 else next_step(result, hint_levels, impl))
    return sanitize.terminal("\n".join(lines))


def learner_report(result: SubmissionResult, hint_levels: dict[str, dict[str, int]], title: str,
                   impl: str = "exercises", current: str | None = None) -> str:
    """The learner's screen: the table, then the next step (``current``: the exercise they
    changed last, see :func:`next_step`)."""
    return sanitize.terminal("\n".join([
        f"{title}  ({describe_environment(environment(result))})", "", exercise_table(result), "",
        next_step(result, hint_levels, impl, current)]))


# --------------------------------------------------------------------------- instructors


def batch_table(results: list[SubmissionResult]) -> str:
    """One row per submission: points and status of every exercise, total, time."""
    if not results:
        return "no submissions"
    exercises = [r.exercise for r in results[0].exercises]
    names = [sanitize.terminal(r.name) for r in results]
    name_width = max(10, *(len(n) for n in names))
    cell = 22
    columns = "".join(f"{e.id + (' (bonus)' if e.bonus else ''):<{cell}}" for e in exercises)
    has_bonus = any(e.bonus for e in exercises)
    bonus_column = "  bonus" if has_bonus else ""
    header = f"{'submission':<{name_width}}  {columns}      main{bonus_column}    time"
    lines = [header, "-" * len(header)]
    for result, name in zip(results, names):
        cells = "".join(f"{_points(r.points):>5} {r.status:<{cell - 6}}" for r in result.exercises)
        main = f"{_points(result.main_points)}/{_points(result.max_points)}"
        bonus = f"{'+' + _points(result.bonus_points):>7}" if has_bonus else ""
        lines.append(f"{name:<{name_width}}  {cells}{main:>10}{bonus} "
                     f"{result.seconds:6.1f}s")
    return sanitize.terminal("\n".join(lines))


def csv_header(exercises) -> list[str]:
    """Per exercise its points and status; then the main part (``main`` out of ``max``) and the
    bonus (``bonus`` out of ``bonus_max``) apart, so that no column mixes the two."""
    columns = ["name"]
    for exercise in exercises:
        columns += [f"{exercise.id}_points", f"{exercise.id}_status"]
    return columns + ["main", "max", "bonus", "bonus_max", "all_done", "seconds", "sandbox"]


def csv_row(result: SubmissionResult) -> list:
    """One submission's row; a cell that a spreadsheet would run as a formula (a name such as
    ``=HYPERLINK(...)``) is neutralised (:func:`grading.core.sanitize.csv_cell`)."""
    row = [result.name]
    for r in result.exercises:
        row += [_points(r.points), r.status.value]
    row += [_points(result.main_points), _points(result.max_points),
            _points(result.bonus_points), _points(result.max_bonus_points), result.all_done,
            f"{result.seconds:.1f}", result.environment.get("sandbox", "")]
    return [sanitize.csv_cell(cell) for cell in row]


class CsvReport:
    """A CSV file that gains one flushed row per finished submission."""

    def __init__(self, path: Path, exercises):
        self.handle = open(path, "w", newline="", encoding="utf-8")
        readable(path)
        self.writer = csv.writer(self.handle)
        self.writer.writerow(csv_header(exercises))
        self.handle.flush()

    def add(self, result: SubmissionResult) -> None:
        self.writer.writerow(csv_row(result))
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def _umask() -> int:
    try:  # Linux: read it without changing it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def readable(path: Path | str) -> None:
    """Give a file the mode a plain ``open()`` would (0644 under the usual umask), not the 0600
    of a temporary file: reports are meant to be opened from a shared folder."""
    os.chmod(path, 0o666 & ~_umask())


def write_text_atomically(path: Path | str, text: str) -> Path:
    """Write ``text`` so that a reader (or a crash) never sees half a file; the file is
    readable as :func:`readable` says."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        readable(temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_atomically(path: Path, data) -> None:
    """Write strict JSON (no NaN nor Infinity: :func:`grading.core.sanitize.json_text`)
    atomically."""
    write_text_atomically(path, sanitize.json_text(data, indent=2))


def json_report(results: list[SubmissionResult]) -> dict:
    info = environment()
    info["models"] = sorted({m for r in results for m in r.environment.get("models", [])})
    # each submission's JSON with its full environment
    return {"environment": info, "submissions": [{**r.to_json(), "environment": environment(r)}
                                                 for r in results]}


# --------------------------------------------------------------------------- Gradescope


def gradescope_results(result: SubmissionResult) -> dict:
    """Gradescope's ``results.json``: an entry per counted test, worth an equal share of its
    exercise's points; where the secret checks cap an exercise's points, its passing tests share
    the capped total and say why (:func:`capped_output`), so the tests' scores add up to the
    top-level ``score``. Bonus tests are Gradescope's extra credit: named and tagged so, each
    with its real ``max_score``, over an assignment whose total is the main part's maximum."""
    tests = []
    for row in result.exercises:
        exercise = row.exercise
        share = exercise.points / row.total if row.total else 0.0
        earned = row.points / row.passed if row.capped else share  # capped: less than a share
        label = f"{exercise.id} {exercise.title}"
        extra = {"tags": ["extra credit"]} if exercise.bonus else {}
        suffix = " (extra credit)" if exercise.bonus and "extra credit" not in label else ""
        for number, test in enumerate(row.counted, start=1):
            passed = test.passed and not row.void
            if row.void:
                output = f"{row.status}: {row.message}"
            elif passed and row.capped:
                output = capped_output(row, earned, share)
            else:
                output = test.message or test.outcome.value
            entry = {"name": f"{label}: {test.name}{suffix}",
                     "number": f"{exercise.number}.{number}",
                     "score": round(earned if passed else 0.0, 4), "max_score": round(share, 4),
                     "status": "passed" if passed else "failed", "output": output,
                     "visibility": "visible", **extra}
            if test.diagnosis:
                entry["extra_data"] = {"diagnosis": sanitize.diagnosis_id(test.diagnosis)}
            tests.append(entry)
        if not row.counted:  # no test ran: one entry says why, worth the whole exercise
            tests.append({"name": f"{label}: {row.status}{suffix}",
                          "number": f"{exercise.number}.0", "score": 0.0,
                          "max_score": row.max_points, "status": "failed",
                          "output": row.message or row.status.value, "visibility": "visible",
                          **extra})
    lines = [f"{r.exercise.id} {r.exercise.title}: {r.status}, {r.passed}/{r.total} tests, "
             f"{_points(r.points)}/{_points(r.max_points)} points"
             + (f" (the secret checks confirmed {len(r.confirmed)} of its "
                f"{len(r.exercise.functions)} functions; not "
                f"{', '.join(r.unconfirmed)})" if r.capped else "")
             + (f" ({r.skipped} skipped, counted neither for nor against)" if r.skipped else "")
             + (" (extra credit)" if r.exercise.bonus else "")
             for r in result.exercises]
    info = environment(result)
    lines.append(f"Total: {score(result)}.")
    if result.bonus:
        lines.append(f"The assignment is out of {_points(result.max_points)} points; the bonus "
                     "is extra credit on top.")
    lines.append(f"Graded with {describe_environment(info)}.")
    return sanitize.finite({
        "score": result.points, "execution_time": round(result.seconds, 1),
        "output": "\n".join(lines), "visibility": "visible", "stdout_visibility": "hidden",
        "tests": tests, "extra_data": {**info, "main_points": result.main_points,
                                       "max_points": result.max_points,
                                       "bonus_points": result.bonus_points,
                                       "max_bonus_points": result.max_bonus_points}})


def capped_output(row: ExerciseResult, earned: float, share: float) -> str:
    """The output of a test that passed in an exercise the secret checks cap: it names each
    function whose secret check failed, and what that cost the test and the exercise."""
    n = len(row.exercise.functions)
    reasons = row.why_unconfirmed()
    lines = [f"passed, but it earns {earned:.2f} of its {share:.2f} points: the secret checks did "
             f"not confirm {', '.join(reasons)}."]
    lines += [f"- {function}: {why}" for function, why in reasons.items()]
    lines.append(f"{row.exercise.id} counts the {len(row.confirmed)} of its {n} functions they "
                 f"confirmed: {_points(row.points)} of its {_points(row.max_points)} points, "
                 f"instead of the {_points(row.uncapped_points)} its passing tests would earn "
                 f"(each function not confirmed costs {_points(round(row.max_points / n, 2))} "
                 "points).")
    return "\n".join(lines)


def gradescope_path(target: Path, name: str, several: bool) -> Path:
    """One submission: ``target`` itself; several: ``target/<name>.json``."""
    return Path(target) / f"{name}.json" if several else Path(target)
