"""Reads ``exercises.toml``, the one list of the kata's exercises (order, points, hints)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

MANIFEST_PATH = Path(__file__).with_name("exercises.toml")
IMPLEMENTATIONS = ("exercises", "solutions")


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    module: str
    tests: str
    points: int
    post: str
    functions: tuple[str, ...]
    hints: tuple[str, ...]
    bonus: bool = False

    @property
    def number(self) -> int:
        return int(self.id.removeprefix("ex"))

    def source(self, impl: str = "exercises") -> str:
        """The file a learner edits (or its solution): ``exercises/ex1_hidden_states.py``."""
        return f"{impl}/{self.module}.py"


def load_manifest(path: Path = MANIFEST_PATH) -> list[Exercise]:
    with open(path, "rb") as handle:
        entries = tomllib.load(handle)["exercise"]
    return [
        Exercise(**{**entry, "functions": tuple(entry["functions"]), "hints": tuple(entry["hints"])})
        for entry in entries
    ]


def exercise_for_test_file(path: str | Path, root: Path) -> Exercise | None:
    """The exercise whose tests live in ``path`` (None for tests that belong to no exercise)."""
    try:
        relative = Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # not under the kata's root
        return None
    for exercise in load_manifest():
        if exercise.tests == relative:
            return exercise
    return None


# --------------------------------------------------------------------------- the README's table

README_TABLE_START = "<!-- exercises-table: generated from kata/exercises.toml by `python -m kata.manifest` -->"
README_TABLE_END = "<!-- end exercises-table -->"


def readme_table(exercises: list[Exercise] | None = None) -> str:
    """The README's exercise table, made from the manifest."""
    rows = ["| # | exercise | you write | post | points |", "|---|---|---|---|---|"]
    for e in exercises or load_manifest():
        points = f"{e.points} (bonus)" if e.bonus else str(e.points)
        rows.append(f"| {e.number} | {e.title} (`{e.source()}`) | {len(e.functions)} function{'s' if len(e.functions) > 1 else ''} "
                    f"| {e.post} | {points} |")
    return "\n".join(rows)


def update_readme(readme: Path) -> None:
    text = readme.read_text(encoding="utf-8")
    start, end = text.index(README_TABLE_START), text.index(README_TABLE_END)
    readme.write_text(
        text[: start + len(README_TABLE_START)] + "\n" + readme_table() + "\n" + text[end:],
        encoding="utf-8",
    )


if __name__ == "__main__":  # python -m kata.manifest: rewrite the README's exercise table
    update_readme(MANIFEST_PATH.parents[1] / "README.md")
    print(readme_table())
