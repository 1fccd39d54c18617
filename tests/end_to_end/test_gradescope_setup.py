"""Gradescope on a plain Ubuntu image, and lanes from the container's CPU quota (issue 26, item 4).

* ``setup.sh`` survives a Python without ``ensurepip`` (Debian and Ubuntu ship it apart, as
  ``python3.X-venv``): the Python is simulated by a wrapper whose ``import ensurepip`` fails until
  a stub ``apt-get`` "installs" python3.X-venv. Only the script's first part runs
  (``KATA_SETUP_PART=python``: the Python and the venv), not torch's download.
* :mod:`grading.box.cpus` reads the cgroup v2 and v1 quotas of fake cgroup trees.
* Bonus tests in ``results.json`` follow Gradescope's extra-credit convention.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grading.box import cpus

from grading.views import gradescope, reports
from grading.core.records import ExerciseResult, Outcome, Status, SubmissionResult, TestRecord
from grading.core.declarations import load_exercises


EXERCISES = load_exercises()


# --------------------------------------------------------------------------- setup.sh


def _fake_system(tmp_path: Path, apt_works: bool) -> tuple[Path, Path, dict]:
    """A PATH whose pythons lack ensurepip, and an apt-get stub that logs its calls and, when
    ``apt_works``, "installs" python3.X-venv by removing what hides ensurepip."""
    bin_dir, shadow = tmp_path / "bin", tmp_path / "no-ensurepip"
    bin_dir.mkdir()
    (shadow / "ensurepip").mkdir(parents=True)
    (shadow / "ensurepip" / "__init__.py").write_text(
        "raise ImportError('No module named ensurepip (simulated: python3.X-venv missing)')\n")
    (shadow / "ensurepip" / "__main__.py").write_text("import ensurepip\n")
    log = tmp_path / "apt.log"
    python = Path(sys.executable)
    # While python3.X-venv is "missing", imports of ensurepip fail, and so does `-m venv`
    # (Debian's message; venv runs the new environment's ensurepip without PYTHONPATH, so the
    # wrapper answers for it), unless --without-pip.
    wrapper = (f'#!/bin/sh\nif [ -d "{shadow}/ensurepip" ]; then\n'
               f'  export PYTHONPATH="{shadow}"\n'
               '  case " $* " in *" -m venv "*) case " $* " in *" --without-pip "*) ;; *)\n'
               '    echo "The virtual environment was not created successfully because '
               'ensurepip is not available." >&2; exit 1;; esac;; esac\n'
               f'fi\nexec "{python}" "$@"\n')
    for name in ("python3.13", "python3.12", "python3.11", "python3"):
        (bin_dir / name).write_text(wrapper)
        (bin_dir / name).chmod(0o755)
    install = f'rm -rf "{shadow}/ensurepip"' if apt_works else "exit 100"
    (bin_dir / "apt-get").write_text(
        f'#!/bin/sh\necho "$@" >> "{log}"\ncase "$1" in install) {install};; esac\nexit 0\n')
    (bin_dir / "apt-get").chmod(0o755)
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    (root / "source" / "setup.sh").write_text(gradescope.SETUP_SH)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "KATA_SETUP_PART": "python",
           "KATA_AUTOGRADER_ROOT": str(root), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_INDEX": "1"}
    return root, log, env


def test_the_simulated_python_really_lacks_ensurepip(tmp_path):
    root, _, env = _fake_system(tmp_path, apt_works=True)
    probe = subprocess.run(["python3.11", "-c", "import venv, ensurepip"], env=env,
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "ensurepip" in probe.stderr
    old_probe = subprocess.run(["python3.11", "-c", "import sys, venv"], env=env)
    assert old_probe.returncode == 0, "the old probe would have picked it"
    failed = subprocess.run(["python3.11", "-m", "venv", str(tmp_path / "v")], env=env,
                            capture_output=True, text=True)
    assert failed.returncode != 0, "plain -m venv fails, as on Debian without python3.X-venv"


def test_setup_sh_installs_python_venv_when_ensurepip_is_missing(tmp_path):
    root, log, env = _fake_system(tmp_path, apt_works=True)
    process = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-3000:]
    version = "%d.%d" % sys.version_info[:2]
    calls = log.read_text().splitlines()
    assert any(c.startswith("install") and f"python{version}-venv" in c for c in calls), calls
    assert (root / "venv" / "bin" / "python").exists()
    check = subprocess.run([str(root / "venv" / "bin" / "python"), "-m", "pip", "--version"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_setup_sh_leaves_apt_alone_when_ensurepip_is_there(tmp_path):
    root, log, env = _fake_system(tmp_path, apt_works=True)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH'].split(':', 1)[1]}"
    # python3.11 is now the kata's own Python (ensurepip present); the stub apt-get is gone
    process = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr[-3000:]
    assert not log.exists(), "apt-get was not needed"
    assert (root / "venv" / "bin" / "python").exists()


def test_the_bundled_setup_sh_is_the_tested_one(tmp_path):
    import zipfile

    bundle = gradescope.build_gradescope_bundle(tmp_path / "a.zip", exercises=["ex4"])
    with zipfile.ZipFile(bundle) as archive:
        assert archive.read("setup.sh").decode() == gradescope.SETUP_SH
    assert "import ensurepip" in gradescope.SETUP_SH
    assert "import sys, venv" not in gradescope.SETUP_SH


# --------------------------------------------------------------------------- CPUs


def _tree(tmp_path: Path, files: dict[str, str], proc: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    root.mkdir(parents=True, exist_ok=True)
    proc_file = root.parent / "proc-cgroup"
    proc_file.write_text(proc)
    return root, proc_file


@pytest.mark.parametrize("files, proc, expected", [
    ({"cpu.max": "max 100000"}, "0::/\n", None),
    ({"kata/cpu.max": "200000 100000"}, "0::/kata\n", 2.0),
    ({"cpu.max": "max 100000", "a/cpu.max": "400000 100000", "a/b/cpu.max": "max 100000"},
     "0::/a/b\n", 4.0),  # a parent's quota applies to its children
    ({"a/cpu.max": "150000 100000"}, "0::/a\n", 1.5),
    ({"cpu,cpuacct/x/cpu.cfs_quota_us": "300000", "cpu,cpuacct/x/cpu.cfs_period_us": "100000"},
     "4:cpu,cpuacct:/x\n", 3.0),
    ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, "1:cpu:/\n", None),
    ({"cpu.max": "garbage"}, "0::/\n", None),
])
def test_cgroup_quotas(tmp_path, files, proc, expected):
    root, proc_file = _tree(tmp_path, files, proc)
    assert cpus.cgroup_quota(root, proc_file) == expected


def test_available_cpus_takes_the_quota_not_the_hosts_cores(tmp_path):
    root, proc_file = _tree(tmp_path, {"c/cpu.max": "200000 100000"}, "0::/c\n")
    host = len(os.sched_getaffinity(0))
    assert cpus.available_cpus(root, proc_file, environ={}) == min(2, host)
    root, proc_file = _tree(tmp_path / "half", {"c/cpu.max": "50000 100000"}, "0::/c\n")
    assert cpus.available_cpus(root, proc_file, environ={}) == 1, "never below 1"
    assert cpus.available_cpus(root, proc_file, environ={"KATA_CPUS": "7"}) == 7
    root, proc_file = _tree(tmp_path / "none", {}, "")
    assert cpus.available_cpus(root, proc_file, environ={}) == host


def test_lanes_use_the_available_cpus(monkeypatch):
    from grading.box import submissions

    monkeypatch.setenv("KATA_CPUS", "6")
    assert submissions.default_lanes(1) == 6 and submissions.default_lanes(4) == 1
    monkeypatch.setenv("KATA_CPUS", "2")
    assert submissions.default_lanes(2) == 1


# --------------------------------------------------------------------------- extra credit


def test_bonus_tests_follow_the_extra_credit_convention():
    rows = []
    for exercise in EXERCISES:
        tests = [TestRecord(f"{exercise.folder}/test_public.py::test_{k}", exercise.id, f"test_{k}",
                            Outcome.PASSED if k else Outcome.FAILED, "" if k else "wrong")
                 for k in range(3)]
        rows.append(ExerciseResult(exercise, Status.IN_PROGRESS, tests, "wrong"))
    result = SubmissionResult("learner", rows)
    data = reports.gradescope_results(result)
    bonus_ids = {e.id for e in EXERCISES if e.bonus}
    assert bonus_ids, "the manifest has a bonus exercise"
    for test in data["tests"]:
        assert 0 <= test["score"] <= test["max_score"], test
        is_bonus = test["name"].split()[0] in bonus_ids
        assert ("extra credit" in test["name"]) == is_bonus
        assert (test.get("tags") == ["extra credit"]) == is_bonus
    main_max = sum(t["max_score"] for t in data["tests"] if "extra credit" not in t["name"])
    assert main_max == pytest.approx(result.max_points)
    assert data["score"] == pytest.approx(result.points)
    assert f"out of {result.max_points:g} points" in data["output"]
    assert data["extra_data"]["max_points"] == result.max_points
