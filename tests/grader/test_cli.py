"""grader.py's subcommands, its answers to bad input, and the rule that it is the kata's one
command line: no module but the processes the grader starts itself parses arguments of its own,
and no old command form is left."""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grading.core import synthetic
from grading.core.stubs import stub_text
from grading.views import cli, learner
from grading.core.declarations import load_exercises
from tests.grader.test_grader import build_toy_kata


REPO = Path(__file__).resolve().parents[2]
EXERCISES = load_exercises()
FIRST = EXERCISES[0]


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return build_toy_kata(tmp_path_factory.mktemp("cli") / "kata")


@pytest.fixture
def kata_copy(tmp_path) -> Path:
    """The real stubs and course (enough for hint and reset), in a folder of their own."""
    for folder in ("exercises", "course"):
        shutil.copytree(REPO / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", ".backup"))
    return tmp_path


# --------------------------------------------------------------------------- the arguments


@pytest.mark.parametrize("argv, new", [
    ([], ["status"]),
    (["--impl", "solutions"], ["status", "--impl", "solutions"]),
    (["hint", "1"], ["hint", "1"]),
    (["watch", "--warm"], ["watch", "--warm"]),
])
def test_no_command_means_status(argv, new):
    assert cli.normalise(argv) == new


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("argv, words", [
    (["hint", "99"], "grader.py hint: error: no exercise '99'"),
    (["hint", "1", "no_such_function"], "has no function 'no_such_function'"),
    (["reset", "99", "--yes"], "grader.py reset: error: no exercise '99'"),
    (["reset"], "the following arguments are required: N"),
    (["figures"], "the following arguments are required: DIR"),
    (["batch"], "the following arguments are required: SUBMISSION"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["status", "--bogus"], "unrecognized arguments: --bogus"),
    (["hint", "1", "--impl", "mine"], "invalid choice: 'mine'"),
    (["batch", "x", "-j", "two"], "invalid int value: 'two'"),
    (["--warm"], "--warm goes with `grader.py watch`"),
    (["--hint", "1"], "unrecognized arguments: --hint"),
    (["stubs"], "invalid choice: 'stubs'"),
])
def test_bad_input_gets_one_clear_line_and_status_2(argv, words, kata_copy, capsys):
    with_exit = None
    try:
        code = cli.main(argv, root=kata_copy)
    except SystemExit as exit_:  # argparse's own exit
        code, with_exit = exit_.code, True
    out, err = capsys.readouterr()
    assert code == 2, (with_exit, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and words in lines[0] and "error" in lines[0], err
    assert "Traceback" not in out + err


def test_figures_refuses_a_file_for_a_folder(kata_copy, capsys):
    (kata_copy / "afile").write_text("")
    assert cli.main(["figures", str(kata_copy / "afile")], root=kata_copy) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


# --------------------------------------------------------------------------- hint


def test_hint_helps_the_first_failing_function_one_level_at_a_time(kata_copy, capsys):
    first = FIRST.functions[0]  # on the untouched stubs, the first function still a stub
    for level in (1, 2):
        assert cli.main(["hint", "1"], root=kata_copy) == 0
        out = capsys.readouterr().out
        assert f"{first}() hint {level} of" in out
        assert FIRST.hints_for(first)[level - 1] in out
    other = FIRST.functions[2]
    assert cli.main(["hint", FIRST.id, other], root=kata_copy) == 0
    assert f"{other}() hint 1 of" in capsys.readouterr().out
    assert learner.hint_levels(kata_copy) == {FIRST.id: {first: 2, other: 1}}
    state = learner.HintState.load(kata_copy)  # as `grader.py status` leaves it
    state.first_failing[FIRST.id] = FIRST.functions[3]
    state.save(kata_copy)
    assert cli.main(["hint", "1"], root=kata_copy) == 0
    assert f"{FIRST.functions[3]}() hint 1 of" in capsys.readouterr().out


def test_hint_moves_on_to_the_first_function_still_a_stub(kata_copy, capsys):
    path = kata_copy / FIRST.source()
    source = path.read_text().replace(
        "    raise NotImplementedError", "    return None  # written", 1)
    path.write_text(source)
    assert cli.main(["hint", "1"], root=kata_copy) == 0
    assert f"{FIRST.functions[1]}() hint 1 of" in capsys.readouterr().out


# --------------------------------------------------------------------------- reset


def test_reset_with_yes_restores_the_stub_keeps_a_backup_and_resets_hints(kata_copy, capsys):
    path = kata_copy / FIRST.source()
    mine = path.read_text() + "\n# my work\n"
    path.write_text(mine)
    cli.main(["hint", "1"], root=kata_copy)
    assert learner.hint_levels(kata_copy)[FIRST.id]
    capsys.readouterr()
    assert cli.main(["reset", "1", "--yes"], root=kata_copy) == 0
    out = capsys.readouterr().out
    assert path.read_text() == stub_text(FIRST, kata_copy)
    assert path.read_text() == (REPO / FIRST.source()).read_text()
    (backup,) = (kata_copy / "exercises" / ".backup").iterdir()
    assert backup.read_text() == mine and backup.name.startswith(FIRST.module)
    assert f"Restored {FIRST.source()}" in out and ".backup" in out
    assert FIRST.id not in learner.hint_levels(kata_copy)
    assert cli.main(["reset", "1", "--yes"], root=kata_copy) == 0  # untouched: nothing to keep
    assert "untouched" in capsys.readouterr().out
    assert len(list((kata_copy / "exercises" / ".backup").iterdir())) == 1


@pytest.mark.parametrize("answer, restored", [("y", True), ("n", False), ("", False),
                                              (EOFError, False)])
def test_reset_asks_first_without_yes(kata_copy, monkeypatch, capsys, answer, restored):
    path = kata_copy / FIRST.source()
    path.write_text("# my work\n")

    def fake_input(question):
        assert "Replace" in question and "[y/N]" in question
        if answer is EOFError:
            raise EOFError
        return answer

    monkeypatch.setattr("builtins.input", fake_input)
    code = cli.main(["reset", "1"], root=kata_copy)
    assert (code, path.read_text() != "# my work\n") == ((0, True) if restored else (1, False))


def test_reset_without_the_solution_says_so(kata_copy, capsys):
    (kata_copy / FIRST.source("solutions")).unlink()
    assert cli.main(["reset", "1", "--yes"], root=kata_copy) == 2
    assert "is missing" in capsys.readouterr().err


# --------------------------------------------------------------------------- status, watch, batch


def test_status_is_the_default_and_remembers_the_first_failing_function(toy, capsys):
    assert cli.main([], root=toy) == 1  # the toy's untouched stubs
    out = capsys.readouterr().out
    assert "not started" in out and f"Next: {FIRST.id}" in out
    assert learner.HintState.load(toy).first_failing[FIRST.id] == FIRST.functions[0]
    assert cli.main(["status", "--impl", "solutions"], root=toy) == 0
    assert "All exercises are done" in capsys.readouterr().out


def test_watch_grades_through_the_watcher(toy, monkeypatch):
    calls = []
    monkeypatch.setattr(learner, "watch", lambda root, exercises, impl, grade:
                        calls.append(("cold", impl, grade(exercises))) or 0)
    import grading.views.warm as warm

    monkeypatch.setattr(warm, "watch", lambda root, exercises, impl: calls.append(("warm", impl)) or 0)
    assert cli.main(["watch", "--impl", "solutions"], root=toy) == 0
    assert cli.main(["watch", "--warm"], root=toy) == 0
    assert calls == [("cold", "solutions", 0), ("warm", "exercises")]


def test_batch_grades_a_submission_and_writes_the_json(toy, tmp_path, capsys):
    submission = tmp_path / "alice"
    synthetic.make_submission(toy, submission, {}, EXERCISES)
    out = tmp_path / "grades.json"
    assert cli.main(["batch", str(submission), "--json", str(out), "--timeout", "60"],
                    root=toy) == 0
    data = json.loads(out.read_text())
    assert [s["name"] for s in data["submissions"]] == ["alice"]
    assert data["submissions"][0]["all_done"]
    assert "alice" in capsys.readouterr().out


# --------------------------------------------------------------------------- one command line

#: The modules that parse arguments of their own, and why. Every other command is a subcommand
#: of grading/views/cli.py, parsed there once.
OWN_PARSE_ALLOWED = {
    "grading/views/cli.py": "the one command line itself",
    "grading/box/worker.py": "the trusted warm worker: the grader's runner starts it",
    "kata/serve/server.py": "the learner's side: the grader starts it in the sandbox, which "
                            "must not import grading",
    "kata/serve/zygote.py": "the learners' warm parent: the grader starts it in a sandbox, "
                            "which must not import grading",
    "grading/views/figures.py": "the figures child: `grader.py figures` starts it",
    "kata/requirements.py": "run.sh runs it with the system Python before anything is installed",
}
#: The modules the grader itself starts with ``python -m``: the only ones a command may name.
INTERNAL_ENTRY_POINTS = {"grading.box.worker", "kata.serve.server", "kata.serve.zygote",
                         "grading.views.figures"}
PARSING_MODULES = {"argparse", "optparse", "getopt"}


def _dotted(node) -> str:
    """``sys.exit`` for the expression ``sys.exit``; '' for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _main_blocks(tree: ast.Module) -> list[ast.If]:
    return [node for node in tree.body if isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare) and _dotted(node.test.left) == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__"
                    for c in node.test.comparators)]


def own_parsing(source: str) -> list[str]:
    """What in ``source`` reads a command line of its own: a parsing library, ``sys.argv``, or
    a ``__main__`` block at all."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _dotted(node) == "sys.argv":
            found.append(f"reads sys.argv (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and node.module == "sys" \
                and any(alias.name == "argv" for alias in node.names):
            found.append(f"imports sys.argv (line {node.lineno})")
        imported = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"imports {name} (line {node.lineno})" for name in imported
                  if name.split(".")[0] in PARSING_MODULES]
    found += [f"has a __main__ block (line {block.lineno})" for block in _main_blocks(tree)]
    return found


def _modules() -> list[str]:
    """Every module of the learner kit, the course's shared code and the grader."""
    return [path.relative_to(REPO).as_posix() for folder in ("kata", "grading", "course/shared")
            for path in sorted((REPO / folder).rglob("*.py"))]


def test_no_module_parses_a_command_line_of_its_own():
    offenders = {}
    for relative in _modules():
        if relative not in OWN_PARSE_ALLOWED:
            found = own_parsing((REPO / relative).read_text(encoding="utf-8"))
            if found:
                offenders[relative] = found
    assert not offenders, "\n".join(
        f"{relative} parses a command line of its own ({'; '.join(found)}): make it a "
        "subcommand in grading/views/cli.py" for relative, found in offenders.items())


def test_the_allowed_entry_points_exist_are_thin_and_say_why():
    for relative in OWN_PARSE_ALLOWED:
        source = (REPO / relative).read_text(encoding="utf-8")
        assert own_parsing(source), f"{relative}: nothing to allow"
        for block in _main_blocks(ast.parse(source)):
            assert block.end_lineno - block.lineno <= 2, f"{relative}: its __main__ is not thin"
        if relative == "grading/views/cli.py":
            continue
        docstring = ast.get_docstring(ast.parse(source)) or ""
        assert re.search(r"its own (few )?arguments|command line of its own", docstring), \
            f"{relative}'s docstring should say in one sentence why it parses its own arguments"


@pytest.mark.parametrize("source, words", [
    ("import argparse\n", "imports argparse"),
    ("from argparse import ArgumentParser\n", "imports argparse"),
    ("import sys\nn = len(sys.argv)\n", "reads sys.argv"),
    ("from sys import argv\n", "imports sys.argv"),
    ("import sys\nif __name__ == '__main__':\n    print(1)\n", "has a __main__ block"),
])
def test_own_parsing_names_what_it_found(source, words):
    found = own_parsing(source)
    assert found and words in "; ".join(found), found


def test_no_old_command_form_is_left():
    """The deprecation has run its course: no shim, no alias, no translation of old flags."""
    for relative in _modules() + ["grader.py"]:
        source = (REPO / relative).read_text(encoding="utf-8")
        for word in ("run_old_form", "translate_legacy", "OLD_FORMS", "LEGACY"):
            assert word not in source, f"{relative} still holds {word}"


def test_help_lists_every_command_by_who_types_it(capsys):
    assert set(cli.COMMANDS) == set(cli.HANDLERS), "GROUPS and HANDLERS name the same commands"
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subparsers.choices) == set(cli.COMMANDS)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith("usage: grader.py [COMMAND]")
    for group, names in cli.GROUPS.items():
        assert f"\n{group}:\n" in out
        for name in names:
            assert re.search(rf"^  {re.escape(name)} +\S", out, re.M), name
    assert max(map(len, out.splitlines())) <= 100
    for name in cli.COMMANDS:
        with pytest.raises(SystemExit) as exit_:
            cli.main([name, "--help"])
        assert exit_.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: grader.py {name} "), name


def _texts_that_name_commands() -> dict[str, str]:
    """Every text that prints, documents or generates a command: the README, the scripts, the
    kata's sources, notebooks, stubs and tests, and what the Classroom and Gradescope
    generators write."""
    from grading.views import classroom, gradescope

    patterns = ("kata/**/*.py", "grading/**/*.py", "course/**/*.py", "course/**/*.toml",
                "notebooks/*.ipynb", "exercises/*.py", "tests/**/*.py", "benchmarks/*.py",
                "README.md", "docs/*.md", "run.sh", ".ci/run", "grader.py", "pyproject.toml")
    texts = {path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
             for pattern in patterns for path in sorted(REPO.glob(pattern))}
    texts["generated Classroom workflow"] = classroom.workflow_yaml(EXERCISES)
    texts["generated Classroom README"] = classroom.learner_readme(EXERCISES)
    texts["generated Gradescope setup.sh"] = gradescope.SETUP_SH
    texts["generated Gradescope run_autograder"] = gradescope.RUN_AUTOGRADER
    return texts


def test_every_command_the_kata_names_is_one_the_command_line_has():
    wrong = []
    for name, text in _texts_that_name_commands().items():
        for paragraph in re.split(r"\n\s*\n", text):
            for match in re.finditer(r"grader\.py ([a-z][a-z-]*)|grader_command\(f?[\"']([a-z][a-z-]*)",
                                     paragraph):
                command = match.group(1) or match.group(2)
                if command not in cli.COMMANDS:
                    wrong.append(f"{name}: `grader.py {command}` is no command")
            for match in re.finditer(r"""-m[\s"',]+((?:kata|grading|course)(?:\.\w+)+)""",
                                     paragraph):
                if match.group(1) not in INTERNAL_ENTRY_POINTS:
                    wrong.append(f"{name}: `python -m {match.group(1)}` is no command; name "
                                 "its `python grader.py` subcommand")
    assert not wrong, "\n".join(wrong)
