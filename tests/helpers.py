"""Small assertion helpers that make failure messages say what the learner probably did wrong."""

from __future__ import annotations

import torch


def check_tensor(value, name: str, hint: str = "") -> torch.Tensor:
    """Fail with a plain message unless ``value`` is a tensor (a stub or a list returned instead)."""
    assert isinstance(value, torch.Tensor), (
        f"{name} should return a torch.Tensor, got {type(value).__name__}"
        + (f": {hint}" if hint else "")
    )
    return value


def check_shape(value: torch.Tensor, expected: tuple, name: str, hint: str = "") -> None:
    """Fail unless ``value.shape == expected``; ``hint`` says what a wrong shape usually means."""
    actual = tuple(value.shape)
    assert actual == tuple(expected), (
        f"{name} has shape {actual}, expected {tuple(expected)}" + (f": {hint}" if hint else "")
    )


def check_close(actual, expected, name: str, hint: str = "", atol=1e-5, rtol=1e-4) -> None:
    """Fail unless two tensors are numerically equal, saying by how much they differ."""
    actual = torch.as_tensor(actual).detach().float().cpu()
    expected = torch.as_tensor(expected).detach().float().cpu()
    assert actual.shape == expected.shape, (
        f"{name} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
        + (f": {hint}" if hint else "")
    )
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        worst = (actual - expected).abs().max().item()
        raise AssertionError(
            f"{name} differs from the expected values (largest difference {worst:.3g})"
            + (f": {hint}" if hint else "")
        )


_REFERENCE_VALUES: dict = {}


def computed_once(key, compute):
    """``compute()``'s result, computed once per process for each ``key``.

    For expected values that tests derive from the session models (reference forward passes):
    kept across test files and across the in-process runs of the mistakes check, so each is
    computed once. Use keys like ``("kafka-scaling", model_name)``.
    """
    if key not in _REFERENCE_VALUES:
        _REFERENCE_VALUES[key] = compute()
    return _REFERENCE_VALUES[key]
