"""Shared infrastructure for the hidden-states kata: learners use it, they never edit it.

    from kata import load_model, blocks, final_norm, PENGUIN_TEXT
    model, tokenizer = load_model("tiny-gpt2")
"""

from . import requirements as _requirements

try:  # first, so that an unsupported version never surfaces as a traceback from deep inside
    _requirements.check()
except _requirements.UnsupportedVersion as error:
    raise SystemExit(f"kata: {error}") from None

from .architectures import blocks, context_length, final_norm
from .models import ModelNotAvailable, default_device, load_model
from .texts import (CLEAN_ANSWER, CLEAN_PROMPT, CORRUPTED_ANSWER, CORRUPTED_PROMPT,
                    FIGURE6_TOKEN, KAFKA_TEXT, PENGUIN_TEXT, TARGET_WORD, figure6_token)
from .validation import layer_index, one_sequence, token_id, token_index

__all__ = [
    "CLEAN_ANSWER",
    "CLEAN_PROMPT",
    "CORRUPTED_ANSWER",
    "CORRUPTED_PROMPT",
    "FIGURE6_TOKEN",
    "KAFKA_TEXT",
    "PENGUIN_TEXT",
    "TARGET_WORD",
    "ModelNotAvailable",
    "blocks",
    "context_length",
    "default_device",
    "figure6_token",
    "final_norm",
    "layer_index",
    "load_model",
    "one_sequence",
    "token_id",
    "token_index",
]
