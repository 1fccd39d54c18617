"""A table made beforehand answers no secret check (issue 47, item 2).

The attack: compute nothing, and answer every call from a table of the right answers, made
beforehand by running the exercise's tests against the reference solution, public tests and
secret checks alike, on several seeds. The public tests' inputs are fixed, so the table answers
them. Every secret check draws at least one input from a space no table can hold (a model of
random sizes and weights, random token ids, a text of random words, random tensors), so on the
grader's seed the table has nothing: the functions are never confirmed, and the exercise earns 0.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

from grading.box.runner import child_environment
from grading.core.declarations import load_exercises
from grading.core.records import ExerciseResult, TestRecord
from grading.core.results import exercise_status

ROOT = Path(__file__).resolve().parents[2]
EXERCISE = load_exercises()[0]  # exercise 1, where the attack was found
TABLE_SEEDS = (11, 22)

#: How a table keys a call: every input by its content (a tensor by its bytes, a model by its
#: parameters, a tokenizer by its vocabulary), so a table made in one process answers another.
KEY = '''
import hashlib as _hashlib
from collections.abc import Mapping as _Mapping

import torch as _torch


def _key(value, digest=None):
    digest = digest or _hashlib.sha256()
    if isinstance(value, _torch.Tensor):
        digest.update(str((value.dtype, tuple(value.shape))).encode())
        digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    elif isinstance(value, _torch.nn.Module):
        for name, tensor in value.state_dict().items():
            digest.update(name.encode())
            _key(tensor, digest)
    elif hasattr(value, "get_vocab"):
        digest.update(f"tokenizer {len(value.get_vocab())}".encode())
    elif hasattr(value, "tokenizer"):  # a wrapper around a tokenizer
        _key(value.tokenizer, digest)
    elif isinstance(value, _Mapping):
        for k in sorted(value, key=str):
            digest.update(str(k).encode())
            _key(value[k], digest)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _key(item, digest)
    else:
        digest.update(repr(value).encode())
    return digest
'''

#: Planted on the solution while the table is made: every call's answer kept under its key.
RECORDER = KEY + '''
import atexit as _atexit
import os as _os
import pickle as _pickle

_TABLE = {}


def _recording(name, function):
    def recorded(*args, **kwargs):
        result = function(*args, **kwargs)
        try:
            _pickle.dumps(result)
        except Exception:  # a figure: no table holds it
            return result
        _TABLE[(name, _key([args, kwargs]).hexdigest())] = result
        return result
    return recorded


def _save():
    path = _os.environ["KATA_TABLE"]
    old = _pickle.loads(open(path, "rb").read()) if _os.path.exists(path) else {}
    open(path, "wb").write(_pickle.dumps({**old, **_TABLE}))


_atexit.register(_save)
'''

#: The attacker: computes nothing, answers from the table, and fails on anything else.
ATTACKER = '''
import pickle as _pickle

_TABLE = _pickle.loads(open({table!r}, "rb").read())


def _answering(name):
    def answer(*args, **kwargs):
        key = (name, _key([args, kwargs]).hexdigest())
        if key not in _TABLE:
            raise LookupError(f"no answer in my table for this call of {{name}}")
        return _TABLE[key]
    answer.__name__ = name
    return answer
'''


def _plant(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


#: One process, one pytest session per seed (``sys.argv[1]``: the seeds; the rest: the session's
#: arguments, ``{seed}`` in them replaced). The secret checks read the seed when they draw, so
#: each session draws its seed's inputs; each session plants a module of its own, whose table
#: is added to the file at exit.
SESSIONS = """
import os, sys, pytest
from grading.box.runner import SECRET_SEED_VARIABLE
for seed in sys.argv[1].split(","):
    os.environ[SECRET_SEED_VARIABLE] = seed
    pytest.main([a.replace("{seed}", seed) for a in sys.argv[2:]])
"""


def _run(plant: Path, seeds: int | tuple[int, ...], tmp_path: Path, record: Path | None = None,
         table: Path | None = None) -> None:
    """The exercise's tests with ``plant`` planted, one session per seed of ``seeds``, in one
    process (the imports and the models' loading are paid once)."""
    seeds = (seeds,) if isinstance(seeds, int) else seeds
    env = child_environment(ROOT)
    if table is not None:
        env["KATA_TABLE"] = str(table)
    command = [sys.executable, "-c", SESSIONS, ",".join(map(str, seeds)), EXERCISE.folder,
               "--impl", "solutions", "-q",
               "-p", "no:cacheprovider", "-p", "no:logging", f"--kata-patch={EXERCISE.id}={plant}",
               f"--basetemp={tmp_path / 'run-{seed}'}"]
    if record is not None:
        command += ["-p", "grading.core.recorder", f"--kata-record={record}"]
    subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_a_table_of_every_public_and_secret_answer_earns_nothing(tmp_path):
    table = tmp_path / "table.pickle"
    wraps = "".join(f"\n{name} = _recording({name!r}, {name})" for name in EXERCISE.functions)
    recorder = _plant(tmp_path, "recorder.py", RECORDER + wraps + "\n")
    # the public tests' inputs, and the secret checks' of two seeds
    _run(recorder, TABLE_SEEDS, tmp_path, table=table)
    answers = pickle.loads(table.read_bytes())
    assert len(answers) > 20, f"the table holds {len(answers)} answers: it was not made"

    stubs = "".join(f"\n{name} = _answering({name!r})" for name in EXERCISE.functions)
    attacker = _plant(tmp_path, "attacker.py",
                      KEY + ATTACKER.format(table=str(table)) + stubs + "\n")
    record = tmp_path / "attacker.jsonl"
    _run(attacker, 987654321, tmp_path, record=record)  # the grader's seed, not in the table
    tests = [TestRecord.validated(event) for event in map(json.loads, record.read_text().splitlines())
             if event.get("event") == "result"]
    row = ExerciseResult(EXERCISE, exercise_status(tests)[0], tests)
    public_passed = [t for t in row.tests if t.passed and not t.checks]
    assert public_passed, "the table answered no public test: the attack was not built right"
    assert row.confirmed == (), f"the table confirmed {row.confirmed}: a secret input was in it"
    assert row.points == 0.0, f"the table earned {row.points} of exercise 1's {EXERCISE.points}"
