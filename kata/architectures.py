"""Where each model family keeps its transformer blocks and its final norm.

GPT-2, Llama-family models (SmolLM2, Llama, Mistral, Qwen ...) and GPT-NeoX (Pythia) name these
parts differently. The exercises call :func:`blocks` and :func:`final_norm` instead of spelling
out ``model.transformer.h`` or ``model.model.layers``, so the same code runs on every model.
"""

from torch import nn

# (attribute path to the blocks, attribute path to the final norm), tried in order.
_LAYOUTS = (
    ("transformer.h", "transformer.ln_f"),  # GPT-2
    ("model.layers", "model.norm"),  # Llama family: SmolLM2, Llama, Mistral, Qwen
    ("gpt_neox.layers", "gpt_neox.final_layer_norm"),  # GPT-NeoX, Pythia
)


def _find(model: nn.Module, path: str):
    obj = model
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _layout(model: nn.Module) -> tuple[str, str]:
    for blocks_path, norm_path in _LAYOUTS:
        if isinstance(_find(model, blocks_path), nn.ModuleList):
            return blocks_path, norm_path
    known = ", ".join(f"model.{b}" for b, _ in _LAYOUTS)
    raise TypeError(
        f"kata does not know where {type(model).__name__} keeps its transformer blocks "
        f"(it looked for {known}). Supported: GPT-2, Llama-family and GPT-NeoX models."
    )


def blocks(model: nn.Module) -> nn.ModuleList:
    """The model's transformer blocks, in order: ``blocks(model)[i]`` is block ``i``."""
    return _find(model, _layout(model)[0])


def final_norm(model: nn.Module) -> nn.Module:
    """The norm applied after the last block (``ln_f`` for GPT-2, ``norm`` for Llama)."""
    return _find(model, _layout(model)[1])


def context_length(model: nn.Module) -> int:
    """The longest token sequence the model accepts (1024 for GPT-2, 128 for tiny-gpt2)."""
    config = model.config
    for attribute in ("n_positions", "max_position_embeddings"):
        value = getattr(config, attribute, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"{type(model).__name__}'s config names no context length")
