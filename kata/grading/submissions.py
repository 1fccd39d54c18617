"""Grading the kata in place (learners), and learners' submissions in isolation (instructors).

A submission is a folder holding a copy of the kata, or a folder holding just ``exercises/`` (or
the exercise files themselves), or a zip of any of these. Only the exercise files the manifest
names are taken from it; they are copied into a fresh temporary copy of the instructor's kata
(``kata/``, ``tests/``, ``conftest.py``, ``pyproject.toml``, ``grader.py``), so nothing else a
submission ships (its own conftest.py, pytest.ini, tests/ or solutions/) can change which tests
run or how they are scored. The reference solutions are not copied in, so submitted code cannot
import them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import traceback
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from kata.manifest import Exercise

from .records import ExerciseResult, Status, SubmissionResult
from .results import summarize
from .runner import run_tests

#: What a sandbox takes from the instructor's kata.
SANDBOX_ITEMS = ("kata", "tests", "conftest.py", "pyproject.toml", "grader.py")
MAX_FILE_BYTES = 1_000_000
MAX_SEARCH_DEPTH = 5
_IGNORED_DIRS = {"__MACOSX", "__pycache__", "node_modules"}
_NEVER_FROM = {"solutions", "tests"}  # exercise files found under these are not the learner's


@dataclass
class GradingOptions:
    timeout: float = 60.0  # wall-clock seconds per exercise
    memory_limit_mb: int = 0  # address-space limit per test process; 0 for none
    threads: int | None = None  # torch threads per test process (None: see child_environment)
    keep: bool = False  # keep the temporary sandboxes (for debugging)
    sandbox: bool = False  # run every process under bwrap (kata.grading.sandbox); batch default
    probes: bool = True  # check the test reports against the answer probes (instructor mode)
    hide: tuple = ()  # more paths the sandbox hides (the batch adds the submissions themselves)
    lanes: int = 0  # exercises graded at once per submission (0: the cores / the jobs)


def default_lanes(jobs: int) -> int:
    """Exercises graded at once in each submission's worker: the CPUs left per job (the
    cgroup's CPU quota in a container, not the host's cores: :mod:`kata.grading.cpus`)."""
    from .cpus import available_cpus

    return max(1, available_cpus() // max(1, jobs))


def prepare_shared_model_cache() -> None:
    """Convert SmolLM2 once, here, so that parallel graders never convert it concurrently."""
    from kata.models import ModelNotAvailable, load_model, smollm2_cache_path

    if smollm2_cache_path().is_dir():
        return
    try:
        load_model("smollm2", device="cpu")
    except ModelNotAvailable:
        pass  # the tests that need it fail with the install command


# --------------------------------------------------------------------------- learners


def grade_in_place(root: Path, exercises: list[Exercise], impl: str,
                   options: GradingOptions) -> SubmissionResult:
    """Grade ``root/impl`` (the learner's ``exercises/`` or the ``solutions/``) where it is."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kata-grade-") as work:
        run = run_tests(root, exercises, impl, Path(work), options.timeout,
                        options.memory_limit_mb, options.threads)
    return summarize(exercises, run, name=impl, seconds=time.monotonic() - started)


# --------------------------------------------------------------------------- finding files


def _folder_listing(folder: Path) -> dict[str, tuple[int, Callable[[], bytes]]]:
    listing = {}
    for directory, subdirs, files in os.walk(folder):
        here = Path(directory)
        depth = len(here.relative_to(folder).parts)
        subdirs[:] = [] if depth >= MAX_SEARCH_DEPTH else [
            d for d in subdirs if d not in _IGNORED_DIRS and not d.startswith(".")
            and not (here / d).is_symlink()]
        for name in files:
            path = here / name
            if name.endswith(".py") and not path.is_symlink():
                relative = path.relative_to(folder).as_posix()
                listing[relative] = (path.stat().st_size, path.read_bytes)
    return listing


def _zip_listing(archive: zipfile.ZipFile) -> dict[str, tuple[int, Callable[[], bytes]]]:
    return {info.filename: (info.file_size, lambda info=info: archive.read(info))
            for info in archive.infolist()
            if not info.is_dir() and info.filename.endswith(".py")
            and not _IGNORED_DIRS & set(PurePosixPath(info.filename).parts)}


def _choose(listing: dict, module: str) -> str | None:
    """The learner's ``<module>.py``: in a folder named exercises/ if there is one, else the
    shallowest; never one under solutions/ or tests/."""
    candidates = [p for p in listing if PurePosixPath(p).name == f"{module}.py"
                  and not _NEVER_FROM & set(PurePosixPath(p).parts[:-1])]
    candidates.sort(key=lambda p: (PurePosixPath(p).parent.name != "exercises",
                                   len(PurePosixPath(p).parts), p))
    return candidates[0] if candidates else None


def exercise_files(submission: Path, exercises: list[Exercise]):
    """``({module: source bytes}, {exercise id: why it is missing})`` for one submission."""
    files, missing = {}, {}

    def take(listing):
        for exercise in exercises:
            chosen = _choose(listing, exercise.module)
            if chosen is None:
                missing[exercise.id] = f"the submission has no {exercise.module}.py"
                continue
            size, read = listing[chosen]
            if size > MAX_FILE_BYTES:
                missing[exercise.id] = f"{chosen} is larger than {MAX_FILE_BYTES // 1000} kB"
            else:
                files[exercise.module] = read()

    if submission.is_dir():
        take(_folder_listing(submission))
    elif zipfile.is_zipfile(submission):
        with zipfile.ZipFile(submission) as archive:
            take(_zip_listing(archive))
    else:
        why = "does not exist" if not submission.exists() else "is not a folder or a zip file"
        missing.update({e.id: f"{submission.name} {why}" for e in exercises})
    return files, missing


def build_sandbox(instructor_root: Path, target: Path, files: dict[str, bytes]) -> None:
    """A fresh copy of the instructor's kata at ``target`` with the learner's exercise files."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for item in SANDBOX_ITEMS:
        source = instructor_root / item
        if source.is_dir():
            shutil.copytree(source, target / item, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, target / item)
    (target / "exercises").mkdir()
    package = Path("exercises") / "__init__.py"
    shutil.copy2(instructor_root / package, target / package)
    for module, source in files.items():
        (target / "exercises" / f"{module}.py").write_bytes(source)


# --------------------------------------------------------------------------- instructors


def submission_names(paths: list[Path]) -> list[str]:
    """A unique, readable name per submission: the folder name or the zip's stem."""
    names, seen = [], {}
    for path in paths:
        base = (path.stem if path.suffix == ".zip" else path.name) or "submission"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return names


UNSANDBOXED = "none: graded without a sandbox (--no-sandbox)"


def grade_submission(path: Path, name: str, instructor_root: Path, exercises: list[Exercise],
                     options: GradingOptions, work_parent: Path | None = None) -> SubmissionResult:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"kata-grade-{name[:40]}-", dir=work_parent))
    box = None
    try:
        files, missing = exercise_files(path, exercises)
        copy = work / "kata"
        build_sandbox(instructor_root, copy, files)
        to_run = [e for e in exercises if e.id not in missing]
        if options.sandbox:
            from .sandbox import Sandbox

            hide = [instructor_root, work_parent or work, path, *options.hide]
            box = Sandbox.create(hide, options.memory_limit_mb)
        # one warm worker (imports and models once, a forked child per exercise) runs the
        # answer probes, then every exercise's tests (kata.grading.worker)
        probes = [e.id for e in to_run] if options.probes and to_run else None
        if probes is not None:
            from .probes import PROBES

            probes = [e for e in probes if e in PROBES]
        run = run_tests(copy, to_run, "exercises", work / "logs", options.timeout,
                        options.memory_limit_mb, options.threads, sandbox=box, warm=True,
                        probes=probes, lanes=options.lanes or default_lanes(1))
        run.environment["sandbox"] = box.caps if box is not None else UNSANDBOXED
        answers = run.answers if probes is not None else None
        result = summarize(exercises, run, missing, name, time.monotonic() - started)
        return apply_probes(result, answers) if answers is not None else result
    finally:
        if box is not None:
            box.close()
        if not options.keep:
            shutil.rmtree(work, ignore_errors=True)


