"""The process-wide state an exercise file can change, and how to put it back.

Default dtype, torch threads, grad mode, working folder, environment variables and torch's global
module hooks: one exercise that changes any of them must not cost points in another that runs
after it in the same process. The kata's pytest plugin restores them after every test, and so
does the grader's learner-side server (:mod:`kata.serve.server`) between two tests.
"""

from __future__ import annotations

import os

import torch

from kata.hooks import GLOBAL_HOOK_DICTS, global_hook_tables


def _environ() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def process_state() -> dict:
    """What :func:`restore_process_state` puts back."""
    return {"dtype": torch.get_default_dtype(), "threads": torch.get_num_threads(),
            "grad": torch.is_grad_enabled(), "cwd": os.getcwd(), "environ": _environ(),
            "hooks": {name: set(table) for name, table in global_hook_tables().items() if table}}


def restore_process_state(baseline: dict) -> list[str]:
    """Put the process-wide state back; return the global hooks that had to be removed."""
    torch.set_default_dtype(baseline["dtype"])
    if torch.get_num_threads() != baseline["threads"]:
        torch.set_num_threads(baseline["threads"])
    torch.set_grad_enabled(baseline["grad"])
    try:
        if os.getcwd() != baseline["cwd"]:
            os.chdir(baseline["cwd"])
    except OSError:
        os.chdir(baseline["cwd"])
    if _environ() != baseline["environ"]:
        current = os.environ.get("PYTEST_CURRENT_TEST")
        os.environ.clear()
        os.environ.update(baseline["environ"])
        if current is not None:
            os.environ["PYTEST_CURRENT_TEST"] = current
    removed = []
    for name, hooks in global_hook_tables().items():
        if not hooks:
            continue
        keep = baseline["hooks"].get(name, set())
        for key in [k for k in hooks if k not in keep]:
            del hooks[key]
            removed.append(name.removeprefix("_global_").replace("_", " "))
    return removed


__all__ = ["GLOBAL_HOOK_DICTS", "process_state", "restore_process_state"]
