"""Grading the kata in place (learners), and learners' submissions in isolation (instructors).

A submission is a folder holding a copy of the kata, or a folder holding just ``exercises/`` (or
the exercise files themselves), or a zip of any of these. Only the exercise files the manifest
names are taken from it.

Each submission is graded across a trust boundary:

* the learner's side (:mod:`grading.box.learner_box`): a folder with only those exercise files
  and the learner-facing part of ``kata``, where :mod:`kata.serve.server` runs the learner's
  functions, in the submission's sandbox (:mod:`grading.box.sandbox`);
* the trusted side: a fresh copy of the instructor's ``kata/``, ``course/`` (without the
  answers), ``grading/``, ``conftest.py`` and ``pyproject.toml`` with no learner file in it, where the trusted worker
  (:mod:`grading.box.worker`) runs every test, its reference values and the recorder, and
  calls the learner's functions over the channels (:mod:`grading.box.remote`).

Nothing a submission ships (its own conftest.py, tests, solutions) can change which tests run,
how they are scored or what they expect; nothing on the learner's side knows an answer.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
import threading
import time
import traceback
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Callable

from grading.core.declarations import Exercise, handed_out_files

from grading.core.faults import CALL_SECONDS
from grading.core.records import ExerciseResult, Status, SubmissionResult
from grading.core.results import summarize
from grading.box.runner import (STOP, RunResult, fresh_secret_seed, run_tests, stopping,
                                trusted_environment)

#: What the trusted side's copy takes from the instructor's kata (never a learner's file, and
#: never an exercise's answer files: :func:`grading.core.declarations.handed_out_files`).
TRUSTED_PARTS = ("kata", "course", "grading", "conftest.py", "pyproject.toml")
MAX_FILE_BYTES = 1_000_000
MAX_SEARCH_DEPTH = 5
_IGNORED_DIRS = {"__MACOSX", "__pycache__", "node_modules"}
_NEVER_FROM = {"solutions", "tests", "course"}  # files found under these are not the learner's


@dataclass
class GradingOptions:
    timeout: float = 60.0  # wall-clock seconds per exercise
    memory_limit_mb: int = 0  # address-space limit per test process; 0 for none
    threads: int | None = None  # torch threads per test process (None: see child_environment)
    keep: bool = False  # keep the temporary sandboxes (for debugging)
    sandbox: bool = False  # run the learner's code under bwrap (grading.box.sandbox); batch default
    hide: tuple = ()  # more paths the sandbox hides (the batch adds the submissions themselves)
    lanes: int = 0  # exercises graded at once per submission (0: the cores / the jobs)
    secret_seed: int | None = None  # the secret checks' seed (None: fresh; a batch shares one)
    call_seconds: float = CALL_SECONDS  # the deadline of one call of a learner's function
    #: where no sandbox can be made, a grader run as root still grades across the boundary, the
    #: learner's side as a user of its own (grading.box.sandbox.Unprivileged): Gradescope
    unprivileged_fallback: bool = False


def default_lanes(jobs: int) -> int:
    """Exercises graded at once in each submission's worker: the CPUs left per job (the
    cgroup's CPU quota in a container, not the host's cores: :mod:`grading.box.cpus`)."""
    from grading.box.cpus import available_cpus

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
    """Grade the learner's ``exercises/`` (or the solutions: ``impl``) of ``root`` where they are."""
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
            try:
                info = path.lstat()
            except OSError:
                continue
            # a regular file only: reading a FIFO (or a device) a submission ships would block
            # the grader's own process forever, and with it the whole batch
            if name.endswith(".py") and stat.S_ISREG(info.st_mode):
                relative = path.relative_to(folder).as_posix()
                listing[relative] = (info.st_size, path.read_bytes)
    return listing


def _zip_listing(archive: zipfile.ZipFile) -> dict[str, tuple[int, Callable[[], bytes]]]:
    return {info.filename: (info.file_size, lambda info=info: archive.read(info))
            for info in archive.infolist()
            if not info.is_dir() and info.filename.endswith(".py")
            and not _IGNORED_DIRS & set(PurePosixPath(info.filename).parts)}


