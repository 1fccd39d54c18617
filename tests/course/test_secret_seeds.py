"""The secret checks pass a correct submission whatever the seed.

A secret check draws its inputs from the batch's seed (``course/shared/secret.py``), so a check that
fails a correct answer on some seeds costs a learner points for the machine's draw, in one batch
and not the next. One did: exercise 2's figure check sampled 3 layers from a stack that had 2.
A learner's own session draws a new seed each time, which finds such a check only by chance;
here every secret check runs against the solutions on each of the same :data:`SEEDS`, in this
process: one pytest session per exercise collects its checks once and runs them once per seed.
"""

from __future__ import annotations

import pytest
from _pytest.runner import runtestprotocol

from grading.box.runner import SECRET_SEED_VARIABLE
from grading.core.declarations import load_exercises
from course.shared import secret


#: Seeds every CI run checks: of these, seeds 31 and 35 drew the 2-layer stack that failed the
#: old figure check. A maintainer sweeps more with KATA_SECRET_SEED=N pytest -k secret.
SEEDS = range(1, 41)


class EverySeed:
    """A pytest plugin object that runs the session's tests once per seed, that seed the
    session's own before each pass (``course.shared.secret``: the draws are those the grader's
    ``KATA_SECRET_SEED=N`` gives), and keeps the failing runs' first lines. Each pass is a session's run: a test's own fixtures are made afresh (its ``secret``
    inputs drawn from the seed), a module's from one module to the next; the session's (the
    models) stay."""

    def __init__(self, seeds):
        self.seeds = list(seeds)
        self.failed: list[str] = []
        self.ran: dict[int, int] = {seed: 0 for seed in self.seeds}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        items = session.items
        for k, seed in enumerate(self.seeds):
            secret._SESSION_SEED = seed  # the environment is put back after every test
            after = items[0] if k + 1 < len(self.seeds) else None  # the next pass, or the end
            for i, item in enumerate(items):
                nextitem = items[i + 1] if i + 1 < len(items) else after
                for report in runtestprotocol(item, log=False, nextitem=nextitem):
                    self.ran[seed] += report.when == "call"
                    if report.failed:
                        line = str(report.longrepr).strip().splitlines()[-1]
                        self.failed.append(f"seed {seed}: {report.nodeid} ({report.when}): {line}")
        return True  # the loop is done


@pytest.mark.parametrize("exercise", load_exercises(), ids=lambda e: e.id)
def test_every_secret_check_passes_the_solutions_on_every_seed(request, monkeypatch, exercise):
    tests = [str(request.config.rootpath / exercise.tests)]
    monkeypatch.delenv(SECRET_SEED_VARIABLE, raising=False)  # else it takes the place of a pass's
    monkeypatch.setattr(secret, "_SESSION_SEED", secret._SESSION_SEED)  # put back afterwards
    plugin = EverySeed(SEEDS)
    pytest.main([*tests, "--impl", "solutions", "-m", "secret_check", "-q",
                 "-p", "no:cacheprovider", "-p", "no:unraisableexception",
                 # no secret check reads the log; capturing it visits torch's loggers each phase
                 "-p", "no:logging", "-o", "addopts="],
                plugins=[plugin])
    unran = [seed for seed, ran in plugin.ran.items() if ran == 0]
    assert not unran, f"no secret check ran on seeds {unran}"
    assert not plugin.failed, "secret checks that fail the solutions:\n" + "\n".join(plugin.failed)
