"""The versions the kata supports, read from its one declaration (``pyproject.toml``), and the check
that an environment meets them.

``pyproject.toml`` declares a floor for every direct dependency; CI's floors leg installs exactly
those floors (``python kata/requirements.py --floors`` prints them as pins, with the standard
library only, so set-up can ask before anything is installed) and its newest leg the
newest releases, so the declared ranges are the tested ones. Importing ``kata`` below a floor stops
with one sentence naming the package, the version found, the version needed and the install
command, instead of a traceback from deep inside a model conversion::

    python kata/requirements.py            # check this environment
    python kata/requirements.py --floors  # 'transformers==4.57' ... one pin per line
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--floors"]:
        print("\n".join(floor_pins()))
        return 0
    if args:
        print("usage: python kata/requirements.py [--floors]", file=sys.stderr)
        return 2
    found = problems()
    for sentence in found:
        print(sentence, file=sys.stderr)
    if not found:
        print("kata: every dependency is within its declared range")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