def _choose(listing: dict, module: str) -> str | None:
    """The learner's ``<module>.py``: in a folder named exercises/ if there is one, else the
    shallowest; never one under solutions/, tests/ or course/."""
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


def build_trusted_copy(instructor_root: Path, target: Path) -> None:
    """A fresh copy of the instructor's kata at ``target`` for the trusted side's tests."""
    for relative in handed_out_files(instructor_root, TRUSTED_PARTS):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(instructor_root / relative, target / relative)
    (target / "exercises").mkdir()
    package = Path("exercises") / "__init__.py"
    shutil.copy2(instructor_root / package, target / package)


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


@dataclass
class SharedTrustedSide:
    """What a batch's submissions share on the trusted side, never on the learner's: one fresh
    copy of the instructor's kata, the folder of reference values computed once per batch
    (:mod:`grading.core.reference_cache`), the warm worker every submission's worker is
    forked from (:mod:`grading.box.batch_worker`) and the one run of the untouched stubs
    (:mod:`grading.box.untouched`)."""

    root: Path  # the batch's trusted copy of the kata (build_trusted_copy)
    references: Path  # the batch's reference values
    worker: object | None = None  # a BatchWorker; None: each submission starts its own
    stubs: object | None = None  # an untouched.StubRun; None: every exercise is run
    zygote: object | None = None  # a learner_box.LearnerZygote; None: learners start cold

    @classmethod
    def start(cls, instructor_root: Path, exercises: list[Exercise], folder: Path,
              options: GradingOptions, paths: list[Path] = ()) -> SharedTrustedSide:
        """Copy the kata into ``folder``, start the batch's warm worker on the copy, and plan
        the one run of the stubs the submissions at ``paths`` hand in untouched."""
        from grading.box.batch_worker import BatchWorker
        shared = cls(folder / "kata", folder / "references")
        build_trusted_copy(instructor_root, shared.root)
        shared.references.mkdir()
        (folder / "logs").mkdir()
        env = trusted_environment(shared.root, options.threads, options.secret_seed,
                                  shared.references, options.call_seconds,
                                  options.memory_limit_mb)
        try:
            shared.worker = BatchWorker(shared.root,
                                        [(e.id, shared.root / e.tests) for e in exercises],
                                        env, folder / "logs", options.memory_limit_mb)
        except OSError:  # no process could be started: each submission starts its own
            shared.worker = None
        if options.sandbox and len(paths) > 1:  # the learners' warm parent (a grader run as
            # root); one submission alone would only wait for it
            from grading.box.learner_box import LearnerZygote

            shared.zygote = LearnerZygote.start(
                instructor_root, folder / "zygote" / "learner",
                [instructor_root, folder.parent, *options.hide], options.memory_limit_mb,
                options.threads, folder / "logs" / "learner-zygote.err")
        shared.stubs = _stub_run(instructor_root, exercises, paths, options, shared,
                                 folder.parent)
        return shared

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        if self.zygote is not None:
            self.zygote.close()


def _stub_run(instructor_root: Path, exercises: list[Exercise], paths, options: GradingOptions,
              shared: SharedTrustedSide, batch_work: Path):
    """The batch's one run of the stubs that two or more of the submissions at ``paths`` hand
    in untouched (:class:`grading.box.untouched.StubRun`), or None when none is."""
    from grading.box.untouched import StubRun, stub_sources, worth_a_run

    sources = worth_a_run(stub_sources(instructor_root, exercises), _handed_in(paths, exercises))
    graded = [e for e in exercises if e.module in sources]

    def grade_stubs(files: dict[str, bytes]):
        return run_learner_files(files, graded, instructor_root, batch_work / "stubs", options,
                                 shared, hide=[instructor_root, batch_work])

    return StubRun(sources, grade_stubs) if sources else None


def _handed_in(paths, exercises: list[Exercise]):
    """Each submission's exercise files ({module: source}); none for one that cannot be read
    (its own grading says why)."""
    for path in paths:
        try:
            yield exercise_files(Path(path), exercises)[0]
        except Exception:  # noqa: BLE001 - a broken archive is that submission's problem
            yield {}


