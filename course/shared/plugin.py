"""The kata's pytest plugin (``pyproject.toml`` loads it for every pytest session of the kata).

* ``--impl exercises|solutions`` (or ``KATA_IMPL``) picks the code under test; learners get
  ``exercises/`` by default, maintainers run ``pytest --impl solutions``.
* ``ex``: the implementation module of the exercise whose folder the running test file is in. Under the grader (``--kata-remote``) it is the same
  module at arm's length: its functions run in the learner's sandbox and only plain data comes
  back (:mod:`grading.box.remote`); ``--kata-remote fork`` does the same in-process, for the
  maintainers' checks that every verdict is the same on both sides of the boundary.
* ``tiny_gpt2``, ``smollm2``, ``gpt2``: ``(model, tokenizer)`` loaded once per session. GPT-2
  tests skip, with the reason, where GPT-2 is not in the local cache; a missing SmolLM2 is an
  error that gives the install command.
* Learner mode (``grading.views.learner_view``, on for ``exercises/`` unless ``--kata-full``): a test that
  reaches an untouched stub is one "not started" line per function, not a traceback.
* After every test, any forward hook a test left on a session model is removed and reported, so
  one leaked hook cannot change the results of the tests after it. The same holds for global
  module hooks (``torch.nn.modules.module.register_module_forward_hook``), and the process-wide
  state an exercise file can change (default dtype, torch threads, grad mode, working folder,
  environment variables) is put back after every test, so one exercise cannot cost points in
  another that runs after it in the same process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from course.shared.diagnosis import diagnose
from kata.hooks import restore_hooks
from kata.process_state import process_state, restore_process_state
from course.shared.impl import import_implementation, patched_solution
from grading.views.learner_view import LearnerView
from grading.core.declarations import IMPLEMENTATIONS, exercise_for_test_file
from kata.models import GPT2_DOWNLOAD_COMMAND, SMOLLM2_FIRST_BLOCKS, gpt2_is_cached
from kata.session_models import LOADED, session_model


def pytest_addoption(parser):
    group = parser.getgroup("kata")
    group.addoption(
        "--impl",
        choices=IMPLEMENTATIONS,
        default=os.environ.get("KATA_IMPL", "exercises"),
        help="code under test: exercises (the learner's, default) or solutions (the reference); "
        "default from KATA_IMPL",
    )
    group.addoption(
        "--kata-patch",
        metavar="EXERCISE=FILE",
        action="append",
        default=[],
        help="maintainers: run EXERCISE's tests on the solution with FILE's definitions patched "
        "in (how tests/course/test_mistakes.py plants a learner mistake); once per exercise",
    )
    group.addoption(
        "--kata-remote",
        metavar="READ_FD,WRITE_FD",
        default=None,
        help="the grader: the learner's functions run in a sandbox at the other end of this "
        "channel (grading.box.remote); the tests run here. 'fork' (maintainers): the code "
        "under test runs in a process forked from this one, across the same boundary",
    )
    group.addoption(
        "--kata-full",
        action="store_true",
        help="full pytest output for tests that reach an untouched stub (learner mode shows one "
        "'not started' line per function instead)",
    )


def pytest_configure(config):
    # Several test processes on a small machine (the grader's -j N) fight over cores when each
    # runs torch with one thread per core; KATA_TORCH_THREADS=1 keeps each to one.
    if os.environ.get("KATA_TORCH_THREADS"):
        torch.set_num_threads(int(os.environ["KATA_TORCH_THREADS"]))
    impl = config.getoption("--impl")
    if impl == "exercises" and not config.getoption("--kata-full"):
        config.pluginmanager.register(
            LearnerView(config, config.rootpath / impl), "kata-learner-view"
        )
    _BASELINE.clear()
    _BASELINE.update(process_state())  # before any test file or exercise file is imported


def pytest_report_header(config):
    import transformers

    impl = config.getoption("--impl")
    return [
        f"kata: testing {impl}/ (torch {torch.__version__}, transformers {transformers.__version__})"
    ]


def pytest_ignore_collect(collection_path: Path, config):
    """The maintainers' tests (``tests/``) check the kata itself; they only run with
    ``--impl solutions``."""
    if (config.getoption("--impl") != "solutions"
            and collection_path.is_relative_to(config.rootpath / "tests")):
        return True
    return None


@pytest.fixture(scope="session")
def impl(request) -> str:
    """``"exercises"`` or ``"solutions"``: which implementation the tests check."""
    return request.config.getoption("--impl")


#: The solutions with a ``--kata-patch`` planted, made once per pytest session (per exercise and
#: file: a maintainers' session that plants one file after another gets one module per file).
_PLANTED = pytest.StashKey[dict]()


def planted_solution(config, exercise, patch_file: Path):
    """The solution with ``patch_file`` planted, one module for every test of the session, as a
    learner's module is imported once (and as the grader's boundary forks one learner process)."""
    planted = config.stash.setdefault(_PLANTED, {})
    key = (exercise.id, str(patch_file))
    if key not in planted:
        for done in [k for k in planted if k[0] == exercise.id]:
            del planted[done]  # the file planted in this exercise before is done with
        planted[key] = patched_solution(exercise, patch_file)
    return planted[key]


@pytest.fixture
def ex(request, impl):
    """The module under test for this test file's exercise, e.g. ``exercises.ex1_hidden_states``."""
    exercise = exercise_for_test_file(request.path, request.config.rootpath)
    if exercise is None:
        raise LookupError(f"{request.path.name} is not listed as any exercise's tests in the manifest")
    remote = request.config.getoption("--kata-remote")
    if remote and remote != "fork":
        from grading.box.remote import remote_exercise

        return remote_exercise(exercise, remote)
    patches = dict(p.split("=", 1) for p in request.config.getoption("--kata-patch"))
    if exercise.id in patches:
        module = planted_solution(request.config, exercise, Path(patches[exercise.id]))
    else:
        module = import_implementation(exercise, impl)
    if remote == "fork":  # maintainers: the same module, run across the grader's boundary
        from grading.box.remote import remote_exercise

        return remote_exercise(exercise, remote, module, Path(module.__file__).parent)
    return module


