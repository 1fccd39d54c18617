"""grader.py's subcommands, the old flags that stay as aliases, and its answers to bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kata import stubs
from kata.grading import cli, learner
from kata.manifest import load_manifest
from tests.maintainer.test_grader import build_toy_kata

pytestmark = pytest.mark.maintainer

REPO = Path(__file__).resolve().parents[2]
EXERCISES = load_manifest()
FIRST = EXERCISES[0]


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return build_toy_kata(tmp_path_factory.mktemp("cli") / "kata")


@pytest.fixture
def kata_copy(tmp_path) -> Path:
    """The real stubs and solutions (enough for hint and reset), in a folder of their own."""
    for folder in ("exercises", "solutions"):
        shutil.copytree(REPO / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", ".backup"))
    return tmp_path


# --------------------------------------------------------------------------- the old flags


@pytest.mark.parametrize("old, new", [
    ([], ["status"]),
    (["--impl", "solutions"], ["status", "--impl", "solutions"]),
    (["--hint", "2"], ["hint", "2"]),
    (["--hint=2", "--impl", "solutions"], ["hint", "2", "--impl", "solutions"]),
    (["--watch"], ["watch"]),
    (["--watch", "--warm"], ["watch", "--warm"]),
    (["--figures", "figs", "--model", "tiny-gpt2"], ["figures", "figs", "--model", "tiny-gpt2"]),
    (["-j", "2", "--submissions", "a", "b", "--csv", "g.csv"],
     ["batch", "a", "b", "-j", "2", "--csv", "g.csv"]),
    (["hint", "1"], ["hint", "1"]),
])
def test_old_flags_become_subcommands_with_a_notice(old, new):
    argv, notices = cli.normalise(old)
    assert argv == new
    legacy = any(a.split("=")[0] in cli.LEGACY for a in old)
    assert len(notices) == (1 if legacy else 0)
    if legacy:
        assert "deprecated" in notices[0] and f"python grader.py {new[0]}" in notices[0]
        assert "\n" not in notices[0]


def test_an_old_flag_still_works_and_says_what_replaces_it(kata_copy, capsys):
    assert cli.main(["--hint", "1"], root=kata_copy) == 0
    out, err = capsys.readouterr()
    assert FIRST.hints_for(FIRST.functions[0])[0] in out
    assert err.strip() == "grader.py: --hint is deprecated and will go; use `python grader.py hint 1`"


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
    (["--hint"], "--hint needs a value"),
    (["--hint", "1", "--watch"], "cannot be combined"),
])
def test_bad_input_gets_one_clear_line_and_status_2(argv, words, kata_copy, capsys):
    with_exit = None
    try:
        code = cli.main(argv, root=kata_copy)
    except SystemExit as exit_:  # argparse's own exit
        code, with_exit = exit_.code, True
    out, err = capsys.readouterr()
    assert code == 2, (with_exit, out, err)
    lines = [line for line in err.splitlines() if "deprecated" not in line]
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
    assert path.read_text() == stubs.generate(kata_copy / FIRST.source("solutions"), kata_copy)
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


def test_watch_grades_through_the_watcher(toy, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(learner, "watch", lambda root, exercises, impl, grade:
                        calls.append(("cold", impl, grade())) or 0)
    import kata.grading.warm as warm

    monkeypatch.setattr(warm, "watch", lambda root, exercises, impl: calls.append(("warm", impl)) or 0)
    assert cli.main(["watch", "--impl", "solutions"], root=toy) == 0
    assert cli.main(["watch", "--warm"], root=toy) == 0
    assert cli.main(["--watch", "--warm"], root=toy) == 0
    assert calls == [("cold", "solutions", 0), ("warm", "exercises"), ("warm", "exercises")]
    assert "--watch is deprecated" in capsys.readouterr().err


def test_batch_grades_a_submission_and_writes_the_json(toy, tmp_path, capsys):
    submission = tmp_path / "alice"
    shutil.copytree(toy / "solutions", submission / "exercises")
    out = tmp_path / "grades.json"
    assert cli.main(["batch", str(submission), "--json", str(out), "--timeout", "60"],
                    root=toy) == 0
    data = json.loads(out.read_text())
    assert [s["name"] for s in data["submissions"]] == ["alice"]
    assert data["submissions"][0]["all_done"]
    assert "alice" in capsys.readouterr().out


def test_figures_draws_with_the_solutions(tmp_path, capsys):
    from kata.grading.figures import planned_figures

    out = tmp_path / "figs"
    code = cli.main(["figures", str(out), "--impl", "solutions", "--model", "tiny-gpt2"],
                    root=REPO)
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(f.file for _, f in planned_figures())