def run_learner_files(files: dict[str, bytes], exercises: list[Exercise], instructor_root: Path,
                      work: Path, options: GradingOptions, shared: SharedTrustedSide | None,
                      hide: list[Path]):
    """Run the tests of ``exercises`` on the learner's ``files`` ({module: source}) across the
    trust boundary: the files in a learner box under ``work`` (in a sandbox hiding ``hide``
    when ``options.sandbox``), the tests on the trusted side. Returns the
    :class:`~grading.box.runner.RunResult`."""
    from grading.box.learner_box import LearnerBox, build_learner_box

    box = None
    try:
        if shared is None:
            trusted = work / "kata"
            build_trusted_copy(instructor_root, trusted)
        else:
            trusted = shared.root
        build_learner_box(instructor_root, work / "learner", files)
        os.chmod(work, 0o755)  # the learner's folder is bound in for an unprivileged uid
        if options.sandbox:
            from grading.box.sandbox import Sandbox, Unprivileged, sandbox_available

            available, why = sandbox_available()
            if available or not options.unprivileged_fallback:
                box = Sandbox.create([*hide, *options.hide], options.memory_limit_mb)
            else:
                box = Unprivileged.create(why, options.memory_limit_mb)
        learner = LearnerBox(work / "learner", {e.id: e.module for e in exercises}, box,
                             options.timeout, options.threads,
                             shared.zygote if shared is not None and box is not None else None,
                             options.call_seconds)
        run = run_tests(trusted, exercises, "exercises", work / "logs", options.timeout,
                        options.memory_limit_mb, options.threads, warm=True,
                        lanes=options.lanes or default_lanes(1), learner=learner,
                        secret_seed=options.secret_seed,
                        batch_worker=shared.worker if shared is not None else None,
                        references=shared.references if shared is not None else None,
                        call_seconds=options.call_seconds)
        run.environment["sandbox"] = box.caps if box is not None else UNSANDBOXED
        return run
    finally:
        if box is not None:
            box.close()


def grade_submission(path: Path, name: str, instructor_root: Path, exercises: list[Exercise],
                     options: GradingOptions, work_parent: Path | None = None,
                     shared: SharedTrustedSide | None = None) -> SubmissionResult:
    """Grade one submission across the trust boundary; ``shared``: the batch's trusted side
    (else a copy of the kata and a worker of its own). With a batch's trusted side, the
    exercises handed in untouched take the batch's one run of the stubs
    (:mod:`grading.box.untouched`)."""
    from grading.box.untouched import copy_exercises

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"kata-grade-{_safe(name)[:40]}-", dir=work_parent))
    try:
        files, missing = exercise_files(path, exercises)
        to_run = [e for e in exercises if e.id not in missing]
        template, taken = None, []
        if shared is not None and shared.stubs is not None:
            to_run, template, taken = shared.stubs.split(files, to_run)
        if to_run:
            run = run_learner_files(files, to_run, instructor_root, work, options, shared,
                                    hide=[instructor_root, work_parent or work, path])
        else:
            run = RunResult()
        if taken:
            copy_exercises(template, taken, run)
        return summarize(exercises, run, missing, name, time.monotonic() - started)
    finally:
        if not options.keep:
            shutil.rmtree(work, ignore_errors=True)