# --------------------------------------------------------------------------- session models


@pytest.fixture(scope="session")
def tiny_gpt2():
    """A 4-block random GPT-2 with the real GPT-2 tokenizer: ``(model, tokenizer)``."""
    return session_model("tiny-gpt2")


@pytest.fixture(scope="session")
def smollm2_first_blocks():
    """SmolLM2 cut to its first 4 blocks (trained weights, Llama architecture, final norm):
    ``(model, tokenizer)``, for tests that run the learner's code once per block."""
    return session_model(SMOLLM2_FIRST_BLOCKS)


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M, a real trained model (30 blocks, d_model 576): ``(model, tokenizer)``."""
    return session_model("smollm2")


@pytest.fixture(scope="session")
def gpt2():
    """The post's GPT-2, only where it is in the local Hugging Face cache."""
    if not gpt2_is_cached():
        pytest.skip(
            "needs GPT-2, which is not in the local Hugging Face cache (this machine cannot reach "
            f"the Hub); to run it, download GPT-2 once with network access: {GPT2_DOWNLOAD_COMMAND}"
        )
    return session_model("gpt2")


@pytest.fixture(autouse=True)
def _no_hook_survives_a_test():
    """Remove, and report, any forward hook a test left on a session model."""
    yield
    leaks = []
    for name, (model, _, clean) in LOADED.items():
        leaks += [f"{name}: {where}" for where in restore_hooks(model, clean)]
    removed = _reset_learner_process()
    if leaks:
        diagnose(
            "hook-left-on-model",
            "a forward hook was still registered on the model after this test "
            f"({', '.join(sorted(set(leaks)))}): every hook you register must be removed, "
            "with handle.remove() in a finally block. kata removed it for the next tests.",
        )
    if removed:
        _global_hook_left(removed)


def _reset_learner_process() -> list[str]:
    """Under the grader: put the sandbox's models and process state back after a test; the
    global module hooks the learner's code left on there."""
    remote = sys.modules.get("grading.box.remote")  # loaded only under the grader
    sessions = remote.active() if remote is not None else []
    return [removed for session in sessions for removed in session.reset()]


def pytest_sessionfinish(session, exitstatus):
    if "grading.box.remote" in sys.modules:
        from grading.box import remote

        remote.end_session()


def _global_hook_left(removed: list[str]) -> None:
    pytest.fail(
        "a global module hook was still registered after this test "
        f"({', '.join(sorted(set(removed)))}, from torch.nn.modules.module."
        "register_module_forward_hook or similar): it runs on every module of every model, "
        "so it changes every result after it. Register hooks on the one block you need and "
        "remove them in a finally block. kata removed it for the next tests.",
        pytrace=False,
    )


# --------------------------------------------------------------------------- process-wide state

_BASELINE: dict = {}


@pytest.fixture(autouse=True)
def _process_state_survives_no_test():
    """Restore the process-wide state after every test; report a global module hook left on."""
    if not _BASELINE:
        _BASELINE.update(process_state())
    yield
    removed = restore_process_state(_BASELINE)
    if removed:
        _global_hook_left(removed)
