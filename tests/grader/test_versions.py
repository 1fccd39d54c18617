"""Supported versions are the tested ones: pyproject's floors, CI's legs and the versions matrix
of docs/maintainers.md agree."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kata import requirements


ROOT = Path(__file__).resolve().parents[2]
#: Where the supported versions are written for maintainers (its "Supported versions" section).
MATRIX_DOCUMENT = ROOT / "docs" / "maintainers.md"


def documented_matrix() -> dict[str, tuple[str, str]]:
    """``package -> (floors leg, newest leg)`` from the versions matrix of docs/maintainers.md."""
    text = MATRIX_DOCUMENT.read_text()
    block = text.split("<!-- versions-matrix -->")[1].split("<!-- /versions-matrix -->")[0]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("package", "---"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_every_declared_floor_is_in_the_documented_matrix():
    pins = dict(pin.split("==") for pin in requirements.floor_pins())
    matrix = documented_matrix()
    documented = {name.split(" (")[0]: floor for name, (floor, _) in matrix.items()}
    documented.pop("Python")
    assert documented == pins


def test_the_documented_python_is_the_declared_minimum():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert declared == f">={documented_matrix()['Python'][0]}"


def test_ci_runs_a_newest_and_a_floors_leg():
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash run\.sh test$", ci, re.M), "the newest leg runs the README's command"
    assert re.search(r"^KATA_VENV=\S+ KATA_FLOORS=1 bash run\.sh test$", ci, re.M)


def test_the_notebook_extra_holds_the_kernel_extra_whole():
    """``bash run.sh test`` installs the kernel extra, ``bash run.sh notebook`` the notebook
    extra: what the suite tests the notebooks with is what a learner's JupyterLab runs them on."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(extras["kernel"]) <= set(extras["notebook"]), set(extras["kernel"]) - set(
        extras["notebook"])


def test_floors_are_printed_before_anything_is_installed():
    # run.sh asks for the pins with the system Python, outside any venv.
    out = subprocess.run(
        [sys.executable, "-I", str(ROOT / "kata" / "requirements.py"), "--floors"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert out == requirements.floor_pins()
    assert any(pin.startswith("transformers==") for pin in out)


def test_this_environment_is_supported():
    assert requirements.problems() == []


def test_an_unsupported_version_is_one_sentence(monkeypatch):
    real_version = requirements.metadata.version

    def fake_version(name):
        return "4.40.0" if name == "transformers" else real_version(name)

    monkeypatch.setattr(requirements.metadata, "version", fake_version)
    found = requirements.problems()
    assert found == [
        "transformers 4.40.0 is installed, but the kata needs transformers<6,>=4.57.1: "
        "pip install 'transformers<6,>=4.57.1'"
    ]
    with pytest.raises(requirements.UnsupportedVersion, match="transformers 4.40.0"):
        requirements.check()


def test_importing_kata_below_a_floor_says_so_without_a_traceback(tmp_path):
    # A sitecustomize that makes transformers look old, then a plain `import kata`.
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.metadata as m\n"
        "_real = m.version\n"
        "m.version = lambda name: '4.40.0' if name == 'transformers' else _real(name)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", "import kata"],
        capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "transformers 4.40.0 is installed, but the kata needs" in result.stderr
