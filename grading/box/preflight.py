"""Telling environment faults from learner mistakes: checks before grading, and the canary.

:func:`preflight` runs before a batch and before a learner's grading. Each problem it finds is
a sentence naming what to change (``KATA_DEVICE``, ``KATA_MODEL``, ``KATA_CACHE``):

* the device the tests would run on works (a tensor goes there and back);
* the converted SmolLM2 matches the checksums written when it was converted (a corrupt copy is
  converted again when the cache is writable, else the message says what to delete);
* the cache folder is writable when a conversion is still needed;
* ``KATA_MODEL``, when set, names a model the kata can load here.

:func:`canary` grades the reference solutions once, in the sandbox, before a batch: anything
less than full marks means this machine cannot grade fairly, and the batch stops before any
student is graded. A fault after the start (a test that meets
:class:`kata.models.EnvironmentFault`) gives the exercise the status "environment error".
"""

from __future__ import annotations

import os
from pathlib import Path


def _writable(folder: Path) -> bool:
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK)


def check_device() -> str | None:
    import torch

    from kata.models import default_device

    wanted = os.environ.get("KATA_DEVICE")
    try:
        device = default_device()
        value = (torch.ones(2, device=device) * 2).sum().item()
        if value != 4.0:
            raise RuntimeError(f"2 + 2 gave {value}")
    except Exception as error:  # noqa: BLE001 - any failure means the device does not work
        setting = f"KATA_DEVICE={wanted}" if wanted else "the default device"
        return (f"{setting} does not work on this machine ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}); "
                "set KATA_DEVICE=cpu or unset it")
    return None


def check_model_cache(quick: bool = False) -> str | None:
    from kata.models import (ModelNotAvailable, ModelCacheCorrupt, cache_dir,
                             check_smollm2_cache, smollm2_cache_path, smollm2_gguf_path)

    target = smollm2_cache_path()
    if not target.is_dir():
        try:
            smollm2_gguf_path()
        except ModelNotAvailable as error:
            return str(error)
        if not _writable(target.parent):
            return (f"SmolLM2 must be converted once, but the cache folder {cache_dir()} is not "
                    "writable: set KATA_CACHE to a writable folder")
        return None
    try:
        check_smollm2_cache(repair=True, quick=quick)
    except ModelCacheCorrupt as error:
        return str(error)
    except OSError as error:
        return f"the model cache {target} could not be checked or repaired: {error}"
    return None


def check_kata_model() -> str | None:
    name = os.environ.get("KATA_MODEL")
    if not name or name in ("auto", "tiny-gpt2", "smollm2"):
        return None  # smollm2 is checked with the cache
    from kata.models import GPT2_DOWNLOAD_COMMAND, GPT2_HUB_IDS, gpt2_is_cached

    if name in GPT2_HUB_IDS:
        if gpt2_is_cached():
            return None
        return (f"KATA_MODEL={name} names GPT-2, which is not in the local Hugging Face cache: "
                f"download it once with network access ({GPT2_DOWNLOAD_COMMAND}) or unset "
                "KATA_MODEL")
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(name, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - whatever transformers raises
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return (f"KATA_MODEL={name!r} does not name a model the kata can load here ({first[:200]}); "
                "use auto, smollm2, tiny-gpt2, gpt2 (if cached) or a local model folder")
    return None


def preflight(quick: bool = False) -> list[str]:
    """Every environment problem found (empty: the machine can grade)."""
    problems = [check_device(), check_kata_model(), check_model_cache(quick)]
    return [p for p in problems if p]


def canary(root: Path, exercises, options) -> tuple[bool, str]:
    """Grade the reference solutions of ``root`` like a submission (in the sandbox when
    ``options`` say so). Returns ``(True, summary)`` at full marks, else ``(False, why)``."""
    import tempfile

    from grading.box.submissions import grade_submission
    from grading.core.synthetic import make_submission

    missing = [e.source("solutions") for e in exercises
               if not (Path(root) / e.source("solutions")).is_file()]
    if missing:
        return False, f"the canary grades the solutions, and {missing[0]} does not exist here"
    with tempfile.TemporaryDirectory(prefix="kata-canary-") as folder:
        os.chmod(folder, 0o755)
        solutions = make_submission(Path(root), Path(folder) / "solutions", {}, exercises)
        result = grade_submission(solutions, "canary (reference solutions)", Path(root),
                                  exercises, options)
    bad = [r for r in result.exercises if not r.done]
    if not bad:
        return True, f"the reference solutions scored full marks in {result.seconds:.0f} s"
    lines = [f"{r.exercise.id} {r.status}: {(r.message or '').splitlines()[0][:300] if r.message else ''}"
             for r in bad]
    return False, ("the reference solutions do not get full marks on this machine, so no "
                   "submission can be graded fairly:\n  " + "\n  ".join(lines))
