"""Seeing and undoing the hooks on a model: the one module that names torch's hook tables.

PyTorch hooks are global state on a module: a hook that is never removed keeps changing every
later forward pass. The kata's tests use :func:`hook_snapshot` to check that an exercise leaves a
model exactly as it found it, and :func:`restore_hooks` to undo a leak so one mistake cannot
spoil the tests that run after it; both sides of the grader's boundary read a module's hooks
with :func:`added_hooks` and pickle a module with :func:`without_hooks`.
"""

from __future__ import annotations

import collections
from contextlib import contextmanager

from torch import nn

# The dictionaries in which nn.Module keeps its forward hooks, keyed by the handle's id.
HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)

# The dictionaries in torch.nn.modules.module that hold hooks run on every module of every model
# (torch.nn.modules.module.register_module_forward_hook and similar).
GLOBAL_HOOK_DICTS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
    "_global_forward_hooks_always_called",
    "_global_forward_hooks_with_kwargs",
    "_global_buffer_registration_hooks",
    "_global_module_registration_hooks",
    "_global_parameter_registration_hooks",
)


def missing_hook_tables() -> list[str]:
    """The hook tables named here that this torch does not have (a rename would silently turn
    the kata's hook hygiene off; the maintainer suite fails on any)."""
    from torch.nn.modules import module as nn_module

    probe = nn.Identity()
    missing = [name for name in HOOK_DICTS if not isinstance(getattr(probe, name, None), dict)]
    return missing + [name for name in GLOBAL_HOOK_DICTS[:4]
                      if not isinstance(getattr(nn_module, name, None), dict)]


def global_hook_tables() -> dict:
    """``{name: torch's dictionary}`` for each global hook table this torch has."""
    from torch.nn.modules import module as nn_module

    return {name: getattr(nn_module, name) for name in GLOBAL_HOOK_DICTS
            if isinstance(getattr(nn_module, name, None), dict)}


HookSnapshot = dict[str, tuple[tuple[int, ...], tuple[int, ...]]]


def hook_snapshot(model: nn.Module) -> HookSnapshot:
    """Every module's forward pre-hooks and forward hooks, in the order they run.

    Returns ``{module name: (pre-hook ids, hook ids)}`` for modules that have any; two snapshots
    compare equal exactly when the same hooks are registered in the same order.
    """
    snapshot = {}
    for name, module in model.named_modules():
        pre, post = tuple(module._forward_pre_hooks), tuple(module._forward_hooks)
        if pre or post:
            snapshot[name] = (pre, post)
    return snapshot


def restore_hooks(model: nn.Module, snapshot: HookSnapshot) -> list[str]:
    """Remove every forward (pre-)hook not in ``snapshot``; return where hooks were removed."""
    removed = []
    for name, module in model.named_modules():
        keep_pre, keep_post = snapshot.get(name, ((), ()))
        keep = set(keep_pre) | set(keep_post)
        for attribute in HOOK_DICTS:
            hooks = getattr(module, attribute, None)
            if not hooks:
                continue
            for hook_id in [hook_id for hook_id in hooks if hook_id not in keep]:
                del hooks[hook_id]
                if attribute in ("_forward_hooks", "_forward_pre_hooks"):
                    removed.append(name or "<model>")
    return removed


def is_library_hook(hook) -> bool:
    """A hook transformers installs itself (to collect hidden states), not a test's or a
    learner's."""
    return str(getattr(hook, "__module__", "") or "").startswith("transformers.")


def added_hooks(module: nn.Module, clean: tuple = ((), ())) -> list[tuple[str, object, bool, bool]]:
    """``[(kind, hook, with_kwargs, always_call)]``: the forward pre-hooks (``"pre"``) and hooks
    (``"post"``) on ``module`` that are not in ``clean`` (its ``(pre ids, hook ids)`` of a
    :func:`hook_snapshot`) and not transformers' own, in the order they run."""
    keep = set(clean[0]) | set(clean[1])
    found = []
    for kind, table, with_kwargs in (
            ("pre", module._forward_pre_hooks, module._forward_pre_hooks_with_kwargs),
            ("post", module._forward_hooks, module._forward_hooks_with_kwargs)):
        for hook_id, hook in table.items():
            if hook_id not in keep and not is_library_hook(hook):
                found.append((kind, hook, hook_id in with_kwargs,
                              hook_id in getattr(module, "_forward_hooks_always_called", {})))
    return found


@contextmanager
def without_hooks(module: nn.Module):
    """``module`` and its submodules as they would load fresh, for as long as the block runs:
    no hooks, and no note from transformers that its own hooks are installed."""
    saved = []
    for sub in module.modules():
        saved.append((sub, {name: getattr(sub, name) for name in HOOK_DICTS},
                      sub.__dict__.pop("_output_capturing_hooks_installed", None)))
        for name in HOOK_DICTS:
            setattr(sub, name, collections.OrderedDict())
    try:
        yield module
    finally:
        for sub, tables, flag in saved:
            for name, table in tables.items():
                setattr(sub, name, table)
            if flag is not None:
                sub.__dict__["_output_capturing_hooks_installed"] = flag