def _safe(name: str) -> str:
    """A submission's name as a file name part: letters, digits, '-', '_' and '.' only."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "submission"


def _ungraded(name: str, exercises: list[Exercise], message: str) -> SubmissionResult:
    """A row for a submission the batch could not grade: every exercise an error saying why."""
    return SubmissionResult(name, tuple(ExerciseResult(e, Status.ERROR, (), message)
                                        for e in exercises))


def _grader_failure(name: str, exercises: list[Exercise], error: BaseException) -> SubmissionResult:
    """Whatever went wrong, the submission still gets a row, and the batch goes on."""
    return _ungraded(name, exercises, "the grader itself failed on this submission: " + "".join(
        traceback.format_exception_only(type(error), error)).strip())


INTERRUPTED = "not graded: the batch was interrupted (Ctrl-C or SIGTERM) before it got here"


@contextmanager
def _stop_on_signal():
    """The first Ctrl-C or SIGTERM stops the batch cleanly: the submissions being graded stop at
    once (their processes, sandboxes and folders removed), the rest are not started, and every
    result so far is kept (:func:`grading.box.runner.stopping` says whether it happened)."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, lambda number, frame: STOP.set())
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def refuse_unchecked(exercises: list[Exercise], instructor_root: Path) -> None:
    """Raise :class:`~grading.core.declarations.DeclarationError` if a public function of an
    exercise has no secret check, or a check draws only from small pools or names several
    functions: points could then be earned with prepared answers, or lost to another function."""
    from grading.core.declarations import DeclarationError, unchecked_functions, weak_checks

    for names, why in (
            (unchecked_functions, "batch grading needs a secret check (@secret_check in the "
             "exercise's test files, course/shared/secret.py) for every public function; none "
             "for "),
            (weak_checks, "batch grading needs every secret check to confirm one function on at "
             "least one input no table can hold (a random model, text, tensor or token ids: "
             "course/shared/secret.py); these do not: ")):
        gaps = [f"{e.id}: {', '.join(names(e, instructor_root))}" for e in exercises
                if names(e, instructor_root)]
        if gaps:
            raise DeclarationError(why + "; ".join(gaps))


def grade_batch(paths: list[Path], instructor_root: Path, exercises: list[Exercise],
                options: GradingOptions, jobs: int = 1,
                on_result: Callable[[SubmissionResult], None] | None = None,
                ) -> list[SubmissionResult]:
    """Grade every submission, ``jobs`` at a time; ``on_result`` sees each one as it finishes.

    Results come back in the order of ``paths``. One submission's failure never stops the rest.
    """
    refuse_unchecked(exercises, instructor_root)
    prepare_shared_model_cache()
    names = submission_names(paths)
    results: dict[str, SubmissionResult] = {}
    if options.secret_seed is None:  # one seed for the batch, drawn now, known only here
        options = replace(options, secret_seed=fresh_secret_seed())
    if options.sandbox:
        from grading.box.sandbox import sandbox_available

        ok, why = sandbox_available()
        if not ok and not (options.unprivileged_fallback and os.geteuid() == 0):
            raise RuntimeError(f"no sandbox: {why}")
        # every submission, and the folders that hold them, are hidden from every other one
        others = {Path(p).resolve() for p in paths} | {Path(p).resolve().parent for p in paths}
        options = replace(options, hide=(*options.hide, *sorted(others)))
    if not options.lanes:
        options = replace(options, lanes=default_lanes(jobs))
    STOP.clear()  # a batch stopped before in this process does not stop this one
    batch_work = Path(tempfile.mkdtemp(prefix="kata-batch-"))
    os.chmod(batch_work, 0o755)  # each learner's folder in it is bound in for an unprivileged uid
    shared = None
    try:
        shared = SharedTrustedSide.start(instructor_root, exercises, batch_work / "trusted",
                                         options, paths)
        with _stop_on_signal(), ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {
                pool.submit(_unless_stopped, grade_submission, path, name, instructor_root,
                            exercises, options, batch_work, shared): name
                for path, name in zip(paths, names)
            }
            for future in as_completed(futures):
                name = futures[future]
                try:
                    results[name] = future.result()
                except Exception as error:  # noqa: BLE001 - a grader bug must not stop the batch
                    results[name] = _grader_failure(name, exercises, error)
                if on_result is not None and not (stopping() and results[name].interrupted):
                    on_result(results[name])
    finally:
        if shared is not None:
            shared.close()
        if not options.keep:
            shutil.rmtree(batch_work, ignore_errors=True)
    for name in names:
        results.setdefault(name, _ungraded(name, exercises, INTERRUPTED))
    return [results[name] for name in names]


def _unless_stopped(grade, path, name, instructor_root, exercises, options, batch_work, shared):
    """Grade one submission, unless the batch was stopped before its turn came."""
    if stopping():
        return _ungraded(name, exercises, INTERRUPTED)
    result = grade(path, name, instructor_root, exercises, options, batch_work, shared)
    if stopping():  # stopped while it ran: what it got so far is not its grade
        return _ungraded(name, exercises, INTERRUPTED)
    return result
