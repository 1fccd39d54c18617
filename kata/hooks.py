"""Seeing and undoing the hooks on a model.

PyTorch hooks are global state on a module: a hook that is never removed keeps changing every
later forward pass. The kata's tests use :func:`hook_snapshot` to check that an exercise leaves a
model exactly as it found it, and :func:`restore_hooks` to undo a leak so one mistake cannot
spoil the tests that run after it.
"""

from __future__ import annotations

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