def apply_probes(result: SubmissionResult, answers: dict) -> SubmissionResult:
    """Mark every exercise whose reported passes contradict its answer probes as tampered."""
    from dataclasses import replace

    from .probes import check, verdict

    rows = []
    for row in result.exercises:
        line = answers.get(row.exercise.id)
        why = verdict(row, check(row.exercise.id, line), line is not None) \
            if row.exercise.id in answers else None
        rows.append(replace(row, status=Status.TAMPERED, message=why) if why else row)
    return replace(result, exercises=tuple(rows))


def _grader_failure(name: str, exercises: list[Exercise], error: BaseException) -> SubmissionResult:
    """Whatever went wrong, the submission still gets a row, and the batch goes on."""
    message = "the grader itself failed on this submission: " + "".join(
        traceback.format_exception_only(type(error), error)).strip()
    return SubmissionResult(name, tuple(ExerciseResult(e, Status.ERROR, (), message)
                                        for e in exercises))


def grade_batch(paths: list[Path], instructor_root: Path, exercises: list[Exercise],
                options: GradingOptions, jobs: int = 1,
                on_result: Callable[[SubmissionResult], None] | None = None,
                ) -> list[SubmissionResult]:
    """Grade every submission, ``jobs`` at a time; ``on_result`` sees each one as it finishes.

    Results come back in the order of ``paths``. One submission's failure never stops the rest.
    """
    prepare_shared_model_cache()
    if options.probes:
        from .probes import prepare_references

        prepare_references()  # while the first workers warm up
    names = submission_names(paths)
    results: dict[str, SubmissionResult] = {}
    if options.sandbox:
        from dataclasses import replace

        from .sandbox import sandbox_available

        ok, why = sandbox_available()
        if not ok:
            raise RuntimeError(f"no sandbox: {why}")
        # every submission, and the folders that hold them, are hidden from every other one
        others = {Path(p).resolve() for p in paths} | {Path(p).resolve().parent for p in paths}
        options = replace(options, hide=(*options.hide, *sorted(others)))
    if not options.lanes:
        from dataclasses import replace

        options = replace(options, lanes=default_lanes(jobs))
    batch_work = Path(tempfile.mkdtemp(prefix="kata-batch-"))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            pool.submit(grade_submission, path, name, instructor_root, exercises, options,
                        batch_work): name
            for path, name in zip(paths, names)
        }
        for future in as_completed(futures):
            name = futures[future]
            try:
                results[name] = future.result()
            except Exception as error:  # noqa: BLE001 - a grader bug must not stop the batch
                results[name] = _grader_failure(name, exercises, error)
            if on_result is not None:
                on_result(results[name])
    if not options.keep:
        shutil.rmtree(batch_work, ignore_errors=True)
    return [results[name] for name in names]
