"""Shared infrastructure for the hidden-states kata: learners use it, they never edit it.

    from kata import load_model, blocks, final_norm, PENGUIN_TEXT
    model, tokenizer = load_model("tiny-gpt2")
"""

from pathlib import Path as _Path

from kata import requirements as _requirements

try:  # first, so that an unsupported version never surfaces as a traceback from deep inside
    _requirements.check()
except _requirements.UnsupportedVersion as error:
    raise SystemExit(f"kata: {error}") from None

# What learners import from ``kata``, and the module each comes from. Each is imported when it is
# first used, so that the grader's own commands (``python grader.py status``, a Classroom step,
# the batch's orchestration) do not import torch: only the processes that run models do.
_EXPORTS = {
    "blocks": "architectures", "context_length": "architectures", "final_norm": "architectures",
    "ModelNotAvailable": "models", "default_device": "models", "load_model": "models",
    "layer_index": "validation", "one_sequence": "validation", "token_id": "validation",
    "token_index": "validation",
    **{name: "texts" for name in ("CLEAN_ANSWER", "CLEAN_PROMPT", "CORRUPTED_ANSWER",
                                  "CORRUPTED_PROMPT", "FIGURE6_TOKEN", "KAFKA_TEXT",
                                  "PENGUIN_TEXT", "TARGET_WORD", "figure6_token")},
}


def __getattr__(name: str):
    """``kata.blocks`` and the rest of :data:`__all__`, and ``kata.models`` and the other
    modules, imported on first use."""
    from importlib import import_module

    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    elif not name.startswith("_") and (_Path(__file__).parent / f"{name}.py").is_file():
        value = import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'kata' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = sorted(_EXPORTS)
